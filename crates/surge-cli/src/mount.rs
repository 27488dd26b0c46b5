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

/// Checks (and if need be makes) the mount point: an empty directory, or a new one whose
/// parent exists. A non-empty directory would have its files hidden under the mount.
fn mount_point(dir: &Path) -> Result<PathBuf> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => bail!("{} is not a directory: mount on an empty directory", dir.display()),
        Ok(_) => {
            let dir = dir.canonicalize()?;
            if is_mounted(&dir) {
                bail!("{} is already a Surge mount", dir.display());
            }
            if std::fs::read_dir(&dir)?.next().is_some() {
                bail!("{} is not empty: its files would be hidden under the mount; mount on an empty directory", dir.display());
            }
            Ok(dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                bail!("{} does not exist: create it (an empty directory) first", parent.display());
            }
            std::fs::create_dir(dir).with_context(|| format!("create mount point {}", dir.display()))?;
            Ok(dir.canonicalize()?)
        }
        Err(e) => Err(e).with_context(|| format!("mount point {}", dir.display())),
    }
}

/// How a mount is made besides where: this node's address and the mount's flags.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MountChoices {
    pub node: Option<std::net::IpAddr>,
    pub read_only: bool,
    pub no_exec: bool,
}

pub async fn mount(name: &str, dir: &Path, choices: &MountChoices) -> Result<PathBuf> {
    surge_client::InstanceDescriptor::load(name)?;
    let dir = mount_point(dir)?;
    let log_path = descriptor::instances_dir().join(format!("{name}.fuse.log"));
    let mut cmd = Command::new(crate::instance::sibling_binary("surge-fuse"));
    cmd.arg(name).arg(&dir);
    if let Some(ip) = choices.node {
        cmd.arg("--node").arg(ip.to_string());
    }
    if choices.read_only {
        cmd.arg("--read-only");
    }
    if choices.no_exec {
        cmd.arg("--no-exec");
    }
    start_mount_daemon(cmd, &dir, &log_path).await?;
    // Once: a record left by a mount that umount(8) took away (not `surge umount`) names
    // the same directory.
    let mut mounts = descriptor::recorded_mounts(name);
    mounts.retain(|m| *m != dir);
    mounts.push(dir.clone());
    descriptor::record_mounts(name, &mounts)?;
    Ok(dir)
}

/// Starts a `surge-fuse` command detached, its output to `log_path`, and waits until `dir` is
/// a Surge mount (or the daemon exits, saying why).
pub async fn start_mount_daemon(mut cmd: Command, dir: &Path, log_path: &Path) -> Result<()> {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log_path)?;
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
    crate::instance::detach(&mut cmd);
    let mut child = cmd.spawn().context("start surge-fuse")?;
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while !is_mounted(dir) {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(log_path).unwrap_or_default();
            bail!("surge-fuse exited with {status} before mounting: {}", log.lines().last().unwrap_or(""));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{} not mounted after {MOUNT_TIMEOUT:?}", dir.display());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if let Err(e) = answering(dir, None).await {
        let _ = child.kill();
        let _ = Command::new("fusermount3").args(["-u", "-z"]).arg(dir).status();
        return Err(e);
    }
    Ok(())
}

/// Waits (at most `MOUNT_TIMEOUT`) until the new mount at `dir` answers with its root's real
/// attributes (`settle_root`). The stat runs on a thread of its own: a mount that never
/// answers holds that thread in the kernel until its daemon ends, and a runtime's blocking
/// thread would hold up this process's end with it.
async fn answering(dir: &Path, owner: Option<u32>) -> Result<()> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let root = dir.to_path_buf();
    std::thread::Builder::new().name("settle-root".into()).spawn(move || answer.send(settle_root(&root, owner)))?;
    match tokio::time::timeout(MOUNT_TIMEOUT, answered).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(e).with_context(|| format!("the new mount at {} does not answer", dir.display())),
        Ok(Err(_)) => bail!("the new mount at {} was not checked", dir.display()),
        Err(_) => bail!("the new mount at {} does not answer after {MOUNT_TIMEOUT:?} (its log says why)", dir.display()),
    }
}

/// Makes the kernel take the root's real attributes before anyone uses the mount. Until a
/// GETATTR reply for it is accepted, the kernel checks permissions (default_permissions)
/// against a placeholder root: owned by root, without permission bits. And it drops a reply
/// that crosses an invalidation of the root, which the servers send whenever another node
/// creates or removes a name there: a job's first create on one node, racing the other
/// nodes' first creates, was refused with EACCES that way (and the same create a moment
/// later went through). A stat settles the root while nothing else happens in it; a few more
/// if a reply was dropped all the same, until the real owner (`owner`, when known) and
/// permission bits show.
fn settle_root(dir: &Path, owner: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for _ in 0..10 {
        let m = std::fs::metadata(dir)?;
        if m.permissions().mode() & 0o7777 != 0 && owner.is_none_or(|uid| m.uid() == uid) {
            break;
        }
    }
    Ok(())
}

