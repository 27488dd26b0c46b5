//! A server as a whole: its configuration, the state its connections share
//! ([`ServerState`]), and the loop that accepts them until it is told to stop.
//!
//! Invariants: each feature owns its state (a field of [`ServerState`] of the feature's own
//! type) and acts on the journal path only through a [`ChangeHook`]; every change of the
//! namespace share is journaled by [`ServerState::journal_changes`], with the metadata lock
//! held, so a record holds the changes of whole steps.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use surge_meta::error::{Result, ServerError};
use surge_meta::journal;
use surge_meta::poison_free::LockRecover;
use surge_meta::MetaStore;
use surge_proto::auth::Secret;
use surge_proto::stage::StageService;
use surge_proto::ticket::TicketKey;
use surge_proto::transport;
use surge_proto::ErrorCode;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Notify;

use crate::{conn, data, mirror, watch};

#[derive(Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub capacity: u64,
    pub index: usize,
    pub count: usize,
    pub secret: Secret,
    pub owner_uid: u32,
    pub owner_gid: u32,
    /// `Some`: check every request's permissions against the client's MUNGE-proven uid and
    /// gid (see [`surge_proto::identity`]), data requests by tickets made with this key,
    /// which every server of the instance and no client holds (see [`surge_proto::ticket`]).
    /// `None`: an instance-token holder is trusted as it says (the kernel's checks on a
    /// mount, or a single-user instance).
    pub ticket_key: Option<TicketKey>,
    /// The layout a fresh instance's root directory gets (the instance's default; one
    /// replayed from its journal keeps the root's own).
    pub root_layout: surge_proto::placement::DirLayout,
    /// Back-pressure: writers wait past a high-water mark instead of failing (None: they
    /// fail with ENOSPC when the share is full).
    pub watermarks: Option<surge_proto::workflow::Watermarks>,
    /// Copies of each share the instance keeps: 2 mirrors this share on the next server
    /// (once told where, [`surge_proto::admin::MirrorTo`]) and the previous server's here
    /// (see [`crate::mirror`]). Clients then write only through the servers: no local writes,
    /// no kernel passthrough, whose bytes the server would not see.
    pub replicas: u8,
}

/// One server's state: its namespace and data shares and every feature's state, shared by all
/// its connections (and its mirror link and failover tasks).
pub struct ServerState {
    pub index: usize,
    pub count: usize,
    pub secret: Secret,
    /// See [`ServerConfig::ticket_key`].
    pub ticket_key: Option<TicketKey>,
    pub meta: Mutex<MetaStore>,
    pub data: data::DataStore,
    /// Where `data` keeps its files, for clients on this node (None: not identifiable).
    pub local: Option<surge_proto::LocalData>,
    /// Answers staging requests other than chunk copies (see [`Server::attach_coordinator`]).
    coordinator: OnceLock<Arc<dyn StageService>>,
    /// Connections that cache metadata, told of changes (see [`watch`]).
    pub watchers: watch::Watchers,
    pub shutdown: Notify,
    /// Where the namespace share's changes go to survive a restart.
    pub journal: Arc<journal::Journal>,
    /// Byte-range locks on the files homed here.
    pub(crate) locks: crate::locks::Locks,
    /// Directories delegated to a client (see [`crate::delegations`]).
    pub(crate) delegations: crate::delegations::Delegations,
    /// Publication logs' readers and the back-pressure on writers (see [`crate::workflow`]).
    pub(crate) workflow: crate::workflow::Workflow,
    /// Mirroring this share, the share mirrored here, failover (see [`mirror`]).
    pub replication: mirror::Replication,
    /// How this share was opened (a stand-in is opened alike).
    pub(crate) config: ServerConfig,
}

/// What a feature does each time the share's changes are journaled
/// ([`ServerState::journal_changes`]), with the metadata lock held: so that the journal path
/// needs to know no feature.
pub(crate) trait ChangeHook {
    /// Before the changes are taken: the feature's own changes to `meta`, journaled with them.
    fn before_journaling(&self, _meta: &mut MetaStore) {}
    /// Once they are appended to the journal.
    fn after_journaling(&self, _meta: &MetaStore) {}
}

