//! The C functions this library defines in front of the C library's: thin adapters that ask
//! whether a call is Surge's (a served descriptor, or a path on a Surge mount the library can
//! serve), serve it through [`crate::files`], and otherwise call the C library's definition
//! with the same arguments. They set `errno` and return C's failure values; nothing unwinds
//! into the program (a panic in the library is answered EIO).

mod descriptors;
mod dirs;
mod paths;
mod processes;

use std::ffi::{c_char, c_int, CStr};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use crate::descriptors::Description;
use crate::paths::Target;
use crate::process::{library, Inside, Library};
use crate::report::{self, Call};

/// What a C function returns on failure.
pub(crate) trait Failure {
    const FAILED: Self;
}

impl Failure for c_int {
    const FAILED: c_int = -1;
}

impl Failure for isize {
    const FAILED: isize = -1;
}

impl Failure for i64 {
    const FAILED: i64 = -1;
}

impl<T> Failure for *mut T {
    const FAILED: *mut T = std::ptr::null_mut();
}

pub(crate) fn set_errno(errno: c_int) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = errno };
}

/// Runs served code: a failure sets errno; a panic is answered EIO.
fn answered<T: Failure>(call: Call, work: impl FnOnce() -> Result<T, c_int>) -> T {
    report::count(call);
    match std::panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(value)) => value,
        Ok(Err(errno)) => {
            set_errno(errno);
            T::FAILED
        }
        Err(_) => {
            set_errno(libc::EIO);
            T::FAILED
        }
    }
}

/// What a call the library may serve comes to: the C function's result when the library served
/// it or it failed (errno set), None when the kernel is to answer it.
fn settled<T: Failure>(call: Call, answer: crate::files::Answer<T>) -> Option<T> {
    match answer {
        Ok(Some(value)) => Some(answered(call, || Ok(value))),
        Ok(None) => None,
        Err(errno) => Some(answered(call, || Err(errno))),
    }
}

/// A call on a descriptor the library serves.
struct OnServed {
    library: &'static Library,
    description: Arc<Description>,
    _inside: Inside,
}

impl OnServed {
    fn of(fd: c_int) -> Option<OnServed> {
        if crate::process::inside() {
            return None;
        }
        let description = crate::descriptors::served(fd)?;
        let inside = Inside::enter()?;
        Some(OnServed { library: library()?, description, _inside: inside })
    }

    fn answer<T: Failure>(self, call: Call, work: impl FnOnce(&Library, &Arc<Description>) -> Result<T, c_int>) -> T {
        answered(call, || work(self.library, &self.description))
    }
}

/// A call on a path the library may serve (the kernel resolved its directory onto a Surge
/// mount).
struct OnPath {
    library: &'static Library,
    target: Target,
    _inside: Inside,
}

impl OnPath {
    /// # Safety
    /// `path` is null or a NUL-terminated string.
    unsafe fn of(dirfd: c_int, path: *const c_char) -> Option<OnPath> {
        // SAFETY: the caller's promise.
        unsafe { Self::resolved_by(crate::paths::resolve, dirfd, path) }
    }

    /// As [`OnPath::of`], for a directory's name (trailing slashes allowed).
    ///
    /// # Safety
    /// `path` is null or a NUL-terminated string.
    unsafe fn of_directory(dirfd: c_int, path: *const c_char) -> Option<OnPath> {
        // SAFETY: the caller's promise.
        unsafe { Self::resolved_by(crate::paths::resolve_directory, dirfd, path) }
    }

    /// # Safety
    /// `path` is null or a NUL-terminated string.
    unsafe fn resolved_by(resolve: fn(&Library, c_int, &CStr) -> Option<Target>, dirfd: c_int, path: *const c_char) -> Option<OnPath> {
        if path.is_null() || crate::process::inside() {
            return None;
        }
        let inside = Inside::enter()?;
        let library = library()?;
        // SAFETY: the caller's promise.
        let target = resolve(library, dirfd, unsafe { CStr::from_ptr(path) })?;
        Some(OnPath { library, target, _inside: inside })
    }
}

/// Hands `fd` to the kernel if the library serves it (a call the library does not serve
/// follows): false, with errno set, if that failed.
fn to_kernel(fd: c_int) -> bool {
    if crate::process::inside() || crate::descriptors::served(fd).is_none() {
        return true;
    }
    let Some(_inside) = Inside::enter() else { return true };
    match crate::descriptors::hand_to_kernel(fd) {
        Ok(()) => true,
        Err(errno) => {
            set_errno(errno);
            false
        }
    }
}

/// Hands every served descriptor to the kernel and gives every delegation back (before
/// another program or process gets the descriptors, or this process becomes another program,
/// which would lose what the delegations answered).
fn all_to_kernel() {
    if crate::process::inside() {
        return;
    }
    let Some(_inside) = Inside::enter() else { return };
    if crate::descriptors::any_served() {
        crate::descriptors::hand_all_to_kernel();
    }
    if let Some(library) = crate::process::current().filter(|library| library.owes_servers()) {
        library.settle_with_servers();
    }
}
