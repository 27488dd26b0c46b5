//! Other processes and programs: before a new program or process can get this process's
//! descriptors, the ones the library serves are handed to the kernel (`fork` does it in its
//! handler, see [`crate::process`]). `vfork` is served as `fork`: the child of a vfork may
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

/// # Safety
/// execve(2).
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    all_to_kernel();
    (next::EXECVE.get())(path, argv, envp)
}

/// # Safety
/// execv(3).
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    all_to_kernel();
    (next::EXECV.get())(path, argv)
}

/// # Safety
/// execvp(3).
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    all_to_kernel();
    (next::EXECVP.get())(file, argv)
}

/// # Safety
/// execvpe(3).
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    all_to_kernel();
    (next::EXECVPE.get())(file, argv, envp)
}

/// # Safety
/// fexecve(3).
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    all_to_kernel();
    (next::FEXECVE.get())(fd, argv, envp)
}

/// # Safety
/// posix_spawn(3). Its file actions may duplicate any descriptor into the child: all are
/// handed over first.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const c_void,
    attributes: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    all_to_kernel();
    (next::POSIX_SPAWN.get())(pid, path, actions, attributes, argv, envp)
}

/// # Safety
/// posix_spawnp(3).
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const c_void,
    attributes: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    all_to_kernel();
    (next::POSIX_SPAWNP.get())(pid, file, actions, attributes, argv, envp)
}

/// # Safety
/// system(3) (which spawns inside the C library, past any interposed call).
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    all_to_kernel();
    (next::SYSTEM.get())(command)
}

/// # Safety
/// popen(3), as system.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    all_to_kernel();
    (next::POPEN.get())(command, mode)
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
