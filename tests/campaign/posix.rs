//! A worker's operations through a FUSE mount with the POSIX calls a program makes, the same
//! as [`crate::worker`] makes them through the native client: each close's result checked (a
//! close can fail where the data did not reach the servers), the counter's lock an OFD lock
//! (a POSIX lock would go at the close of the handle that reads the counter), appends with
//! O_APPEND.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use surge_client::surge_proto::ErrorCode;

use crate::history::{classify, contents, now_us, record, Op, Outcome};

fn failed(e: std::io::Error, maybe_applied: bool) -> Outcome {
    let code = ErrorCode::of_io(&e);
    let lost = code.is_lost_contact() || code == ErrorCode::Io || e.raw_os_error() == Some(libc::ENOTCONN);
    Outcome::Failed { code: format!("{code:?}"), maybe_applied: maybe_applied || lost }
}

/// close(2), whose error a dropped `File` would not tell.
fn close(file: File) -> std::io::Result<()> {
    nix::unistd::close(file.into_raw_fd()).map_err(std::io::Error::from)
}

fn write_whole(file: File, version: u64) -> Outcome {
    let written = file.write_all_at(&contents(version), 0);
    let closed = close(file);
    match written.and(closed) {
        Ok(()) => Outcome::Ok,
        Err(e) => failed(e, true),
    }
}

/// `op` on the tree under `root` (the mount's directory), as worker `incarnation`.
pub fn apply(root: &Path, incarnation: u64, op: &Op) -> Outcome {
    let at = |path: &str| root.join(path.trim_start_matches('/'));
    match op {
        Op::Put { path, version } => match OpenOptions::new().write(true).create_new(true).open(at(path)) {
            Ok(file) => write_whole(file, *version),
            Err(e) => failed(e, false),
        },
        Op::Rewrite { path, version } | Op::Update { path, version } => {
            let file = match OpenOptions::new().write(true).open(at(path)) {
                Ok(file) => file,
                Err(e) => return failed(e, false),
            };
            if let Err(e) = file.set_len(contents(*version).len() as u64) {
                let _ = close(file);
                return failed(e, true);
            }
            write_whole(file, *version)
        }
        Op::Rename { from, to } => std::fs::rename(at(from), at(to)).map_or_else(|e| failed(e, false), |_| Outcome::Ok),
        Op::Relink { from, to } => {
            if let Err(e) = std::fs::hard_link(at(from), at(to)) {
                return failed(e, false);
            }
            std::fs::remove_file(at(from)).map_or_else(|e| failed(e, true), |_| Outcome::Ok)
        }
        Op::Unlink { path } => std::fs::remove_file(at(path)).map_or_else(|e| failed(e, false), |_| Outcome::Ok),
        Op::Read { path } => {
            let mut file = match File::open(at(path)) {
                Ok(file) => file,
                Err(e) => return failed(e, false),
            };
            let mut bytes = Vec::new();
            let read = file.read_to_end(&mut bytes);
            let _ = close(file);
            match read {
                Ok(_) => Outcome::Read { seen: classify(&bytes) },
                Err(e) => failed(e, false),
            }
        }
        Op::Publish { path, temp, version } => {
            let file = match OpenOptions::new().write(true).create_new(true).open(at(temp)) {
                Ok(file) => file,
                Err(e) => return failed(e, false),
            };
            if let Outcome::Failed { code, .. } = write_whole(file, *version) {
                let _ = std::fs::remove_file(at(temp));
                return Outcome::Failed { code, maybe_applied: false };
            }
            std::fs::rename(at(temp), at(path)).map_or_else(|e| failed(e, false), |_| Outcome::Ok)
        }
        Op::Exclusive { path } => match OpenOptions::new().write(true).create_new(true).open(at(path)) {
            Ok(file) => {
                let written = file.write_all_at(&incarnation.to_le_bytes(), 0);
                match written.and(close(file)) {
                    Ok(()) => Outcome::Ok,
                    Err(e) => failed(e, true),
                }
            }
            Err(e) => failed(e, false),
        },
        Op::Increment { path } => increment(&at(path)),
        Op::Append { path, tag } => {
            let mut file = match OpenOptions::new().append(true).open(at(path)) {
                Ok(file) => file,
                Err(e) => return failed(e, false),
            };
            let written = file.write_all(&record(incarnation, *tag));
            match written.and(close(file)) {
                Ok(()) => Outcome::Ok,
                Err(e) => failed(e, true),
            }
        }
    }
}

/// An OFD write lock over the whole of `file` (waited for), or its release.
fn ofd_lock(file: &File, kind: libc::c_short) -> std::io::Result<()> {
    // SAFETY: flock is plain data; all-zero is a valid value before the fields are set.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a valid descriptor and a flock that lives across the call.
    match unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &lock) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn increment(path: &Path) -> Outcome {
    let guard = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(e) => return failed(e, false),
    };
    if let Err(e) = ofd_lock(&guard, libc::F_WRLCK as libc::c_short) {
        let _ = close(guard);
        return failed(e, false);
    }
    let locked_at = now_us();
    // Opened once the lock is held: close-to-open then shows the last holder's write.
    let counted = (|| {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut bytes = [0u8; 8];
        let got = file.read_at(&mut bytes, 0)?;
        let read = if got == 8 { u64::from_le_bytes(bytes) } else { 0 };
        file.write_all_at(&(read + 1).to_le_bytes(), 0)?;
        close(file)?;
        Ok::<u64, std::io::Error>(read)
    })();
    let unlocking_at = now_us();
    let unlocked = ofd_lock(&guard, libc::F_UNLCK as libc::c_short);
    let _ = close(guard);
    match (counted, unlocked) {
        (Ok(read), Ok(())) => Outcome::Incremented { read, locked_at, unlocking_at },
        (Err(e), _) | (Ok(_), Err(e)) => failed(e, true),
    }
}
