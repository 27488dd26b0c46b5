//! Locks that a panic does not take down with it. The namespace, the chunk-file table and the
//! watch ledger are each one mutex that every connection needs; if a request panicked while
//! holding one (a bug, which is logged), std's poisoning would fail every later request of
//! every client. The data under the lock is a set of maps each step changes in a few small,
//! individually consistent updates, so the server goes on with it.

use std::sync::{Mutex, MutexGuard};

pub trait LockRecover<T> {
    /// The guard, also when an earlier holder panicked.
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;
}

impl<T> LockRecover<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| {
            tracing::error!("a request panicked while holding a lock; going on with what it left");
            self.clear_poison();
            poisoned.into_inner()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_under_the_lock_does_not_poison_it_for_everyone() {
        let lock = std::sync::Arc::new(Mutex::new(1));
        let held = lock.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock_or_recover();
            panic!("a bug in one request");
        })
        .join();
        *lock.lock_or_recover() += 1;
        assert_eq!(*lock.lock().expect("not poisoned any more"), 2);
    }
}
