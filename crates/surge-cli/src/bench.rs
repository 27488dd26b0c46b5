//! `surge bench`: the data-plane benchmarks, run against an instance (native client) or a
//! local directory (the baseline, e.g. tmpfs), with the same access pattern, so `bench/`
//! scripts can print same-run ratios.
//!
//! * `seq`: sequential write (then fsync) and read with fixed-size requests, N processes
//!   started together, each on a file of its own (N-N) or, with `--shared`, each on its own
//!   contiguous segment of one shared file (N-1);
//! * `meta`: create (exclusive) + close, stat, unlink of N files in one directory, with
//!   C requests in flight.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use surge_client::{Client, ClientOptions};

use crate::table::Table;
use surge_units::parse_size;

use crate::output::{out, outln};

#[derive(Args, Clone)]
pub struct BenchTarget {
    /// Benchmark this instance through the native client...
    #[arg(long, conflicts_with = "dir")]
    instance: Option<String>,
    /// ...or this local directory (the baseline).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// This node's address (connection source; picks the namespace in private mode).
    #[arg(long)]
    node: Option<std::net::IpAddr>,
}

impl BenchTarget {
    fn describe(&self) -> String {
        match (&self.instance, &self.dir) {
            (Some(i), _) => format!("surge:{i}"),
            (_, Some(d)) => d.display().to_string(),
            _ => "?".into(),
        }
    }

