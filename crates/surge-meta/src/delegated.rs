//! Delegations of this share's directories, as the store sees them: whether a directory may be
//! delegated, the inode numbers set aside for a holder's creates, and what the journal keeps of
//! the delegations granted (docs/delegation.md, rule 5): for each unended one, its token, the
//! inode numbers its grant set aside and the number of the last step of its holder's log
//! applied here. A write-back step and its number go into
//! the same journal record, so after a crash of this server the holder learns exactly where
//! its log must go on from ([`surge_proto::namespace::Reclaim`]): nothing applied twice,
//! nothing the holder answered lost.
//!
//! Who holds a delegation now (a connection, or nobody yet after a restart) is not kept:
//! that is the server's (its `delegation` module), rebuilt from these marks when the share opens.

use serde::{Deserialize, Serialize};
use surge_proto::placement::DirLayout;
use surge_proto::{ino, ErrorCode, Ino};

use crate::error::Result;
use crate::model::{fail, MetaStore};

/// A delegation as the journal keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct DelegationMark {
    pub dir: Ino,
    pub token: Ino,
    pub inos: Vec<Ino>,
    /// The number of the last step of the holder's log applied here (0: none yet).
    pub applied: u64,
}

/// A change of a delegation, as journaled. (Variants may only be appended.)
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum DelegationChange {
    Granted {
        dir: Ino,
        token: Ino,
        inos: Vec<Ino>,
    },
    Applied {
        dir: Ino,
        token: Ino,
        seq: u64,
    },
    Ended {
        dir: Ino,
        token: Ino,
    },
    /// More numbers set aside for the delegation's creates (`surge_proto::namespace::Renew`).
    Renewed {
        dir: Ino,
        token: Ino,
        inos: Vec<Ino>,
    },
}

impl DelegationChange {
    /// The delegated directory.
    pub fn dir(&self) -> Ino {
        match self {
            DelegationChange::Granted { dir, .. }
            | DelegationChange::Applied { dir, .. }
            | DelegationChange::Ended { dir, .. }
            | DelegationChange::Renewed { dir, .. } => *dir,
        }
    }
}

impl MetaStore {
    /// Whether directory `dir` may be delegated (docs/delegation.md, rule 1): a directory here,
    /// not being removed, whose steps need no check the holder could not make itself — no
    /// default ACL, not sticky, no retention policy, no consumer group.
    pub fn delegable(&self, dir: Ino) -> Result<()> {
        let refuse = |why: &str| fail(ErrorCode::NotPermitted, format!("directory {dir:#x} cannot be delegated: {why}"));
        let d = self.dir(dir)?;
        if d.retired {
            return refuse("it is being removed");
        }
        if self.default_acl_of(dir).is_some() {
            return refuse("it has a default ACL");
        }
        if self.inode(dir)?.attr.mode & libc::S_ISVTX != 0 {
            return refuse("it is sticky");
        }
        if let Some(log) = self.publications.get(&dir) {
            if log.retention.is_some() || !log.groups.is_empty() {
                return refuse("it has a retention policy or consumer groups");
            }
        }
        Ok(())
    }

    /// Sets `count` inode numbers aside for a delegation's creates in `dir` (placed on
    /// `place_on` in a node-local directory, as [`MetaStore::create`] does): the counter moves
    /// past them, and the journal keeps the counter, so they are never handed out again.
    pub fn set_aside(&mut self, dir: Ino, count: u32, place_on: Option<usize>) -> Result<Vec<Ino>> {
        let data_server = match self.dir(dir)?.layout {
            DirLayout::NodeLocal => place_on.filter(|&s| s < ino::MAX_PLACED_SERVERS),
            DirLayout::Striped => None,
        };
        let inos = (0..count)
            .map(|_| match data_server {
                Some(server) => self.alloc_placed_ino(server),
                None => self.alloc_ino(),
            })
            .collect();
        // A record is journaled when something in it changed: the directory stands for the
        // counter, which every record carries.
        self.changed(dir);
        Ok(inos)
    }

    fn delegation_changed(&mut self, change: DelegationChange) {
        if let Some(changes) = self.changes.as_mut() {
            changes.workflow.push(crate::WorkflowChange::Delegation(change));
        }
    }

    /// Delegation `token` of `dir` was granted with `inos` set aside.
    pub fn delegation_granted(&mut self, dir: Ino, token: Ino, inos: Vec<Ino>) {
        self.delegation_changed(DelegationChange::Granted { dir, token, inos: inos.clone() });
        self.delegated.insert(dir, DelegationMark { dir, token, inos, applied: 0 });
    }

    /// Delegation `token` of `dir` was renewed with `inos` more set aside.
    pub fn delegation_renewed(&mut self, dir: Ino, token: Ino, inos: Vec<Ino>) {
        if let Some(mark) = self.delegated.get_mut(&dir).filter(|mark| mark.token == token) {
            mark.inos.extend_from_slice(&inos);
            self.delegation_changed(DelegationChange::Renewed { dir, token, inos });
        }
    }

