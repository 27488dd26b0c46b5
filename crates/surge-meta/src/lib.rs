//! # surge-meta — one server's share of a Surge instance's namespace
//!
//! The inodes whose number carries this server's index, and the entries of the directories
//! among them, with their extended attributes, the directories' workflow state (publication
//! logs, consumer groups, retention policies) and the delegations granted of them.
//!
//! Everything here is served from memory behind one mutex held for microseconds (the server's
//! journal keeps a copy on disk): a metadata operation is a handful of hash-map updates. Each
//! method is one atomic step of the protocol; steps that span servers are sequenced by the
//! client. This crate does no networking: it depends on the protocol crate's types only.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use std::ops::Bound;
use std::time::{Duration, Instant};

use surge_proto::ino::{self, Ino};

use crate::access::Inherited;
use crate::error::{Result, ServerError};
use surge_proto::acl::{Acl, AclKind};
use surge_proto::namespace::AllocationNote;
use surge_proto::placement::DirLayout;
use surge_proto::{
    check_name, Attr, AttrChanges, DirEntry, ErrorCode, FileKind, InodeFate, LinkOutcome, Timestamp, Unlinked, MAX_SYMLINK_LEN,
};

pub mod access;
pub mod delegated;
pub mod error;
pub mod format1;
pub mod format2;
pub mod format3;
pub mod groups;
pub mod journal;
pub mod poison_free;
pub mod publications;
pub mod retention;
mod scan;
mod xattrs;

use delegated::{DelegationChange, DelegationMark};
use groups::GroupChange;
use publications::{PublicationLog, PublicationState};
use retention::RetentionChange;
use xattrs::Xattrs;

/// How long a cross-server rename may hold its source entry before the lock is ignored
/// (the client that took it has died).
const RENAME_LOCK_TTL: Duration = Duration::from_secs(30);
/// Largest readdir page, whatever the client asks for.
const MAX_READDIR_PAGE: usize = 4096;

/// Links one inode may have (ext4's limit).
const MAX_LINKS: u32 = 65_000;
/// What a readdir page's entries may take encoded: half a frame, so that a page of 255-byte
/// names (with their attributes) always fits one (a page of 4,096 such entries would not).
const READDIR_PAGE_BYTES: usize = surge_proto::MAX_MESSAGE_LEN / 2;
/// An upper bound of an encoded entry's size beyond its name: inode, kind and attributes in
/// postcard's varints at their widest.
const ENTRY_OVERHEAD: usize = 128;

fn fail<T>(code: ErrorCode, detail: impl Into<String>) -> Result<T> {
    Err(ServerError::new(code, detail))
}

struct Entry {
    ino: Ino,
    kind: FileKind,
    /// Set while a cross-server rename moves this entry away.
    locked_until: Option<Instant>,
}

impl Entry {
    fn is_locked(&self) -> bool {
        self.locked_until.is_some_and(|t| t > Instant::now())
    }
}

struct Dir {
    parent: Ino,
    entries: BTreeMap<String, Entry>,
    subdirs: u32,
    /// An empty directory being removed by a cross-server rmdir/rename: refuses new entries.
    retired: bool,
    /// Where the files made here are put; directories made here inherit it.
    layout: DirLayout,
}

enum Body {
    File,
    Symlink(String),
    Dir(Dir),
}

struct Inode {
    attr: Attr,
    body: Body,
    /// Open handles registered by clients; an unlinked file stays until the last is released.
    opens: u32,
    /// Extended attributes and ACLs; most inodes have none, and pay a pointer for the room.
    xattrs: Option<Box<Xattrs>>,
    /// The last name this server gave the inode (directory, name), which its publications
    /// name (see [`publications`]). Not journaled: replaying the names sets it again.
    named: Option<Box<(Ino, Box<str>)>>,
}

impl Inode {
    fn new(attr: Attr, body: Body) -> Inode {
        Inode { attr, body, opens: 0, xattrs: None, named: None }
    }
}

pub struct MetaStore {
    server_index: usize,
    next_local: u64,
    inodes: HashMap<Ino, Inode>,
    files: u64,
    dirs: u64,
    /// What steps changed since the journal last took it (None: nobody journals).
    changes: Option<Changes>,
    /// Directories' publication logs.
    publications: HashMap<Ino, PublicationLog>,
    publications_made: u64,
    /// Files published by a rename or link while open here, with that publication's
    /// directory and cursor (see [`MetaStore::commit`]); forgotten when the last handle closes.
    published_while_open: HashMap<Ino, (Ino, u64)>,
    /// The unended delegations of directories of this share, by directory ([`delegated`]).
    delegated: HashMap<Ino, DelegationMark>,
}

/// Inodes, directory entries and extended attributes changed since the journal last took
/// them.
#[derive(Default)]
struct Changes {
    inodes: BTreeSet<Ino>,
    entries: BTreeSet<(Ino, String)>,
    xattrs: BTreeSet<(Ino, String)>,
    /// Publications, in the order they were made.
    workflow: Vec<WorkflowChange>,
    /// Consumer groups changed, by directory and name.
    groups: BTreeSet<(Ino, String)>,
    /// Directories whose retention policy changed.
    retentions: BTreeSet<Ino>,
}

