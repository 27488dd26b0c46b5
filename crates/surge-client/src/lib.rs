//! # surge-client — the native Surge client library
//!
//! Talks to an instance's servers directly: no gateway, no metadata server.
//! * Metadata requests go to the *home* server of the inode they name: its index is in the
//!   inode number's top bits ([`surge_proto::ino`]). New files are homed with their directory,
//!   so a create is one round trip; new directories are spread over the servers.
//! * File data is cut into chunks (default 1 MiB); chunk `c` of a file lives on server
//!   `(spread(ino) + c) mod N` ([`surge_proto::placement`]). A large request becomes concurrent requests to
//!   several servers.
//! * Operations spanning two servers (mkdir, rename between directories homed on different
//!   servers, removing a directory homed elsewhere) are sequenced here from atomic steps.
//!
//! ## Consistency: close-to-open
//! A writer's data reaches the servers when `pwrite` returns; the file's size and mtime are
//! published at `fsync` and `close`. An `open` (on any node) after that `close` sees the whole
//! file. A rename is atomic on the directory's server: a reader that opens the final name sees
//! either the old file or the complete new one. See `docs/consistency.md`.
//!
//! The API is async (tokio). Paths are absolute within the instance (`/a/b`); the path API does
//! not follow symlinks (use the FUSE mount for that); the `*_at` forms take a parent inode.

pub mod conn;
pub mod descriptor;
pub mod error;
pub mod file;
mod local;
pub mod stage;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use surge_proto::auth::Secret;
use surge_proto::ino::{self, Ino};
use surge_proto::{
    check_name, Attr, AttrChanges, DirEntry, ErrorCode, FileKind, Reply, Request, ServerStats, Timestamp, Unlinked, ROOT_INO,
};
use tokio::sync::Mutex as AsyncMutex;

pub use descriptor::{InstanceDescriptor, Mode};
pub use error::{Error, Result};
pub use surge_proto;

pub use conn::Watcher;
use conn::{Connection, Pending};
pub use file::File;
pub use surge_proto::placement::Layout;

/// How long a request may wait for its reply before it fails with TimedOut.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a step retries while the entry it needs is locked by a rename in progress.
const BUSY_RETRY_FOR: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// This node's address: outgoing connections start from it, and in private mode it picks
    /// the server whose namespace this client sees. `None`: the OS chooses / first server.
    pub node: Option<IpAddr>,
    pub timeout: Duration,
    /// Identity stamped on created files.
    pub uid: u32,
    pub gid: u32,
    /// Read and write chunks held by a server on this node in its data directory directly
    /// (one `pread` / `pwrite`, no round trip; see [`local`]), while the connection to that
    /// server is up. On by default; `SURGE_LOCAL_IO=0` turns it off (all data then crosses
    /// the network).
    pub local_io: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        let node = std::env::var("SURGE_NODE").ok().and_then(|s| s.parse().ok());
        let timeout =
            std::env::var("SURGE_TIMEOUT_SECS").ok().and_then(|s| s.parse().ok()).map(Duration::from_secs_f64).unwrap_or(DEFAULT_TIMEOUT);
        let local_io = !matches!(std::env::var("SURGE_LOCAL_IO").as_deref(), Ok("0" | "off" | "false" | "no"));
        // SAFETY: geteuid/getegid take no arguments and cannot fail.
        ClientOptions { node, timeout, uid: unsafe { libc::geteuid() }, gid: unsafe { libc::getegid() }, local_io }
    }
}

