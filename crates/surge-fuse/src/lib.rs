//! # surge-fuse — a Surge instance as a POSIX directory
//!
//! Maps the kernel's FUSE requests onto the native client library, so any unmodified program
//! (h5py, tar, git, ffmpeg, a shell) works on an instance. Surge inode numbers are used as
//! FUSE inode numbers unchanged (the root is 1 in both).
//!
//! * **Concurrency**: the FUSE session thread only decodes requests; each one is answered by a
//!   task on a tokio runtime, so many requests are in flight at once (FUSE replies may be sent
//!   from any thread, in any order).
//! * **Large I/O**: 1 MiB writes (`max_write`, the kernel's ceiling), async reads, write-behind
//!   and read-ahead on every open handle.
//! * **Close-to-open across nodes**: attributes and entries are not cached by the kernel
//!   (TTL 0) and page caches are dropped at every open, so an open on this node after a close
//!   or rename on another sees the new name and all the new data; a file that appears
//!   elsewhere is found at once (no negative-entry cache). `flush` (every `close(2)`) waits
//!   for the handle's writes and publishes size and mtime.
//! * **Extended attributes** are not supported and say so with ENOSYS, which the kernel
//!   remembers: without that it asks `getxattr(security.capability)` before every write.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use surge_client::surge_proto::{Attr, AttrChanges, DirEntry, FileKind, Timestamp};
use surge_client::{Client, File};
use tokio::runtime::Handle;

/// No kernel caching of attributes or entries: see the module documentation.
const TTL: Duration = Duration::ZERO;
/// The kernel's largest write request.
const MAX_WRITE: u32 = 1 << 20;

pub struct SurgeFs {
    client: Client,
    runtime: Handle,
    files: Arc<Mutex<HashMap<u64, Arc<File>>>>,
    dirs: Arc<Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>>,
    next_handle: AtomicU64,
}

impl SurgeFs {
    pub fn new(client: Client, runtime: Handle) -> Self {
        SurgeFs {
            client,
            runtime,
            files: Default::default(),
            dirs: Default::default(),
            next_handle: AtomicU64::new(1),
        }
    }

    fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    fn file(&self, fh: u64) -> Option<Arc<File>> {
        self.files.lock().unwrap().get(&fh).cloned()
    }

    /// The largest size any open handle on this node knows for `ino`: writes not yet
    /// published to the servers are part of the file for every program on this node.
    fn local_size(&self, ino: u64) -> u64 {
        local_size(&self.files, ino)
    }

    /// The other open handles of the same file: what one handle writes, a read through
    /// another on this node must see.
    fn siblings(&self, fh: u64, ino: u64) -> Vec<Arc<File>> {
        self.files.lock().unwrap().iter().filter(|(h, f)| **h != fh && f.ino() == ino).map(|(_, f)| f.clone()).collect()
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
                Timestamp { secs: -(d.as_secs() as i64) - i64::from(d.subsec_nanos() > 0), nanos: (1_000_000_000 - d.subsec_nanos()) % 1_000_000_000 }
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
fn local_size(files: &Mutex<HashMap<u64, Arc<File>>>, ino: u64) -> u64 {
    files.lock().unwrap().values().filter(|f| f.ino() == ino).map(|f| f.size()).max().unwrap_or(0)
}

/// Answers a request that returns nothing but success or an errno.
fn answer_empty(reply: ReplyEmpty, result: surge_client::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e.errno()),
    }
}

