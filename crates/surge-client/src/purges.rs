//! The purge keeper's round: the data of files a server ended and still lists
//! (`surge_meta::purges` on the server's side) purged on every server that can hold some,
//! and reported done to that server, which then forgets them. The client that ends a file
//! purges its data at once; what a keeper purges is what that client left (it died first, or
//! a server holding some was away longer than it tried), so a round usually finds the data
//! gone already, and a purge is idempotent. The daemon runs a round beside each server every
//! few seconds ([`PURGE_GRACE`] after each file ended).

use std::time::Duration;

use surge_proto::admin::{PurgeDue, Purged, PurgesDue};
use surge_proto::data::PurgeData;

use crate::error::Result;
use crate::Client;

/// How long a server holds an ended file back from its keeper: long enough for the client
/// that ended it to have purged its data.
pub const PURGE_GRACE: Duration = Duration::from_secs(30);
/// Files asked for per round.
const PER_ROUND: u32 = 4096;

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PurgeRound {
    /// Ended files the server listed.
    pub listed: usize,
    /// Of those, purged everywhere and reported done.
    pub purged: usize,
}

impl Client {
    /// One keeper's round for server `server`: its ended files listed for at least `grace`,
    /// purged, and those purged everywhere reported. A file one of whose servers cannot be
    /// reached stays listed for the next round.
    pub async fn purge_round(&self, server: usize, grace: Duration) -> Result<PurgeRound> {
        let due = self.call(server, PurgesDue { grace_ms: grace.as_millis() as u64, limit: PER_ROUND }).await?;
        let mut holders = Vec::new();
        let mut calls = Vec::new();
        for (i, PurgeDue { ino, reach, ticket }) in due.iter().enumerate() {
            for holder in self.data_holders(*ino, *reach) {
                holders.push((i, holder));
                calls.push((holder, PurgeData { ino: *ino, ticket: *ticket }));
            }
        }
        let mut whole = vec![true; due.len()];
        for (&(i, holder), outcome) in holders.iter().zip(self.send_all(calls).await) {
            if let Err(e) = outcome {
                tracing::debug!(server = holder, ino = format!("{:#x}", due[i].ino), "a listed purge waits for the next round: {e}");
                whole[i] = false;
            }
        }
        let inos: Vec<_> = due.iter().zip(&whole).filter(|(_, whole)| **whole).map(|(due, _)| due.ino).collect();
        let purged = inos.len();
        if purged > 0 {
            self.call(server, Purged { inos }).await?;
        }
        Ok(PurgeRound { listed: due.len(), purged })
    }
}