impl ServerState {
    /// The features that act when the share's changes are journaled, in this order.
    fn change_hooks(&self) -> [&dyn ChangeHook; 2] {
        [&self.delegations, &self.workflow]
    }

    /// Journals what the steps run on `meta` changed since the last call; the record's
    /// sequence number (see [`ServerState::durable`]). Call with the lock held.
    pub fn journal_changes(&self, meta: &mut MetaStore) -> u64 {
        let hooks = self.change_hooks();
        for hook in hooks {
            hook.before_journaling(meta);
        }
        let appended = self.journal.append(meta.take_changes());
        for hook in hooks {
            hook.after_journaling(meta);
        }
        if appended.fold_due {
            if let Err(e) = self.journal.fold(meta) {
                tracing::error!("could not fold the metadata journal into a snapshot: {e}");
            }
        }
        appended.seq
    }

    /// Completes once journal record `seq` (and every one before it) is durable, and on the
    /// mirror while it is in step; or fails once it cannot be durable (see
    /// [`journal::Journal::durable`]).
    pub async fn durable(&self, seq: u64) -> Result<()> {
        self.journal.durable(seq).await?;
        self.replication.feed.journal_reached(seq).await;
        Ok(())
    }

    /// The stage coordinator beside this server.
    pub fn coordinator(&self) -> Result<&Arc<dyn StageService>> {
        self.coordinator.get().ok_or_else(|| ServerError::new(ErrorCode::NotSupported, "no stage coordinator runs beside this server"))
    }
}

