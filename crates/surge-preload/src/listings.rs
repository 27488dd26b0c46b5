//! Directory streams the library serves (`opendir`, `readdir`, `telldir`, ...): a directory on
//! a Surge mount that the process may read as its owner is listed from its home, a page of
//! names at a time in name order, `.` and `..` first. Each page is read when the one before is
//! used up, so a stream of a million names holds one page; names added or removed after
//! `opendir` may or may not appear, as POSIX allows.
//!
//! The `DIR` pointer the program gets is the address of the library's own stream. Every C
//! function taking a `DIR` asks [`ours`] first, so the C library never sees one of them, and
//! the library never touches one of the C library's. A directory the library does not serve
//! (another's, a symbolic link to follow, one off the Surge mounts) is opened by the C library
//! and read through the mount.

use std::collections::HashSet;
use std::ffi::{c_int, c_long, CString};
use std::sync::{Mutex, OnceLock};

use surge_client::surge_proto::FileKind;
use surge_client::Client;

use crate::attrs::type_bits;
use crate::paths::{owner_grants, Target};
use crate::process::Library;

/// Names fetched per request.
const PAGE: u32 = 4096;
const READ: u32 = 4;
const SEARCH: u32 = 1;

/// One served directory stream.
pub(crate) struct Stream {
    client: Client,
    ino: u64,
    parent: u64,
    /// The path it was opened by, made absolute (what `dirfd` opens through the kernel).
    path: CString,
    /// The entries of the current page: number, `d_type`, name.
    page: Vec<(u64, u8, String)>,
    /// Where in `page` the next entry is.
    next: usize,
    /// How many entries came before `page` (`telldir` counts from the stream's start).
    before: u64,
    /// Where the next page starts (after this name), and whether there is one.
    after: Option<String>,
    more: bool,
    /// What `readdir` returned last: valid until the next call on this stream.
    record: Box<libc::dirent64>,
    /// The directory opened by the kernel (`O_PATH`), once `dirfd` asked for a descriptor.
    kernel_fd: Option<c_int>,
}

/// The streams handed out, by address.
fn streams() -> &'static Mutex<HashSet<usize>> {
    static STREAMS: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    STREAMS.get_or_init(Default::default)
}

/// The stream behind `dir` if it is one of the library's.
pub(crate) fn ours(dir: *mut libc::DIR) -> Option<&'static Mutex<Stream>> {
    if dir.is_null() || !streams().lock().unwrap_or_else(|e| e.into_inner()).contains(&(dir as usize)) {
        return None;
    }
    // SAFETY: a registered address is a live `Mutex<Stream>` made by `open` and freed only by
    // `close`, which unregisters it first.
    Some(unsafe { &*(dir as *const Mutex<Stream>) })
}

/// opendir(3) of `target`: a stream, or None when the C library is to open it.
pub(crate) fn open(library: &Library, target: &Target) -> Result<Option<*mut libc::DIR>, c_int> {
    if !owner_grants(target.dir.uid, target.dir.mode, SEARCH) {
        return Ok(None);
    }
    let Some(instance) = library.instance(&target.mount) else { return Ok(None) };
    let attr = library.run_settled(instance.client.lookup(target.dir_ino(), &target.name)).map_err(|e| e.errno())?;
    match attr.kind {
        FileKind::Dir if owner_grants(attr.uid, attr.mode, READ) => {}
        FileKind::Dir | FileKind::Symlink => return Ok(None),
        _ => return Err(libc::ENOTDIR),
    }
    let mut stream = Stream {
        client: instance.client.clone(),
        ino: attr.ino,
        parent: target.dir_ino(),
        path: target.absolute.clone(),
        page: Vec::new(),
        next: 0,
        before: 0,
        after: None,
        more: true,
        // SAFETY: a zeroed dirent64 is a valid record.
        record: Box::new(unsafe { std::mem::zeroed() }),
        kernel_fd: None,
    };
    stream.rewind();
    let dir = Box::into_raw(Box::new(Mutex::new(stream))) as *mut libc::DIR;
    streams().lock().unwrap_or_else(|e| e.into_inner()).insert(dir as usize);
    Ok(Some(dir))
}

