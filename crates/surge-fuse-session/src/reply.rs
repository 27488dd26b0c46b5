//! Replies. A file system answers each request once, from any thread, at any later time,
//! through the typed reply it was given (`ReplyEntry`, `ReplyData`, ...: one `Reply` with a
//! kind, so a lookup cannot be answered with data). A reply dropped unanswered answers EIO,
//! so the calling process never waits forever.

use std::io;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use zerocopy::IntoBytes;

use crate::abi;
use crate::channel::{BackingId, Dev};
use crate::uring;

/// Seconds and nanoseconds since the epoch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Time {
    pub secs: i64,
    pub nanos: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    RegularFile,
    Directory,
    Symlink,
    NamedPipe,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileType {
    /// The type's bits of a mode (S_IFREG, ...).
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::RegularFile => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
        }
    }
}

/// An inode's attributes as the kernel gets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttr {
    pub ino: u64,
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub kind: FileType,
    /// Permission bits (and set-id, sticky).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

impl FileAttr {
    fn to_kernel(self) -> abi::fuse_attr {
        abi::fuse_attr {
            ino: self.ino,
            size: self.size,
            blocks: self.blocks,
            atime: self.atime.secs as u64,
            mtime: self.mtime.secs as u64,
            ctime: self.ctime.secs as u64,
            atimensec: self.atime.nanos,
            mtimensec: self.mtime.nanos,
            ctimensec: self.ctime.nanos,
            mode: self.kind.mode_bits() | u32::from(self.perm),
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: self.blksize,
            flags: 0,
        }
    }
}

/// Where a reply goes: written to /dev/fuse, or committed to the ring entry the request
/// came in.
pub(crate) enum Route {
    Dev,
    Ring(uring::EntryRef),
}

/// Sends one request's answer, once. The kinds of reply are thin typed faces over it.
pub(crate) struct Responder {
    dev: Arc<Dev>,
    unique: u64,
    route: Option<Route>,
}

impl Responder {
    pub(crate) fn new(dev: Arc<Dev>, unique: u64, route: Route) -> Responder {
        Responder { dev, unique, route: Some(route) }
    }

    /// For requests that take no answer (forget, interrupt).
    pub(crate) fn unanswered(mut self) {
        if let Some(Route::Ring(entry)) = self.route.take() {
            // The kernel sends these through /dev/fuse; should one come in a ring entry, the
            // entry is given back with an error so it is not lost.
            let _ = entry.commit(self.unique, -libc::ENOSYS, &[]);
        }
    }

    /// Sends `error` (0 or an errno) and the reply's parts, concatenated.
    fn send(&mut self, errno: i32, parts: &[&[u8]]) {
        let Some(route) = self.route.take() else { return };
        let result = match route {
            Route::Dev => self.dev.reply(self.unique, -errno, parts),
            Route::Ring(entry) => entry.commit(self.unique, -errno, parts),
        };
        if let Err(e) = result {
            // ENOENT: the request was interrupted and the kernel no longer waits for it.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::warn!("reply to request {} not delivered: {e}", self.unique);
            }
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if self.route.is_some() {
            tracing::warn!("request {} dropped unanswered: answered EIO", self.unique);
            self.send(libc::EIO, &[]);
        }
    }
}

/// The kinds of reply (type parameters of [`Reply`]).
pub mod kind {
    pub struct Empty;
    pub struct Entry;
    pub struct Attr;
    pub struct Open;
    pub struct Create;
    pub struct Data;
    pub struct Write;
    pub struct Xattr;
    pub struct Statfs;
    pub struct Lock;
    pub struct Lseek;
}

/// The answer to one request; `K` says which answers it takes besides an error.
pub struct Reply<K> {
    responder: Responder,
    kind: PhantomData<fn() -> K>,
}

pub type ReplyEmpty = Reply<kind::Empty>;
pub type ReplyEntry = Reply<kind::Entry>;
pub type ReplyAttr = Reply<kind::Attr>;
pub type ReplyOpen = Reply<kind::Open>;
pub type ReplyCreate = Reply<kind::Create>;
pub type ReplyData = Reply<kind::Data>;
pub type ReplyWrite = Reply<kind::Write>;
pub type ReplyXattr = Reply<kind::Xattr>;
pub type ReplyStatfs = Reply<kind::Statfs>;
pub type ReplyLock = Reply<kind::Lock>;
pub type ReplyLseek = Reply<kind::Lseek>;

