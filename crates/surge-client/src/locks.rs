//! Byte-range locks (fcntl's POSIX and OFD locks, flock as a whole-file lock), kept by each
//! file's home server so that they exclude across nodes (see the server's `locks`).
//!
//! A lock belongs to an owner on this client's connection to the home: it lasts while the
//! owner holds it and the connection lives (locks are not journaled; a lost connection, or a
//! restart of the home, takes them away). A waiting [`Client::set_lock`] has no timeout.

use bytes::Bytes;
use surge_proto::ino::{self, Ino};
use surge_proto::namespace::{GetLock, SetLock};
use surge_proto::{LockHolder, LockKind, Request};

use crate::error::Result;
use crate::Client;

/// A lock to take or give back: `owner` is the caller's name for who holds it (the FUSE mount
/// passes the kernel's lock owner), `start..=end` the bytes (`end == u64::MAX`: to any end of
/// file), `pid` the process reported to others who find it in their way.
#[derive(Debug, Clone, Copy)]
pub struct LockRange {
    pub owner: u64,
    pub pid: u32,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
}

impl Client {
    /// Takes, changes or gives back a lock on file `ino`. Without `wait`, another owner's lock
    /// in the way fails with `Locked` (EAGAIN); with it, this waits as long as the lock is
    /// held, however long (no timeout: holders may keep a lock for hours), and ends early with
    /// `Interrupted` when the same owner gives up the whole file meanwhile (its process died),
    /// or with the connection to the file's home.
    pub async fn set_lock(&self, ino: Ino, lock: LockRange, wait: bool) -> Result<()> {
        let LockRange { owner, pid, kind, start, end } = lock;
        let call = SetLock { ino, owner, pid, kind, start, end, wait };
        if !wait {
            return self.call_home(ino, call).await;
        }
        let request: Request = call.into();
        self.send(ino::home(ino), &request, Bytes::new()).await?.wait_untimed().await?.reply::<SetLock>()
    }

    /// The first lock of another owner in the way of `lock`, if any (F_GETLK).
    pub async fn get_lock(&self, ino: Ino, lock: LockRange) -> Result<Option<LockHolder>> {
        let LockRange { owner, kind, start, end, .. } = lock;
        self.call_home(ino, GetLock { ino, owner, kind, start, end }).await
    }
}
