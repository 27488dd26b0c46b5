//! Rename. Between two directories homed here it is one atomic step (rename, exchange), which
//! is what makes write-to-temporary then rename a safe way to publish a file. Between
//! servers the client sequences single-server steps: `rename_prepare` locks the source entry
//! (other changes to it get `Busy`; the lock lapses after [`RENAME_LOCK_TTL`] if the client
//! dies), `insert_entry` links the target under rename's replace rules (`replace_existing`),
//! and `rename_finish` removes the source (or unlocks it); an exchange swaps each side with
//! `swap_entry`. A directory is never moved below itself: this server walks the part of the
//! chain of `..` it holds, the client the rest.

use std::time::{Duration, Instant};

use surge_proto::{check_name, DirEntry, ErrorCode, FileKind, Ino, LinkOutcome, Timestamp, Unlinked};

use crate::error::Result;
use crate::model::{fail, Body, Entry, MetaStore};

/// How long a cross-server rename may hold its source entry before the lock is ignored
/// (the client that took it has died).
const RENAME_LOCK_TTL: Duration = Duration::from_secs(30);

impl MetaStore {
    /// Applies rename's rules for replacing `existing` by an entry of kind `src_kind`, and
    /// removes what it replaces. Returns the inode that lost its name.
    pub(crate) fn replace_existing(
        &mut self,
        parent: Ino,
        name: &str,
        src_kind: FileKind,
        retired_target: Option<Ino>,
    ) -> Result<Option<Unlinked>> {
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
            return Ok(Some(Unlinked {
                ino: ex_ino,
                kind: ex_kind,
                remote: !self.is_local(ex_ino),
                purge: false,
                size: 0,
                ticket: None,
                dir_attr: None,
            }));
        }
        self.unlinked_entry(&entry).map(Some)
    }

    /// Points a moved directory's `..` at its new parent when it is homed here; otherwise
    /// returns it so the client updates its home server.
    pub(crate) fn reparent(&mut self, ino: Ino, kind: FileKind, parent: Ino) -> Option<Ino> {
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
    /// client checks the whole chain first (`Client::rename_at`), which may leave this
    /// server; this catches the local case again under the metadata lock.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::file;
    use surge_proto::ROOT_INO;

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
}
