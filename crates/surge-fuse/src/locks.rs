//! The mount's part in byte-range locks and flock, which the files' home servers keep (so
//! they exclude across nodes): the kernel's lock requests are passed on, and since the kernel
//! keeps no record of locks it forwards, the mount remembers which owners took locks through
//! which handles, to give them back when the kernel says their holders let go:
//!
//! * a close (`flush`) by a process gives back that process's POSIX locks on the file, as
//!   POSIX says any close of the file does;
//! * the last close of an open file (`release`) gives back the flock and OFD locks taken
//!   through it, whose owner is that open file.
//!
//! Only owners that took (or wait for) a lock are asked about: a close of a file nobody
//! locked costs nothing.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use surge_client::surge_proto::LockKind;
use surge_client::LockRange;

/// The kernel's "to any end of file" (`OFFSET_MAX`), and what the servers call it.
const KERNEL_EOF: u64 = i64::MAX as u64;

/// A lock end as the servers take it.
pub(crate) fn end_from_kernel(end: u64) -> u64 {
    if end >= KERNEL_EOF {
        u64::MAX
    } else {
        end
    }
}

/// A lock end as the kernel takes it.
pub(crate) fn end_to_kernel(end: u64) -> u64 {
    end.min(KERNEL_EOF)
}

/// A lock request as the kernel describes it (None: an unknown `l_type`).
pub(crate) fn range_from_kernel(owner: u64, pid: u32, typ: i32, start: u64, end: u64) -> Option<LockRange> {
    Some(LockRange { owner, pid, kind: kind_from_kernel(typ)?, start, end: end_from_kernel(end) })
}

/// A lock kind from fcntl's `l_type`.
fn kind_from_kernel(typ: i32) -> Option<LockKind> {
    match typ {
        libc::F_RDLCK => Some(LockKind::Read),
        libc::F_WRLCK => Some(LockKind::Write),
        libc::F_UNLCK => Some(LockKind::Unlock),
        _ => None,
    }
}

pub(crate) fn kind_to_kernel(kind: LockKind) -> i32 {
    match kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    }
}

/// Which owners hold or wait for locks on which files, through which handles.
#[derive(Default)]
pub(crate) struct LockOwners {
    by_owner: Mutex<HashMap<(u64, u64), HashSet<u64>>>,
}

impl LockOwners {
    /// `owner` takes (or waits for) a lock on `ino` through handle `fh`.
    pub fn took(&self, ino: u64, owner: u64, fh: u64) {
        self.by_owner.lock().unwrap().entry((ino, owner)).or_default().insert(fh);
    }

    /// Whether `owner` took (or waits for) a lock on `ino`.
    pub fn holds(&self, ino: u64, owner: u64) -> bool {
        self.by_owner.lock().unwrap().contains_key(&(ino, owner))
    }

    /// `owner` gave back its whole file: whether it had taken anything there.
    pub fn let_go(&self, ino: u64, owner: u64) -> bool {
        self.by_owner.lock().unwrap().remove(&(ino, owner)).is_some()
    }

    /// Handle `fh` of `ino` is closed for good: the owners that locked through it.
    pub fn closed(&self, ino: u64, fh: u64) -> Vec<u64> {
        let mut by_owner = self.by_owner.lock().unwrap();
        let owners: Vec<u64> =
            by_owner.iter().filter(|((i, _), handles)| *i == ino && handles.contains(&fh)).map(|((_, o), _)| *o).collect();
        for owner in &owners {
            by_owner.remove(&(ino, *owner));
        }
        owners
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_let_go_of_by_close_or_by_their_handle() {
        let owners = LockOwners::default();
        owners.took(7, 100, 1);
        owners.took(7, 200, 2);
        owners.took(8, 100, 3);
        assert!(!owners.let_go(7, 300), "nobody else locked");
        assert!(owners.let_go(7, 100));
        assert!(!owners.let_go(7, 100), "once");
        assert_eq!(owners.closed(7, 2), vec![200]);
        assert_eq!(owners.closed(8, 3), vec![100]);
        assert!(owners.closed(7, 1).is_empty());
        assert_eq!((end_from_kernel(i64::MAX as u64), end_to_kernel(u64::MAX), end_from_kernel(99)), (u64::MAX, i64::MAX as u64, 99));
    }
}
