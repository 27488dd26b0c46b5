//! # surge-fuse — a Surge instance as a POSIX directory
//!
//! Maps the kernel's FUSE requests onto the native client library, so any unmodified program
//! (h5py, tar, git, ffmpeg, a shell) works on an instance. Surge inode numbers are used as
//! FUSE inode numbers unchanged (the root is 1 in both).
//!
//! * **Concurrency**: the FUSE session thread decodes requests and hands each to a task on a
//!   tokio runtime, so many requests are in flight at once (FUSE replies may be sent from any
//!   thread, in any order). A plain read (random 4 KiB, nothing cached) is sent to its server
//!   by the session thread itself and answered by the connection's reader
//!   ([`surge_client::File::read_then`]), and a write that fits the write-behind window is
//!   sent from there and answered at once ([`surge_client::File::write_behind_now`]): no task
//!   and one thread wake-up fewer per request.
//! * **Large I/O**: 1 MiB writes (`max_write`, the kernel's ceiling) with write-behind; async
//!   reads served from a per-handle cache of whole chunks for streaming readers ([`chunks`]),
//!   and a raised kernel read-ahead (set by `main`).
//! * **Kernel caching kept exact by the servers' notices**: the kernel keeps attributes and
//!   names for a long time (`--cache-secs`), so `stat`, path walks and permission checks cost
//!   no round trip, and the mount watches every server ([`surge_client::Client::watch`]): a
//!   change made through another client (another node) to anything this kernel was told about
//!   comes back as a notice, and the entry or attributes are invalidated in the kernel at once
//!   ([`Invalidations`]). Names are never cached as missing, so a file made on another node is
//!   found at once. Opens stay exact even without notices (a lost connection): an open always
//!   asks the file's home server; an inode that is gone or unlinked (its name was replaced or
//!   removed on another node while the kernel cached it) is refused with ESTALE, which makes
//!   the kernel look the name up again; attributes that differ from what the kernel was told
//!   are invalidated (`inval_inode`), and the page cache is dropped. `flush` (every `close(2)`)
//!   waits for the handle's writes and publishes size and mtime.
//! * **Extended attributes** are not supported and say so with ENOSYS, which the kernel
//!   remembers: without that it asks `getxattr(security.capability)` before every write.

mod chunks;
mod listings;

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, Notifier, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use surge_client::surge_proto::admin::Notice;
use surge_client::surge_proto::{Attr, AttrChanges, DirEntry, ErrorCode, FileKind, Timestamp};
use surge_client::{Client, File};
use tokio::runtime::Handle;

use chunks::{Budget, ChunkCache, Route};
use listings::Listings;

/// The kernel's largest write request.
const MAX_WRITE: u32 = 1 << 20;
/// How long after ESTALE the kernel's retry may take on a loaded node (see
/// `KernelCache::stale`). An open's retry is known to be over when the open succeeds or a
/// name is missing; a `stat`'s retry is not (its steps look like any other), so this is
/// also how long one thread's next stale name right after a `stat` retry gets ENOENT.
const STALE_RETRY: Duration = Duration::from_millis(500);
/// What all read caches of the mount may hold together.
const READ_CACHE_BUDGET: u64 = 512 << 20;
/// How long the mount answers a directory's GETATTR from what it last heard (see
/// `KernelCache::directory`): changes made on other nodes drop it at once (notices), but this
/// node's own creates and unlinks move the directory's mtime without a notice.
const DIRECTORY_ATTR_WINDOW: Duration = Duration::from_secs(1);

/// An open file and the chunks fetched for its readers.
struct OpenFile {
    file: Arc<File>,
    chunks: ChunkCache,
}

/// The open handles, by handle and by inode: every read and write asks for the other handles
/// of its file, which must not cost a walk over thousands of open files.
#[derive(Default)]
struct OpenFiles {
    by_handle: HashMap<u64, Arc<OpenFile>>,
    by_ino: HashMap<u64, Vec<u64>>,
}

impl OpenFiles {
    fn insert(&mut self, fh: u64, open: Arc<OpenFile>) {
        self.by_ino.entry(open.file.ino()).or_default().push(fh);
        self.by_handle.insert(fh, open);
    }

