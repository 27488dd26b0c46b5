//! The store's model: inodes, directories and their entries, and [`MetaStore`], which holds
//! them with the rest of a share's state. Every step of the protocol (the `ops` modules) is a
//! method of the store, built on the helpers here, and keeps these invariants:
//!
//! * every inode here is homed here (its number carries `server_index`) and is held under its
//!   own number; the root (on server 0) is a directory, and is never removed or moved;
//! * an inode's kind is its body's: a directory has a [`Dir`], a symlink its target, every
//!   other kind [`Body::File`];
//! * an entry names an inode as what it is: one homed here exists and has the entry's kind
//!   (one homed elsewhere is the client's word);
//! * a directory's `subdirs` counts its entries that are directories, and its link count is
//!   `2 + subdirs`; `files` and `dirs` count the inodes held, directories and the rest;
//! * a non-directory inode homed here goes once it has neither a name (`nlink` 0) nor an open
//!   handle;
//! * a retired directory is empty and takes no new name;
//! * `next_local` only grows: no inode number is handed out twice;
//! * every change a restart must see is noted for the journal as it is made (`changed*`, see
//!   the `records` module); what a restart does not keep (open handles, rename locks, the
//!   names files were last given) is changed through [`MetaStore::inode_untracked`] or
//!   directly, and noted nowhere.

use std::collections::BTreeMap;
use std::time::Instant;

use surge_proto::acl::AclKind;
use surge_proto::ino::{self, Ino};
use surge_proto::placement::DirLayout;
use surge_proto::{Attr, DirEntry, ErrorCode, FileKind, Timestamp, Unlinked, MAX_NAME_LEN};

use crate::access::{self, Inherited};
use crate::delegated::DelegationMark;
use crate::error::{Result, ServerError};
use crate::ops::xattrs::Xattrs;
use crate::records::Changes;
use crate::workflow::publications::PublicationLog;

/// A step refused with `code`, as the client will see it.
pub(crate) fn fail<T>(code: ErrorCode, detail: impl Into<String>) -> Result<T> {
    Err(ServerError::new(code, detail))
}

/// A name in a directory: the inode it names, as what kind.
pub(crate) struct Entry {
    pub(crate) ino: Ino,
    pub(crate) kind: FileKind,
    /// Set while a cross-server rename moves this entry away.
    pub(crate) locked_until: Option<Instant>,
}

impl Entry {
    pub(crate) fn is_locked(&self) -> bool {
        self.locked_until.is_some_and(|t| t > Instant::now())
    }
}

/// A directory's own part: its `..`, its entries by name (in name order: readdir pages by
/// name), and how many of them are directories.
pub(crate) struct Dir {
    pub(crate) parent: Ino,
    pub(crate) entries: BTreeMap<String, Entry>,
    pub(crate) subdirs: u32,
    /// An empty directory being removed by a cross-server rmdir/rename: refuses new entries.
    pub(crate) retired: bool,
    /// Where the files made here are put; directories made here inherit it.
    pub(crate) layout: DirLayout,
}

/// What an inode holds besides its attributes, by kind.
pub(crate) enum Body {
    File,
    Symlink(String),
    Dir(Dir),
}

/// An inode homed here.
pub(crate) struct Inode {
    pub(crate) attr: Attr,
    pub(crate) body: Body,
    /// Open handles registered by clients; an unlinked file stays until the last is released.
    pub(crate) opens: u32,
    /// Clients keeping the file to answer its opens themselves (`Open { keep }`): it stays,
    /// unlinked or not, until the last lets go, but is not open for that.
    pub(crate) kept: u32,
    /// Extended attributes and ACLs; most inodes have none, and pay a pointer for the room.
    pub(crate) xattrs: Option<Box<Xattrs>>,
    /// The last name this server gave the inode (directory, name), which its publications
    /// name (see [`crate::workflow::publications`]). Not journaled: replaying the names sets
    /// it again.
    pub(crate) named: Option<Box<(Ino, Box<str>)>>,
    /// How far the file's data files on the servers may reach beyond its size: the largest
    /// size it had before a truncation (the servers keep a truncated data file, empty) and
    /// space set aside past its end (fallocate keeping the size). Its removal purges the
    /// chunks below the larger of this and the size ([`Inode::data_reach`]). Journaled (from
    /// format 5; a share of an earlier format starts it at nothing, leaving what lay past a
    /// size then to `surge fsck`).
    pub(crate) data_end: u64,
}

impl Inode {
    pub(crate) fn new(attr: Attr, body: Body) -> Inode {
        Inode { attr, body, opens: 0, kept: 0, xattrs: None, named: None, data_end: 0 }
    }

    /// Whether anything holds the inode beyond its names: an open handle, or a keeper.
    pub(crate) fn held(&self) -> bool {
        self.opens > 0 || self.kept > 0
    }

    /// Where the file's data on the servers may end: what a removal purges below.
    pub(crate) fn data_reach(&self) -> u64 {
        self.attr.size.max(self.data_end)
    }
}

