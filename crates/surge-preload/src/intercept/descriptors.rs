//! Calls on descriptors: served for the descriptors the library opened, handed to the kernel
//! first where the library does not serve the call (locks, `mmap`, allocation, ownership,
//! extended attributes, ...), passed through for every other descriptor.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::sync::Arc;

use libc::{off_t, size_t, ssize_t};

use super::{answered, set_errno, to_kernel, Failure, OnServed};
use surge_client::surge_proto::Attr;

use crate::descriptors::{self as table, Description, KEPT_STATUS};
use crate::files;
use crate::next;
use crate::process::{library, Inside};
use crate::report::Call;

/// # Safety
/// `buf` is valid for `len` bytes of writing (or `len` is 0).
unsafe fn out_slice<'a>(buf: *mut c_void, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's promise (the C function's contract).
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) }
}

/// # Safety
/// `buf` is valid for `len` bytes of reading (or `len` is 0).
unsafe fn in_slice<'a>(buf: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(buf.cast(), len) }
}

/// The buffers of an iovec array.
///
/// # Safety
/// `iov` points to `count` iovecs, each valid for its length.
unsafe fn vectors<'a>(iov: *const libc::iovec, count: c_int) -> Result<Vec<&'a mut [u8]>, c_int> {
    if !(0..=libc::UIO_MAXIOV).contains(&count) {
        return Err(libc::EINVAL);
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's promise.
    let iov = unsafe { std::slice::from_raw_parts(iov, count as usize) };
    // SAFETY: as above, for each buffer.
    Ok(iov.iter().map(|v| unsafe { out_slice(v.iov_base, v.iov_len) }).collect())
}

fn at(offset: off_t) -> Result<Option<u64>, c_int> {
    u64::try_from(offset).map(Some).map_err(|_| libc::EINVAL)
}

// ------------------------------------------------------------------ reads and writes

fn read_at(fd: c_int, buf: *mut c_void, count: size_t, offset: Option<off_t>) -> Option<ssize_t> {
    let served = OnServed::of(fd)?;
    Some(served.answer(Call::Read, |library, d| {
        let at = offset.map(at).transpose()?.flatten();
        // SAFETY: read(2)'s contract on `buf`.
        files::read(library, d, unsafe { out_slice(buf, count) }, at).map(|n| n as ssize_t)
    }))
}

fn write_at(fd: c_int, buf: *const c_void, count: size_t, offset: Option<off_t>) -> Option<ssize_t> {
    let served = OnServed::of(fd)?;
    Some(served.answer(Call::Write, |library, d| {
        let at = offset.map(at).transpose()?.flatten();
        // SAFETY: write(2)'s contract on `buf`.
        files::write(library, d, unsafe { in_slice(buf, count) }, at).map(|n| n as ssize_t)
    }))
}

/// # Safety
/// read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    read_at(fd, buf, count, None).unwrap_or_else(|| (next::READ.get())(fd, buf, count))
}

/// # Safety
/// The fortified read(2) (`_FORTIFY_SOURCE`): `buflen` is the buffer's size.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, count: size_t, buflen: size_t) -> ssize_t {
    if count > buflen {
        // The C library's own answer to an overflow: the same check, the same end.
        return (next::READ_CHK.get())(fd, buf, count, buflen);
    }
    read_at(fd, buf, count, None).unwrap_or_else(|| (next::READ_CHK.get())(fd, buf, count, buflen))
}

/// # Safety
/// write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    write_at(fd, buf, count, None).unwrap_or_else(|| (next::WRITE.get())(fd, buf, count))
}

/// # Safety
/// pread(2).
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t) -> ssize_t {
    read_at(fd, buf, count, Some(offset)).unwrap_or_else(|| (next::PREAD.get())(fd, buf, count, offset))
}

/// # Safety
/// pread(2).
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { pread64(fd, buf, count, offset) }
}