/// Mounts `dir` for one user as root does for a job (no readable /dev/fuse or fusermount
/// needed), then starts the `surge-fuse` command as that user, serving the mount on the
/// descriptor it inherits. `cmd` names the instance and `dir`. The kernel checks permissions
/// (`default_permissions`) against the buffer's root, which is the user's with mode 0700:
/// other users are kept out by it. (`allow_other` is needed all the same: without it the
/// kernel refuses any process whose saved uid differs, and slurmstepd changes to the job's
/// directory with the user's effective uid but root's saved one.)
pub async fn mount_for_user(mut cmd: Command, instance: &str, dir: &Path, (uid, gid): (u32, u32), log_path: &Path) -> Result<()> {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    // The descriptor the daemon serves; it gets it as descriptor 3 (see below).
    let device: OwnedFd = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").context("open /dev/fuse")?.into();
    let options = format!("fd={},rootmode=40000,user_id={uid},group_id={gid},default_permissions,allow_other", device.as_raw_fd());
    let c = |s: &str| std::ffi::CString::new(s).context("NUL in a mount argument");
    let (source, target, fstype, data) = (c(&format!("surge:{instance}"))?, c(&dir.to_string_lossy())?, c("fuse.surge")?, c(&options)?);
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let mounted =
        unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), libc::MS_NOSUID | libc::MS_NODEV, data.as_ptr().cast()) };
    if mounted != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("mount {} for uid {uid}", dir.display()));
    }
    let raw = device.as_raw_fd();
    // SAFETY: dup2 is async-signal-safe; it gives the child the open device as descriptor 3
    // (without close-on-exec), the number passed to it on its command line.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.arg("--fuse-fd").arg("3").uid(uid).gid(gid);
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log_path)?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    crate::instance::detach(&mut cmd);
    let started = async {
        let mut child = cmd.spawn().context("start surge-fuse")?;
        let stdout = child.stdout.take().context("surge-fuse's output")?;
        // Its "ready" line, or the end of its output when it exits first.
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
        });
        match tokio::time::timeout(MOUNT_TIMEOUT, line).await {
            Ok(Ok(Ok(line))) if line.trim() == "ready" => Ok(child),
            Ok(_) => {
                let status = child.wait()?;
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                bail!("surge-fuse exited with {status} before serving: {}", log.lines().last().unwrap_or(""))
            }
            Err(_) => {
                let _ = child.kill();
                bail!("surge-fuse not serving {} after {MOUNT_TIMEOUT:?}", dir.display())
            }
        }
    }
    .await;
    drop(device);
    // Before the job's first step: see `settle_root`.
    let started = match started {
        Ok(mut child) => answering(dir, Some(uid)).await.inspect_err(|_| {
            let _ = child.kill();
        }),
        Err(e) => Err(e),
    };
    if started.is_err() {
        let _ = Command::new("umount").arg("-l").arg(dir).status();
    }
    started
}

/// A process that holds something under a mount: its working directory, its root, or an
/// open file.
struct Holder {
    pid: u32,
    command: String,
    what: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({}, {})", self.pid, self.command, self.what)
    }
}

/// The processes (that this user may look at) holding anything under `dir`.
fn holders(dir: &Path) -> Vec<Holder> {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let proc_dir = entry.path();
        let under = |link: &Path| std::fs::read_link(link).is_ok_and(|target| target.starts_with(dir));
        let what = if under(&proc_dir.join("cwd")) {
            Some("working directory".to_string())
        } else if under(&proc_dir.join("root")) {
            Some("root directory".to_string())
        } else {
            std::fs::read_dir(proc_dir.join("fd"))
                .ok()
                .and_then(|fds| fds.flatten().find_map(|fd| std::fs::read_link(fd.path()).ok().filter(|t| t.starts_with(dir))))
                .map(|file| format!("open file {}", file.display()))
        };
        if let Some(what) = what {
            let command = std::fs::read_to_string(proc_dir.join("comm")).unwrap_or_default().trim().to_string();
            found.push(Holder { pid, command, what });
        }
    }
    found
}

/// The mount's daemon is gone: the kernel answers "transport endpoint is not connected".
fn daemon_gone(dir: &Path) -> bool {
    std::fs::metadata(dir).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN))
}

fn fusermount(flags: &str, dir: &Path) -> Result<bool> {
    let status = Command::new("fusermount3").arg(flags).arg(dir).stderr(Stdio::null()).status().context("run fusermount3")?;
    Ok(status.success())
}