/// closedir(3) of one of the library's streams.
pub(crate) fn close(dir: *mut libc::DIR) -> c_int {
    if !streams().lock().unwrap_or_else(|e| e.into_inner()).remove(&(dir as usize)) {
        return -1;
    }
    // SAFETY: made by `open` with Box::into_raw, just unregistered: nobody else reaches it.
    let stream = unsafe { Box::from_raw(dir as *mut Mutex<Stream>) };
    let stream = stream.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(fd) = stream.kernel_fd {
        // SAFETY: a descriptor this stream opened and owns.
        unsafe { libc::close(fd) };
    }
    0
}

/// The `d_type` of a kind: its mode's type bits moved down, as the C library's `IFTODT` does.
fn d_type(kind: FileKind) -> u8 {
    (type_bits(kind) >> 12) as u8
}

impl Stream {
    /// Back to the start: `.` and `..`, then the first page when they are read.
    pub(crate) fn rewind(&mut self) {
        self.page = vec![(self.ino, libc::DT_DIR, ".".into()), (self.parent, libc::DT_DIR, "..".into())];
        (self.next, self.before, self.after, self.more) = (0, 0, None, true);
    }

    /// readdir(3): the next entry, None at the end.
    pub(crate) fn read(&mut self, library: &Library) -> Result<Option<&libc::dirent64>, c_int> {
        while self.next == self.page.len() {
            if !self.more || !self.fetch(library)? {
                return Ok(None);
            }
        }
        let (ino, kind, name) = &self.page[self.next];
        self.next += 1;
        let record = &mut *self.record;
        record.d_ino = *ino;
        record.d_off = (self.before + self.next as u64) as i64;
        record.d_reclen = size_of::<libc::dirent64>() as u16;
        record.d_type = *kind;
        let bytes = name.as_bytes();
        let len = bytes.len().min(record.d_name.len() - 1);
        for (to, from) in record.d_name.iter_mut().zip(&bytes[..len]) {
            *to = *from as libc::c_char;
        }
        record.d_name[len] = 0;
        Ok(Some(&*self.record))
    }

    /// The next page in place of the current one; false when the directory had no more.
    fn fetch(&mut self, library: &Library) -> Result<bool, c_int> {
        let got = library.run_settled(self.client.readdir_names_page(self.ino, self.after.clone(), PAGE)).map_err(|e| e.errno())?;
        self.before += self.page.len() as u64;
        self.more = got.more;
        self.after = got.entries.last().map(|e| e.name.clone()).or(self.after.take());
        self.page = got.entries.into_iter().map(|e| (e.ino, d_type(e.kind), e.name)).collect();
        self.next = 0;
        Ok(!self.page.is_empty())
    }

    /// telldir(3): the number of entries read since the start.
    pub(crate) fn tell(&self) -> c_long {
        (self.before + self.next as u64) as c_long
    }

    /// seekdir(3) to a position `tell` gave: within the current page at once, otherwise read
    /// again from the start up to it.
    pub(crate) fn seek(&mut self, library: &Library, position: c_long) {
        let position = position.max(0) as u64;
        if position < self.before {
            self.rewind();
        }
        while position > self.before + self.page.len() as u64 {
            if !self.more || !matches!(self.fetch(library), Ok(true)) {
                break;
            }
        }
        self.next = (position.saturating_sub(self.before) as usize).min(self.page.len());
    }

    /// dirfd(3): the directory opened through the kernel (once, kept until closedir), as an
    /// `O_PATH` descriptor: for `fstatat`, `openat` and `fchdir`, not for reading.
    pub(crate) fn descriptor(&mut self) -> c_int {
        if let Some(fd) = self.kernel_fd {
            return fd;
        }
        // O_PATH: what `dirfd` is for is the `*at` calls and `fchdir`, and such an open asks
        // nothing of the mount (a full open would have it list the directory, and hold its
        // names, which keeps the directory from this process's delegations).
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let fd = (crate::next::OPENAT.get())(libc::AT_FDCWD, self.path.as_ptr(), flags, 0);
        if fd >= 0 {
            self.kernel_fd = Some(fd);
        }
        fd
    }
}
