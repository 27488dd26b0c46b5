//! Directories: mkdir in two steps (the inode on its home, then the name in its parent, which
//! may be homed elsewhere) or in one where both are here; rmdir of an empty directory; readdir
//! in pages that each fit a frame; layouts and default ACLs, which what is made inside
//! inherits; retiring an empty directory that another server is about to unname (it then
//! takes no new name), and setting `..` after a move.

use std::collections::BTreeMap;
use std::ops::Bound;

use surge_proto::acl::{Acl, AclKind};
use surge_proto::placement::DirLayout;
use surge_proto::{check_name, Attr, DirEntry, ErrorCode, FileKind, Ino};

use crate::access;
use crate::error::Result;
use crate::model::{fail, Body, Dir, MetaStore};

/// Largest readdir page, whatever the client asks for.
const MAX_READDIR_PAGE: usize = 4096;

/// What a readdir page's entries may take encoded: half a frame, so that a page of 255-byte
/// names (with their attributes) always fits one (a page of 4,096 such entries would not).
const READDIR_PAGE_BYTES: usize = surge_proto::MAX_MESSAGE_LEN / 2;

/// An upper bound of an encoded entry's size beyond its name: inode, kind and attributes in
/// postcard's varints at their widest.
const ENTRY_OVERHEAD: usize = 128;

impl MetaStore {
    /// A directory's default ACL, which what is made in it inherits.
    pub fn default_acl_of(&self, dir: Ino) -> Option<&Acl> {
        self.inodes.get(&dir)?.xattrs.as_ref()?.acl(AclKind::Default)
    }

    /// The group of what is made in `dir` if `dir` is set-group-ID (see
    /// [`access::owner_in`]).
    pub fn set_gid_group(&self, dir: Ino) -> Option<u32> {
        self.inodes.get(&dir)?.attr.set_gid_group()
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
        remote_group: Option<u32>,
        ino: Option<Ino>,
    ) -> Result<Attr> {
        // A `..` naming a file, or nothing, would answer lookups with another inode's kind.
        let (default, layout, dir_group) = match self.is_local(parent) {
            true => (self.default_acl_of(parent), self.dir(parent)?.layout, self.set_gid_group(parent)),
            false => (remote_default, remote_layout, remote_group),
        };
        let mut perms = access::inherit(FileKind::Dir, mode, umask, default);
        let gid = access::owner_in(FileKind::Dir, &mut perms, gid, dir_group);
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
        let attr = self.make_dir_inode(parent, mode, umask, uid, gid, None, layout, None, ino)?;
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

    pub fn readdir(&self, ino: Ino, after: Option<&str>, limit: u32) -> Result<(Vec<DirEntry>, bool)> {
        let dir = self.dir(ino)?;
        let limit = (limit as usize).clamp(1, MAX_READDIR_PAGE);
        let lower = match after {
            Some(name) => Bound::Excluded(name),
            None => Bound::Unbounded,
        };
        let mut range = dir.entries.range::<str, _>((lower, Bound::Unbounded)).peekable();
        // Room for the whole page at once: grown entry by entry, a page of 4,096 is copied
        // twelve times over.
        let (mut entries, mut bytes) = (Vec::with_capacity(limit.min(dir.entries.len())), 0);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::file;
    use surge_proto::call::encode_reply;
    use surge_proto::ino;
    use surge_proto::{DirPage, Timestamp, ROOT_INO};

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

    /// A directory's inode is made only under a directory when the parent is homed here (a
    /// `..` naming a file made `Lookup(dir, "..")` answer a file's attributes under a
    /// directory's kind: fuzz regression `dir-inode-under-a-file`).
    #[test]
    fn a_directory_inode_needs_a_directory_parent_here() {
        let mut s = MetaStore::new(0, 0, 0);
        let file = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        let under =
            |s: &mut MetaStore, parent| s.make_dir_inode(parent, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).map(|a| a.ino);
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

    #[test]
    fn directory_rules() {
        let mut s = MetaStore::new(0, 0, 0);
        let a = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap().ino;
        s.insert_entry(ROOT_INO, "a", a, FileKind::Dir, false, None).unwrap();
        file(&mut s, a, "x");
        assert_eq!(s.rmdir(ROOT_INO, "a").unwrap_err().code, ErrorCode::NotEmpty);
        assert_eq!(s.getattr(ROOT_INO).unwrap().nlink, 3);
        let b = s.make_dir_inode(a, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap().ino;
        s.insert_entry(a, "b", b, FileKind::Dir, false, None).unwrap();
        assert_eq!(s.rename(ROOT_INO, "a", b, "a2", false, None).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.rename(a, "x", ROOT_INO, "a", false, None).unwrap_err().code, ErrorCode::IsDir);
        assert_eq!(s.create(ROOT_INO, &"n".repeat(256), 0o644, 0, 0, 0, true, false, None).unwrap_err().code, ErrorCode::NameTooLong);
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
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap();
        s.drop_inode(dir.ino).unwrap();
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
        let entry = DirEntry { name: "n".repeat(255), ino: u64::MAX, kind: FileKind::Symlink, attr: Some(attr), has_xattrs: true };
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
}
