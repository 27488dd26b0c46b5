//! `surge mount` / `surge umount`: FUSE mounts of an instance, served by detached `surge-fuse`
//! daemons. Mounts are recorded beside the instance descriptor (`NAME.mounts`) so that
//! `surge down` can unmount them first, also when a server died.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use surge_client::descriptor;

const MOUNT_TIMEOUT: Duration = Duration::from_secs(15);

/// Is `dir` a mount point of a Surge FUSE file system right now?
pub fn is_mounted(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let dir = dir.to_string_lossy();
    info.lines().any(|line| {
        // "id parent dev root MOUNTPOINT options ... - FSTYPE SOURCE superoptions"
        let fields: Vec<&str> = line.split(' ').collect();
        let mut after_separator = fields.iter().skip_while(|f| **f != "-").skip(1);
        let (fstype, source) = (after_separator.next(), after_separator.next());
        fields.get(4) == Some(&dir.as_ref())
            && fstype.is_some_and(|t| t.starts_with("fuse"))
            && source.is_some_and(|s| s.starts_with("surge:"))
    })
}

pub async fn mount(name: &str, dir: &Path, node: Option<std::net::IpAddr>) -> Result<PathBuf> {
    surge_client::InstanceDescriptor::load(name)?;
    std::fs::create_dir_all(dir).with_context(|| format!("create mount point {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    if is_mounted(&dir) {
        bail!("{} is already a Surge mount", dir.display());
    }
    let log_path = descriptor::instances_dir().join(format!("{name}.fuse.log"));
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    let mut cmd = Command::new(crate::instance::sibling_binary("surge-fuse"));
    cmd.arg(name).arg(&dir);
    if let Some(ip) = node {
        cmd.arg("--node").arg(ip.to_string());
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
    crate::instance::detach(&mut cmd);
    let mut child = cmd.spawn().context("start surge-fuse")?;
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while !is_mounted(&dir) {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("surge-fuse exited with {status} before mounting: {}", log.lines().last().unwrap_or(""));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{} not mounted after {MOUNT_TIMEOUT:?}", dir.display());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut mounts = descriptor::recorded_mounts(name);
    mounts.push(dir.clone());
    descriptor::record_mounts(name, &mounts)?;
    Ok(dir)
}

/// Unmounts `dir`: normally, or lazily when it is busy or its daemon is gone.
pub fn umount(dir: &Path) -> Result<()> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    if is_mounted(&dir) {
        let plain = Command::new("fusermount3").arg("-u").arg(&dir).stderr(Stdio::null()).status();
        if !plain.is_ok_and(|s| s.success()) {
            let lazy = Command::new("fusermount3").arg("-uz").arg(&dir).status().context("run fusermount3")?;
            if !lazy.success() {
                bail!("could not unmount {}", dir.display());
            }
        }
    }
    // Forget it in whichever instance recorded it.
    for (name, mount) in descriptor::all_recorded_mounts() {
        if mount == dir {
            let rest: Vec<PathBuf> = descriptor::recorded_mounts(&name).into_iter().filter(|m| *m != dir).collect();
            descriptor::record_mounts(&name, &rest)?;
        }
    }
    Ok(())
}

/// Unmounts everything recorded for the instance (before its servers stop).
pub fn umount_all(name: &str) {
    for dir in descriptor::recorded_mounts(name) {
        if let Err(e) = umount(&dir) {
            eprintln!("warning: {e:#}");
        }
    }
    let _ = std::fs::remove_file(descriptor::mounts_file(name));
}