/// # Safety
/// The fortified pread(2).
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t, buflen: size_t) -> ssize_t {
    if count > buflen {
        return (next::PREAD_CHK.get())(fd, buf, count, offset, buflen);
    }
    read_at(fd, buf, count, Some(offset)).unwrap_or_else(|| (next::PREAD_CHK.get())(fd, buf, count, offset, buflen))
}

/// # Safety
/// The fortified pread(2).
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t, buflen: size_t) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { __pread64_chk(fd, buf, count, offset, buflen) }
}

/// # Safety
/// pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, count: size_t, offset: off_t) -> ssize_t {
    write_at(fd, buf, count, Some(offset)).unwrap_or_else(|| (next::PWRITE.get())(fd, buf, count, offset))
}

/// # Safety
/// pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, count: size_t, offset: off_t) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { pwrite64(fd, buf, count, offset) }
}

/// A vectored read: one read of the total into the buffers in order (one offset move).
fn readv_at(fd: c_int, iov: *const libc::iovec, count: c_int, offset: Option<off_t>) -> Option<ssize_t> {
    let served = OnServed::of(fd)?;
    Some(served.answer(Call::Read, |library, d| {
        // SAFETY: readv(2)'s contract.
        let buffers = unsafe { vectors(iov, count) }?;
        let mut whole = vec![0u8; buffers.iter().map(|b| b.len()).sum()];
        let at = offset.map(at).transpose()?.flatten();
        let n = files::read(library, d, &mut whole, at)?;
        let mut filled = &whole[..n];
        for buffer in buffers {
            let take = buffer.len().min(filled.len());
            buffer[..take].copy_from_slice(&filled[..take]);
            filled = &filled[take..];
        }
        Ok(n as ssize_t)
    }))
}

/// A vectored write: the buffers joined, one write (one offset move, as Linux's is atomic).
fn writev_at(fd: c_int, iov: *const libc::iovec, count: c_int, offset: Option<off_t>) -> Option<ssize_t> {
    let served = OnServed::of(fd)?;
    Some(served.answer(Call::Write, |library, d| {
        // SAFETY: writev(2)'s contract.
        let buffers = unsafe { vectors(iov, count) }?;
        let whole: Vec<u8> = buffers.concat();
        let at = offset.map(at).transpose()?.flatten();
        files::write(library, d, &whole, at).map(|n| n as ssize_t)
    }))
}

/// # Safety
/// readv(2).
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, count: c_int) -> ssize_t {
    readv_at(fd, iov, count, None).unwrap_or_else(|| (next::READV.get())(fd, iov, count))
}

/// # Safety
/// writev(2).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> ssize_t {
    writev_at(fd, iov, count, None).unwrap_or_else(|| (next::WRITEV.get())(fd, iov, count))
}

/// # Safety
/// preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t) -> ssize_t {
    readv_at(fd, iov, count, Some(offset)).unwrap_or_else(|| (next::PREADV.get())(fd, iov, count, offset))
}

/// # Safety
/// preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { preadv64(fd, iov, count, offset) }
}

/// # Safety
/// pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t) -> ssize_t {
    writev_at(fd, iov, count, Some(offset)).unwrap_or_else(|| (next::PWRITEV.get())(fd, iov, count, offset))
}

/// # Safety
/// pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { pwritev64(fd, iov, count, offset) }
}

/// With an offset of -1 these use the description's offset, as readv/writev.
fn v2_offset(offset: off_t) -> Option<off_t> {
    (offset != -1).then_some(offset)
}

/// # Safety
/// preadv2(2). Its flags are hints for a page cache the library does not have, except
/// RWF_NOWAIT, which the library cannot keep (it waits for servers): handed to the kernel.
#[no_mangle]
pub unsafe extern "C" fn preadv64v2(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t, flags: c_int) -> ssize_t {
    if flags & libc::RWF_NOWAIT == 0 {
        if let Some(n) = readv_at(fd, iov, count, v2_offset(offset)) {
            return n;
        }
    } else if !to_kernel(fd) {
        return -1;
    }
    (next::PREADV2.get())(fd, iov, count, offset, flags)
}

