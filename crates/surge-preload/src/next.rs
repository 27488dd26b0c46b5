//! The C library's own definitions of the functions this library stands in front of: found
//! once with `dlsym(RTLD_NEXT, name)` (the next object in the lookup order after this one),
//! then called directly. Everything that is not Surge's goes to them untouched.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{mode_t, off_t, pid_t, size_t, ssize_t};

/// The next definition of one C function, resolved on first use.
pub(crate) struct Next<F> {
    name: &'static CStr,
    found: AtomicPtr<c_void>,
    _signature: PhantomData<F>,
}

// SAFETY: the only state is an atomic pointer, written with the same value by whichever
// thread resolves it first; `F` is a function pointer type, which is Send and Sync.
unsafe impl<F> Sync for Next<F> {}

impl<F: Copy> Next<F> {
    const fn new(name: &'static CStr) -> Self {
        Next { name, found: AtomicPtr::new(std::ptr::null_mut()), _signature: PhantomData }
    }

    /// The C library's definition. A C library without one of these functions (they are all
    /// in glibc's public ABI) cannot run a program that calls it: the process stops with a
    /// message rather than jump to nowhere.
    pub(crate) fn get(&self) -> F {
        let mut found = self.found.load(Ordering::Relaxed);
        if found.is_null() {
            // SAFETY: `name` is NUL-terminated; RTLD_NEXT asks for the definition after ours.
            found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
            if found.is_null() {
                crate::process::die(&format!("the C library does not define {}", self.name.to_string_lossy()));
            }
            self.found.store(found, Ordering::Relaxed);
        }
        assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        // SAFETY: `F` is the function pointer type of the C declaration of `name` (each static
        // below is declared with its prototype from the C library's headers), and `found` is
        // that function's address.
        unsafe { std::mem::transmute_copy(&found) }
    }
}

macro_rules! next {
    ($($static:ident = $name:literal: fn($($arg:ty),*) -> $ret:ty;)*) => {
        $(pub(crate) static $static: Next<extern "C" fn($($arg),*) -> $ret> = Next::new($name);)*
    };
}