    fn remove(&mut self, fh: u64) -> Option<Arc<OpenFile>> {
        let open = self.by_handle.remove(&fh)?;
        let ino = open.file.ino();
        if let Some(handles) = self.by_ino.get_mut(&ino) {
            handles.retain(|&h| h != fh);
            if handles.is_empty() {
                self.by_ino.remove(&ino);
            }
        }
        Some(open)
    }

    /// Every handle of `ino` but `fh` (0: all of them).
    fn of_ino(&self, ino: u64, fh: u64) -> impl Iterator<Item = &Arc<OpenFile>> {
        self.by_ino.get(&ino).into_iter().flatten().filter(move |&&h| h != fh).filter_map(|h| self.by_handle.get(h))
    }
}

type Files = Arc<Mutex<OpenFiles>>;

/// What the kernel may have cached (attributes and entries, for `ttl`), and how to take it
/// back when an open finds it out of date.
struct KernelCache {
    ttl: Duration,
    blksize: u32,
    /// Set once the session exists (the session owns the file system).
    notifier: Arc<OnceLock<Notifier>>,
    /// The (size, mtime, ctime) last reported to the kernel for each inode it knows.
    reported: Mutex<HashMap<u64, (u64, Timestamp, Timestamp)>>,
    /// Unlinked inodes whose open was refused once as stale (see `open`).
    refused: Mutex<HashSet<u64>>,
    /// Callers recently told ESTALE, by pid (see `stale`).
    told_stale: Mutex<HashMap<u32, Instant>>,
    /// Directory attributes answered for a short window, for `getattr` (see `directory`).
    directories: Mutex<HashMap<u64, (Attr, Instant)>>,
    /// Kernel invalidations to send, for the thread that sends them (see [`Invalidations`]).
    invalidations: OnceLock<std::sync::mpsc::Sender<Invalidation>>,
    /// Directories whose every name this mount knows ([`listings`]).
    listings: Listings,
}

impl KernelCache {
    /// `a` as the kernel gets it, remembered so that `revalidate` knows what it holds.
    fn attr(&self, a: &Attr) -> FileAttr {
        self.reported.lock().unwrap().insert(a.ino, (a.size, a.mtime, a.ctime));
        if a.kind == FileKind::Dir && !self.ttl.is_zero() {
            self.directories.lock().unwrap().insert(a.ino, (a.clone(), Instant::now()));
        }
        fuse_attr(a, self.blksize)
    }

    /// A directory's attributes told to the kernel less than `DIRECTORY_ATTR_WINDOW` ago. With
    /// permission checks in the kernel (`default_permissions`), it drops a directory's
    /// attributes after every create or unlink in it and asks again before the next one:
    /// answering that from here saves a round trip per create and per unlink. A directory's
    /// mode and owner change only through `setattr` (which forgets the entry here) or on
    /// another node (a notice forgets it); only its mtime may lag this node's own changes,
    /// by up to the window.
    fn directory(&self, ino: u64) -> Option<Attr> {
        let mut directories = self.directories.lock().unwrap();
        match directories.get(&ino) {
            Some((attr, at)) if at.elapsed() < self.ttl.min(DIRECTORY_ATTR_WINDOW) => Some(attr.clone()),
            Some(_) => {
                directories.remove(&ino);
                None
            }
            None => None,
        }
    }

    fn forget_directory(&self, ino: u64) {
        self.directories.lock().unwrap().remove(&ino);
    }

    /// Called at open with the attributes fresh from the file's home server: if they are not
    /// what the kernel was last told, drop its cached attributes, so that `stat` and reads
    /// (which stop at the size the kernel knows) see another node's published writes.
    fn revalidate(&self, fresh: &Attr) {
        let known = self.reported.lock().unwrap().get(&fresh.ino).copied();
        if known == Some((fresh.size, fresh.mtime, fresh.ctime)) {
            return;
        }
        if let Some(notifier) = self.notifier.get() {
            // Offset -1: attributes only; the page cache is dropped at open anyway. Fails
            // harmlessly when the kernel has already forgotten the inode.
            let _ = notifier.inval_inode(fresh.ino, -1, 0);
        }
    }

