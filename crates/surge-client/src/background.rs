//! Answers a client does not wait for before telling its caller that a step is done: the
//! purge of a removed file's data (the name is gone and the data nobody's the moment its home
//! answered) and the release of a read-only handle answered from a kept file. Each such request
//! is *sent* before the step returns, so the servers take it in order behind the client's
//! earlier requests and before its later ones on the same connection (a write after an
//! unlink finds the room the purge freed). Only its answer is waited for here.
//!
//! They are counted, so that whoever ends the client (a process exiting or becoming another
//! program, a mount going away) waits for them first ([`Client::background_done`]): a request
//! still queued in the process when it ends would be lost, and its data freed only by the
//! servers' purge keeper, a while later.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::Client;

/// The count of answers outstanding, and who waits for it to fall to nought.
#[derive(Default)]
pub(crate) struct Background {
    outstanding: AtomicUsize,
    settled: tokio::sync::Notify,
}

/// One outstanding answer; dropped when it came (or never will: its connection ended).
pub(crate) struct Outstanding(Arc<Background>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        if self.0.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

impl Client {
    /// Counts an answer about to be left to the background until the returned guard drops.
    pub(crate) fn outstanding(&self) -> Outstanding {
        self.background().outstanding.fetch_add(1, Ordering::AcqRel);
        Outstanding(self.background().clone())
    }

    /// Runs `work` (what follows an answer) as a task of the runtime this is called in,
    /// counted as outstanding; without a runtime, right here.
    pub(crate) async fn in_background(&self, work: impl Future<Output = ()> + Send + 'static) {
        let outstanding = self.outstanding();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    work.await;
                    drop(outstanding);
                });
            }
            Err(_) => work.await,
        }
    }

    /// Whether answers are outstanding ([`Client::background_done`] would wait).
    pub fn has_background(&self) -> bool {
        self.background().outstanding.load(Ordering::Acquire) > 0
    }

    /// Waits until every answer left to the background came (each is bounded by the client's
    /// request timeout).
    pub async fn background_done(&self) {
        let background = self.background();
        loop {
            let settled = background.settled.notified();
            tokio::pin!(settled);
            // Registered before the count is read: a last answer in between still wakes it.
            settled.as_mut().enable();
            if background.outstanding.load(Ordering::Acquire) == 0 {
                return;
            }
            settled.await;
        }
    }
}