    fn client(&self) -> Result<Option<Client>> {
        match (&self.instance, &self.dir) {
            (Some(name), _) => Ok(Some(Client::for_instance(name, ClientOptions { node: self.node, ..Default::default() })?)),
            (None, Some(_)) => Ok(None),
            (None, None) => bail!("give --instance NAME or --dir PATH"),
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum, Serialize, Deserialize, Debug)]
pub enum Phase {
    Write,
    Read,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Sequential write and read, one file per process.
    Seq {
        #[command(flatten)]
        on: BenchTarget,
        /// Bytes per process.
        #[arg(long, default_value = "1G", value_parser = parse_size)]
        size: u64,
        /// Request size.
        #[arg(long, default_value = "1M", value_parser = parse_size)]
        block: u64,
        /// Processes, each with a file of its own.
        #[arg(long, default_value_t = 1)]
        procs: usize,
        /// N-1: all processes write and read one shared file, process p the bytes
        /// [p * size, (p + 1) * size).
        #[arg(long)]
        shared: bool,
        /// Print one JSON line per phase.
        #[arg(long)]
        json: bool,
        /// Internal: run one phase of one process (started by the parent).
        #[arg(long, hide = true)]
        worker: Option<Phase>,
        /// Internal: which process this is.
        #[arg(long, hide = true, default_value_t = 0)]
        part: usize,
        /// Internal: when every process starts its phase (Unix time, ms).
        #[arg(long, hide = true, default_value_t = 0)]
        start_at_ms: u64,
    },
    /// Create, stat and unlink N files in one directory.
    Meta {
        #[command(flatten)]
        on: BenchTarget,
        /// Files to create, stat and unlink.
        #[arg(long, default_value_t = 20_000)]
        files: usize,
        /// Operations in flight at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Print one JSON line per operation.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize, Deserialize, Debug)]
struct PhaseResult {
    bytes: u64,
    secs: f64,
}

#[derive(Serialize, Debug)]
struct SeqReport {
    target: String,
    procs: usize,
    block: u64,
    shared: bool,
    write_mib_s: f64,
    read_mib_s: f64,
}

#[derive(Serialize, Debug)]
struct MetaReport {
    target: String,
    files: usize,
    concurrency: usize,
    create_per_s: f64,
    stat_per_s: f64,
    unlink_per_s: f64,
}

pub async fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Seq { on, size, block, procs, shared, json, worker, part, start_at_ms } => {
            let layout = SeqLayout { size, block, shared };
            if let Some(phase) = worker {
                let result = seq_worker(&on, phase, part, layout, start_at_ms).await?;
                outln!("{}", serde_json::to_string(&result)?);
                return Ok(());
            }
            if shared {
                create_shared(&on).await?;
            }
            let write = seq_phase(&on, Phase::Write, procs, layout)?;
            let read = seq_phase(&on, Phase::Read, procs, layout)?;
            cleanup_seq(&on, procs, shared).await?;
            let report = SeqReport { target: on.describe(), procs, block, shared, write_mib_s: write, read_mib_s: read };
            if json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                let mut t = Table::new(&["target", "procs", "block", "files", "write MiB/s", "read MiB/s"]);
                let files = if shared { "1 shared" } else { "1 per proc" };
                t.row(vec![report.target, procs.to_string(), block.to_string(), files.into(), format!("{write:.0}"), format!("{read:.0}")]);
                out!("{}", t.render());
            }
        }
        BenchCommand::Meta { on, files, concurrency, json } => {
            let report = meta(&on, files, concurrency.max(1)).await?;
            if json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                let mut t = Table::new(&["target", "files", "in flight", "create/s", "stat/s", "unlink/s"]);
                t.row(vec![
                    report.target.clone(),
                    files.to_string(),
                    report.concurrency.to_string(),
                    format!("{:.0}", report.create_per_s),
                    format!("{:.0}", report.stat_per_s),
                    format!("{:.0}", report.unlink_per_s),
                ]);
                out!("{}", t.render());
            }
        }
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// What each process of `seq` moves, and where.
#[derive(Clone, Copy)]
struct SeqLayout {
    size: u64,
    block: u64,
    shared: bool,
}

impl SeqLayout {
    /// The file process `part` works on, and where its bytes start in it.
    fn place(&self, part: usize) -> (String, u64) {
        if self.shared {
            (SHARED_NAME.to_string(), part as u64 * self.size)
        } else {
            (seq_name(part), 0)
        }
    }
}

const SHARED_NAME: &str = "surge-bench-seq-shared";

/// Runs one phase in `procs` child processes started at the same instant; aggregate
/// bandwidth = all bytes / the slowest process's time.
fn seq_phase(on: &BenchTarget, phase: Phase, procs: usize, layout: SeqLayout) -> Result<f64> {
    let SeqLayout { size, block, shared } = layout;
    let exe = std::env::current_exe()?;
    let start_at = now_ms() + 300;
    let mut children = Vec::new();
    for part in 0..procs {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["bench", "seq", "--size", &size.to_string(), "--block", &block.to_string()]);
        cmd.args(["--worker", if phase == Phase::Write { "write" } else { "read" }]);
        cmd.args(["--part", &part.to_string(), "--start-at-ms", &start_at.to_string()]);
        if shared {
            cmd.arg("--shared");
        }
        if let Some(i) = &on.instance {
            cmd.args(["--instance", i]);
        }
        if let Some(d) = &on.dir {
            cmd.arg("--dir").arg(d);
        }
        if let Some(n) = on.node {
            cmd.args(["--node", &n.to_string()]);
        }
        cmd.stdout(std::process::Stdio::piped());
        children.push(cmd.spawn().context("start benchmark worker")?);
    }
    let (mut bytes, mut secs) = (0u64, 0f64);
    for child in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("benchmark worker failed ({})", out.status);
        }
        let r: PhaseResult = serde_json::from_slice(&out.stdout).context("worker output")?;
        bytes += r.bytes;
        secs = secs.max(r.secs);
    }
    Ok(bytes as f64 / (1 << 20) as f64 / secs)
}

fn seq_name(part: usize) -> String {
    format!("surge-bench-seq-{part}")
}

/// The shared file exists, empty, before the writers start (none of them creates or
/// truncates it, so none can cut another's bytes).
async fn create_shared(on: &BenchTarget) -> Result<()> {
    match on.client()? {
        Some(c) => c.create_or_truncate(&format!("/{SHARED_NAME}"), 0o644).await?.close().await?,
        None => drop(std::fs::File::create(on.dir.as_ref().expect("dir").join(SHARED_NAME))?),
    }
    Ok(())
}

