//! Directory streams: `opendir` of a directory the library serves makes one of its own streams
//! ([`crate::listings`]); every other function taking a `DIR` serves the library's streams and
//! passes the C library's to it unchanged.

use std::ffi::{c_char, c_int, c_long};

use super::{answered, set_errno, settled, OnPath};
use crate::listings::{self, ours};
use crate::next;
use crate::process::{library, Inside};
use crate::report::Call;

/// # Safety
/// opendir(3).
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    // SAFETY: the caller's promise.
    if let Some(on) = unsafe { OnPath::of_directory(libc::AT_FDCWD, path) } {
        if let Some(dir) = settled(Call::Opendir, listings::open(on.library, &on.target)) {
            return dir;
        }
    }
    (next::OPENDIR.get())(path)
}

/// The next entry of one of the library's streams (null at the end, or with errno set on a
/// failure), or None for the C library's.
fn read_ours(dir: *mut libc::DIR) -> Option<*mut libc::dirent64> {
    let stream = ours(dir)?;
    let _inside = Inside::enter();
    let library = library()?;
    let mut stream = stream.lock().unwrap_or_else(|e| e.into_inner());
    Some(answered(Call::Readdir, || Ok(stream.read(library)?.map_or(std::ptr::null_mut(), |r| r as *const _ as *mut _))))
}

/// # Safety
/// readdir(3).
#[no_mangle]
pub unsafe extern "C" fn readdir64(dir: *mut libc::DIR) -> *mut libc::dirent64 {
    read_ours(dir).unwrap_or_else(|| (next::READDIR64.get())(dir))
}

/// # Safety
/// readdir(3) (`struct dirent` and `struct dirent64` are one layout on the ABIs this library
/// is built for).
#[no_mangle]
pub unsafe extern "C" fn readdir(dir: *mut libc::DIR) -> *mut libc::dirent {
    const _: () = assert!(size_of::<libc::dirent>() == size_of::<libc::dirent64>());
    match read_ours(dir) {
        Some(record) => record.cast(),
        None => (next::READDIR.get())(dir),
    }
}

/// readdir_r(3) into the caller's `entry`.
///
/// # Safety
/// `entry` and `result` are valid for writing.
unsafe fn read_into(dir: *mut libc::DIR, entry: *mut libc::dirent64, result: *mut *mut libc::dirent64) -> Option<c_int> {
    ours(dir)?;
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = 0 };
    let record = read_ours(dir)?;
    if record.is_null() {
        // SAFETY: errno is this thread's.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: `result` is valid for writing (the caller's promise).
        unsafe { *result = std::ptr::null_mut() };
        return Some(errno);
    }
    // SAFETY: `record` is the stream's live record; `entry` and `result` are the caller's.
    unsafe {
        entry.write(record.read());
        *result = entry;
    }
    Some(0)
}

/// # Safety
/// readdir_r(3).
#[no_mangle]
pub unsafe extern "C" fn readdir64_r(dir: *mut libc::DIR, entry: *mut libc::dirent64, result: *mut *mut libc::dirent64) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { read_into(dir, entry, result) }.unwrap_or_else(|| (next::READDIR64_R.get())(dir, entry, result))
}

/// # Safety
/// readdir_r(3).
#[no_mangle]
pub unsafe extern "C" fn readdir_r(dir: *mut libc::DIR, entry: *mut libc::dirent, result: *mut *mut libc::dirent) -> c_int {
    // SAFETY: the caller's promise; the two records are one layout (see `readdir`).
    unsafe { read_into(dir, entry.cast(), result.cast()) }.unwrap_or_else(|| (next::READDIR_R.get())(dir, entry, result))
}

/// # Safety
/// closedir(3).
#[no_mangle]
pub unsafe extern "C" fn closedir(dir: *mut libc::DIR) -> c_int {
    if ours(dir).is_some() {
        return listings::close(dir);
    }
    (next::CLOSEDIR.get())(dir)
}

/// # Safety
/// dirfd(3): for one of the library's streams, the directory opened through the kernel.
#[no_mangle]
pub unsafe extern "C" fn dirfd(dir: *mut libc::DIR) -> c_int {
    match ours(dir) {
        Some(stream) => {
            let _inside = Inside::enter();
            let fd = stream.lock().unwrap_or_else(|e| e.into_inner()).descriptor();
            if fd < 0 {
                set_errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            fd
        }
        None => (next::DIRFD.get())(dir),
    }
}

/// # Safety
/// rewinddir(3).
#[no_mangle]
pub unsafe extern "C" fn rewinddir(dir: *mut libc::DIR) {
    match ours(dir) {
        Some(stream) => stream.lock().unwrap_or_else(|e| e.into_inner()).rewind(),
        None => (next::REWINDDIR.get())(dir),
    }
}

/// # Safety
/// telldir(3).
#[no_mangle]
pub unsafe extern "C" fn telldir(dir: *mut libc::DIR) -> c_long {
    match ours(dir) {
        Some(stream) => stream.lock().unwrap_or_else(|e| e.into_inner()).tell(),
        None => (next::TELLDIR.get())(dir),
    }
}

/// # Safety
/// seekdir(3).
#[no_mangle]
pub unsafe extern "C" fn seekdir(dir: *mut libc::DIR, position: c_long) {
    match ours(dir) {
        Some(stream) => {
            let _inside = Inside::enter();
            if let Some(library) = library() {
                stream.lock().unwrap_or_else(|e| e.into_inner()).seek(library, position);
            }
        }
        None => (next::SEEKDIR.get())(dir, position),
    }
}
