//! The store as journal records, and back: what the steps changed since the journal last asked
//! ([`MetaStore::take_changes`]), everything ([`MetaStore::snapshot`]), and records applied to
//! a store at start ([`MetaStore::apply`], then [`MetaStore::settle`]).
//!
//! A record holds the *state*, after a step, of what the step changed (an inode, a name, an
//! extended attribute, a directory's workflow state), not the step: applied in order to an
//! empty store, the records (a snapshot is a few large ones) rebuild the namespace share, and
//! records applied again over a store that already holds them change nothing (a crash between
//! a fold's snapshot and its emptying of the journal replays them so). What a restart does not
//! keep is not recorded: open handles, rename locks, the name a file was last given (replaying
//! the names sets it again).
//!
//! These types are the journal's format ([`crate::journal::FORMAT`]): enum variants may only be
//! appended, and any other change of a type is a new format, whose predecessor's types then go
//! to [`crate::formats`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use surge_proto::placement::DirLayout;
use surge_proto::{Attr, FileKind, Ino, Timestamp};

use crate::delegated::DelegationChange;
use crate::model::{Body, Dir, Entry, Inode, MetaStore};
use crate::workflow::groups::GroupChange;
use crate::workflow::publications::PublicationState;
use crate::workflow::retention::RetentionChange;

/// Inodes, directory entries and extended attributes changed since the journal last took
/// them.
#[derive(Default)]
pub(crate) struct Changes {
    pub(crate) inodes: BTreeSet<Ino>,
    pub(crate) entries: BTreeSet<(Ino, String)>,
    pub(crate) xattrs: BTreeSet<(Ino, String)>,
    /// Publications, in the order they were made.
    pub(crate) workflow: Vec<WorkflowChange>,
    /// Consumer groups changed, by directory and name.
    pub(crate) groups: BTreeSet<(Ino, String)>,
    /// Directories whose retention policy changed.
    pub(crate) retentions: BTreeSet<Ino>,
}

/// What the journal keeps of an inode: everything but a directory's entries and its extended
/// attributes (each kept one by one) and the open handles (which a restart does not carry
/// over).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct InodeState {
    pub attr: StoredAttr,
    pub body: BodyState,
    /// How far a file's data files may reach past its size ([`Inode::data_end`]).
    pub data_end: u64,
}

/// What the journal keeps of an inode's attributes: [`Attr`] without the allocation, which
/// the servers' data files say and a restart measures again. Every format so far stores
/// exactly these fields in this order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StoredAttr {
    pub ino: Ino,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

