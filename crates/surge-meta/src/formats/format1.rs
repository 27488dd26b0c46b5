//! The journal records of format 1 (`surge-meta 1`), as the release before extended
//! attributes wrote them: read through these types and converted, so that a server comes back
//! with its namespace share on a directory the previous release wrote. Frozen: its inodes are
//! format 2's ([`super::format2`]); the entry and attribute types are the current ones, which
//! must read format 1's bytes alike (new enum variants only appended).

use serde::{Deserialize, Serialize};

use surge_proto::Ino;

use super::format2::{self, InodeState};
use crate::EntryState;

/// Format 1's record: format 2's without extended attributes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub next_local: u64,
    pub inodes: Vec<InodeState>,
    pub removed: Vec<Ino>,
    pub entries: Vec<EntryState>,
}

impl From<Record> for crate::Record {
    fn from(old: Record) -> crate::Record {
        format2::Record { next_local: old.next_local, inodes: old.inodes, removed: old.removed, entries: old.entries, xattrs: Vec::new() }
            .into()
    }
}