async fn seq_worker(on: &BenchTarget, phase: Phase, part: usize, layout: SeqLayout, start_at_ms: u64) -> Result<PhaseResult> {
    let SeqLayout { size, block, shared } = layout;
    let (name, base) = layout.place(part);
    let client = on.client()?;
    let pattern: Vec<u8> = (0..block).map(|i| (i * 31 + part as u64) as u8).collect();
    let pattern = Bytes::from(pattern);
    let wait = start_at_ms.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let start = Instant::now();
    let mut moved = 0u64;
    match (&client, phase) {
        (Some(c), Phase::Write) => {
            let f =
                if shared { c.open(&format!("/{name}"), false).await? } else { c.create_or_truncate(&format!("/{name}"), 0o644).await? };
            f.set_write_behind(c.stream_window()).await?;
            while moved < size {
                moved += f.pwrite_bytes(base + moved, pattern.clone()).await? as u64;
            }
            f.fsync().await?;
            f.close().await?;
        }
        (Some(c), Phase::Read) => {
            let f = c.open(&format!("/{name}"), false).await?;
            f.set_read_ahead(c.stream_window()).await;
            while moved < size {
                let got = f.pread(base + moved, block as usize).await?;
                if got.is_empty() {
                    break;
                }
                moved += got.len() as u64;
            }
            f.close().await?;
        }
        (None, phase) => {
            let path = on.dir.as_ref().expect("dir").join(&name);
            tokio::task::block_in_place(|| -> Result<()> {
                if phase == Phase::Write {
                    let f = if shared { std::fs::OpenOptions::new().write(true).open(&path)? } else { std::fs::File::create(&path)? };
                    while moved < size {
                        f.write_all_at(&pattern, base + moved)?;
                        moved += block;
                    }
                    f.sync_all()?;
                } else {
                    let f = std::fs::File::open(&path)?;
                    let mut buf = vec![0u8; block as usize];
                    while moved < size {
                        let n = f.read_at(&mut buf, base + moved)?;
                        if n == 0 {
                            break;
                        }
                        moved += n as u64;
                    }
                }
                Ok(())
            })?;
        }
    }
    Ok(PhaseResult { bytes: moved, secs: start.elapsed().as_secs_f64() })
}

async fn cleanup_seq(on: &BenchTarget, procs: usize, shared: bool) -> Result<()> {
    let client = on.client()?;
    let names: Vec<String> = if shared { vec![SHARED_NAME.to_string()] } else { (0..procs).map(seq_name).collect() };
    for name in names {
        match &client {
            Some(c) => c.unlink(&format!("/{name}")).await?,
            None => std::fs::remove_file(on.dir.as_ref().expect("dir").join(name))?,
        }
    }
    Ok(())
}

/// Splits 0..n into `workers` interleaved shares and runs `op` on each share concurrently.
async fn in_parallel<F, Fut>(n: usize, workers: usize, op: F) -> Result<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(workers) {
                op(i).await?;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn meta(on: &BenchTarget, files: usize, concurrency: usize) -> Result<MetaReport> {
    let dir_name = format!("surge-bench-meta-{}", std::process::id());
    let name = |i: usize| format!("f{i:07}");
    let (create, stat, unlink) = match on.client()? {
        Some(client) => {
            let dir = client.mkdir(&format!("/{dir_name}"), 0o755).await?.ino;
            let c = client.clone();
            let create = in_parallel(files, concurrency, move |i| {
                let c = c.clone();
                async move { Ok(c.create_at(dir, &name(i), 0o644, true).await?.close().await?) }
            })
            .await?;
            let c = client.clone();
            let stat = in_parallel(files, concurrency, move |i| {
                let c = c.clone();
                async move { c.lookup(dir, &name(i)).await.map(|_| ()).map_err(Into::into) }
            })
            .await?;
            let c = client.clone();
            let unlink = in_parallel(files, concurrency, move |i| {
                let c = c.clone();
                async move { Ok(c.unlink_at(dir, &name(i)).await?) }
            })
            .await?;
            client.rmdir(&format!("/{dir_name}")).await?;
            (create, stat, unlink)
        }
        None => {
            let dir = on.dir.as_ref().expect("dir").join(&dir_name);
            std::fs::create_dir(&dir)?;
            let d = dir.clone();
            let create = in_parallel(files, concurrency, move |i| {
                let p = d.join(name(i));
                async move { std::fs::OpenOptions::new().write(true).create_new(true).open(p).map(drop).map_err(Into::into) }
            })
            .await?;
            let d = dir.clone();
            let stat = in_parallel(files, concurrency, move |i| {
                let p = d.join(name(i));
                async move { std::fs::metadata(p).map(drop).map_err(Into::into) }
            })
            .await?;
            let d = dir.clone();
            let unlink = in_parallel(files, concurrency, move |i| {
                let p = d.join(name(i));
                async move { Ok(std::fs::remove_file(p)?) }
            })
            .await?;
            std::fs::remove_dir(&dir)?;
            (create, stat, unlink)
        }
    };
    Ok(MetaReport { target: on.describe(), files, concurrency, create_per_s: create, stat_per_s: stat, unlink_per_s: unlink })
}
