//! The FUSE adapter: each kernel request becomes one call of the operations layer
//! ([`crate::ops`]), its outcome one reply. Arguments are converted here (names, times, the
//! umask) and nothing else is decided here.
//!
//! Every operation answers an [`Answer`], and every request is answered from it in one place,
//! `SurgeFs::reply`: an answer ready now is replied on the calling thread (the FUSE session
//! thread) before the request returns; one that comes later is spawned on the runtime and
//! replied when it is done. Reads and writes answer through callbacks of their own (see
//! [`Ops::read`], [`Ops::write`]).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use surge_client::surge_proto::{Attr, AttrChanges, DirEntry, ErrorCode};
use surge_client::{Client, Error, Result};
use surge_fuse_session::abi::{self, init};
use surge_fuse_session::{
    BackingId, Caller as KernelCaller, FileType, Filesystem, KernelConfig, LockRange, Notifier, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    SetAttr, WriteData,
};
use tokio::runtime::Handle;

use crate::convert::{file_type, fuse_attr, name_of, to_timestamp};
use crate::locks;
use crate::ops::{Answer, Caller, HowWritten, Listing, Opened, Ops, STATFS_BLOCK};

/// The kernel's largest write request.
const MAX_WRITE: u32 = 1 << 20;

/// A Surge instance as a FUSE file system.
pub struct SurgeFs {
    ops: Arc<Ops>,
    /// Ask the kernel for passthrough (see [`SurgeFs::new`]).
    want_passthrough: bool,
    backings: Arc<Backings>,
}

/// The backing files handed to the kernel for passthrough, held until the handles that use
/// them are released. The kernel wants one backing file per inode for all its open handles.
#[derive(Default)]
struct Backings {
    by_handle: Mutex<HashMap<u64, Arc<BackingId>>>,
    by_ino: Mutex<HashMap<u64, Weak<BackingId>>>,
}

impl Backings {
    /// The backing id of `ino` for handle `fh`, when the operations layer gave a data file
    /// (`backing`): the one its other handles use, else a new one made by `open` from the
    /// data file. None when there is no data file or the kernel refused it (said in the log):
    /// the handle is then served the plain way.
    fn for_handle(
        &self,
        ino: u64,
        fh: u64,
        backing: Option<Arc<std::fs::File>>,
        open: impl FnOnce(&std::fs::File) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        let file = backing?;
        let mut by_ino = self.by_ino.lock().unwrap();
        let id = match by_ino.get(&ino).and_then(Weak::upgrade) {
            Some(id) => id,
            None => match open(&file) {
                Ok(id) => {
                    let id = Arc::new(id);
                    by_ino.insert(ino, Arc::downgrade(&id));
                    id
                }
                Err(e) => {
                    tracing::info!("inode {ino:#x}: the kernel took no backing file ({e}); served without passthrough");
                    return None;
                }
            },
        };
        self.by_handle.lock().unwrap().insert(fh, id.clone());
        Some(id)
    }

    fn released(&self, ino: u64, fh: u64) {
        if self.by_handle.lock().unwrap().remove(&fh).is_some() {
            let mut by_ino = self.by_ino.lock().unwrap();
            if by_ino.get(&ino).is_some_and(|id| id.strong_count() == 0) {
                by_ino.remove(&ino);
            }
        }
    }
}

/// Whether this process holds CAP_SYS_ADMIN, which the kernel wants of a FUSE server that
/// hands it backing files.
fn may_pass_through() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    effective.is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

impl SurgeFs {
    /// `ttl`: how long the kernel may use attributes and names without asking (see the crate
    /// documentation for how they are kept exact). Call before `client` sends anything: only
    /// connections opened afterwards bring change notices.
    /// `passthrough`: hand the kernel the data files of files held whole by this node's
    /// server, when the kernel and this process's privileges allow (said in the log).
    pub fn new(client: Client, runtime: Handle, ttl: std::time::Duration, passthrough: bool) -> Self {
        SurgeFs { ops: Ops::new(client, runtime, ttl), want_passthrough: passthrough, backings: Default::default() }
    }

