//! The namespace by path: absolute paths within the instance (`/a/b`), resolved one name at
//! a time from the root (symlinks are not followed; the FUSE mount does that).
//!
//! A relative path or one with `..` is refused (`Invalid`), `.` and empty components are
//! skipped. Resolution is not atomic: each name is looked up in turn, so a rename elsewhere
//! meanwhile may change what the path names. Errors carry the path they were met on.

use surge_proto::ino::Ino;
use surge_proto::{Attr, AttrChanges, DirEntry, ErrorCode, FileKind, Timestamp, ROOT_INO};

use crate::error::{Error, Result};
use crate::{Client, File};

/// How many times an open looks a name up again after its inode vanished in between: each
/// time another client replaced the name at that very moment.
pub(crate) const NAME_RACE_ATTEMPTS: u32 = 8;

impl Client {
    /// Resolves an absolute instance path to its attributes (symlinks are not followed).
    pub async fn stat(&self, path: &str) -> Result<Attr> {
        let mut attr = self.getattr(ROOT_INO).await?;
        for name in components(path)? {
            if attr.kind != FileKind::Dir {
                return Err(Error::new(ErrorCode::NotDir, format!("{path}: a component is not a directory")));
            }
            attr = self.lookup(attr.ino, name).await.map_err(|e| with_path(e, path))?;
        }
        Ok(attr)
    }