/// # Safety
/// preadv2(2).
#[no_mangle]
pub unsafe extern "C" fn preadv2(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t, flags: c_int) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { preadv64v2(fd, iov, count, offset, flags) }
}

/// # Safety
/// pwritev2(2). RWF_DSYNC and RWF_SYNC sync after the write; RWF_APPEND and RWF_NOWAIT are
/// the kernel's.
#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t, flags: c_int) -> ssize_t {
    let syncs = libc::RWF_DSYNC | libc::RWF_SYNC;
    if flags & !(syncs | libc::RWF_HIPRI) == 0 {
        if let Some(n) = writev_at(fd, iov, count, v2_offset(offset)) {
            if n >= 0 && flags & syncs != 0 && fsync(fd) != 0 {
                return -1;
            }
            return n;
        }
    } else if !to_kernel(fd) {
        return -1;
    }
    (next::PWRITEV2.get())(fd, iov, count, offset, flags)
}

/// # Safety
/// pwritev2(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev2(fd: c_int, iov: *const libc::iovec, count: c_int, offset: off_t, flags: c_int) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { pwritev64v2(fd, iov, count, offset, flags) }
}

// ------------------------------------------------------------------ offsets, sizes, syncs

#[no_mangle]
pub extern "C" fn lseek64(fd: c_int, offset: off_t, whence: c_int) -> off_t {
    match OnServed::of(fd) {
        Some(served) => served.answer(Call::Seek, |_, d| files::seek(d, offset, whence).map(|at| at as off_t)),
        None => (next::LSEEK.get())(fd, offset, whence),
    }
}

#[no_mangle]
pub extern "C" fn lseek(fd: c_int, offset: off_t, whence: c_int) -> off_t {
    lseek64(fd, offset, whence)
}

#[no_mangle]
pub extern "C" fn fsync(fd: c_int) -> c_int {
    match OnServed::of(fd) {
        Some(served) => served.answer(Call::Sync, |library, d| files::sync(library, d).map(|()| 0)),
        None => (next::FSYNC.get())(fd),
    }
}

#[no_mangle]
pub extern "C" fn fdatasync(fd: c_int) -> c_int {
    match OnServed::of(fd) {
        Some(served) => served.answer(Call::Sync, |library, d| files::sync(library, d).map(|()| 0)),
        None => (next::FDATASYNC.get())(fd),
    }
}

#[no_mangle]
pub extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    match OnServed::of(fd) {
        Some(served) => served.answer(Call::Truncate, |library, d| {
            let len = u64::try_from(len).map_err(|_| libc::EINVAL)?;
            files::truncate(library, d, len).map(|()| 0)
        }),
        None => (next::FTRUNCATE.get())(fd, len),
    }
}

#[no_mangle]
pub extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    ftruncate64(fd, len)
}

/// Advice for a page cache the library does not keep: taken, and nothing to do.
#[no_mangle]
pub extern "C" fn posix_fadvise64(fd: c_int, offset: off_t, len: off_t, advice: c_int) -> c_int {
    if table::served(fd).is_some() && !crate::process::inside() {
        return 0;
    }
    (next::POSIX_FADVISE.get())(fd, offset, len, advice)
}

#[no_mangle]
pub extern "C" fn posix_fadvise(fd: c_int, offset: off_t, len: off_t, advice: c_int) -> c_int {
    posix_fadvise64(fd, offset, len, advice)
}

// ------------------------------------------------------------------ stat

/// A stat of a served descriptor into `out`, in the form `convert` makes (`stat`'s or
/// `statx`'s); None for any other descriptor.
pub(super) fn stat_served<S>(fd: c_int, out: *mut S, convert: fn(&Attr, u64, u32) -> S) -> Option<c_int> {
    let served = OnServed::of(fd)?;
    Some(served.answer(Call::Stat, |library, d| {
        let attr = files::stat(library, d)?;
        // SAFETY: the stat call's contract on `out`.
        unsafe { out.write(convert(&attr, d.dev, d.client.chunk_size() as u32)) };
        Ok(0)
    }))
}