    /// Answers an open: passed through when the operations layer gave a data file and the
    /// kernel takes it; the plain way otherwise.
    fn opened_file(&self, ino: u64, reply: ReplyOpen, flags: i32) -> impl FnOnce(Result<Opened>) + Send + 'static {
        let backings = self.backings.clone();
        move |result| match result {
            Ok(Opened { fh, backing, keep_cache }) => match backings.for_handle(ino, fh, backing, |file| reply.open_backing(file)) {
                Some(id) => reply.opened_passthrough(fh, open_reply_flags(flags, false), &id),
                None => reply.opened(fh, open_reply_flags(flags, keep_cache)),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The operations layer, on a thread that can start work on the runtime: the session calls
    /// from threads of its own, and chunk fetches and replies are started on the calling one.
    fn ops(&self) -> &Arc<Ops> {
        thread_local! {
            static IN_RUNTIME: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        if !IN_RUNTIME.get() {
            // Kept for the thread's life: its guard is never dropped, so the thread stays in
            // the runtime's context whatever runs on it later. Not on the runtime's own
            // threads, which are in it already: a guard forgotten there outlives the
            // worker's own, and the runtime's shutdown panics on the order.
            if tokio::runtime::Handle::try_current().is_err() {
                std::mem::forget(self.ops.runtime().enter());
            }
            IN_RUNTIME.set(true);
        }
        &self.ops
    }

    /// The operations layer, for what the daemon does around the session (see
    /// [`Ops::settle_with_servers`]).
    pub fn operations(&self) -> Arc<Ops> {
        self.ops.clone()
    }

    /// Where to put the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.ops().kernel.notifier.clone()
    }

    /// Answers a request with `reply`: at once for an answer ready now; for one that comes
    /// later, from a task on the runtime when its work is done (a failure then logged).
    fn reply<T: Send + 'static>(&self, answer: Answer<T>, reply: impl FnOnce(Result<T>) + Send + 'static) {
        match answer {
            Answer::Now(result) => reply(result),
            Answer::Later(work) => self.ops().spawn(async move {
                let result = work.await;
                if let Err(e) = &result {
                    log_failure(e);
                }
                reply(result)
            }),
        }
    }

    /// Made before the request's work starts: the mark is what its answer is checked against
    /// (see [`Ops::ttl_since`]).
    fn entry(&self, reply: ReplyEntry) -> impl FnOnce(Result<Attr>) + Send + 'static {
        let (ops, mark) = (self.ops().clone(), self.ops().change_mark());
        // Only positive entries are cached by the kernel: an error leaves no negative entry.
        move |result| match result {
            Ok(attr) => {
                let ttl = ops.ttl_since(attr.ino, mark);
                reply.entry(ttl, &fuse_attr(&attr, ops.blksize()), 0);
                ops.gave_attr(attr.ino, mark, ttl);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Made before the request's work starts, as [`SurgeFs::entry`].
    fn attr(&self, reply: ReplyAttr) -> impl FnOnce(Result<Attr>) + Send + 'static {
        let (ops, mark) = (self.ops().clone(), self.ops().change_mark());
        move |result| match result {
            Ok(attr) => {
                let ttl = ops.ttl_since(attr.ino, mark);
                reply.attr(ttl, &fuse_attr(&attr, ops.blksize()));
                ops.gave_attr(attr.ino, mark, ttl);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// Walks directory `dir`'s listing from readdir offset `offset` ("." at 0, ".." at 1, then
/// `listing[i]` at 2 + i), handing `add` each entry's inode, the offset after it, its type,
/// its name and (for a listed name) its entry, until `add` says the reply is full.
fn each_listed(dir: u64, listing: &Listing, offset: u64, mut add: impl FnMut(u64, u64, FileType, &OsStr, Option<&DirEntry>) -> bool) {
    let mut next = offset;
    loop {
        let full = match next {
            0 => add(dir, 1, FileType::Directory, OsStr::new("."), None),
            1 => add(dir, 2, FileType::Directory, OsStr::new(".."), None),
            n => match listing.get((n - 2) as usize) {
                Some(e) => add(e.ino, n + 1, file_type(e.kind), OsStr::new(&e.name), Some(e)),
                None => return,
            },
        };
        if full {
            return;
        }
        next += 1;
    }
}

/// The kernel's form of a Surge error.
fn errno(e: &Error) -> i32 {
    e.errno()
}

fn caller(c: &KernelCaller) -> Caller {
    Caller { uid: c.uid, gid: c.gid, pid: c.pid }
}

fn empty(reply: ReplyEmpty) -> impl FnOnce(Result<()>) + Send + 'static {
    move |result| match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn data<B: AsRef<[u8]>>(reply: ReplyData) -> impl FnOnce(Result<B>) + Send + 'static {
    move |result| match result {
        Ok(bytes) => reply.data(bytes.as_ref()),
        Err(e) => reply.error(errno(&e)),
    }
}

/// An attribute value or name list, as getxattr and listxattr answer: its length when the
/// caller asked for it (`size` 0), ERANGE when it does not fit the caller's buffer.
fn xattr(reply: ReplyXattr, size: u32) -> impl FnOnce(Result<Vec<u8>>) + Send + 'static {
    move |result| match result {
        Ok(bytes) if size == 0 => reply.size(bytes.len() as u32),
        Ok(bytes) if bytes.len() > size as usize => reply.error(libc::ERANGE),
        Ok(bytes) => reply.data(&bytes),
        Err(e) => reply.error(errno(&e)),
    }
}

/// The errors a file system answers all day (a name that is not there, or is) only at debug
/// level; any other one at info, with what the client said of it, for whoever reads the
/// mount's log after a program failed.
fn log_failure(e: &Error) {
    match e.code {
        ErrorCode::NotFound | ErrorCode::Exists | ErrorCode::NotEmpty | ErrorCode::NameTooLong => tracing::debug!("answered: {e}"),
        // A request that gave up on something another client kept doing (a rename in
        // progress, a name replaced again and again): rare, and worth a line for the admin.
        ErrorCode::Busy => tracing::warn!(errno = e.errno(), "answered an error: {e}"),
        _ => tracing::info!(errno = e.errno(), "answered an error: {e}"),
    }
}

fn opened(reply: ReplyOpen, flags: i32) -> impl FnOnce(Result<u64>) + Send + 'static {
    move |result| match result {
        Ok(fh) => reply.opened(fh, open_reply_flags(flags, false)),
        Err(e) => reply.error(errno(&e)),
    }
}

/// An O_APPEND descriptor bypasses the page cache: through the cache the kernel splits one
/// write(2) into several requests where it meets a page it does not hold whole, and each
/// would be appended on its own (another node's append could land between the pieces).
/// Direct, a write of up to `max_write` is one request, one append.
fn open_reply_flags(flags: i32, keep_cache: bool) -> u32 {
    if flags & libc::O_APPEND != 0 {
        abi::FOPEN_DIRECT_IO
    } else if keep_cache {
        abi::FOPEN_KEEP_CACHE
    } else {
        0
    }
}

/// The name, or an EINVAL reply.
macro_rules! name_or_reply {
    ($name:expr, $reply:expr) => {
        match name_of($name) {
            Ok(n) => n,
            Err(e) => return $reply.error(errno(&e)),
        }
    };
}

impl Filesystem for SurgeFs {
    fn init(&self, config: &mut KernelConfig) -> std::io::Result<()> {
        config.set_max_write(MAX_WRITE);
        config.set_max_readahead(MAX_WRITE);
        config.set_max_background(64);
        config.set_congestion_threshold(48);
        // Capabilities the running kernel lacks are simply not used.
        // Locks go to the files' home servers (see `locks`), so they exclude across nodes.
        if self.want_passthrough {
            let privileged = may_pass_through();
            let agreed = privileged && config.add_capabilities(init::PASSTHROUGH).is_ok();
            if agreed {
                config.set_max_stack_depth(1);
                self.ops.enable_passthrough();
                tracing::info!("kernel passthrough on for files held whole by this node's server");
            } else if !privileged {
                tracing::info!("kernel passthrough off: this mount lacks CAP_SYS_ADMIN (every read and write goes through the mount)");
            } else {
                tracing::info!("kernel passthrough off: the kernel does not offer it (Linux 6.9 or later does)");
            }
        }
        // Not FUSE_AUTO_INVAL_DATA: with it the kernel drops a file's pages whenever it sees a
        // new mtime, also the one this node's own close published, so a file read back after
        // writing would come from the servers again. The mount decides at each open whether
        // the pages are the file's (KernelCache::open_pages) and drops them when another
        // node's change is noticed (KernelCache::changed_elsewhere).
        let _ = config.add_capabilities(
            init::PARALLEL_DIROPS
                // Listings come with their entries' attributes (see `readdirplus`), every page:
                // with READDIRPLUS_AUTO the kernel asks for them on the first page only, unless
                // lookups came between, and `ls -l`, `find` and `rm -rf` read the whole
                // directory before they look at any entry.
                | init::DO_READDIRPLUS
                | init::ATOMIC_O_TRUNC
                // File handles (`name_to_handle_at`, NFS re-export) that outlive the kernel's
                // inode and the mount itself: see `Ops::lookup_by_number`.
                | init::EXPORT_SUPPORT
                | init::POSIX_LOCKS
                | init::FLOCK_LOCKS
                // The kernel enforces POSIX ACLs (the servers keep them and apply a directory's
                // default ACL to what is made in it, for which the mode comes unmasked, with
                // the umask beside it).
                | init::POSIX_ACL
                | init::DONT_MASK
                // Clearing set-id bits on a write is the mount's (see `write`), so the kernel
                // need not ask for security.capability before every write.
                | init::HANDLE_KILLPRIV_V2,
        );
        Ok(())
    }

    fn forget(&self, ino: u64, _nlookup: u64) {
        self.ops().forget(ino);
    }

    fn lookup(&self, req: &KernelCaller, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().lookup(parent, name, caller(req)), self.entry(reply));
    }

    fn getattr(&self, req: &KernelCaller, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        self.reply(self.ops().getattr(ino, caller(req)), self.attr(reply));
    }

    fn setattr(&self, req: &KernelCaller, ino: u64, c: SetAttr, reply: ReplyAttr) {
        // A setattr that changes nothing is the kernel dropping set-id bits it leaves to the
        // file system (HANDLE_KILLPRIV_V2): a write through a passthrough file, fallocate,
        // chown(-1, -1). Which bits go, for whom, is the servers' rule.
        let nothing = c.mode.is_none() && c.uid.is_none() && c.gid.is_none() && c.size.is_none() && c.atime.is_none() && c.mtime.is_none();
        let kill_set_id = c.kill_suidgid || nothing;
        // Whom the change is for matters to the set-id bits only (reading it costs a read of
        // the caller's /proc status): not for new times (`touch`, `tar x`).
        let may_clear_set_id = kill_set_id || c.mode.is_some() || c.uid.is_some() || c.gid.is_some() || c.size.is_some();
        let change = AttrChanges {
            mode: c.mode,
            uid: c.uid,
            gid: c.gid,
            size: c.size,
            atime: c.atime.map(to_timestamp),
            mtime: c.mtime.map(to_timestamp),
            kill_set_id,
            by: may_clear_set_id.then(|| caller(req).requester()),
            cut_at: None,
        };
        self.reply(self.ops().setattr(ino, change, c.fh), self.attr(reply));
    }

    fn readlink(&self, _req: &KernelCaller, ino: u64, reply: ReplyData) {
        self.reply(self.ops().readlink(ino), data(reply));
    }

    fn mknod(&self, req: &KernelCaller, parent: u64, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().mknod(parent, name, mode, umask, rdev, caller(req)), self.entry(reply));
    }

    fn mkdir(&self, req: &KernelCaller, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().mkdir(parent, name, mode, umask, caller(req)), self.entry(reply));
    }

