//! `surge demo`: the embedded default main job. Starts a local 4-server instance on loopback
//! aliases, writes a file from one "node", reads it back exactly from another, publishes a
//! result with write-to-temporary + rename over an existing file, shows the instance's status,
//! and tears it down — printing what happened and how fast.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{ensure, Result};
use bytes::Bytes;
use surge_client::{Client, ClientOptions, Mode};

use crate::instance;
use crate::table::{human_bytes, Table};

use crate::output::{out, outln};

const DATA_BYTES: usize = 256 << 20;

pub async fn run(root: Option<PathBuf>) -> Result<()> {
    let root = root.unwrap_or_else(|| {
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        }
    });
    let name = format!("demo-{}", std::process::id());
    let params = instance::UpParams {
        name: name.clone(),
        servers: 4,
        capacity: 2 << 30,
        root: root.join("surge-demo"),
        hosts: instance::default_hosts(4),
        mode: Mode::Striped,
        chunk_size: 1 << 20,
        check_identity: false,
        layout: Default::default(),
        watermarks: None,
        replicas: 1,
        failover_after: None,
    };
    outln!("Surge demo: a 4-server striped instance on 127.0.0.11-14, data under {}", params.root.display());
    let (desc, startup) = instance::up(&params).await?;
    let outcome = steps(&desc, startup).await;
    outln!();
    out!("{}", instance::servers_table(&desc, &instance::probe(&desc).await));
    instance::down(&desc, true).await?;
    let _ = std::fs::remove_dir_all(&params.root);
    let summary = outcome?;
    outln!();
    out!("{}", summary.render());
    outln!("\ninstance '{name}' torn down; all checks passed");
    Ok(())
}

async fn steps(desc: &surge_client::InstanceDescriptor, startup: std::time::Duration) -> Result<Table> {
    let node = |ip: &str| ClientOptions { node: Some(ip.parse().unwrap()), ..Default::default() };
    let writer = Client::new(desc, node("127.0.0.21"))?;
    let reader = Client::new(desc, node("127.0.0.22"))?;
    let mut summary = Table::new(&["step", "bytes", "seconds", "MiB/s", "result"]);
    summary.row(vec!["start 4 servers".into(), "-".into(), format!("{:.3}", startup.as_secs_f64()), "-".into(), "all answered".into()]);

    let data: Vec<u8> = (0..DATA_BYTES).map(|i| (i as u64).wrapping_mul(0x9e37_79b9).to_le_bytes()[3]).collect();
    let digest = blake3::hash(&data);
    let data = Bytes::from(data);
    writer.mkdir("/run", 0o755).await?;

    let t = Instant::now();
    let f = writer.create("/run/field.bin", 0o644).await?;
    let window = 16 << 20;
    for at in (0..DATA_BYTES).step_by(window) {
        f.pwrite_bytes(at as u64, data.slice(at..(at + window).min(DATA_BYTES))).await?;
    }
    f.close().await?;
    let secs = t.elapsed().as_secs_f64();
    summary.row(vec![
        "write (node .21)".into(),
        human_bytes(DATA_BYTES as u64),
        format!("{secs:.3}"),
        format!("{:.0}", DATA_BYTES as f64 / secs / 1048576.0),
        "closed".into(),
    ]);

    let t = Instant::now();
    let f = reader.open("/run/field.bin", false).await?;
    let mut back = Vec::with_capacity(DATA_BYTES);
    while back.len() < DATA_BYTES {
        let piece = f.pread(back.len() as u64, window).await?;
        ensure!(!piece.is_empty(), "short read at {}", back.len());
        back.extend_from_slice(&piece);
    }
    f.close().await?;
    let secs = t.elapsed().as_secs_f64();
    let same = blake3::hash(&back) == digest;
    ensure!(same, "data read back on node .22 differs from what node .21 wrote");
    summary.row(vec![
        "read (node .22)".into(),
        human_bytes(DATA_BYTES as u64),
        format!("{secs:.3}"),
        format!("{:.0}", DATA_BYTES as f64 / secs / 1048576.0),
        "identical (BLAKE3)".into(),
    ]);

    // Publish: write a new version under a temporary name, rename over the old one.
    let t = Instant::now();
    for version in 0..2u8 {
        let tmp = writer.create("/run/plot.h5.tmp", 0o644).await?;
        tmp.pwrite(0, &vec![version; 3 << 20]).await?;
        tmp.close().await?;
        writer.rename("/run/plot.h5.tmp", "/run/plot.h5").await?;
    }
    let f = reader.open("/run/plot.h5", false).await?;
    let seen = f.pread(0, 3 << 20).await?;
    f.close().await?;
    ensure!(seen.len() == 3 << 20 && seen.iter().all(|&b| b == 1), "published file is not the complete second version");
    summary.row(vec![
        "publish by rename".into(),
        human_bytes(6 << 20),
        format!("{:.3}", t.elapsed().as_secs_f64()),
        "-".into(),
        "reader sees complete v2".into(),
    ]);

    let names: Vec<String> = reader.readdir("/run").await?.into_iter().map(|e| e.name).collect();
    ensure!(names == ["field.bin", "plot.h5"], "unexpected listing {names:?}");
    summary.row(vec!["ls /run (node .22)".into(), "-".into(), "-".into(), "-".into(), names.join(", ")]);
    Ok(summary)
}
