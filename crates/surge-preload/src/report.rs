//! What the library served in this process, and what it handed to the kernel: counted per
//! call, and written at exit to the file `SURGE_PRELOAD_REPORT` names (one line per process,
//! appended: `surge-preload pid=N open=3 read=10 ... handed-to-kernel=1`). How a user (and
//! the tests) see that a program's files went through the library and not the mount.
//! `answered-here` counts the creates, mkdirs and unlinks (among the others) answered under
//! a directory delegation, with no request; `stat-kept` the `stat`s (among `stat`) answered
//! from what the library keeps, with no request.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! calls {
    ($($call:ident = $name:literal,)*) => {
        /// A call the library answered itself (or a hand-over to the kernel).
        #[derive(Clone, Copy)]
        pub(crate) enum Call { $($call,)* }
        const NAMES: &[&str] = &[$($name,)*];
    };
}

calls! {
    Open = "open",
    OpenedByKernel = "opened-by-kernel",
    Close = "close",
    Read = "read",
    Write = "write",
    Seek = "seek",
    Stat = "stat",
    Unlink = "unlink",
    Mkdir = "mkdir",
    Rmdir = "rmdir",
    Truncate = "truncate",
    SetAttr = "setattr",
    Sync = "sync",
    Dup = "dup",
    Fcntl = "fcntl",
    HandedToKernel = "handed-to-kernel",
    Opendir = "opendir",
    Flock = "flock",
    Readdir = "readdir",
    AnsweredHere = "answered-here",
    StatKept = "stat-kept",
}

static COUNTS: [AtomicU64; NAMES.len()] = [const { AtomicU64::new(0) }; NAMES.len()];

pub(crate) fn count(call: Call) {
    COUNTS[call as usize].fetch_add(1, Ordering::Relaxed);
}

/// How many reads and writes the library served so far: what a background task checks to
/// stay out of the way of the program's data.
pub(crate) fn data_calls() -> u64 {
    COUNTS[Call::Read as usize].load(Ordering::Relaxed) + COUNTS[Call::Write as usize].load(Ordering::Relaxed)
}

/// The counts as one line.
pub(crate) fn line() -> String {
    let counts: Vec<String> = NAMES.iter().zip(&COUNTS).map(|(name, n)| format!("{name}={}", n.load(Ordering::Relaxed))).collect();
    format!("surge-preload pid={} {}\n", std::process::id(), counts.join(" "))
}

/// Appends the line to `SURGE_PRELOAD_REPORT`, if set and the library did anything in this
/// process (a shell's or a launcher's helper processes that touched no Surge file say nothing).
pub(crate) fn write_if_asked() {
    let Some(path) = std::env::var_os("SURGE_PRELOAD_REPORT") else { return };
    if COUNTS.iter().all(|n| n.load(Ordering::Relaxed) == 0) {
        return;
    }
    use std::io::Write;
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = file.write_all(line().as_bytes());
    }
}
