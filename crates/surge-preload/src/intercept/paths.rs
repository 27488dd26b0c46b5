//! Calls on paths: `open` and its relatives, and the `stat` family. The library serves the
//! last name of a path whose directory the kernel resolved onto a Surge mount (see
//! [`crate::paths`]); everything else, and what the library leaves to the kernel (see
//! [`crate::files`]), goes to the C library's definition unchanged.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::Arc;

use libc::mode_t;
use surge_client::surge_proto::Attr;

use super::descriptors::stat_served;
use super::{settled, OnPath};
use crate::attrs::{to_stat, to_statx};
use crate::descriptors::{self as table, Description};
use crate::files;
use crate::next;
use crate::report::{self, Call};

/// openat(2), served where it can be.
///
/// # Safety
/// `path` is null or NUL-terminated.
unsafe fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's promise.
    if let Some(on) = unsafe { OnPath::of(dirfd, path) } {
        let numbered = files::open(on.library, &on.target, flags, mode).and_then(|opened| {
            let number = |description: Arc<Description>| {
                table::install(description.clone(), 0, flags & libc::O_CLOEXEC != 0).inspect_err(|_| {
                    let _ = files::close(on.library, description);
                })
            };
            opened.map(number).transpose()
        });
        match settled(Call::Open, numbered) {
            Some(fd) => return fd,
            None => report::count(Call::OpenedByKernel),
        }
    }
    (next::OPENAT.get())(dirfd, path, flags, mode)
}

/// # Safety
/// open(2) (the mode is read only with O_CREAT or O_TMPFILE, as the C library does).
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

/// # Safety
/// open(2).
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

/// # Safety
/// openat(2).
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(dirfd, path, flags, mode) }
}

/// # Safety
/// openat(2).
#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(dirfd, path, flags, mode) }
}

/// # Safety
/// The fortified open(2) (`_FORTIFY_SOURCE`, flags not known at compile time; no O_CREAT).
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}

/// # Safety
/// As `__open_2`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}

/// # Safety
/// The fortified openat(2).
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(dirfd, path, flags, 0) }
}

/// # Safety
/// As `__openat_2`.
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(dirfd, path, flags, 0) }
}

/// # Safety
/// creat(2).
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { open_at(libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

/// # Safety
/// creat(2).
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { creat(path, mode) }
}

// ------------------------------------------------------------------ stat

fn is_empty(path: *const c_char) -> bool {
    // SAFETY: a non-null path is NUL-terminated (the caller's contract); one byte is read.
    path.is_null() || unsafe { *path == 0 }
}

/// A stat of `path` (relative to `dirfd`; with AT_EMPTY_PATH and an empty path, of `dirfd`
/// itself) into `out`, in the form `convert` makes (`stat`'s or `statx`'s); None when the
/// kernel is to answer.
///
/// # Safety
/// `path` is null or NUL-terminated; `out` is valid for writing.
unsafe fn stat_into<S>(dirfd: c_int, path: *const c_char, flags: c_int, out: *mut S, convert: fn(&Attr, u64, u32) -> S) -> Option<c_int> {
    if flags & libc::AT_EMPTY_PATH != 0 && is_empty(path) {
        return stat_served(dirfd, out, convert);
    }
    // SAFETY: the caller's promise.
    let on = unsafe { OnPath::of(dirfd, path) }?;
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    let written = files::stat_name(on.library, &on.target, follow).map(|found| {
        found.map(|(attr, blksize)| {
            // SAFETY: the caller's promise.
            unsafe { out.write(convert(&attr, on.target.mount.dev, blksize)) };
            0
        })
    });
    settled(Call::Stat, written)
}

/// fstatat(2), served where it can be.
///
/// # Safety
/// `path` is null or NUL-terminated; `out` is valid for writing.
unsafe fn stat_at(dirfd: c_int, path: *const c_char, out: *mut libc::stat64, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_into(dirfd, path, flags, out, to_stat) }.unwrap_or_else(|| (next::FSTATAT.get())(dirfd, path, out, flags))
}

/// # Safety
/// fstatat(2).
#[no_mangle]
pub unsafe extern "C" fn fstatat64(dirfd: c_int, path: *const c_char, out: *mut libc::stat64, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// # Safety
/// fstatat(2).
#[no_mangle]
pub unsafe extern "C" fn fstatat(dirfd: c_int, path: *const c_char, out: *mut libc::stat64, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// # Safety
/// stat(2).
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// # Safety
/// stat(2).
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// # Safety
/// lstat(2).
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// # Safety
/// lstat(2).
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// # Safety
/// fstat(2).
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(fd, c"".as_ptr(), out, libc::AT_EMPTY_PATH) }
}