/// Unmounts `dir`. A mount that processes still hold is refused, naming them, unless `force`:
/// it is then detached lazily (it goes once they let go), and said so. A mount whose daemon
/// died is detached lazily without asking: nothing can use it any more.
pub fn umount(dir: &Path, force: bool) -> Result<()> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    if !is_mounted(&dir) {
        if forget(&dir)? {
            return Ok(()); // A record of a mount the system no longer has.
        }
        bail!("{} is not a Surge mount", dir.display());
    }
    let held = holders(&dir);
    let names = |held: &[Holder]| held.iter().map(Holder::to_string).collect::<Vec<_>>().join(", ");
    if !held.is_empty() && !force {
        bail!(
            "{} is busy: held by {}. Let them go (a shell inside: cd elsewhere), or detach it lazily with --force",
            dir.display(),
            names(&held)
        );
    }
    if held.is_empty() && fusermount("-u", &dir)? {
        return forget(&dir).map(drop);
    }
    if !force && !daemon_gone(&dir) {
        bail!("{} is busy (held by a process this user cannot see); detach it lazily with --force", dir.display());
    }
    if !fusermount("-uz", &dir)? {
        bail!("could not unmount {}", dir.display());
    }
    if !held.is_empty() {
        eprintln!("surge: {} detached lazily; it goes once these let go: {}", dir.display(), names(&held));
    }
    forget(&dir).map(drop)
}

/// Forgets `dir` in whichever instance recorded it; true if one did.
fn forget(dir: &Path) -> Result<bool> {
    let mut found = false;
    for (name, mount) in descriptor::all_recorded_mounts() {
        if mount == dir {
            found = true;
            let rest: Vec<PathBuf> = descriptor::recorded_mounts(&name).into_iter().filter(|m| m != dir).collect();
            descriptor::record_mounts(&name, &rest)?;
        }
    }
    Ok(found)
}

/// Unmounts everything recorded for the instance (before its servers stop); a busy mount
/// stops it unless `force` (see [`umount`]).
pub fn umount_all(name: &str, force: bool) -> Result<()> {
    // Each once: records written before mounts were recorded once may name one twice, and
    // the second would find it neither mounted nor recorded.
    let mut recorded = descriptor::recorded_mounts(name);
    recorded.sort();
    recorded.dedup();
    for dir in recorded {
        umount(&dir, force).with_context(|| format!("instance '{name}' stays up"))?;
    }
    let _ = std::fs::remove_file(descriptor::mounts_file(name));
    // The mount daemons' log goes with the instance.
    let _ = std::fs::remove_file(descriptor::instances_dir().join(format!("{name}.fuse.log")));
    Ok(())
}

/// `mount.fuse.surge SOURCE DIR -o OPTIONS`, as mount(8) runs it for `mount -t fuse.surge`
/// and /etc/fstab lines (`surge:NAME /mnt/bb fuse.surge node=10.1.0.7 0 0`). SOURCE is
/// `surge:NAME` or `NAME`.
#[derive(clap::Args, Debug)]
pub struct MountHelper {
    /// `surge:NAME`: the instance.
    source: String,
    /// The mount point.
    dir: PathBuf,
    /// Comma-separated options: node=ADDRESS (this node's), home=DIR (where the instance's
    /// descriptor is, as SURGE_HOME), ro, rw, noexec, exec, remount, and mount(8)'s own
    /// (defaults, auto, noauto, _netdev, nofail, nosuid, nodev, x-*). suid and dev are refused:
    /// Surge mounts never honour set-user-ID bits or device nodes.
    #[arg(short = 'o')]
    options: Vec<String>,
    /// Do not write /etc/mtab (there is none to write).
    #[arg(short = 'n')]
    no_mtab: bool,
    /// Tolerate options Surge does not know (mount -s).
    #[arg(short = 's')]
    sloppy: bool,
    /// Do everything but the mount (mount -f).
    #[arg(short = 'f')]
    fake: bool,
    /// Say what is done.
    #[arg(short = 'v')]
    verbose: bool,
}

/// What a helper's options ask for.
#[derive(Debug, Default)]
pub struct HelperOptions {
    pub choices: MountChoices,
    pub home: Option<PathBuf>,
    pub remount: bool,
}

impl MountHelper {
    /// The instance's name.
    pub fn instance(&self) -> &str {
        self.source.strip_prefix("surge:").unwrap_or(&self.source)
    }

    pub fn parsed(&self) -> Result<HelperOptions> {
        parse_helper_options(&self.options.join(","), self.sloppy)
    }
}

