//! The mount's operations: what each FUSE request does, in terms of the client library and the
//! mount's caches, with results as `Result`s. The FUSE adapter ([`crate::adapter`]) only
//! converts the kernel's arguments, calls one of these and turns the outcome into a reply;
//! this layer knows no FUSE reply type, so it runs (and is tested) without a kernel mount.
//!
//! Each operation is one method returning an [`Answer`]: [`Answer::Now`] when it was answered
//! without a round trip (a name known missing, a directory's attributes heard moments ago, a
//! close of a clean handle, a namespace change in a directory held under a delegation), else
//! [`Answer::Later`], the work left for the runtime. The guarantee the adapter builds on: the
//! method itself runs, on the calling thread (the FUSE session thread), whatever must happen
//! in request order (the fast path's decision and its side effects, cache drops, the
//! kernel-cache records), so a `Now` answer is complete when it returns; a `Later` comes back
//! with none of its remaining work started: that starts when it is first polled (the adapter
//! spawns it on the runtime). Awaiting an `Answer` gives its result either way (how the tests
//! drive this layer).
//!
//! Reads and writes choose their own route ([`Ops::read`], [`Ops::write`]) and answer through
//! a callback: served on the spot from this node's data files, sent from this thread and
//! answered by the connection's reader, or handed to a task.

use std::collections::HashSet;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use surge_client::surge_proto::data::AllocateMode;
use surge_client::surge_proto::{Attr, AttrChanges, DirEntry, ErrorCode, FileKind, LockHolder, LockKind, Requester, MAX_NAME_LEN};
use surge_client::{Client, DelegatedDir, Error, File, LockRange, Named, Result};
use tokio::runtime::Handle;

use crate::chunks::{Budget, ChunkCache, Route};
use crate::handles::{siblings, unpublished_size, Files, OpenFile, OpenFiles};
use crate::kernel::{Invalidations, KernelCache};
use crate::locks::LockOwners;
use crate::reopens::Reopens;
use surge_client::Delegations;

/// Names longer than a directory entry holds are refused before anything else, also where
/// the mount would answer on its own that a name is missing.
fn names_fit(names: &[&str]) -> Result<()> {
    match names.iter().find(|name| name.len() > MAX_NAME_LEN) {
        Some(name) => Err(Error::new(ErrorCode::NameTooLong, format!("name of {} bytes", name.len()))),
        None => Ok(()),
    }
}

/// What all read caches of the mount may hold together.
const READ_CACHE_BUDGET: u64 = 512 << 20;

/// What the kernel says of a write besides its bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct HowWritten {
    /// The file was opened with O_APPEND: the data goes at the end of the file as its home
    /// has it (other nodes append too), not at the kernel's idea of the end.
    pub append: bool,
    /// The writer, when it lacks CAP_FSETID and the file has set-id bits
    /// (FUSE_WRITE_KILL_SUIDGID): the bits go first.
    pub kill_set_id_of: Option<Caller>,
}

/// A directory's names as one opendir took them (readdir pages through them, whatever
/// changes meanwhile, as a local file system's listing of an unchanged directory would), with
/// where the mount's count of changes stood just before (see `Ops::attr_to_give`).
#[derive(Debug, PartialEq)]
pub struct Listing {
    pub entries: Vec<DirEntry>,
    pub(crate) mark: u64,
}

/// A directory handle: the listing its reads walk.
struct OpenDir {
    ino: u64,
    listing: Arc<Listing>,
    /// A read at the start was answered: the next one there is a rewind (rewinddir).
    read_from_start: bool,
}

impl std::ops::Deref for Listing {
    type Target = [DirEntry];

    fn deref(&self) -> &[DirEntry] {
        &self.entries
    }
}

/// Who asks: the identity stamped on what a request creates, and the process (for the kernel's
/// retries after ESTALE).
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl Caller {
    /// The caller as the servers' set-id rules need it: with the supplementary groups its
    /// process has (only the primary group if they cannot be read).
    pub fn requester(&self) -> Requester {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let groups = status
            .lines()
            .find_map(|line| line.strip_prefix("Groups:"))
            .map(|list| list.split_whitespace().filter_map(|g| g.parse().ok()).collect())
            .unwrap_or_else(|| vec![self.gid]);
        Requester { uid: self.uid, gid: self.gid, groups }
    }
}

/// Capacity and inode counts for STATFS, in 4 KiB blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsStats {
    pub blocks: u64,
    pub free: u64,
    /// What one file striped over every server can still take (df's "Avail"): each server
    /// holds its share of such a file, so the fullest server bounds it, at the server count
    /// times its whole free chunks. `free` is the sum of what every server has left.
    pub available: u64,
    pub files: u64,
    pub files_free: u64,
}

/// The bytes one file striped over `servers` servers in `chunk`-byte chunks can still take
/// when the fullest has `least_free` bytes left: that server's whole free chunks, on each
/// server (a file's share on one server is at most one chunk above another's).
fn striped_room(servers: u64, least_free: u64, chunk: u64) -> u64 {
    let chunk = chunk.max(1);
    servers.saturating_mul(least_free / chunk * chunk)
}

/// Size of a STATFS block.
pub const STATFS_BLOCK: u64 = 4096;

/// What an operation answers: ready now, or later.
pub enum Answer<T> {
    /// Answered without a round trip, on the calling thread, before the operation returned.
    Now(Result<T>),
    /// The work still to do, for the runtime: none of it has run yet (it starts when first
    /// polled).
    Later(Later<T>),
}

/// The work of an answer that comes later.
pub type Later<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

impl<T> Answer<T> {
    /// `work` as an answer that comes later.
    fn later(work: impl Future<Output = Result<T>> + Send + 'static) -> Answer<T> {
        Answer::Later(Box::pin(work))
    }
}

/// Awaiting an answer gives its result, whether it came now or comes later.
impl<T: Send + 'static> IntoFuture for Answer<T> {
    type Output = Result<T>;
    type IntoFuture = Later<T>;

    fn into_future(self) -> Later<T> {
        match self {
            Answer::Now(result) => Box::pin(std::future::ready(result)),
            Answer::Later(work) => work,
        }
    }
}

pub struct Ops {
    client: Client,
    runtime: Handle,
    pub(crate) kernel: Arc<KernelCache>,
    budget: Arc<Budget>,
    files: Files,
    dirs: Arc<Mutex<std::collections::HashMap<u64, OpenDir>>>,
    next_handle: AtomicU64,
    lock_owners: Arc<LockOwners>,
    /// The kernel agreed to pass I/O through to backing files and this process may ask it to.
    passthrough: AtomicBool,
    /// The task keeping capacity set aside for passthrough handles runs.
    passthrough_guard: AtomicBool,
    /// Directories held under a delegation: creates and unlinks there answered here.
    delegations: Arc<Delegations>,
    /// Directories whose files made under a delegation were written at length: their next
    /// creates are passed through to data files (see [`Ops::create`]).
    written_at_length: Mutex<HashSet<u64>>,
    /// Files kept at their homes: read-only opens of them answered here.
    reopens: Arc<Reopens>,
}

/// A file opened: its handle, and the data file to hand to the kernel when its I/O is passed
/// through (see [`surge_client::passthrough`]).
pub struct Opened {
    pub fh: u64,
    pub backing: Option<Arc<std::fs::File>>,
    /// The kernel's cached pages of the file are its bytes now: keep them (FOPEN_KEEP_CACHE).
    pub keep_cache: bool,
}

/// A file written this far is worth passing through (see [`Ops::create`]).
const PASSTHROUGH_WORTH: u64 = 1 << 20;

/// How often the capacity set aside for passthrough handles is checked: what a writer can
/// outgrow it by is what it writes in this time.
const PASSTHROUGH_GUARD_PERIOD: Duration = Duration::from_millis(10);

