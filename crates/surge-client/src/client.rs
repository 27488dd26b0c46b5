//! The client: an instance's servers, one connection to each (opened on first use, replaced
//! when it breaks), and the calls sent over them. Metadata calls go to the home server of the
//! inode they name; data calls to the server that holds the chunk (see
//! [`surge_proto::placement`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use surge_proto::admin::{Batch, BatchOutcome, Shutdown, StatFs, WriteBack};
use surge_proto::auth::Secret;
use surge_proto::ino::{self, Ino};
use surge_proto::namespace::NamespaceRequest;
use surge_proto::placement::{DirLayout, Layout};
use surge_proto::{Call, ErrorCode, Request, ServerStats};
use tokio::sync::Mutex as AsyncMutex;

use crate::conn::{Answer, Connection, Dial, Pending, Watcher};
use crate::descriptor::{InstanceDescriptor, Mode};
use crate::error::{Error, Result};
use crate::local;
use crate::options::ClientOptions;

/// Namespace steps per batch frame: their answers (an entry with its attributes and a name of
/// up to 255 bytes each, at most) then stay well inside a frame.
pub const BATCH_STEPS: usize = 1024;

/// With automatic failover, how much longer than the instance's delay a request waits for a
/// lost server's share to be taken over, and how often it looks.
const FAILOVER_MARGIN: Duration = Duration::from_secs(10);
const FAILOVER_POLL: Duration = Duration::from_millis(500);

/// How a client finds the shares of an instance with two copies of each.
struct Replication {
    /// With automatic failover: how long to wait for a lost server's share to be taken over.
    failover_wait: Option<Duration>,
}

/// How long a step retries while the entry it needs is locked by a rename in progress.
pub(crate) const BUSY_RETRY_FOR: Duration = Duration::from_secs(5);

/// What [`Client::call_on_busy`] does with a `Busy` answer (an entry locked by a rename
/// between servers in progress).
#[derive(Clone, Copy, Debug)]
pub(crate) enum OnBusy {
    /// Asks again for a while: the rename holding the entry ends soon.
    Wait,
    /// Answers it: for a step sent while the caller holds an entry locked itself, where
    /// waiting could wait forever for a rename that waits for the caller's entry.
    Return,
}
/// How long a step retries while another client's delegation of its directory is recalled:
/// twice what a server gives a holder before it takes the delegation back (5 s), so that
/// even a holder that never answers costs a delay, not an error.
const RECALL_RETRY_FOR: Duration = Duration::from_secs(10);
/// The first and the longest pause before asking again while a delegation is recalled
/// (the pause doubles in between).
const RECALL_FIRST_RETRY: Duration = Duration::from_micros(100);
const RECALL_LAST_RETRY: Duration = Duration::from_millis(20);

struct ServerSlot {
    addr: std::net::SocketAddr,
    /// Where the server's share is served once the server is lost and its successor took it
    /// over (instances with two replicas).
    standby: Option<SocketAddr>,
    /// The share was found there: the lost server is not dialled again.
    on_standby: std::sync::atomic::AtomicBool,
    /// Held while a connection is being opened, so that only one is.
    conn: AsyncMutex<Option<Arc<Connection>>>,
    /// The connection last opened, for senders that cannot wait (and every request's fast
    /// path): readable at any time, never held across an await. A lock that an opening
    /// holds (as `conn` is) would make them find no connection while one is live, and
    /// drop what they meant to send.
    live: std::sync::RwLock<Option<Arc<Connection>>>,
}

impl ServerSlot {
    fn live(&self) -> Option<Arc<Connection>> {
        self.live.read().unwrap().as_ref().filter(|conn| !conn.is_broken()).cloned()
    }
}

