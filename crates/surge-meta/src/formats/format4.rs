//! The journal records of format 4 (`surge-meta 4`), as the release before files' data reach
//! (`InodeState::data_end`) wrote them: read through these types and converted (every file
//! then reaches no further than its size: what lay past it is left to `surge fsck`). Frozen,
//! like [`super::format3`] and the ones before it, which convert through it.

use serde::{Deserialize, Serialize};

use surge_proto::Ino;

use crate::{BodyState, EntryState, StoredAttr, WorkflowChange, XattrState};

/// Format 4's inode state: this format's without the data reach.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct InodeState {
    pub attr: StoredAttr,
    pub body: BodyState,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub next_local: u64,
    pub inodes: Vec<InodeState>,
    pub removed: Vec<Ino>,
    pub entries: Vec<EntryState>,
    pub xattrs: Vec<XattrState>,
    pub workflow: Vec<WorkflowChange>,
}

impl From<InodeState> for crate::InodeState {
    fn from(old: InodeState) -> crate::InodeState {
        crate::InodeState { attr: old.attr, body: old.body, data_end: 0 }
    }
}

impl From<Record> for crate::Record {
    fn from(old: Record) -> crate::Record {
        crate::Record {
            next_local: old.next_local,
            inodes: old.inodes.into_iter().map(Into::into).collect(),
            removed: old.removed,
            entries: old.entries,
            xattrs: old.xattrs,
            workflow: old.workflow,
        }
    }
}

/// A current inode state as format 4 wrote it (tests write older directories with it).
#[cfg(test)]
impl From<crate::InodeState> for InodeState {
    fn from(new: crate::InodeState) -> InodeState {
        assert_eq!(new.data_end, 0, "format 4 kept no data reach");
        InodeState { attr: new.attr, body: new.body }
    }
}

/// The same record as format 4 wrote it (tests write older directories with it).
#[cfg(test)]
impl From<crate::Record> for Record {
    fn from(new: crate::Record) -> Record {
        Record {
            next_local: new.next_local,
            inodes: new.inodes.into_iter().map(Into::into).collect(),
            removed: new.removed,
            entries: new.entries,
            xattrs: new.xattrs,
            workflow: new.workflow,
        }
    }
}