/// The inodes homed here, by number: looked up several times by every namespace step and
/// once per entry of every listing, so hashed with aHash (keyed per process; numbers are the
/// servers' and delegation holders' own, within what they were granted) rather than SipHash.
pub(crate) type Inodes = crate::InoMap<Inode>;

/// One server's share of the namespace (see the module notes for what every step keeps
/// true).
pub struct MetaStore {
    pub(crate) server_index: usize,
    pub(crate) next_local: u64,
    pub(crate) inodes: Inodes,
    pub(crate) files: u64,
    pub(crate) dirs: u64,
    /// What steps changed since the journal last took it (None: nobody journals).
    pub(crate) changes: Option<Changes>,
    /// Directories' publication logs.
    pub(crate) publications: crate::InoMap<PublicationLog>,
    pub(crate) publications_made: u64,
    /// Files published by a rename or link while open here, with that publication's
    /// directory and cursor (see [`MetaStore::commit`]); forgotten when the last handle closes.
    pub(crate) published_while_open: crate::InoMap<(Ino, u64)>,
    /// The unended delegations of directories of this share, by directory
    /// ([`crate::delegated`]).
    pub(crate) delegated: crate::InoMap<DelegationMark>,
    /// Files ended here whose data may still be on the servers ([`crate::purges`]).
    pub(crate) purges: crate::purges::Purges,
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
            inodes: Inodes::default(),
            files: 0,
            dirs: 0,
            changes: None,
            publications: Default::default(),
            publications_made: 0,
            published_while_open: Default::default(),
            delegated: Default::default(),
            purges: Default::default(),
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

    pub(crate) fn alloc_ino(&mut self) -> Ino {
        let ino = ino::make(self.server_index, self.next_local);
        self.next_local += 1;
        ino
    }

    /// A number for a file whose chunks all go to `data_server`. Such numbers keep 32 bits of
    /// the counter: after 2^32 allocations they come round, and one still in use is skipped.
    pub(crate) fn alloc_placed_ino(&mut self, data_server: usize) -> Ino {
        loop {
            let ino = ino::make_placed(self.server_index, data_server, self.next_local);
            self.next_local += 1;
            if !self.inodes.contains_key(&ino) && !self.purge_pending(ino) {
                return ino;
            }
        }
    }

    /// Whether `ino` is the instance's root directory, homed here.
    pub(crate) fn is_root(&self, ino: Ino) -> bool {
        self.server_index == 0 && ino == ino::ROOT_INO
    }

    pub(crate) fn is_local(&self, ino: Ino) -> bool {
        ino::home(ino) == self.server_index
    }

    /// A new inode, with the mode and ACLs it got (see [`access::inherit`]).
    pub(crate) fn insert_inode(&mut self, ino: Ino, kind: FileKind, perms: Inherited, uid: u32, gid: u32, body: Body) -> Attr {
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

    pub(crate) fn remove_inode(&mut self, ino: Ino) {
        self.changed(ino);
        self.publications.remove(&ino);
        self.published_while_open.remove(&ino);
        if let Some(inode) = self.inodes.remove(&ino) {
            match inode.attr.kind {
                FileKind::Dir => self.dirs -= 1,
                _ => self.files -= 1,
            }
            if inode.attr.kind == FileKind::File {
                self.purge_due(ino, inode.data_reach());
            }
        }
    }

    pub(crate) fn inode(&self, ino: Ino) -> Result<&Inode> {
        match self.inodes.get(&ino) {
            Some(inode) => Ok(inode),
            None => fail(ErrorCode::NotFound, format!("inode {ino:#x} not on server {}", self.server_index)),
        }
    }

    /// The inode, to change what a restart does not keep (its open handles).
    pub(crate) fn inode_untracked(&mut self, ino: Ino) -> Result<&mut Inode> {
        let server = self.server_index;
        match self.inodes.get_mut(&ino) {
            Some(inode) => Ok(inode),
            None => fail(ErrorCode::NotFound, format!("inode {ino:#x} not on server {server}")),
        }
    }

    /// The inode, to change: recorded as changed for the journal.
    pub(crate) fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode> {
        self.changed(ino);
        self.inode_untracked(ino)
    }

    /// Whether `ino` is a directory here, retired or not (what a directory's workflow state
    /// is replayed onto, in whatever order the records come).
    pub(crate) fn holds_dir(&self, ino: Ino) -> bool {
        matches!(self.inodes.get(&ino).map(|inode| &inode.body), Some(Body::Dir(_)))
    }

    pub(crate) fn dir(&self, ino: Ino) -> Result<&Dir> {
        match &self.inode(ino)?.body {
            Body::Dir(dir) if !dir.retired => Ok(dir),
            Body::Dir(_) => fail(ErrorCode::NotFound, "directory was removed"),
            _ => fail(ErrorCode::NotDir, format!("inode {ino:#x} is not a directory")),
        }
    }

    pub(crate) fn dir_mut(&mut self, ino: Ino) -> Result<&mut Dir> {
        match &mut self.inode_mut(ino)?.body {
            Body::Dir(dir) if !dir.retired => Ok(dir),
            Body::Dir(_) => fail(ErrorCode::NotFound, "directory was removed"),
            _ => fail(ErrorCode::NotDir, format!("inode {ino:#x} is not a directory")),
        }
    }

    /// Marks a directory's contents as changed and keeps its link count right
    /// (2 + subdirectories, which `find` relies on).
    pub(crate) fn touch_dir(&mut self, ino: Ino) {
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

    pub(crate) fn entry_of(&self, parent: Ino, name: &str) -> Result<(Ino, FileKind, bool)> {
        if name.len() > MAX_NAME_LEN {
            // No such name can be: the error says why, as on a local file system.
            return fail(ErrorCode::NameTooLong, format!("name of {} bytes", name.len()));
        }
        match self.dir(parent)?.entries.get(name) {
            Some(e) => Ok((e.ino, e.kind, e.is_locked())),
            None => fail(ErrorCode::NotFound, format!("no entry '{name}'")),
        }
    }

    pub(crate) fn dir_entry(&self, name: &str, ino: Ino, kind: FileKind) -> DirEntry {
        let inode = self.inodes.get(&ino);
        let has_xattrs = inode.and_then(|i| i.xattrs.as_ref()).is_some_and(|x| !x.is_empty());
        DirEntry { name: name.to_string(), ino, kind, attr: inode.map(|i| i.attr.clone()), has_xattrs }
    }

    /// `ino` (if homed here) was given the name `dir/name`.
    pub(crate) fn name(&mut self, ino: Ino, dir: Ino, name: &str) {
        if let Some(inode) = self.inodes.get_mut(&ino).filter(|inode| inode.attr.kind == FileKind::File) {
            inode.named = Some(Box::new((dir, name.into())));
        }
    }

    /// `ino` (if homed here) lost the name `dir/name`.
    pub(crate) fn unname(&mut self, ino: Ino, dir: Ino, name: &str) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            if inode.named.as_deref().is_some_and(|(d, n)| *d == dir && &**n == name) {
                inode.named = None;
            }
        }
    }