/// Reads mount(8)'s `-o` list (see [`MountHelper`]).
pub fn parse_helper_options(list: &str, sloppy: bool) -> Result<HelperOptions> {
    let mut parsed = HelperOptions::default();
    for option in list.split(',').filter(|o| !o.is_empty()) {
        match option.split_once('=') {
            Some(("node", address)) => {
                parsed.choices.node = Some(address.parse().with_context(|| format!("node={address}: not an IP address"))?)
            }
            Some(("home", dir)) => parsed.home = Some(PathBuf::from(dir)),
            // The FUSE connection's own, which a remount through mount(8) passes back: fixed at
            // the mount.
            Some(("user_id" | "group_id" | "rootmode" | "fd" | "max_read" | "blksize", _)) => {}
            _ => match option {
                "ro" => parsed.choices.read_only = true,
                "rw" => parsed.choices.read_only = false,
                "noexec" => parsed.choices.no_exec = true,
                "exec" => parsed.choices.no_exec = false,
                "remount" => parsed.remount = true,
                "suid" | "dev" => {
                    bail!("'{option}': Surge mounts are always nosuid,nodev (set-user-ID bits and device nodes are never honoured)")
                }
                "defaults" | "auto" | "noauto" | "_netdev" | "nofail" | "nosuid" | "nodev" | "user" | "nouser" | "users" => {}
                // What mount(8) passes back on a remount from the mount's current flags: the
                // kernel's access-time and sync rules, which Surge's mounts leave to it.
                "relatime"
                | "noatime"
                | "strictatime"
                | "atime"
                | "nodiratime"
                | "diratime"
                | "lazytime"
                | "nolazytime"
                | "sync"
                | "async"
                | "dirsync"
                | "silent"
                | "loud"
                | "default_permissions"
                | "allow_other" => {}
                o if o.starts_with("x-") || o.starts_with("comment=") => {}
                o if sloppy => tracing::warn!("mount option '{o}' ignored (-s)"),
                o => bail!("unknown mount option '{o}': Surge takes node=ADDRESS, home=DIR, ro, rw, noexec, exec and mount(8)'s own"),
            },
        }
    }
    Ok(parsed)
}

/// Runs the helper: a new mount as `surge mount` makes it, or new flags for a mount there.
pub async fn helper(args: &MountHelper) -> Result<()> {
    let parsed = args.parsed()?;
    if args.fake {
        return Ok(());
    }
    if parsed.remount {
        return remount(&args.dir, &parsed.choices);
    }
    let dir = mount(args.instance(), &args.dir, &parsed.choices).await?;
    if args.verbose {
        println!("instance '{}' mounted on {}", args.instance(), dir.display());
    }
    Ok(())
}

/// `mount -o remount,ro|rw[,noexec]` of a Surge mount: the kernel's flags change, the daemon
/// stays.
fn remount(dir: &Path, choices: &MountChoices) -> Result<()> {
    if !is_mounted(&dir.canonicalize().with_context(|| format!("{}", dir.display()))?) {
        bail!("{} is not a Surge mount", dir.display());
    }
    let mut flags = libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    if choices.read_only {
        flags |= libc::MS_RDONLY;
    }
    if choices.no_exec {
        flags |= libc::MS_NOEXEC;
    }
    let target = std::ffi::CString::new(dir.to_string_lossy().as_bytes()).context("NUL in the mount point")?;
    // SAFETY: the target is a NUL-terminated string that outlives the call; the other
    // pointers are null, which MS_REMOUNT allows.
    let done = unsafe { libc::mount(std::ptr::null(), target.as_ptr(), std::ptr::null(), flags, std::ptr::null()) };
    if done != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("remount {}", dir.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_options_are_read_as_mount_gives_them() {
        let parsed = parse_helper_options("rw,node=10.1.0.7,noexec,_netdev,x-systemd.automount,home=/var/lib/surge", false).unwrap();
        assert_eq!(parsed.choices.node, Some("10.1.0.7".parse().unwrap()));
        assert!(parsed.choices.no_exec && !parsed.choices.read_only && !parsed.remount);
        assert_eq!(parsed.home, Some(PathBuf::from("/var/lib/surge")));
        let remount = parse_helper_options("remount,ro", false).unwrap();
        assert!(remount.remount && remount.choices.read_only);
        // mount(8)'s remount passes the mount's current options back.
        let current = "rw,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,allow_other";
        let remount = parse_helper_options(&format!("{current},remount,ro,home=/h"), false).unwrap();
        assert!(remount.remount && remount.choices.read_only);
    }

    #[test]
    fn set_id_and_devices_and_unknown_options_are_refused() {
        for option in ["suid", "dev", "rw,suid"] {
            let e = parse_helper_options(option, true).unwrap_err().to_string();
            assert!(e.contains("nosuid,nodev"), "{option}: {e}");
        }
        assert!(parse_helper_options("node=nowhere", false).unwrap_err().to_string().contains("not an IP address"));
        assert!(parse_helper_options("frobnicate", false).unwrap_err().to_string().contains("unknown mount option 'frobnicate'"));
        assert!(parse_helper_options("frobnicate", true).is_ok(), "-s tolerates it");
    }
}