    fn unlink(&self, _req: &KernelCaller, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().unlink(parent, name), empty(reply));
    }

    fn rmdir(&self, _req: &KernelCaller, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().rmdir(parent, name), empty(reply));
    }

    fn symlink(&self, req: &KernelCaller, parent: u64, link_name: &OsStr, target: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(link_name, reply);
        let target = name_or_reply!(target, reply);
        self.reply(self.ops().symlink(parent, name, target, caller(req)), self.entry(reply));
    }

    fn link(&self, _req: &KernelCaller, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(newname, reply);
        self.reply(self.ops().link(ino, newparent, name), self.entry(reply));
    }

    fn rename(&self, _req: &KernelCaller, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        let newname = name_or_reply!(newname, reply);
        self.reply(self.ops().rename(parent, name, newparent, newname, flags), empty(reply));
    }

    fn open(&self, req: &KernelCaller, ino: u64, flags: i32, reply: ReplyOpen) {
        self.reply(self.ops().open(ino, flags, caller(req)), self.opened_file(ino, reply, flags));
    }

    fn read(&self, _req: &KernelCaller, ino: u64, fh: u64, offset: u64, size: u32, reply: ReplyData) {
        self.ops().read(fh, ino, offset, size, data(reply));
    }

    fn write(
        &self,
        req: &KernelCaller,
        ino: u64,
        fh: u64,
        offset: u64,
        data: WriteData<'_>,
        write_flags: u32,
        flags: i32,
        reply: ReplyWrite,
    ) {
        let how = HowWritten {
            // `flags`: the descriptor's open flags.
            append: flags & libc::O_APPEND != 0,
            // The kernel saw a writer without CAP_FSETID at a set-id file.
            kill_set_id_of: (write_flags & abi::FUSE_WRITE_KILL_SUIDGID != 0).then(|| caller(req)),
        };
        let done = move |result: Result<usize>| match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        };
        self.ops().write(fh, ino, offset, data.to_bytes(), how, done);
    }

    fn flush(&self, _req: &KernelCaller, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        self.reply(self.ops().flush(ino, fh, lock_owner), empty(reply));
    }

    fn release(&self, _req: &KernelCaller, ino: u64, fh: u64, reply: ReplyEmpty) {
        self.backings.released(ino, fh);
        self.reply(self.ops().release(ino, fh), empty(reply));
    }

    fn getlk(&self, _req: &KernelCaller, ino: u64, _fh: u64, owner: u64, lock: LockRange, reply: ReplyLock) {
        let Some(wanted) = locks::range_from_kernel(owner, lock.pid, lock.typ, lock.start, lock.end) else {
            return reply.error(libc::EINVAL);
        };
        self.reply(self.ops().get_lock(ino, wanted), move |result| match result {
            Ok(Some(h)) => reply.locked(h.start, locks::end_to_kernel(h.end), locks::kind_to_kernel(h.kind), h.pid),
            // Nothing in the way: F_GETLK answers F_UNLCK.
            Ok(None) => reply.locked(lock.start, lock.end, libc::F_UNLCK, 0),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn setlk(&self, _req: &KernelCaller, ino: u64, fh: u64, owner: u64, lock: LockRange, sleep: bool, reply: ReplyEmpty) {
        let Some(wanted) = locks::range_from_kernel(owner, lock.pid, lock.typ, lock.start, lock.end) else {
            return reply.error(libc::EINVAL);
        };
        self.reply(self.ops().set_lock(ino, fh, wanted, sleep), empty(reply));
    }

    fn fsync(&self, _req: &KernelCaller, _ino: u64, fh: u64, _datasync: bool, reply: ReplyEmpty) {
        self.reply(self.ops().fsync(fh), empty(reply));
    }

    fn fallocate(&self, _req: &KernelCaller, ino: u64, fh: u64, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        self.reply(self.ops().fallocate(ino, fh, offset, length, mode), empty(reply));
    }

    fn lseek(&self, _req: &KernelCaller, _ino: u64, fh: u64, offset: i64, whence: i32, reply: ReplyLseek) {
        self.reply(self.ops().seek_data(fh, offset, whence), move |found| match found {
            Ok(offset) => reply.offset(offset as i64),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn opendir(&self, _req: &KernelCaller, ino: u64, _flags: i32, reply: ReplyOpen) {
        self.reply(self.ops().opendir(ino), opened(reply, 0));
    }

    fn readdir(&self, _req: &KernelCaller, ino: u64, fh: u64, offset: u64, mut reply: ReplyDirectory) {
        self.reply(self.ops().listing_from(fh, offset), move |listing| match listing {
            Ok(listing) => {
                each_listed(ino, &listing, offset, |ino, next, kind, name, _| reply.add(ino, next, kind, name));
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        });
    }

    /// READDIR with what a lookup of each name would answer, where the listing may give it
    /// (`Ops::attr_to_give`): `ls -l` of a directory another node filled needs no lookup
    /// per name.
    fn readdirplus(&self, _req: &KernelCaller, ino: u64, fh: u64, offset: u64, mut reply: ReplyDirectoryPlus) {
        let ops = self.ops().clone();
        let (ttl, blksize) = (ops.ttl(), ops.blksize());
        self.reply(ops.listing_from(fh, offset), move |listing| match listing {
            Ok(listing) => {
                let mut given_inos = Vec::new();
                each_listed(ino, &listing, offset, |ino, next, kind, name, entry| {
                    let given = entry.and_then(|e| ops.attr_to_give(&listing, e));
                    let kernel_attr = given.as_ref().map(|attr| fuse_attr(attr, blksize));
                    let full = reply.add(kernel_attr.as_ref().map(|a| (ttl, a)), ino, next, kind, name);
                    if let (false, Some(attr), Some(entry)) = (full, &given, entry) {
                        ops.gave(&listing, entry, attr);
                        given_inos.push(attr.ino);
                    }
                    full
                });
                reply.ok();
                for given in given_inos {
                    ops.gave_attr(given, listing.mark, ttl);
                }
            }
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn fsyncdir(&self, _req: &KernelCaller, _ino: u64, _fh: u64, reply: ReplyEmpty) {
        self.reply(self.ops().fsyncdir(), empty(reply));
    }

    fn releasedir(&self, _req: &KernelCaller, _ino: u64, fh: u64, reply: ReplyEmpty) {
        self.ops().releasedir(fh);
        reply.ok();
    }

    fn getxattr(&self, req: &KernelCaller, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().get_xattr(ino, name, caller(req)), xattr(reply, size));
    }

    fn listxattr(&self, req: &KernelCaller, ino: u64, size: u32, reply: ReplyXattr) {
        self.reply(self.ops().list_xattr(ino, caller(req)), xattr(reply, size));
    }

    fn setxattr(&self, req: &KernelCaller, ino: u64, name: &OsStr, value: &[u8], flags: i32, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().set_xattr(ino, name, value.to_vec(), flags, caller(req)), empty(reply));
    }

    fn removexattr(&self, req: &KernelCaller, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.reply(self.ops().remove_xattr(ino, name, caller(req)), empty(reply));
    }

    fn statfs(&self, _req: &KernelCaller, _ino: u64, reply: ReplyStatfs) {
        let block = STATFS_BLOCK as u32;
        self.reply(self.ops().statfs(), move |result| match result {
            Ok(s) => reply.statfs(s.blocks, s.free, s.available, s.files, s.files_free, block, 255, block),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn create(&self, req: &KernelCaller, parent: u64, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let name = name_or_reply!(name, reply);
        let (ops, mark, backings) = (self.ops().clone(), self.ops().change_mark(), self.backings.clone());
        let answer = move |result: Result<(Attr, Opened)>| {
            let (attr, Opened { fh, backing, keep_cache }) = match result {
                Ok(created) => created,
                Err(e) => return reply.error(errno(&e)),
            };
            let ttl = ops.ttl_since(attr.ino, mark);
            let (attr, open_flags) = (fuse_attr(&attr, ops.blksize()), open_reply_flags(flags, keep_cache));
            match backings.for_handle(attr.ino, fh, backing, |file| reply.open_backing(file)) {
                Some(id) => reply.created_passthrough(ttl, &attr, 0, fh, open_flags, &id),
                None => reply.created(ttl, &attr, 0, fh, open_flags),
            }
            ops.gave_attr(attr.ino, mark, ttl);
        };
        self.reply(self.ops().create(parent, name, mode, umask, flags, caller(req)), answer);
    }
}