// ------------------------------------------------------------------ numbers

/// Closes a number of a served description; the description's last number publishes and
/// releases the file (its failure is close's, as through the mount).
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    if crate::process::inside() || table::served(fd).is_none() {
        return (next::CLOSE.get())(fd);
    }
    let Some(_inside) = Inside::enter() else { return (next::CLOSE.get())(fd) };
    let last = table::forget(fd);
    let closed = (next::CLOSE.get())(fd);
    match (last, library()) {
        (Some(description), Some(library)) => answered(Call::Close, || files::close(library, description).map(|()| closed)),
        _ => closed,
    }
}

/// close_range(2): served descriptors in the range are closed as by close.
#[no_mangle]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && table::any_served() && !crate::process::inside() {
        let first = first.min(c_int::MAX as c_uint) as c_int;
        let last = last.min(c_int::MAX as c_uint) as c_int;
        for fd in table::numbers().into_iter().filter(|fd| (first..=last).contains(fd)) {
            close(fd);
        }
    }
    (next::CLOSE_RANGE.get())(first, last, flags)
}

/// A new number of `d`, from `min`.
fn duplicate(d: &Arc<Description>, min: c_int, cloexec: bool) -> Result<c_int, c_int> {
    table::install(d.clone(), min, cloexec)
}

#[no_mangle]
pub extern "C" fn dup(fd: c_int) -> c_int {
    match OnServed::of(fd) {
        Some(served) => served.answer(Call::Dup, |_, d| duplicate(d, 0, false)),
        None => (next::DUP.get())(fd),
    }
}

/// dup2/dup3 onto `new`: the kernel moves the stand-in (or the other descriptor) there,
/// closing what `new` was; the table follows.
fn duplicate_onto(old: c_int, new: c_int, flags: c_int, dup3: bool) -> c_int {
    let replaced_served = table::served(new).is_some();
    let old_served = table::served(old);
    if crate::process::inside() || (old_served.is_none() && !replaced_served) {
        return if dup3 { (next::DUP3.get())(old, new, flags) } else { (next::DUP2.get())(old, new) };
    }
    let Some(_inside) = Inside::enter() else { return -1 };
    if old == new {
        // dup2 answers the number if it is open; dup3 refuses.
        return if dup3 {
            set_errno(libc::EINVAL);
            -1
        } else {
            new
        };
    }
    let moved = if dup3 { (next::DUP3.get())(old, new, flags) } else { (next::DUP2.get())(old, new) };
    if moved < 0 {
        return moved;
    }
    let last = if replaced_served { table::forget(new) } else { None };
    if let Some(d) = old_served {
        crate::report::count(Call::Dup);
        table::served_as(new, d);
    }
    if let (Some(description), Some(library)) = (last, library()) {
        // What `new` named is closed silently, as dup2 does.
        let _ = files::close(library, description);
    }
    moved
}

#[no_mangle]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    duplicate_onto(old, new, 0, false)
}

#[no_mangle]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    duplicate_onto(old, new, flags, true)
}

