//! Other processes and programs: before a new program or process can get this process's
//! descriptors, the ones the library serves are handed to the kernel (`fork` does it in its
//! handler, see [`crate::process`]), and every directory delegation is given back (a new
//! program would lose what they answered). `vfork` is served as `fork`: the child of a vfork may
//! only exec or exit, which a forked child does alike, and a shared address space would
//! share the library's state with a child that must not use it.

use std::ffi::{c_char, c_int, c_void};

use libc::pid_t;

use super::all_to_kernel;
use crate::next;

#[no_mangle]
pub extern "C" fn vfork() -> pid_t {
    (next::VFORK_AS_FORK.get())()
}

/// Calls that start another program or process: every served descriptor is handed to the
/// kernel first, then the C library's definition runs with the same arguments.
macro_rules! kernel_descriptors_first {
    ($($(#[$doc:meta])* $name:ident => $next:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        $(#[$doc])*
        /// # Safety
        /// The C function's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            all_to_kernel();
            (next::$next.get())($($arg),*)
        }
    )*};
}

kernel_descriptors_first! {
    /// execve(2).
    execve => EXECVE(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    /// execv(3).
    execv => EXECV(path: *const c_char, argv: *const *const c_char) -> c_int;
    /// execvp(3).
    execvp => EXECVP(file: *const c_char, argv: *const *const c_char) -> c_int;
    /// execvpe(3).
    execvpe => EXECVPE(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    /// fexecve(3).
    fexecve => FEXECVE(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    /// posix_spawn(3). Its file actions may duplicate any descriptor into the child: all are
    /// handed over, not only those without close-on-exec.
    posix_spawn => POSIX_SPAWN(pid: *mut pid_t, path: *const c_char, actions: *const c_void, attributes: *const c_void,
        argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    /// posix_spawnp(3), as posix_spawn.
    posix_spawnp => POSIX_SPAWNP(pid: *mut pid_t, file: *const c_char, actions: *const c_void, attributes: *const c_void,
        argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    /// system(3) (which spawns inside the C library, past any interposed call).
    system => SYSTEM(command: *const c_char) -> c_int;
    /// popen(3), as system.
    popen => POPEN(command: *const c_char, mode: *const c_char) -> *mut libc::FILE;
}

/// _exit(2) ends the process without running exit handlers: the library's end (every file
/// it serves closed and published, as the kernel closes descriptors) runs first.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    crate::at_end();
    (next::EXIT.get())(status)
}

/// _Exit(3), as _exit.
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    crate::at_end();
    (next::EXIT.get())(status)
}