struct Inner {
    servers: Vec<ServerSlot>,
    /// Set by [`Client::watch`]; connections opened afterwards ask for change notices.
    watcher: std::sync::OnceLock<Arc<dyn Watcher>>,
    layout: Layout,
    secret: Secret,
    session: u64,
    opts: ClientOptions,
    /// Data files of servers on this node held open for local I/O, by every open file.
    local_files: std::sync::atomic::AtomicUsize,
    /// Started on the first local write.
    local_writer: std::sync::OnceLock<local::LocalWriter>,
    /// What the directories of this instance are supposed to have ([`InstanceDescriptor::layout`]).
    default_layout: DirLayout,
    /// The server of this node that holds the files it creates in node-local directories
    /// (None: no server runs here); found on first need ([`Client::near_server`]).
    near_server: std::sync::OnceLock<Option<usize>>,
    /// With automatic failover: how long a request to a server that cannot be reached waits
    /// for its share to be taken over before it fails.
    failover_wait: Option<Duration>,
    /// When each server last refused to set capacity aside for a passthrough handle (its
    /// share was full; see [`crate::passthrough`]).
    refusals: std::sync::Mutex<std::collections::HashMap<usize, std::time::Instant>>,
    /// What the servers were last told of the data files passed through to the kernel here.
    passthrough_reports: crate::passthrough::ReportedStates,
    /// Answers no caller waits for ([`crate::background`]).
    background: Arc<crate::background::Background>,
}

/// Most server data files held open for local I/O at once. This machine class allows 20,000
/// descriptors per process; a file opened past this is read over the network instead.
const MAX_LOCAL_FILES: usize = 4096;

/// A connection to one instance. Cheap to clone; all clones share connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Owner stamped on what this handle creates (see [`Client::as_user`]).
    uid: u32,
    gid: u32,
}

/// The first failure among `outcomes`, if any.
pub(crate) fn first_failure(outcomes: Vec<Result<()>>) -> Result<()> {
    outcomes.into_iter().find_map(|outcome| outcome.err()).map_or(Ok(()), Err)
}

/// How much longer than an instance's pressure wait a request may take before its server is
/// deemed unresponsive (the held write's answer, ENOSPC at worst, comes within the wait).
const HELD_WRITE_MARGIN: Duration = Duration::from_secs(10);

impl Client {
    /// Connects to the instance a descriptor describes. Servers are dialled lazily, on first use.
    pub fn new(desc: &InstanceDescriptor, opts: ClientOptions) -> Result<Client> {
        let addrs: Vec<SocketAddr> = match desc.mode {
            Mode::Striped => desc.servers.iter().map(|s| s.addr).collect(),
            Mode::Private => {
                // Each server is a namespace of its own (started as server 0 of 1): this
                // client sees only its node's server.
                let local = match opts.node {
                    Some(ip) => desc.servers.iter().find(|s| s.addr.ip() == ip).ok_or_else(|| {
                        Error::new(
                            ErrorCode::Invalid,
                            format!("private mode: no server of instance '{}' runs on this node ({ip})", desc.name),
                        )
                    })?,
                    None => desc.servers.first().ok_or_else(|| Error::new(ErrorCode::Invalid, "instance has no servers"))?,
                };
                vec![local.addr]
            }
        };
        let mut opts = opts;
        if let Some(marks) = desc.watermarks {
            // A write may be held on a server past its high-water mark for the pressure wait:
            // it is not to be given up as a silent server before that.
            opts.timeout = opts.timeout.max(Duration::from_secs_f64(marks.wait_secs) + HELD_WRITE_MARGIN);
        }
        let replication = match desc.mode {
            Mode::Striped if desc.replicas > 1 => Some(Replication {
                // The take-over comes within the delay and a few seconds of checks.
                failover_wait: desc.failover_after.map(|secs| Duration::from_secs_f64(secs) + FAILOVER_MARGIN),
            }),
            _ => None,
        };
        Client::assemble(addrs, desc.chunk_size, desc.read_secret()?, opts, desc.layout, replication)
    }

    /// Connects to the servers at `addrs` (in server-index order) of an instance with this
    /// chunk size and secret: what the stage coordinator uses to reach the servers.
    pub fn from_parts(addrs: Vec<SocketAddr>, chunk_size: u64, secret: Secret, opts: ClientOptions) -> Result<Client> {
        Client::assemble(addrs, chunk_size, secret, opts, DirLayout::default(), None)
    }