/// A handle the home registered, once preparing it for the kernel is over: released when
/// that failed, as the kernel never sees it and never releases it (the home would count the
/// open for good, and keep an unlinked file's data).
async fn released_on_error(f: File, prepared: Result<()>) -> Result<File> {
    if let Err(e) = prepared {
        let ino = f.ino();
        if let Err(release) = f.close().await {
            tracing::warn!(ino = format!("{ino:#x}"), "releasing a handle whose open failed: {release}");
        }
        return Err(e);
    }
    Ok(f)
}

fn no_directory_handle(fh: u64) -> Error {
    Error::new(ErrorCode::BadHandle, format!("directory handle {fh} is not open"))
}

/// What a namespace change did to its name, for `Listings::named`: `exists` once it
/// succeeded, unknown after a failure.
fn outcome<T>(result: &Result<T>, exists: bool) -> Option<bool> {
    result.is_ok().then_some(exists)
}

impl Ops {
    /// `ttl`: how long the kernel may use attributes and names without asking (see the crate
    /// documentation for how they are kept exact). Call before `client` sends anything: only
    /// connections opened afterwards bring change notices.
    pub fn new(client: Client, runtime: Handle, ttl: Duration) -> Arc<Ops> {
        let kernel = Arc::new(KernelCache::new(ttl, client.chunk_size() as u32));
        let delegations = Delegations::new(client.clone(), runtime.clone());
        let reopens = Arc::new(Reopens::new(runtime.clone(), client.clone()));
        client.watch(Arc::new(Invalidations::start(kernel.clone(), delegations.clone(), reopens.clone())));
        Arc::new(Ops {
            client,
            reopens,
            runtime,
            kernel,
            budget: Budget::new(READ_CACHE_BUDGET),
            files: Default::default(),
            dirs: Default::default(),
            next_handle: AtomicU64::new(1),
            lock_owners: Default::default(),
            passthrough: AtomicBool::new(false),
            passthrough_guard: AtomicBool::new(false),
            delegations,
            written_at_length: Default::default(),
        })
    }

    /// Writes back and gives up every directory delegation, and waits for the answers left
    /// to the background (before the mount goes away: a step answered here and not written
    /// back, or a purge still queued, would be lost with the process).
    pub async fn settle_with_servers(&self) {
        self.delegations.give_all_back().await;
        self.client.background_done().await;
    }

    /// Opens files in passthrough mode from now on, where their data allows it.
    pub fn enable_passthrough(&self) {
        self.passthrough.store(true, Ordering::Relaxed);
    }

    /// Hands `f`'s data file to the kernel when every chunk is on this node's server (not for
    /// O_APPEND: appends go through the file's server, which orders them across nodes).
    async fn passthrough_for(self: &Arc<Self>, f: &File, flags: i32) -> Option<Arc<std::fs::File>> {
        if !self.may_pass_through(flags) {
            return None;
        }
        let backing = f.begin_passthrough(flags & libc::O_ACCMODE != libc::O_RDONLY).await?;
        self.guard_passthrough_room();
        Some(backing)
    }

    /// [`Ops::passthrough_for`] without waiting (none when the data file's server is not
    /// connected yet).
    fn passthrough_now(self: &Arc<Self>, f: &File, flags: i32) -> Option<Arc<std::fs::File>> {
        if !self.may_pass_through(flags) {
            return None;
        }
        let backing = f.begin_passthrough_now(flags & libc::O_ACCMODE != libc::O_RDONLY)?;
        self.guard_passthrough_room();
        Some(backing)
    }

    fn may_pass_through(&self, flags: i32) -> bool {
        self.passthrough.load(Ordering::Relaxed) && flags & libc::O_APPEND == 0
    }

    /// Starts the task keeping room set aside for passthrough handles, unless it runs.
    fn guard_passthrough_room(self: &Arc<Self>) {
        if !self.passthrough_guard.swap(true, Ordering::Relaxed) {
            let ops = Arc::downgrade(self);
            self.runtime.spawn(keep_passthrough_room(ops));
        }
    }

    /// The runtime requests are answered on.
    pub fn runtime(&self) -> &Handle {
        &self.runtime
    }

    /// How long the kernel may keep what it is told.
    pub fn ttl(&self) -> Duration {
        self.kernel.ttl
    }

    /// The count of changes this mount made or heard of: taken before a request whose answer
    /// gives the kernel attributes (see [`Ops::ttl_since`]).
    pub fn change_mark(&self) -> u64 {
        self.kernel.change_mark()
    }

    /// How long the kernel may keep the attributes of `ino` that a request begun at `mark`
    /// answers: the cache time, or none when they changed since (the servers may have read
    /// them before the change, and its notice may have found nothing to drop).
    pub fn ttl_since(&self, ino: u64, mark: u64) -> Duration {
        if self.kernel.changed_since(ino, mark) {
            Duration::ZERO
        } else {
            self.kernel.ttl
        }
    }

    /// The kernel was just given the attributes of `ino` for `ttl` by a request begun at
    /// `mark`. The kernel takes a reply in only once its requester runs again, so a change
    /// heard of after [`Ops::ttl_since`] looked may have been dropped from the kernel before:
    /// the attributes are then dropped again, a few times over the next second.
    pub fn gave_attr(&self, ino: u64, mark: u64, ttl: Duration) {
        if ttl.is_zero() || !self.kernel.changed_since(ino, mark) {
            return;
        }
        let kernel = self.kernel.clone();
        self.runtime.spawn(async move {
            for pause in [1, 10, 100, 1000] {
                tokio::time::sleep(Duration::from_millis(pause)).await;
                kernel.invalidate(crate::kernel::Invalidation::Attr(ino));
            }
        });
    }

    /// The block size the kernel is told (the chunk size: the unit worth reading at once).
    pub fn blksize(&self) -> u32 {
        self.kernel.blksize
    }