impl From<&Attr> for StoredAttr {
    fn from(a: &Attr) -> StoredAttr {
        StoredAttr {
            ino: a.ino,
            kind: a.kind,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            nlink: a.nlink,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

impl From<StoredAttr> for Attr {
    /// Only regular files have data files; theirs are measured when next asked for.
    fn from(a: StoredAttr) -> Attr {
        let blocks = (a.kind != FileKind::File).then_some(0);
        Attr {
            ino: a.ino,
            kind: a.kind,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            nlink: a.nlink,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            blocks,
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum BodyState {
    File,
    Symlink(String),
    Dir { parent: Ino, subdirs: u32, retired: bool, layout: DirLayout },
}

impl BodyState {
    /// Whether an inode of kind `kind` has a body of this form.
    fn holds(&self, kind: FileKind) -> bool {
        match self {
            BodyState::Dir { .. } => kind == FileKind::Dir,
            BodyState::Symlink(_) => kind == FileKind::Symlink,
            BodyState::File => !matches!(kind, FileKind::Dir | FileKind::Symlink),
        }
    }
}

/// A change of one name: what `dir/name` names now (None: nothing).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct EntryState {
    pub dir: Ino,
    pub name: String,
    pub target: Option<(Ino, FileKind)>,
}

/// A change of one extended attribute of an inode: its value now (an ACL in its xattr form;
/// None: removed). Kept apart from the inode's state so that a step that changes the inode
/// does not write all its attributes again, nor a step that sets one all the others.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct XattrState {
    pub ino: Ino,
    pub name: String,
    pub value: Option<Vec<u8>>,
}

/// One journal record: the state, after a step, of what the step changed. Applied in order to
/// an empty store, the records (a snapshot is one big record) rebuild the namespace share.
/// (Its layout is the journal's format, [`crate::journal::FORMAT`]; [`crate::formats`] reads
/// the records of the earlier ones.)
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub next_local: u64,
    pub inodes: Vec<InodeState>,
    pub removed: Vec<Ino>,
    pub entries: Vec<EntryState>,
    pub xattrs: Vec<XattrState>,
    /// Directories' publications, in the order they were made, then their consumer groups'
    /// states ([`crate::workflow`]).
    pub workflow: Vec<WorkflowChange>,
}

/// A change of a directory's workflow state. (Variants may only be appended: records of
/// this format must read alike.)
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum WorkflowChange {
    Published(PublicationState),
    Group(GroupChange),
    Retention(RetentionChange),
    Delegation(DelegationChange),
    Purge(crate::purges::PurgeChange),
}

/// Items per record when one is written as several ([`Record::split`]), each record far
/// below the 4 GiB its frame's length can say: an inode's state is at most a few KiB (a
/// symlink's target), an entry a few hundred bytes, an attribute 64 KiB and its name.
const INODES_PER_RECORD: usize = 65536;

const ENTRIES_PER_RECORD: usize = 65536;

const XATTRS_PER_RECORD: usize = 1024;

const WORKFLOW_PER_RECORD: usize = 4096;

impl Record {
    pub fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.removed.is_empty() && self.entries.is_empty() && self.xattrs.is_empty() && self.workflow.is_empty()
    }

    /// The same changes as several records, applied one after the other: inodes first, then
    /// names, attributes, publications and removals (each needs what comes before it), each small enough
    /// for a journal frame. How a snapshot is written: a share whose inodes hold their 256 KiB
    /// of attributes each would not fit one. At least one record, which keeps `next_local`.
    pub fn split(self) -> Vec<Record> {
        let next_local = self.next_local;
        let piece = || Record { next_local, ..Record::default() };
        let mut pieces: Vec<Record> = Vec::new();
        pieces.extend(self.inodes.chunks(INODES_PER_RECORD).map(|inodes| Record { inodes: inodes.to_vec(), ..piece() }));
        pieces.extend(self.entries.chunks(ENTRIES_PER_RECORD).map(|entries| Record { entries: entries.to_vec(), ..piece() }));
        pieces.extend(self.xattrs.chunks(XATTRS_PER_RECORD).map(|xattrs| Record { xattrs: xattrs.to_vec(), ..piece() }));
        pieces.extend(self.workflow.chunks(WORKFLOW_PER_RECORD).map(|workflow| Record { workflow: workflow.to_vec(), ..piece() }));
        pieces.push(Record { removed: self.removed, ..piece() });
        pieces
    }
}

impl MetaStore {
    pub(crate) fn changed(&mut self, ino: Ino) {
        if let Some(changes) = self.changes.as_mut() {
            changes.inodes.insert(ino);
        }
    }

    pub(crate) fn changed_xattr(&mut self, ino: Ino, name: &str) {
        if let Some(changes) = self.changes.as_mut() {
            changes.xattrs.insert((ino, name.to_string()));
        }
    }

    pub(crate) fn changed_entry(&mut self, dir: Ino, name: &str) {
        if let Some(changes) = self.changes.as_mut() {
            changes.entries.insert((dir, name.to_string()));
        }
    }

    /// From now on, changes are kept for [`MetaStore::take_changes`].
    pub fn track_changes(&mut self) {
        self.changes.get_or_insert_with(Changes::default);
    }

    fn state_of(&self, ino: Ino) -> Option<InodeState> {
        let inode = self.inodes.get(&ino)?;
        let body = match &inode.body {
            Body::File => BodyState::File,
            Body::Symlink(target) => BodyState::Symlink(target.clone()),
            Body::Dir(dir) => BodyState::Dir { parent: dir.parent, subdirs: dir.subdirs, retired: dir.retired, layout: dir.layout },
        };
        Some(InodeState { attr: StoredAttr::from(&inode.attr), body, data_end: inode.data_end })
    }

    /// The state of what changed since the last call (an empty record: nothing did).
    pub fn take_changes(&mut self) -> Record {
        let Some(changes) = self.changes.as_mut().map(std::mem::take) else { return Record::default() };
        let mut record = Record { next_local: self.next_local, ..Record::default() };
        for ino in changes.inodes {
            match self.state_of(ino) {
                Some(state) => record.inodes.push(state),
                None => record.removed.push(ino),
            }
        }
        for (dir, name) in changes.entries {
            let target = match self.inodes.get(&dir).map(|i| &i.body) {
                Some(Body::Dir(d)) => d.entries.get(&name).map(|e| (e.ino, e.kind)),
                _ => None,
            };
            record.entries.push(EntryState { dir, name, target });
        }
        for (ino, name) in changes.xattrs {
            // An inode that went has taken its attributes with it (its removal says so).
            if let Some(inode) = self.inodes.get(&ino) {
                let value = inode.xattrs.as_ref().and_then(|x| x.get(&name));
                record.xattrs.push(XattrState { ino, name, value });
            }
        }
        record.workflow = changes.workflow;
        for (dir, name) in changes.groups {
            record.workflow.push(WorkflowChange::Group(self.group_change(dir, name)));
        }
        for dir in changes.retentions {
            record.workflow.push(WorkflowChange::Retention(self.retention_change(dir)));
        }
        record
    }

    /// Everything, as one record: a snapshot.
    pub fn snapshot(&self) -> Record {
        let mut record = Record { next_local: self.next_local, ..Record::default() };
        for (&ino, inode) in &self.inodes {
            record.inodes.extend(self.state_of(ino));
            if let Body::Dir(dir) = &inode.body {
                for (name, e) in &dir.entries {
                    record.entries.push(EntryState { dir: ino, name: name.clone(), target: Some((e.ino, e.kind)) });
                }
            }
            for (name, value) in inode.xattrs.iter().flat_map(|x| x.all()) {
                record.xattrs.push(XattrState { ino, name: name.to_string(), value: Some(value) });
            }
        }
        record.workflow.extend(self.all_publications().map(WorkflowChange::Published));
        record.workflow.extend(self.all_groups().map(WorkflowChange::Group));
        record.workflow.extend(self.all_retentions().map(WorkflowChange::Retention));
        record.workflow.extend(self.all_delegations().map(WorkflowChange::Delegation));
        record.workflow.extend(self.all_purges().map(WorkflowChange::Purge));
        record
    }

    /// Applies a record (replaying the journal at start). Fails only on an attribute whose
    /// value cannot be what was written (an ACL that does not read).
    pub fn apply(&mut self, record: Record) -> std::result::Result<(), String> {
        self.next_local = self.next_local.max(record.next_local);
        for state in record.inodes {
            let ino = state.attr.ino;
            // No step writes an inode whose kind is not its body's, nor makes the root
            // anything but a directory: such a part of a record is wrong (replayed, a root of
            // kind File with a directory's body would go at the next start as an orphan).
            if !state.body.holds(state.attr.kind) || (self.is_root(ino) && state.attr.kind != FileKind::Dir) {
                tracing::error!(ino, kind = ?state.attr.kind, "a metadata record holds an inode whose kind does not fit: that part is not replayed");
                continue;
            }
            // What the inode's state leaves out stays: a directory's entries, the attributes,
            // the name.
            let (entries, xattrs, named) = match self.inodes.remove(&ino) {
                Some(Inode { body: Body::Dir(dir), xattrs, named, .. }) => (dir.entries, xattrs, named),
                Some(inode) => (BTreeMap::new(), inode.xattrs, inode.named),
                None => (BTreeMap::new(), None, None),
            };
            let body = match state.body {
                BodyState::File => Body::File,
                BodyState::Symlink(target) => Body::Symlink(target),
                BodyState::Dir { parent, subdirs, retired, layout } => Body::Dir(Dir { parent, entries, subdirs, retired, layout }),
            };
            if !matches!(body, Body::Dir(_)) {
                // Only a directory has a publication log (a record may turn a number that was
                // a directory's into a file's, as a removal and a reuse would).
                self.publications.remove(&ino);
            }
            self.inodes.insert(ino, Inode { xattrs, named, data_end: state.data_end, ..Inode::new(state.attr.into(), body) });
        }
        for e in record.entries {
            if let Some(Inode { body: Body::Dir(dir), .. }) = self.inodes.get_mut(&e.dir) {
                let old = match e.target {
                    Some((ino, kind)) => dir.entries.insert(e.name.clone(), Entry { ino, kind, locked_until: None }),
                    None => dir.entries.remove(&e.name),
                };
                if let Some(old) = old {
                    self.unname(old.ino, e.dir, &e.name);
                }
                if let Some((ino, _)) = e.target {
                    self.name(ino, e.dir, &e.name);
                }
            }
        }
        for x in record.xattrs {
            if let Some(inode) = self.inodes.get_mut(&x.ino) {
                let xattrs = inode.xattrs.get_or_insert_with(Box::default);
                xattrs.restore(x.name, x.value)?;
                if xattrs.is_empty() {
                    inode.xattrs = None;
                }
            }
        }
        for change in record.workflow {
            match change {
                WorkflowChange::Published(state) => self.restore_publication(state),
                WorkflowChange::Group(change) => self.restore_group(change),
                WorkflowChange::Retention(change) => self.restore_retention(change),
                WorkflowChange::Delegation(change) => self.restore_delegation(change),
                WorkflowChange::Purge(change) => self.restore_purge(change),
            }
        }
        for ino in record.removed {
            if self.is_root(ino) {
                tracing::error!("a metadata record removes the root directory: that part is not replayed");
                continue;
            }
            self.inodes.remove(&ino);
            self.publications.remove(&ino);
        }
        Ok(())
    }

    /// After replay: recounts, and drops the files that had lost their last name while a
    /// client still had them open (no client is any more); their inodes come back so that the
    /// caller purges their data here, and they are listed for the keeper to purge everywhere.
    pub fn settle(&mut self) -> Vec<Ino> {
        let orphans: Vec<Ino> =
            self.inodes.iter().filter(|(_, i)| i.attr.kind == FileKind::File && i.attr.nlink == 0).map(|(&ino, _)| ino).collect();
        for &ino in &orphans {
            // Listed, as any file ended, for the keeper to purge its data on every server.
            self.remove_inode(ino);
        }
        self.files = self.inodes.values().filter(|i| i.attr.kind != FileKind::Dir).count() as u64;
        self.dirs = self.inodes.values().filter(|i| i.attr.kind == FileKind::Dir).count() as u64;
        orphans
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::acl::{Acl, AclKind, Tag};
    use surge_proto::{AttrChanges, ErrorCode, XattrSetMode, ROOT_INO};

    /// Snapshots compared as sets (the store's maps iterate in no fixed order).
    fn canonical(mut r: Record) -> Record {
        r.inodes.sort_by_key(|i| i.attr.ino);
        r.entries.sort_by(|a, b| (a.dir, &a.name).cmp(&(b.dir, &b.name)));
        r.xattrs.sort_by(|a, b| (a.ino, &a.name).cmp(&(b.ino, &b.name)));
        r.workflow.sort_by_key(|change| match change {
            WorkflowChange::Published(p) => (0, p.dir, p.publication.cursor, String::new()),
            WorkflowChange::Group(g) => (1, g.dir, 0, g.name.clone()),
            WorkflowChange::Retention(r) => (2, r.dir, 0, String::new()),
            // A delegation's changes stay in their order (the sort is stable).
            WorkflowChange::Delegation(d) => (3, d.dir(), 0, String::new()),
            WorkflowChange::Purge(crate::purges::PurgeChange::Due { ino, .. } | crate::purges::PurgeChange::Done { ino }) => {
                (4, *ino, 0, String::new())
            }
        });
        r
    }

    /// The records taken after each step, applied in order to a new store, rebuild the same
    /// namespace share: creates, links, renames over existing names, unlinks, rmdirs, attribute
    /// changes, and a file unlinked while open (dropped when the store settles after a restart).
    #[test]
    fn journal_records_replayed_rebuild_the_store() {
        let mut s = MetaStore::new(0, 0, 0);
        s.track_changes();
        let mut journal = vec![s.take_changes()];
        let step = |s: &mut MetaStore, journal: &mut Vec<Record>| journal.push(s.take_changes());
        let a = s.make_dir_inode(ROOT_INO, 0o755, 0, 1, 1, None, DirLayout::Striped, None, None).unwrap();
        s.insert_entry(ROOT_INO, "a", a.ino, FileKind::Dir, false, None).unwrap();
        step(&mut s, &mut journal);
        for i in 0..50 {
            s.create(a.ino, &format!("f{i}"), 0o644, 0, 1, 1, true, false, None).unwrap();
            step(&mut s, &mut journal);
        }
        let kept = s.create(a.ino, "kept", 0o600, 0, 1, 1, true, true, None).unwrap();
        s.commit(kept.ino, Some(12345), Some(Timestamp { secs: 7, nanos: 8 }), true, true).unwrap();
        step(&mut s, &mut journal);
        s.rename(a.ino, "f1", ROOT_INO, "moved", false, None).unwrap();
        s.rename(a.ino, "f2", a.ino, "f3", false, None).unwrap();
        step(&mut s, &mut journal);
        s.unlink(a.ino, "f4").unwrap();
        s.symlink(ROOT_INO, "link", "a/kept", 1, 1).unwrap();
        s.setattr(kept.ino, &AttrChanges { mode: Some(0o640), ..Default::default() }).unwrap();
        step(&mut s, &mut journal);
        let open = s.create(ROOT_INO, "open-then-unlinked", 0o644, 0, 1, 1, true, true, None).unwrap();
        s.unlink(ROOT_INO, "open-then-unlinked").unwrap();
        step(&mut s, &mut journal);
        let empty = s.make_dir_inode(ROOT_INO, 0o755, 0, 1, 1, None, DirLayout::Striped, None, None).unwrap();
        s.insert_entry(ROOT_INO, "gone", empty.ino, FileKind::Dir, false, None).unwrap();
        s.rmdir(ROOT_INO, "gone").unwrap();
        step(&mut s, &mut journal);
        s.set_xattr(kept.ino, "user.kept", b"v1".to_vec(), XattrSetMode::Either).unwrap();
        s.set_xattr(kept.ino, "user.replaced", b"old".to_vec(), XattrSetMode::Either).unwrap();
        s.set_xattr(a.ino, "user.gone", b"x".to_vec(), XattrSetMode::Either).unwrap();
        step(&mut s, &mut journal);
        s.set_xattr(kept.ino, "user.replaced", b"new".to_vec(), XattrSetMode::Replace).unwrap();
        s.remove_xattr(a.ino, "user.gone").unwrap();
        let entry = |tag, perm| surge_proto::acl::Entry { tag, perm };
        let entries =
            vec![entry(Tag::UserObj, 6), entry(Tag::User(9), 6), entry(Tag::GroupObj, 4), entry(Tag::Mask, 6), entry(Tag::Other, 0)];
        s.set_acl(kept.ino, AclKind::Access, Some(Acl::new(entries).unwrap()), true).unwrap();
        s.set_acl(a.ino, AclKind::Default, Some(Acl::from_mode(0o750)), true).unwrap();
        step(&mut s, &mut journal);
        // chmod changes the ACL too: replayed, the mask is the new group bits.
        s.setattr(kept.ino, &AttrChanges { mode: Some(0o600), ..Default::default() }).unwrap();
        let inherits = s.create(a.ino, "inherits", 0o666, 0o022, 1, 1, true, false, None).unwrap();
        step(&mut s, &mut journal);
        let sizes: usize = journal.iter().map(|r| postcard::to_allocvec(r).unwrap().len()).sum();
        assert!(sizes < 64 * 1024, "records hold what changed, not the store ({sizes} bytes)");

        let mut replayed = MetaStore::new(0, 0, 0);
        for record in journal {
            replayed.apply(record).unwrap();
        }
        let orphans = replayed.settle();
        assert_eq!(orphans, vec![open.ino], "the unlinked open file goes, for its data to be purged");
        let mut expected = s;
        expected.inodes.remove(&open.ino);
        expected.purge_due(open.ino, 0);
        assert_eq!(canonical(replayed.snapshot()), canonical(expected.snapshot()), "the open one listed for its data's purge");
        assert_eq!(replayed.getattr(kept.ino).unwrap().size, 12345);
        assert_eq!(replayed.lookup(ROOT_INO, "moved").unwrap().kind, FileKind::File);
        assert_eq!(replayed.get_xattr(kept.ino, "user.kept").unwrap(), b"v1", "an inode changed after its attribute keeps it");
        assert_eq!(replayed.get_xattr(kept.ino, "user.replaced").unwrap(), b"new");
        assert_eq!(replayed.get_xattr(a.ino, "user.gone").unwrap_err().code, ErrorCode::NoData);
        assert_eq!(replayed.perms(kept.ino).unwrap().acl.and_then(|acl| acl.perm(Tag::Mask)), Some(0));
        assert_eq!(replayed.getattr(inherits.ino).unwrap().mode, 0o640, "made under the replayed default ACL");
        // The counter goes on where it was: no inode number is handed out twice.
        let next = replayed.create(ROOT_INO, "new", 0o644, 0, 0, 0, true, false, None).unwrap();
        assert!(expected.getattr(next.ino).is_err());
    }

    /// A snapshot written as several records (as the journal writes it) rebuilds the same
    /// store, each record within its bound.
    #[test]
    fn a_split_snapshot_rebuilds_the_store() {
        let mut s = MetaStore::new(0, 0, 0);
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap();
        s.insert_entry(ROOT_INO, "d", dir.ino, FileKind::Dir, false, None).unwrap();
        for i in 0..XATTRS_PER_RECORD + 10 {
            let file = s.create(dir.ino, &format!("f{i}"), 0o644, 0, 0, 0, true, false, None).unwrap();
            s.set_xattr(file.ino, "user.i", i.to_string().into_bytes(), XattrSetMode::Either).unwrap();
        }
        let pieces = s.snapshot().split();
        assert!(pieces.iter().filter(|p| !p.xattrs.is_empty()).count() >= 2, "the attributes take more than one record");
        assert!(pieces.iter().all(|p| p.xattrs.len() <= XATTRS_PER_RECORD && p.inodes.len() <= INODES_PER_RECORD));
        let mut rebuilt = MetaStore::new(0, 0, 0);
        for piece in pieces {
            rebuilt.apply(piece).unwrap();
        }
        assert_eq!(canonical(rebuilt.snapshot()), canonical(s.snapshot()));
        let empty = MetaStore::new(3, 0, 0);
        assert_eq!(empty.snapshot().split().len(), 1, "a share without inodes keeps its counter all the same");
    }
}
