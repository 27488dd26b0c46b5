//! Names and what they name: lookup, create (placed on the creator's server in a node-local
//! directory), the create a delegation writes back, mknod, symlink and readlink, hard links
//! (one more link on the inode's home, then the name where it goes), unlink, and the
//! conditional removal of a name. A non-directory inode homed here counts its names in its
//! link count and goes with its last name, unless an open handle keeps it until it is closed.

use surge_proto::ino;
use surge_proto::placement::DirLayout;
use surge_proto::{check_name, Attr, DirEntry, ErrorCode, FileKind, Ino, InodeFate, LinkOutcome, Timestamp, Unlinked, MAX_SYMLINK_LEN};

use crate::access::{self, Inherited};
use crate::error::Result;
use crate::model::{fail, Body, MetaStore};

/// Links one inode may have (ext4's limit).
const MAX_LINKS: u32 = 65_000;

impl MetaStore {
    pub fn lookup(&self, parent: Ino, name: &str) -> Result<DirEntry> {
        if name == ".." {
            // Lets a client walk up the tree (rename's cycle check, NFS-style lookups).
            let up = self.dir(parent)?.parent;
            return Ok(self.dir_entry(name, up, FileKind::Dir));
        }
        let (ino, kind, _) = self.entry_of(parent, name)?;
        Ok(self.dir_entry(name, ino, kind))
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
        let mut perms = access::inherit(FileKind::File, mode, umask, self.default_acl_of(parent));
        let gid = access::owner_in(FileKind::File, &mut perms, gid, self.set_gid_group(parent));
        self.insert_inode(ino, FileKind::File, perms, uid, gid, Body::File);
        self.link_entry(parent, name, ino, FileKind::File)?;
        if open {
            self.inode_mut(ino)?.opens += 1;
        }
        // With its attributes as made (a default ACL of the parent gives it an access ACL).
        Ok(self.dir_entry(name, ino, FileKind::File))
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
    fn make_named(
        &mut self,
        parent: Ino,
        name: &str,
        kind: FileKind,
        mut perms: Inherited,
        uid: u32,
        gid: u32,
        body: Body,
    ) -> Result<Attr> {
        if self.dir(parent)?.entries.contains_key(name) {
            return fail(ErrorCode::Exists, format!("'{name}' exists"));
        }
        let gid = access::owner_in(kind, &mut perms, gid, self.set_gid_group(parent));
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
                // A rename onto another name of the same file, which rename(2) leaves alone:
                // the caller must keep the source name too (it alone can tell this from a
                // free target, where the source goes).
                return fail(ErrorCode::Exists, format!("'{name}' already names this file"));
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

    pub fn unlink(&mut self, parent: Ino, name: &str) -> Result<Unlinked> {
        let (_, kind, locked) = self.entry_of(parent, name)?;
        if kind == FileKind::Dir {
            return fail(ErrorCode::IsDir, format!("'{name}' is a directory"));
        }
        Self::check_not_locked(locked, name)?;
        let entry = self.unlink_entry(parent, name)?;
        self.unlinked_entry(&entry)
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

    pub fn drop_link(&mut self, ino: Ino) -> Result<InodeFate> {
        let unlinked = self.drop_link_local(ino)?;
        Ok(InodeFate { purge: unlinked.purge, size: unlinked.size, ticket: None, published: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::file;
    use surge_proto::ROOT_INO;

    /// Hard links: the count follows the names; the file goes with its last name; what
    /// link(2) refuses is refused, also a name that is there already as the same file.
    #[test]
    fn hard_links_count_names() {
        let mut s = MetaStore::new(0, 0, 0);
        let ino = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        assert_eq!(s.add_link(ino).unwrap().nlink, 2);
        s.insert_entry(ROOT_INO, "g", ino, FileKind::File, false, None).unwrap();
        assert_eq!(s.insert_entry(ROOT_INO, "g", ino, FileKind::File, false, None).unwrap_err().code, ErrorCode::Exists);
        // A rename between servers onto a name that is already this file's changes nothing
        // (the client then keeps the source name too).
        assert_eq!(s.insert_entry(ROOT_INO, "g", ino, FileKind::File, true, None).unwrap_err().code, ErrorCode::Exists);
        assert_eq!(s.inode(ino).unwrap().attr.nlink, 2);
        assert!(!s.unlink(ROOT_INO, "f").unwrap().purge, "one name left");
        assert_eq!(s.getattr(ino).unwrap().nlink, 1);
        assert!(s.unlink(ROOT_INO, "g").unwrap().purge, "the last name took the file");
        assert_eq!(s.add_link(ino).unwrap_err().code, ErrorCode::NotFound);
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap().ino;
        assert_eq!(s.add_link(dir).unwrap_err().code, ErrorCode::NotPermitted);
        let open = s.create(ROOT_INO, "open", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.unlink(ROOT_INO, "open").unwrap();
        assert_eq!(s.add_link(open).unwrap_err().code, ErrorCode::NotFound, "an unlinked open file stays nameless");
    }

    /// A name for an inode homed here must name it as what it is, and something that exists;
    /// the same for an exchange's half-step (fuzz regression `swap-entry-wrong-kind`: a file
    /// swapped in as a FIFO made `Create` answer a file's attributes under a FIFO's kind).
    /// A name longer than NAME_MAX is ENAMETOOLONG wherever it is looked up, not ENOENT.
    #[test]
    fn a_name_too_long_is_refused_as_such() {
        let mut s = MetaStore::new(0, 0, 0);
        let long = "x".repeat(256);
        assert_eq!(s.lookup(ROOT_INO, &long).unwrap_err().code, ErrorCode::NameTooLong);
        assert_eq!(s.unlink(ROOT_INO, &long).unwrap_err().code, ErrorCode::NameTooLong);
        assert_eq!(s.lookup(ROOT_INO, &"x".repeat(255)).unwrap_err().code, ErrorCode::NotFound);
    }

    #[test]
    fn insert_entry_refuses_a_kind_its_inode_does_not_have() {
        let mut s = MetaStore::new(0, 0, 0);
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap().ino;
        assert_eq!(s.insert_entry(ROOT_INO, "d", dir, FileKind::File, false, None).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.insert_entry(ROOT_INO, "x", ino::make(0, 999), FileKind::File, false, None).unwrap_err().code, ErrorCode::NotFound);
        s.insert_entry(ROOT_INO, "d", dir, FileKind::Dir, false, None).unwrap();
        assert_eq!(s.lookup(ROOT_INO, "d").unwrap().attr.unwrap().kind, FileKind::Dir);
        let f = file(&mut s, ROOT_INO, "f");
        assert_eq!(s.swap_entry(ROOT_INO, "f", f, f, FileKind::Fifo).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.swap_entry(ROOT_INO, "f", f, ino::make(0, 999), FileKind::File).unwrap_err().code, ErrorCode::NotFound);
        assert_eq!(s.lookup(ROOT_INO, "f").unwrap().kind, FileKind::File, "refused: the entry is as it was");
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

        let inherits = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap().ino;
        assert_eq!(s.layout_of(inherits).unwrap(), DirLayout::NodeLocal, "the parent here says, not the client");
        s.insert_entry(ROOT_INO, "sub", inherits, FileKind::Dir, false, None).unwrap();
        s.set_layout(inherits, DirLayout::Striped).unwrap();
        let striped = s.create(inherits, "f", 0o644, 0, 0, 0, true, false, Some(3)).unwrap().ino;
        assert_eq!(ino::data_server(striped), None);
        assert_eq!(s.layout_of(striped).unwrap_err().code, ErrorCode::NotDir);

        let mut elsewhere = MetaStore::new(1, 0, 0);
        let told = elsewhere.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::NodeLocal, None, None).unwrap().ino;
        assert_eq!(elsewhere.layout_of(told).unwrap(), DirLayout::NodeLocal);
    }

    /// What is made in a set-group-ID directory takes the directory's group, whoever makes
    /// it, and a new directory the bit too, so the whole tree stays the project's; a server
    /// making a directory for a parent it does not home takes the group it is told.
    #[test]
    fn a_set_group_id_directory_gives_its_group_to_what_is_made_in_it() {
        let mut s = MetaStore::new(0, 0, 0);
        let project = s.make_dir(ROOT_INO, "project", 0o775, 0, 0, 0, None).unwrap().ino;
        s.setattr(project, &surge_proto::AttrChanges { mode: Some(0o2775), gid: Some(500), ..Default::default() }).unwrap();
        let (uid, gid) = (1000, 1000);
        let file = s.create(project, "f", 0o664, 0o002, uid, gid, false, false, None).unwrap().ino;
        let dir = s.make_dir(project, "d", 0o775, 0o002, uid, gid, None).unwrap();
        let link = s.symlink(project, "l", "f", uid, gid).unwrap();
        let fifo = s.make_node(project, "p", FileKind::Fifo, 0o644, 0, uid, gid).unwrap();
        let file = s.getattr(file).unwrap();
        assert_eq!((file.gid, file.mode), (500, 0o664), "a file takes the group, not the bit");
        assert_eq!((dir.gid, dir.mode), (500, 0o2775), "a directory takes the group and the bit");
        assert_eq!((link.gid, fifo.gid), (500, 500));
        let nested = s.create(dir.ino, "g", 0o644, 0, uid, gid, false, false, None).unwrap().ino;
        assert_eq!(s.getattr(nested).unwrap().gid, 500, "and so on down the tree");

        let plain = s.make_dir(ROOT_INO, "plain", 0o755, 0, 0, 0, None).unwrap().ino;
        let own = s.create(plain, "f", 0o644, 0, uid, gid, false, false, None).unwrap().ino;
        assert_eq!(s.getattr(own).unwrap().gid, gid, "elsewhere the maker's group");

        let mut elsewhere = MetaStore::new(1, 0, 0);
        let told = elsewhere.make_dir_inode(project, 0o755, 0, uid, gid, None, DirLayout::Striped, Some(500), None).unwrap();
        assert_eq!((told.gid, told.mode), (500, 0o2755));
        assert_eq!(s.set_gid_group(project), Some(500), "what its home checks a told group against");
        assert_eq!(s.set_gid_group(plain), None);
    }
}
