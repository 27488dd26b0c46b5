//! `surge-server`: runs one node's share of a Surge instance. Normally started by `surge up`
//! (locally, or on each node through the scheduler's launcher), not by hand.
//!
//! The daemon composes two libraries and adds nothing of its own: the data server
//! ([`surge_server`]) and, beside it, a stage coordinator ([`surge_stage`]) that answers the
//! staging requests the server receives (and, beside server 0, the retention keeper).
//! Signals and logging are set up here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use surge_proto::placement::DirLayout;
use surge_server::{Server, ServerConfig};
use surge_stage::{Coordinator, CoordinatorConfig, Peers};

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
    /// The instance's stripe chunk size in bytes (what its clients use).
    #[arg(long, default_value_t = 1 << 20)]
    chunk_size: u64,
    /// The instance's descriptor, where the coordinator beside this server finds the other
    /// servers' addresses when a stage starts (needed when --count is above 1).
    #[arg(long)]
    instance_file: Option<PathBuf>,
    /// Check each request's permissions against the client's uid and gid as MUNGE proves
    /// them (for an instance several users share; munged must run on every node), data
    /// requests by tickets made with the key in this file (64 hex digits, the same for every
    /// server of the instance, readable by no client).
    #[arg(long)]
    ticket_key_file: Option<PathBuf>,
    /// Where the files of a fresh instance's root directory go (its directories inherit it):
    /// `striped` over all servers, or `node-local` on the creating node's server. A server
    /// restarted on its directory keeps what the root has.
    #[arg(long, default_value_t = DirLayout::Striped)]
    layout: DirLayout,
    /// Back-pressure: past this fraction of its share filled, writes wait for room instead of
    /// failing (with --low-water and --pressure-wait).
    #[arg(long, requires = "low_water")]
    high_water: Option<f64>,
    /// Writes held at the high-water mark go on once the share is back down to this fraction.
    #[arg(long, requires = "high_water")]
    low_water: Option<f64>,
    /// Seconds a write waits at the high-water mark before it fails with ENOSPC.
    #[arg(long, default_value_t = 60.0)]
    pressure_wait: f64,
    /// Copies of each share the instance keeps: with 2, this server mirrors its share on the
    /// next server once told where, and keeps the previous server's mirror, which it can
    /// serve when that server is lost.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    replicas: u8,
    /// Worker threads (default: number of cores).
    #[arg(long)]
    threads: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: logs go to files and test output too.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    anyhow::ensure!(args.index < args.count, "--index {} must be below --count {}", args.index, args.count);
    let text = std::fs::read_to_string(&args.token_file).with_context(|| format!("read token file {}", args.token_file.display()))?;
    let secret = surge_proto::auth::parse_secret(&text).context("token file does not hold 64 hex digits")?;
    let ticket_key = match &args.ticket_key_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("read ticket key file {}", path.display()))?;
            Some(surge_proto::ticket::parse_key(&text).context("ticket key file does not hold 64 hex digits")?)
        }
        None => None,
    };
    let watermarks =
        surge_proto::workflow::Watermarks::given(args.high_water, args.low_water, args.pressure_wait).map_err(anyhow::Error::msg)?;
    let config = ServerConfig {
        listen: args.listen,
        root: args.root.clone(),
        capacity: args.capacity,
        index: args.index,
        count: args.count,
        secret,
        owner_uid: args.owner_uid,
        owner_gid: args.owner_gid,
        ticket_key,
        root_layout: args.layout,
        watermarks,
        replicas: args.replicas,
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads);
    }
    runtime.enable_all().build()?.block_on(async move {
        let server = Server::bind(config).await?;
        let peers = match (args.count, args.instance_file) {
            // A one-server instance (or a private-mode node): the coordinator's only peer is
            // the server beside it.
            (1, _) => Some(Peers::Fixed(vec![server.local_addr()])),
            (count, Some(path)) => Some(Peers::Descriptor { path, count }),
            (_, None) => None,
        };
        match peers {
            Some(peers) => {
                let config = CoordinatorConfig { peers, chunk_size: args.chunk_size, secret, node: args.listen.ip() };
                if args.index == 0 {
                    // One keeper per instance applies the retention policies.
                    tokio::spawn(surge_stage::retention::keep(config.clone()));
                }
                tokio::spawn(surge_stage::purges::keep(config.clone(), args.index));
                let journal = args.root.join("stages");
                let coordinator =
                    Coordinator::open(&journal, config).with_context(|| format!("open the stage journal in {}", journal.display()))?;
                server.attach_coordinator(Arc::new(coordinator));
            }
            None => tracing::warn!("started without --instance-file: stages submitted to this server will be refused"),
        }
        server.serve(stop_signal()).await?;
        Ok::<_, anyhow::Error>(())
    })
}

/// Completes on SIGTERM or SIGINT.
async fn stop_signal() {
    let Ok(mut sigterm) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        tracing::warn!("cannot watch for SIGTERM; stop this server with a client's shutdown or SIGINT");
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
    }
}
