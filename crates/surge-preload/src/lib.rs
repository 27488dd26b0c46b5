//! # libsurge_preload — Surge for unmodified programs, without the kernel in the way
//!
//! Loaded with `LD_PRELOAD` (or `surge run -- CMD`), this library defines the C library's
//! file functions in front of the C library's own. A call on a Surge mount that it can serve
//! is answered in the process by the native client, talking to the instance's servers
//! directly: no FUSE round trip through the kernel and the mount daemon. Every other call goes
//! to the C library untouched, and so does every call on a Surge mount that the library
//! leaves alone: the mount serves it, with the same bytes and metadata. **The mount is the
//! safety net, never a second truth**: the library keeps no state of its own that the mount
//! could contradict (what it answers `stat` from is kept exact by the servers' notices, see
//! `cache`; a close publishes; an open asks the file's home) and hands a descriptor over to
//! the kernel wherever it cannot serve a call on it.
//!
//! What it guarantees:
//! * **Same files.** A program sees through the library what it would through the mount:
//!   `stat` reports the mount's device and Surge's inode numbers; close-to-open holds between
//!   processes with and without the library and between nodes (docs/consistency.md).
//! * **Same permissions.** The library serves only what the owner's mode bits grant to the
//!   process as the file's owner; anything else (group, other, ACLs, root, set-id files being
//!   written) is left to the kernel, which checks it: no rule is relaxed.
//! * **Descriptors stay the program's.** A served file has a real descriptor number (a
//!   stand-in); before `fork`, `exec`, `posix_spawn`, `system` and `popen`, and before a call
//!   the library does not serve (`mmap`, locks, `fallocate`, ...), it becomes an ordinary
//!   descriptor on the mount at the same offset. The library's threads block every signal.
//! * **Never unwinds into C**: a failure is an errno; a panic is EIO.
//!
//! What is served, and what falls back, call by call: docs/preload.md.
//!
//! ## Modules
//! * [`intercept`] (private): the C entry points, thin adapters;
//! * [`files`] (private): the calls served, over the native client;
//! * [`paths`] (private): which paths are served (the kernel resolves the directory);
//! * [`listings`] (private): the directory streams served (`opendir`, `readdir`, ...);
//! * `cache` (private): the names and attributes `stat` is answered from, kept exact;
//! * [`descriptors`] (private): the served descriptors, and handing one to the kernel;
//! * [`process`] (private): the library's state in a process, fork, reentrancy;
//! * [`mounts`]: the Surge mounts in the kernel's mount table;
//! * [`attrs`]: Surge attributes as `stat` and `statx` report them;
//! * `next`, `report` (private): the C library's definitions; counts of what was served.

pub mod attrs;
mod cache;
mod descriptors;
mod files;
mod intercept;
mod listings;
pub mod mounts;
mod next;
mod paths;
mod process;
mod report;

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
compile_error!("surge-preload defines C variadic functions with a fixed last argument: only x86-64 and AArch64 Linux pass it alike");

/// At the end of the process (exit, or the library unloaded): every file still open through
/// the library is closed as the kernel would close it (its writes waited for and published),
/// every delegation given back (what it answered written back), the answers left to the
/// background waited for, and the report written if one was asked for.
extern "C" fn at_end() {
    let Some(_inside) = process::Inside::enter() else { return };
    let Some(library) = process::current() else { return };
    let open = descriptors::take_all();
    if !open.is_empty() || library.owes_servers() {
        // On a thread of its own: this one's thread-locals (the runtime's context among
        // them) may be gone already at exit.
        let closed = std::thread::Builder::new().spawn(move || {
            let _inside = process::Inside::enter();
            for description in open {
                let _ = library.run(description.file.release());
            }
            library.settle_with_servers();
        });
        if let Ok(closing) = closed {
            let _ = closing.join();
        }
    }
    report::write_if_asked();
}

#[used]
#[link_section = ".fini_array"]
static AT_END: extern "C" fn() = at_end;
