//! An inode's attributes: getattr and setattr (a chmod keeps an access ACL in step), open and
//! close (`commit`: a writer's size and mtime published, a handle released, a written file
//! published in its directory's log), appends from many nodes (each given a range of its own
//! at the end), and the allocations clients measured, kept while the content they measured is.
//! Open handles are counted here but not journaled: a restart carries none over.

use surge_proto::acl::AclKind;
use surge_proto::namespace::AllocationNote;
use surge_proto::{Attr, AttrChanges, ErrorCode, FileKind, Ino, InodeFate, Timestamp};

use crate::access::{self, Caller};
use crate::error::Result;
use crate::model::{fail, MetaStore};

impl MetaStore {
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.inode(ino)?.attr.clone())
    }

    /// A setattr by a trusted client that names nobody: root's.
    pub fn setattr(&mut self, ino: Ino, changes: &AttrChanges) -> Result<Attr> {
        self.setattr_as(ino, changes, None)
    }

    /// A setattr on a connection proven to be `connection`'s (None: a trusted one): the
    /// set-id bits go as Linux clears them for whom it acts for ([`Caller::acting_for`]).
    pub fn setattr_as(&mut self, ino: Ino, changes: &AttrChanges, connection: Option<&Caller>) -> Result<Attr> {
        let inode = self.inode_mut(ino)?;
        if changes.size.is_some() && inode.attr.kind != FileKind::File {
            return fail(
                if inode.attr.kind == FileKind::Dir { ErrorCode::IsDir } else { ErrorCode::Invalid },
                "size can only be set on a file",
            );
        }
        if let (Some(_), Some(cut_at)) = (changes.size, changes.cut_at) {
            if inode.attr.content_version() != cut_at {
                return fail(ErrorCode::Stale, "the file changed after its data was cut: cut again");
            }
        }
        if let (Some(mode), Some(xattrs)) = (changes.mode, inode.xattrs.as_deref_mut()) {
            // chmod sets the access ACL's owner, mask (or owning group) and other entries.
            if let Some(acl) = xattrs.acl(AclKind::Access) {
                let acl = access::chmod_acl(acl, mode);
                xattrs.set_acl(AclKind::Access, Some(acl));
                self.changed_xattr(ino, AclKind::Access.xattr_name());
            }
        }
        let author = Caller::acting_for(connection, changes.by.as_ref());
        let inode = self.inode_mut(ino)?;
        if changes.size.is_some() {
            inode.data_end = inode.data_reach();
        }
        let attr = &mut inode.attr;
        attr.mode = author.mode_after(attr, changes);
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

    pub fn open(&mut self, ino: Ino) -> Result<Attr> {
        // Open handles do not outlive a restart: nothing here for the journal.
        let inode = self.inode_untracked(ino)?;
        inode.opens += 1;
        Ok(inode.attr.clone())
    }

    /// A client keeps file `ino` to answer its opens itself (see `surge_proto::namespace::Open`).
    pub fn keep(&mut self, ino: Ino) -> Result<()> {
        // Kept like an open handle: nothing here for the journal.
        self.inode_untracked(ino)?.kept += 1;
        Ok(())
    }

    /// A keeper lets go of `ino`: returns whether the file is now gone and must be purged.
    pub fn release_kept(&mut self, ino: Ino) -> Result<InodeFate> {
        let inode = self.inode_untracked(ino)?;
        inode.kept = inode.kept.saturating_sub(1);
        let gone = inode.attr.nlink == 0 && !inode.held();
        let (purge, size) = (gone && inode.attr.kind == FileKind::File, inode.data_reach());
        if gone {
            self.remove_inode(ino);
        }
        Ok(InodeFate { purge, size, ticket: None, published: None })
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
        let gone = inode.attr.nlink == 0 && !inode.held();
        let (purge, final_size, last_close) = (gone && inode.attr.kind == FileKind::File, inode.data_reach(), inode.opens == 0);
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
            if let Some(end) = note.set_aside_to.filter(|&end| end > inode.data_reach()) {
                inode.data_end = end;
                // Kept across a restart, as the size is.
                self.changed(note.ino);
            }
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
    use super::*;
    use surge_proto::placement::DirLayout;
    use surge_proto::{Requester, ROOT_INO};

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
        let note = |blocks, version| AllocationNote { ino, version, blocks, set_aside_to: None };
        s.note_allocation(&[note(Some(8), written.content_version())]);
        assert_eq!(s.getattr(ino).unwrap().blocks, Some(8));
        s.commit(ino, Some(8192), Some(Timestamp { secs: 6, nanos: 0 }), false, true).unwrap();
        s.note_allocation(&[note(Some(8), written.content_version())]);
        assert_eq!(s.getattr(ino).unwrap().blocks, None, "a measurement of an older version is not kept");
        let now = s.getattr(ino).unwrap().content_version();
        s.note_allocation(&[note(Some(16), now), AllocationNote { ino: 0xdead, version: now, blocks: Some(1), set_aside_to: None }]);
        assert_eq!(s.getattr(ino).unwrap().blocks, Some(16), "a note for an inode not here is passed over");
        s.note_allocation(&[note(None, written.content_version())]);
        assert_eq!(s.getattr(ino).unwrap().blocks, None, "a changed allocation is forgotten whatever the version");
        s.setattr(ino, &AttrChanges { size: Some(1), ..Default::default() }).unwrap();
        assert_eq!(s.getattr(ino).unwrap().blocks, None, "truncating changes it");
        s.setattr(ino, &AttrChanges { size: Some(0), ..Default::default() }).unwrap();
        assert_eq!(s.getattr(ino).unwrap().blocks, Some(0), "nothing is left of an emptied file");
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, DirLayout::Striped, None, None).unwrap();
        s.note_allocation(&[note(Some(16), s.getattr(ino).unwrap().content_version())]);
        let mut replayed = MetaStore::new(0, 0, 0);
        replayed.apply(s.take_changes()).unwrap();
        assert_eq!(replayed.getattr(ino).unwrap().blocks, None, "measured again after a restart");
        assert_eq!(replayed.getattr(dir.ino).unwrap().blocks, Some(0), "a directory has no data files");
    }

    /// A removal purges as far as the file's data may reach on the servers: its largest size
    /// before a truncation (the servers keep the data files, emptied) and space set aside past
    /// its end; a file that only ever grew, its size.
    #[test]
    fn a_removal_reaches_the_data_past_the_size() {
        let mut s = MetaStore::new(0, 0, 0);
        let truncated = s.create(ROOT_INO, "truncated", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.commit(truncated, Some(10 << 20), None, false, true).unwrap();
        s.setattr(truncated, &AttrChanges { size: Some(0), ..Default::default() }).unwrap();
        s.setattr(truncated, &AttrChanges { size: Some(3 << 20), ..Default::default() }).unwrap();
        assert_eq!(s.unlink(ROOT_INO, "truncated").unwrap().size, 10 << 20);

        let kept = s.create(ROOT_INO, "kept", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.commit(kept, Some(4096), None, false, true).unwrap();
        let version = s.getattr(kept).unwrap().content_version();
        s.note_allocation(&[AllocationNote { ino: kept, version, blocks: None, set_aside_to: Some(48 << 20) }]);
        assert_eq!(s.getattr(kept).unwrap().size, 4096, "space set aside past the end leaves the size");
        assert_eq!(s.unlink(ROOT_INO, "kept").unwrap().size, 48 << 20);

        let grown = s.create(ROOT_INO, "grown", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.commit(grown, Some(5 << 20), None, false, true).unwrap();
        assert_eq!(s.unlink(ROOT_INO, "grown").unwrap().size, 5 << 20);
    }

    /// A truncate whose cut of the servers' data a publication followed is refused (Stale),
    /// with nothing changed, so that the client cuts again; one the file did not change
    /// after is applied.
    #[test]
    fn a_truncate_refuses_a_size_a_publication_came_after_its_cut() {
        let mut s = MetaStore::new(0, 0, 0);
        let ino = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.commit(ino, Some(1 << 20), None, false, true).unwrap();
        let cut_at = s.getattr(ino).unwrap().content_version();
        // Another node's write, past the new size, published after the cut.
        s.commit(ino, Some(2 << 20), None, false, true).unwrap();
        let truncate = AttrChanges { size: Some(4096), cut_at: Some(cut_at), ..Default::default() };
        assert_eq!(s.setattr(ino, &truncate).unwrap_err().code, ErrorCode::Stale);
        assert_eq!(s.getattr(ino).unwrap().size, 2 << 20, "nothing changed");
        let cut_at = s.getattr(ino).unwrap().content_version();
        let truncate = AttrChanges { size: Some(4096), cut_at: Some(cut_at), ..Default::default() };
        assert_eq!(s.setattr(ino, &truncate).unwrap().size, 4096);
    }

    /// The store applies the set-id rules to whom the request names: a mount's chgrp by the
    /// file's owner and its write without privilege clear the bits; root's write keeps them.
    #[test]
    fn setattr_clears_set_id_bits_for_the_requester() {
        let mut s = MetaStore::new(0, 0, 0);
        let ino = s.create(ROOT_INO, "f", 0o6555, 0, 65534, 65533, true, false, None).unwrap().ino;
        let mount = Caller { uid: 0, gid: 0, groups: vec![] };
        let owner = Requester { uid: 65534, gid: 65534, groups: vec![65534, 65533, 65532] };
        let chgrp = AttrChanges { gid: Some(65532), by: Some(owner.clone()), ..Default::default() };
        let attr = s.setattr_as(ino, &chgrp, Some(&mount)).unwrap();
        assert_eq!((attr.mode, attr.gid), (0o555, 65532));
        s.setattr(ino, &AttrChanges { mode: Some(0o6777), ..Default::default() }).unwrap();
        let written = AttrChanges { kill_set_id: true, by: Some(Requester { uid: 0, gid: 0, groups: vec![] }), ..Default::default() };
        assert_eq!(s.setattr_as(ino, &written, Some(&mount)).unwrap().mode, 0o6777, "root's write keeps them");
        let written = AttrChanges { kill_set_id: true, by: Some(owner), ..Default::default() };
        assert_eq!(s.setattr_as(ino, &written, Some(&mount)).unwrap().mode, 0o777);
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

    /// A kept file is held as an open handle holds it (an unlinked one stays until the last
    /// keeper and handle let go, in either order), but is not an open handle itself.
    #[test]
    fn a_kept_file_stays_until_let_go_but_is_not_open() {
        let mut s = MetaStore::new(0, 0, 0);
        let ino = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        s.open(ino).unwrap();
        s.keep(ino).unwrap();
        s.commit(ino, None, None, true, false).unwrap();
        assert_eq!(s.inodes.get(&ino).map(|i| i.opens), Some(0), "kept, and no handle open");
        assert!(!s.unlink(ROOT_INO, "f").unwrap().purge, "a kept file stays");
        s.open(ino).unwrap();
        assert!(!s.release_kept(ino).unwrap().purge, "a handle still holds it");
        let fate = s.commit(ino, None, None, true, false).unwrap();
        assert!(fate.purge && s.getattr(ino).is_err(), "the last to let go purges");

        let ino = s.create(ROOT_INO, "g", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        s.keep(ino).unwrap();
        s.unlink(ROOT_INO, "g").unwrap();
        assert!(s.release_kept(ino).unwrap().purge && s.getattr(ino).is_err());
    }
}
