//! The descriptors the library serves, and how one is handed to the kernel.
//!
//! A file opened here gets a real descriptor number all the same: a *stand-in*, an `O_PATH`
//! descriptor of `/dev/null` duplicated to the lowest free number (as open(2) would pick), so
//! the number is the program's alone, `F_GETFD`/`F_SETFD` work on it, and a call the library
//! does not intercept fails loudly (`EBADF` for a read or write on an `O_PATH` descriptor)
//! instead of reaching some other file. The table maps each number to its open file
//! description ([`Description`]: the Surge file handle, the offset, the status flags), shared
//! by `dup`s as the kernel shares one.
//!
//! **Handing to the kernel** ([`hand_to_kernel`]) turns a served descriptor into an ordinary
//! one on the Surge mount: the handle's writes are waited for and published, the file is
//! opened through the mount by the path it was opened by (its inode checked), placed at the
//! same offset, and duplicated onto every number of the description. It happens where the
//! library cannot serve (`mmap`, locks, a call it does not know) and before `fork`, `exec`
//! and `posix_spawn`, so that parent and child share one offset and a new program finds
//! ordinary descriptors. The mount then serves them, with the same bytes and metadata.

use std::collections::HashMap;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use surge_client::File;

use crate::next;
use crate::process::library;

/// Status flags a description keeps (those `F_SETFL` may change among them).
pub(crate) const KEPT_STATUS: c_int = libc::O_APPEND | libc::O_NONBLOCK | libc::O_SYNC | libc::O_DSYNC | libc::O_DIRECT | libc::O_NOATIME;

/// One open file description served here.
pub(crate) struct Description {
    pub file: File,
    pub client: surge_client::Client,
    /// Its instance's `stat` cache, told of what this description changes.
    pub cache: Arc<crate::cache::Cache>,
    /// The file's absolute path as opened (to hand it to the kernel).
    pub path: CString,
    /// The mount's device (reported by `stat`).
    pub dev: u64,
    /// The offset; held across a read or write so that each moves it whole, as Linux does.
    pub position: Mutex<u64>,
    /// Access mode and status flags (`F_GETFL`).
    pub status: AtomicI32,
    /// The flock(2) lock it holds at the file's home: `LOCK_SH`, `LOCK_EX`, or 0.
    pub flocked: AtomicI32,
}

impl Description {
    pub(crate) fn access(&self) -> c_int {
        self.status.load(Ordering::Relaxed) & libc::O_ACCMODE
    }

    pub(crate) fn readable(&self) -> bool {
        self.access() != libc::O_WRONLY
    }

    pub(crate) fn writable(&self) -> bool {
        self.access() != libc::O_RDONLY
    }

    pub(crate) fn has(&self, flag: c_int) -> bool {
        self.status.load(Ordering::Relaxed) & flag != 0
    }
}

struct Table {
    /// How many numbers are served: a call on any descriptor checks it first.
    count: AtomicUsize,
    map: LazyLock<RwLock<HashMap<c_int, Arc<Description>>>>,
}

static TABLE: Table = Table { count: AtomicUsize::new(0), map: LazyLock::new(Default::default) };

fn map_read() -> std::sync::RwLockReadGuard<'static, HashMap<c_int, Arc<Description>>> {
    TABLE.map.read().unwrap_or_else(|e| e.into_inner())
}

fn map_write() -> std::sync::RwLockWriteGuard<'static, HashMap<c_int, Arc<Description>>> {
    TABLE.map.write().unwrap_or_else(|e| e.into_inner())
}

/// The description served under `fd`, if any.
pub(crate) fn served(fd: c_int) -> Option<Arc<Description>> {
    if TABLE.count.load(Ordering::Acquire) == 0 {
        return None;
    }
    map_read().get(&fd).cloned()
}

/// Every number served.
pub(crate) fn numbers() -> Vec<c_int> {
    map_read().keys().copied().collect()
}

/// Whether any descriptor is served (nothing to hand over otherwise).
pub(crate) fn any_served() -> bool {
    TABLE.count.load(Ordering::Acquire) > 0
}

/// A new number for `description`: its stand-in, the lowest free number (at least `min`),
/// close-on-exec if asked.
pub(crate) fn install(description: Arc<Description>, min: c_int, cloexec: bool) -> Result<c_int, c_int> {
    let stand_in = stand_in(min, cloexec)?;
    served_as(stand_in, description);
    Ok(stand_in)
}

/// Records `fd` (already a stand-in) as a number of `description`. Standard input, output
/// and error are never served: the C library's stdio reads and writes them by calls no
/// library can stand in front of, so a description that lands there (`prog > file` in a
/// shell is an open and a dup2 onto 1) is handed to the kernel at once.
pub(crate) fn served_as(fd: c_int, description: Arc<Description>) {
    {
        let mut map = map_write();
        if map.insert(fd, description).is_none() {
            TABLE.count.fetch_add(1, Ordering::AcqRel);
        }
    }
    if (0..=2).contains(&fd) {
        let _ = hand_to_kernel(fd);
    }
}

/// Forgets number `fd` (its stand-in is closed or replaced by the caller). Answers the
/// description if this was its last number.
pub(crate) fn forget(fd: c_int) -> Option<Arc<Description>> {
    let mut map = map_write();
    let description = map.remove(&fd)?;
    TABLE.count.fetch_sub(1, Ordering::AcqRel);
    let still_named = map.values().any(|d| Arc::ptr_eq(d, &description));
    (!still_named).then_some(description)
}

/// The descriptions open on inode `ino` (one process sees its own writes through any of them).
pub(crate) fn of_ino(ino: u64) -> Vec<Arc<Description>> {
    if !any_served() {
        return Vec::new();
    }
    distinct(map_read().values().filter(|d| d.file.ino() == ino).cloned())
}

