//! The journal records of format 3 (`surge-meta 3`), as the release before publication logs
//! wrote them: read through this type and converted (no directory had published anything).
//! Frozen, like [`super::format2`] and [`super::format1`], which convert through it; it
//! converts through [`super::format4`].

use serde::{Deserialize, Serialize};

use surge_proto::Ino;

use super::format4::{self, InodeState};
use crate::{EntryState, XattrState};

/// Format 3's record: this format's without publications.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub next_local: u64,
    pub inodes: Vec<InodeState>,
    pub removed: Vec<Ino>,
    pub entries: Vec<EntryState>,
    pub xattrs: Vec<XattrState>,
}

impl From<Record> for crate::Record {
    fn from(old: Record) -> crate::Record {
        format4::Record {
            next_local: old.next_local,
            inodes: old.inodes,
            removed: old.removed,
            entries: old.entries,
            xattrs: old.xattrs,
            workflow: Vec::new(),
        }
        .into()
    }
}

/// The same record as format 3 wrote it (tests write older directories with it).
#[cfg(test)]
impl From<crate::Record> for Record {
    fn from(new: crate::Record) -> Record {
        assert!(new.workflow.is_empty(), "format 3 had no publications");
        let inodes = new.inodes.into_iter().map(Into::into).collect();
        Record { next_local: new.next_local, inodes, removed: new.removed, entries: new.entries, xattrs: new.xattrs }
    }
}