fn secs_and_nanos(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

fn entry_out(ttl: Duration, attr: &FileAttr, generation: u64) -> abi::fuse_entry_out {
    let (secs, nanos) = secs_and_nanos(ttl);
    abi::fuse_entry_out {
        nodeid: attr.ino,
        generation,
        entry_valid: secs,
        attr_valid: secs,
        entry_valid_nsec: nanos,
        attr_valid_nsec: nanos,
        attr: attr.to_kernel(),
    }
}

fn open_out(fh: u64, flags: u32, backing: Option<&BackingId>) -> abi::fuse_open_out {
    match backing {
        Some(id) => abi::fuse_open_out { fh, open_flags: flags | abi::FOPEN_PASSTHROUGH, backing_id: id.id() },
        None => abi::fuse_open_out { fh, open_flags: flags, backing_id: 0 },
    }
}

impl<K> Reply<K> {
    pub(crate) fn new(responder: Responder) -> Self {
        Reply { responder, kind: PhantomData }
    }

    /// Answers an error (an errno such as `libc::ENOENT`).
    pub fn error(mut self, errno: i32) {
        self.responder.send(errno, &[]);
    }

    fn send(mut self, parts: &[&[u8]]) {
        self.responder.send(0, parts);
    }

    /// Registers `file` with the kernel as a backing file for passthrough opens (needs
    /// CAP_SYS_ADMIN and the passthrough capability agreed at init).
    fn backing(&self, file: &std::fs::File) -> io::Result<BackingId> {
        self.responder.dev.open_backing(file)
    }
}

impl ReplyEmpty {
    pub fn ok(self) {
        self.send(&[]);
    }
}

impl ReplyEntry {
    /// The entry and attributes, each valid for `ttl`.
    pub fn entry(self, ttl: Duration, attr: &FileAttr, generation: u64) {
        self.send(&[entry_out(ttl, attr, generation).as_bytes()]);
    }
}

impl ReplyAttr {
    pub fn attr(self, ttl: Duration, attr: &FileAttr) {
        let (secs, nanos) = secs_and_nanos(ttl);
        let out = abi::fuse_attr_out { attr_valid: secs, attr_valid_nsec: nanos, dummy: 0, attr: attr.to_kernel() };
        self.send(&[out.as_bytes()]);
    }
}

impl ReplyOpen {
    /// `flags`: FOPEN_* bits.
    pub fn opened(self, fh: u64, flags: u32) {
        self.send(&[open_out(fh, flags, None).as_bytes()]);
    }

    /// Opened with the kernel reading and writing `backing`'s file itself.
    pub fn opened_passthrough(self, fh: u64, flags: u32, backing: &BackingId) {
        self.send(&[open_out(fh, flags, Some(backing)).as_bytes()]);
    }

    pub fn open_backing(&self, file: &std::fs::File) -> io::Result<BackingId> {
        self.backing(file)
    }
}

impl ReplyCreate {
    pub fn created(self, ttl: Duration, attr: &FileAttr, generation: u64, fh: u64, flags: u32) {
        self.send(&[entry_out(ttl, attr, generation).as_bytes(), open_out(fh, flags, None).as_bytes()]);
    }

    pub fn created_passthrough(self, ttl: Duration, attr: &FileAttr, generation: u64, fh: u64, flags: u32, backing: &BackingId) {
        self.send(&[entry_out(ttl, attr, generation).as_bytes(), open_out(fh, flags, Some(backing)).as_bytes()]);
    }

    pub fn open_backing(&self, file: &std::fs::File) -> io::Result<BackingId> {
        self.backing(file)
    }
}

impl ReplyData {
    pub fn data(self, bytes: &[u8]) {
        self.send(&[bytes]);
    }
}

impl ReplyWrite {
    pub fn written(self, size: u32) {
        self.send(&[abi::fuse_write_out { size, padding: 0 }.as_bytes()]);
    }
}

impl ReplyXattr {
    /// The size a caller that asked with size 0 needs.
    pub fn size(self, size: u32) {
        self.send(&[abi::fuse_getxattr_out { size, padding: 0 }.as_bytes()]);
    }

    pub fn data(self, bytes: &[u8]) {
        self.send(&[bytes]);
    }
}

impl ReplyStatfs {
    #[allow(clippy::too_many_arguments)]
    pub fn statfs(self, blocks: u64, bfree: u64, bavail: u64, files: u64, ffree: u64, bsize: u32, namelen: u32, frsize: u32) {
        let st = abi::fuse_kstatfs { blocks, bfree, bavail, files, ffree, bsize, namelen, frsize, padding: 0, spare: [0; 6] };
        self.send(&[abi::fuse_statfs_out { st }.as_bytes()]);
    }
}

impl ReplyLock {
    /// The lock in the way (or F_UNLCK for none).
    pub fn locked(self, start: u64, end: u64, typ: i32, pid: u32) {
        let lk = abi::fuse_file_lock { start, end, type_: typ as u32, pid };
        self.send(&[abi::fuse_lk_out { lk }.as_bytes()]);
    }
}

impl ReplyLseek {
    pub fn offset(self, offset: i64) {
        self.send(&[abi::fuse_lseek_out { offset: offset as u64 }.as_bytes()]);
    }
}

/// A readdir answer, filled entry by entry up to the size the kernel asked for.
pub struct ReplyDirectory {
    reply: ReplyData,
    buf: Vec<u8>,
    size: usize,
}

impl ReplyDirectory {
    pub(crate) fn new(responder: Responder, size: u32) -> Self {
        let size = size as usize;
        ReplyDirectory { reply: Reply::new(responder), buf: Vec::with_capacity(size), size }
    }

    /// Adds an entry; `offset` is where a next readdir continues after it. True when the
    /// entry did not fit (it was not added): send what there is.
    pub fn add(&mut self, ino: u64, offset: u64, kind: FileType, name: &std::ffi::OsStr) -> bool {
        add_dirent(&mut self.buf, self.size, None, ino, offset, kind, name)
    }

    pub fn ok(self) {
        self.reply.data(&self.buf);
    }

    pub fn error(self, errno: i32) {
        self.reply.error(errno);
    }
}

/// A READDIRPLUS answer: each entry with what a lookup of it would answer, or without
/// (the kernel then looks the name up when it needs it).
pub struct ReplyDirectoryPlus(ReplyDirectory);

impl ReplyDirectoryPlus {
    pub(crate) fn new(responder: Responder, size: u32) -> Self {
        ReplyDirectoryPlus(ReplyDirectory::new(responder, size))
    }

    /// Adds an entry as [`ReplyDirectory::add`] does, with `entry`: its attributes and how
    /// long the kernel may keep them and the name. An entry given counts as a lookup of
    /// `attr.ino` (a FORGET follows), unless the name is "." or "..". True when the entry did
    /// not fit (it was not added, and counts as nothing).
    pub fn add(&mut self, entry: Option<(Duration, &FileAttr)>, ino: u64, offset: u64, kind: FileType, name: &std::ffi::OsStr) -> bool {
        let entry = entry.map(|(ttl, attr)| entry_out(ttl, attr, 0)).unwrap_or_default();
        let ReplyDirectory { buf, size, .. } = &mut self.0;
        add_dirent(buf, *size, Some(&entry), ino, offset, kind, name)
    }

    pub fn ok(self) {
        self.0.ok();
    }

    pub fn error(self, errno: i32) {
        self.0.error(errno);
    }
}

/// Appends a `fuse_dirent` (behind `entry`, a `fuse_direntplus`) to `buf` if it fits in
/// `size`: false then; true when it does not (nothing appended).
fn add_dirent(
    buf: &mut Vec<u8>,
    size: usize,
    entry: Option<&abi::fuse_entry_out>,
    ino: u64,
    offset: u64,
    kind: FileType,
    name: &std::ffi::OsStr,
) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let name = name.as_bytes();
    let header = size_of::<abi::fuse_dirent>();
    let before = entry.map_or(0, |_| size_of::<abi::fuse_entry_out>());
    let padded = (before + header + name.len()).next_multiple_of(8);
    if buf.len() + padded > size {
        return true;
    }
    if let Some(entry) = entry {
        buf.extend_from_slice(entry.as_bytes());
    }
    let dirent = abi::fuse_dirent { ino, off: offset, namelen: name.len() as u32, type_: kind.mode_bits() >> 12, name: Default::default() };
    buf.extend_from_slice(&dirent.as_bytes()[..header]);
    buf.extend_from_slice(name);
    buf.resize(buf.len() + padded - before - header - name.len(), 0);
    false
}
