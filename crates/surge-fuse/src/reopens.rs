//! Opens the mount answers itself: a file opened read-only here is kept at its home
//! (`Client::open_ino_kept`), and its later read-only opens on this node are answered from
//! what was kept, without waiting for the home: each such handle's open (and its release)
//! is still registered there, by a request nobody waits for, so that what asks whether a
//! file is read (a drain's retention, publication) sees it as any open.
//!
//! Why close-to-open still holds: the home tells this mount of every change to the file's
//! attributes (a size or time published by a close elsewhere, a truncate, a link added or
//! lost) and waits for the mount's acknowledgement before it answers the change. The notice
//! makes the kept file stop answering ([`Reopens::changed`]) before it is acknowledged, so
//! an open answered here never misses a change another node was already told is done; the
//! next open asks the home again. And the kept file holds the file at its home: one removed
//! elsewhere while a handle answered here reads it (its registration may still be on its
//! way) keeps its data until that handle is released; the last to let go (a handle's
//! release, or the kept file's once no handle shares it) purges the data, as any last close
//! of a removed file does.
//!
//! A home that waits for an acknowledgement in vain (the node is cut off, or hangs) answers
//! the change after 2 s all the same (the servers' `ACK_TIMEOUT`). So the mount answers from
//! a kept file only while its home's notices are known to be all in
//! (`surge_client::NoticeLease`: the home reached within 1.5 s).
//!
//! What the mount does not answer itself: opens for writing or with O_TRUNC (they change the
//! file, and end its keeping here first), opens of a file with handles here that were not
//! answered from the kept one (their writes and sizes are this node's own), and anything
//! after the connection to the file's home was lost (its notices may have been missed).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use surge_client::surge_proto::ino;
use surge_client::{Client, File, NoticeLease};
use tokio::runtime::Handle;

/// Kept files at most (a few hundred bytes each here, held each at its home). Beyond, kept
/// files no handle shares are let go, any of them: the kernel's own inode cache bounds what
/// is opened again.
const MAX_KEPT: usize = 131_072;

/// The kept files of this mount, by inode.
pub(crate) struct Reopens {
    kept: Mutex<HashMap<u64, Kept>>,
    runtime: Handle,
    lease: NoticeLease,
}

struct Kept {
    /// The kept file, once its open is answered (None while it is on its way).
    file: Option<Arc<File>>,
    /// Handles answered from it and not released yet.
    sharing: u32,
    /// Nothing changed since it was opened: opens may be answered from it.
    good: bool,
}

impl Reopens {
    pub(crate) fn new(runtime: Handle, client: Client) -> Reopens {
        Reopens { kept: Mutex::default(), lease: NoticeLease::new(client, runtime.clone()), runtime }
    }

    /// A request to `server` sent at `sent` was answered.
    pub(crate) fn reached(&self, server: usize, sent: Instant) {
        self.lease.reached(server, sent);
    }

    /// A read-only handle of `ino` answered here, if a good kept file exists, its home's
    /// notices are all in ([`NoticeLease`]), and the handles of the file open here (`open_here`) are all
    /// answered from it.
    pub(crate) fn answer(&self, ino: u64, open_here: usize) -> Option<File> {
        if !self.lease.holds(ino::home(ino)) {
            return None;
        }
        let mut kept = self.kept.lock().unwrap();
        let entry = kept.get_mut(&ino).filter(|k| k.good && k.sharing as usize == open_here)?;
        let file = entry.file.as_ref()?.sharing()?;
        entry.sharing += 1;
        Some(file)
    }

    /// An open of `ino` that may be kept is about to be asked of its home: true when it
    /// may (it is not kept, nor being kept). Follow with [`Reopens::opened`].
    pub(crate) fn opening(&self, ino: u64) -> bool {
        let mut kept = self.kept.lock().unwrap();
        if kept.contains_key(&ino) {
            return false;
        }
        kept.insert(ino, Kept { file: None, sharing: 0, good: true });
        true
    }

    /// The open begun with [`Reopens::opening`] came back with `file` (opened with
    /// `Client::open_ino_kept`). Answers the handle to give the kernel. The file stays kept
    /// unless a change arrived while the open was on its way, or it has no name left
    /// (nothing opens it again by name): then it is let go at once.
    pub(crate) fn opened(&self, ino: u64, file: File) -> File {
        let (file, handle) = file.split_kept();
        let mut kept = self.kept.lock().unwrap();
        let spoiled = kept.get(&ino).is_none_or(|k| !k.good || k.file.is_some()) || file.attr_at_open().nlink == 0;
        if spoiled {
            if kept.get(&ino).is_some_and(|k| k.file.is_none()) {
                kept.remove(&ino);
            }
            self.release(Arc::new(file));
            return handle;
        }
        kept.insert(ino, Kept { file: Some(Arc::new(file)), sharing: 1, good: true });
        if kept.len() > MAX_KEPT {
            let idle: Vec<u64> =
                kept.iter().filter(|(&i, k)| i != ino && k.sharing == 0 && k.file.is_some()).map(|(&i, _)| i).take(MAX_KEPT / 8).collect();
            for i in idle {
                self.let_go(&mut kept, i);
            }
        }
        handle
    }

    /// The open begun with [`Reopens::opening`] failed.
    pub(crate) fn abandoned(&self, ino: u64) {
        let mut kept = self.kept.lock().unwrap();
        if kept.get(&ino).is_some_and(|k| k.file.is_none()) {
            kept.remove(&ino);
        }
    }

    /// A handle answered from the kept file `ino` was released.
    pub(crate) fn released(&self, ino: u64) {
        let mut kept = self.kept.lock().unwrap();
        let Some(entry) = kept.get_mut(&ino) else { return };
        entry.sharing = entry.sharing.saturating_sub(1);
        if !entry.good && entry.sharing == 0 {
            self.let_go(&mut kept, ino);
        }
    }

    /// `ino` changed elsewhere (its home's notice), is about to change here, or the kernel
    /// forgot it: no more opens are answered from its kept file, which is let go once no
    /// handle shares it.
    pub(crate) fn changed(&self, ino: u64) {
        let mut kept = self.kept.lock().unwrap();
        let Some(entry) = kept.get_mut(&ino) else { return };
        entry.good = false;
        if entry.sharing == 0 {
            self.let_go(&mut kept, ino);
        }
    }

    /// Notices from server `server` may have been missed.
    pub(crate) fn lost(&self, server: usize) {
        self.lease.lost(server);
        let inos: Vec<u64> = self.kept.lock().unwrap().keys().copied().filter(|&i| ino::home(i) == server).collect();
        for ino in inos {
            self.changed(ino);
        }
    }

    /// Forgets `ino` here and lets go of it at its home, once its open has come back (one
    /// still on its way is let go by [`Reopens::opened`], which finds it gone).
    fn let_go(&self, kept: &mut HashMap<u64, Kept>, ino: u64) {
        if kept.get(&ino).is_some_and(|k| k.file.is_some()) {
            if let Some(Kept { file: Some(f), .. }) = kept.remove(&ino) {
                self.release(f);
            }
        }
    }

    fn release(&self, file: Arc<File>) {
        self.runtime.spawn(async move {
            let ino = file.ino();
            if let Err(e) = file.release_kept().await {
                tracing::debug!(ino = format!("{ino:#x}"), "letting go of a kept file: {e}");
            }
        });
    }
}