// The definitions are typed as safe function pointers although the C functions take raw
// pointers: every call passes on the program's own arguments unchanged (the program's contract
// with the C library is its own) or the library's valid ones, and an `unsafe` block at each of
// the hundred call sites would document nothing more.
//
// Variadic C functions (open, openat, fcntl, ioctl) are declared with their one optional
// argument as a fixed one: on the Linux ABIs this library is built for (x86-64, AArch64), an
// integer or pointer argument travels in the same register either way.
next! {
    OPEN = c"open": fn(*const c_char, c_int, mode_t) -> c_int;
    OPENAT = c"openat": fn(c_int, *const c_char, c_int, mode_t) -> c_int;
    CLOSE = c"close": fn(c_int) -> c_int;
    CLOSE_RANGE = c"close_range": fn(c_uint, c_uint, c_int) -> c_int;
    READ = c"read": fn(c_int, *mut c_void, size_t) -> ssize_t;
    WRITE = c"write": fn(c_int, *const c_void, size_t) -> ssize_t;
    PREAD = c"pread64": fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    PWRITE = c"pwrite64": fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    READV = c"readv": fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    WRITEV = c"writev": fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    PREADV = c"preadv64": fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    PWRITEV = c"pwritev64": fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;
    PREADV2 = c"preadv64v2": fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    PWRITEV2 = c"pwritev64v2": fn(c_int, *const libc::iovec, c_int, off_t, c_int) -> ssize_t;
    READ_CHK = c"__read_chk": fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;
    PREAD_CHK = c"__pread64_chk": fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
    LSEEK = c"lseek64": fn(c_int, off_t, c_int) -> off_t;
    FSYNC = c"fsync": fn(c_int) -> c_int;
    FDATASYNC = c"fdatasync": fn(c_int) -> c_int;
    FTRUNCATE = c"ftruncate64": fn(c_int, off_t) -> c_int;
    FSTATAT = c"fstatat64": fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
    OPENDIR = c"opendir": fn(*const c_char) -> *mut libc::DIR;
    READDIR = c"readdir": fn(*mut libc::DIR) -> *mut libc::dirent;
    READDIR64 = c"readdir64": fn(*mut libc::DIR) -> *mut libc::dirent64;
    READDIR_R = c"readdir_r": fn(*mut libc::DIR, *mut libc::dirent, *mut *mut libc::dirent) -> c_int;
    READDIR64_R = c"readdir64_r": fn(*mut libc::DIR, *mut libc::dirent64, *mut *mut libc::dirent64) -> c_int;
    CLOSEDIR = c"closedir": fn(*mut libc::DIR) -> c_int;
    DIRFD = c"dirfd": fn(*mut libc::DIR) -> c_int;
    REWINDDIR = c"rewinddir": fn(*mut libc::DIR) -> ();
    TELLDIR = c"telldir": fn(*mut libc::DIR) -> libc::c_long;
    SEEKDIR = c"seekdir": fn(*mut libc::DIR, libc::c_long) -> ();
    STATX = c"statx": fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
    DUP = c"dup": fn(c_int) -> c_int;
    DUP2 = c"dup2": fn(c_int, c_int) -> c_int;
    DUP3 = c"dup3": fn(c_int, c_int, c_int) -> c_int;
    FCNTL = c"fcntl64": fn(c_int, c_int, c_ulong) -> c_int;
    IOCTL = c"ioctl": fn(c_int, c_ulong, *mut c_void) -> c_int;
    MMAP = c"mmap64": fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
    FLOCK = c"flock": fn(c_int, c_int) -> c_int;
    LOCKF = c"lockf64": fn(c_int, c_int, off_t) -> c_int;
    FALLOCATE = c"fallocate64": fn(c_int, c_int, off_t, off_t) -> c_int;
    POSIX_FALLOCATE = c"posix_fallocate64": fn(c_int, off_t, off_t) -> c_int;
    FCHMOD = c"fchmod": fn(c_int, mode_t) -> c_int;
    FCHOWN = c"fchown": fn(c_int, libc::uid_t, libc::gid_t) -> c_int;
    FUTIMENS = c"futimens": fn(c_int, *const libc::timespec) -> c_int;
    FCHDIR = c"fchdir": fn(c_int) -> c_int;
    FUTIMES = c"futimes": fn(c_int, *const libc::timeval) -> c_int;
    FDOPEN = c"fdopen": fn(c_int, *const c_char) -> *mut libc::FILE;
    VDPRINTF = c"vdprintf": fn(c_int, *const c_char, *mut c_void) -> c_int;
    FSTATFS = c"fstatfs64": fn(c_int, *mut libc::statfs64) -> c_int;
    FSTATVFS = c"fstatvfs64": fn(c_int, *mut libc::statvfs64) -> c_int;
    FGETXATTR = c"fgetxattr": fn(c_int, *const c_char, *mut c_void, size_t) -> ssize_t;
    FSETXATTR = c"fsetxattr": fn(c_int, *const c_char, *const c_void, size_t, c_int) -> c_int;
    FLISTXATTR = c"flistxattr": fn(c_int, *mut c_char, size_t) -> ssize_t;
    FREMOVEXATTR = c"fremovexattr": fn(c_int, *const c_char) -> c_int;
    COPY_FILE_RANGE = c"copy_file_range": fn(c_int, *mut off_t, c_int, *mut off_t, size_t, c_uint) -> ssize_t;
    SENDFILE = c"sendfile64": fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    SPLICE = c"splice": fn(c_int, *mut off_t, c_int, *mut off_t, size_t, c_uint) -> ssize_t;
    SYNC_FILE_RANGE = c"sync_file_range": fn(c_int, off_t, off_t, c_uint) -> c_int;
    SYNCFS = c"syncfs": fn(c_int) -> c_int;
    UMASK = c"umask": fn(mode_t) -> mode_t;
    UNLINK = c"unlink": fn(*const c_char) -> c_int;
    UNLINKAT = c"unlinkat": fn(c_int, *const c_char, c_int) -> c_int;
    RMDIR = c"rmdir": fn(*const c_char) -> c_int;
    MKDIR = c"mkdir": fn(*const c_char, mode_t) -> c_int;
    MKDIRAT = c"mkdirat": fn(c_int, *const c_char, mode_t) -> c_int;
    VFORK_AS_FORK = c"fork": fn() -> pid_t;
    EXECVE = c"execve": fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    EXECV = c"execv": fn(*const c_char, *const *const c_char) -> c_int;
    EXECVP = c"execvp": fn(*const c_char, *const *const c_char) -> c_int;
    EXECVPE = c"execvpe": fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    FEXECVE = c"fexecve": fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    POSIX_SPAWN = c"posix_spawn": fn(*mut pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int;
    POSIX_SPAWNP = c"posix_spawnp": fn(*mut pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int;
    SYSTEM = c"system": fn(*const c_char) -> c_int;
    POPEN = c"popen": fn(*const c_char, *const c_char) -> *mut libc::FILE;
    EXIT = c"_exit": fn(c_int) -> !;
    POSIX_FADVISE = c"posix_fadvise64": fn(c_int, off_t, off_t, c_int) -> c_int;
}