    /// Runs `work` on the runtime; the session thread moves on to the next request.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(work);
    }

    /// `attr` is about to be told to the kernel (see [`KernelCache::told`]).
    pub(crate) fn told(&self, attr: Attr) -> Attr {
        self.kernel.told(&attr);
        attr
    }

    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn open_file(&self, fh: u64) -> Result<Arc<OpenFile>> {
        self.files.lock().unwrap().get(fh).ok_or_else(|| Error::new(ErrorCode::BadHandle, format!("handle {fh} is not open")))
    }

    /// Registers `file` under a new handle, opened with `flags` and passed through to
    /// `backing` or not; says whether the kernel may keep its cached pages of the file.
    fn register(&self, file: File, flags: i32, backing: Option<Arc<std::fs::File>>) -> Opened {
        self.register_made_in(file, flags, backing, None)
    }

    /// [`Ops::register`] for a file made in directory `made_in` under its delegation.
    fn register_made_in(&self, file: File, flags: i32, backing: Option<Arc<std::fs::File>>, made_in: Option<u64>) -> Opened {
        let fh = self.handle();
        let ino = file.ino();
        let paged = backing.is_none() && flags & libc::O_APPEND == 0;
        let keep_cache = if paged {
            // Truncated by this open: the kernel drops its pages of the file, and the pages it
            // fills from now on are of the version after the truncation.
            let held = self.kernel.open_pages(ino, file.content_version());
            held && flags & libc::O_TRUNC == 0
        } else {
            // Its writes go around the kernel's pages of the file.
            self.kernel.forget_pages(ino);
            false
        };
        let chunks = ChunkCache::new(self.client.chunk_size(), self.client.stream_window(), self.budget.clone());
        let made_in = made_in.filter(|_| backing.is_none());
        self.files.lock().unwrap().insert(fh, Arc::new(OpenFile { file: Arc::new(file), chunks, paged, made_in }));
        Opened { fh, backing, keep_cache }
    }

    /// `ino` was truncated or extended to `size` through this mount (through handle `fh`, or
    /// 0): every other handle of it here takes that size, so that what they report (the
    /// larger of the open handles' sizes covers writes not published yet) and where they
    /// stop reading follow the truncation.
    fn resized_here(&self, ino: u64, size: u64, fh: u64) {
        self.kernel.resized(ino, size);
        for handle in siblings(&self.files, fh, ino) {
            handle.file.note_resize(size);
        }
    }

    /// After a flush, fsync or release of `open` that ended with `outcome`: what its
    /// publication means for the kernel's pages of the file.
    fn published(&self, open: &OpenFile, outcome: &Result<()>) {
        let publication = open.file.take_publication();
        if open.paged {
            self.kernel.published_pages(open.file.ino(), publication, outcome.is_ok());
        } else if publication.is_some() || outcome.is_err() {
            self.kernel.forget_pages(open.file.ino());
        }
    }

    /// `result` for an inode the kernel names, where NotFound means the servers no longer have
    /// it: the kernel reached it through a cached name (see [`KernelCache::stale`]).
    fn check_stale<T>(&self, result: Result<T>, pid: u32) -> Result<T> {
        match result {
            Err(e) if e.code == ErrorCode::NotFound => Err(self.kernel.stale(pid)),
            other => other,
        }
    }

    // ------------------------------------------------------------ names and attributes

    /// The kernel evicted the inode: it holds nothing of it any more.
    pub fn forget(&self, ino: u64) {
        self.reopens.changed(ino);
        self.kernel.forgotten(ino);
        self.delegations.forgotten(ino);
    }

    /// Answered now when the name is missing from a directory whose every name this mount
    /// knows; otherwise asked of the servers.
    pub fn lookup(self: &Arc<Self>, parent: u64, name: String, caller: Caller) -> Answer<Attr> {
        if name == "." || name == ".." {
            return self.lookup_by_number(parent, name == "..");
        }
        if let Err(e) = names_fit(&[&name]) {
            return Answer::Now(Err(e));
        }
        if self.kernel.listings.known_missing(parent, &name) {
            // A path walk ends here: a retry after ESTALE is over.
            self.kernel.settled(caller.pid);
            return Answer::Now(Err(ErrorCode::NotFound.into()));
        }
        let ops = self.clone();
        Answer::later(async move {
            ops.delegations.settle().await?;
            let result = ops.client.lookup(parent, &name).await.map(|attr| ops.with_unpublished_size(attr));
            if matches!(&result, Err(e) if e.code == ErrorCode::NotFound) {
                ops.kernel.settled(caller.pid);
                if ops.kernel.listings.missed(parent) {
                    // Names keep turning out missing here: fetch the listing once, so the
                    // next missing names are answered without a round trip.
                    let ops = ops.clone();
                    tokio::spawn(async move {
                        let names = ops.client.readdir_ino(parent).await.ok().map(|entries| entries.into_iter().map(|e| e.name).collect());
                        ops.kernel.listings.fetched(parent, names);
                    });
                }
            }
            let attr = result?;
            if attr.kind == FileKind::Dir {
                ops.kernel.looked_up_directory(attr.ino, parent, &name).await;
            }
            Ok(ops.told(attr))
        })
    }

    /// The kernel's way back to an inode from a file handle (`open_by_handle_at`, an NFS
    /// export) once it has evicted it: a lookup of "." in the inode itself, or of ".." for a
    /// directory's parent. Inode numbers are the servers' and never reused, so a handle stays
    /// good across the mount's restarts for as long as its file lives, and a file gone since
    /// is ESTALE, as on a local file system.
    fn lookup_by_number(self: &Arc<Self>, ino: u64, parent: bool) -> Answer<Attr> {
        let ops = self.clone();
        Answer::later(async move {
            ops.delegations.settle().await?;
            let ino = if parent { ops.client.parent_of(ino).await? } else { ino };
            match ops.client.getattr(ino).await {
                Ok(attr) => Ok(ops.told(ops.with_unpublished_size(attr))),
                Err(e) if e.code == ErrorCode::NotFound => Err(Error::new(ErrorCode::Stale, format!("inode {ino:#x} is gone"))),
                Err(e) => Err(e),
            }
        })
    }

    /// A directory's attributes are answered now from what was heard moments ago (see
    /// `KernelCache::directory`); anything else is asked of its home.
    pub fn getattr(self: &Arc<Self>, ino: u64, caller: Caller) -> Answer<Attr> {
        if let Some(attr) = self.kernel.directory(ino) {
            return Answer::Now(Ok(attr));
        }
        let (ops, local) = (self.clone(), unpublished_size(&self.files, ino));
        Answer::later(async move {
            ops.delegations.settle().await?;
            let attr = ops.check_stale(ops.client.getattr(ino).await, caller.pid)?;
            Ok(ops.told(Attr { size: attr.size.max(local), ..attr }))
        })
    }

    /// `fh`: the handle the change came through, if any (a size change then goes through it,
    /// so its pending writes land first). New times of a file made under a delegation and
    /// not written back yet are answered now (see `Delegations::set_times`).
    pub fn setattr(self: &Arc<Self>, ino: u64, change: AttrChanges, fh: Option<u64>) -> Answer<Attr> {
        self.reopens.changed(ino);
        self.kernel.forget_directory(ino);
        let open = fh.and_then(|fh| self.open_file(fh).ok());
        if change.size.is_some() || change.mtime.is_some() {
            for handle in siblings(&self.files, 0, ino) {
                if change.size.is_some() {
                    // New contents for every reader on this node.
                    handle.chunks.clear();
                }
                if change.mtime.is_some() {
                    // Times set after writes (`cp -a`, `tar x`) stay: no handle here may
                    // publish its close time over them.
                    handle.file.times_set_explicitly();
                }
            }
        }
        if let Some(attr) = self.delegations.set_times(ino, &change) {
            return Answer::Now(Ok(self.told(self.with_unpublished_size(attr))));
        }
        let ops = self.clone();
        Answer::later(async move {
            if change.mode.is_some() || change.gid.is_some() {
                // What is made in a set-group-ID directory takes its group: a delegation of it
                // answers with the group and bit it was granted with.
                ops.delegations.give_back_now(ino).await?;
            }
            ops.delegations.settle().await?;
            let mut changes = AttrChanges { mode: change.mode.map(|m| m & 0o7777), ..change };
            let resized = changes.size;
            if let (Some(size), Some(f)) = (changes.size, &open) {
                f.file.set_len(size).await?;
                changes.size = None;
            }
            let attr = ops.client.setattr(ino, changes).await?;
            if let Some(size) = resized {
                ops.resized_here(ino, size, fh.unwrap_or(0));
            }
            Ok(ops.told(attr))
        })
    }

    pub fn readlink(self: &Arc<Self>, ino: u64) -> Answer<String> {
        let ops = self.clone();
        Answer::later(async move { ops.client.readlink_ino(ino).await })
    }

    /// A regular file made without opening it, or a FIFO, socket or device node (each node
    /// uses it as its own: the kernel runs the pipe or opens the device, as on NFS).
    pub fn mknod(self: &Arc<Self>, parent: u64, name: String, mode: u32, umask: u32, rdev: u32, caller: Caller) -> Answer<Attr> {
        if let Err(e) = names_fit(&[&name]) {
            return Answer::Now(Err(e));
        }
        let ops = self.clone();
        Answer::later(async move {
            let client = ops.client.as_user(caller.uid, caller.gid);
            if let Some(kind) = crate::convert::special_kind(mode, rdev) {
                let made = client.mknod_at_with_umask(parent, &name, kind, mode & 0o7777, umask);
                return ops.changed_name(parent, &name, Some(Named::NotDirectory), made).await.map(|attr| ops.told(attr));
            }
            if mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Error::new(ErrorCode::Invalid, format!("mknod of an unknown file type {:o}", mode & libc::S_IFMT)));
            }
            let made = async {
                let f = client.create_at_with_umask(parent, &name, mode & 0o7777, umask, true).await?;
                let ino = f.ino();
                f.close().await?;
                client.getattr(ino).await
            };
            ops.changed_name(parent, &name, Some(Named::NotDirectory), made).await.map(|attr| ops.told(attr))
        })
    }

    /// A create or mkdir the delegation of `parent` could not answer: it ended (then off the
    /// list with it, asked for again later), or its numbers ran out before its renewal came
    /// (it stays: the ordinary path meanwhile, which it learns of). The ordinary path follows.
    fn not_answered_now(&self, parent: u64, delegated: &DelegatedDir) {
        if !delegated.is_held() {
            self.delegations.give_back(parent);
        }
    }

    /// Answered now in a directory held under a delegation when the new directory is homed
    /// with its parent (no request); otherwise made the ordinary way.
    pub fn mkdir(self: &Arc<Self>, parent: u64, name: String, mode: u32, umask: u32, caller: Caller) -> Answer<Attr> {
        if let Err(e) = names_fit(&[&name]) {
            return Answer::Now(Err(e));
        }
        if let Some(delegated) = self.delegations.held(parent) {
            match delegated.mkdir(&name, mode & 0o7777, umask, caller.uid, caller.gid) {
                Ok(Some(attr)) => {
                    self.kernel.named(parent, &name, Some(true));
                    self.kernel.listings.made(attr.ino);
                    self.kernel.changed_under_delegation(parent, 1);
                    self.kernel.gave_directory(attr.ino, parent, &name);
                    return Answer::Now(Ok(self.told(attr)));
                }
                Ok(None) => self.not_answered_now(parent, &delegated),
                Err(e) => return Answer::Now(Err(e)),
            }
        }
        let ops = self.clone();
        Answer::later(async move {
            let made = async {
                let attr = ops.client.as_user(caller.uid, caller.gid).mkdir_at_with_umask(parent, &name, mode & 0o7777, umask).await?;
                // Made here: every name in it is known (none yet).
                ops.kernel.listings.made(attr.ino);
                Ok(attr)
            };
            let made = ops.changed_name(parent, &name, Some(Named::Other), made).await?;
            ops.delegations.stepped_in(parent, ops.kernel.listings.knows(parent));
            ops.kernel.gave_directory(made.ino, parent, &name);
            Ok(ops.told(made))
        })
    }

    /// Answered now in a directory held under a delegation, of a name that is not a
    /// directory (see the `delegations` module); otherwise removed at the parent's home.
    pub fn unlink(self: &Arc<Self>, parent: u64, name: String) -> Answer<()> {
        if let Err(e) = names_fit(&[&name]) {
            return Answer::Now(Err(e));
        }
        if let Some(delegated) = self.delegations.held(parent) {
            match delegated.unlink(&name) {
                Ok(true) => {
                    self.kernel.named(parent, &name, Some(false));
                    self.kernel.changed_under_delegation(parent, 0);
                    return Answer::Now(Ok(()));
                }
                Ok(false) => {}
                Err(e) => return Answer::Now(Err(e)),
            }
        }
        let ops = self.clone();
        Answer::later(async move {
            let unlinked = ops.changed_name(parent, &name, None, ops.client.unlink_telling_dir(parent, &name)).await?;
            // Kept here, the file would stay at its home for as long as this node keeps it.
            ops.reopens.changed(unlinked.ino);
            // The kernel asks for the directory's attributes next (its own unlink dropped
            // them, and a permission check needs them): answered from the home's word.
            if let Some(dir) = unlinked.dir_attr {
                ops.told(dir);
            }
            ops.delegations.stepped_in(parent, ops.kernel.listings.knows(parent));
            Ok(())
        })
    }

    /// Answered now for an empty directory made under the delegation of `parent` (while it
    /// is held, nobody else can have put anything in it, and the kernel holds the directory's
    /// lock across the rmdir); otherwise removed at the parent's home.
    pub fn rmdir(self: &Arc<Self>, parent: u64, name: String) -> Answer<()> {
        if let Err(e) = names_fit(&[&name]) {
            return Answer::Now(Err(e));
        }
        if let Some(delegated) = self.delegations.held(parent) {
            if let Some(dir) = delegated.made_dir(&name) {
                if self.removable_here(dir) && delegated.rmdir(&name) {
                    self.kernel.removed_directory_named(parent, &name);
                    self.kernel.named(parent, &name, Some(false));
                    self.removed_here(parent, dir);
                    return Answer::Now(Ok(()));
                }
            }
        }
        let ops = self.clone();
        Answer::later(async move {
            ops.changed_name(parent, &name, None, ops.client.rmdir_at(parent, &name)).await?;
            ops.kernel.removed_directory_named(parent, &name);
            ops.delegations.stepped_in(parent, ops.kernel.listings.knows(parent));
            Ok(())
        })
    }

    /// Whether directory `dir`, made under a delegation, may be removed (or replaced by a
    /// rename) by the mount: its listing here is empty, and it is not held itself (its own
    /// log, files made and unlinked in it, must reach the home first: the ordinary path,
    /// which writes every log back).
    fn removable_here(&self, dir: u64) -> bool {
        self.kernel.listings.known_empty(dir) && self.delegations.held(dir).is_none()
    }

    /// Directory `dir` in `parent` was removed (or replaced) by the mount.
    fn removed_here(&self, parent: u64, dir: u64) {
        self.kernel.listings.forget(dir);
        self.kernel.changed_under_delegation(parent, -1);
    }

    /// Runs `change` of `parent/name` once every delegated step before it is applied, and
    /// records what it did to the name (`now` after it, once it succeeded: what the name
    /// names, or nothing) for the directory listings this mount knows in full and the
    /// delegation of `parent`, if held.
    async fn changed_name<T>(&self, parent: u64, name: &str, now: Option<Named>, change: impl Future<Output = Result<T>>) -> Result<T> {
        self.delegations.settle().await?;
        let result = change.await;
        // Its mtime and ctime changed at its home.
        self.kernel.forget_directory(parent);
        self.kernel.named(parent, name, outcome(&result, now.is_some()));
        self.delegations.changed(parent, name, result.as_ref().map(|_| now).map_err(|_| ()));
        result
    }

    pub fn symlink(self: &Arc<Self>, parent: u64, name: String, target: String, caller: Caller) -> Answer<Attr> {
        if let Err(e) = names_fit(&[&name]) {
            return Answer::Now(Err(e));
        }
        let ops = self.clone();
        Answer::later(async move {
            let client = ops.client.as_user(caller.uid, caller.gid);
            let result = ops.changed_name(parent, &name, Some(Named::NotDirectory), client.symlink_at(parent, &name, &target)).await;
            result.map(|attr| ops.told(attr))
        })
    }

    /// A hard link `newparent/newname` to `ino`.
    pub fn link(self: &Arc<Self>, ino: u64, newparent: u64, newname: String) -> Answer<Attr> {
        if let Err(e) = names_fit(&[&newname]) {
            return Answer::Now(Err(e));
        }
        self.reopens.changed(ino);
        let (ops, local) = (self.clone(), unpublished_size(&self.files, ino));
        Answer::later(async move {
            let attr =
                ops.changed_name(newparent, &newname, Some(Named::NotDirectory), ops.client.link_at(ino, newparent, &newname)).await?;
            Ok(ops.told(Attr { size: attr.size.max(local), ..attr }))
        })
    }

    /// `flags`: RENAME_NOREPLACE, RENAME_EXCHANGE, or nothing; RENAME_WHITEOUT is refused.
    /// Answered now within one directory held under a delegation, of names it knows (see
    /// `DelegatedDir::rename`); otherwise done at the directories' homes.
    pub fn rename(self: &Arc<Self>, parent: u64, name: String, newparent: u64, newname: String, flags: u32) -> Answer<()> {
        if let Err(e) = names_fit(&[&name, &newname]) {
            return Answer::Now(Err(e));
        }
        let plain_within_one = parent == newparent && flags & !libc::RENAME_NOREPLACE == 0;
        if let Some(delegated) = if plain_within_one { self.delegations.held(parent) } else { None } {
            let mut replaced_dir = None;
            let may_replace = |dir| {
                replaced_dir = Some(dir);
                self.removable_here(dir)
            };
            match delegated.rename(&name, &newname, flags & libc::RENAME_NOREPLACE != 0, may_replace) {
                Ok(true) => {
                    let (name, newname) = (name.as_str(), newname.as_str());
                    tracing::trace!(parent = format!("{parent:#x}"), name, newname, "rename answered under a delegation");
                    self.kernel.named(parent, name, Some(false));
                    self.kernel.named(parent, newname, Some(true));
                    self.kernel.changed_under_delegation(parent, 0);
                    self.kernel.renamed(parent, name, parent, newname, false);
                    if let Some(dir) = replaced_dir {
                        self.removed_here(parent, dir);
                    }
                    return Answer::Now(Ok(()));
                }
                Ok(false) => {}
                Err(e) => return Answer::Now(Err(e)),
            }
        }
        let ops = self.clone();
        Answer::later(async move {
            ops.delegations.settle().await?;
            let exchange = flags == libc::RENAME_EXCHANGE;
            let result = if exchange {
                ops.client.exchange_at(parent, &name, newparent, &newname).await
            } else if flags & !libc::RENAME_NOREPLACE != 0 {
                return Err(Error::new(ErrorCode::Invalid, "RENAME_WHITEOUT is not supported"));
            } else {
                ops.client.rename_at(parent, &name, newparent, &newname, flags & libc::RENAME_NOREPLACE != 0).await
            };
            if result.is_ok() {
                ops.kernel.renamed(parent, &name, newparent, &newname, exchange);
            }
            // A directory moved, replaced or swapped changes link counts: asked again.
            ops.kernel.forget_directory(parent);
            ops.kernel.forget_directory(newparent);
            // After an exchange both names still stand; after a rename only the new one.
            ops.kernel.named(parent, &name, outcome(&result, exchange));
            ops.kernel.named(newparent, &newname, outcome(&result, true));
            // What moved is not known here (a file or a directory): a held directory answers
            // no unlink of the names involved without asking.
            for (dir, name, stays) in [(parent, &name, exchange), (newparent, &newname, true)] {
                ops.delegations.changed(dir, name, result.as_ref().map(|_| stays.then_some(Named::Other)).map_err(|_| ()));
            }
            result
        })
    }

    pub fn statfs(self: &Arc<Self>) -> Answer<FsStats> {
        let ops = self.clone();
        Answer::later(async move {
            let (mut capacity, mut used, mut inodes, mut least_free, mut servers) = (0u64, 0u64, 0u64, u64::MAX, 0u64);
            for stats in ops.client.statfs().await {
                let s = stats?;
                capacity += s.capacity;
                used += s.used;
                inodes += s.inodes;
                least_free = least_free.min(s.capacity.saturating_sub(s.used));
                servers += 1;
            }
            let available = striped_room(servers, least_free, ops.client.chunk_size()) / STATFS_BLOCK;
            let free = capacity.saturating_sub(used) / STATFS_BLOCK;
            Ok(FsStats { blocks: capacity / STATFS_BLOCK, free, available, files: inodes + (1 << 32), files_free: 1 << 32 })
        })
    }

    // ------------------------------------------------------------ files

    /// Close-to-open: the attributes come fresh from the file's home server; what the kernel
    /// cached is dropped if it differs, and so is the page cache (no FOPEN_KEEP_CACHE).
    /// Answers the new handle. A read-only open of a file kept here is answered now
    /// (see the `reopens` module); a read-only open with no other handle of the file here
    /// keeps its registration at the home for the opens after it.
    pub fn open(self: &Arc<Self>, ino: u64, flags: i32, caller: Caller) -> Answer<Opened> {
        let read_only = flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0;
        if !read_only {
            // This node is about to change the file: no more opens answered from its keeping.
            self.reopens.changed(ino);
        } else if let Some(opened) = self.open_kept(ino, flags, caller) {
            return Answer::Now(Ok(opened));
        }
        let ops = self.clone();
        Answer::later(async move {
            let kernel = &ops.kernel;
            ops.delegations.settle().await?;
            let keep = read_only && ops.files.lock().unwrap().of_ino(ino, 0).next().is_none() && ops.reopens.opening(ino);
            let sent = std::time::Instant::now();
            let opened = if keep { ops.client.open_ino_kept(ino).await } else { ops.client.open_ino(ino).await };
            if opened.is_ok() {
                ops.reopens.reached(surge_client::surge_proto::ino::home(ino), sent);
            }
            let f = match opened {
                Ok(f) if keep => Ok(ops.reopens.opened(ino, f)),
                Err(e) if keep => {
                    ops.reopens.abandoned(ino);
                    Err(e)
                }
                other => other,
            };
            let f = match f {
                Ok(f) if f.attr_at_open().nlink == 0 && kernel.refuse_once(ino) => {
                    let _ = f.close().await;
                    Err(ErrorCode::NotFound.into())
                }
                other => other,
            };
            let f = ops.check_stale(f, caller.pid)?;
            // The open (and any retry of its path walk) is over.
            kernel.settled(caller.pid);
            kernel.revalidate(f.attr_at_open());
            let prepared = async {
                if flags & libc::O_TRUNC != 0 {
                    f.set_len(0).await?;
                    ops.resized_here(ino, 0, 0);
                    ops.truncated_by(&f, caller).await?;
                }
                if flags & libc::O_ACCMODE != libc::O_RDONLY {
                    // Its close publishes the file (see surge_client::workflow).
                    f.opened_for_writing();
                }
                f.set_write_behind(ops.client.stream_window()).await
            }
            .await;
            let shares_open = f.shares_open();
            let f = released_on_error(f, prepared).await.inspect_err(|_| {
                if shares_open {
                    ops.reopens.released(ino);
                }
            })?;
            let backing = ops.passthrough_for(&f, flags).await;
            Ok(ops.register(f, flags, backing))
        })
    }

    /// A read-only open answered from the kept file, if it is good and every
    /// handle of it here shares that one.
    fn open_kept(self: &Arc<Self>, ino: u64, flags: i32, caller: Caller) -> Option<Opened> {
        let open_here = self.files.lock().unwrap().of_ino(ino, 0).count();
        let f = self.reopens.answer(ino, open_here)?;
        self.kernel.settled(caller.pid);
        self.kernel.revalidate(f.attr_at_open());
        let backing = self.passthrough_now(&f, flags);
        Some(self.register(f, flags, backing))
    }

    /// After a truncating open by `caller`: a set-id file loses its bits as a truncate
    /// without privilege makes it (the servers decide; root's keeps them).
    async fn truncated_by(&self, f: &File, caller: Caller) -> Result<()> {
        if caller.uid != 0 && f.attr_at_open().mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            let changes = AttrChanges { kill_set_id: true, by: Some(caller.requester()), ..Default::default() };
            self.client.setattr(f.ino(), changes).await?;
            self.kernel.attr_changed_now(f.ino());
        }
        Ok(())
    }

    /// Creates (and opens) a file; answers its attributes and the new handle. Answered now in
    /// a directory held under a delegation (no request: see the `delegations` module);
    /// otherwise made at the parent's home.
    pub fn create(
        self: &Arc<Self>,
        parent: u64,
        name: String,
        mode: u32,
        umask: u32,
        flags: i32,
        caller: Caller,
    ) -> Answer<(Attr, Opened)> {
        if let Err(e) = names_fit(&[&name]) {
            return Answer::Now(Err(e));
        }
        if let Some(delegated) = self.delegations.held(parent) {
            match delegated.create(&name, mode & 0o7777, umask, caller.uid, caller.gid) {
                Ok(Some(attr)) => {
                    self.kernel.named(parent, &name, Some(true));
                    self.kernel.changed_under_delegation(parent, 0);
                    let f = self.client.file_made_under(&delegated, &attr, self.client.stream_window());
                    // Handing the kernel a data file costs a create + close about a third more
                    // (the data file made, its backing id opened and closed): only once files
                    // made in this directory turned out to be written at length.
                    let backing =
                        self.written_at_length.lock().unwrap().contains(&parent).then(|| self.passthrough_now(&f, flags)).flatten();
                    return Answer::Now(Ok((self.told(attr), self.register_made_in(f, flags, backing, Some(parent)))));
                }
                Ok(None) => self.not_answered_now(parent, &delegated),
                // An existing file, opened the ordinary way.
                Err(e) if e.code == ErrorCode::Exists && flags & libc::O_EXCL == 0 => {}
                Err(e) => return Answer::Now(Err(e)),
            }
        }
        let ops = self.clone();
        Answer::later(async move {
            let client = ops.client.as_user(caller.uid, caller.gid);
            let created = async {
                let f = client.create_at_with_umask(parent, &name, mode & 0o7777, umask, flags & libc::O_EXCL != 0).await?;
                let prepared = async {
                    if flags & libc::O_TRUNC != 0 && f.size() > 0 {
                        f.set_len(0).await?;
                        ops.resized_here(f.ino(), 0, 0);
                        ops.truncated_by(&f, caller).await?;
                    }
                    f.set_write_behind(ops.client.stream_window()).await
                }
                .await;
                released_on_error(f, prepared).await
            };
            let f = ops.changed_name(parent, &name, Some(Named::NotDirectory), created).await?;
            ops.delegations.stepped_in(parent, ops.kernel.listings.knows(parent));
            let attr = Attr { size: f.size(), ..f.attr_at_open().clone() };
            let backing = ops.passthrough_for(&f, flags).await;
            Ok((ops.told(attr), ops.register(f, flags, backing)))
        })
    }

    /// Reads through handle `fh`, answering through `done`. With no other handle of the file
    /// open here, chunks held by servers on this node are read from their data files on this
    /// thread (page cache to reply: what a passthrough file system does); a plain read (random
    /// 4 KiB) goes out from this thread and is answered by the connection's reader (no task,
    /// no runtime wake-up on the way out); streaming reads go through the handle's chunk
    /// cache on the runtime. Reads next to other handles of the file first wait for their
    /// writes: what one handle wrote, a read through another must see.
    pub fn read(self: &Arc<Self>, fh: u64, ino: u64, offset: u64, size: u32, done: impl FnOnce(Result<Bytes>) + Send + 'static) {
        let f = match self.open_file(fh) {
            Ok(f) => f,
            Err(e) => return done(Err(e)),
        };
        if let Some(end) = self.kernel.written_end(ino, fh) {
            f.file.note_size(end);
        }
        let siblings = siblings(&self.files, fh, ino);
        if siblings.is_empty() {
            if let Some(data) = f.file.read_local(offset, size as usize) {
                return done(data.map(Bytes::from));
            }
            let route = match f.chunks.route(&f.file, offset, size as u64) {
                Route::Servers { len } => {
                    let answer = move |data: Result<Vec<u8>>| done(data.map(Bytes::from));
                    match f.file.read_then(offset, len as usize, answer) {
                        Ok(()) => return,
                        Err(answer) => return self.spawn(async move { answer(f.file.pread(offset, len as usize).await) }),
                    }
                }
                other => other,
            };
            return self.spawn(async move { done(f.chunks.read_routed(&f.file, route, offset).await) });
        }
        self.spawn(async move {
            for other in &siblings {
                // Their failures belong to their own writers, who will hear of them.
                let _ = other.file.wait_writes().await;
                f.file.note_size(other.file.written_through());
            }
            let data = match f.file.read_local(offset, size as usize) {
                Some(data) => data.map(Bytes::from),
                None => f.chunks.read(&f.file, offset, size as u64).await,
            };
            done(data)
        });
    }

    /// Writes through handle `fh`, answering through `done`: at once when the write could go
    /// out from this thread ([`File::write_behind_now`]: to the local writer or the chunk's
    /// server, within the write-behind window), else from a task once the window has room.
    pub fn write(
        self: &Arc<Self>,
        fh: u64,
        ino: u64,
        offset: u64,
        data: Bytes,
        how: HowWritten,
        done: impl FnOnce(Result<usize>) + Send + 'static,
    ) {
        let HowWritten { append, kill_set_id_of } = how;
        if let Some(caller) = kill_set_id_of {
            // The bits go before the write is answered: whoever looks after it returns
            // (a stat, an exec) must not find them.
            let ops = self.clone();
            return self.spawn(async move {
                match ops.kill_set_id(ino, caller).await {
                    Ok(_) => ops.write(fh, ino, offset, data, HowWritten { append, kill_set_id_of: None }, done),
                    Err(e) => done(Err(e)),
                }
            });
        }
        let f = match self.open_file(fh) {
            Ok(f) => f,
            Err(e) => return done(Err(e)),
        };
        if let Some(dir) = f.made_in.filter(|_| offset + data.len() as u64 >= PASSTHROUGH_WORTH) {
            self.written_at_length.lock().unwrap().insert(dir);
        }
        // Cached chunks may hold what this write replaces, for this and every other reader
        // here: dropped now, and again once the write is under way and before it is answered.
        // A chunk fetched between the first drop and the write going out (the fetch waits
        // only for writes already in flight) holds the old bytes; the second drop takes it
        // before anyone can read the write back (a page faulted in through a mapping, say).
        let (this, others) = (f.clone(), siblings(&self.files, fh, ino));
        let drop_cached = move || {
            this.chunks.clear();
            others.iter().for_each(|other| other.chunks.clear());
        };
        drop_cached();
        if append {
            let len = data.len();
            return self.spawn(async move {
                let appended = f.file.append(data).await.map(|_| len);
                drop_cached();
                done(appended)
            });
        }
        let data = match f.file.write_behind_now(offset, data) {
            Ok(n) => {
                drop_cached();
                return done(Ok(n));
            }
            Err(data) => data,
        };
        self.spawn(async move {
            let written = f.file.pwrite_bytes(offset, data).await;
            drop_cached();
            done(written)
        });
    }

    /// Every close(2): waits for the handle's writes and publishes size and mtime, so the
    /// close-to-open promise holds when close returns (and write errors reach close).
    /// A process's POSIX locks on the file go with any close of it by that process.
    /// Answered now when nothing was written through the handle (a read, or a create then
    /// close) and the caller holds no lock on the file.
    pub fn flush(self: &Arc<Self>, ino: u64, fh: u64, lock_owner: u64) -> Answer<()> {
        if !self.lock_owners.holds(ino, lock_owner) {
            match self.open_file(fh) {
                Ok(f) if f.file.is_clean() => return Answer::Now(Ok(())),
                Ok(_) => {}
                Err(e) => return Answer::Now(Err(e)),
            }
        }
        let owners = if self.lock_owners.let_go(ino, lock_owner) { vec![lock_owner] } else { Vec::new() };
        let (ops, f) = (self.clone(), self.open_file(fh));
        Answer::later(async move {
            ops.give_back_locks(ino, owners).await;
            let f = f?;
            let outcome = f.file.flush().await;
            ops.published(&f, &outcome);
            outcome
        })
    }

    /// A released writer's publication of `ino` came back (see [`KernelCache::published`]);
    /// `files`: the handles open here, with the lock held.
    fn writer_published(&self, ino: u64, files: &OpenFiles) {
        self.kernel.published(ino, self.next_handle.load(Ordering::Relaxed), files.of_ino(ino, 0).next().is_some());
    }

    /// The last close of handle `fh`. Answered now for a clean handle of a file made under a
    /// delegation whose home has not heard of it yet (its release goes into the delegation's
    /// log); otherwise released at the file's home.
    pub fn release(self: &Arc<Self>, ino: u64, fh: u64) -> Answer<()> {
        let open = self.files.lock().unwrap().get(fh);
        // flock and OFD locks belong to the open file, whose last close this is.
        let owners = self.lock_owners.closed(ino, fh);
        if open.as_ref().is_some_and(|f| f.file.shares_open()) && owners.is_empty() {
            // Answered from a kept file, read-only, no lock taken through it: released at the
            // home by a request nobody waits for.
            if let Some(f) = self.files.lock().unwrap().remove(fh) {
                f.file.release_shared();
            }
            self.reopens.released(ino);
            return Answer::Now(Ok(()));
        }
        if let Some(f) = open.filter(|f| f.file.release_logged()) {
            // Never registered at the home: no lock was taken through it (a lock request
            // writes the delegation back first), so there are none to give back.
            self.kernel.wrote(ino, f.file.written_through());
            let mut files = self.files.lock().unwrap();
            files.remove(fh);
            // The log carries the size: whoever opens the file next has it written back first.
            self.writer_published(ino, &files);
            return Answer::Now(Ok(()));
        }
        let ops = self.clone();
        let (f, publishing) = {
            let mut files = self.files.lock().unwrap();
            let f = files.remove(fh);
            let publishing = match f.as_ref().filter(|f| f.file.is_writer()) {
                None => false,
                Some(writer) => {
                    // Its writes (through the mount, O_APPEND or passthrough alike), which the
                    // handles still open here will not find among their siblings: told before
                    // it leaves them, so that no read in between misses both.
                    self.kernel.wrote(ino, writer.file.written_through());
                    let clean = writer.file.is_clean();
                    if clean {
                        // Its close published everything already: the home has it for any
                        // open from now.
                        self.writer_published(ino, &files);
                    }
                    !clean
                }
            };
            (f, publishing)
        };
        Answer::later(async move {
            ops.give_back_locks(ino, owners).await;
            match f {
                Some(f) => {
                    let outcome = f.file.release().await;
                    if f.file.shares_open() {
                        ops.reopens.released(ino);
                    }
                    if publishing {
                        ops.writer_published(ino, &ops.files.lock().unwrap());
                    }
                    ops.published(&f, &outcome);
                    outcome
                }
                None => Err(Error::new(ErrorCode::BadHandle, format!("handle {fh} is not open"))),
            }
        })
    }

    /// fallocate(2) through handle `fh` (the modes the kernel passes on: mode 0, KEEP_SIZE,
    /// PUNCH_HOLE, ZERO_RANGE). Chunks cached here forget the range's old bytes.
    pub fn fallocate(self: &Arc<Self>, ino: u64, fh: u64, offset: u64, len: u64, mode: i32) -> Answer<()> {
        let known = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        let kind = if mode & !known != 0 {
            Err(Error::new(ErrorCode::NotSupported, format!("fallocate mode {mode:#x}")))
        } else if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
            Ok(AllocateMode::PunchHole)
        } else if mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
            Ok(AllocateMode::ZeroRange)
        } else {
            Ok(AllocateMode::Reserve)
        };
        let f = self.open_file(fh);
        if let Ok(f) = &f {
            f.chunks.clear();
        }
        for other in siblings(&self.files, fh, ino) {
            other.chunks.clear();
        }
        Answer::later(async move { f?.file.allocate(offset, len, kind?, mode & libc::FALLOC_FL_KEEP_SIZE != 0).await })
    }

    /// lseek(2)'s SEEK_DATA and SEEK_HOLE (the kernel answers the other kinds itself).
    pub fn seek_data(self: &Arc<Self>, fh: u64, offset: i64, whence: i32) -> Answer<u64> {
        let f = self.open_file(fh);
        Answer::later(async move {
            let hole = match whence {
                libc::SEEK_DATA => false,
                libc::SEEK_HOLE => true,
                _ => return Err(Error::new(ErrorCode::Invalid, format!("lseek whence {whence}"))),
            };
            // As Linux's local file systems answer: no data or hole before the file's start.
            let offset = u64::try_from(offset).map_err(|_| Error::new(ErrorCode::PastEnd, "negative lseek offset"))?;
            f?.file.seek_data(offset, hole).await
        })
    }

    pub fn fsync(self: &Arc<Self>, fh: u64) -> Answer<()> {
        let (ops, f) = (self.clone(), self.open_file(fh));
        Answer::later(async move {
            let f = f?;
            let outcome = f.file.fsync().await;
            ops.published(&f, &outcome);
            outcome
        })
    }

    // ------------------------------------------------------------ locks

    /// Takes, changes or gives back a lock (fcntl's F_SETLK/F_SETLKW, flock) through `fh`.
    pub fn set_lock(self: &Arc<Self>, ino: u64, fh: u64, lock: LockRange, wait: bool) -> Answer<()> {
        let whole_file = lock.start == 0 && lock.end == u64::MAX;
        if lock.kind != LockKind::Unlock {
            self.lock_owners.took(ino, lock.owner, fh);
        } else if whole_file {
            self.lock_owners.let_go(ino, lock.owner);
        }
        let ops = self.clone();
        Answer::later(async move {
            ops.delegations.settle().await?;
            ops.client.set_lock(ino, lock, wait).await
        })
    }

    /// The lock of another owner in the way of `lock` (F_GETLK).
    pub fn get_lock(self: &Arc<Self>, ino: u64, lock: LockRange) -> Answer<Option<LockHolder>> {
        let ops = self.clone();
        Answer::later(async move {
            ops.delegations.settle().await?;
            ops.client.get_lock(ino, lock).await
        })
    }

    /// Gives back every lock of `owners` on `ino` (their holders closed the file) before the
    /// close returns, so another node may take them at once. A failure is logged, not the
    /// close's: the locks then stay until this mount's connection to the server ends.
    async fn give_back_locks(&self, ino: u64, owners: Vec<u64>) {
        for owner in owners {
            let unlock = LockRange { owner, pid: 0, kind: LockKind::Unlock, start: 0, end: u64::MAX };
            if let Err(e) = self.client.set_lock(ino, unlock, false).await {
                tracing::warn!(ino = format!("{ino:#x}"), "a closed file's locks were not given back: {e}");
            }
        }
    }

    // ------------------------------------------------------------ directories

    /// Takes a snapshot of the directory, read by [`Ops::dir_entries`]; answers its handle.
    pub fn opendir(self: &Arc<Self>, ino: u64) -> Answer<u64> {
        let (ops, fh) = (self.clone(), self.handle());
        Answer::later(async move {
            let listing = ops.take_listing(ino).await?;
            ops.dirs.lock().unwrap().insert(fh, OpenDir { ino, listing, read_from_start: false });
            Ok(fh)
        })
    }

    async fn take_listing(&self, ino: u64) -> Result<Arc<Listing>> {
        self.delegations.settle().await?;
        let mark = self.kernel.change_mark();
        let entries = self.client.readdir_ino_watching_attrs(ino).await?;
        Ok(Arc::new(Listing { entries, mark }))
    }

    /// The snapshot taken at opendir (or at the last rewind: see [`Ops::listing_from`]).
    pub fn dir_entries(&self, fh: u64) -> Result<Arc<Listing>> {
        self.dirs.lock().unwrap().get(&fh).map(|open| open.listing.clone()).ok_or_else(|| no_directory_handle(fh))
    }

    /// The listing a read of handle `fh` at `offset` walks: the snapshot taken at opendir,
    /// so that names changed meanwhile are neither skipped nor listed twice; a fresh one at
    /// the start when the program comes back to it (rewinddir, which the kernel does not
    /// pass on), or reads it first after names may have changed since opendir (a rewinddir
    /// before any read): POSIX says the names made before a rewinddir are listed after it.
    pub fn listing_from(self: &Arc<Self>, fh: u64, offset: u64) -> Answer<Arc<Listing>> {
        let ino = {
            let mut dirs = self.dirs.lock().unwrap();
            let Some(open) = dirs.get_mut(&fh) else {
                return Answer::Now(Err(no_directory_handle(fh)));
            };
            let read_before = std::mem::replace(&mut open.read_from_start, true);
            let unchanged = open.listing.mark == self.kernel.change_mark();
            if offset != 0 || (!read_before && unchanged) {
                return Answer::Now(Ok(open.listing.clone()));
            }
            open.ino
        };
        let ops = self.clone();
        Answer::later(async move {
            let listing = ops.take_listing(ino).await?;
            if let Some(open) = ops.dirs.lock().unwrap().get_mut(&fh) {
                open.listing = listing.clone();
            }
            Ok(listing)
        })
    }

    /// The attributes a READDIRPLUS may give with `entry` of `listing`, as a lookup of it
    /// would answer them now: those the listing brought, while nothing has changed since it
    /// was taken and the kernel holds nothing of the inode (see `KernelCache::may_give`).
    /// Directories are left to a lookup (which keeps the kernel's one entry per directory,
    /// see `KernelCache::looked_up_directory`). Once the attributes are given to the kernel,
    /// [`Ops::gave`] is due.
    pub fn attr_to_give(&self, listing: &Listing, entry: &DirEntry) -> Option<Attr> {
        let attr = entry.attr.as_ref().filter(|a| a.kind != FileKind::Dir)?;
        if !self.kernel.may_give(attr.ino, listing.mark) {
            return None;
        }
        Some(self.with_unpublished_size(attr.clone()))
    }

    /// The kernel was given `attr` with `entry` of `listing`.
    pub fn gave(&self, listing: &Listing, entry: &DirEntry, attr: &Attr) {
        self.kernel.told(attr);
        if !entry.has_xattrs {
            self.kernel.absent_xattr(attr.ino, None, listing.mark);
        }
    }

    /// `attr` with the size this node's open handles reached and have not published yet, if
    /// larger (see `unpublished_size`).
    fn with_unpublished_size(&self, attr: Attr) -> Attr {
        Attr { size: attr.size.max(unpublished_size(&self.files, attr.ino)), ..attr }
    }

    /// fsync(2) of a directory: every create and unlink answered under a delegation is
    /// applied at its home when this returns.
    pub fn fsyncdir(self: &Arc<Self>) -> Answer<()> {
        let ops = self.clone();
        Answer::later(async move { ops.delegations.settle().await })
    }

    pub fn releasedir(&self, fh: u64) {
        self.dirs.lock().unwrap().remove(&fh);
    }

    /// Has the servers drop a file's set-id bits as a write by `caller` does (Linux keeps
    /// them for a privileged writer; the servers decide). The kernel asks for it with a
    /// write, as the mount negotiated HANDLE_KILLPRIV_V2.
    pub fn kill_set_id(self: &Arc<Self>, ino: u64, caller: Caller) -> Answer<Attr> {
        let ops = self.clone();
        Answer::later(async move {
            ops.delegations.settle().await?;
            let changes = AttrChanges { kill_set_id: true, by: Some(caller.requester()), ..Default::default() };
            let attr = ops.client.setattr(ino, changes).await?;
            ops.kernel.attr_changed_now(ino);
            Ok(attr)
        })
    }

    // ------------------------------------------------------------ extended attributes

    /// The kernel checks who may read or change which namespace (user.* by the file's
    /// permissions, trusted.* for root) before asking; the servers check again where they
    /// check identities.
    /// A name the servers said the inode lacks is answered now (`KernelCache::absent_xattr`).
    pub fn get_xattr(self: &Arc<Self>, ino: u64, name: String, caller: Caller) -> Answer<Vec<u8>> {
        if self.kernel.known_absent_xattr(ino, &name) {
            return Answer::Now(Err(Error::new(ErrorCode::NoData, format!("no attribute '{name}'"))));
        }
        let (ops, client) = (self.clone(), self.client.as_user(caller.uid, caller.gid));
        Answer::later(async move {
            ops.delegations.settle().await?;
            let mark = ops.kernel.change_mark();
            let result = client.get_xattr(ino, &name).await;
            if matches!(&result, Err(e) if e.code == ErrorCode::NoData) {
                ops.kernel.absent_xattr(ino, Some(&name), mark);
            }
            result
        })
    }

    /// The names, each followed by a NUL (listxattr's form).
    pub fn list_xattr(self: &Arc<Self>, ino: u64, caller: Caller) -> Answer<Vec<u8>> {
        let (ops, client) = (self.clone(), self.client.as_user(caller.uid, caller.gid));
        Answer::later(async move {
            ops.delegations.settle().await?;
            let names = client.list_xattr(ino).await?;
            Ok(names.iter().flat_map(|n| n.bytes().chain(std::iter::once(0))).collect())
        })
    }

    /// `flags`: setxattr's XATTR_CREATE / XATTR_REPLACE. An ACL set here may change the mode:
    /// the kernel is told the new attributes.
    pub fn set_xattr(self: &Arc<Self>, ino: u64, name: String, value: Vec<u8>, flags: i32, caller: Caller) -> Answer<()> {
        self.reopens.changed(ino);
        let (ops, client) = (self.clone(), self.client.as_user(caller.uid, caller.gid));
        Answer::later(async move {
            let mode = surge_client::surge_proto::XattrSetMode::from_flags(flags)?;
            ops.delegations.settle().await?;
            let set = client.set_xattr_for(ino, &name, &value, mode, Some(caller.requester())).await;
            // Also after a failure: it may have been applied before the answer was lost.
            ops.kernel.attr_changed(ino);
            set.map(|_| ())
        })
    }

    pub fn remove_xattr(self: &Arc<Self>, ino: u64, name: String, caller: Caller) -> Answer<()> {
        self.reopens.changed(ino);
        let (ops, client) = (self.clone(), self.client.as_user(caller.uid, caller.gid));
        Answer::later(async move {
            ops.delegations.settle().await?;
            let removed = client.remove_xattr(ino, &name).await;
            ops.kernel.attr_changed(ino);
            removed.map(|_| ())
        })
    }
}

