//! The mount's open handles: files (with the chunks fetched for their readers), indexed by
//! handle and by inode, since every read and write asks for the other handles of its file.
//! Both indexes change together, so a handle is found by its inode exactly while it is open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use surge_client::File;

use crate::chunks::ChunkCache;

/// An open file and the chunks fetched for its readers.
pub(crate) struct OpenFile {
    pub file: Arc<File>,
    pub chunks: ChunkCache,
    /// Its reads and writes go through the kernel's page cache (not passed through to a
    /// data file, not O_APPEND's direct I/O): see [`crate::kernel::KernelCache::open_pages`].
    pub paged: bool,
    /// Created in this directory under a delegation without passthrough: its large writes
    /// tell the directory's next creates to pass through (see `surge_client::Delegations`).
    pub made_in: Option<u64>,
}

/// The open handles, by handle and by inode: every read and write asks for the other handles
/// of its file, which must not cost a walk over thousands of open files.
#[derive(Default)]
pub(crate) struct OpenFiles {
    by_handle: HashMap<u64, Arc<OpenFile>>,
    by_ino: HashMap<u64, Vec<u64>>,
}

impl OpenFiles {
    pub fn insert(&mut self, fh: u64, open: Arc<OpenFile>) {
        self.by_ino.entry(open.file.ino()).or_default().push(fh);
        self.by_handle.insert(fh, open);
    }

    pub fn remove(&mut self, fh: u64) -> Option<Arc<OpenFile>> {
        let open = self.by_handle.remove(&fh)?;
        let ino = open.file.ino();
        if let Some(handles) = self.by_ino.get_mut(&ino) {
            handles.retain(|&h| h != fh);
            if handles.is_empty() {
                self.by_ino.remove(&ino);
            }
        }
        Some(open)
    }

    /// Every handle of `ino` but `fh` (0: all of them).
    pub fn of_ino(&self, ino: u64, fh: u64) -> impl Iterator<Item = &Arc<OpenFile>> {
        self.by_ino.get(&ino).into_iter().flatten().filter(move |&&h| h != fh).filter_map(|h| self.by_handle.get(h))
    }
}

pub(crate) type Files = Arc<Mutex<OpenFiles>>;

impl OpenFiles {
    pub fn get(&self, fh: u64) -> Option<Arc<OpenFile>> {
        self.by_handle.get(&fh).cloned()
    }

    /// The handles whose I/O the kernel passes through to a data file.
    pub fn passed_through(&self) -> Vec<Arc<OpenFile>> {
        self.by_handle.values().filter(|f| f.file.is_passthrough()).cloned().collect()
    }
}

/// The largest size any open handle on this node knows for `ino`: writes not yet published
/// to the servers are part of the file for every program on this node.
pub(crate) fn unpublished_size(files: &Files, ino: u64) -> u64 {
    files.lock().unwrap().of_ino(ino, 0).filter_map(|f| f.file.unpublished_end()).max().unwrap_or(0)
}

/// The other open handles of the same file (`fh` 0: every handle of `ino`): what one handle
/// writes, a read through another on this node must see.
pub(crate) fn siblings(files: &Files, fh: u64, ino: u64) -> Vec<Arc<OpenFile>> {
    files.lock().unwrap().of_ino(ino, fh).cloned().collect()
}
