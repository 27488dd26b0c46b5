//! The fuser adapter: each kernel request becomes one call of the operations layer
//! ([`crate::ops`]), its outcome one reply. Arguments are converted here (names, times, the
//! umask) and nothing else is decided here.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::SystemTime;

use fuser::{
    BackingId, BsdFileFlags, Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use surge_client::surge_proto::{Attr, AttrChanges, ErrorCode};
use surge_client::{Client, Error, Result};
use tokio::runtime::Handle;

use crate::convert::{file_type, fuse_attr, name_of, to_timestamp};
use crate::locks;
use crate::ops::{Caller, Opened, Ops, STATFS_BLOCK};

/// The kernel's largest write request.
const MAX_WRITE: u32 = 1 << 20;

/// A Surge instance as a fuser file system.
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
                Some(id) => reply.opened_passthrough(FileHandle(fh), open_reply_flags(flags, false), &id),
                None => reply.opened(FileHandle(fh), open_reply_flags(flags, keep_cache)),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The operations layer, on a thread that can start work on the runtime: fuser calls
    /// from threads of its own, and chunk fetches and replies are started on the calling one.
    fn ops(&self) -> &Arc<Ops> {
        thread_local! {
            static IN_RUNTIME: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        if !IN_RUNTIME.get() {
            // Kept for the thread's life: its guard is never dropped, so the thread stays in
            // the runtime's context whatever runs on it later.
            std::mem::forget(self.ops.runtime().enter());
            IN_RUNTIME.set(true);
        }
        &self.ops
    }

    /// Where to put the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.ops().kernel.notifier.clone()
    }

    /// Runs `work` on the runtime and answers with `reply` when it is done.
    fn answer<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = Result<T>> + Send + 'static,
        reply: impl FnOnce(Result<T>) + Send + 'static,
    ) {
        self.ops().spawn(async move {
            let result = work.await;
            if let Err(e) = &result {
                log_failure(e);
            }
            reply(result)
        });
    }

    fn entry(&self, reply: ReplyEntry) -> impl FnOnce(Result<Attr>) + Send + 'static {
        let (ttl, blksize) = (self.ops().ttl(), self.ops().blksize());
        // Only positive entries are cached by the kernel: an error leaves no negative entry.
        move |result| match result {
            Ok(attr) => reply.entry(&ttl, &fuse_attr(&attr, blksize), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn attr(&self, reply: ReplyAttr) -> impl FnOnce(Result<Attr>) + Send + 'static {
        let (ttl, blksize) = (self.ops().ttl(), self.ops().blksize());
        move |result| match result {
            Ok(attr) => reply.attr(&ttl, &fuse_attr(&attr, blksize)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// The kernel's form of a Surge error.
fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}

fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
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
        Ok(bytes) if bytes.len() > size as usize => reply.error(Errno::ERANGE),
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
        _ => tracing::info!(errno = e.errno(), "answered an error: {e}"),
    }
}

fn opened(reply: ReplyOpen, flags: i32) -> impl FnOnce(Result<u64>) + Send + 'static {
    move |result| match result {
        Ok(fh) => reply.opened(FileHandle(fh), open_reply_flags(flags, false)),
        Err(e) => reply.error(errno(&e)),
    }
}

