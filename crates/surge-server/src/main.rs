//! `surge-server`: runs one node's share of a Surge instance. Normally started by `surge up`
//! (locally, or on each node through the scheduler's launcher), not by hand.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use surge_server::ServerConfig;

#[derive(Parser)]
#[command(version, about = "Surge burst-buffer data server (one per node of an instance)")]
struct Args {
    /// Address to listen on; port 0 picks a free port (written to ROOT/ready).
    #[arg(long)]
    listen: SocketAddr,
    /// Node-local directory for this server's data (SSD or tmpfs).
    #[arg(long)]
    root: PathBuf,
    /// This server's capacity share in bytes.
    #[arg(long)]
    capacity: u64,
    /// Index of this server in the instance (0-based).
    #[arg(long)]
    index: usize,
    /// Number of servers in the instance.
    #[arg(long)]
    count: usize,
    /// The instance's token file (0600, 64 hex digits).
    #[arg(long)]
    token_file: PathBuf,
    /// Owner of the root directory.
    // SAFETY: geteuid/getegid take no arguments and cannot fail.
    #[arg(long, default_value_t = unsafe { libc::geteuid() })]
    owner_uid: u32,
    // SAFETY: geteuid/getegid take no arguments and cannot fail.
    #[arg(long, default_value_t = unsafe { libc::getegid() })]
    owner_gid: u32,
    /// Worker threads (default: number of cores).
    #[arg(long)]
    threads: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    anyhow::ensure!(args.index < args.count, "--index {} must be below --count {}", args.index, args.count);
    let text = std::fs::read_to_string(&args.token_file).with_context(|| format!("read token file {}", args.token_file.display()))?;
    let secret = surge_proto::auth::parse_secret(&text).context("token file does not hold 64 hex digits")?;
    let config = ServerConfig {
        listen: args.listen,
        root: args.root,
        capacity: args.capacity,
        index: args.index,
        count: args.count,
        secret,
        owner_uid: args.owner_uid,
        owner_gid: args.owner_gid,
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads);
    }
    runtime.enable_all().build()?.block_on(surge_server::run(config))
}