impl ServerState {
    /// Opens the share under `config.root`: its data directory (accounting for what an
    /// earlier run left there) and its namespace as the journal left it.
    pub fn open(config: ServerConfig) -> Result<Arc<ServerState>> {
        std::fs::create_dir_all(&config.root).map_err(|e| ServerError::os(&format!("create {}", config.root.display()), e))?;
        // The share is its owner's alone: data files are made with the umask's modes, and a
        // user's files must not be readable behind the instance's permission checks.
        std::fs::set_permissions(&config.root, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(|e| ServerError::os(&format!("restrict {} to its owner", config.root.display()), e))?;
        let feed = Arc::new(mirror::Feed::new(config.replicas));
        let data = data::DataStore::open(&config.root.join("data"), config.capacity)
            .map_err(|e| ServerError::os(&format!("open data directory under {}", config.root.display()), e))?
            .with_mirror(feed.clone());
        // With replicas, clients write only through the servers (what they write to a data
        // file themselves would not reach the mirror); they read the files themselves still.
        let local = match data.local_data() {
            Ok(local) => Some(surge_proto::LocalData { writes: config.replicas == 1, ..local }),
            Err(e) => {
                tracing::warn!("clients on this node will not read or write the data directory themselves: {e}");
                None
            }
        };
        // The namespace share as the journal left it (a fresh one the first time).
        let mut meta = MetaStore::with_root_layout(config.index, config.owner_uid, config.owner_gid, config.root_layout);
        let (journal, orphans) = journal::Journal::open(&config.root, &mut meta, feed.clone())
            .map_err(|e| ServerError::os(&format!("replay the metadata journal under {}", config.root.display()), e))?;
        for ino in orphans {
            // Unlinked while a client had it open, before the stop: nobody has it now.
            let _ = data.purge(ino);
        }
        let delegations = crate::delegations::Delegations::restored(meta.delegations());
        let replica = (config.replicas > 1)
            .then(|| Mutex::new(mirror::replica::Replica::new(&config.root, surge_proto::mirror::mirrored_by(config.index, config.count))));
        let server = Arc::new(ServerState {
            index: config.index,
            count: config.count,
            secret: config.secret,
            ticket_key: config.ticket_key,
            meta: Mutex::new(meta),
            journal,
            data,
            local,
            coordinator: OnceLock::new(),
            watchers: Default::default(),
            locks: Default::default(),
            delegations,
            workflow: crate::workflow::Workflow::new(config.watermarks, config.capacity),
            shutdown: Notify::new(),
            replication: mirror::Replication::new(feed, replica),
            config,
        });
        server.reopen_stand_in()?;
        Ok(server)
    }

    /// Mirrors this share on the server at `to` from now on (None: on none), with automatic
    /// failover when `failover` says how.
    pub fn mirror_to(self: &Arc<Self>, to: Option<SocketAddr>, failover: Option<mirror::failover::Plan>) {
        replace_task(&self.replication.link, || {
            let epoch = self.replication.feed.close();
            to.map(|to| mirror::link::start(self.clone(), to, epoch))
        });
        replace_task(&self.replication.failover, || failover.map(|plan| mirror::failover::start(self.clone(), plan)));
    }

    /// Serves server `index`'s share (this server's predecessor, lost) from its mirror here.
    pub fn take_over(&self, index: usize) -> Result<()> {
        let replica = self
            .replication
            .replica
            .as_ref()
            .ok_or_else(|| ServerError::new(ErrorCode::NotSupported, "this instance keeps one replica"))?;
        if index == self.index {
            // A one-server instance mirrors its share on itself: that copy cannot stand in
            // for a share that is still served (taking it over would stop the mirror link,
            // which then stops this server).
            return Err(ServerError::new(ErrorCode::Invalid, format!("server {index} cannot take its own share over")));
        }
        let mut replica = replica.lock_or_recover();
        if replica.from() != index {
            return Err(ServerError::new(
                ErrorCode::Invalid,
                format!("server {index} is not this server's predecessor ({})", replica.from()),
            ));
        }
        replica.can_take_over()?;
        let share = self.open_stand_in(&replica)?;
        replica.mark_taken_over()?;
        tracing::warn!(index, "serving lost server {index}'s share from its mirror here");
        self.replication.stand_ins.lock_or_recover().insert(index, share);
        Ok(())
    }

    /// The share of `replica`'s server, opened from its mirror here (its journal replayed).
    fn open_stand_in(&self, replica: &mirror::replica::Replica) -> Result<Arc<ServerState>> {
        let config = ServerConfig { root: replica.dir().to_path_buf(), index: replica.from(), replicas: 1, ..self.config.clone() };
        ServerState::open(config)
    }

    /// A share taken over before this server last stopped is served again.
    fn reopen_stand_in(&self) -> Result<()> {
        let Some(replica) = &self.replication.replica else { return Ok(()) };
        let replica = replica.lock_or_recover();
        if replica.taken_over() {
            let share = self.open_stand_in(&replica)?;
            tracing::warn!(
                index = replica.from(),
                "serving lost server {}'s share from its mirror here (taken over earlier)",
                replica.from()
            );
            self.replication.stand_ins.lock_or_recover().insert(replica.from(), share);
        }
        Ok(())
    }

    /// The share a client names in its hello: this server's, or one it stands in for.
    pub fn share(self: &Arc<Self>, index: Option<u32>) -> Option<Arc<ServerState>> {
        match index {
            None => Some(self.clone()),
            Some(i) if i as usize == self.index => Some(self.clone()),
            Some(i) => self.replication.stand_ins.lock_or_recover().get(&(i as usize)).cloned(),
        }
    }

    /// A clean stop: each namespace share served here as one snapshot, for a quick restart.
    fn close(self: &Arc<Self>) -> Result<()> {
        // Stopped as `MirrorTo` none stops it, through the feed, so that a change a client
        // still connected makes (an in-process server's) waits for no acknowledgement.
        self.mirror_to(None, None);
        let stand_ins: Vec<Arc<ServerState>> = self.replication.stand_ins.lock_or_recover().drain().map(|(_, share)| share).collect();
        for share in stand_ins {
            share.close()?;
        }
        let meta = self.meta.lock_or_recover();
        self.journal.close(&meta).map_err(|e| ServerError::os("write the metadata snapshot", e))
    }
}

/// Aborts the task in `slot`, if any, then puts there the one `next` starts (if any).
fn replace_task(slot: &Mutex<Option<tokio::task::AbortHandle>>, next: impl FnOnce() -> Option<tokio::task::AbortHandle>) {
    let mut slot = slot.lock_or_recover();
    if let Some(old) = slot.take() {
        old.abort();
    }
    *slot = next();
}

/// A server bound to its address, not yet serving.
pub struct Server {
    state: Arc<ServerState>,
    listener: TcpListener,
    /// The Unix socket clients on this node reach it by (`surge_proto::transport`).
    local: Option<UnixListener>,
    root: PathBuf,
}

impl Server {
    /// Opens the data directory under `config.root` (accounting for what an earlier run left
    /// there) and binds the listening address.
    pub async fn bind(config: ServerConfig) -> Result<Server> {
        let server = ServerState::open(config.clone())?;
        let listener = TcpListener::bind(config.listen).await.map_err(|e| ServerError::os(&format!("bind {}", config.listen), e))?;
        let addr = listener.local_addr()?;
        // Without it, clients on this node come by TCP like any other: slower, no less right.
        let local = transport::bind_local(addr).unwrap_or_else(|e| {
            tracing::warn!(%addr, "no Unix socket for clients on this node ({e}): they connect by TCP");
            None
        });
        Ok(Server { state: server, listener, local, root: config.root })
    }