/// Answers a request that returns a new or found directory entry.
fn answer_entry(reply: ReplyEntry, result: surge_client::Result<Attr>, blksize: u32) {
    match result {
        Ok(attr) => reply.entry(&TTL, &fuse_attr(&attr, blksize), 0),
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

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        let (client, blksize) = (self.client.clone(), self.client.chunk_size() as u32);
        let files = self.files.clone();
        self.spawn(async move {
            match client.lookup(parent, &name).await {
                Ok(mut attr) => {
                    attr.size = attr.size.max(local_size(&files, attr.ino));
                    reply.entry(&TTL, &fuse_attr(&attr, blksize), 0)
                }
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let (client, blksize) = (self.client.clone(), self.client.chunk_size() as u32);
        let local = self.local_size(ino);
        self.spawn(async move {
            match client.getattr(ino).await {
                Ok(mut attr) => {
                    attr.size = attr.size.max(local);
                    reply.attr(&TTL, &fuse_attr(&attr, blksize))
                }
                Err(e) => reply.error(e.errno()),
            }
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
        let (client, blksize) = (self.client.clone(), self.client.chunk_size() as u32);
        let open = fh.and_then(|fh| self.file(fh));
        self.spawn(async move {
            let result = async {
                if let (Some(size), Some(f)) = (size, &open) {
                    // Through the handle, so its pending writes land first.
                    f.set_len(size).await?;
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
            match result {
                Ok(attr) => reply.attr(&TTL, &fuse_attr(&attr, blksize)),
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let client = self.client.clone();
        self.spawn(async move {
            match client.readlink_ino(ino).await {
                Ok(target) => reply.data(target.as_bytes()),
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    fn mknod(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, _rdev: u32, reply: ReplyEntry) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Devices, FIFOs and sockets have no place in a burst buffer.
            return reply.error(libc::EPERM);
        }
        let name = name_or_reply!(name, reply);
        let (client, blksize) = (self.client.as_user(req.uid(), req.gid()), self.client.chunk_size() as u32);
        self.spawn(async move {
            let result = async {
                let f = client.create_at(parent, &name, mode & !umask & 0o7777, true).await?;
                let ino = f.ino();
                f.close().await?;
                client.getattr(ino).await
            }
            .await;
            answer_entry(reply, result, blksize)
        });
    }

    fn mkdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        let (client, blksize) = (self.client.as_user(req.uid(), req.gid()), self.client.chunk_size() as u32);
        self.spawn(async move {
            answer_entry(reply, client.mkdir_at(parent, &name, mode & !umask & 0o7777).await, blksize)
        });
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        let client = self.client.clone();
        self.spawn(async move {
            answer_empty(reply, client.unlink_at(parent, &name).await)
        });
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!(name, reply);
        let client = self.client.clone();
        self.spawn(async move {
            answer_empty(reply, client.rmdir_at(parent, &name).await)
        });
    }

    fn symlink(&mut self, req: &Request<'_>, parent: u64, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        let name = name_or_reply!(link_name, reply);
        let target = name_or_reply!(target.as_os_str(), reply);
        let (client, blksize) = (self.client.as_user(req.uid(), req.gid()), self.client.chunk_size() as u32);
        self.spawn(async move {
            answer_entry(reply, client.symlink_at(parent, &name, &target).await, blksize)
        });
    }

    fn rename(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32, reply: ReplyEmpty) {
        if flags & !libc::RENAME_NOREPLACE != 0 {
            // RENAME_EXCHANGE / RENAME_WHITEOUT.
            return reply.error(libc::EINVAL);
        }
        let name = name_or_reply!(name, reply);
        let newname = name_or_reply!(newname, reply);
        let client = self.client.clone();
        self.spawn(async move {
            answer_empty(reply, client.rename_at(parent, &name, newparent, &newname, flags & libc::RENAME_NOREPLACE != 0).await)
        });
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let client = self.client.clone();
        let (files, fh, window) = (self.files.clone(), self.handle(), self.client.stream_window());
        self.spawn(async move {
            let result = async {
                let f = client.open_ino(ino).await?;
                if flags & libc::O_TRUNC != 0 {
                    f.set_len(0).await?;
                }
                f.set_write_behind(window).await?;
                f.set_read_ahead(window).await;
                Ok::<_, surge_client::Error>(f)
            }
            .await;
            match result {
                Ok(f) => {
                    files.lock().unwrap().insert(fh, Arc::new(f));
                    // No FOPEN_KEEP_CACHE: the page cache is dropped at open (close-to-open).
                    reply.opened(fh, 0)
                }
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    fn read(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, size: u32, _flags: i32, _lock: Option<u64>, reply: ReplyData) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        let siblings = self.siblings(fh, ino);
        self.spawn(async move {
            for other in &siblings {
                // Their failures belong to their own writers, who will hear of them.
                let _ = other.wait_writes().await;
                f.note_size(other.size());
            }
            match f.pread(offset as u64, size as usize).await {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    fn write(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, data: &[u8], _wflags: u32, _flags: i32, _lock: Option<u64>, reply: ReplyWrite) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        let siblings = self.siblings(fh, ino);
        let data = bytes::Bytes::copy_from_slice(data);
        self.spawn(async move {
            for other in &siblings {
                other.forget_read_ahead().await;
            }
            match f.pwrite_bytes(offset as u64, data).await {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(e.errno()),
            }
        });
    }

    /// Every close(2): wait for this handle's writes and publish size and mtime, so the
    /// close-to-open promise holds when close returns (and write errors reach close).
    fn flush(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        self.spawn(async move {
            answer_empty(reply, f.flush().await)
        });
    }

    fn release(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, _lock: Option<u64>, _flush: bool, reply: ReplyEmpty) {
        let Some(f) = self.files.lock().unwrap().remove(&fh) else { return reply.error(libc::EBADF) };
        self.spawn(async move {
            answer_empty(reply, f.release().await)
        });
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let Some(f) = self.file(fh) else { return reply.error(libc::EBADF) };
        self.spawn(async move {
            answer_empty(reply, f.fsync().await)
        });
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
        let (client, blksize) = (self.client.as_user(req.uid(), req.gid()), self.client.chunk_size() as u32);
        let (files, fh, window) = (self.files.clone(), self.handle(), self.client.stream_window());
        self.spawn(async move {
            let result = async {
                let f = client.create_at(parent, &name, mode & !umask & 0o7777, flags & libc::O_EXCL != 0).await?;
                if flags & libc::O_TRUNC != 0 && f.size() > 0 {
                    f.set_len(0).await?;
                }
                f.set_write_behind(window).await?;
                f.set_read_ahead(window).await;
                let mut attr = f.attr_at_open().clone();
                attr.size = f.size();
                Ok::<_, surge_client::Error>((f, attr))
            }
            .await;
            match result {
                Ok((f, attr)) => {
                    files.lock().unwrap().insert(fh, Arc::new(f));
                    reply.created(&TTL, &fuse_attr(&attr, blksize), 0, fh, 0)
                }
                Err(e) => reply.error(e.errno()),
            }
        });
    }
}