/// fcntl(2) (its third argument taken as one machine word: an int or a pointer).
#[no_mangle]
pub extern "C" fn fcntl64(fd: c_int, command: c_int, arg: c_ulong) -> c_int {
    let Some(served) = OnServed::of(fd) else { return (next::FCNTL.get())(fd, command, arg) };
    match command {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => served.answer(Call::Dup, |_, d| {
            let min = c_int::try_from(arg).map_err(|_| libc::EINVAL)?;
            duplicate(d, min, command == libc::F_DUPFD_CLOEXEC)
        }),
        // Descriptor flags live on the stand-in.
        libc::F_GETFD | libc::F_SETFD => (next::FCNTL.get())(fd, command, arg),
        // The kernel's O_LARGEFILE, which every descriptor on a 64-bit system reports.
        libc::F_GETFL => served.answer(Call::Fcntl, |_, d| Ok(d.status.load(std::sync::atomic::Ordering::Relaxed) | 0o100000)),
        libc::F_SETFL if arg as c_int & libc::O_ASYNC == 0 => served.answer(Call::Fcntl, |_, d| {
            let settable = libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME;
            let status = d.status.load(std::sync::atomic::Ordering::Relaxed);
            let status = (status & !settable) | (arg as c_int & settable & KEPT_STATUS);
            d.status.store(status, std::sync::atomic::Ordering::Relaxed);
            Ok(0)
        }),
        // Locks, leases, notifications, signals: the kernel's, through the mount.
        _ => {
            drop(served);
            if !to_kernel(fd) {
                return -1;
            }
            (next::FCNTL.get())(fd, command, arg)
        }
    }
}

#[no_mangle]
pub extern "C" fn fcntl(fd: c_int, command: c_int, arg: c_ulong) -> c_int {
    fcntl64(fd, command, arg)
}

/// ioctl(2) on a served descriptor: it is a regular file, which is no terminal (isatty asks
/// with TCGETS on every stdio and Python open), and which the mount cannot clone
/// (`cp --reflink=auto` asks, and copies when refused); any other request is the kernel's.
#[no_mangle]
pub extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if table::served(fd).is_some() && !crate::process::inside() {
        let answer = match request {
            r if r == libc::TCGETS as c_ulong => Some(libc::ENOTTY),
            r if r == libc::FICLONE as c_ulong || r == libc::FICLONERANGE as c_ulong => Some(libc::EOPNOTSUPP),
            _ => None,
        };
        if let Some(errno) = answer {
            set_errno(errno);
            return -1;
        }
    }
    if !to_kernel(fd) {
        return -1;
    }
    (next::IOCTL.get())(fd, request, arg)
}

/// mmap(2) of a served file: the kernel maps it through the mount (its page cache, which the
/// mount keeps exact).
#[no_mangle]
pub extern "C" fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, offset: off_t) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 && !to_kernel(fd) {
        return libc::MAP_FAILED;
    }
    (next::MMAP.get())(addr, len, prot, flags, fd, offset)
}

#[no_mangle]
pub extern "C" fn mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, offset: off_t) -> *mut c_void {
    mmap64(addr, len, prot, flags, fd, offset)
}

// ------------------------------------------------------------------ the kernel's, after hand-over

/// Calls the library does not serve: a served descriptor is handed to the kernel first, then
/// the C library's definition runs on it (on any other descriptor, at once).
macro_rules! kernel_after_hand_over {
    ($($(#[$doc:meta])* $name:ident => $next:ident($fd:ident: c_int $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub extern "C" fn $name($fd: c_int $(, $arg: $ty)*) -> $ret {
            if !to_kernel($fd) {
                return <$ret as Failure>::FAILED;
            }
            (next::$next.get())($fd $(, $arg)*)
        }
    )*};
}