    /// Step `seq` of delegation `token`'s log was applied (journaled with the step's changes).
    pub fn delegation_applied(&mut self, dir: Ino, token: Ino, seq: u64) {
        if let Some(mark) = self.delegated.get_mut(&dir).filter(|mark| mark.token == token) {
            mark.applied = mark.applied.max(seq);
            self.delegation_changed(DelegationChange::Applied { dir, token, seq });
        }
    }

    /// Delegation `token` of `dir` ended: nobody can reclaim it any more.
    pub fn delegation_ended(&mut self, dir: Ino, token: Ino) {
        if self.delegated.get(&dir).is_some_and(|mark| mark.token == token) {
            self.delegated.remove(&dir);
            self.delegation_changed(DelegationChange::Ended { dir, token });
        }
    }

    /// The unended delegation of `dir`, if its token is `token`.
    pub fn delegation(&self, dir: Ino, token: Ino) -> Option<&DelegationMark> {
        self.delegated.get(&dir).filter(|mark| mark.token == token)
    }

    /// Every unended delegation (what a restart makes reclaimable).
    pub fn delegations(&self) -> impl Iterator<Item = &DelegationMark> {
        self.delegated.values()
    }

    pub(super) fn restore_delegation(&mut self, change: DelegationChange) {
        match change {
            DelegationChange::Granted { dir, token, inos } => {
                self.delegated.insert(dir, DelegationMark { dir, token, inos, applied: 0 });
            }
            DelegationChange::Applied { dir, token, seq } => {
                if let Some(mark) = self.delegated.get_mut(&dir).filter(|mark| mark.token == token) {
                    mark.applied = mark.applied.max(seq);
                }
            }
            DelegationChange::Ended { dir, token } => {
                if self.delegated.get(&dir).is_some_and(|mark| mark.token == token) {
                    self.delegated.remove(&dir);
                }
            }
            DelegationChange::Renewed { dir, token, inos } => {
                if let Some(mark) = self.delegated.get_mut(&dir).filter(|mark| mark.token == token) {
                    mark.inos.extend(inos);
                }
            }
        }
    }

    /// The unended delegations as changes that rebuild them (for a snapshot).
    pub(super) fn all_delegations(&self) -> impl Iterator<Item = DelegationChange> + '_ {
        self.delegated.values().flat_map(|mark| {
            let granted = DelegationChange::Granted { dir: mark.dir, token: mark.token, inos: mark.inos.clone() };
            let applied = DelegationChange::Applied { dir: mark.dir, token: mark.token, seq: mark.applied };
            [granted, applied]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Record;
    use surge_proto::ROOT_INO;

    /// Replayed from its records (or from a snapshot), a share knows every unended delegation,
    /// its numbers (those its renewals added too) and the last step applied; an ended one is
    /// gone, and an end, a step or a renewal of an older delegation of the same directory
    /// changes nothing of a newer one.
    #[test]
    fn delegations_survive_a_replay_as_their_last_applied_step() {
        let mut store = MetaStore::new(0, 0, 0);
        store.track_changes();
        let mut records: Vec<Record> = Vec::new();
        let mut step = |store: &mut MetaStore, change: &dyn Fn(&mut MetaStore)| {
            change(store);
            records.push(store.take_changes());
        };
        step(&mut store, &|s| s.delegation_granted(ROOT_INO, 100, vec![100, 101, 102]));
        step(&mut store, &|s| s.delegation_applied(ROOT_INO, 100, 1));
        step(&mut store, &|s| s.delegation_applied(ROOT_INO, 100, 2));
        step(&mut store, &|s| s.delegation_ended(ROOT_INO, 100));
        step(&mut store, &|s| s.delegation_granted(ROOT_INO, 200, vec![200]));
        step(&mut store, &|s| s.delegation_applied(ROOT_INO, 200, 7));
        step(&mut store, &|s| s.delegation_renewed(ROOT_INO, 200, vec![300, 301]));
        // Of the ended one: nothing.
        step(&mut store, &|s| s.delegation_renewed(ROOT_INO, 100, vec![400]));
        step(&mut store, &|s| s.delegation_applied(ROOT_INO, 100, 9));
        step(&mut store, &|s| s.delegation_ended(ROOT_INO, 100));

        let expected = vec![DelegationMark { dir: ROOT_INO, token: 200, inos: vec![200, 300, 301], applied: 7 }];
        let mut replayed = MetaStore::new(0, 0, 0);
        for record in records {
            replayed.apply(record).unwrap();
        }
        assert_eq!(replayed.delegations().cloned().collect::<Vec<_>>(), expected);
        let mut from_snapshot = MetaStore::new(0, 0, 0);
        for piece in store.snapshot().split() {
            from_snapshot.apply(piece).unwrap();
        }
        assert_eq!(from_snapshot.delegations().cloned().collect::<Vec<_>>(), expected);
        assert!(from_snapshot.delegation(ROOT_INO, 100).is_none());
    }
}