    /// [`Client::from_parts`], supposing directories lay files out `default_layout` (the
    /// instance's) until a server says otherwise; with `replication`, a server's share is
    /// looked for on the next server when the server cannot be reached.
    fn assemble(
        addrs: Vec<SocketAddr>,
        chunk_size: u64,
        secret: Secret,
        opts: ClientOptions,
        default_layout: DirLayout,
        replication: Option<Replication>,
    ) -> Result<Client> {
        if addrs.is_empty() {
            return Err(Error::new(ErrorCode::Invalid, "instance has no servers"));
        }
        if chunk_size == 0 {
            return Err(Error::new(ErrorCode::Invalid, "chunk size must not be 0"));
        }
        let mut session = [0u8; 8];
        getrandom::getrandom(&mut session).map_err(|e| Error::new(ErrorCode::Io, e.to_string()))?;
        let layout = Layout::new(chunk_size, addrs.len());
        let count = addrs.len();
        let servers = (0..count)
            .map(|i| ServerSlot {
                addr: addrs[i],
                standby: (replication.is_some() && count > 1).then(|| addrs[surge_proto::mirror::mirror_of(i, count)]),
                on_standby: Default::default(),
                conn: AsyncMutex::new(None),
                live: Default::default(),
            })
            .collect();
        let (uid, gid) = (opts.uid, opts.gid);
        Ok(Client {
            inner: Arc::new(Inner {
                servers,
                watcher: Default::default(),
                layout,
                secret,
                session: u64::from_le_bytes(session),
                opts,
                local_files: Default::default(),
                local_writer: Default::default(),
                default_layout,
                near_server: Default::default(),
                failover_wait: replication.and_then(|r| r.failover_wait),
                refusals: Default::default(),
                passthrough_reports: Default::default(),
                background: Default::default(),
            }),
            uid,
            gid,
        })
    }

    /// The answers this client left to the background ([`crate::background`]).
    pub(crate) fn background(&self) -> &Arc<crate::background::Background> {
        &self.inner.background
    }

    /// Asks every server for notices of changes made by others to what this client was told
    /// (for a client that caches metadata, such as the FUSE mount). Call before the first
    /// request: connections already open do not watch. Returns false if a watcher was set.
    pub fn watch(&self, watcher: Arc<dyn Watcher>) -> bool {
        self.inner.watcher.set(watcher).is_ok()
    }

    /// Tells this client's own watcher that inode `ino`'s attributes changed, as a server
    /// tells other clients' watchers: for a change this client answered before its home applied
    /// it (a delegation's write-back). The servers tell no client of its own changes, and
    /// what its caches took from the home before the write-back (another name's link count)
    /// would otherwise stay.
    pub(crate) fn tell_own_watcher(&self, ino: Ino) {
        if let Some(watcher) = self.inner.watcher.get() {
            watcher.notice(surge_proto::admin::Notice::Attr { ino }, crate::Seen::none());
        }
    }

    /// The servers' addresses, in index order.
    pub fn server_addrs(&self) -> Vec<SocketAddr> {
        self.inner.servers.iter().map(|s| s.addr).collect()
    }

    /// Owner stamped on what this handle creates.
    pub fn identity(&self) -> (u32, u32) {
        (self.uid, self.gid)
    }

    /// Loads `$SURGE_HOME/instances/NAME.json` and connects.
    pub fn for_instance(name: &str, opts: ClientOptions) -> Result<Client> {
        Client::new(&InstanceDescriptor::load(name)?, opts)
    }

    /// The same connections, creating files and directories owned by `uid:gid` (a FUSE
    /// mount creates on behalf of whichever user asked).
    pub fn as_user(&self, uid: u32, gid: u32) -> Client {
        Client { inner: self.inner.clone(), uid, gid }
    }

    pub fn server_count(&self) -> usize {
        self.inner.servers.len()
    }

    pub fn chunk_size(&self) -> u64 {
        self.inner.layout.chunk_size()
    }

    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// Write-behind / read-ahead window that keeps every server busy from one stream: two
    /// chunks per server, at least 2 MiB.
    pub fn stream_window(&self) -> u64 {
        (2 * self.chunk_size() * self.server_count() as u64).max(2 << 20)
    }

    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// The layout new directories are supposed to inherit until their parent's home says
    /// otherwise (see [`surge_proto::DirInheritance`]).
    pub(crate) fn default_layout(&self) -> DirLayout {
        self.inner.default_layout
    }

