//! File and namespace commands through the native client, for scripts and tests without a mount.
//!
//! `put` and `get` stream a whole window of chunks at once (write-behind, read-ahead), so every
//! server works; `put` succeeds only once its close has published the file, so a failed write
//! is never reported as a copy. Paths are instance paths, resolved as the client library's path
//! API does.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, Result};
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use surge_client::surge_proto::placement::DirLayout;
use surge_client::surge_proto::{Attr, FileKind, Timestamp};
use surge_client::Client;

use crate::table::{human_bytes, Table};

use crate::output::{out, outln};

/// Bytes moved per round: several chunks, so every server works at once.
fn window(client: &Client) -> usize {
    (client.chunk_size() as usize * client.server_count()).clamp(4 << 20, 64 << 20)
}

fn progress(total: u64, verb: &str) -> ProgressBar {
    // Hidden automatically when stderr is not a terminal; small copies show nothing.
    if total < (64 << 20) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(&format!("{verb} {{bar:30}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} ETA {{eta}}"))
            .expect("valid template"),
    );
    bar
}

pub async fn put(client: &Client, local: &Path, path: &str) -> Result<()> {
    let started = std::time::Instant::now();
    let mut input = std::fs::File::open(local).with_context(|| format!("open {}", local.display()))?;
    let total = input.metadata()?.len();
    let file = client.create_or_truncate(path, 0o644).await?;
    let bar = progress(total, "put");
    let window = window(client);
    file.set_write_behind(window as u64).await?;
    let mut offset = 0u64;
    loop {
        let mut buf = vec![0u8; window];
        let mut filled = 0;
        while filled < window {
            let n = input.read(&mut buf[filled..]).with_context(|| format!("read {}", local.display()))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        buf.truncate(filled);
        if let Err(e) = file.pwrite_bytes(offset, Bytes::from(buf)).await {
            let _ = file.close().await;
            return Err(e).with_context(|| format!("write {path} at offset {offset}"));
        }
        offset += filled as u64;
        bar.set_position(offset);
    }
    file.close().await?;
    bar.finish_and_clear();
    outln!("{} -> {path}: {}", local.display(), moved(offset, started));
    Ok(())
}

/// `12.0 MiB in 0.05 s (240.0 MiB/s)`.
fn moved(bytes: u64, started: std::time::Instant) -> String {
    let seconds = started.elapsed().as_secs_f64();
    format!("{} in {seconds:.2} s ({}/s)", human_bytes(bytes), human_bytes((bytes as f64 / seconds.max(1e-6)) as u64))
}

pub async fn get(client: &Client, path: &str, local: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    let file = client.open(path, false).await?;
    let total = file.size();
    let mut out = std::fs::File::create(local).with_context(|| format!("create {}", local.display()))?;
    let bar = progress(total, "get");
    let window = window(client);
    file.set_read_ahead(window as u64).await;
    let mut offset = 0u64;
    let result: Result<()> = async {
        while offset < total {
            let data = file.pread(offset, window).await?;
            if data.is_empty() {
                break;
            }
            out.write_all(&data).with_context(|| format!("write {}", local.display()))?;
            offset += data.len() as u64;
            bar.set_position(offset);
        }
        Ok(())
    }
    .await;
    file.close().await?;
    bar.finish_and_clear();
    result?;
    outln!("{path} -> {}: {}", local.display(), moved(offset, started));
    Ok(())
}

/// `drwxr-xr-x`, as `ls -l` shows it (with setuid, setgid and sticky bits).
pub fn mode_string(kind: FileKind, mode: u32) -> String {
    let mut text = String::with_capacity(10);
    text.push(match kind {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
        FileKind::CharDevice { .. } => 'c',
        FileKind::BlockDevice { .. } => 'b',
    });
    // (who's bits, the special bit that shows in their execute place, its letter)
    for (shift, special, letter) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 0o7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => letter,
            (false, true) => letter.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    text
}

/// A time as people read it (UTC, to the second).
pub fn time_string(t: Timestamp) -> String {
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.secs.max(0) as u64);
    humantime::format_rfc3339_seconds(when).to_string().replace('T', " ").replace('Z', " UTC")
}

fn attr_json(name: &str, a: &Attr) -> serde_json::Value {
    serde_json::json!({"name": name, "ino": a.ino, "kind": format!("{:?}", a.kind).to_lowercase(), "mode": format!("{:04o}", a.mode),
        "uid": a.uid, "gid": a.gid, "size": a.size, "blocks": a.blocks, "nlink": a.nlink, "mtime": a.mtime.secs as f64 + a.mtime.nanos as f64 * 1e-9})
}