    /// An unlinked inode reached by open: through a name the kernel cached while a rename or
    /// unlink on another node removed it (refuse with ESTALE, so the kernel looks the name
    /// up again and retries), or by reopening a descriptor of a deleted file (/proc/PID/fd),
    /// where the retry reaches the same inode without a lookup and is let through.
    fn refuse_once(&self, ino: u64) -> bool {
        let mut refused = self.refused.lock().unwrap();
        if refused.remove(&ino) {
            return false;
        }
        refused.insert(ino);
        true
    }

    /// The error for an inode that is gone or unlinked, reached through a name the kernel
    /// cached. ESTALE makes the kernel repeat the whole path walk once, looking every name up
    /// afresh. If that retry also meets a stale inode (the name was replaced again meanwhile),
    /// a second ESTALE would reach the program: it gets ENOENT, what an open racing a rename
    /// between its lookup and its open gets without any kernel cache.
    fn stale(&self, pid: u32) -> surge_client::Error {
        let mut told = self.told_stale.lock().unwrap();
        let now = Instant::now();
        told.retain(|_, at| now.duration_since(*at) < STALE_RETRY);
        if told.remove(&pid).is_some() {
            return ErrorCode::NotFound.into();
        }
        told.insert(pid, now);
        ErrorCode::Stale.into()
    }

    /// `pid`'s path walk is over: the next stale inode it meets is a new case.
    fn settled(&self, pid: u32) {
        self.told_stale.lock().unwrap().remove(&pid);
    }

    fn invalidate(&self, what: Invalidation) {
        if let Some(tx) = self.invalidations.get() {
            let _ = tx.send(what);
        }
    }

    /// The attributes of `ino` changed elsewhere: nothing here may answer with the old ones.
    fn attr_changed(&self, ino: u64) {
        self.reported.lock().unwrap().remove(&ino);
        self.forget_directory(ino);
        self.invalidate(Invalidation::Attr(ino));
    }
}

/// What the kernel must drop.
enum Invalidation {
    Attr(u64),
    Entry(u64, String),
}

/// Turns the servers' change notices into kernel invalidations.
///
/// The daemon's own records are dropped on the connection's task, at once; the kernel is told
/// from a thread of its own, because invalidating an entry takes the directory's lock in the
/// kernel, which a request in that directory may hold while it waits for the very tasks that
/// would be blocked.
pub struct Invalidations {
    kernel: Arc<KernelCache>,
}

impl Invalidations {
    /// Starts the thread that sends invalidations through the session's notifier.
    fn start(kernel: Arc<KernelCache>) -> Invalidations {
        let (tx, rx) = std::sync::mpsc::channel::<Invalidation>();
        let _ = kernel.invalidations.set(tx);
        let notifier = kernel.notifier.clone();
        std::thread::Builder::new()
            .name("invalidate".into())
            .spawn(move || {
                for what in rx {
                    let Some(notifier) = notifier.get() else { continue };
                    // Errors say the kernel no longer holds the inode or name: nothing to drop.
                    let _ = match what {
                        // Offset -1: attributes only; the page cache is dropped at every open.
                        Invalidation::Attr(ino) => notifier.inval_inode(ino, -1, 0),
                        Invalidation::Entry(parent, name) => notifier.inval_entry(parent, OsStr::new(&name)),
                    };
                }
            })
            .expect("start the invalidation thread");
        Invalidations { kernel }
    }
}

impl surge_client::Watcher for Invalidations {
    fn notice(&self, notice: Notice) {
        match notice {
            Notice::Attr { ino } => self.kernel.attr_changed(ino),
            Notice::Entry { parent, name } => {
                self.kernel.listings.changed_elsewhere(parent);
                self.kernel.invalidate(Invalidation::Entry(parent, name));
            }
        }
    }

