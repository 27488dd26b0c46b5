//! Byte-range locks on the files this server homes: fcntl's POSIX and OFD locks and flock,
//! which the mounts of every node pass on here, so they exclude across nodes.
//!
//! A lock belongs to an owner of one connection: the kernel's lock owner (a process for POSIX
//! locks, an open file for flock and OFD locks) as the mount passes it on, within the mount's
//! connection. Locks are not journaled: like NFS's, they live as long as their holders, and
//! a connection that ends (its mount or its node gone, or this server restarted) takes its
//! locks with it.
//!
//! flock arrives from the kernel as a whole-file lock of its open file, indistinguishable from
//! an OFD lock on the whole file, and is kept as one: flock and fcntl locks of the same
//! process on the same file therefore exclude each other here, where Linux keeps them apart.

mod handlers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_proto::{ErrorCode, Ino, LockHolder, LockKind};
use tokio::sync::Notify;

/// Who holds a lock: an owner within one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    pub connection: u64,
    pub owner: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    owner: Owner,
    pid: u32,
    exclusive: bool,
    start: u64,
    end: u64,
}

impl Held {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }
}

/// A lock to take or give back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted {
    pub owner: Owner,
    pub pid: u32,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
}

#[derive(Default)]
struct Table {
    held: HashMap<Ino, Vec<Held>>,
    /// Owners waiting for a lock: how many waits, and a number bumped when the owner lets go
    /// of a whole file (which ends its waits).
    waiting: HashMap<Owner, (u32, u64)>,
}

/// The locks of this server's files.
#[derive(Default)]
pub(crate) struct Locks {
    table: Mutex<Table>,
    /// Woken whenever a lock goes or an owner gives up: waiters look again.
    released: Notify,
    next_connection: AtomicU64,
}

impl Locks {
    /// A number for a new connection's owners.
    pub fn connection(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// The first lock of another owner that `w` would conflict with.
    pub fn conflict(&self, ino: Ino, w: &Wanted) -> Option<LockHolder> {
        let table = self.table.lock_or_recover();
        first_conflict(table.held.get(&ino).map(Vec::as_slice).unwrap_or_default(), w).map(|h| LockHolder {
            kind: if h.exclusive { LockKind::Write } else { LockKind::Read },
            start: h.start,
            end: h.end,
            pid: h.pid,
        })
    }

    /// Takes or gives back `w` now; `Locked` if another owner's lock is in the way.
    pub fn set(&self, ino: Ino, w: &Wanted) -> Result<()> {
        check_range(w)?;
        let mut table = self.table.lock_or_recover();
        self.set_in(&mut table, ino, w)
    }

    fn set_in(&self, table: &mut Table, ino: Ino, w: &Wanted) -> Result<()> {
        let Table { held, waiting } = table;
        if w.kind != LockKind::Unlock && held.get(&ino).is_some_and(|locks| first_conflict(locks, w).is_some()) {
            return Err(ServerError::new(ErrorCode::Locked, "a lock of another owner is in the way"));
        }
        let locks = held.entry(ino).or_default();
        let mut released = carve(locks, w.owner, w.start, w.end);
        if w.kind != LockKind::Unlock {
            locks.push(Held { owner: w.owner, pid: w.pid, exclusive: w.kind == LockKind::Write, start: w.start, end: w.end });
            merge(locks, w.owner);
        } else if let Some((_, generation)) = waiting.get_mut(&w.owner).filter(|_| w.start == 0 && w.end == u64::MAX) {
            // The whole file let go of: what its process does at close or exit. A wait of
            // this owner (a process killed in the middle of one) ends here.
            *generation += 1;
            released = true;
        }
        if locks.is_empty() {
            held.remove(&ino);
        }
        if released {
            self.released.notify_waiters();
        }
        Ok(())
    }

    /// Takes `w`, waiting as long as another owner's lock is in the way; `Interrupted` when
    /// its owner gives up the whole file meanwhile, or its connection ends.
    pub async fn wait(&self, ino: Ino, w: Wanted) -> Result<()> {
        check_range(&w)?;
        let generation = {
            let mut table = self.table.lock_or_recover();
            let (count, generation) = table.waiting.entry(w.owner).or_default();
            *count += 1;
            *generation
        };
        let _registered = Waiting { locks: self, owner: w.owner };
        loop {
            // Registered before looking, so a release between the look and the wait wakes it.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                // The check and the take under one hold of the table: a connection that ends
                // in between cannot be left holding a lock.
                let mut table = self.table.lock_or_recover();
                if table.waiting.get(&w.owner).map(|&(_, g)| g) != Some(generation) {
                    return Err(ServerError::new(ErrorCode::Interrupted, "the lock's owner let go of the file while waiting"));
                }
                match self.set_in(&mut table, ino, &w) {
                    Err(e) if e.code == ErrorCode::Locked => {}
                    other => return other,
                }
            }
            released.await;
        }
    }