kernel_after_hand_over! {
    lockf64 => LOCKF(fd: c_int, command: c_int, len: off_t) -> c_int;
    lockf => LOCKF(fd: c_int, command: c_int, len: off_t) -> c_int;
    fallocate64 => FALLOCATE(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int;
    fallocate => FALLOCATE(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int;
    fchown => FCHOWN(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    fchdir => FCHDIR(fd: c_int) -> c_int;
    futimes => FUTIMES(fd: c_int, times: *const libc::timeval) -> c_int;
    fstatfs64 => FSTATFS(fd: c_int, buf: *mut libc::statfs64) -> c_int;
    fstatfs => FSTATFS(fd: c_int, buf: *mut libc::statfs64) -> c_int;
    fstatvfs64 => FSTATVFS(fd: c_int, buf: *mut libc::statvfs64) -> c_int;
    fstatvfs => FSTATVFS(fd: c_int, buf: *mut libc::statvfs64) -> c_int;
    fgetxattr => FGETXATTR(fd: c_int, name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t;
    fsetxattr => FSETXATTR(fd: c_int, name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int;
    flistxattr => FLISTXATTR(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t;
    fremovexattr => FREMOVEXATTR(fd: c_int, name: *const c_char) -> c_int;
    sync_file_range => SYNC_FILE_RANGE(fd: c_int, offset: off_t, len: off_t, flags: c_uint) -> c_int;
    syncfs => SYNCFS(fd: c_int) -> c_int;
}

/// posix_fallocate answers its error instead of setting errno.
#[no_mangle]
pub extern "C" fn posix_fallocate64(fd: c_int, offset: off_t, len: off_t) -> c_int {
    if !to_kernel(fd) {
        return crate::descriptors::errno();
    }
    (next::POSIX_FALLOCATE.get())(fd, offset, len)
}

#[no_mangle]
pub extern "C" fn posix_fallocate(fd: c_int, offset: off_t, len: off_t) -> c_int {
    posix_fallocate64(fd, offset, len)
}

/// Copies up to `len` bytes from `fd_in` to `fd_out` through this process, where either is
/// served (the kernel cannot copy between a served descriptor and another): read, then written
/// whole, each at the offset given or at the descriptor's own. Answers the bytes copied.
fn copy_through_here(fd_in: c_int, off_in: *mut off_t, fd_out: c_int, off_out: *mut off_t, len: size_t) -> ssize_t {
    const MOST: usize = 8 << 20;
    let mut buffer = vec![0u8; len.min(MOST)];
    // SAFETY: the offsets are null or the caller's valid pointers (the C functions' contract).
    let (off_in, off_out) = unsafe { (off_in.as_mut(), off_out.as_mut()) };
    let got = match &off_in {
        // SAFETY: `buffer` is valid for its length.
        Some(at) => unsafe { pread64(fd_in, buffer.as_mut_ptr().cast(), buffer.len(), **at) },
        // SAFETY: as above.
        None => unsafe { read(fd_in, buffer.as_mut_ptr().cast(), buffer.len()) },
    };
    if got <= 0 {
        return got;
    }
    let got = got as usize;
    let mut put = 0;
    let mut at_out = off_out.as_ref().map(|at| **at);
    while put < got {
        let chunk = &buffer[put..got];
        let n = match at_out {
            // SAFETY: `chunk` is valid for its length.
            Some(at) => unsafe { pwrite64(fd_out, chunk.as_ptr().cast(), chunk.len(), at) },
            // SAFETY: as above.
            None => unsafe { write(fd_out, chunk.as_ptr().cast(), chunk.len()) },
        };
        if n <= 0 {
            break;
        }
        put += n as usize;
        at_out = at_out.map(|at| at + n as off_t);
    }
    if let (Some(out), Some(at)) = (off_out, at_out) {
        *out = at;
    }
    // What was read and not written is given back to the input.
    match off_in {
        Some(at) => *at += put as off_t,
        None if put < got => _ = lseek64(fd_in, put as off_t - got as off_t, libc::SEEK_CUR),
        None => {}
    }
    if put == 0 {
        return -1;
    }
    put as ssize_t
}

fn either_served(a: c_int, b: c_int) -> bool {
    !crate::process::inside() && (table::served(a).is_some() || table::served(b).is_some())
}

#[no_mangle]
pub extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off_t,
    fd_out: c_int,
    off_out: *mut off_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if either_served(fd_in, fd_out) {
        if flags != 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        return copy_through_here(fd_in, off_in, fd_out, off_out, len);
    }
    (next::COPY_FILE_RANGE.get())(fd_in, off_in, fd_out, off_out, len, flags)
}

#[no_mangle]
pub extern "C" fn sendfile64(out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    if either_served(in_fd, out_fd) {
        return copy_through_here(in_fd, offset, out_fd, std::ptr::null_mut(), count);
    }
    (next::SENDFILE.get())(out_fd, in_fd, offset, count)
}

#[no_mangle]
pub extern "C" fn sendfile(out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    sendfile64(out_fd, in_fd, offset, count)
}

#[no_mangle]
pub extern "C" fn splice(fd_in: c_int, off_in: *mut off_t, fd_out: c_int, off_out: *mut off_t, len: size_t, flags: c_uint) -> ssize_t {
    if !to_kernel(fd_in) || !to_kernel(fd_out) {
        return -1;
    }
    (next::SPLICE.get())(fd_in, off_in, fd_out, off_out, len, flags)
}

/// fdopen(3): the stream the C library makes reads and writes its descriptor by calls no
/// library can stand in front of, so a served descriptor is handed to the kernel first.
///
/// # Safety
/// fdopen(3).
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if !to_kernel(fd) {
        return std::ptr::null_mut();
    }
    (next::FDOPEN.get())(fd, mode)
}

/// vdprintf(3), as fdopen. (dprintf(3) is variadic and reaches the C library's internals
/// directly: on a served descriptor it fails with EBADF, see docs/preload.md.)
///
/// # Safety
/// vdprintf(3).
#[no_mangle]
pub unsafe extern "C" fn vdprintf(fd: c_int, format: *const c_char, args: *mut c_void) -> c_int {
    if !to_kernel(fd) {
        return -1;
    }
    (next::VDPRINTF.get())(fd, format, args)
}

/// One of futimens' two times: None for UTIME_OMIT.
fn time_of(t: &libc::timespec) -> Result<Option<surge_client::surge_proto::Timestamp>, c_int> {
    use surge_client::surge_proto::Timestamp;
    match t.tv_nsec {
        libc::UTIME_OMIT => Ok(None),
        libc::UTIME_NOW => Ok(Some(Timestamp::now())),
        nanos if (0..1_000_000_000).contains(&nanos) => Ok(Some(Timestamp { secs: t.tv_sec, nanos: nanos as u32 })),
        _ => Err(libc::EINVAL),
    }
}

/// futimens(2): served for the file's owner; anyone else's is the kernel's to decide.
#[no_mangle]
pub extern "C" fn futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    if let Some(served) = OnServed::of(fd).filter(|s| files::owner_may_change(&s.description, None)) {
        let now = libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW };
        // SAFETY: futimens(2)'s contract: null, or two timespecs.
        let (a, m) = if times.is_null() { (now, now) } else { unsafe { (*times, *times.add(1)) } };
        return served.answer(Call::SetAttr, |library, d| files::set_times(library, d, time_of(&a)?, time_of(&m)?).map(|()| 0));
    }
    if !to_kernel(fd) {
        return -1;
    }
    (next::FUTIMENS.get())(fd, times)
}

/// flock(2): a whole-file lock at the file's home (see [`files::flock`]).
#[no_mangle]
pub extern "C" fn flock(fd: c_int, operation: c_int) -> c_int {
    if let Some(served) = OnServed::of(fd) {
        return served.answer(Call::Flock, |library, d| files::flock(library, d, operation).map(|()| 0));
    }
    (next::FLOCK.get())(fd, operation)
}

/// fchmod(2): served for the file's owner (no set-id bits); anything else is the kernel's.
#[no_mangle]
pub extern "C" fn fchmod(fd: c_int, mode: libc::mode_t) -> c_int {
    if let Some(served) = OnServed::of(fd).filter(|s| files::owner_may_change(&s.description, Some(mode))) {
        return served.answer(Call::SetAttr, |library, d| files::set_mode(library, d, mode).map(|()| 0));
    }
    if !to_kernel(fd) {
        return -1;
    }
    (next::FCHMOD.get())(fd, mode)
}