    /// The address the server listens on (the port chosen, when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Hands the staging requests this server receives (submissions, status, cancel...) to
    /// `coordinator`. Without one they are refused with NotSupported; chunk copies, which
    /// each server does for its own chunks, are answered either way.
    pub fn attach_coordinator(&self, coordinator: Arc<dyn StageService>) {
        if self.state.coordinator.set(coordinator).is_err() {
            tracing::warn!("a stage coordinator was attached already; the second one is ignored");
        }
    }

    /// Announces readiness by writing `<root>/ready` (the bound address, written under a
    /// temporary name then renamed, so a launcher never reads half of it), then serves until
    /// a client sends `Shutdown` or `stop` completes.
    pub async fn serve(self, stop: impl Future<Output = ()>) -> Result<()> {
        let Server { state: server, listener, local, root } = self;
        let addr = listener.local_addr()?;
        let ready = root.join("ready");
        let tmp = root.join("ready.tmp");
        std::fs::write(&tmp, addr.to_string())?;
        std::fs::rename(&tmp, &ready)?;
        tracing::info!(index = server.index, count = server.count, %addr, capacity = server.data.capacity(), "server ready");
        tokio::pin!(stop);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        keep_alive(&stream);
                        match transport::split_tcp(stream) {
                            Ok(halves) => spawn_connection(&server, halves, peer),
                            Err(e) => tracing::debug!(%peer, "connection not set up: {e}"),
                        }
                    }
                    Err(e) => accept_failed(e).await,
                },
                accepted = accept_local(local.as_ref()) => match accepted {
                    Ok(stream) => spawn_connection(&server, transport::split_unix(stream), addr),
                    Err(e) => accept_failed(e).await,
                },
                _ = server.shutdown.notified() => {
                    tracing::info!("shutdown requested (by a client, or by the mirror link: see above)");
                    break;
                }
                _ = &mut stop => break,
            }
        }
        let _ = std::fs::remove_file(&ready);
        // What holders of delegations answered goes into the shares before their snapshots.
        let stand_ins: Vec<Arc<ServerState>> = server.replication.stand_ins.lock_or_recover().values().cloned().collect();
        for share in std::iter::once(&server).chain(&stand_ins) {
            share.delegations.give_all_back_before_stop(&share.watchers).await;
        }
        server.close()
    }
}

/// Serves a client's connection in a task of its own.
fn spawn_connection(server: &Arc<ServerState>, halves: (transport::ReadHalf, transport::WriteHalf), peer: SocketAddr) {
    let server = server.clone();
    tokio::spawn(async move {
        if let Err(e) = conn::serve(server, halves, peer).await {
            tracing::debug!(%peer, "connection ended: {e}");
        }
    });
}

/// The next client on this node, if the server has a socket for them (else never).
async fn accept_local(local: Option<&UnixListener>) -> std::io::Result<tokio::net::UnixStream> {
    match local {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// Out of descriptors and the like: back off instead of spinning.
async fn accept_failed(e: std::io::Error) {
    tracing::warn!("accept failed: {e}");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

/// Probes an idle connection, so that one whose client's node died without a word (power,
/// link) ends within about 25 s, with everything it held: open handles, reserved room and
/// the locks its processes had.
fn keep_alive(stream: &tokio::net::TcpStream) {
    let probes = socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(10))
        .with_interval(std::time::Duration::from_secs(5))
        .with_retries(3);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::debug!("keepalive not set on a connection: {e}");
    }
}