    /// Everything a connection held goes (it ended), and its waits end.
    pub fn drop_connection(&self, connection: u64) {
        let mut table = self.table.lock_or_recover();
        table.held.retain(|_, locks| {
            locks.retain(|h| h.owner.connection != connection);
            !locks.is_empty()
        });
        for (owner, (_, generation)) in table.waiting.iter_mut() {
            if owner.connection == connection {
                *generation += 1;
            }
        }
        self.released.notify_waiters();
    }
}

/// A wait in progress, counted in the table until it ends however it ends.
struct Waiting<'a> {
    locks: &'a Locks,
    owner: Owner,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut table = self.locks.table.lock_or_recover();
        if let Some((count, _)) = table.waiting.get_mut(&self.owner) {
            *count -= 1;
            if *count == 0 {
                table.waiting.remove(&self.owner);
            }
        }
    }
}

fn check_range(w: &Wanted) -> Result<()> {
    if w.start > w.end {
        return Err(ServerError::new(ErrorCode::Invalid, format!("lock range {}..={} is empty", w.start, w.end)));
    }
    Ok(())
}

fn first_conflict<'a>(locks: &'a [Held], w: &Wanted) -> Option<&'a Held> {
    let exclusive = w.kind == LockKind::Write;
    locks.iter().find(|h| h.owner != w.owner && h.overlaps(w.start, w.end) && (exclusive || h.exclusive))
}

/// Removes `owner`'s locks from `start..=end`, keeping what lies outside (a lock split in two
/// by a hole in its middle). Whether anything was removed.
fn carve(locks: &mut Vec<Held>, owner: Owner, start: u64, end: u64) -> bool {
    let mut kept = Vec::with_capacity(locks.len() + 1);
    let mut removed = false;
    for h in locks.drain(..) {
        if h.owner != owner || !h.overlaps(start, end) {
            kept.push(h);
            continue;
        }
        removed = true;
        if h.start < start {
            kept.push(Held { end: start - 1, ..h });
        }
        if h.end > end {
            kept.push(Held { start: end + 1, ..h });
        }
    }
    *locks = kept;
    removed
}