    /// This node's server, to which the files this client creates in a node-local directory
    /// go: one whose address is this node's (`ClientOptions::node` when set, else any address
    /// this host holds). Where several are (one machine running a whole instance), each
    /// client takes one of them by its session, so that clients spread over them. None in an
    /// instance of one server (which holds everything anyway) and where no server runs here.
    pub fn near_server(&self) -> Option<usize> {
        *self.inner.near_server.get_or_init(|| {
            let addrs = self.server_addrs();
            if addrs.len() == 1 {
                return None;
            }
            let here = |ip: std::net::IpAddr| match self.inner.opts.node {
                Some(node) => ip == node,
                None => crate::options::is_this_hosts(ip),
            };
            let near: Vec<usize> = addrs.iter().enumerate().filter(|(_, addr)| here(addr.ip())).map(|(i, _)| i).collect();
            (!near.is_empty()).then(|| near[(self.inner.session % near.len() as u64) as usize])
        })
    }

    /// Server `server` refused to set capacity aside: its share is full.
    pub(crate) fn note_refusal(&self, server: usize) {
        self.inner.refusals.lock().unwrap().insert(server, std::time::Instant::now());
    }

    pub(crate) fn passthrough_reports(&self) -> &crate::passthrough::ReportedStates {
        &self.inner.passthrough_reports
    }

    /// Whether `server` refused to set capacity aside within the last `within`.
    pub(crate) fn refused_lately(&self, server: usize, within: Duration) -> bool {
        self.inner.refusals.lock().unwrap().get(&server).is_some_and(|at| at.elapsed() < within)
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.inner.opts.timeout
    }

    pub(crate) fn reclaim_for(&self) -> Duration {
        self.inner.opts.reclaim_for
    }

    // ------------------------------------------------------------ transport

    /// Whether this client reaches `server` over the server's Unix socket (it is on this
    /// node: see `surge_proto::transport`) rather than TCP; connects first if need be.
    pub async fn over_local_socket(&self, server: usize) -> Result<bool> {
        Ok(self.connection(server).await?.over_local_socket())
    }

    pub(crate) async fn connection(&self, server: usize) -> Result<Arc<Connection>> {
        let slot =
            self.inner.servers.get(server).ok_or_else(|| Error::new(ErrorCode::Stale, format!("no server {server} in this instance")))?;
        if let Some(conn) = slot.live() {
            return Ok(conn);
        }
        let mut guard = slot.conn.lock().await;
        if let Some(conn) = guard.as_ref() {
            if !conn.is_broken() {
                return Ok(conn.clone());
            }
        }
        let opts = &self.inner.opts;
        let dial = Dial { source: opts.node, local_socket: opts.local_socket, timeout: opts.timeout, await_watchers: opts.await_watchers };
        let open = |addr, share| {
            let watcher = self.inner.watcher.get().map(|w| (w.clone(), server));
            Connection::open(addr, dial, &self.inner.secret, self.inner.session, watcher, share)
        };
        use std::sync::atomic::Ordering;
        let conn = match slot.standby {
            Some(standby) if slot.on_standby.load(Ordering::Relaxed) => open(standby, Some(server as u32)).await?,
            None => open(slot.addr, None).await?,
            Some(standby) => match open(slot.addr, None).await {
                Ok(conn) => conn,
                Err(lost) if lost.code.is_lost_contact() => {
                    // The share may be served by the next server, which took it over (or is
                    // about to, with automatic failover: then wait for it, trying both).
                    let deadline = self.inner.failover_wait.map(|wait| tokio::time::Instant::now() + wait);
                    loop {
                        if let Ok(conn) = open(standby, Some(server as u32)).await {
                            tracing::warn!(server, %standby, "server {server} is lost; its share is served by the next server");
                            slot.on_standby.store(true, Ordering::Relaxed);
                            break conn;
                        }
                        if deadline.is_none_or(|deadline| tokio::time::Instant::now() >= deadline) {
                            return Err(lost);
                        }
                        tokio::time::sleep(FAILOVER_POLL).await;
                        if self.answers(slot.addr).await {
                            // It came back (a restart): connect to it as usual.
                            break open(slot.addr, None).await?;
                        }
                    }
                }
                Err(e) => return Err(e),
            },
        };
        *guard = Some(conn.clone());
        *slot.live.write().unwrap() = Some(conn.clone());
        Ok(conn)
    }

