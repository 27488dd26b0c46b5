//! Files this share ended whose data may still be on the servers: the home of a file keeps
//! it here, journaled, from the step that ends it (its last name gone with no handle open, or
//! its last handle closed after that) until a keeper beside this server reports its data
//! purged on every server that can hold some. The client that ended the file purges at once,
//! as ever, so room comes back at once; this list is what purges it also when that client
//! dies first, or a server holding some data is away for longer than the client tries, or
//! this server restarts meanwhile. A purge is idempotent, so one done twice costs a message.
//!
//! The keeper asks only for entries listed a while (its grace, `surge_client::purges`), so it
//! finds most files purged already; a listed number is not given to a new file (a number for
//! a node-local file comes round after 2^32 allocations).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use surge_proto::Ino;

use crate::model::MetaStore;
use crate::records::WorkflowChange;

/// One ended file's data still to be purged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PurgeDue {
    /// How far its data may reach on the servers ([`crate::model::Inode::data_reach`]).
    pub(crate) reach: u64,
    /// Since when (this run: a restart starts the grace again).
    pub(crate) since: Instant,
}

/// A change of the list, as the journal keeps it. (Variants may only be appended.)
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum PurgeChange {
    /// File `ino` ended; its data may reach `reach` bytes.
    Due { ino: Ino, reach: u64 },
    /// Its data is purged everywhere.
    Done { ino: Ino },
}

impl MetaStore {
    /// File `ino`, whose data may reach `reach`, ended here.
    pub(crate) fn purge_due(&mut self, ino: Ino, reach: u64) {
        self.purges.insert(ino, PurgeDue { reach, since: Instant::now() });
        self.purge_changed(PurgeChange::Due { ino, reach });
    }

    /// Up to `limit` ended files listed for at least `grace`, with how far their data may
    /// reach, oldest numbers first.
    pub fn purges_due(&self, grace: Duration, limit: usize) -> Vec<(Ino, u64)> {
        self.purges.iter().filter(|(_, due)| due.since.elapsed() >= grace).take(limit).map(|(&ino, due)| (ino, due.reach)).collect()
    }

    /// Whether `ino` is listed (its number is not given out again meanwhile).
    pub(crate) fn purge_pending(&self, ino: Ino) -> bool {
        self.purges.contains_key(&ino)
    }

    /// The keeper purged `ino`'s data everywhere.
    pub fn purged(&mut self, ino: Ino) {
        if self.purges.remove(&ino).is_some() {
            self.purge_changed(PurgeChange::Done { ino });
        }
    }

    /// How many ended files are listed.
    pub fn purges_listed(&self) -> usize {
        self.purges.len()
    }

    fn purge_changed(&mut self, change: PurgeChange) {
        if let Some(changes) = self.changes.as_mut() {
            changes.workflow.push(WorkflowChange::Purge(change));
        }
    }

    /// Replays a change read from the journal.
    pub(crate) fn restore_purge(&mut self, change: PurgeChange) {
        match change {
            PurgeChange::Due { ino, reach } => {
                self.purges.insert(ino, PurgeDue { reach, since: Instant::now() });
            }
            PurgeChange::Done { ino } => {
                self.purges.remove(&ino);
            }
        }
    }

    /// The list, as a snapshot keeps it.
    pub(crate) fn all_purges(&self) -> impl Iterator<Item = PurgeChange> + '_ {
        self.purges.iter().map(|(&ino, due)| PurgeChange::Due { ino, reach: due.reach })
    }
}

/// The listed files, by number.
pub(crate) type Purges = BTreeMap<Ino, PurgeDue>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::file;
    use surge_proto::ROOT_INO;

    /// A file's last unlink lists it; the list survives the journal (records replayed in order
    /// rebuild it, a snapshot holds it) until the keeper reports it purged.
    #[test]
    fn an_ended_file_is_listed_until_reported_purged_and_the_journal_keeps_the_list() {
        let mut s = MetaStore::new(0, 0, 0);
        s.track_changes();
        let f = file(&mut s, ROOT_INO, "f");
        s.commit(f, Some(5000), None, false, false).unwrap();
        let kept = file(&mut s, ROOT_INO, "kept");
        let mut records = vec![s.take_changes()];
        assert!(s.unlink(ROOT_INO, "f").unwrap().purge);
        records.push(s.take_changes());
        assert_eq!(s.purges_due(Duration::ZERO, 10), vec![(f, 5000)]);
        assert!(s.purges_due(Duration::from_secs(30), 10).is_empty(), "handed out before its grace");

        let mut replayed = MetaStore::new(0, 0, 0);
        for record in records.clone() {
            replayed.apply(record).unwrap();
        }
        assert_eq!(replayed.purges_due(Duration::ZERO, 10), vec![(f, 5000)]);
        let mut from_snapshot = MetaStore::new(0, 0, 0);
        for record in s.snapshot().split() {
            from_snapshot.apply(record).unwrap();
        }
        assert_eq!(from_snapshot.purges_due(Duration::ZERO, 10), vec![(f, 5000)]);

        s.purged(f);
        records.push(s.take_changes());
        assert!(s.purges_due(Duration::ZERO, 10).is_empty());
        let mut replayed = MetaStore::new(0, 0, 0);
        for record in records {
            replayed.apply(record).unwrap();
        }
        assert!(replayed.purges_due(Duration::ZERO, 10).is_empty());
        assert_eq!(replayed.lookup(ROOT_INO, "kept").unwrap().ino, kept);
    }
}
