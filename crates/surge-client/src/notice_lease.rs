//! Whether every notice a server sent before now has arrived: what a watcher that answers
//! from what it was told (the mount's kept files, the interception library's `stat` cache)
//! must know before it answers.
//!
//! A server answers a change only once every watcher holding what changed acknowledged its
//! notice, or after 2 s without (the servers' `ACK_TIMEOUT`, so that a hung watcher hangs
//! nobody). So a watcher may answer from what it holds only while the server is known to have
//! been reachable within [`LEASE`] (1.5 s, a margin under those 2 s for scheduling): a request
//! sent then was answered, and every notice the server sent before answering it came first,
//! on the same connection. Answers keep the proof fresh by themselves: one older than
//! [`LEASE`]` / 4` is renewed in the background by a cheap request.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use surge_proto::admin::StatFs;
use tokio::runtime::Handle;

use crate::Client;

/// How long after a request to a server was sent, and answered, what its notices keep exact
/// may be answered.
pub const LEASE: Duration = Duration::from_millis(1500);

/// Per server: when the latest request answered there was sent.
pub struct NoticeLease {
    client: Client,
    runtime: Handle,
    reached: Arc<Mutex<HashMap<usize, Instant>>>,
    /// Servers a renewal is on its way to.
    renewing: Arc<Mutex<HashSet<usize>>>,
}

impl NoticeLease {
    /// Renewals go through `client`, spawned on `runtime`.
    pub fn new(client: Client, runtime: Handle) -> NoticeLease {
        NoticeLease { client, runtime, reached: Arc::default(), renewing: Arc::default() }
    }

    /// A request to `server` sent at `sent` was answered.
    pub fn reached(&self, server: usize, sent: Instant) {
        note_reached(&self.reached, server, sent);
    }

    /// Notices from `server` may have been missed: nothing holds until it is reached again.
    pub fn lost(&self, server: usize) {
        self.reached.lock().unwrap().remove(&server);
    }

    /// Whether `server` was reached within [`LEASE`]; renews the proof in the background when
    /// it is getting old.
    pub fn holds(&self, server: usize) -> bool {
        let age = self.reached.lock().unwrap().get(&server).map(|at| at.elapsed());
        let Some(age) = age else { return false };
        if age > LEASE / 4 && self.renewing.lock().unwrap().insert(server) {
            let (client, reached, renewing) = (self.client.clone(), self.reached.clone(), self.renewing.clone());
            self.runtime.spawn(async move {
                let sent = Instant::now();
                if client.call(server, StatFs).await.is_ok() {
                    note_reached(&reached, server, sent);
                }
                renewing.lock().unwrap().remove(&server);
            });
        }
        age < LEASE
    }
}

fn note_reached(reached: &Mutex<HashMap<usize, Instant>>, server: usize, sent: Instant) {
    let mut reached = reached.lock().unwrap();
    let at = reached.entry(server).or_insert(sent);
    *at = (*at).max(sent);
}