    /// Whether the server at `addr` takes a connection within [`FAILOVER_POLL`].
    async fn answers(&self, addr: SocketAddr) -> bool {
        let dial = Dial {
            source: self.inner.opts.node,
            local_socket: self.inner.opts.local_socket,
            timeout: FAILOVER_POLL,
            await_watchers: false,
        };
        Connection::open(addr, dial, &self.inner.secret, self.inner.session, None, None).await.is_ok()
    }

    /// The live connection to `server`, if there is one: for senders that cannot wait (see
    /// [`crate::File::read_then`]).
    pub(crate) fn connection_now(&self, server: usize) -> Option<Arc<Connection>> {
        self.inner.servers.get(server)?.live()
    }

    /// Takes one of the [`MAX_LOCAL_FILES`] descriptors for local I/O (false: none left).
    pub(crate) fn take_local_file(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.inner.local_files.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < MAX_LOCAL_FILES).then_some(n + 1)).is_ok()
    }

    pub(crate) fn local_writer(&self) -> &local::LocalWriter {
        self.inner.local_writer.get_or_init(local::LocalWriter::start)
    }

    pub(crate) fn return_local_files(&self, count: usize) {
        self.inner.local_files.fetch_sub(count, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends a request with its payload; its answer comes through the returned [`Pending`].
    pub(crate) async fn send(&self, server: usize, request: &Request, payload: Bytes) -> Result<Pending> {
        self.connection(server).await?.send(request, payload)
    }

    /// Sends `call` to server `server` and waits for its reply (a failure answered is `Err`),
    /// retrying for a while when a rename in progress holds the entry it needs (`Busy`), or
    /// another client's delegation of its directory is being recalled (`Recalling`: the
    /// holder is a round trip away from giving it back, so the first retries come soon).
    pub async fn call<C: Call>(&self, server: usize, call: C) -> Result<C::Reply> {
        self.call_on_busy(server, call, OnBusy::Wait).await
    }

    /// [`Client::call`], with `Busy` answers waited out or handed back as they are.
    pub(crate) async fn call_on_busy<C: Call>(&self, server: usize, call: C, on_busy: OnBusy) -> Result<C::Reply> {
        let start = tokio::time::Instant::now();
        let mut recall_pause = RECALL_FIRST_RETRY;
        loop {
            let request: Request = call.clone().into();
            let answer = self.send(server, &request, Bytes::new()).await?.wait(self.inner.opts.timeout).await;
            let (pause, retry_for) = match &answer {
                Err(e) if e.code == ErrorCode::Busy && matches!(on_busy, OnBusy::Wait) => (Duration::from_millis(20), BUSY_RETRY_FOR),
                Err(e) if e.code == ErrorCode::Recalling => {
                    let pause = recall_pause;
                    recall_pause = (recall_pause * 2).min(RECALL_LAST_RETRY);
                    (pause, RECALL_RETRY_FOR)
                }
                _ => return answer?.reply::<C>(),
            };
            if start.elapsed() + pause >= retry_for {
                return answer?.reply::<C>();
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// [`Client::call`] to the home server of `ino`.
    pub(crate) async fn call_home<C: Call>(&self, ino: Ino, call: C) -> Result<C::Reply> {
        self.call(ino::home(ino), call).await
    }

    /// Sends several namespace steps of one kind to one server, [`BATCH_STEPS`] per frame (all
    /// frames before waiting for any answer); each step gets its own outcome, in order.
    pub async fn batch<C: Call + Into<NamespaceRequest>>(&self, server: usize, calls: Vec<C>) -> Result<Vec<Result<C::Reply>>> {
        let outcomes = self.batch_steps(server, calls.into_iter().map(Into::into)).await?;
        Ok(outcomes.into_iter().map(|outcome| Answer { message: outcome?, payload: Vec::new() }.reply::<C>()).collect())
    }

    /// [`Client::batch`] for steps of any kinds: each step's outcome, its reply still encoded.
    pub(crate) async fn batch_steps(&self, server: usize, steps: impl IntoIterator<Item = NamespaceRequest>) -> Result<Vec<BatchOutcome>> {
        self.steps_in_frames(server, steps, |_, requests| Batch { requests }.into()).await
    }

    /// Delegation `token`'s write-back of `steps` in directory `dir` (numbered in its log from
    /// `first_seq` on): each step's outcome, as [`Client::batch_steps`].
    pub(crate) async fn write_back_steps(
        &self,
        dir: Ino,
        token: Ino,
        first_seq: u64,
        steps: Vec<NamespaceRequest>,
    ) -> Result<Vec<BatchOutcome>> {
        self.steps_in_frames(ino::home(dir), steps, |offset, steps| WriteBack { dir, token, first_seq: first_seq + offset, steps }.into())
            .await
    }

    /// Sends `steps` to `server` in frames of [`BATCH_STEPS`] made by `frame` (from the number
    /// of steps before it, and its steps), all before waiting for any answer; each step's
    /// outcome, in order.
    async fn steps_in_frames(
        &self,
        server: usize,
        steps: impl IntoIterator<Item = NamespaceRequest>,
        frame: impl Fn(u64, Vec<NamespaceRequest>) -> Request,
    ) -> Result<Vec<BatchOutcome>> {
        let mut pending = Vec::new();
        let mut steps = steps.into_iter().peekable();
        let mut sent = 0;
        while steps.peek().is_some() {
            let requests: Vec<NamespaceRequest> = steps.by_ref().take(BATCH_STEPS).collect();
            let count = requests.len();
            pending.push((count, self.send(server, &frame(sent, requests), Bytes::new()).await?));
            sent += count as u64;
        }
        let mut all = Vec::new();
        for (count, batch) in pending {
            // A write-back is answered as a batch is.
            let outcomes = batch.wait(self.inner.opts.timeout).await?.reply::<Batch>()?;
            if outcomes.len() != count {
                return Err(Error::new(ErrorCode::Protocol, format!("batch of {count}: {} answers", outcomes.len())));
            }
            all.extend(outcomes);
        }
        Ok(all)
    }

    /// Sends the same call to every server and waits for all answers.
    pub(crate) async fn broadcast<C: Call>(&self, call: C) -> Result<()> {
        self.send_to(0..self.server_count(), call).await
    }

    /// Sends the same call to each of `servers` at once and waits for all answers; returns the
    /// first failure.
    pub(crate) async fn send_to<C: Call>(&self, servers: impl Iterator<Item = usize>, call: C) -> Result<()> {
        first_failure(self.send_all(servers.map(|server| (server, call.clone()))).await)
    }

    /// Sends each call to its server, all before waiting for any reply; the outcomes, in
    /// order (a failure answered is an error).
    pub(crate) async fn send_all<C: Call>(&self, calls: impl IntoIterator<Item = (usize, C)>) -> Vec<Result<()>> {
        let mut pending = Vec::new();
        for (server, call) in calls {
            pending.push(self.send(server, &call.into(), Bytes::new()).await);
        }
        let mut outcomes = Vec::with_capacity(pending.len());
        for p in pending {
            outcomes.push(match p {
                Ok(p) => p.wait(self.inner.opts.timeout).await.map(|_| ()),
                Err(e) => Err(e),
            });
        }
        outcomes
    }

    /// Capacity, usage and inode counts of every server (in server order).
    pub async fn statfs(&self) -> Vec<Result<ServerStats>> {
        let mut out = Vec::new();
        for server in 0..self.server_count() {
            out.push(self.call(server, StatFs).await);
        }
        out
    }

    /// Asks a server to stop (used by `surge down`).
    pub async fn shutdown_server(&self, server: usize) -> Result<()> {
        self.call(server, Shutdown).await
    }
}