/// Joins `owner`'s adjacent or overlapping locks of the same kind into one, as POSIX does.
fn merge(locks: &mut Vec<Held>, owner: Owner) {
    let (mut mine, others): (Vec<Held>, Vec<Held>) = locks.drain(..).partition(|h| h.owner == owner);
    mine.sort_by_key(|h| (h.exclusive, h.start));
    let mut merged: Vec<Held> = Vec::with_capacity(mine.len());
    for h in mine {
        match merged.last_mut() {
            Some(last) if last.exclusive == h.exclusive && h.start <= last.end.saturating_add(1) => {
                last.end = last.end.max(h.end);
                last.pid = h.pid;
            }
            _ => merged.push(h),
        }
    }
    *locks = others;
    locks.extend(merged);
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Owner = Owner { connection: 1, owner: 10 };
    const B: Owner = Owner { connection: 2, owner: 10 };

    fn want(owner: Owner, kind: LockKind, start: u64, end: u64) -> Wanted {
        Wanted { owner, pid: owner.connection as u32, kind, start, end }
    }

    /// A holds the whole file for writing; B waits for `wanted` (given a moment to start).
    async fn b_waiting_on_a(wanted: Wanted) -> (std::sync::Arc<Locks>, tokio::task::JoinHandle<Result<()>>) {
        let locks = std::sync::Arc::new(Locks::default());
        locks.set(7, &want(A, LockKind::Write, 0, u64::MAX)).unwrap();
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.wait(7, wanted).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        (locks, waiter)
    }

    #[test]
    fn readers_share_and_writers_exclude_where_ranges_overlap() {
        let locks = Locks::default();
        locks.set(7, &want(A, LockKind::Read, 0, 99)).unwrap();
        locks.set(7, &want(B, LockKind::Read, 50, 150)).unwrap();
        assert_eq!(locks.set(7, &want(B, LockKind::Write, 90, 95)).unwrap_err().code, ErrorCode::Locked);
        locks.set(7, &want(B, LockKind::Write, 100, 200)).unwrap();
        let holder = locks.conflict(7, &want(A, LockKind::Write, 120, 120)).unwrap();
        assert_eq!((holder.kind, holder.start, holder.end, holder.pid), (LockKind::Write, 100, 200, 2));
        assert!(locks.conflict(8, &want(A, LockKind::Write, 0, u64::MAX)).is_none(), "another file");
    }

    #[test]
    fn an_owners_locks_split_and_merge() {
        let locks = Locks::default();
        locks.set(7, &want(A, LockKind::Write, 0, 99)).unwrap();
        locks.set(7, &want(A, LockKind::Unlock, 40, 59)).unwrap();
        locks.set(7, &want(B, LockKind::Write, 45, 50)).unwrap();
        assert_eq!(locks.set(7, &want(B, LockKind::Write, 30, 45)).unwrap_err().code, ErrorCode::Locked, "the left part stays");
        assert_eq!(locks.set(7, &want(B, LockKind::Write, 60, 60)).unwrap_err().code, ErrorCode::Locked, "the right part stays");
        locks.set(7, &want(B, LockKind::Unlock, 0, u64::MAX)).unwrap();
        locks.set(7, &want(A, LockKind::Write, 40, 59)).unwrap();
        let table = locks.table.lock().unwrap();
        assert_eq!(table.held[&7].len(), 1, "merged back into one: {:?}", table.held[&7]);
    }

    #[tokio::test]
    async fn a_waiter_gets_the_lock_when_it_goes_or_its_holder_disconnects() {
        let (locks, waiter) = b_waiting_on_a(want(B, LockKind::Write, 0, 9)).await;
        assert!(!waiter.is_finished(), "waits while the lock is held");
        locks.drop_connection(A.connection);
        waiter.await.unwrap().unwrap();
        assert_eq!(locks.set(7, &want(A, LockKind::Read, 5, 5)).unwrap_err().code, ErrorCode::Locked);
    }

    #[tokio::test]
    async fn a_wait_ends_with_its_connection() {
        let (locks, waiter) = b_waiting_on_a(want(B, LockKind::Write, 0, 0)).await;
        locks.drop_connection(B.connection);
        assert_eq!(waiter.await.unwrap().unwrap_err().code, ErrorCode::Interrupted);
        assert!(locks.table.lock().unwrap().waiting.is_empty(), "no wait left registered");
    }

    #[tokio::test]
    async fn a_wait_ends_when_its_owner_lets_go_of_the_file() {
        let (locks, waiter) = b_waiting_on_a(want(B, LockKind::Read, 0, 0)).await;
        locks.set(7, &want(B, LockKind::Unlock, 0, u64::MAX)).unwrap();
        assert_eq!(waiter.await.unwrap().unwrap_err().code, ErrorCode::Interrupted);
        assert!(locks.conflict(7, &want(B, LockKind::Write, 0, 0)).is_some(), "A still holds it");
    }
}