/// Keeps capacity set aside for every passthrough handle ([`File::keep_passthrough_room`])
/// while there are any; started again by the next passthrough open.
async fn keep_passthrough_room(ops: std::sync::Weak<Ops>) {
    let mut tick = tokio::time::interval(PASSTHROUGH_GUARD_PERIOD);
    // Said once per file: a full server refuses again at every tick.
    let mut refused = std::collections::HashSet::new();
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(ops) = ops.upgrade() else { return };
        let handles = ops.files.lock().unwrap().passed_through();
        if handles.is_empty() {
            ops.passthrough_guard.store(false, Ordering::Relaxed);
            // A handle opened since the list was taken finds the flag down and starts a guard.
            if ops.files.lock().unwrap().passed_through().is_empty() || ops.passthrough_guard.swap(true, Ordering::Relaxed) {
                return;
            }
            continue;
        }
        for open in handles {
            match open.file.keep_passthrough_room().await {
                Err(e) if refused.insert(open.file.ino()) => {
                    tracing::warn!("inode {:#x}: no capacity set aside for its passthrough writes: {e}", open.file.ino())
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::striped_room;

    /// df's Avail is what a striped file can still take: the fullest server's whole free
    /// chunks on each server, not the sum of what is free.
    #[test]
    fn the_room_of_a_striped_file_is_bounded_by_the_fullest_server() {
        const MIB: u64 = 1 << 20;
        assert_eq!(striped_room(4, 2048 * MIB, MIB), 8192 * MIB);
        assert_eq!(striped_room(4, 2048 * MIB - 64 * 1024, MIB), 4 * 2047 * MIB, "64 KiB used on one server costs a chunk on each");
        assert_eq!(striped_room(1, 5 * MIB + 7, MIB), 5 * MIB);
        assert_eq!(striped_room(0, u64::MAX, MIB), 0);
        assert_eq!(striped_room(4, 10, 0), 40, "a chunk size of 0 is taken as 1");
    }
}