    pub(crate) fn link_entry(&mut self, parent: Ino, name: &str, ino: Ino, kind: FileKind) -> Result<()> {
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

    pub(crate) fn unlink_entry(&mut self, parent: Ino, name: &str) -> Result<Entry> {
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
    pub(crate) fn drop_link_local(&mut self, ino: Ino) -> Result<Unlinked> {
        let inode = self.inode_mut(ino)?;
        inode.attr.nlink = inode.attr.nlink.saturating_sub(1);
        inode.attr.ctime = Timestamp::now();
        let (kind, size) = (inode.attr.kind, inode.data_reach());
        let gone = inode.attr.nlink == 0 && !inode.held();
        if gone {
            self.remove_inode(ino);
        }
        Ok(Unlinked { ino, kind, remote: false, purge: gone && kind == FileKind::File, size, ticket: None, dir_attr: None })
    }

    pub(crate) fn unlinked_entry(&mut self, entry: &Entry) -> Result<Unlinked> {
        if self.is_local(entry.ino) {
            self.drop_link_local(entry.ino)
        } else {
            Ok(Unlinked { ino: entry.ino, kind: entry.kind, remote: true, purge: false, size: 0, ticket: None, dir_attr: None })
        }
    }

    pub(crate) fn local_dir_is_empty(&self, ino: Ino) -> Result<bool> {
        match &self.inode(ino)?.body {
            Body::Dir(dir) => Ok(dir.entries.is_empty()),
            _ => fail(ErrorCode::NotDir, "not a directory"),
        }
    }

    pub(crate) fn check_not_locked(locked: bool, name: &str) -> Result<()> {
        if locked {
            return fail(ErrorCode::Busy, format!("'{name}' is being renamed"));
        }
        Ok(())
    }

    /// The steps that take a directory apart or move it refuse the root: nothing names it, so
    /// no client can have a reason to ask.
    pub(crate) fn not_root(ino: Ino) -> Result<()> {
        if ino == ino::ROOT_INO {
            return fail(ErrorCode::Invalid, "the root directory cannot be removed or moved");
        }
        Ok(())
    }

    /// A name a client makes for `ino` as a `kind` (the half-steps of operations spanning
    /// servers): an inode homed here is known here, so the name must not point at nothing,
    /// nor say it names a file when it names a directory or a FIFO (lookups would answer
    /// attributes that contradict the entry, and rmdir or unlink would take the wrong path).
    /// Inodes homed elsewhere are taken on trust, as they must be.
    pub(crate) fn check_named_kind(&self, ino: Ino, kind: FileKind) -> Result<()> {
        if self.is_local(ino) {
            let actual = self.inode(ino)?.attr.kind;
            if actual != kind {
                return fail(ErrorCode::Invalid, format!("inode {ino:#x} is a {actual:?}, not a {kind:?}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::ROOT_INO;

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