pub async fn ls(client: &Client, path: &str, json: bool) -> Result<()> {
    let attr = client.stat(path).await?;
    let entries = if attr.kind == FileKind::Dir {
        let mut entries = Vec::new();
        for e in client.readdir(path).await? {
            let attr = match e.attr {
                Some(a) => a,
                None => client.getattr(e.ino).await?,
            };
            entries.push((e.name, attr));
        }
        entries
    } else {
        vec![(path.rsplit('/').next().unwrap_or(path).to_string(), attr)]
    };
    if json {
        let entries: Vec<serde_json::Value> = entries.iter().map(|(name, a)| attr_json(name, a)).collect();
        outln!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    let mut table = Table::new(&["mode", "uid", "gid", "size", "modified", "name"]);
    for (name, a) in entries {
        table.row(vec![mode_string(a.kind, a.mode), a.uid.to_string(), a.gid.to_string(), a.size.to_string(), time_string(a.mtime), name]);
    }
    out!("{}", table.render());
    Ok(())
}

pub async fn rm(client: &Client, path: &str, recursive: bool) -> Result<()> {
    let attr = client.stat(path).await?;
    if attr.kind != FileKind::Dir {
        return Ok(client.unlink(path).await?);
    }
    anyhow::ensure!(recursive, "{path} is a directory (use -r)");
    remove_tree(client, path).await
}

fn remove_tree<'a>(client: &'a Client, path: &'a str) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + 'a>> {
    Box::pin(async move {
        for entry in client.readdir(path).await? {
            let child = format!("{}/{}", path.trim_end_matches('/'), entry.name);
            if entry.kind == FileKind::Dir {
                remove_tree(client, &child).await?;
            } else {
                client.unlink(&child).await?;
            }
        }
        if path.trim_matches('/').is_empty() {
            return Ok(());
        }
        Ok(client.rmdir(path).await?)
    })
}

pub fn describe(attr: &Attr) -> String {
    format!(
        "inode {:#x}  {} ({:04o})  uid {}  gid {}  size {} ({}, {})  links {}  modified {}",
        attr.ino,
        mode_string(attr.kind, attr.mode),
        attr.mode,
        attr.uid,
        attr.gid,
        attr.size,
        human_bytes(attr.size),
        match attr.blocks {
            Some(blocks) => format!("{} allocated", human_bytes(blocks * 512)),
            None => "allocation not measured".to_string(),
        },
        attr.nlink,
        time_string(attr.mtime)
    )
}

pub async fn stat(client: &Client, path: &str, json: bool) -> Result<()> {
    let attr = client.stat(path).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&attr_json(path, &attr))?);
        return Ok(());
    }
    outln!("{path}: {}", describe(&attr));
    if attr.kind == FileKind::Symlink {
        outln!("  -> {}", client.readlink_ino(attr.ino).await?);
    }
    Ok(())
}

/// `surge layout`: the layout of directory `inner` (`shown` as the user named it), set first
/// to `set` when given.
pub async fn layout(client: &Client, shown: &str, inner: &str, set: Option<DirLayout>) -> Result<()> {
    let layout = match set {
        Some(layout) => client.set_dir_layout(inner, layout).await?,
        None => client.dir_layout(inner).await?,
    };
    outln!("{shown}: {layout}");
    Ok(())
}

pub fn list_instances(json: bool) -> Result<()> {
    if json {
        let descriptors: Vec<serde_json::Value> = surge_client::descriptor::known_instances()
            .iter()
            .map(|name| match surge_client::InstanceDescriptor::load(name) {
                Ok(d) => serde_json::to_value(d).unwrap_or_default(),
                Err(e) => serde_json::json!({"name": name, "error": e.to_string()}),
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&descriptors)?);
        return Ok(());
    }
    let mut table = Table::new(&["name", "mode", "servers", "capacity", "chunk", "descriptor"]);
    for name in surge_client::descriptor::known_instances() {
        let p = surge_client::descriptor::descriptor_path(&name);
        match surge_client::InstanceDescriptor::load_from(&p) {
            Ok(d) => table.row(vec![
                d.name,
                d.mode.to_string(),
                d.servers.len().to_string(),
                human_bytes(d.capacity),
                human_bytes(d.chunk_size),
                p.display().to_string(),
            ]),
            Err(e) => table.row(vec!["?".into(), "-".into(), "-".into(), "-".into(), "-".into(), format!("{} ({e})", p.display())]),
        }
    }
    out!("{}", table.render());
    Ok(())
}