/// Each description once, however many numbers name it.
fn distinct(descriptions: impl Iterator<Item = Arc<Description>>) -> Vec<Arc<Description>> {
    let mut unique: Vec<Arc<Description>> = Vec::new();
    for d in descriptions {
        if !unique.iter().any(|u| Arc::ptr_eq(u, &d)) {
            unique.push(d);
        }
    }
    unique
}

/// Takes every number out of the table.
fn drain() -> Vec<(c_int, Arc<Description>)> {
    let taken = map_write().drain().collect();
    TABLE.count.store(0, Ordering::Release);
    taken
}

/// Puts the kernel's descriptor `kernel` at `number` in place of the stand-in there, keeping
/// the number's close-on-exec flag.
fn put_in_place(kernel: c_int, number: c_int) {
    let cloexec = (next::FCNTL.get())(number, libc::F_GETFD, 0) & libc::FD_CLOEXEC != 0;
    (next::DUP3.get())(kernel, number, if cloexec { libc::O_CLOEXEC } else { 0 });
}

/// An `O_PATH` descriptor of /dev/null at the lowest free number from `min`.
fn stand_in(min: c_int, cloexec: bool) -> Result<c_int, c_int> {
    static NULL: AtomicI32 = AtomicI32::new(-1);
    let mut null = NULL.load(Ordering::Relaxed);
    if null < 0 {
        // The template itself sits high, out of the numbers programs count on.
        let opened = (next::OPEN.get())(c"/dev/null".as_ptr(), libc::O_PATH | libc::O_CLOEXEC, 0);
        if opened < 0 {
            return Err(errno());
        }
        let high = (next::FCNTL.get())(opened, libc::F_DUPFD_CLOEXEC, 1000);
        (next::CLOSE.get())(opened);
        if high < 0 {
            return Err(errno());
        }
        null = match NULL.compare_exchange(-1, high, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => high,
            Err(other) => {
                (next::CLOSE.get())(high);
                other
            }
        };
    }
    let command = if cloexec { libc::F_DUPFD_CLOEXEC } else { libc::F_DUPFD };
    let fd = (next::FCNTL.get())(null, command, min as libc::c_ulong);
    if fd < 0 {
        return Err(errno());
    }
    Ok(fd)
}

pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Turns every number of `fd`'s description into an ordinary descriptor of the file on the
/// mount (see the module's words). On failure nothing changed and the errno is answered.
pub(crate) fn hand_to_kernel(fd: c_int) -> Result<(), c_int> {
    let Some(description) = served(fd) else { return Ok(()) };
    let Some(library) = library() else { return Err(libc::EIO) };
    crate::report::count(crate::report::Call::HandedToKernel);
    // No read or write through the description meanwhile.
    let position = description.position.lock().unwrap_or_else(|e| e.into_inner());
    library.run(description.file.flush()).map_err(|e| e.errno())?;
    let kernel = reopen(&description, *position)?;
    let numbers: Vec<c_int> = map_read().iter().filter(|(_, d)| Arc::ptr_eq(d, &description)).map(|(fd, _)| *fd).collect();
    for &number in &numbers {
        put_in_place(kernel, number);
        forget(number);
    }
    (next::CLOSE.get())(kernel);
    drop(position);
    // A flock held here is taken again through the kernel (ours given back first: the two
    // owners would exclude each other), on the description the numbers now share.
    let flocked = description.flocked.swap(0, Ordering::Relaxed);
    if flocked != 0 {
        let _ = crate::files::unlock(library, &description);
        if let Some(&number) = numbers.first() {
            (next::FLOCK.get())(number, flocked);
        }
    }
    // The kernel holds its own handle now, through the mount.
    let _ = library.run(description.file.release());
    Ok(())
}

/// The description's file opened through the mount, at `position`.
fn reopen(description: &Description, position: u64) -> Result<c_int, c_int> {
    let status = description.status.load(Ordering::Relaxed) & (libc::O_ACCMODE | KEPT_STATUS);
    let kernel = (next::OPEN.get())(description.path.as_ptr(), status | libc::O_CLOEXEC | libc::O_NOFOLLOW, 0);
    if kernel < 0 {
        return Err(errno());
    }
    // SAFETY: a zeroed stat is a valid out-buffer for fstatat.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    let same = (next::FSTATAT.get())(kernel, c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH) == 0 && st.st_ino == description.file.ino();
    if !same || (next::LSEEK.get())(kernel, position as libc::off_t, libc::SEEK_SET) < 0 {
        (next::CLOSE.get())(kernel);
        // Renamed or removed since it was opened: its path names another file now.
        return Err(libc::ESTALE);
    }
    Ok(kernel)
}

/// Hands every served descriptor to the kernel (before fork, exec and spawn). One that
/// cannot be handed over stays served here (and does not reach the other process whole).
pub(crate) fn hand_all_to_kernel() {
    if !any_served() {
        return;
    }
    for fd in numbers() {
        let _ = hand_to_kernel(fd);
    }
}

/// In a child of fork: descriptors opened by another thread of the parent after its
/// descriptors were handed over (a race the handler cannot close) are opened through the
/// mount here, at the offset the parent had; the parent's handles stay the parent's.
pub(crate) fn after_fork_in_child() {
    if !any_served() {
        return;
    }
    for (fd, description) in drain() {
        let position = *description.position.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(kernel) = reopen(&description, position) {
            put_in_place(kernel, fd);
            (next::CLOSE.get())(kernel);
        }
        // The handle belongs to the parent's connections: never released from here.
        std::mem::forget(description);
    }
}

/// Every description (for the end of the process).
pub(crate) fn take_all() -> Vec<Arc<Description>> {
    distinct(drain().into_iter().map(|(_, d)| d))
}
