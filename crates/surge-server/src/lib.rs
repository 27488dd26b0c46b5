//! # surge-server — one node's share of a Surge burst-buffer instance
//!
//! An instance is N of these servers, one per node. Each keeps, in a node-local directory:
//! * the metadata of the inodes homed on it ([`meta`]), in memory: an instance lives for a job;
//! * the chunks of file data it owns ([`data`]), as sparse local files, up to its capacity share.
//!
//! There is no central metadata server: clients route each request by inode number (metadata)
//! or chunk index (data), and sequence the few operations that touch two servers. [`conn`]
//! runs one client connection: challenge/response authentication first, then pipelined
//! request frames; connections that cache metadata are told of changes ([`watch`]). Servers talk to each other only for staging ([`stage`]): the server a
//! stage is submitted to coordinates it and asks the others to copy the chunks they own.

pub mod conn;
pub mod data;
pub mod meta;
pub mod stage;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use surge_proto::auth::Secret;
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub struct ServerConfig {
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub capacity: u64,
    pub index: usize,
    pub count: usize,
    pub secret: Secret,
    pub owner_uid: u32,
    pub owner_gid: u32,
}

/// State shared by all connections of one server.
pub struct Shared {
    pub index: usize,
    pub count: usize,
    pub secret: Secret,
    pub meta: Mutex<meta::MetaStore>,
    pub data: data::DataStore,
    /// Where `data` keeps its files, for clients on this node (None: not identifiable).
    pub local: Option<surge_proto::LocalData>,
    pub stages: Arc<stage::Stages>,
    /// Connections that cache metadata, told of changes (see [`watch`]).
    pub watchers: watch::Watchers,
    pub shutdown: Notify,
}

/// Binds, announces readiness by writing `<root>/ready` (the bound address, written under a
/// temporary name then renamed, so a launcher never reads half of it), and serves until a
/// client sends `Shutdown` or the process gets SIGTERM/SIGINT.
pub async fn run(config: ServerConfig) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.root).with_context(|| format!("create {}", config.root.display()))?;
    let data = data::DataStore::open(&config.root.join("data"), config.capacity)
        .with_context(|| format!("open data directory under {}", config.root.display()))?;
    let stages = stage::Stages::open(&config.root.join("stages"), config.listen.ip(), config.secret)
        .with_context(|| format!("open the stage journal under {}", config.root.display()))?;
    stages.start_journal();
    let local = match data.local_data() {
        Ok(local) => Some(local),
        Err(e) => {
            tracing::warn!("clients on this node will not read or write the data directory themselves: {e}");
            None
        }
    };
    let shared = Arc::new(Shared {
        index: config.index,
        count: config.count,
        secret: config.secret,
        meta: Mutex::new(meta::MetaStore::new(config.index, config.owner_uid, config.owner_gid)),
        data,
        local,
        stages,
        watchers: Default::default(),
        shutdown: Notify::new(),
    });
    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("bind {}", config.listen))?;
    let local = listener.local_addr()?;
    let ready = config.root.join("ready");
    let tmp = config.root.join("ready.tmp");
    std::fs::write(&tmp, local.to_string())?;
    std::fs::rename(&tmp, &ready)?;
    tracing::info!(index = config.index, count = config.count, addr = %local, capacity = config.capacity, "server ready");

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        if let Err(e) = conn::serve(shared, stream, peer).await {
                            tracing::debug!(%peer, "connection ended: {e:#}");
                        }
                    });
                }
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = shared.shutdown.notified() => {
                tracing::info!("shutdown requested by a client");
                break;
            }
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM");
                break;
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let _ = std::fs::remove_file(&ready);
    Ok(())
}