/// An O_APPEND descriptor bypasses the page cache: through the cache the kernel splits one
/// write(2) into several requests where it meets a page it does not hold whole, and each
/// would be appended on its own (another node's append could land between the pieces).
/// Direct, a write of up to `max_write` is one request, one append.
fn open_reply_flags(flags: i32, keep_cache: bool) -> FopenFlags {
    if flags & libc::O_APPEND != 0 {
        FopenFlags::FOPEN_DIRECT_IO
    } else if keep_cache {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::empty()
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
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        // Capabilities the running kernel lacks are simply not used.
        // Locks go to the files' home servers (see `locks`), so they exclude across nodes.
        if self.want_passthrough {
            let privileged = may_pass_through();
            let agreed =
                privileged && config.set_max_stack_depth(1).is_ok() && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok();
            if agreed {
                self.ops.enable_passthrough();
                tracing::info!("kernel passthrough on for files held whole by this node's server");
            } else if !privileged {
                tracing::info!("kernel passthrough off: this mount lacks CAP_SYS_ADMIN (every read and write goes through the mount)");
            } else {
                tracing::info!("kernel passthrough off: the kernel does not offer it (Linux 6.9 or later does)");
            }
        }
        for capability in [
            // Not FUSE_AUTO_INVAL_DATA: with it the kernel drops a file's pages whenever it
            // sees a new mtime, also the one this node's own close published, so a file read
            // back after writing would come from the servers again. The mount decides at each
            // open whether the pages are the file's (KernelCache::open_pages) and drops them
            // when another node's change is noticed (KernelCache::changed_elsewhere).
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_POSIX_LOCKS,
            InitFlags::FUSE_FLOCK_LOCKS,
            // The kernel enforces POSIX ACLs (the servers keep them and apply a directory's
            // default ACL to what is made in it, for which the mode comes unmasked, with the
            // umask beside it).
            InitFlags::FUSE_POSIX_ACL,
            InitFlags::FUSE_DONT_MASK,
            // Clearing set-id bits on a write is the mount's (see `write`), so the kernel
            // need not ask for security.capability before every write.
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        ] {
            let _ = config.add_capabilities(capability);
        }
        Ok(())
    }

    fn forget(&self, _req: &Request, ino: INodeNo, _nlookup: u64) {
        self.ops().forget(ino.0);
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        if let Some(result) = self.ops().lookup_now(parent.0, &name, caller(req)) {
            return self.entry(reply)(result);
        }
        self.answer(self.ops().lookup(parent.0, name, caller(req)), self.entry(reply));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(attr) = self.ops().getattr_now(ino.0) {
            return self.attr(reply)(Ok(attr));
        }
        self.answer(self.ops().getattr(ino.0, caller(req)), self.attr(reply));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = AttrChanges { mode, uid, gid, size, atime: atime.map(to_timestamp), mtime: mtime.map(to_timestamp) };
        self.answer(self.ops().setattr(ino.0, change, fh.map(|fh| fh.0)), self.attr(reply));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.answer(self.ops().readlink(ino.0), data(reply));
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops().mknod(parent.0, name, mode, umask, rdev, caller(req)), self.entry(reply));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops().mkdir(parent.0, name, mode, umask, caller(req)), self.entry(reply));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops().unlink(parent.0, name), empty(reply));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops().rmdir(parent.0, name), empty(reply));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        let name = name_or_reply!(link_name, reply);
        let target = name_or_reply!(target.as_os_str(), reply);
        self.answer(self.ops().symlink(parent.0, name, target, caller(req)), self.entry(reply));
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(newname, reply);
        self.answer(self.ops().link(ino.0, newparent.0, name), self.entry(reply));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let name = name_or_reply!(name, reply);
        let newname = name_or_reply!(newname, reply);
        self.answer(self.ops().rename(parent.0, name, newparent.0, newname, flags.bits()), empty(reply));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.answer(self.ops().open(ino.0, flags.0, caller(req)), self.opened_file(ino.0, reply, flags.0));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.ops().read(fh.0, ino.0, offset, size, data(reply));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        bytes: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            // A write by someone else than root to a set-id file drops its set-id bits.
            self.answer(self.ops().drop_set_id_bits(ino.0), |_| {});
        }
        // `flags`: the descriptor's open flags.
        let append = flags.0 & libc::O_APPEND != 0;
        self.ops().write(fh.0, ino.0, offset, bytes, append, move |result| match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn flush(&self, _req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        if let Some(result) = self.ops().flush_now(ino.0, fh.0, lock_owner.0) {
            return empty(reply)(result);
        }
        self.answer(self.ops().flush(ino.0, fh.0, lock_owner.0), empty(reply));
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.backings.released(ino.0, fh.0);
        self.answer(self.ops().release(ino.0, fh.0), empty(reply));
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let Some(lock) = locks::range_from_kernel(lock_owner.0, pid, typ, start, end) else { return reply.error(Errno::EINVAL) };
        self.answer(self.ops().get_lock(ino.0, lock), move |result| match result {
            Ok(Some(h)) => reply.locked(h.start, locks::end_to_kernel(h.end), locks::kind_to_kernel(h.kind), h.pid),
            // Nothing in the way: F_GETLK answers F_UNLCK.
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(lock) = locks::range_from_kernel(lock_owner.0, pid, typ, start, end) else { return reply.error(Errno::EINVAL) };
        self.answer(self.ops().set_lock(ino.0, fh.0, lock, sleep), empty(reply));
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.answer(self.ops().fsync(fh.0), empty(reply));
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        self.answer(self.ops().fallocate(ino.0, fh.0, offset, length, mode), empty(reply));
    }

    fn lseek(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        self.answer(self.ops().seek_data(fh.0, offset, whence), move |found| match found {
            Ok(offset) => reply.offset(offset as i64),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.answer(self.ops().opendir(ino.0), opened(reply, 0));
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let entries = match self.ops().dir_entries(fh.0) {
            Ok(entries) => entries,
            Err(e) => return reply.error(errno(&e)),
        };
        // Offsets: 1 = ".", 2 = "..", 2 + i + 1 = entries[i].
        let mut next = offset;
        loop {
            let full = match next {
                0 => reply.add(ino, 1, FileType::Directory, "."),
                1 => reply.add(ino, 2, FileType::Directory, ".."),
                n => match entries.get((n - 2) as usize) {
                    Some(e) => reply.add(INodeNo(e.ino), n + 1, file_type(e.kind), &e.name),
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

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.ops().releasedir(fh.0);
        reply.ok();
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops().get_xattr(ino.0, name, caller(req)), xattr(reply, size));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.answer(self.ops().list_xattr(ino.0, caller(req)), xattr(reply, size));
    }

    fn setxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops().set_xattr(ino.0, name, value.to_vec(), flags, caller(req)), empty(reply));
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops().remove_xattr(ino.0, name, caller(req)), empty(reply));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let block = STATFS_BLOCK as u32;
        self.answer(self.ops().statfs(), move |result| match result {
            Ok(s) => reply.statfs(s.blocks, s.free, s.free, s.files, s.files_free, block, 255, block),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let name = name_or_reply!(name, reply);
        let (ttl, blksize, backings) = (self.ops().ttl(), self.ops().blksize(), self.backings.clone());
        self.answer(self.ops().create(parent.0, name, mode, umask, flags, caller(req)), move |result| {
            let (attr, Opened { fh, backing, keep_cache }) = match result {
                Ok(created) => created,
                Err(e) => return reply.error(errno(&e)),
            };
            let (attr, fh, open_flags) = (fuse_attr(&attr, blksize), FileHandle(fh), open_reply_flags(flags, keep_cache));
            let ino = attr.ino.0;
            match backings.for_handle(ino, fh.0, backing, |file| reply.open_backing(file)) {
                Some(id) => reply.created_passthrough(&ttl, &attr, Generation(0), fh, open_flags, &id),
                None => reply.created(&ttl, &attr, Generation(0), fh, open_flags),
            }
        });
    }
}
