//! The fuser adapter: each kernel request becomes one call of the operations layer
//! ([`crate::ops`]), its outcome one reply. Arguments are converted here (names, times, the
//! umask) and nothing else is decided here.

use std::ffi::OsStr;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use fuser::{
    FileType, Filesystem, KernelConfig, Notifier, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use surge_client::surge_proto::{Attr, AttrChanges, ErrorCode};
use surge_client::{Client, Error, Result};
use tokio::runtime::Handle;

use crate::convert::{file_type, fuse_attr, name_of, to_timestamp};
use crate::locks;
use crate::ops::{Caller, Ops, STATFS_BLOCK};

/// The kernel's largest write request.
const MAX_WRITE: u32 = 1 << 20;

/// A Surge instance as a fuser file system.
pub struct SurgeFs {
    ops: Arc<Ops>,
}

impl SurgeFs {
    /// `ttl`: how long the kernel may use attributes and names without asking (see the crate
    /// documentation for how they are kept exact). Call before `client` sends anything: only
    /// connections opened afterwards bring change notices.
    pub fn new(client: Client, runtime: Handle, ttl: std::time::Duration) -> Self {
        SurgeFs { ops: Ops::new(client, runtime, ttl) }
    }

    /// Where to put the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.ops.kernel.notifier.clone()
    }

    /// Runs `work` on the runtime and answers with `reply` when it is done.
    fn answer<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = Result<T>> + Send + 'static,
        reply: impl FnOnce(Result<T>) + Send + 'static,
    ) {
        self.ops.spawn(async move {
            let result = work.await;
            if let Err(e) = &result {
                log_failure(e);
            }
            reply(result)
        });
    }

    fn entry(&self, reply: ReplyEntry) -> impl FnOnce(Result<Attr>) + Send + 'static {
        let (ttl, blksize) = (self.ops.ttl(), self.ops.blksize());
        // Only positive entries are cached by the kernel: an error leaves no negative entry.
        move |result| match result {
            Ok(attr) => reply.entry(&ttl, &fuse_attr(&attr, blksize), 0),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn attr(&self, reply: ReplyAttr) -> impl FnOnce(Result<Attr>) + Send + 'static {
        let (ttl, blksize) = (self.ops.ttl(), self.ops.blksize());
        move |result| match result {
            Ok(attr) => reply.attr(&ttl, &fuse_attr(&attr, blksize)),
            Err(e) => reply.error(e.errno()),
        }
    }
}

fn caller(req: &Request<'_>) -> Caller {
    Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
}

fn empty(reply: ReplyEmpty) -> impl FnOnce(Result<()>) + Send + 'static {
    move |result| match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e.errno()),
    }
}

fn data<B: AsRef<[u8]>>(reply: ReplyData) -> impl FnOnce(Result<B>) + Send + 'static {
    move |result| match result {
        Ok(bytes) => reply.data(bytes.as_ref()),
        Err(e) => reply.error(e.errno()),
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
        Ok(fh) => reply.opened(fh, open_reply_flags(flags)),
        Err(e) => reply.error(e.errno()),
    }
}

/// An O_APPEND descriptor bypasses the page cache: through the cache the kernel splits one
/// write(2) into several requests where it meets a page it does not hold whole, and each
/// would be appended on its own (another node's append could land between the pieces).
/// Direct, a write of up to `max_write` is one request, one append.
fn open_reply_flags(flags: i32) -> u32 {
    if flags & libc::O_APPEND != 0 {
        fuser::consts::FOPEN_DIRECT_IO
    } else {
        0
    }
}

/// The name, or an EINVAL reply.
macro_rules! name_or_reply {
    ($name:expr, $reply:expr) => {
        match name_of($name) {
            Ok(n) => n,
            Err(e) => return $reply.error(e.errno()),
        }
    };
}