    /// Resolves the parent directory of `path` and returns (parent inode, last name).
    pub async fn resolve_parent<'p>(&self, path: &'p str) -> Result<(Ino, &'p str)> {
        let names = components(path)?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(Error::new(ErrorCode::Invalid, format!("{path}: the root has no parent")));
        };
        let mut ino = ROOT_INO;
        for name in dirs {
            let entry = self.lookup_entry(ino, name).await.map_err(|e| with_path(e, path))?;
            if entry.kind != FileKind::Dir {
                return Err(Error::new(ErrorCode::NotDir, format!("{path}: '{name}' is not a directory")));
            }
            ino = entry.ino;
        }
        Ok((ino, last))
    }

    pub async fn create(&self, path: &str, mode: u32) -> Result<File> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.create_at(parent, name, mode, true).await.map_err(|e| with_path(e, path))
    }

    /// Opens an existing file; `truncate` empties it first (O_TRUNC).
    ///
    /// The name is looked up, then its inode opened. A rename over the name or an unlink
    /// between the two leaves an inode that is gone (no handle held it): the name is looked up
    /// again, as the kernel walks a path again that met a stale inode, so a name that always
    /// named some file (one replaced by rename, atomically) always opens.
    pub async fn open(&self, path: &str, truncate: bool) -> Result<File> {
        let mut attempts = 0;
        let file = loop {
            attempts += 1;
            let attr = self.stat(path).await?;
            if attr.kind == FileKind::Dir {
                return Err(Error::new(ErrorCode::IsDir, path.to_string()));
            }
            match self.open_ino(attr.ino).await {
                Err(e) if e.code == ErrorCode::NotFound && attempts < NAME_RACE_ATTEMPTS => continue,
                opened => break opened.map_err(|e| with_path(e, path))?,
            }
        };
        if truncate {
            file.set_len(0).await?;
        }
        Ok(file)
    }

    /// Opens a file, creating it if missing, keeping its content (O_CREAT): how N processes
    /// share one output file.
    pub async fn create_or_open(&self, path: &str) -> Result<File> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.create_at(parent, name, 0o644, false).await.map_err(|e| with_path(e, path))
    }

    /// Opens or creates a file for writing, emptied (O_CREAT|O_TRUNC).
    pub async fn create_or_truncate(&self, path: &str, mode: u32) -> Result<File> {
        let (parent, name) = self.resolve_parent(path).await?;
        let file = self.create_at(parent, name, mode, false).await.map_err(|e| with_path(e, path))?;
        if file.size() > 0 {
            file.set_len(0).await?;
        }
        Ok(file)
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<Attr> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.mkdir_at(parent, name, mode).await.map_err(|e| with_path(e, path))
    }

    /// Creates a directory and any missing parents (`mkdir -p`).
    pub async fn mkdir_all(&self, path: &str, mode: u32) -> Result<Attr> {
        let mut attr = self.getattr(ROOT_INO).await?;
        for name in components(path)? {
            attr = match self.lookup(attr.ino, name).await {
                Ok(a) if a.kind == FileKind::Dir => a,
                Ok(_) => return Err(Error::new(ErrorCode::NotDir, format!("{path}: '{name}' is not a directory"))),
                Err(e) if e.code == ErrorCode::NotFound => match self.mkdir_at(attr.ino, name, mode).await {
                    Ok(a) => a,
                    Err(e) if e.code == ErrorCode::Exists => self.lookup(attr.ino, name).await?,
                    Err(e) => return Err(with_path(e, path)),
                },
                Err(e) => return Err(with_path(e, path)),
            };
        }
        Ok(attr)
    }

    pub async fn rmdir(&self, path: &str) -> Result<()> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.rmdir_at(parent, name).await.map_err(|e| with_path(e, path))
    }

    pub async fn unlink(&self, path: &str) -> Result<()> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.unlink_at(parent, name).await.map_err(|e| with_path(e, path))
    }

    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (src_parent, src_name) = self.resolve_parent(from).await?;
        let (dst_parent, dst_name) = self.resolve_parent(to).await?;
        self.rename_at(src_parent, src_name, dst_parent, dst_name, false).await.map_err(|e| with_path(e, &format!("{from} -> {to}")))
    }

    /// `a` and `b` swap what they name (rename(2)'s RENAME_EXCHANGE).
    pub async fn exchange(&self, a: &str, b: &str) -> Result<()> {
        let (parent_a, name_a) = self.resolve_parent(a).await?;
        let (parent_b, name_b) = self.resolve_parent(b).await?;
        self.exchange_at(parent_a, name_a, parent_b, name_b).await.map_err(|e| with_path(e, &format!("{a} <-> {b}")))
    }

    pub async fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let attr = self.stat(path).await?;
        if attr.kind != FileKind::Dir {
            return Err(Error::new(ErrorCode::NotDir, path.to_string()));
        }
        self.readdir_ino(attr.ino).await
    }

    pub async fn symlink(&self, target: &str, link: &str) -> Result<Attr> {
        let (parent, name) = self.resolve_parent(link).await?;
        self.symlink_at(parent, name, target).await.map_err(|e| with_path(e, link))
    }

    /// A hard link `new` to the file at `existing` (not followed if it is a symlink).
    pub async fn link(&self, existing: &str, new: &str) -> Result<Attr> {
        let (parent, name) = self.resolve_parent(existing).await?;
        let ino = self.lookup(parent, name).await.map_err(|e| with_path(e, existing))?.ino;
        let (new_parent, new_name) = self.resolve_parent(new).await?;
        self.link_at(ino, new_parent, new_name).await.map_err(|e| with_path(e, &format!("{existing} -> {new}")))
    }

    /// A FIFO, socket or device node at `path`.
    pub async fn mknod(&self, path: &str, kind: FileKind, mode: u32) -> Result<Attr> {
        let (parent, name) = self.resolve_parent(path).await?;
        self.mknod_at(parent, name, kind, mode).await.map_err(|e| with_path(e, path))
    }

    pub async fn readlink(&self, path: &str) -> Result<String> {
        let attr = self.stat(path).await?;
        self.readlink_ino(attr.ino).await.map_err(|e| with_path(e, path))
    }

    pub async fn set_attr(&self, path: &str, changes: AttrChanges) -> Result<Attr> {
        let attr = self.stat(path).await?;
        self.setattr(attr.ino, changes).await.map_err(|e| with_path(e, path))
    }

    pub async fn chmod(&self, path: &str, mode: u32) -> Result<Attr> {
        self.set_attr(path, AttrChanges { mode: Some(mode), ..Default::default() }).await
    }

    pub async fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> Result<Attr> {
        self.set_attr(path, AttrChanges { uid, gid, ..Default::default() }).await
    }

    pub async fn utimens(&self, path: &str, atime: Option<Timestamp>, mtime: Option<Timestamp>) -> Result<Attr> {
        self.set_attr(path, AttrChanges { atime, mtime, ..Default::default() }).await
    }

    pub async fn truncate(&self, path: &str, size: u64) -> Result<Attr> {
        self.set_attr(path, AttrChanges { size: Some(size), ..Default::default() }).await
    }
}

fn components(path: &str) -> Result<Vec<&str>> {
    if !path.starts_with('/') {
        return Err(Error::new(ErrorCode::Invalid, format!("'{path}': instance paths are absolute (start with /)")));
    }
    let names: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if names.contains(&"..") {
        return Err(Error::new(ErrorCode::Invalid, format!("'{path}': '..' is not allowed in instance paths")));
    }
    Ok(names)
}

fn with_path(e: Error, path: &str) -> Error {
    e.context(path)
}