/// # Safety
/// fstat(2).
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { fstat64(fd, out) }
}

// The C library's versioned entry points of before glibc 2.33, which programs built then still
// call (`ver` is the structure's version; there is one on 64-bit Linux).

/// # Safety
/// stat(2).
#[no_mangle]
pub unsafe extern "C" fn __xstat(_ver: c_int, path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// # Safety
/// stat(2).
#[no_mangle]
pub unsafe extern "C" fn __xstat64(_ver: c_int, path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}

/// # Safety
/// lstat(2).
#[no_mangle]
pub unsafe extern "C" fn __lxstat(_ver: c_int, path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// # Safety
/// lstat(2).
#[no_mangle]
pub unsafe extern "C" fn __lxstat64(_ver: c_int, path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}

/// # Safety
/// fstat(2).
#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { fstat64(fd, out) }
}

/// # Safety
/// fstat(2).
#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_ver: c_int, fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same contract.
    unsafe { fstat64(fd, out) }
}

/// # Safety
/// fstatat(2).
#[no_mangle]
pub unsafe extern "C" fn __fxstatat(_ver: c_int, dirfd: c_int, path: *const c_char, out: *mut libc::stat64, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// # Safety
/// fstatat(2).
#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(_ver: c_int, dirfd: c_int, path: *const c_char, out: *mut libc::stat64, flags: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_at(dirfd, path, out, flags) }
}

/// # Safety
/// statx(2).
#[no_mangle]
pub unsafe extern "C" fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, out: *mut libc::statx) -> c_int {
    // SAFETY: the same contract.
    unsafe { stat_into(dirfd, path, flags, out, to_statx) }.unwrap_or_else(|| (next::STATX.get())(dirfd, path, flags, mask, out))
}

/// umask(2): the library creates files with the process's umask, so it follows each change.
#[no_mangle]
pub extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = (next::UMASK.get())(mask);
    if let Some(library) = crate::process::current() {
        library.set_umask(mask);
    }
    old
}

// ------------------------------------------------------------------ names

/// A change of one name that the library may serve.
type NameChange = fn(&crate::process::Library, &crate::paths::Target) -> files::Answer<()>;

/// Serves a change of the name `path` (relative to `dirfd`) by `change`, or lets the C
/// library's definition (`kernel`) make it.
///
/// # Safety
/// `path` is null or NUL-terminated.
unsafe fn change_name(
    call: Call,
    dirfd: c_int,
    path: *const c_char,
    change: impl FnOnce(&crate::process::Library, &crate::paths::Target) -> files::Answer<()>,
    kernel: impl FnOnce() -> c_int,
) -> c_int {
    let on = match call {
        // SAFETY: the caller's promise.
        Call::Mkdir | Call::Rmdir => unsafe { OnPath::of_directory(dirfd, path) },
        // SAFETY: the caller's promise.
        _ => unsafe { OnPath::of(dirfd, path) },
    };
    let served = on.and_then(|on| settled(call, change(on.library, &on.target).map(|done| done.map(|()| 0))));
    served.unwrap_or_else(kernel)
}

/// # Safety
/// unlink(2).
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: the same contract.
    unsafe { change_name(Call::Unlink, libc::AT_FDCWD, path, files::unlink, || (next::UNLINK.get())(path)) }
}

/// # Safety
/// rmdir(2).
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: the same contract.
    unsafe { change_name(Call::Rmdir, libc::AT_FDCWD, path, files::rmdir, || (next::RMDIR.get())(path)) }
}

/// # Safety
/// unlinkat(2), with AT_REMOVEDIR an rmdir.
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let kernel = || (next::UNLINKAT.get())(dirfd, path, flags);
    if flags & !libc::AT_REMOVEDIR != 0 {
        return kernel();
    }
    let (call, change): (Call, NameChange) =
        if flags & libc::AT_REMOVEDIR != 0 { (Call::Rmdir, files::rmdir) } else { (Call::Unlink, files::unlink) };
    // SAFETY: the same contract.
    unsafe { change_name(call, dirfd, path, change, kernel) }
}

/// # Safety
/// mkdir(2).
#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { change_name(Call::Mkdir, libc::AT_FDCWD, path, |l, t| files::mkdir(l, t, mode), || (next::MKDIR.get())(path, mode)) }
}

/// # Safety
/// mkdirat(2).
#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the same contract.
    unsafe { change_name(Call::Mkdir, dirfd, path, |l, t| files::mkdir(l, t, mode), || (next::MKDIRAT.get())(dirfd, path, mode)) }
}