    /// Notices from `server` may have been missed: drop every attribute homed there. Names
    /// the kernel holds in its directories stay until their time runs out; an open through one
    /// that went stale is still caught (see `open`).
    fn lost(&self, server: usize) {
        let homed_there = |ino: &u64| surge_client::surge_proto::ino::home(*ino) == server;
        self.kernel.listings.forget_where(|dir| homed_there(&dir));
        let inos: Vec<u64> = self.kernel.reported.lock().unwrap().keys().copied().filter(homed_there).collect();
        for ino in inos {
            self.kernel.attr_changed(ino);
        }
    }
}

pub struct SurgeFs {
    client: Client,
    runtime: Handle,
    kernel: Arc<KernelCache>,
    budget: Arc<Budget>,
    files: Files,
    dirs: Arc<Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>>,
    next_handle: AtomicU64,
}

impl SurgeFs {
    /// `ttl`: how long the kernel may use attributes and names without asking (see the module
    /// documentation for how they are kept exact). Call before `client` sends anything: only
    /// connections opened afterwards bring change notices.
    pub fn new(client: Client, runtime: Handle, ttl: Duration) -> Self {
        let kernel = KernelCache {
            ttl,
            blksize: client.chunk_size() as u32,
            notifier: Default::default(),
            reported: Default::default(),
            refused: Default::default(),
            told_stale: Default::default(),
            directories: Default::default(),
            invalidations: Default::default(),
            listings: Default::default(),
        };
        let kernel = Arc::new(kernel);
        client.watch(Arc::new(Invalidations::start(kernel.clone())));
        SurgeFs {
            client,
            runtime,
            kernel,
            budget: Budget::new(READ_CACHE_BUDGET),
            files: Default::default(),
            dirs: Default::default(),
            next_handle: AtomicU64::new(1),
        }
    }

    /// Where to put the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.kernel.notifier.clone()
    }

    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        self.files.lock().unwrap().by_handle.get(&fh).cloned()
    }

    /// A handle number for a file being opened, and what registers the file under it.
    fn insert_later(&self) -> (u64, impl FnOnce(File) + Send + 'static) {
        let fh = self.handle();
        let (files, budget) = (self.files.clone(), self.budget.clone());
        let (chunk, window) = (self.client.chunk_size(), self.client.stream_window());
        let insert = move |f: File| {
            let open = OpenFile { file: Arc::new(f), chunks: ChunkCache::new(chunk, window, budget) };
            files.lock().unwrap().insert(fh, Arc::new(open));
        };
        (fh, insert)
    }

    /// The largest size any open handle on this node knows for `ino`: writes not yet
    /// published to the servers are part of the file for every program on this node.
    fn local_size(&self, ino: u64) -> u64 {
        local_size(&self.files, ino)
    }

    /// The other open handles of the same file: what one handle writes, a read through
    /// another on this node must see.
    fn siblings(&self, fh: u64, ino: u64) -> Vec<Arc<OpenFile>> {
        siblings(&self.files, fh, ino)
    }

    /// Runs `work` on the runtime; the session thread moves on to the next request.
    fn spawn<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.runtime.spawn(work);
    }
}

fn to_system_time(t: Timestamp) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs()) + Duration::from_nanos(t.nanos as u64)
    }
}

fn to_timestamp(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::Now => Timestamp::now(),
        TimeOrNow::SpecificTime(st) => match st.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() },
            Err(e) => {
                let d = e.duration();
                Timestamp {
                    secs: -(d.as_secs() as i64) - i64::from(d.subsec_nanos() > 0),
                    nanos: (1_000_000_000 - d.subsec_nanos()) % 1_000_000_000,
                }
            }
        },
    }
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
    }
}

fn fuse_attr(a: &Attr, blksize: u32) -> FileAttr {
    FileAttr {
        ino: a.ino,
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.ctime),
        kind: file_type(a.kind),
        perm: a.mode as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize,
        flags: 0,
    }
}

fn name_of(name: &OsStr) -> Result<String, i32> {
    std::str::from_utf8(name.as_bytes()).map(str::to_string).map_err(|_| libc::EINVAL)
}

