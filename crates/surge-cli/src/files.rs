//! File and namespace commands through the native client, for scripts and tests without a mount.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, Result};
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use surge_client::surge_proto::{Attr, FileKind};
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
    Ok(())
}

pub async fn get(client: &Client, path: &str, local: &Path) -> Result<()> {
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
    result
}

fn kind_letter(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "-",
        FileKind::Dir => "d",
        FileKind::Symlink => "l",
    }
}

pub async fn ls(client: &Client, path: &str) -> Result<()> {
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
    let mut table = Table::new(&["mode", "uid", "gid", "size", "name"]);
    for (name, a) in entries {
        table.row(vec![format!("{}{:04o}", kind_letter(a.kind), a.mode), a.uid.to_string(), a.gid.to_string(), a.size.to_string(), name]);
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
        "inode {:#x}  {}{:04o}  uid {}  gid {}  size {} ({})  links {}  mtime {}.{:09}",
        attr.ino,
        kind_letter(attr.kind),
        attr.mode,
        attr.uid,
        attr.gid,
        attr.size,
        human_bytes(attr.size),
        attr.nlink,
        attr.mtime.secs,
        attr.mtime.nanos
    )
}

pub async fn stat(client: &Client, path: &str) -> Result<()> {
    let attr = client.stat(path).await?;
    outln!("{path}: {}", describe(&attr));
    if attr.kind == FileKind::Symlink {
        outln!("  -> {}", client.readlink_ino(attr.ino).await?);
    }
    Ok(())
}

pub fn list_instances() -> Result<()> {
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