/// What the journal keeps of an inode: everything but a directory's entries and its extended
/// attributes (each kept one by one) and the open handles (which a restart does not carry
/// over).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct InodeState {
    pub attr: StoredAttr,
    pub body: BodyState,
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
/// (Its layout is the journal's format, `surge_server::journal::FORMAT`; [`format1`],
/// [`format2`] and [`format3`] read the records of the earlier ones.)
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Record {
    pub next_local: u64,
    pub inodes: Vec<InodeState>,
    pub removed: Vec<Ino>,
    pub entries: Vec<EntryState>,
    pub xattrs: Vec<XattrState>,
    /// Directories' publications, in the order they were made, then their consumer groups'
    /// states ([`publications`], [`groups`]).
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
    /// A fresh namespace share. Server 0 also creates the root directory.
    pub fn new(server_index: usize, owner_uid: u32, owner_gid: u32) -> Self {
        Self::with_root_layout(server_index, owner_uid, owner_gid, DirLayout::default())
    }

    /// A fresh namespace share whose root (on server 0) lays files out `root_layout`: the
    /// instance's default. (A share replayed from its journal has the root's own.)
    pub fn with_root_layout(server_index: usize, owner_uid: u32, owner_gid: u32, root_layout: DirLayout) -> Self {
        let mut store = MetaStore {
            server_index,
            next_local: 1,
            inodes: HashMap::new(),
            files: 0,
            dirs: 0,
            changes: None,
            publications: HashMap::new(),
            publications_made: 0,
            published_while_open: HashMap::new(),
            delegated: HashMap::new(),
        };
        if server_index == 0 {
            let root = store.alloc_ino();
            debug_assert_eq!(root, ino::ROOT_INO);
            let dir = Dir { parent: root, entries: BTreeMap::new(), subdirs: 0, retired: false, layout: root_layout };
            store.insert_inode(root, FileKind::Dir, access::inherit(FileKind::Dir, 0o755, 0, None), owner_uid, owner_gid, Body::Dir(dir));
        }
        store
    }

    pub fn counts(&self) -> (u64, u64, u64) {
        (self.inodes.len() as u64, self.files, self.dirs)
    }

    // ------------------------------------------------------------ journal

    fn changed(&mut self, ino: Ino) {
        if let Some(changes) = self.changes.as_mut() {
            changes.inodes.insert(ino);
        }
    }

    fn changed_xattr(&mut self, ino: Ino, name: &str) {
        if let Some(changes) = self.changes.as_mut() {
            changes.xattrs.insert((ino, name.to_string()));
        }
    }

    fn changed_entry(&mut self, dir: Ino, name: &str) {
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
        Some(InodeState { attr: StoredAttr::from(&inode.attr), body })
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
            self.inodes.insert(ino, Inode { xattrs, named, ..Inode::new(state.attr.into(), body) });
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
    /// caller purges their data.
    pub fn settle(&mut self) -> Vec<Ino> {
        let orphans: Vec<Ino> =
            self.inodes.iter().filter(|(_, i)| i.attr.kind == FileKind::File && i.attr.nlink == 0).map(|(&ino, _)| ino).collect();
        for ino in &orphans {
            self.inodes.remove(ino);
            self.changed(*ino);
        }
        self.files = self.inodes.values().filter(|i| i.attr.kind != FileKind::Dir).count() as u64;
        self.dirs = self.inodes.values().filter(|i| i.attr.kind == FileKind::Dir).count() as u64;
        orphans
    }

    fn alloc_ino(&mut self) -> Ino {
        let ino = ino::make(self.server_index, self.next_local);
        self.next_local += 1;
        ino
    }

    /// A number for a file whose chunks all go to `data_server`. Such numbers keep 32 bits of
    /// the counter: after 2^32 allocations they come round, and one still in use is skipped.
    fn alloc_placed_ino(&mut self, data_server: usize) -> Ino {
        loop {
            let ino = ino::make_placed(self.server_index, data_server, self.next_local);
            self.next_local += 1;
            if !self.inodes.contains_key(&ino) {
                return ino;
            }
        }
    }

    /// Whether `ino` is the instance's root directory, homed here.
    fn is_root(&self, ino: Ino) -> bool {
        self.server_index == 0 && ino == ino::ROOT_INO
    }

    fn is_local(&self, ino: Ino) -> bool {
        ino::home(ino) == self.server_index
    }

    /// A new inode, with the mode and ACLs it got (see [`access::inherit`]).
    fn insert_inode(&mut self, ino: Ino, kind: FileKind, perms: Inherited, uid: u32, gid: u32, body: Body) -> Attr {
        let now = Timestamp::now();
        let attr = Attr {
            ino,
            kind,
            mode: perms.mode & 0o7777,
            uid,
            gid,
            size: match &body {
                Body::Symlink(target) => target.len() as u64,
                _ => 0,
            },
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            atime: now,
            mtime: now,
            ctime: now,
            // Nothing written yet; a symlink's target and a directory's entries take no
            // data-file space.
            blocks: Some(0),
        };
        match kind {
            FileKind::Dir => self.dirs += 1,
            _ => self.files += 1,
        }
        self.inodes.insert(ino, Inode::new(attr.clone(), body));
        self.changed(ino);
        for (kind, acl) in [(AclKind::Access, perms.access_acl), (AclKind::Default, perms.default_acl)] {
            if let Some(acl) = acl {
                self.xattrs_mut(ino, kind.xattr_name()).expect("just inserted").set_acl(kind, Some(acl));
            }
        }
        attr
    }

    /// A directory's default ACL, which what is made in it inherits.
    pub fn default_acl_of(&self, dir: Ino) -> Option<&Acl> {
        self.inodes.get(&dir)?.xattrs.as_ref()?.acl(AclKind::Default)
    }

    /// Where the files made in `dir` are put.
    pub fn layout_of(&self, dir: Ino) -> Result<DirLayout> {
        Ok(self.dir(dir)?.layout)
    }

    /// Puts the files made in `dir` from now on `layout`; those there keep theirs.
    pub fn set_layout(&mut self, dir: Ino, layout: DirLayout) -> Result<()> {
        self.dir_mut(dir)?.layout = layout;
        self.changed(dir);
        Ok(())
    }

    fn remove_inode(&mut self, ino: Ino) {
        self.changed(ino);
        self.publications.remove(&ino);
        self.published_while_open.remove(&ino);
        if let Some(inode) = self.inodes.remove(&ino) {
            match inode.attr.kind {
                FileKind::Dir => self.dirs -= 1,
                _ => self.files -= 1,
            }
        }
    }

    fn inode(&self, ino: Ino) -> Result<&Inode> {
        match self.inodes.get(&ino) {
            Some(inode) => Ok(inode),
            None => fail(ErrorCode::NotFound, format!("inode {ino:#x} not on server {}", self.server_index)),
        }
    }

    /// The inode, to change what a restart does not keep (its open handles).
    fn inode_untracked(&mut self, ino: Ino) -> Result<&mut Inode> {
        let server = self.server_index;
        match self.inodes.get_mut(&ino) {
            Some(inode) => Ok(inode),
            None => fail(ErrorCode::NotFound, format!("inode {ino:#x} not on server {server}")),
        }
    }

    /// The inode, to change: recorded as changed for the journal.
    fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode> {
        self.changed(ino);
        self.inode_untracked(ino)
    }

    /// Whether `ino` is a directory here, retired or not (what a directory's workflow state
    /// is replayed onto, in whatever order the records come).
    fn holds_dir(&self, ino: Ino) -> bool {
        matches!(self.inodes.get(&ino).map(|inode| &inode.body), Some(Body::Dir(_)))
    }

    fn dir(&self, ino: Ino) -> Result<&Dir> {
        match &self.inode(ino)?.body {
            Body::Dir(dir) if !dir.retired => Ok(dir),
            Body::Dir(_) => fail(ErrorCode::NotFound, "directory was removed"),
            _ => fail(ErrorCode::NotDir, format!("inode {ino:#x} is not a directory")),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut Dir> {
        match &mut self.inode_mut(ino)?.body {
            Body::Dir(dir) if !dir.retired => Ok(dir),
            Body::Dir(_) => fail(ErrorCode::NotFound, "directory was removed"),
            _ => fail(ErrorCode::NotDir, format!("inode {ino:#x} is not a directory")),
        }
    }

    /// Marks a directory's contents as changed and keeps its link count right
    /// (2 + subdirectories, which `find` relies on).
    fn touch_dir(&mut self, ino: Ino) {
        self.changed(ino);
        if let Some(inode) = self.inodes.get_mut(&ino) {
            let now = Timestamp::now();
            inode.attr.mtime = now;
            inode.attr.ctime = now;
            if let Body::Dir(dir) = &inode.body {
                inode.attr.nlink = 2 + dir.subdirs;
            }
        }
    }

    fn entry_of(&self, parent: Ino, name: &str) -> Result<(Ino, FileKind, bool)> {
        match self.dir(parent)?.entries.get(name) {
            Some(e) => Ok((e.ino, e.kind, e.is_locked())),
            None => fail(ErrorCode::NotFound, format!("no entry '{name}'")),
        }
    }

    fn dir_entry(&self, name: &str, ino: Ino, kind: FileKind) -> DirEntry {
        DirEntry { name: name.to_string(), ino, kind, attr: self.inodes.get(&ino).map(|i| i.attr.clone()) }
    }

    /// `ino` (if homed here) was given the name `dir/name`.
    fn name(&mut self, ino: Ino, dir: Ino, name: &str) {
        if let Some(inode) = self.inodes.get_mut(&ino).filter(|inode| inode.attr.kind == FileKind::File) {
            inode.named = Some(Box::new((dir, name.into())));
        }
    }

    /// `ino` (if homed here) lost the name `dir/name`.
    fn unname(&mut self, ino: Ino, dir: Ino, name: &str) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            if inode.named.as_deref().is_some_and(|(d, n)| *d == dir && &**n == name) {
                inode.named = None;
            }
        }
    }

    fn link_entry(&mut self, parent: Ino, name: &str, ino: Ino, kind: FileKind) -> Result<()> {
        let dir = self.dir_mut(parent)?;
        dir.entries.insert(name.to_string(), Entry { ino, kind, locked_until: None });
        self.name(ino, parent, name);
        self.changed_entry(parent, name);
        let dir = self.dir_mut(parent)?;
        if kind == FileKind::Dir {
            dir.subdirs += 1;
        }
        self.touch_dir(parent);
        Ok(())
    }

    fn unlink_entry(&mut self, parent: Ino, name: &str) -> Result<Entry> {
        let dir = self.dir_mut(parent)?;
        let Some(entry) = dir.entries.remove(name) else {
            return fail(ErrorCode::NotFound, format!("no entry '{name}'"));
        };
        self.unname(entry.ino, parent, name);
        self.changed_entry(parent, name);
        let dir = self.dir_mut(parent)?;
        if entry.kind == FileKind::Dir {
            dir.subdirs -= 1;
        }
        self.touch_dir(parent);
        Ok(entry)
    }

    /// Drops one link of a local non-directory inode; it disappears once no name and no open
    /// handle is left. The caller purges its data when `purge` is set.
    fn drop_link_local(&mut self, ino: Ino) -> Result<Unlinked> {
        let inode = self.inode_mut(ino)?;
        inode.attr.nlink = inode.attr.nlink.saturating_sub(1);
        inode.attr.ctime = Timestamp::now();
        let (kind, size) = (inode.attr.kind, inode.attr.size);
        let gone = inode.attr.nlink == 0 && inode.opens == 0;
        if gone {
            self.remove_inode(ino);
        }
        Ok(Unlinked { ino, kind, remote: false, purge: gone && kind == FileKind::File, size, ticket: None })
    }

    fn unlinked_entry(&mut self, entry: &Entry) -> Result<Unlinked> {
        if self.is_local(entry.ino) {
            self.drop_link_local(entry.ino)
        } else {
            Ok(Unlinked { ino: entry.ino, kind: entry.kind, remote: true, purge: false, size: 0, ticket: None })
        }
    }

    fn local_dir_is_empty(&self, ino: Ino) -> Result<bool> {
        match &self.inode(ino)?.body {
            Body::Dir(dir) => Ok(dir.entries.is_empty()),
            _ => fail(ErrorCode::NotDir, "not a directory"),
        }
    }

    /// Applies rename's rules for replacing `existing` by an entry of kind `src_kind`, and
    /// removes what it replaces. Returns the inode that lost its name.
    fn replace_existing(&mut self, parent: Ino, name: &str, src_kind: FileKind, retired_target: Option<Ino>) -> Result<Option<Unlinked>> {
        let Some(existing) = self.dir(parent)?.entries.get(name) else {
            return Ok(None);
        };
        let (ex_ino, ex_kind) = (existing.ino, existing.kind);
        if existing.is_locked() {
            return fail(ErrorCode::Busy, format!("'{name}' is being renamed"));
        }
        match (src_kind == FileKind::Dir, ex_kind == FileKind::Dir) {
            (true, false) => return fail(ErrorCode::NotDir, format!("'{name}' is not a directory")),
            (false, true) => return fail(ErrorCode::IsDir, format!("'{name}' is a directory")),
            (true, true) => {
                if self.is_local(ex_ino) {
                    if !self.local_dir_is_empty(ex_ino)? {
                        return fail(ErrorCode::NotEmpty, format!("'{name}' is not empty"));
                    }
                } else if retired_target != Some(ex_ino) {
                    return fail(ErrorCode::NeedsRetire, format!("'{name}' is homed on another server"));
                }
            }
            (false, false) => {}
        }
        let entry = self.unlink_entry(parent, name)?;
        if ex_kind == FileKind::Dir {
            if self.is_local(ex_ino) {
                self.remove_inode(ex_ino);
            }
            // A retired remote directory is deleted by the client with DropInode.
            return Ok(Some(Unlinked { ino: ex_ino, kind: ex_kind, remote: !self.is_local(ex_ino), purge: false, size: 0, ticket: None }));
        }
        self.unlinked_entry(&entry).map(Some)
    }

    fn check_not_locked(locked: bool, name: &str) -> Result<()> {
        if locked {
            return fail(ErrorCode::Busy, format!("'{name}' is being renamed"));
        }
        Ok(())
    }

    // ---------------------------------------------------------------- protocol steps

    pub fn lookup(&self, parent: Ino, name: &str) -> Result<DirEntry> {
        if name == ".." {
            // Lets a client walk up the tree (rename's cycle check, NFS-style lookups).
            let up = self.dir(parent)?.parent;
            return Ok(self.dir_entry(name, up, FileKind::Dir));
        }
        let (ino, kind, _) = self.entry_of(parent, name)?;
        Ok(self.dir_entry(name, ino, kind))
    }

    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.inode(ino)?.attr.clone())
    }

    pub fn setattr(&mut self, ino: Ino, changes: &AttrChanges) -> Result<Attr> {
        let inode = self.inode_mut(ino)?;
        if changes.size.is_some() && inode.attr.kind != FileKind::File {
            return fail(
                if inode.attr.kind == FileKind::Dir { ErrorCode::IsDir } else { ErrorCode::Invalid },
                "size can only be set on a file",
            );
        }
        if let (Some(mode), Some(xattrs)) = (changes.mode, inode.xattrs.as_deref_mut()) {
            // chmod sets the access ACL's owner, mask (or owning group) and other entries.
            if let Some(acl) = xattrs.acl(AclKind::Access) {
                let acl = access::chmod_acl(acl, mode);
                xattrs.set_acl(AclKind::Access, Some(acl));
                self.changed_xattr(ino, AclKind::Access.xattr_name());
            }
        }
        let attr = &mut self.inode_mut(ino)?.attr;
        if let Some(mode) = changes.mode {
            attr.mode = mode & 0o7777;
        }
        if let Some(uid) = changes.uid {
            attr.uid = uid;
        }
        if let Some(gid) = changes.gid {
            attr.gid = gid;
        }
        if let Some(size) = changes.size {
            attr.size = size;
            attr.mtime = Timestamp::now();
            // The client dropped the data past `size` on every server first: nothing is left
            // of an emptied file.
            attr.blocks = (size == 0).then_some(0);
        }
        if let Some(atime) = changes.atime {
            attr.atime = atime;
        }
        if let Some(mtime) = changes.mtime {
            attr.mtime = mtime;
        }
        attr.ctime = Timestamp::now();
        Ok(attr.clone())
    }

    /// A regular file `parent/name` (or with `exclusive` false, the one there), with `mode`
    /// less `umask` or what the directory's default ACL makes of `mode`. In a directory of the
    /// node-local layout, its chunks all go to server `place_on` (the creator's; None: it has
    /// none, the file is striped).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        parent: Ino,
        name: &str,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
        exclusive: bool,
        open: bool,
        place_on: Option<usize>,
    ) -> Result<DirEntry> {
        check_name(name)?;
        if let Some(existing) = self.dir(parent)?.entries.get(name) {
            let (ino, kind) = (existing.ino, existing.kind);
            if exclusive {
                return fail(ErrorCode::Exists, format!("'{name}' exists"));
            }
            if kind == FileKind::Dir {
                return fail(ErrorCode::IsDir, format!("'{name}' is a directory"));
            }
            if open {
                if let Some(inode) = self.inodes.get_mut(&ino) {
                    inode.opens += 1;
                }
            }
            return Ok(self.dir_entry(name, ino, kind));
        }
        let data_server = match self.dir(parent)?.layout {
            DirLayout::NodeLocal => place_on,
            DirLayout::Striped => None,
        };
        if let Some(server) = data_server.filter(|&s| s >= ino::MAX_PLACED_SERVERS) {
            return fail(ErrorCode::Invalid, format!("server {server} cannot hold a file's chunks (at most {})", ino::MAX_PLACED_SERVERS));
        }
        let ino = match data_server {
            Some(server) => self.alloc_placed_ino(server),
            None => self.alloc_ino(),
        };
        self.make_file(parent, name, ino, mode, umask, uid, gid, open)
    }

    /// A new file `parent/name` numbered `ino` (a number this share handed out and nothing
    /// uses), in directory `parent` (checked by the caller).
    #[allow(clippy::too_many_arguments)]
    fn make_file(&mut self, parent: Ino, name: &str, ino: Ino, mode: u32, umask: u32, uid: u32, gid: u32, open: bool) -> Result<DirEntry> {
        let perms = access::inherit(FileKind::File, mode, umask, self.default_acl_of(parent));
        let attr = self.insert_inode(ino, FileKind::File, perms, uid, gid, Body::File);
        self.link_entry(parent, name, ino, FileKind::File)?;
        if open {
            self.inode_mut(ino)?.opens += 1;
        }
        Ok(DirEntry { name: name.to_string(), ino, kind: FileKind::File, attr: Some(attr) })
    }

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

    /// A create made under a delegation, written back: `parent/name` (a new name) is file
    /// `ino`, one of the numbers [`MetaStore::set_aside`] gave the delegation.
    #[allow(clippy::too_many_arguments)]
    pub fn create_as(
        &mut self,
        parent: Ino,
        name: &str,
        ino: Ino,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
        open: bool,
    ) -> Result<DirEntry> {
        check_name(name)?;
        if self.dir(parent)?.entries.contains_key(name) {
            return fail(ErrorCode::Exists, format!("'{name}' exists"));
        }
        if self.inodes.contains_key(&ino) {
            return fail(ErrorCode::Exists, format!("inode {ino:#x} exists"));
        }
        self.make_file(parent, name, ino, mode, umask, uid, gid, open)
    }

    /// A FIFO, socket or device node: an inode without data.
    #[allow(clippy::too_many_arguments)]
    pub fn make_node(&mut self, parent: Ino, name: &str, kind: FileKind, mode: u32, umask: u32, uid: u32, gid: u32) -> Result<Attr> {
        check_name(name)?;
        if !kind.is_special() {
            return fail(ErrorCode::Invalid, format!("mknod makes FIFOs, sockets and devices, not a {kind:?}"));
        }
        let perms = access::inherit(kind, mode, umask, self.default_acl_of(parent));
        self.make_named(parent, name, kind, perms, uid, gid, Body::File)
    }

    pub fn symlink(&mut self, parent: Ino, name: &str, target: &str, uid: u32, gid: u32) -> Result<Attr> {
        check_name(name)?;
        if target.is_empty() || target.len() > MAX_SYMLINK_LEN {
            return fail(ErrorCode::NameTooLong, "symlink target empty or too long");
        }
        let perms = access::inherit(FileKind::Symlink, 0o777, 0, None);
        self.make_named(parent, name, FileKind::Symlink, perms, uid, gid, Body::Symlink(target.to_string()))
    }

    /// A new inode under the new name `parent/name` (symlinks and special files; files and
    /// directories have steps of their own).
    #[allow(clippy::too_many_arguments)]
    fn make_named(&mut self, parent: Ino, name: &str, kind: FileKind, perms: Inherited, uid: u32, gid: u32, body: Body) -> Result<Attr> {
        if self.dir(parent)?.entries.contains_key(name) {
            return fail(ErrorCode::Exists, format!("'{name}' exists"));
        }
        let ino = self.alloc_ino();
        let attr = self.insert_inode(ino, kind, perms, uid, gid, body);
        self.link_entry(parent, name, ino, kind)?;
        Ok(attr)
    }

    pub fn readlink(&self, ino: Ino) -> Result<String> {
        match &self.inode(ino)?.body {
            Body::Symlink(target) => Ok(target.clone()),
            _ => fail(ErrorCode::Invalid, "not a symlink"),
        }
    }

    /// A directory's inode (mkdir step 1), with `mode` less `umask` or what the parent's
    /// default ACL makes of `mode`, and the parent's layout: the parent's own if it is homed
    /// here (it must then be a directory here), else `remote_default` and `remote_layout`,
    /// what the client says it has. `ino`: the number a delegation's holder gave it (one the
    /// delegation set aside, not in use), or None for a new one.
    #[allow(clippy::too_many_arguments)]
    pub fn make_dir_inode(
        &mut self,
        parent: Ino,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
        remote_default: Option<&Acl>,
        remote_layout: DirLayout,
        ino: Option<Ino>,
    ) -> Result<Attr> {
        // A `..` naming a file, or nothing, would answer lookups with another inode's kind.
        let (default, layout) = match self.is_local(parent) {
            true => (self.default_acl_of(parent), self.dir(parent)?.layout),
            false => (remote_default, remote_layout),
        };
        let perms = access::inherit(FileKind::Dir, mode, umask, default);
        let ino = match ino {
            None => self.alloc_ino(),
            Some(ino) if self.inodes.contains_key(&ino) || !self.is_local(ino) => {
                return fail(ErrorCode::Exists, format!("inode {ino:#x} is in use or not homed here"));
            }
            Some(ino) => ino,
        };
        let dir = Dir { parent, entries: BTreeMap::new(), subdirs: 0, retired: false, layout };
        Ok(self.insert_inode(ino, FileKind::Dir, perms, uid, gid, Body::Dir(dir)))
    }

    /// A directory made in one step where it is homed with its parent (see
    /// `surge_proto::namespace::MakeDir`): `parent/name`, a new name, is a new directory
    /// inode as [`MetaStore::make_dir_inode`] makes one, linked as
    /// [`MetaStore::insert_entry`] links one; a link refused leaves no inode behind. `ino`:
    /// the number a delegation's holder gave it (see `surge_proto::namespace::MakeDir`).
    #[allow(clippy::too_many_arguments)]
    pub fn make_dir(&mut self, parent: Ino, name: &str, mode: u32, umask: u32, uid: u32, gid: u32, ino: Option<Ino>) -> Result<Attr> {
        check_name(name)?;
        if !self.is_local(parent) {
            return fail(ErrorCode::Invalid, format!("a one-step mkdir needs its parent {parent:#x} homed here"));
        }
        let dir = self.dir(parent)?;
        if dir.entries.contains_key(name) {
            return fail(ErrorCode::Exists, format!("'{name}' exists"));
        }
        let layout = dir.layout;
        let attr = self.make_dir_inode(parent, mode, umask, uid, gid, None, layout, ino)?;
        if let Err(e) = self.insert_entry(parent, name, attr.ino, FileKind::Dir, false, None) {
            self.drop_inode(attr.ino)?;
            return Err(e);
        }
        Ok(attr)
    }

    /// Deletes a directory inode whose name is elsewhere (a mkdir undone, a directory removed
    /// from another server's parent). Files lose their inode through their links only.
    pub fn drop_inode(&mut self, ino: Ino) -> Result<()> {
        Self::not_root(ino)?;
        if self.inode(ino)?.attr.kind != FileKind::Dir {
            return fail(ErrorCode::Invalid, "only a directory's inode is dropped; a file goes with its last link");
        }
        if !self.local_dir_is_empty(ino)? {
            return fail(ErrorCode::NotEmpty, "directory not empty");
        }
        self.remove_inode(ino);
        Ok(())
    }

    pub fn insert_entry(
        &mut self,
        parent: Ino,
        name: &str,
        ino: Ino,
        kind: FileKind,
        replace: bool,
        retired_target: Option<Ino>,
    ) -> Result<LinkOutcome> {
        check_name(name)?;
        self.check_named_kind(ino, kind)?;
        if let Some(existing) = self.dir(parent)?.entries.get(name) {
            // A new name (mkdir, a hard link, a rename that must not replace) must be new,
            // even where the name there is the same inode's (`ln a a`).
            if !replace {
                return fail(ErrorCode::Exists, format!("'{name}' exists"));
            }
            if existing.ino == ino {
                return Ok(LinkOutcome::default());
            }
        }
        if kind == FileKind::Dir && ino == parent {
            return fail(ErrorCode::Invalid, "cannot move a directory into itself");
        }
        let replaced = self.replace_existing(parent, name, kind, retired_target)?;
        self.link_entry(parent, name, ino, kind)?;
        if kind == FileKind::File {
            // Moved or linked into place: published here.
            self.publish_entry(parent, name.to_string(), ino);
        }
        let reparent = self.reparent(ino, kind, parent);
        Ok(LinkOutcome { replaced, reparent })
    }

    /// Points a moved directory's `..` at its new parent when it is homed here; otherwise
    /// returns it so the client updates its home server.
    fn reparent(&mut self, ino: Ino, kind: FileKind, parent: Ino) -> Option<Ino> {
        if kind != FileKind::Dir {
            return None;
        }
        self.changed(ino);
        match self.inodes.get_mut(&ino).map(|i| &mut i.body) {
            Some(Body::Dir(dir)) => {
                dir.parent = parent;
                None
            }
            _ => Some(ino),
        }
    }

    pub fn unlink(&mut self, parent: Ino, name: &str) -> Result<Unlinked> {
        let (_, kind, locked) = self.entry_of(parent, name)?;
        if kind == FileKind::Dir {
            return fail(ErrorCode::IsDir, format!("'{name}' is a directory"));
        }
        Self::check_not_locked(locked, name)?;
        let entry = self.unlink_entry(parent, name)?;
        self.unlinked_entry(&entry)
    }

    pub fn rmdir(&mut self, parent: Ino, name: &str) -> Result<()> {
        let (ino, kind, locked) = self.entry_of(parent, name)?;
        if kind != FileKind::Dir {
            return fail(ErrorCode::NotDir, format!("'{name}' is not a directory"));
        }
        Self::check_not_locked(locked, name)?;
        if !self.is_local(ino) {
            return fail(ErrorCode::NeedsRetire, format!("'{name}' is homed on another server"));
        }
        if !self.local_dir_is_empty(ino)? {
            return fail(ErrorCode::NotEmpty, format!("'{name}' is not empty"));
        }
        self.unlink_entry(parent, name)?;
        self.remove_inode(ino);
        Ok(())
    }

    /// The steps that take a directory apart or move it refuse the root: nothing names it, so
    /// no client can have a reason to ask.
    fn not_root(ino: Ino) -> Result<()> {
        if ino == ino::ROOT_INO {
            return fail(ErrorCode::Invalid, "the root directory cannot be removed or moved");
        }
        Ok(())
    }

    pub fn set_retired(&mut self, ino: Ino, retired: bool) -> Result<()> {
        Self::not_root(ino)?;
        let inode = self.inode_mut(ino)?;
        let Body::Dir(dir) = &mut inode.body else {
            return fail(ErrorCode::NotDir, "not a directory");
        };
        if retired && !dir.entries.is_empty() {
            return fail(ErrorCode::NotEmpty, "directory not empty");
        }
        dir.retired = retired;
        Ok(())
    }

    pub fn remove_entry(&mut self, parent: Ino, name: &str, ino: Ino) -> Result<()> {
        let (found, _, locked) = self.entry_of(parent, name)?;
        if found != ino {
            return fail(ErrorCode::Stale, format!("'{name}' changed meanwhile"));
        }
        Self::check_not_locked(locked, name)?;
        self.unlink_entry(parent, name)?;
        Ok(())
    }

    pub fn drop_link(&mut self, ino: Ino) -> Result<InodeFate> {
        let unlinked = self.drop_link_local(ino)?;
        Ok(InodeFate { purge: unlinked.purge, size: unlinked.size, ticket: None, published: None })
    }

    /// One more link to a file, symlink or other non-directory homed here (hard link step 1).
    pub fn add_link(&mut self, ino: Ino) -> Result<Attr> {
        let attr = &self.inode(ino)?.attr;
        if attr.kind == FileKind::Dir {
            return fail(ErrorCode::NotPermitted, "a directory cannot have hard links");
        }
        if attr.nlink == 0 {
            // Unlinked while open (linkat of an open descriptor): it may not come back.
            return fail(ErrorCode::NotFound, "the file has no name any more");
        }
        if attr.nlink >= MAX_LINKS {
            return fail(ErrorCode::TooManyLinks, format!("inode {ino:#x} has {MAX_LINKS} links"));
        }
        let inode = self.inode_mut(ino)?;
        inode.attr.nlink += 1;
        inode.attr.ctime = Timestamp::now();
        Ok(inode.attr.clone())
    }

    pub fn set_parent(&mut self, ino: Ino, parent: Ino) -> Result<()> {
        Self::not_root(ino)?;
        // A parent homed here must be a directory here (its `..` would otherwise answer a
        // file's attributes under a directory's kind); one homed elsewhere is taken on trust.
        if self.is_local(parent) {
            self.dir(parent)?;
        }
        match &mut self.inode_mut(ino)?.body {
            Body::Dir(dir) => {
                dir.parent = parent;
                Ok(())
            }
            _ => fail(ErrorCode::NotDir, "not a directory"),
        }
    }

    /// Rename when both parents are homed here: one atomic step, which is what makes
    /// write-to-temporary + rename a safe way to publish a file.
    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &mut self,
        src_parent: Ino,
        src_name: &str,
        dst_parent: Ino,
        dst_name: &str,
        noreplace: bool,
        retired_target: Option<Ino>,
    ) -> Result<LinkOutcome> {
        check_name(dst_name)?;
        let (ino, kind, locked) = self.entry_of(src_parent, src_name)?;
        Self::check_not_locked(locked, src_name)?;
        self.dir(dst_parent)?;
        if src_parent == dst_parent && src_name == dst_name {
            return Ok(LinkOutcome::default());
        }
        if kind == FileKind::Dir && self.is_ancestor_or_self(ino, dst_parent) {
            return fail(ErrorCode::Invalid, "cannot move a directory into itself");
        }
        if let Some(existing) = self.dir(dst_parent)?.entries.get(dst_name) {
            // RENAME_NOREPLACE refuses any existing name, a link of the same file too (as
            // Linux does); a plain rename onto another link of the same file does nothing.
            if noreplace {
                return fail(ErrorCode::Exists, format!("'{dst_name}' exists"));
            }
            if existing.ino == ino {
                return Ok(LinkOutcome::default());
            }
        }
        let replaced = self.replace_existing(dst_parent, dst_name, kind, retired_target)?;
        self.unlink_entry(src_parent, src_name)?;
        self.link_entry(dst_parent, dst_name, ino, kind)?;
        self.changed(ino);
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.attr.ctime = Timestamp::now();
        }
        if kind == FileKind::File {
            // Renamed into place (the write-then-rename way to publish a file).
            self.publish_entry(dst_parent, dst_name.to_string(), ino);
        }
        let reparent = if src_parent != dst_parent { self.reparent(ino, kind, dst_parent) } else { None };
        Ok(LinkOutcome { replaced, reparent })
    }

    /// RENAME_EXCHANGE when both parents are homed here: `parent_a/name_a` and
    /// `parent_b/name_b` swap the inodes they name in one step. Returns the directories homed
    /// elsewhere whose `..` must be set to their new parent there.
    pub fn exchange(&mut self, parent_a: Ino, name_a: &str, parent_b: Ino, name_b: &str) -> Result<Vec<(Ino, Ino)>> {
        let (ino_a, kind_a, locked_a) = self.entry_of(parent_a, name_a)?;
        let (ino_b, kind_b, locked_b) = self.entry_of(parent_b, name_b)?;
        Self::check_not_locked(locked_a, name_a)?;
        Self::check_not_locked(locked_b, name_b)?;
        if ino_a == ino_b {
            return Ok(Vec::new()); // One file under both names (or one name twice): nothing moves.
        }
        if (kind_a == FileKind::Dir && self.is_ancestor_or_self(ino_a, parent_b))
            || (kind_b == FileKind::Dir && self.is_ancestor_or_self(ino_b, parent_a))
        {
            return fail(ErrorCode::Invalid, "cannot exchange a directory with something inside it");
        }
        self.point_entry(parent_a, name_a, ino_b, kind_b, kind_a)?;
        self.point_entry(parent_b, name_b, ino_a, kind_a, kind_b)?;
        let mut elsewhere = Vec::new();
        if parent_a != parent_b {
            elsewhere.extend(self.reparent(ino_a, kind_a, parent_b).map(|dir| (dir, parent_b)));
            elsewhere.extend(self.reparent(ino_b, kind_b, parent_a).map(|dir| (dir, parent_a)));
        }
        Ok(elsewhere)
    }

    /// Cross-server RENAME_EXCHANGE's step on each side: the locked `parent/name`, still
    /// naming `expected`, now names `ino` (unlocked). Returns `ino` when it is a directory
    /// homed elsewhere whose `..` must be set to `parent` there.
    pub fn swap_entry(&mut self, parent: Ino, name: &str, expected: Ino, ino: Ino, kind: FileKind) -> Result<Option<Ino>> {
        check_name(name)?;
        self.check_named_kind(ino, kind)?;
        let (found, old_kind, _) = self.entry_of(parent, name)?;
        if found != expected {
            return fail(ErrorCode::Stale, format!("'{name}' changed meanwhile"));
        }
        self.point_entry(parent, name, ino, kind, old_kind)?;
        Ok(self.reparent(ino, kind, parent))
    }

    /// A name a client makes for `ino` as a `kind` (the half-steps of operations spanning
    /// servers): an inode homed here is known here, so the name must not point at nothing,
    /// nor say it names a file when it names a directory or a FIFO (lookups would answer
    /// attributes that contradict the entry, and rmdir or unlink would take the wrong path).
    /// Inodes homed elsewhere are taken on trust, as they must be.
    fn check_named_kind(&self, ino: Ino, kind: FileKind) -> Result<()> {
        if self.is_local(ino) {
            let actual = self.inode(ino)?.attr.kind;
            if actual != kind {
                return fail(ErrorCode::Invalid, format!("inode {ino:#x} is a {actual:?}, not a {kind:?}"));
            }
        }
        Ok(())
    }

    /// Points the existing entry `parent/name` (of kind `old_kind`) at `ino`, unlocked; the
    /// directory's subdirectory count and times and the inode's ctime follow.
    fn point_entry(&mut self, parent: Ino, name: &str, ino: Ino, kind: FileKind, old_kind: FileKind) -> Result<()> {
        let dir = self.dir_mut(parent)?;
        let old = dir.entries.insert(name.to_string(), Entry { ino, kind, locked_until: None });
        dir.subdirs = dir.subdirs + u32::from(kind == FileKind::Dir) - u32::from(old_kind == FileKind::Dir);
        if let Some(old) = old {
            self.unname(old.ino, parent, name);
        }
        self.name(ino, parent, name);
        self.changed_entry(parent, name);
        self.touch_dir(parent);
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.attr.ctime = Timestamp::now();
            self.changed(ino);
        }
        Ok(())
    }

    /// Walks `..` from `dir` as far as this server knows it, looking for `ancestor`. The
    /// client checks the rest of the chain; this catches the common local case cheaply.
    fn is_ancestor_or_self(&self, ancestor: Ino, mut dir: Ino) -> bool {
        for _ in 0..4096 {
            if dir == ancestor {
                return true;
            }
            match self.inodes.get(&dir).map(|i| &i.body) {
                Some(Body::Dir(d)) if d.parent != dir => dir = d.parent,
                _ => return false,
            }
        }
        false
    }

    pub fn rename_prepare(&mut self, parent: Ino, name: &str) -> Result<DirEntry> {
        let (ino, kind, locked) = self.entry_of(parent, name)?;
        Self::check_not_locked(locked, name)?;
        if let Some(entry) = self.dir_mut(parent)?.entries.get_mut(name) {
            entry.locked_until = Some(Instant::now() + RENAME_LOCK_TTL);
        }
        Ok(self.dir_entry(name, ino, kind))
    }

    pub fn rename_finish(&mut self, parent: Ino, name: &str, ino: Ino, commit: bool) -> Result<()> {
        let (found, _, _) = self.entry_of(parent, name)?;
        if found != ino {
            return fail(ErrorCode::Stale, format!("'{name}' changed meanwhile"));
        }
        if commit {
            self.unlink_entry(parent, name)?;
        } else if let Some(entry) = self.dir_mut(parent)?.entries.get_mut(name) {
            entry.locked_until = None;
        }
        Ok(())
    }

    pub fn readdir(&self, ino: Ino, after: Option<&str>, limit: u32) -> Result<(Vec<DirEntry>, bool)> {
        let dir = self.dir(ino)?;
        let limit = (limit as usize).clamp(1, MAX_READDIR_PAGE);
        let lower = match after {
            Some(name) => Bound::Excluded(name),
            None => Bound::Unbounded,
        };
        let mut range = dir.entries.range::<str, _>((lower, Bound::Unbounded)).peekable();
        let (mut entries, mut bytes) = (Vec::new(), 0);
        while let Some((name, _)) = range.peek() {
            let size = name.len() + ENTRY_OVERHEAD;
            if entries.len() == limit || (bytes + size > READDIR_PAGE_BYTES && !entries.is_empty()) {
                break;
            }
            let (name, e) = range.next().expect("peeked");
            entries.push(self.dir_entry(name, e.ino, e.kind));
            bytes += size;
        }
        let more = range.next().is_some();
        Ok((entries, more))
    }

    pub fn open(&mut self, ino: Ino) -> Result<Attr> {
        // Open handles do not outlive a restart: nothing here for the journal.
        let inode = self.inode_untracked(ino)?;
        inode.opens += 1;
        Ok(inode.attr.clone())
    }

    /// Publishes a writer's size and mtime; with `release`, ends one open handle, and when
    /// that handle `wrote`, publishes the file in its directory's log. Returns whether the
    /// file is now gone (unlinked earlier, last handle closed) and must be purged.
    pub fn commit(&mut self, ino: Ino, size: Option<u64>, mtime: Option<Timestamp>, release: bool, wrote: bool) -> Result<InodeFate> {
        // Releasing a handle changes nothing a restart keeps; publishing a size or time does.
        let publishes = size.is_some() || mtime.is_some();
        let inode = if publishes { self.inode_mut(ino)? } else { self.inode_untracked(ino)? };
        let before = inode.attr.content_version();
        if let Some(size) = size {
            inode.attr.size = inode.attr.size.max(size);
        }
        if let Some(mtime) = mtime {
            inode.attr.mtime = mtime;
            inode.attr.ctime = mtime.max(inode.attr.ctime);
        }
        if publishes {
            inode.attr.blocks = None;
        }
        if release {
            inode.opens = inode.opens.saturating_sub(1);
        }
        let gone = inode.attr.nlink == 0 && inode.opens == 0;
        let (purge, final_size, last_close) = (gone && inode.attr.kind == FileKind::File, inode.attr.size, inode.opens == 0);
        let published = publishes.then(|| (before, inode.attr.content_version()));
        if gone {
            self.remove_inode(ino);
        } else if release && wrote && !self.published_as_it_is(ino) {
            self.publish(ino);
        }
        if last_close {
            self.published_while_open.remove(&ino);
        }
        Ok(InodeFate { purge, size: final_size, ticket: None, published })
    }

    /// Sets `len` bytes at the end of a regular file aside for one appending write and
    /// answers where they start: appends from any number of clients get ranges of their own,
    /// in the order they reach the file's home (O_APPEND across nodes).
    pub fn append(&mut self, ino: Ino, len: u64) -> Result<u64> {
        let inode = self.inode_mut(ino)?;
        if inode.attr.kind != FileKind::File {
            return fail(ErrorCode::Invalid, "append to something that is not a regular file");
        }
        let offset = inode.attr.size;
        let Some(end) = offset.checked_add(len).filter(|&end| end <= i64::MAX as u64) else {
            return fail(ErrorCode::Invalid, format!("append of {len} bytes past the largest file size"));
        };
        let now = Timestamp::now();
        inode.attr.size = end;
        inode.attr.mtime = now;
        inode.attr.ctime = now;
        inode.attr.blocks = None;
        Ok(offset)
    }

    /// Keeps the allocations clients measured of files whose content has not changed since
    /// (see [`surge_proto::namespace::NoteAllocation`]); forgets those said to have changed.
    /// Inodes no longer here are passed over: a note is a hint, never an error.
    pub fn note_allocation(&mut self, notes: &[AllocationNote]) {
        for note in notes {
            let Some(inode) = self.inodes.get_mut(&note.ino) else { continue };
            match note.blocks {
                None => inode.attr.blocks = None,
                Some(blocks) if inode.attr.content_version() == note.version => inode.attr.blocks = Some(blocks),
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        });
        r
    }

    /// A mkdir in one step (parent homed here) makes what the two steps make: a directory
    /// with its parent's layout, linked, the parent's link count up; an existing name or a
    /// parent not homed here is refused and leaves no inode behind.
    #[test]
    fn a_one_step_mkdir_makes_and_links_or_leaves_nothing() {
        let mut s = MetaStore::new(0, 0, 0);
        let before = s.getattr(ROOT_INO).unwrap().nlink;
        let made = s.make_dir(ROOT_INO, "d", 0o777, 0o022, 1, 1, None).unwrap();
        assert_eq!((made.kind, made.mode & 0o7777), (FileKind::Dir, 0o755));
        assert_eq!(s.lookup(ROOT_INO, "d").unwrap().ino, made.ino);
        assert_eq!(s.getattr(ROOT_INO).unwrap().nlink, before + 1);
        assert_eq!(s.layout_of(made.ino).unwrap(), s.layout_of(ROOT_INO).unwrap());
        let inodes = s.inodes.len();
        assert_eq!(s.make_dir(ROOT_INO, "d", 0o755, 0, 1, 1, None).unwrap_err().code, ErrorCode::Exists);
        assert_eq!(s.make_dir(ROOT_INO, "a/b", 0o755, 0, 1, 1, None).unwrap_err().code, ErrorCode::Invalid);
        let elsewhere = ino::make(1, 42);
        assert_eq!(s.make_dir(elsewhere, "x", 0o755, 0, 1, 1, None).unwrap_err().code, ErrorCode::Invalid);
        // With a number given (a delegation's): that number, unless it is in use.
        assert_eq!(s.make_dir(ROOT_INO, "e", 0o755, 0, 1, 1, Some(made.ino)).unwrap_err().code, ErrorCode::Exists);
        assert_eq!(s.inodes.len(), inodes, "a refused mkdir left an inode");
        let given = s.set_aside(ROOT_INO, 1, None).unwrap()[0];
        assert_eq!(s.make_dir(ROOT_INO, "e", 0o755, 0, 1, 1, Some(given)).unwrap().ino, given);
        assert_eq!(s.lookup(ROOT_INO, "e").unwrap().ino, given);
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
        let a = s.make_dir_inode(ROOT_INO, 0o755, 0, 1, 1, None, DirLayout::Striped, None).unwrap();
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
        let empty = s.make_dir_inode(ROOT_INO, 0o755, 0, 1, 1, None, DirLayout::Striped, None).unwrap();
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
        assert_eq!(canonical(replayed.snapshot()), canonical(expected.snapshot()));
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

    /// A directory's inode is made only under a directory when the parent is homed here (a
    /// `..` naming a file made `Lookup(dir, "..")` answer a file's attributes under a
    /// directory's kind: fuzz regression `dir-inode-under-a-file`).
    #[test]
    fn a_directory_inode_needs_a_directory_parent_here() {
        let mut s = MetaStore::new(0, 0, 0);
        let file = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        let under = |s: &mut MetaStore, parent| s.make_dir_inode(parent, 0o755, 0, 0, 0, None, DirLayout::Striped, None).map(|a| a.ino);
        assert_eq!(under(&mut s, file).unwrap_err().code, ErrorCode::NotDir);
        assert_eq!(under(&mut s, ROOT_INO + 999).unwrap_err().code, ErrorCode::NotFound);
        let dir = under(&mut s, ROOT_INO).unwrap();
        assert_eq!(s.getattr(dir).unwrap().kind, FileKind::Dir);
        // Re-parenting (a rename across servers) asks the same of the new parent (fuzz
        // finding 14: a directory's `..` named a FIFO).
        assert_eq!(s.set_parent(dir, file).unwrap_err().code, ErrorCode::NotDir);
        assert_eq!(s.set_parent(dir, ROOT_INO + 999).unwrap_err().code, ErrorCode::NotFound);
        s.set_parent(dir, ROOT_INO).unwrap();
        // A parent homed on another server is the client's word (checked where it is linked).
        let mut elsewhere = MetaStore::new(1, 0, 0);
        assert!(under(&mut elsewhere, ROOT_INO).is_ok());
        let moved = under(&mut elsewhere, ROOT_INO).unwrap();
        elsewhere.set_parent(moved, ROOT_INO + 999).unwrap();
    }

    /// A snapshot written as several records (as the journal writes it) rebuilds the same
    /// store, each record within its bound.
    #[test]
    fn a_split_snapshot_rebuilds_the_store() {
        let mut s = MetaStore::new(0, 0, 0);
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap();
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

    use surge_proto::acl::Tag;
    use surge_proto::call::encode_reply;
    use surge_proto::{DirPage, Timestamp, XattrSetMode};

    /// ENTRY_OVERHEAD bounds an entry's encoding beyond its name, even at the widest values.
    #[test]
    fn an_entry_never_encodes_larger_than_its_bound() {
        let t = Timestamp { secs: i64::MIN, nanos: u32::MAX };
        let attr = Attr {
            ino: u64::MAX,
            kind: FileKind::Symlink,
            mode: u32::MAX,
            uid: u32::MAX,
            gid: u32::MAX,
            size: u64::MAX,
            nlink: u32::MAX,
            atime: t,
            mtime: t,
            ctime: t,
            blocks: Some(u64::MAX),
        };
        let entry = DirEntry { name: "n".repeat(255), ino: u64::MAX, kind: FileKind::Symlink, attr: Some(attr) };
        assert!(encode_reply(&entry).len() <= 255 + super::ENTRY_OVERHEAD);
    }

    /// A directory of 255-byte names is listed in pages that each fit a frame, and in full.
    #[test]
    fn pages_of_long_names_fit_a_frame() {
        let mut s = MetaStore::new(0, 0, 0);
        let names: Vec<String> = (0..5000).map(|i| format!("{i:06}{}", "x".repeat(249))).collect();
        for name in &names {
            s.create(ROOT_INO, name, 0o644, 0, 0, 0, true, false, None).unwrap();
        }
        let (mut listed, mut after, mut pages) = (Vec::new(), None::<String>, 0);
        loop {
            let (entries, more) = s.readdir(ROOT_INO, after.as_deref(), u32::MAX).unwrap();
            let page = DirPage { entries, more };
            assert!(encode_reply(&page).len() <= surge_proto::MAX_MESSAGE_LEN, "page {pages} too large for a frame");
            after = page.entries.last().map(|e| e.name.clone());
            listed.extend(page.entries.into_iter().map(|e| e.name));
            pages += 1;
            if !more {
                break;
            }
        }
        assert_eq!(listed, names);
        assert!(pages > 2, "long names need more, smaller pages ({pages})");
    }

    use super::*;
    use surge_proto::ROOT_INO;

    fn file(store: &mut MetaStore, parent: Ino, name: &str) -> Ino {
        store.create(parent, name, 0o644, 0, 0, 0, true, false, None).unwrap().ino
    }

    #[test]
    fn rename_over_existing_replaces_atomically() {
        let mut s = MetaStore::new(0, 0, 0);
        let old = file(&mut s, ROOT_INO, "plot.h5");
        let new = file(&mut s, ROOT_INO, "plot.h5.tmp");
        let replaced = s.rename(ROOT_INO, "plot.h5.tmp", ROOT_INO, "plot.h5", false, None).unwrap().replaced;
        let replaced = replaced.unwrap();
        assert_eq!(replaced.ino, old);
        assert!(replaced.purge);
        assert_eq!(s.lookup(ROOT_INO, "plot.h5").unwrap().ino, new);
        assert_eq!(s.lookup(ROOT_INO, "plot.h5.tmp").unwrap_err().code, ErrorCode::NotFound);
    }

    /// A file's allocation is known from its creation until its content changes; a client's
    /// measurement is kept only while the content is still at the version it names; a
    /// restart keeps no figure but a new file's.
    #[test]
    fn allocation_notes_hold_until_the_content_changes() {
        let mut s = MetaStore::new(0, 0, 0);
        s.track_changes();
        let ino = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        assert_eq!(s.getattr(ino).unwrap().blocks, Some(0), "a new file has nothing on the servers");
        s.commit(ino, Some(4096), Some(Timestamp { secs: 5, nanos: 0 }), false, true).unwrap();
        let written = s.getattr(ino).unwrap();
        assert_eq!(written.blocks, None, "a published write makes the figure unknown");
        let note = |blocks, version| AllocationNote { ino, version, blocks };
        s.note_allocation(&[note(Some(8), written.content_version())]);
        assert_eq!(s.getattr(ino).unwrap().blocks, Some(8));
        s.commit(ino, Some(8192), Some(Timestamp { secs: 6, nanos: 0 }), false, true).unwrap();
        s.note_allocation(&[note(Some(8), written.content_version())]);
        assert_eq!(s.getattr(ino).unwrap().blocks, None, "a measurement of an older version is not kept");
        let now = s.getattr(ino).unwrap().content_version();
        s.note_allocation(&[note(Some(16), now), AllocationNote { ino: 0xdead, version: now, blocks: Some(1) }]);
        assert_eq!(s.getattr(ino).unwrap().blocks, Some(16), "a note for an inode not here is passed over");
        s.note_allocation(&[note(None, written.content_version())]);
        assert_eq!(s.getattr(ino).unwrap().blocks, None, "a changed allocation is forgotten whatever the version");
        s.setattr(ino, &AttrChanges { size: Some(1), ..Default::default() }).unwrap();
        assert_eq!(s.getattr(ino).unwrap().blocks, None, "truncating changes it");
        s.setattr(ino, &AttrChanges { size: Some(0), ..Default::default() }).unwrap();
        assert_eq!(s.getattr(ino).unwrap().blocks, Some(0), "nothing is left of an emptied file");
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap();
        s.note_allocation(&[note(Some(16), s.getattr(ino).unwrap().content_version())]);
        let mut replayed = MetaStore::new(0, 0, 0);
        replayed.apply(s.take_changes()).unwrap();
        assert_eq!(replayed.getattr(ino).unwrap().blocks, None, "measured again after a restart");
        assert_eq!(replayed.getattr(dir.ino).unwrap().blocks, Some(0), "a directory has no data files");
    }

    #[test]
    fn unlinked_open_file_survives_until_release() {
        let mut s = MetaStore::new(0, 0, 0);
        let ino = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        let u = s.unlink(ROOT_INO, "f").unwrap();
        assert!(!u.purge);
        assert!(s.getattr(ino).is_ok());
        let fate = s.commit(ino, Some(10), None, true, true).unwrap();
        assert_eq!((fate.purge, fate.size, fate.published.unwrap().1.size), (true, 10, 10));
        assert!(s.getattr(ino).is_err());
    }

    /// Hard links: the count follows the names; the file goes with its last name; what
    /// link(2) refuses is refused, also a name that is there already as the same file.
    #[test]
    fn hard_links_count_names() {
        let mut s = MetaStore::new(0, 0, 0);
        let ino = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        assert_eq!(s.add_link(ino).unwrap().nlink, 2);
        s.insert_entry(ROOT_INO, "g", ino, FileKind::File, false, None).unwrap();
        assert_eq!(s.insert_entry(ROOT_INO, "g", ino, FileKind::File, false, None).unwrap_err().code, ErrorCode::Exists);
        assert!(!s.unlink(ROOT_INO, "f").unwrap().purge, "one name left");
        assert_eq!(s.getattr(ino).unwrap().nlink, 1);
        assert!(s.unlink(ROOT_INO, "g").unwrap().purge, "the last name took the file");
        assert_eq!(s.add_link(ino).unwrap_err().code, ErrorCode::NotFound);
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap().ino;
        assert_eq!(s.add_link(dir).unwrap_err().code, ErrorCode::NotPermitted);
        let open = s.create(ROOT_INO, "open", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.unlink(ROOT_INO, "open").unwrap();
        assert_eq!(s.add_link(open).unwrap_err().code, ErrorCode::NotFound, "an unlinked open file stays nameless");
    }

    #[test]
    fn directory_rules() {
        let mut s = MetaStore::new(0, 0, 0);
        let a = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap().ino;
        s.insert_entry(ROOT_INO, "a", a, FileKind::Dir, false, None).unwrap();
        file(&mut s, a, "x");
        assert_eq!(s.rmdir(ROOT_INO, "a").unwrap_err().code, ErrorCode::NotEmpty);
        assert_eq!(s.getattr(ROOT_INO).unwrap().nlink, 3);
        let b = s.make_dir_inode(a, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap().ino;
        s.insert_entry(a, "b", b, FileKind::Dir, false, None).unwrap();
        assert_eq!(s.rename(ROOT_INO, "a", b, "a2", false, None).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.rename(a, "x", ROOT_INO, "a", false, None).unwrap_err().code, ErrorCode::IsDir);
        assert_eq!(s.create(ROOT_INO, &"n".repeat(256), 0o644, 0, 0, 0, true, false, None).unwrap_err().code, ErrorCode::NameTooLong);
    }

    /// A name for an inode homed here must name it as what it is, and something that exists;
    /// the same for an exchange's half-step (fuzz regression `swap-entry-wrong-kind`: a file
    /// swapped in as a FIFO made `Create` answer a file's attributes under a FIFO's kind).
    #[test]
    fn insert_entry_refuses_a_kind_its_inode_does_not_have() {
        let mut s = MetaStore::new(0, 0, 0);
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap().ino;
        assert_eq!(s.insert_entry(ROOT_INO, "d", dir, FileKind::File, false, None).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.insert_entry(ROOT_INO, "x", ino::make(0, 999), FileKind::File, false, None).unwrap_err().code, ErrorCode::NotFound);
        s.insert_entry(ROOT_INO, "d", dir, FileKind::Dir, false, None).unwrap();
        assert_eq!(s.lookup(ROOT_INO, "d").unwrap().attr.unwrap().kind, FileKind::Dir);
        let f = file(&mut s, ROOT_INO, "f");
        assert_eq!(s.swap_entry(ROOT_INO, "f", f, f, FileKind::Fifo).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.swap_entry(ROOT_INO, "f", f, ino::make(0, 999), FileKind::File).unwrap_err().code, ErrorCode::NotFound);
        assert_eq!(s.lookup(ROOT_INO, "f").unwrap().kind, FileKind::File, "refused: the entry is as it was");
    }

    #[test]
    fn readdir_pages_by_name() {
        let mut s = MetaStore::new(0, 0, 0);
        for i in 0..10 {
            file(&mut s, ROOT_INO, &format!("f{i}"));
        }
        let (first, more) = s.readdir(ROOT_INO, None, 4).unwrap();
        assert!(more);
        let (rest, more) = s.readdir(ROOT_INO, Some(&first.last().unwrap().name), 100).unwrap();
        assert!(!more);
        assert_eq!(first.len() + rest.len(), 10);
    }

    /// Steps a client has no reason to send for the root or for a file are refused, whoever
    /// sends them: a hostile or broken client cannot take the namespace apart with them.
    #[test]
    fn the_root_and_files_are_not_dropped_moved_or_retired() {
        let mut s = MetaStore::new(0, 0, 0);
        let file = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap();
        for outcome in [s.drop_inode(ROOT_INO), s.set_parent(ROOT_INO, file.ino), s.set_retired(ROOT_INO, true)] {
            assert_eq!(outcome.unwrap_err().code, ErrorCode::Invalid);
        }
        assert_eq!(s.drop_inode(file.ino).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.lookup(ROOT_INO, "f").unwrap().ino, file.ino, "the file is still there");
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap();
        s.drop_inode(dir.ino).unwrap();
    }

    /// In a node-local directory a file's number names the creator's server, which then holds
    /// all its chunks; elsewhere, or from a creator without a server, files are striped. A
    /// directory made here inherits its parent's layout, one made for a parent elsewhere what
    /// the client says.
    #[test]
    fn node_local_directories_place_their_files() {
        let mut s = MetaStore::with_root_layout(0, 0, 0, DirLayout::NodeLocal);
        let placed = s.create(ROOT_INO, "placed", 0o644, 0, 0, 0, true, false, Some(3)).unwrap().ino;
        assert_eq!((ino::home(placed), ino::data_server(placed)), (0, Some(3)));
        let unplaced = s.create(ROOT_INO, "from-afar", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        assert_eq!(ino::data_server(unplaced), None);
        let too_far = s.create(ROOT_INO, "bad", 0o644, 0, 0, 0, true, false, Some(ino::MAX_PLACED_SERVERS)).unwrap_err();
        assert_eq!(too_far.code, ErrorCode::Invalid);
        assert!(s.lookup(ROOT_INO, "bad").is_err(), "nothing made");

        let inherits = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None).unwrap().ino;
        assert_eq!(s.layout_of(inherits).unwrap(), DirLayout::NodeLocal, "the parent here says, not the client");
        s.insert_entry(ROOT_INO, "sub", inherits, FileKind::Dir, false, None).unwrap();
        s.set_layout(inherits, DirLayout::Striped).unwrap();
        let striped = s.create(inherits, "f", 0o644, 0, 0, 0, true, false, Some(3)).unwrap().ino;
        assert_eq!(ino::data_server(striped), None);
        assert_eq!(s.layout_of(striped).unwrap_err().code, ErrorCode::NotDir);

        let mut elsewhere = MetaStore::new(1, 0, 0);
        let told = elsewhere.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::NodeLocal, None).unwrap().ino;
        assert_eq!(elsewhere.layout_of(told).unwrap(), DirLayout::NodeLocal);
    }

    /// Placed numbers keep 32 bits of the counter: when it comes round, a number still in use
    /// is skipped, never handed out twice.
    #[test]
    fn placed_numbers_in_use_are_skipped_when_the_counter_comes_round() {
        let mut s = MetaStore::with_root_layout(0, 0, 0, DirLayout::NodeLocal);
        let first = s.create(ROOT_INO, "first", 0o644, 0, 0, 0, true, false, Some(1)).unwrap().ino;
        s.next_local += (1 << 32) - 1; // the counter comes round to the first file's
        let second = s.create(ROOT_INO, "second", 0o644, 0, 0, 0, true, false, Some(1)).unwrap().ino;
        assert_ne!(first, second);
        assert_eq!(ino::data_server(second), Some(1));
        assert_eq!(s.lookup(ROOT_INO, "first").unwrap().ino, first);
    }
}