impl Filesystem for SurgeFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> std::result::Result<(), libc::c_int> {
        use fuser::consts::{FUSE_ATOMIC_O_TRUNC, FUSE_AUTO_INVAL_DATA, FUSE_FLOCK_LOCKS, FUSE_PARALLEL_DIROPS, FUSE_POSIX_LOCKS};
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        // Capabilities the running kernel lacks are simply not used.
        // Locks go to the files' home servers (see `locks`), so they exclude across nodes.
        for capability in [FUSE_PARALLEL_DIROPS, FUSE_AUTO_INVAL_DATA, FUSE_ATOMIC_O_TRUNC, FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS] {
            let _ = config.add_capabilities(capability);
        }
        Ok(())
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, _nlookup: u64) {
        self.ops.forget(ino);
    }

    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        if let Some(result) = self.ops.lookup_now(parent, &name, caller(req)) {
            return self.entry(reply)(result);
        }
        self.answer(self.ops.lookup(parent, name, caller(req)), self.entry(reply));
    }

    fn getattr(&mut self, req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        if let Some(attr) = self.ops.getattr_now(ino) {
            return self.attr(reply)(Ok(attr));
        }
        self.answer(self.ops.getattr(ino, caller(req)), self.attr(reply));
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
        let change = AttrChanges { mode, uid, gid, size, atime: atime.map(to_timestamp), mtime: mtime.map(to_timestamp) };
        self.answer(self.ops.setattr(ino, change, fh), self.attr(reply));
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        self.answer(self.ops.readlink(ino), data(reply));
    }

    fn mknod(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops.mknod(parent, name, mode & !umask, rdev, caller(req)), self.entry(reply));
    }

    fn mkdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops.mkdir(parent, name, mode & !umask, caller(req)), self.entry(reply));
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops.unlink(parent, name), empty(reply));
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        self.answer(self.ops.rmdir(parent, name), empty(reply));
    }

    fn symlink(&mut self, req: &Request<'_>, parent: u64, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        let name = name_or_reply!(link_name, reply);
        let target = name_or_reply!(target.as_os_str(), reply);
        self.answer(self.ops.symlink(parent, name, target, caller(req)), self.entry(reply));
    }

    fn link(&mut self, _req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(newname, reply);
        self.answer(self.ops.link(ino, newparent, name), self.entry(reply));
    }

    fn rename(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        let newname = name_or_reply!(newname, reply);
        self.answer(self.ops.rename(parent, name, newparent, newname, flags), empty(reply));
    }

    fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        self.answer(self.ops.open(ino, flags, caller(req)), opened(reply, flags));
    }

    fn read(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, size: u32, _flags: i32, _lock: Option<u64>, reply: ReplyData) {
        self.ops.read(fh, ino, offset as u64, size, data(reply));
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        bytes: &[u8],
        _wflags: u32,
        flags: i32,
        _lock: Option<u64>,
        reply: ReplyWrite,
    ) {
        // `flags`: the descriptor's open flags.
        let append = flags & libc::O_APPEND != 0;
        self.ops.write(fh, ino, offset as u64, bytes, append, move |result| match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e.errno()),
        });
    }

    fn flush(&mut self, _req: &Request<'_>, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        if let Some(result) = self.ops.flush_now(ino, fh, lock_owner) {
            return empty(reply)(result);
        }
        self.answer(self.ops.flush(ino, fh, lock_owner), empty(reply));
    }

    fn release(&mut self, _req: &Request<'_>, ino: u64, fh: u64, _flags: i32, _lock: Option<u64>, _flush: bool, reply: ReplyEmpty) {
        self.answer(self.ops.release(ino, fh), empty(reply));
    }

    fn getlk(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let Some(lock) = locks::range_from_kernel(lock_owner, pid, typ, start, end) else { return reply.error(libc::EINVAL) };
        self.answer(self.ops.get_lock(ino, lock), move |result| match result {
            Ok(Some(h)) => reply.locked(h.start, locks::end_to_kernel(h.end), locks::kind_to_kernel(h.kind), h.pid),
            // Nothing in the way: F_GETLK answers F_UNLCK.
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Err(e) => reply.error(e.errno()),
        });
    }

    fn setlk(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(lock) = locks::range_from_kernel(lock_owner, pid, typ, start, end) else { return reply.error(libc::EINVAL) };
        self.answer(self.ops.set_lock(ino, fh, lock, sleep), empty(reply));
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _datasync: bool, reply: ReplyEmpty) {
        self.answer(self.ops.fsync(fh), empty(reply));
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        self.answer(self.ops.opendir(ino), opened(reply, 0));
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let entries = match self.ops.dir_entries(fh) {
            Ok(entries) => entries,
            Err(e) => return reply.error(e.errno()),
        };
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
        self.ops.releasedir(fh);
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let block = STATFS_BLOCK as u32;
        self.answer(self.ops.statfs(), move |result| match result {
            Ok(s) => reply.statfs(s.blocks, s.free, s.free, s.files, s.files_free, block, 255, block),
            Err(e) => reply.error(e.errno()),
        });
    }

    fn create(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let name = name_or_reply!(name, reply);
        let (ttl, blksize) = (self.ops.ttl(), self.ops.blksize());
        self.answer(self.ops.create(parent, name, mode & !umask, flags, caller(req)), move |result| match result {
            Ok((attr, fh)) => reply.created(&ttl, &fuse_attr(&attr, blksize), 0, fh, open_reply_flags(flags)),
            Err(e) => reply.error(e.errno()),
        });
    }
}
