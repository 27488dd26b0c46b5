//! A mounted file system's session: the init handshake, then every request handed to the
//! [`Filesystem`], from the /dev/fuse thread and, when the kernel agrees to it, from the
//! io_uring queues' threads.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use zerocopy::IntoBytes;

use crate::abi::{self, init};
use crate::buffers::{Buffers, WriteData};
use crate::channel::{Dev, Notifier};
use crate::mount::{Mount, MountOptions};
use crate::reply::*;
use crate::request::{self, Caller, LockRange, Operation, Request, SetAttr};
use crate::uring;

/// A file system served through FUSE. Every method has the request's caller and inode (as
/// the kernel numbers it: 1 is the root), and answers through its reply, at once or later
/// from any thread. Methods are called from several threads at once. Unimplemented methods
/// answer ENOSYS (which makes the kernel stop asking, where it can do without).
#[allow(unused_variables, clippy::too_many_arguments)]
pub trait Filesystem: Send + Sync + 'static {
    /// Before anything else: what to ask of the kernel.
    fn init(&self, config: &mut KernelConfig) -> io::Result<()> {
        Ok(())
    }
    fn destroy(&self) {}
    /// The kernel forgets `nlookup` of the lookups it made of `ino` (no reply).
    fn forget(&self, ino: u64, nlookup: u64) {}
    fn lookup(&self, caller: &Caller, parent: u64, name: &OsStr, reply: ReplyEntry) {
        reply.error(libc::ENOSYS);
    }
    fn getattr(&self, caller: &Caller, ino: u64, fh: Option<u64>, reply: ReplyAttr) {
        reply.error(libc::ENOSYS);
    }
    fn setattr(&self, caller: &Caller, ino: u64, changes: SetAttr, reply: ReplyAttr) {
        reply.error(libc::ENOSYS);
    }
    fn readlink(&self, caller: &Caller, ino: u64, reply: ReplyData) {
        reply.error(libc::ENOSYS);
    }
    fn mknod(&self, caller: &Caller, parent: u64, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        reply.error(libc::ENOSYS);
    }
    fn mkdir(&self, caller: &Caller, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        reply.error(libc::ENOSYS);
    }
    fn unlink(&self, caller: &Caller, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn rmdir(&self, caller: &Caller, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn symlink(&self, caller: &Caller, parent: u64, name: &OsStr, target: &OsStr, reply: ReplyEntry) {
        reply.error(libc::ENOSYS);
    }
    /// `flags`: RENAME_NOREPLACE, RENAME_EXCHANGE.
    fn rename(&self, caller: &Caller, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn link(&self, caller: &Caller, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        reply.error(libc::ENOSYS);
    }
    /// `flags`: the open(2) flags.
    fn open(&self, caller: &Caller, ino: u64, flags: i32, reply: ReplyOpen) {
        reply.error(libc::ENOSYS);
    }
    fn read(&self, caller: &Caller, ino: u64, fh: u64, offset: u64, size: u32, reply: ReplyData) {
        reply.error(libc::ENOSYS);
    }
    /// `write_flags`: FUSE_WRITE_* bits; `flags`: the descriptor's open flags. `data` is
    /// kept past the call without a copy where the transport allows ([`WriteData::to_bytes`]).
    fn write(&self, caller: &Caller, ino: u64, fh: u64, offset: u64, data: WriteData<'_>, write_flags: u32, flags: i32, reply: ReplyWrite) {
        reply.error(libc::ENOSYS);
    }
    fn flush(&self, caller: &Caller, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn release(&self, caller: &Caller, ino: u64, fh: u64, reply: ReplyEmpty) {
        reply.ok();
    }
    fn fsync(&self, caller: &Caller, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn opendir(&self, caller: &Caller, ino: u64, flags: i32, reply: ReplyOpen) {
        reply.opened(0, 0);
    }
    fn readdir(&self, caller: &Caller, ino: u64, fh: u64, offset: u64, reply: ReplyDirectory) {
        reply.error(libc::ENOSYS);
    }
    /// Asked only of a file system that negotiated `DO_READDIRPLUS`.
    fn readdirplus(&self, caller: &Caller, ino: u64, fh: u64, offset: u64, reply: ReplyDirectoryPlus) {
        reply.error(libc::ENOSYS);
    }
    fn releasedir(&self, caller: &Caller, ino: u64, fh: u64, reply: ReplyEmpty) {
        reply.ok();
    }
    fn fsyncdir(&self, caller: &Caller, ino: u64, fh: u64, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn statfs(&self, caller: &Caller, ino: u64, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 512, 255, 512);
    }
    fn setxattr(&self, caller: &Caller, ino: u64, name: &OsStr, value: &[u8], flags: i32, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    /// `size` 0: the caller asks for the value's size.
    fn getxattr(&self, caller: &Caller, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply.error(libc::ENOSYS);
    }
    fn listxattr(&self, caller: &Caller, ino: u64, size: u32, reply: ReplyXattr) {
        reply.error(libc::ENOSYS);
    }
    fn removexattr(&self, caller: &Caller, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn access(&self, caller: &Caller, ino: u64, mask: i32, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn create(&self, caller: &Caller, parent: u64, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        reply.error(libc::ENOSYS);
    }
    fn getlk(&self, caller: &Caller, ino: u64, fh: u64, owner: u64, lock: LockRange, reply: ReplyLock) {
        reply.error(libc::ENOSYS);
    }
    /// `sleep`: wait for the lock (F_SETLKW, or flock without LOCK_NB).
    fn setlk(&self, caller: &Caller, ino: u64, fh: u64, owner: u64, lock: LockRange, sleep: bool, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn fallocate(&self, caller: &Caller, ino: u64, fh: u64, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        reply.error(libc::ENOSYS);
    }
    fn lseek(&self, caller: &Caller, ino: u64, fh: u64, offset: i64, whence: i32, reply: ReplyLseek) {
        reply.error(libc::ENOSYS);
    }
}

/// What the file system asks of the kernel at init, within what the kernel offers.
pub struct KernelConfig {
    offered: u64,
    requested: u64,
    kernel_max_readahead: u32,
    max_write: u32,
    max_readahead: u32,
    max_background: u16,
    congestion_threshold: u16,
    max_stack_depth: u32,
}

impl KernelConfig {
    fn new(offered: u64, kernel_max_readahead: u32) -> KernelConfig {
        KernelConfig {
            offered,
            requested: (init::ASYNC_READ | init::BIG_WRITES | init::MAX_PAGES) & offered,
            kernel_max_readahead,
            max_write: 128 << 10,
            max_readahead: kernel_max_readahead,
            max_background: 16,
            congestion_threshold: 12,
            max_stack_depth: 0,
        }
    }

    /// The capabilities (`abi::init` bits) the running kernel offers.
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// Asks for capabilities; those the kernel does not offer come back as the error (and
    /// are not asked for).
    pub fn add_capabilities(&mut self, bits: u64) -> Result<(), u64> {
        self.requested |= bits & self.offered;
        match bits & !self.offered {
            0 => Ok(()),
            missing => Err(missing),
        }
    }

    pub fn set_max_write(&mut self, bytes: u32) {
        self.max_write = bytes.max(4096);
    }

    /// At most what the kernel said it allows.
    pub fn set_max_readahead(&mut self, bytes: u32) {
        self.max_readahead = bytes.min(self.kernel_max_readahead);
    }

    pub fn set_max_background(&mut self, requests: u16) {
        self.max_background = requests.max(1);
    }

    pub fn set_congestion_threshold(&mut self, requests: u16) {
        self.congestion_threshold = requests;
    }

    /// How deep backing files may stack (passthrough needs at least 1).
    pub fn set_max_stack_depth(&mut self, depth: u32) {
        self.max_stack_depth = depth;
    }

    fn page_size() -> u32 {
        // SAFETY: sysconf only reads a system constant.
        u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
    }

    fn max_pages(&self) -> u16 {
        let largest = self.max_write.max(self.max_readahead);
        u16::try_from(largest.div_ceil(Self::page_size())).unwrap_or(u16::MAX)
    }

    /// The largest payload a request or reply carries (a ring entry's buffer size).
    fn max_payload(&self) -> usize {
        (abi::FUSE_MIN_READ_BUFFER.max(self.max_write).max(u32::from(self.max_pages()) * Self::page_size())) as usize
    }

    fn reply(&self) -> abi::fuse_init_out {
        let flags = self.requested | init::INIT_EXT;
        abi::fuse_init_out {
            major: abi::FUSE_KERNEL_VERSION,
            minor: abi::MINOR_VERSION,
            max_readahead: self.max_readahead,
            flags: flags as u32,
            max_background: self.max_background,
            congestion_threshold: self.congestion_threshold.min(self.max_background),
            max_write: self.max_write,
            time_gran: 1,
            max_pages: self.max_pages(),
            map_alignment: 0,
            flags2: (flags >> 32) as u32,
            max_stack_depth: if self.requested & init::PASSTHROUGH != 0 { self.max_stack_depth } else { 0 },
            unused: [0; 6],
        }
    }
}

/// How requests reach the file system.
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    /// Ask for FUSE over io_uring (used when the kernel offers it: Linux 6.14+ with the fuse
    /// module's `enable_uring` set; said in the log either way). A queue takes requests from
    /// its CPU only, as many at a time as it has entries.
    pub io_uring: bool,
    /// Ring entries each CPU queue starts with: how many requests of one CPU can be in the
    /// file system at once (more wait in the kernel) until the queue grows.
    pub ring_depth: usize,
    /// Ring entries a CPU queue may grow to. A request that waits for another (a blocking
    /// lock) holds its entry meanwhile, so a queue registers more entries while a quarter of
    /// its entries is free, up to this many; at the limit, lock waits that would take the
    /// last few are answered ENOLCK (an entry costs its header and the address space of a
    /// payload buffer, whose pages are only made when used).
    pub ring_max_depth: usize,
    /// A thread of its own per ring queue; otherwise the rings are handed to the caller's
    /// event loop ([`Session::take_rings`]).
    pub ring_threads: bool,
}

impl Default for Transport {
    fn default() -> Self {
        Transport { io_uring: false, ring_depth: 32, ring_max_depth: 1024, ring_threads: true }
    }
}

/// A mounted file system and its connection.
pub struct Session<FS: Filesystem> {
    fs: Arc<FS>,
    dev: Arc<Dev>,
    transport: Transport,
    /// Where requests are read into: enough for the init request, then for the largest
    /// request agreed at init, from `buffers`.
    buf: Vec<u8>,
    /// Read buffers once init has sized them (a large write takes its buffer along).
    buffers: Buffers,
    /// Rings made at init for the caller to drive (`Transport::ring_threads` off).
    rings: Vec<uring::Ring>,
    /// Init started FUSE over io_uring: /dev/fuse carries forgets, interrupts and stragglers.
    over_rings: bool,
    /// A request other than a forget or an interrupt was read from /dev/fuse since the last
    /// [`Session::took_requests`].
    took_requests: bool,
    /// Unmounted when the session ends, if this process mounted it.
    _mount: Option<Mount>,
}

/// Where [`Session::serve_waiting`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// No request waits.
    Idle,
    /// It served as many as it was allowed; more may wait.
    More,
    /// The file system was unmounted: the session is over.
    Unmounted,
}

impl<FS: Filesystem> Session<FS> {
    /// Mounts `fs` at `mountpoint`.
    pub fn mount(fs: FS, mountpoint: &Path, options: &MountOptions, transport: Transport) -> io::Result<Self> {
        let (fd, mount) = Mount::new(mountpoint, options)?;
        Ok(Session::new(fs, fd, transport, Some(mount)))
    }

    /// Serves a mount someone else made on the /dev/fuse descriptor `fd`.
    pub fn from_fd(fs: FS, fd: OwnedFd, transport: Transport) -> Self {
        Session::new(fs, fd, transport, None)
    }

    fn new(fs: FS, fd: OwnedFd, transport: Transport, mount: Option<Mount>) -> Self {
        let buffers = Buffers::new(abi::FUSE_MIN_READ_BUFFER as usize);
        let buf = buffers.take();
        Session {
            fs: Arc::new(fs),
            dev: Arc::new(Dev::new(fd)),
            transport,
            buf,
            buffers,
            rings: vec![],
            over_rings: false,
            took_requests: false,
            _mount: mount,
        }
    }

    /// What sends the kernel invalidations, for use from any thread.
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.dev.clone())
    }

    /// Serves requests until the file system is unmounted, reading /dev/fuse on this thread.
    pub fn run(mut self) -> io::Result<()> {
        loop {
            if let Flow::Unmounted = self.serve_waiting(usize::MAX)? {
                return Ok(());
            }
        }
    }

    /// The /dev/fuse descriptor, for an event loop that drives the session itself: after
    /// [`Session::set_nonblocking`], wait until it is readable, then call
    /// [`Session::serve_waiting`]. Serving requests on the thread that runs their work
    /// spares a hand-off between threads per request.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.dev.raw_fd()
    }

    /// The io_uring queues made at init, for the caller's event loop to drive (with
    /// `Transport::ring_threads` off; empty otherwise, or before init, or when the kernel
    /// declined io_uring).
    pub fn take_rings(&mut self) -> Vec<uring::Ring> {
        std::mem::take(&mut self.rings)
    }

    /// Whether requests come through FUSE over io_uring (from init on): /dev/fuse then
    /// carries forgets and interrupts, and the odd request queued there as the rings became
    /// ready.
    pub fn over_rings(&self) -> bool {
        self.over_rings
    }

    /// Whether a request other than a forget or an interrupt came from /dev/fuse since the
    /// last call (over rings: one of their stragglers, which must not be kept waiting).
    pub fn took_requests(&mut self) -> bool {
        std::mem::take(&mut self.took_requests)
    }

    /// Makes reads of /dev/fuse return at once when no request waits.
    pub fn set_nonblocking(&self) -> io::Result<()> {
        self.dev.set_nonblocking()
    }

    /// Reads and hands over requests until none waits (with [`Session::set_nonblocking`];
    /// otherwise it waits for the next), at most `limit` of them.
    pub fn serve_waiting(&mut self, limit: usize) -> io::Result<Flow> {
        for _ in 0..limit {
            let n = match self.dev.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    // Nothing there (non-blocking).
                    Some(libc::EAGAIN) => return Ok(Flow::Idle),
                    // Interrupted before it was read, or a signal.
                    Some(libc::ENOENT | libc::EINTR) => continue,
                    Some(libc::ENODEV) => return Ok(Flow::Unmounted),
                    _ => return Err(e),
                },
            };
            self.serve_one(n)?;
        }
        Ok(Flow::More)
    }

    /// Hands over the request in the first `n` bytes of the buffer (with the buffer itself,
    /// when it is a large write).
    fn serve_one(&mut self, n: usize) -> io::Result<()> {
        let lent = Buffers::worth_handing_over(&self.buf[..n]).then(|| self.buffers.hand_over(&mut self.buf, n));
        let buf = match &lent {
            Some(whole) => &whole[..],
            None => &self.buf[..n],
        };
        let parts = request::split_dev_request(buf).and_then(|(h, op, payload)| Ok((h, request::decode(&h, op, payload)?)));
        let (header, request) = match parts {
            Ok(parts) => parts,
            Err(malformed) => {
                self.refuse_malformed(buf, malformed);
                return Ok(());
            }
        };
        tracing::trace!(unique = header.unique, opcode = header.opcode, "dev request");
        if !matches!(request.op, Operation::Forget { .. } | Operation::BatchForget(_) | Operation::Interrupt { .. }) {
            self.took_requests = true;
        }
        match request.op {
            Operation::Init { major, minor, max_readahead, capabilities } => {
                if let Some(size) = self.init(header.unique, major, minor, max_readahead, capabilities)? {
                    self.buffers = Buffers::new(size);
                    self.buf = self.buffers.take();
                }
            }
            Operation::Destroy => {
                self.fs.destroy();
                let _ = self.dev.reply(header.unique, 0, &[]);
            }
            _ => dispatch(&*self.fs, request, lent.as_ref(), Responder::new(self.dev.clone(), header.unique, Route::Dev)),
        }
        Ok(())
    }

    fn refuse_malformed(&self, buf: &[u8], malformed: request::Malformed) {
        tracing::warn!("malformed request from the kernel: {}", malformed.0);
        if let Some(header) = abi::read::<abi::fuse_in_header>(buf) {
            let _ = self.dev.reply(header.unique, -libc::EINVAL, &[]);
        }
    }

    /// Answers the init request; returns the size of the largest request to read from now
    /// on, or None when the kernel's protocol is too old to serve.
    fn init(&mut self, unique: u64, major: u32, minor: u32, kernel_max_readahead: u32, offered: u64) -> io::Result<Option<usize>> {
        if major != abi::FUSE_KERNEL_VERSION || minor < 31 {
            tracing::error!("the kernel speaks FUSE {major}.{minor}; this file system needs 7.31 or later");
            self.dev.reply(unique, -libc::EPROTO, &[])?;
            return Ok(None);
        }
        let mut config = KernelConfig::new(offered, kernel_max_readahead);
        self.fs.init(&mut config)?;
        let offered = config.offered() & init::OVER_IO_URING != 0;
        if self.transport.io_uring && !offered {
            tracing::info!("FUSE over io_uring off: the kernel does not offer it (Linux 6.14+, fuse module's enable_uring)");
        }
        let payload = config.max_payload();
        // The rings are made before the reply asks for io_uring: once it has, the kernel holds
        // every request until each CPU's queue has registered an entry, so a ring that cannot
        // be made must mean a reply without it (requests then come through /dev/fuse).
        let queues = if self.transport.io_uring && offered {
            let initial = self.transport.ring_depth.max(1);
            let depth = uring::Depth { initial, max: self.transport.ring_max_depth.max(initial) };
            match uring::make(&self.dev, depth, payload) {
                Ok(queues) => {
                    let _ = config.add_capabilities(init::OVER_IO_URING);
                    tracing::info!("FUSE over io_uring: {} entries per CPU queue, up to {}", depth.initial, depth.max);
                    Some(queues)
                }
                Err(e) => {
                    tracing::warn!("FUSE over io_uring off: {e}; requests go through /dev/fuse");
                    None
                }
            }
        } else {
            None
        };
        self.dev.reply(unique, 0, &[config.reply().as_bytes()])?;
        if let Some(queues) = queues {
            let fs = self.fs.clone();
            // A queue that cannot start now would leave every request waiting: an error ends
            // the session (and, with it, the mount's connection).
            self.rings =
                uring::start(queues, self.transport.ring_threads, move |request, responder| dispatch(&*fs, request, None, responder))?;
            self.over_rings = true;
        }
        Ok(Some(payload + abi::IN_HEADER_LEN + size_of::<abi::fuse_write_in>() + 4096))
    }
}

/// Hands one request to the file system with its reply. `lent`: the buffer the request was
/// read into, when the session hands it over with a write's data.
pub(crate) fn dispatch<FS: Filesystem>(fs: &FS, request: Request<'_>, lent: Option<&bytes::Bytes>, responder: Responder) {
    let (ino, caller) = (request.nodeid, &request.caller);
    match request.op {
        Operation::Forget { nlookup } => {
            fs.forget(ino, nlookup);
            responder.unanswered();
        }
        Operation::BatchForget(forgets) => {
            for (ino, nlookup) in forgets {
                fs.forget(ino, nlookup);
            }
            responder.unanswered();
        }
        // Requests are not cancelled: each is answered when its work is done.
        Operation::Interrupt { .. } => responder.unanswered(),
        Operation::Lookup { name } => fs.lookup(caller, ino, name, Reply::new(responder)),
        Operation::Getattr { fh } => fs.getattr(caller, ino, fh, Reply::new(responder)),
        Operation::Setattr(changes) => fs.setattr(caller, ino, changes, Reply::new(responder)),
        Operation::Readlink => fs.readlink(caller, ino, Reply::new(responder)),
        Operation::Symlink { name, target } => fs.symlink(caller, ino, name, target, Reply::new(responder)),
        Operation::Mknod { name, mode, umask, rdev } => fs.mknod(caller, ino, name, mode, umask, rdev, Reply::new(responder)),
        Operation::Mkdir { name, mode, umask } => fs.mkdir(caller, ino, name, mode, umask, Reply::new(responder)),
        Operation::Unlink { name } => fs.unlink(caller, ino, name, Reply::new(responder)),
        Operation::Rmdir { name } => fs.rmdir(caller, ino, name, Reply::new(responder)),
        Operation::Rename { name, newdir, newname, flags } => fs.rename(caller, ino, name, newdir, newname, flags, Reply::new(responder)),
        Operation::Link { oldnodeid, name } => fs.link(caller, oldnodeid, ino, name, Reply::new(responder)),
        Operation::Open { flags } => fs.open(caller, ino, flags, Reply::new(responder)),
        Operation::Read { fh, offset, size } => fs.read(caller, ino, fh, offset, size, Reply::new(responder)),
        Operation::Write { fh, offset, data, write_flags, flags } => {
            fs.write(caller, ino, fh, offset, WriteData::within(data, lent), write_flags, flags, Reply::new(responder))
        }
        Operation::Statfs => fs.statfs(caller, ino, Reply::new(responder)),
        Operation::Release { fh } => fs.release(caller, ino, fh, Reply::new(responder)),
        Operation::Fsync { fh, datasync } => fs.fsync(caller, ino, fh, datasync, Reply::new(responder)),
        Operation::Setxattr { name, value, flags } => fs.setxattr(caller, ino, name, value, flags, Reply::new(responder)),
        Operation::Getxattr { name, size } => fs.getxattr(caller, ino, name, size, Reply::new(responder)),
        Operation::Listxattr { size } => fs.listxattr(caller, ino, size, Reply::new(responder)),
        Operation::Removexattr { name } => fs.removexattr(caller, ino, name, Reply::new(responder)),
        Operation::Flush { fh, lock_owner } => fs.flush(caller, ino, fh, lock_owner, Reply::new(responder)),
        Operation::Opendir { flags } => fs.opendir(caller, ino, flags, Reply::new(responder)),
        Operation::Readdir { fh, offset, size } => fs.readdir(caller, ino, fh, offset, ReplyDirectory::new(responder, size)),
        Operation::ReaddirPlus { fh, offset, size } => fs.readdirplus(caller, ino, fh, offset, ReplyDirectoryPlus::new(responder, size)),
        Operation::Releasedir { fh } => fs.releasedir(caller, ino, fh, Reply::new(responder)),
        Operation::Fsyncdir { fh } => fs.fsyncdir(caller, ino, fh, Reply::new(responder)),
        Operation::Getlk { fh, owner, lock } => fs.getlk(caller, ino, fh, owner, lock, Reply::new(responder)),
        Operation::Setlk { fh, owner, lock, sleep } => fs.setlk(caller, ino, fh, owner, lock, sleep, Reply::new(responder)),
        Operation::Access { mask } => fs.access(caller, ino, mask, Reply::new(responder)),
        Operation::Create { name, mode, umask, flags } => fs.create(caller, ino, name, mode, umask, flags, Reply::new(responder)),
        Operation::Fallocate { fh, offset, length, mode } => fs.fallocate(caller, ino, fh, offset, length, mode, Reply::new(responder)),
        Operation::Lseek { fh, offset, whence } => fs.lseek(caller, ino, fh, offset, whence, Reply::new(responder)),
        // Init and destroy come once, through /dev/fuse, and are the session's.
        Operation::Init { .. } | Operation::Destroy => ReplyEmpty::new(responder).error(libc::EINVAL),
        Operation::Unsupported(_) => ReplyEmpty::new(responder).error(libc::ENOSYS),
    }
}
