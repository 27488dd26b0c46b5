//! An instance whose servers run inside this process, on loopback ports the kernel picks:
//! what tests use to exercise a client (the FUSE operations layer, the stage planner) with
//! real servers and real TCP, but without processes, root or a mount.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use surge_meta::error::{Result, ServerError};
use surge_proto::auth::Secret;
use surge_proto::stage::StageService;
use tokio::sync::oneshot;

use surge_proto::ErrorCode;

use crate::{Server, ServerConfig};

/// Servers serving in this process until [`InProcessInstance::stop`] (or drop).
pub struct InProcessInstance {
    /// The servers' addresses, in index order.
    pub addrs: Vec<SocketAddr>,
    pub secret: Secret,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<Result<()>>>,
}

impl InProcessInstance {
    /// `count` servers sharing `capacity`, each keeping its store in `root/server-I`.
    pub async fn start(root: &Path, count: usize, capacity: u64) -> Result<InProcessInstance> {
        Self::start_with(root, count, capacity, |_, _, _| None).await
    }

    /// Like [`InProcessInstance::start`], the servers keeping two copies of each share: each
    /// holds its predecessor's mirror (in a one-server instance, its own), which the servers
    /// fill once told where to mirror ([`surge_proto::admin::MirrorTo`]).
    pub async fn start_replicated(root: &Path, count: usize, capacity: u64) -> Result<InProcessInstance> {
        Self::start_configured(root, count, capacity, 2, |_, _, _| None).await
    }

    /// Like [`InProcessInstance::start`], with a stage coordinator beside each server for which
    /// `coordinator(index, addrs, secret)` makes one (once every server is bound, so it can be
    /// told all their addresses).
    pub async fn start_with(
        root: &Path,
        count: usize,
        capacity: u64,
        coordinator: impl Fn(usize, &[SocketAddr], &Secret) -> Option<Arc<dyn StageService>>,
    ) -> Result<InProcessInstance> {
        Self::start_configured(root, count, capacity, 1, coordinator).await
    }

    async fn start_configured(
        root: &Path,
        count: usize,
        capacity: u64,
        replicas: u8,
        coordinator: impl Fn(usize, &[SocketAddr], &Secret) -> Option<Arc<dyn StageService>>,
    ) -> Result<InProcessInstance> {
        let mut secret = [0u8; surge_proto::auth::SECRET_LEN];
        getrandom::getrandom(&mut secret).map_err(|e| ServerError::new(ErrorCode::Io, format!("no randomness for the secret: {e}")))?;
        // SAFETY: geteuid/getegid take no arguments and cannot fail.
        let (owner_uid, owner_gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut servers = Vec::with_capacity(count);
        for index in 0..count {
            let config = ServerConfig {
                listen: "127.0.0.1:0".parse().expect("a loopback address"),
                root: root.join(format!("server-{index}")),
                capacity: capacity / count as u64,
                index,
                count,
                secret,
                owner_uid,
                owner_gid,
                ticket_key: None,
                root_layout: Default::default(),
                watermarks: None,
                replicas,
            };
            servers.push(Server::bind(config).await?);
        }
        let addrs: Vec<SocketAddr> = servers.iter().map(Server::local_addr).collect();
        let (mut stops, mut tasks) = (Vec::new(), Vec::new());
        for (index, server) in servers.into_iter().enumerate() {
            if let Some(c) = coordinator(index, &addrs, &secret) {
                server.attach_coordinator(c);
            }
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            tasks.push(tokio::spawn(server.serve(async move {
                let _ = stopped.await;
            })));
        }
        Ok(InProcessInstance { addrs, secret, stops, tasks })
    }

    /// Whether server `index` has stopped serving (told to, or by a client's `Shutdown`) and
    /// closed its share.
    pub fn has_stopped(&self, index: usize) -> bool {
        self.tasks[index].is_finished()
    }

    /// Stops every server and waits until they have.
    pub async fn stop(mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}