struct ServerSlot {
    addr: std::net::SocketAddr,
    conn: AsyncMutex<Option<Arc<Connection>>>,
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

pub(crate) fn unexpected(op: &str, reply: Reply) -> Error {
    Error::new(ErrorCode::Protocol, format!("{op}: unexpected reply {reply:?}"))
}

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
        Client::from_parts(addrs, desc.chunk_size, desc.read_secret()?, opts)
    }

    /// Connects to the servers at `addrs` (in server-index order) of an instance with this
    /// chunk size and secret: what a server uses to reach its peers.
    pub fn from_parts(addrs: Vec<SocketAddr>, chunk_size: u64, secret: Secret, opts: ClientOptions) -> Result<Client> {
        if addrs.is_empty() {
            return Err(Error::new(ErrorCode::Invalid, "instance has no servers"));
        }
        if chunk_size == 0 {
            return Err(Error::new(ErrorCode::Invalid, "chunk size must not be 0"));
        }
        let mut session = [0u8; 8];
        getrandom::getrandom(&mut session).map_err(|e| Error::new(ErrorCode::Io, e.to_string()))?;
        let layout = Layout::new(chunk_size, addrs.len());
        let servers = addrs.into_iter().map(|addr| ServerSlot { addr, conn: AsyncMutex::new(None) }).collect();
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
            }),
            uid,
            gid,
        })
    }

    /// Asks every server for notices of changes made by others to what this client was told
    /// (for a client that caches metadata, such as the FUSE mount). Call before the first
    /// request: connections already open do not watch. Returns false if a watcher was set.
    pub fn watch(&self, watcher: Arc<dyn Watcher>) -> bool {
        self.inner.watcher.set(watcher).is_ok()
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

    pub(crate) fn timeout(&self) -> Duration {
        self.inner.opts.timeout
    }

    // ------------------------------------------------------------ transport

    async fn connection(&self, server: usize) -> Result<Arc<Connection>> {
        let slot =
            self.inner.servers.get(server).ok_or_else(|| Error::new(ErrorCode::Stale, format!("no server {server} in this instance")))?;
        let mut guard = slot.conn.lock().await;
        if let Some(conn) = guard.as_ref() {
            if !conn.is_broken() {
                return Ok(conn.clone());
            }
        }
        let opts = &self.inner.opts;
        let watcher = self.inner.watcher.get().map(|w| (w.clone(), server));
        let conn = Connection::open(slot.addr, opts.node, &self.inner.secret, self.inner.session, opts.timeout, watcher).await?;
        *guard = Some(conn.clone());
        Ok(conn)
    }

    /// The live connection to `server`, if there is one and nobody is opening it right now:
    /// for senders that cannot wait (see [`File::read_then`]).
    pub(crate) fn connection_now(&self, server: usize) -> Option<Arc<Connection>> {
        let guard = self.inner.servers.get(server)?.conn.try_lock().ok()?;
        guard.as_ref().filter(|conn| !conn.is_broken()).cloned()
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

    pub(crate) async fn send(&self, server: usize, request: &Request, payload: Bytes) -> Result<Pending> {
        self.connection(server).await?.send(request, payload)
    }

    async fn call_with(&self, server: usize, request: Request, payload: Bytes) -> Result<(Reply, Vec<u8>)> {
        self.send(server, &request, payload).await?.wait(self.inner.opts.timeout).await
    }

    /// One metadata step, retried while a rename in progress holds the entry it needs.
    async fn call(&self, server: usize, request: Request) -> Result<Reply> {
        let deadline = tokio::time::Instant::now() + BUSY_RETRY_FOR;
        loop {
            match self.call_with(server, request.clone(), Bytes::new()).await {
                Err(e) if e.code == ErrorCode::Busy && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => return other.map(|(reply, _)| reply),
            }
        }
    }

    /// Sends one request to server `server` and waits for its reply (an error reply becomes
    /// `Err`). For requests the typed API does not cover, such as staging.
    pub async fn request(&self, server: usize, request: Request) -> Result<Reply> {
        self.call(server, request).await
    }

    /// Sends several requests to one server in one frame; each gets its own outcome, in order.
    pub async fn batch(&self, server: usize, requests: Vec<Request>) -> Result<Vec<Result<Reply>>> {
        let count = requests.len();
        match self.call(server, Request::Batch(requests)).await? {
            Reply::Batch(replies) if replies.len() == count => Ok(replies
                .into_iter()
                .map(|reply| match reply {
                    Reply::Error { code, detail } => Err(Error::new(code, detail)),
                    other => Ok(other),
                })
                .collect()),
            other => Err(unexpected("batch", other)),
        }
    }

    pub(crate) async fn call_home(&self, ino: Ino, request: Request) -> Result<Reply> {
        self.call(ino::home(ino), request).await
    }

    /// Sends the same request to every server and waits for all answers.
    pub(crate) async fn broadcast(&self, request: Request) -> Result<()> {
        self.send_to(0..self.server_count(), request).await
    }

    /// Sends the same request to each of `servers` at once and waits for all answers;
    /// returns the first failure.
    async fn send_to(&self, servers: impl Iterator<Item = usize>, request: Request) -> Result<()> {
        first_failure(self.send_all(servers.map(|server| (server, request.clone()))).await)
    }

    /// Sends each request to its server, all before waiting for any reply; the outcomes, in
    /// order (an error reply is an error).
    pub(crate) async fn send_all(&self, requests: impl IntoIterator<Item = (usize, Request)>) -> Vec<Result<()>> {
        let mut pending = Vec::new();
        for (server, request) in requests {
            pending.push(self.send(server, &request, Bytes::new()).await);
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

    // ------------------------------------------------------------ inode-level namespace API

    pub async fn getattr(&self, ino: Ino) -> Result<Attr> {
        match self.call_home(ino, Request::GetAttr { ino }).await? {
            Reply::Attr(attr) => Ok(attr),
            other => Err(unexpected("getattr", other)),
        }
    }

    /// Looks `name` up in directory `parent`; fetches the attributes from the inode's own home
    /// when it lives elsewhere than the directory.
    pub async fn lookup(&self, parent: Ino, name: &str) -> Result<Attr> {
        match self.lookup_entry(parent, name).await? {
            DirEntry { attr: Some(attr), .. } => Ok(attr),
            DirEntry { ino, .. } => self.getattr(ino).await,
        }
    }

    async fn lookup_entry(&self, parent: Ino, name: &str) -> Result<DirEntry> {
        if name != ".." {
            check_name(name)?;
        }
        match self.call_home(parent, Request::Lookup { parent, name: name.to_string() }).await? {
            Reply::Entry(entry) => Ok(entry),
            other => Err(unexpected("lookup", other)),
        }
    }

    /// Changes attributes. Shrinking a file drops its data beyond the new size on every server
    /// first, so no stale bytes reappear if it grows again.
    pub async fn setattr(&self, ino: Ino, changes: AttrChanges) -> Result<Attr> {
        if let Some(size) = changes.size {
            self.broadcast(Request::TruncateData { ino, size }).await?;
        }
        match self.call_home(ino, Request::SetAttr { ino, changes }).await? {
            Reply::Attr(attr) => Ok(attr),
            other => Err(unexpected("setattr", other)),
        }
    }

    /// Creates (or with `exclusive == false` opens an existing) regular file and registers an
    /// open handle on it.
    pub async fn create_at(&self, parent: Ino, name: &str, mode: u32, exclusive: bool) -> Result<File> {
        let request = Request::Create { parent, name: name.to_string(), mode, uid: self.uid, gid: self.gid, exclusive, open: true };
        let entry = match self.call_home(parent, request).await? {
            Reply::Entry(entry) => entry,
            other => return Err(unexpected("create", other)),
        };
        let attr = match entry.attr {
            Some(attr) => attr,
            // An existing file homed elsewhere (renamed in from another directory).
            None => return self.open_ino(entry.ino).await,
        };
        if attr.kind != FileKind::File {
            return Err(Error::new(ErrorCode::Invalid, format!("'{name}' is not a regular file")));
        }
        Ok(File::new(self.clone(), &attr))
    }

    /// Opens an existing file by inode (registers an open handle; see [`File::close`]).
    pub async fn open_ino(&self, ino: Ino) -> Result<File> {
        match self.call_home(ino, Request::Open { ino }).await? {
            Reply::Attr(attr) if attr.kind == FileKind::File => Ok(File::new(self.clone(), &attr)),
            Reply::Attr(attr) => {
                // Undo the registration before refusing.
                let _ = self.call_home(ino, Request::Commit { ino, size: None, mtime: None, release: true }).await;
                Err(Error::new(if attr.kind == FileKind::Dir { ErrorCode::IsDir } else { ErrorCode::Invalid }, "not a regular file"))
            }
            other => Err(unexpected("open", other)),
        }
    }

    pub async fn mkdir_at(&self, parent: Ino, name: &str, mode: u32) -> Result<Attr> {
        check_name(name)?;
        // Spread directories over servers by (parent, name), so a tree's metadata load spreads.
        let target = self.inner.layout.dir_home(parent, name);
        let (uid, gid) = (self.uid, self.gid);
        let attr = match self.call(target, Request::MakeDirInode { parent, mode, uid, gid }).await? {
            Reply::Attr(attr) => attr,
            other => return Err(unexpected("mkdir", other)),
        };
        let insert = Request::InsertEntry {
            parent,
            name: name.to_string(),
            ino: attr.ino,
            kind: FileKind::Dir,
            replace: false,
            retired_target: None,
        };
        if let Err(e) = self.call_home(parent, insert).await {
            let _ = self.call(target, Request::DropInode { ino: attr.ino }).await;
            return Err(e);
        }
        Ok(attr)
    }

    pub async fn symlink_at(&self, parent: Ino, name: &str, target: &str) -> Result<Attr> {
        let request = Request::Symlink { parent, name: name.to_string(), target: target.to_string(), uid: self.uid, gid: self.gid };
        match self.call_home(parent, request).await? {
            Reply::Attr(attr) => Ok(attr),
            other => Err(unexpected("symlink", other)),
        }
    }

    pub async fn readlink_ino(&self, ino: Ino) -> Result<String> {
        match self.call_home(ino, Request::Readlink { ino }).await? {
            Reply::Link(target) => Ok(target),
            other => Err(unexpected("readlink", other)),
        }
    }

    /// Finishes off an inode that lost a name: drops the link at its home when that is another
    /// server, and purges its chunks everywhere once nothing refers to it.
    pub async fn finish_unlinked(&self, unlinked: &Unlinked) -> Result<()> {
        let (mut purge, mut size) = (unlinked.purge, unlinked.size);
        if unlinked.remote {
            if unlinked.kind == FileKind::Dir {
                // A retired directory replaced by a rename.
                return self.call_home(unlinked.ino, Request::DropInode { ino: unlinked.ino }).await.map(|_| ());
            }
            if let Reply::Dropped { purge: p, size: s } = self.call_home(unlinked.ino, Request::DropLink { ino: unlinked.ino }).await? {
                (purge, size) = (p, s);
            }
        }
        if purge {
            self.purge_data(unlinked.ino, size).await?;
        }
        Ok(())
    }

    /// Deletes a gone file's chunks on the servers that can hold some: those of the chunks
    /// below its final size (none for an empty file, which makes unlinking small and empty
    /// files one round trip).
    async fn purge_data(&self, ino: Ino, size: u64) -> Result<()> {
        let chunks = size.div_ceil(self.chunk_size()).min(self.server_count() as u64);
        let servers = (0..chunks).map(|chunk| self.inner.layout.chunk_server(ino, chunk));
        self.send_to(servers, Request::PurgeData { ino }).await
    }

    pub async fn unlink_at(&self, parent: Ino, name: &str) -> Result<()> {
        match self.call_home(parent, Request::Unlink { parent, name: name.to_string() }).await? {
            Reply::Unlinked(u) => self.finish_unlinked(&u).await,
            other => Err(unexpected("unlink", other)),
        }
    }

    pub async fn rmdir_at(&self, parent: Ino, name: &str) -> Result<()> {
        match self.call_home(parent, Request::Rmdir { parent, name: name.to_string() }).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == ErrorCode::NeedsRetire => {
                // The directory is homed elsewhere: retire it there (fails if not empty, and
                // keeps it empty), unlink its entry here, then delete it.
                let ino = self.lookup_entry(parent, name).await?.ino;
                self.call_home(ino, Request::RetireDir { ino }).await?;
                if let Err(e) = self.call_home(parent, Request::RemoveEntry { parent, name: name.to_string(), ino }).await {
                    let _ = self.call_home(ino, Request::UnretireDir { ino }).await;
                    return Err(e);
                }
                self.call_home(ino, Request::DropInode { ino }).await.map(|_| ())
            }
            Err(e) => Err(e),
        }
    }

    /// Atomic rename, also over an existing target and of directories.
    pub async fn rename_at(&self, src_parent: Ino, src_name: &str, dst_parent: Ino, dst_name: &str, noreplace: bool) -> Result<()> {
        check_name(dst_name)?;
        let mut retired: Option<Ino> = None;
        let result = loop {
            let attempt = if ino::home(src_parent) == ino::home(dst_parent) {
                let request = Request::Rename {
                    src_parent,
                    src_name: src_name.to_string(),
                    dst_parent,
                    dst_name: dst_name.to_string(),
                    noreplace,
                    retired_target: retired,
                };
                self.call_home(src_parent, request).await
            } else {
                self.rename_across(src_parent, src_name, dst_parent, dst_name, noreplace, retired).await
            };
            match attempt {
                Err(e) if e.code == ErrorCode::NeedsRetire && retired.is_none() => {
                    // The target is an (empty) directory homed on a third server: retire it so
                    // it stays empty, then retry with that proof.
                    let target = self.lookup_entry(dst_parent, dst_name).await?.ino;
                    self.call_home(target, Request::RetireDir { ino: target }).await?;
                    retired = Some(target);
                }
                other => break other,
            }
        };
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                if let Some(target) = retired {
                    let _ = self.call_home(target, Request::UnretireDir { ino: target }).await;
                }
                return Err(e);
            }
        };
        let Reply::Renamed { replaced, reparent } = reply else {
            return Err(unexpected("rename", reply));
        };
        if let Some(ino) = reparent {
            self.call_home(ino, Request::SetParent { ino, parent: dst_parent }).await?;
        }
        if let Some(u) = replaced {
            self.finish_unlinked(&u).await?;
        }
        Ok(())
    }

    /// Rename between directories homed on different servers: lock the source entry, link the
    /// target, then remove the source. The target never names anything half-made; for a
    /// moment both names refer to the same complete inode.
    async fn rename_across(
        &self,
        src_parent: Ino,
        src_name: &str,
        dst_parent: Ino,
        dst_name: &str,
        noreplace: bool,
        retired: Option<Ino>,
    ) -> Result<Reply> {
        let entry = match self.call_home(src_parent, Request::RenamePrepare { parent: src_parent, name: src_name.to_string() }).await? {
            Reply::Entry(entry) => entry,
            other => return Err(unexpected("rename", other)),
        };
        let finish = |commit| Request::RenameFinish { parent: src_parent, name: src_name.to_string(), ino: entry.ino, commit };
        let linked = async {
            if entry.kind == FileKind::Dir {
                self.check_not_ancestor(entry.ino, dst_parent).await?;
            }
            let insert = Request::InsertEntry {
                parent: dst_parent,
                name: dst_name.to_string(),
                ino: entry.ino,
                kind: entry.kind,
                replace: !noreplace,
                retired_target: retired,
            };
            self.call_home(dst_parent, insert).await
        }
        .await;
        match linked {
            Ok(reply) => {
                self.call_home(src_parent, finish(true)).await?;
                Ok(reply)
            }
            Err(e) => {
                let _ = self.call_home(src_parent, finish(false)).await;
                Err(e)
            }
        }
    }

    /// Refuses to move directory `dir` below itself: walks `..` from `target` to the root.
    async fn check_not_ancestor(&self, dir: Ino, mut target: Ino) -> Result<()> {
        for _ in 0..4096 {
            if target == dir {
                return Err(Error::new(ErrorCode::Invalid, "cannot move a directory into itself"));
            }
            if target == ROOT_INO {
                return Ok(());
            }
            target = self.lookup_entry(target, "..").await?.ino;
        }
        Err(Error::new(ErrorCode::Invalid, "directory tree too deep"))
    }

    /// One page of a directory, in name order, starting after `after`. Only the directory's
    /// home server is asked.
    pub async fn readdir_page(&self, ino: Ino, after: Option<String>, limit: u32) -> Result<(Vec<DirEntry>, bool)> {
        match self.call_home(ino, Request::Readdir { ino, after, limit }).await? {
            Reply::Entries { entries, more } => Ok((entries, more)),
            other => Err(unexpected("readdir", other)),
        }
    }

    pub async fn readdir_ino(&self, ino: Ino) -> Result<Vec<DirEntry>> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let (entries, more) = self.readdir_page(ino, after, 4096).await?;
            after = entries.last().map(|e| e.name.clone());
            all.extend(entries);
            if !more {
                return Ok(all);
            }
        }
    }

    /// Capacity, usage and inode counts of every server (in server order).
    pub async fn statfs(&self) -> Vec<Result<ServerStats>> {
        let mut out = Vec::new();
        for server in 0..self.server_count() {
            out.push(match self.call(server, Request::StatFs).await {
                Ok(Reply::Stats(stats)) => Ok(stats),
                Ok(other) => Err(unexpected("statfs", other)),
                Err(e) => Err(e),
            });
        }
        out
    }

    /// Asks every server to stop (used by `surge down`).
    pub async fn shutdown_server(&self, server: usize) -> Result<()> {
        self.call(server, Request::Shutdown).await.map(|_| ())
    }

    // ------------------------------------------------------------ path API

    /// Resolves an absolute instance path to its attributes (symlinks are not followed).
    pub async fn stat(&self, path: &str) -> Result<Attr> {
        let mut attr = self.getattr(ROOT_INO).await?;
        for name in components(path)? {
            if attr.kind != FileKind::Dir {
                return Err(Error::new(ErrorCode::NotDir, format!("{path}: a component is not a directory")));
            }
            attr = self.lookup(attr.ino, name).await.map_err(|e| with_path(e, path))?;
        }
        Ok(attr)
    }

    /// Resolves the parent directory of `path` and returns (parent inode, last name).
    pub async fn resolve_parent<'p>(&self, path: &'p str) -> Result<(Ino, &'p str)> {
        let names = components(path)?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(Error::new(ErrorCode::Invalid, format!("{path}: the root has no parent")));
        };
        let mut ino = ROOT_INO;
        for name in dirs {
            let entry = self.lookup_entry(ino, name).await.map_err(|e| with_path(e, path))?;
            if entry.kind != FileKind::Dir {
                return Err(Error::new(ErrorCode::NotDir, format!("{path}: '{name}' is not a directory")));
            }
            ino = entry.ino;
        }
        Ok((ino, last))
    }

    pub async fn create(&self, path: &str, mode: u32) -> Result<File> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.create_at(parent, name, mode, true).await.map_err(|e| with_path(e, path))
    }

    /// Opens an existing file; `truncate` empties it first (O_TRUNC).
    pub async fn open(&self, path: &str, truncate: bool) -> Result<File> {
        let attr = self.stat(path).await?;
        if attr.kind == FileKind::Dir {
            return Err(Error::new(ErrorCode::IsDir, path.to_string()));
        }
        let file = self.open_ino(attr.ino).await.map_err(|e| with_path(e, path))?;
        if truncate {
            file.set_len(0).await?;
        }
        Ok(file)
    }

    /// Opens a file, creating it if missing, keeping its content (O_CREAT): how N processes
    /// share one output file.
    pub async fn create_or_open(&self, path: &str) -> Result<File> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.create_at(parent, name, 0o644, false).await.map_err(|e| with_path(e, path))
    }

    /// Opens or creates a file for writing, emptied (O_CREAT|O_TRUNC).
    pub async fn create_or_truncate(&self, path: &str, mode: u32) -> Result<File> {
        let (parent, name) = self.resolve_parent(path).await?;
        let file = self.create_at(parent, name, mode, false).await.map_err(|e| with_path(e, path))?;
        if file.size() > 0 {
            file.set_len(0).await?;
        }
        Ok(file)
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<Attr> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.mkdir_at(parent, name, mode).await.map_err(|e| with_path(e, path))
    }

    /// Creates a directory and any missing parents (`mkdir -p`).
    pub async fn mkdir_all(&self, path: &str, mode: u32) -> Result<Attr> {
        let mut attr = self.getattr(ROOT_INO).await?;
        for name in components(path)? {
            attr = match self.lookup(attr.ino, name).await {
                Ok(a) if a.kind == FileKind::Dir => a,
                Ok(_) => return Err(Error::new(ErrorCode::NotDir, format!("{path}: '{name}' is not a directory"))),
                Err(e) if e.code == ErrorCode::NotFound => match self.mkdir_at(attr.ino, name, mode).await {
                    Ok(a) => a,
                    Err(e) if e.code == ErrorCode::Exists => self.lookup(attr.ino, name).await?,
                    Err(e) => return Err(with_path(e, path)),
                },
                Err(e) => return Err(with_path(e, path)),
            };
        }
        Ok(attr)
    }

    pub async fn rmdir(&self, path: &str) -> Result<()> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.rmdir_at(parent, name).await.map_err(|e| with_path(e, path))
    }

    pub async fn unlink(&self, path: &str) -> Result<()> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.unlink_at(parent, name).await.map_err(|e| with_path(e, path))
    }

    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (src_parent, src_name) = self.resolve_parent(from).await?;
        let (dst_parent, dst_name) = self.resolve_parent(to).await?;
        self.rename_at(src_parent, src_name, dst_parent, dst_name, false).await.map_err(|e| with_path(e, &format!("{from} -> {to}")))
    }

    pub async fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let attr = self.stat(path).await?;
        if attr.kind != FileKind::Dir {
            return Err(Error::new(ErrorCode::NotDir, path.to_string()));
        }
        self.readdir_ino(attr.ino).await
    }

    pub async fn symlink(&self, target: &str, link: &str) -> Result<Attr> {
        let (parent, name) = self.resolve_parent(link).await?;
        self.symlink_at(parent, name, target).await.map_err(|e| with_path(e, link))
    }

    pub async fn readlink(&self, path: &str) -> Result<String> {
        let attr = self.stat(path).await?;
        self.readlink_ino(attr.ino).await.map_err(|e| with_path(e, path))
    }

    pub async fn set_attr(&self, path: &str, changes: AttrChanges) -> Result<Attr> {
        let attr = self.stat(path).await?;
        self.setattr(attr.ino, changes).await.map_err(|e| with_path(e, path))
    }

    pub async fn chmod(&self, path: &str, mode: u32) -> Result<Attr> {
        self.set_attr(path, AttrChanges { mode: Some(mode), ..Default::default() }).await
    }

    pub async fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<Attr> {
        self.set_attr(path, AttrChanges { uid, gid, ..Default::default() }).await
    }

    pub async fn utimens(&self, path: &str, atime: Option<Timestamp>, mtime: Option<Timestamp>) -> Result<Attr> {
        self.set_attr(path, AttrChanges { atime, mtime, ..Default::default() }).await
    }

    pub async fn truncate(&self, path: &str, size: u64) -> Result<Attr> {
        self.set_attr(path, AttrChanges { size: Some(size), ..Default::default() }).await
    }
}

fn components(path: &str) -> Result<Vec<&str>> {
    if !path.starts_with('/') {
        return Err(Error::new(ErrorCode::Invalid, format!("'{path}': instance paths are absolute (start with /)")));
    }
    let names: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if names.contains(&"..") {
        return Err(Error::new(ErrorCode::Invalid, format!("'{path}': '..' is not allowed in instance paths")));
    }
    Ok(names)
}

fn with_path(mut e: Error, path: &str) -> Error {
    e.detail = if e.detail.is_empty() { path.to_string() } else { format!("{path}: {}", e.detail) };
    e
}