/// See [`SurgeFs::local_size`]; callable from tasks that hold only the handle table.
fn local_size(files: &Files, ino: u64) -> u64 {
    files.lock().unwrap().of_ino(ino, 0).map(|f| f.file.size()).max().unwrap_or(0)
}

/// See [`SurgeFs::siblings`] (`fh` 0: every handle of `ino`).
fn siblings(files: &Files, fh: u64, ino: u64) -> Vec<Arc<OpenFile>> {
    files.lock().unwrap().of_ino(ino, fh).cloned().collect()
}

/// `result` for an inode the kernel names, where NotFound means the servers no longer have
/// it: the kernel reached it through a cached name (see [`KernelCache::stale`]).
fn check_stale<T>(result: surge_client::Result<T>, kernel: &KernelCache, pid: u32) -> surge_client::Result<T> {
    match result {
        Err(e) if e.code == ErrorCode::NotFound => Err(kernel.stale(pid)),
        other => other,
    }
}

/// What a namespace change did to its name, for `KernelCache::named`: `exists` once it
/// succeeded, unknown after a failure.
fn outcome<T>(result: &surge_client::Result<T>, exists: bool) -> Option<bool> {
    result.is_ok().then_some(exists)
}

/// Answers a request that returns nothing but success or an errno.
fn answer_empty(reply: ReplyEmpty, result: surge_client::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e.errno()),
    }
}

/// Answers a request that returns bytes (a read, a symlink's target).
fn answer_data<B: AsRef<[u8]>>(reply: ReplyData, result: surge_client::Result<B>) {
    match result {
        Ok(bytes) => reply.data(bytes.as_ref()),
        Err(e) => reply.error(e.errno()),
    }
}

/// Answers a request that returns a new or found directory entry. Only positive entries
/// are cached by the kernel: an error leaves no negative entry behind.
fn answer_entry(reply: ReplyEntry, result: surge_client::Result<Attr>, kernel: &KernelCache) {
    match result {
        Ok(attr) => reply.entry(&kernel.ttl, &kernel.attr(&attr), 0),
        Err(e) => reply.error(e.errno()),
    }
}

/// Answers a request that returns attributes.
fn answer_attr(reply: ReplyAttr, result: surge_client::Result<Attr>, kernel: &KernelCache) {
    match result {
        Ok(attr) => reply.attr(&kernel.ttl, &kernel.attr(&attr)),
        Err(e) => reply.error(e.errno()),
    }
}

macro_rules! name_or_reply {
    ($name:expr, $reply:expr) => {
        match name_of($name) {
            Ok(n) => n,
            Err(errno) => return $reply.error(errno),
        }
    };
}

