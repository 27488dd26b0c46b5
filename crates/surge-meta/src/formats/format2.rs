//! The journal records of format 2 (`surge-meta 2`), as the release before directory layouts
//! wrote them: read through these types and converted (every directory then lays its files
//! out striped, as all did), then as format 3's ([`super::format3`]). Frozen, like
//! [`super::format1`], which builds on them.

use serde::{Deserialize, Serialize};

use surge_proto::placement::DirLayout;
use surge_proto::Ino;

use crate::StoredAttr;

use crate::{EntryState, XattrState};

/// Format 2's inode state: a directory without its layout.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct InodeState {
    pub attr: StoredAttr,
    pub body: BodyState,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum BodyState {
    File,
    Symlink(String),
    Dir { parent: Ino, subdirs: u32, retired: bool },
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub next_local: u64,
    pub inodes: Vec<InodeState>,
    pub removed: Vec<Ino>,
    pub entries: Vec<EntryState>,
    pub xattrs: Vec<XattrState>,
}

impl From<InodeState> for super::format4::InodeState {
    fn from(old: InodeState) -> super::format4::InodeState {
        let body = match old.body {
            BodyState::File => crate::BodyState::File,
            BodyState::Symlink(target) => crate::BodyState::Symlink(target),
            BodyState::Dir { parent, subdirs, retired } => crate::BodyState::Dir { parent, subdirs, retired, layout: DirLayout::Striped },
        };
        super::format4::InodeState { attr: old.attr, body }
    }
}

impl From<Record> for crate::Record {
    fn from(old: Record) -> crate::Record {
        super::format3::Record {
            next_local: old.next_local,
            inodes: old.inodes.into_iter().map(Into::into).collect(),
            removed: old.removed,
            entries: old.entries,
            xattrs: old.xattrs,
        }
        .into()
    }
}

/// The same record as format 2 wrote it (tests write older directories with it).
#[cfg(test)]
impl From<crate::Record> for Record {
    fn from(new: crate::Record) -> Record {
        let inodes = new
            .inodes
            .into_iter()
            .map(|state| {
                let body = match state.body {
                    crate::BodyState::File => BodyState::File,
                    crate::BodyState::Symlink(target) => BodyState::Symlink(target),
                    crate::BodyState::Dir { parent, subdirs, retired, layout } => {
                        assert_eq!(layout, DirLayout::Striped, "format 2 had no other layout");
                        BodyState::Dir { parent, subdirs, retired }
                    }
                };
                InodeState { attr: state.attr, body }
            })
            .collect();
        Record { next_local: new.next_local, inodes, removed: new.removed, entries: new.entries, xattrs: new.xattrs }
    }
}