impl Filesystem for SurgeFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        use fuser::consts::{FUSE_ATOMIC_O_TRUNC, FUSE_AUTO_INVAL_DATA, FUSE_PARALLEL_DIROPS};
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        // Capabilities the running kernel lacks are simply not used.
        for capability in [FUSE_PARALLEL_DIROPS, FUSE_AUTO_INVAL_DATA, FUSE_ATOMIC_O_TRUNC] {
            let _ = config.add_capabilities(capability);
        }
        Ok(())
    }

    /// The kernel evicted the inode: it holds nothing of it any more.
    fn forget(&mut self, _req: &Request<'_>, ino: u64, _nlookup: u64) {
        self.kernel.reported.lock().unwrap().remove(&ino);
        self.kernel.refused.lock().unwrap().remove(&ino);
        self.kernel.forget_directory(ino);
        self.kernel.listings.forget(ino);
    }

    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        if self.kernel.listings.known_missing(parent, &name) {
            self.kernel.settled(req.pid());
            return reply.error(libc::ENOENT);
        }
        let (client, kernel, files, pid) = (self.client.clone(), self.kernel.clone(), self.files.clone(), req.pid());
        self.spawn(async move {
            let result = client.lookup(parent, &name).await.map(|mut attr| {
                attr.size = attr.size.max(local_size(&files, attr.ino));
                attr
            });
            if matches!(&result, Err(e) if e.code == ErrorCode::NotFound) {
                // A path walk ends here: a retry after ESTALE is over.
                kernel.settled(pid);
                if kernel.listings.missed(parent) {
                    let (client, kernel) = (client.clone(), kernel.clone());
                    tokio::spawn(async move {
                        let names = client.readdir_ino(parent).await.ok().map(|entries| entries.into_iter().map(|e| e.name).collect());
                        kernel.listings.fetched(parent, names);
                    });
                }
            }
            answer_entry(reply, result, &kernel)
        });
    }

    fn getattr(&mut self, req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        if let Some(dir) = self.kernel.directory(ino) {
            return reply.attr(&self.kernel.ttl, &fuse_attr(&dir, self.kernel.blksize));
        }
        let (client, kernel, pid) = (self.client.clone(), self.kernel.clone(), req.pid());
        let local = self.local_size(ino);
        self.spawn(async move {
            let result = check_stale(client.getattr(ino).await, &kernel, pid).map(|mut attr| {
                attr.size = attr.size.max(local);
                attr
            });
            answer_attr(reply, result, &kernel)
        });
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let (client, kernel) = (self.client.clone(), self.kernel.clone());
        kernel.forget_directory(ino);
        let open = fh.and_then(|fh| self.file(fh));
        if size.is_some() {
            // New contents for every reader on this node.
            for other in siblings(&self.files, 0, ino) {
                other.chunks.clear();
            }
        }
        self.spawn(async move {
            let result = async {
                if let (Some(size), Some(f)) = (size, &open) {
                    // Through the handle, so its pending writes land first.
                    f.file.set_len(size).await?;
                }
                let changes = AttrChanges {
                    mode: mode.map(|m| m & 0o7777),
                    uid,
                    gid,
                    size: if open.is_some() { None } else { size },
                    atime: atime.map(to_timestamp),
                    mtime: mtime.map(to_timestamp),
                };
                client.setattr(ino, changes).await
            }
            .await;
            answer_attr(reply, result, &kernel)
        });
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let client = self.client.clone();
        self.spawn(async move { answer_data(reply, client.readlink_ino(ino).await) });
    }

    fn mknod(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, _rdev: u32, reply: ReplyEntry) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Devices, FIFOs and sockets have no place in a burst buffer.
            return reply.error(libc::EPERM);
        }
        let name = name_or_reply!(name, reply);
        let (client, kernel) = (self.client.as_user(req.uid(), req.gid()), self.kernel.clone());
        self.spawn(async move {
            let result = async {
                let f = client.create_at(parent, &name, mode & !umask & 0o7777, true).await?;
                let ino = f.ino();
                f.close().await?;
                client.getattr(ino).await
            }
            .await;
            kernel.listings.named(parent, &name, outcome(&result, true));
            answer_entry(reply, result, &kernel)
        });
    }

    fn mkdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        let (client, kernel) = (self.client.as_user(req.uid(), req.gid()), self.kernel.clone());
        self.spawn(async move {
            let result = client.mkdir_at(parent, &name, mode & !umask & 0o7777).await;
            if let Ok(attr) = &result {
                kernel.listings.made(attr.ino);
            }
            kernel.listings.named(parent, &name, outcome(&result, true));
            answer_entry(reply, result, &kernel)
        });
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        let (client, kernel) = (self.client.clone(), self.kernel.clone());
        self.spawn(async move {
            let result = client.unlink_at(parent, &name).await;
            kernel.listings.named(parent, &name, outcome(&result, false));
            answer_empty(reply, result)
        });
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        let (client, kernel) = (self.client.clone(), self.kernel.clone());
        self.spawn(async move {
            let result = client.rmdir_at(parent, &name).await;
            kernel.listings.named(parent, &name, outcome(&result, false));
            answer_empty(reply, result)
        });
    }

    fn symlink(&mut self, req: &Request<'_>, parent: u64, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        let name = name_or_reply!(link_name, reply);
        let target = name_or_reply!(target.as_os_str(), reply);
        let (client, kernel) = (self.client.as_user(req.uid(), req.gid()), self.kernel.clone());
        self.spawn(async move {
            let result = client.symlink_at(parent, &name, &target).await;
            kernel.listings.named(parent, &name, outcome(&result, true));
            answer_entry(reply, result, &kernel)
        });
    }

    fn rename(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32, reply: ReplyEmpty) {
        if flags & !libc::RENAME_NOREPLACE != 0 {
            // RENAME_EXCHANGE / RENAME_WHITEOUT.
            return reply.error(libc::EINVAL);
        }
        let name = name_or_reply!(name, reply);
        let newname = name_or_reply!(newname, reply);
        let (client, kernel) = (self.client.clone(), self.kernel.clone());
        self.spawn(async move {
            let result = client.rename_at(parent, &name, newparent, &newname, flags & libc::RENAME_NOREPLACE != 0).await;
            kernel.listings.named(parent, &name, outcome(&result, false));
            kernel.listings.named(newparent, &newname, outcome(&result, true));
            answer_empty(reply, result)
        });
    }

    /// Close-to-open: the attributes come fresh from the file's home server; what the kernel
    /// cached is dropped if it differs, and so is the page cache (no FOPEN_KEEP_CACHE).
    fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let (client, kernel, window) = (self.client.clone(), self.kernel.clone(), self.client.stream_window());
        let ((fh, open), pid) = (self.insert_later(), req.pid());
        self.spawn(async move {
            let result = async {
                let f = match client.open_ino(ino).await {
                    Ok(f) if f.attr_at_open().nlink == 0 && kernel.refuse_once(ino) => {
                        let _ = f.close().await;
                        Err(ErrorCode::NotFound.into())
                    }
                    other => other,
                };
                let f = check_stale(f, &kernel, pid)?;
                // The open (and any retry of its path walk) is over.
                kernel.settled(pid);
                kernel.revalidate(f.attr_at_open());
                if flags & libc::O_TRUNC != 0 {
                    f.set_len(0).await?;
                }
                f.set_write_behind(window).await?;
                Ok::<_, surge_client::Error>(f)
            }
            .await;
            match result {
                Ok(f) => {
                    open(f);
                    reply.opened(fh, 0)
                }
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    fn read(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, size: u32, _flags: i32, _lock: Option<u64>, reply: ReplyData) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        let siblings = self.siblings(fh, ino);
        if siblings.is_empty() {
            // Nobody else here writes to the file. Chunks held by servers on this node are
            // read from their data files right here (page cache to reply: what a passthrough
            // file system does); the chunk cache's streaming is for data across the network.
            if let Some(data) = f.file.read_local(offset as u64, size as usize) {
                return answer_data(reply, data);
            }
            // Route the request on this thread. A plain
            // read (random 4 KiB) goes out from here and is answered by the connection's
            // reader: no task, no runtime wake-up on the way out.
            let (offset, route) = (offset as u64, f.chunks.route(&f.file, offset as u64, size as u64));
            let route = match route {
                Route::Servers { len } => {
                    let answer = move |data: surge_client::Result<Vec<u8>>| answer_data(reply, data);
                    match f.file.read_then(offset, len as usize, answer) {
                        Ok(()) => return,
                        Err(answer) => return self.spawn(async move { answer(f.file.pread(offset, len as usize).await) }),
                    }
                }
                other => other,
            };
            return self.spawn(async move { answer_data(reply, f.chunks.read_routed(&f.file, route, offset).await) });
        }
        self.spawn(async move {
            for other in &siblings {
                // Their failures belong to their own writers, who will hear of them.
                let _ = other.file.wait_writes().await;
                f.file.note_size(other.file.size());
            }
            let data = match f.file.read_local(offset as u64, size as usize) {
                Some(data) => data.map(bytes::Bytes::from),
                None => f.chunks.read(&f.file, offset as u64, size as u64).await,
            };
            answer_data(reply, data)
        });
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _wflags: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyWrite,
    ) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        let siblings = self.siblings(fh, ino);
        // Cached chunks may hold what this write replaces, for this and every other reader here.
        f.chunks.clear();
        for other in &siblings {
            other.chunks.clear();
        }
        let data = bytes::Bytes::copy_from_slice(data);
        // A write that fits the write-behind window goes out from this thread (to the chunk's
        // server, or to the local writer when the chunks' servers are on this node) and is
        // answered at once (no task, no runtime wake-up); others wait for room on the runtime.
        let data = match f.file.write_behind_now(offset as u64, data) {
            Ok(n) => return reply.written(n as u32),
            Err(data) => data,
        };
        self.spawn(async move {
            match f.file.pwrite_bytes(offset as u64, data).await {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    /// Every close(2): wait for this handle's writes and publish size and mtime, so the
    /// close-to-open promise holds when close returns (and write errors reach close).
    fn flush(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        if f.file.is_clean() {
            // Nothing written through this handle (a read, or a create then close): answered
            // on the spot, without a hop to the runtime.
            return reply.ok();
        }
        self.spawn(async move { answer_empty(reply, f.file.flush().await) });
    }

    fn release(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, _lock: Option<u64>, _flush: bool, reply: ReplyEmpty) {
        let Some(f) = self.files.lock().unwrap().remove(fh) else { return reply.error(libc::EBADF) };
        self.spawn(async move { answer_empty(reply, f.file.release().await) });
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        self.spawn(async move { answer_empty(reply, f.file.fsync().await) });
    }

    /// Takes a snapshot of the directory; readdir pages through it by index.
    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let client = self.client.clone();
        let (dirs, fh) = (self.dirs.clone(), self.handle());
        self.spawn(async move {
            match client.readdir_ino(ino).await {
                Ok(entries) => {
                    dirs.lock().unwrap().insert(fh, Arc::new(entries));
                    reply.opened(fh, 0)
                }
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let Some(entries) = self.dirs.lock().unwrap().get(&fh).cloned() else { return reply.error(libc::EBADF) };
        // Offsets: 1 = ".", 2 = "..", 2 + i + 1 = entries[i].
        let mut next = offset;
        loop {
            let full = match next {
                0 => reply.add(ino, 1, FileType::Directory, "."),
                1 => reply.add(ino, 2, FileType::Directory, ".."),
                n => match entries.get((n - 2) as usize) {
                    Some(e) => reply.add(e.ino, n + 1, file_type(e.kind), &e.name),
                    None => break,
                },
            };
            if full {
                break;
            }
            next += 1;
        }
        reply.ok();
    }

    fn releasedir(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, reply: ReplyEmpty) {
        self.dirs.lock().unwrap().remove(&fh);
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let client = self.client.clone();
        self.spawn(async move {
            let (mut capacity, mut used, mut inodes) = (0u64, 0u64, 0u64);
            for stats in client.statfs().await {
                match stats {
                    Ok(s) => {
                        capacity += s.capacity;
                        used += s.used;
                        inodes += s.inodes;
                    }
                    Err(e) => return reply.error(e.errno()),
                }
            }
            const BLOCK: u64 = 4096;
            let free = capacity.saturating_sub(used) / BLOCK;
            reply.statfs(capacity / BLOCK, free, free, inodes + (1 << 32), 1 << 32, BLOCK as u32, 255, BLOCK as u32);
        });
    }

    fn create(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let name = name_or_reply!(name, reply);
        let (client, kernel) = (self.client.as_user(req.uid(), req.gid()), self.kernel.clone());
        let window = self.client.stream_window();
        let (fh, open) = self.insert_later();
        self.spawn(async move {
            let result = async {
                let f = client.create_at(parent, &name, mode & !umask & 0o7777, flags & libc::O_EXCL != 0).await?;
                if flags & libc::O_TRUNC != 0 && f.size() > 0 {
                    f.set_len(0).await?;
                }
                f.set_write_behind(window).await?;
                let mut attr = f.attr_at_open().clone();
                attr.size = f.size();
                Ok::<_, surge_client::Error>((f, attr))
            }
            .await;
            kernel.listings.named(parent, &name, outcome(&result, true));
            match result {
                Ok((f, attr)) => {
                    open(f);
                    reply.created(&kernel.ttl, &kernel.attr(&attr), 0, fh, 0)
                }
                Err(e) => reply.error(e.errno()),
            }
        });
    }
}
