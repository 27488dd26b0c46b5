//! Directory delegations (docs/delegation.md): a watching connection may hold a directory of
//! this server's share alone, making its creates, unlinks and renames itself and writing them
//! back afterwards, in order, as ordinary steps (`CreateAs` for a create, with one of the
//! inode numbers its grant set aside).
//!
//! What this module keeps is who holds what, and the guard every namespace step of another
//! connection passes: a step that names a delegated directory, or an inode set aside for (or
//! made under) a delegation, is answered `Recalling` at once — never waited for inside the
//! connection's loop, so no two nodes can deadlock — and the holder is sent a `Recall` notice
//! (once per delegation). The holder writes back and gives the directory up (`GiveBack`); the
//! caller's library retries meanwhile. A delegation also ends with its holder's connection,
//! and when its holder has not given it back [`RECALL_DEADLINE`] after the recall (as NFSv4
//! revokes a delegation whose lease ran out): what it had not written back is lost, as
//! metadata not yet on disk is in a local file system's crash, and its later write-backs are
//! refused. A clean stop of the server recalls every delegation and waits for the holders'
//! write-backs before the share is folded into its snapshot, so that a planned restart loses
//! nothing a holder answered ([`Delegations::give_all_back_before_stop`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use surge_proto::admin::Notice;
use surge_proto::namespace::NamespaceRequest;
use surge_proto::{ErrorCode, Ino};

use crate::error::{Result, ServerError};
use crate::lock::LockRecover;
use crate::watch::{WatcherId, Watchers};

/// How long a recalled holder has to write back and give the directory up before the
/// delegation is taken from it.
pub(crate) const RECALL_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(crate) struct Delegations {
    /// How many directories are delegated: steps pay nothing for the guard while none is.
    count: AtomicUsize,
    /// The server is stopping: no more grants.
    stopping: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    dirs: HashMap<Ino, Held>,
    /// Every inode number set aside for a delegation, with its directory.
    set_aside: HashMap<Ino, Ino>,
}

struct Held {
    holder: WatcherId,
    inos: Vec<Ino>,
    /// When the holder was sent `Recall`.
    recalled: Option<Instant>,
}

impl Delegations {
    /// Whether any directory is delegated.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Whether the server is stopping (no more grants).
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// A clean stop: no new grants, and every holder is asked to write back and give its
    /// directory up; completes once all have, or after [`RECALL_DEADLINE`] (what those holders
    /// had not written back is then lost, as in a crash; said in the log). The connections
    /// must still be served meanwhile: the write-backs come over them.
    pub(crate) async fn give_all_back_before_stop(&self, watchers: &Watchers) {
        self.stopping.store(true, Ordering::Relaxed);
        if !self.any() {
            return;
        }
        // Recalls every delegation (answered `Recalling`: nobody to answer here).
        let _ = self.guard(None, &[], true, watchers);
        let deadline = Instant::now() + RECALL_DEADLINE;
        while self.any() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match self.count.load(Ordering::Relaxed) {
            0 => tracing::info!("every delegation given back before the stop"),
            left => tracing::warn!("{left} delegation(s) not given back before the stop: what their holders had not written back is lost"),
        }
    }

    /// Whether `dir` is delegated, and to whom.
    pub(crate) fn holder(&self, dir: Ino) -> Option<WatcherId> {
        self.state.lock_or_recover().dirs.get(&dir).map(|held| held.holder)
    }

    /// `dir` is `holder`'s from now on, with `inos` for its creates (checked by the caller:
    /// not delegated yet).
    pub(crate) fn grant(&self, dir: Ino, holder: WatcherId, inos: Vec<Ino>) {
        let mut st = self.state.lock_or_recover();
        for &ino in &inos {
            st.set_aside.insert(ino, dir);
        }
        if st.dirs.insert(dir, Held { holder, inos, recalled: None }).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `holder` may write back a create of `ino` in `dir`: one of the numbers its
    /// delegation of `dir` set aside.
    pub(crate) fn may_create(&self, holder: Option<WatcherId>, dir: Ino, ino: Ino) -> Result<()> {
        let st = self.state.lock_or_recover();
        match (st.dirs.get(&dir), st.set_aside.get(&ino)) {
            (Some(held), Some(&of)) if Some(held.holder) == holder && of == dir => Ok(()),
            (Some(held), _) if Some(held.holder) == holder => {
                Err(ServerError::new(ErrorCode::Invalid, format!("inode {ino:#x} was not set aside for directory {dir:#x}")))
            }
            _ => Err(ServerError::new(ErrorCode::Invalid, format!("directory {dir:#x} is not delegated to this connection"))),
        }
    }

    /// `holder` gives `dir` up.
    pub(crate) fn give_back(&self, holder: Option<WatcherId>, dir: Ino) -> Result<()> {
        let mut st = self.state.lock_or_recover();
        match st.dirs.get(&dir) {
            Some(held) if Some(held.holder) == holder => {
                st.end(dir);
                self.count.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
            _ => Err(ServerError::new(ErrorCode::Invalid, format!("directory {dir:#x} is not delegated to this connection"))),
        }
    }

    /// `holder`'s connection ended: its delegations with it. Answers the directories.
    pub(crate) fn connection_ended(&self, holder: WatcherId) -> Vec<Ino> {
        let mut st = self.state.lock_or_recover();
        let ended: Vec<Ino> = st.dirs.iter().filter(|(_, held)| held.holder == holder).map(|(&dir, _)| dir).collect();
        for &dir in &ended {
            st.end(dir);
        }
        self.count.fetch_sub(ended.len(), Ordering::Relaxed);
        ended
    }

    /// The guard: `Recalling` when a step of connection `by` names something delegated to
    /// another (`inos`: see [`named`]), after sending each such holder not yet asked a
    /// `Recall`. With `everything` (a scan of the whole share), every delegation not `by`'s.
    pub(crate) fn guard(&self, by: Option<WatcherId>, inos: &[Ino], everything: bool, watchers: &Watchers) -> Result<()> {
        let to_recall = {
            let mut st = self.state.lock_or_recover();
            let mut met: Vec<Ino> = if everything {
                st.dirs.keys().copied().collect()
            } else {
                inos.iter().filter_map(|ino| if st.dirs.contains_key(ino) { Some(*ino) } else { st.set_aside.get(ino).copied() }).collect()
            };
            met.retain(|dir| st.dirs.get(dir).is_some_and(|held| Some(held.holder) != by));
            if met.is_empty() {
                return Ok(());
            }
            met.sort_unstable();
            met.dedup();
            let mut to_recall = Vec::new();
            let mut still_held = false;
            for dir in met {
                let held = st.dirs.get_mut(&dir).expect("met only held directories");
                match held.recalled {
                    None => {
                        held.recalled = Some(Instant::now());
                        to_recall.push((held.holder, dir));
                        still_held = true;
                    }
                    Some(at) if at.elapsed() >= RECALL_DEADLINE => {
                        tracing::warn!(
                            dir = format!("{dir:#x}"),
                            "a delegation's holder did not give it back after its recall: taken from it"
                        );
                        st.end(dir);
                        self.count.fetch_sub(1, Ordering::Relaxed);
                    }
                    Some(_) => still_held = true,
                }
            }
            if !still_held {
                return Ok(());
            }
            to_recall
        };
        for (holder, dir) in to_recall {
            watchers.notify(holder, Notice::Recall { dir });
        }
        Err(ServerError::new(ErrorCode::Recalling, "directory delegated to another client: recalled, retry shortly"))
    }
}

impl State {
    fn end(&mut self, dir: Ino) {
        if let Some(held) = self.dirs.remove(&dir) {
            for ino in held.inos {
                self.set_aside.remove(&ino);
            }
        }
    }
}

/// The entry a step removes or replaces by name when it may be a directory (an rmdir, a
/// rename onto an empty directory), which [`named`] cannot give without a lookup: the guard
/// must meet that directory too, or its holder's creates not yet written back would let it
/// be removed as empty.
pub(crate) fn removed_by_name(request: &NamespaceRequest) -> Option<(Ino, &str)> {
    match request {
        NamespaceRequest::Rmdir(s) => Some((s.parent, &s.name)),
        NamespaceRequest::Rename(s) if !s.noreplace => Some((s.dst_parent, &s.dst_name)),
        _ => None,
    }
}

/// The directories and inodes a namespace step reads or changes, for the guard. Exhaustive on
/// purpose: a new step must say what it names.
pub(crate) fn named(request: &NamespaceRequest) -> Vec<Ino> {
    use NamespaceRequest as R;
    match request {
        R::Lookup(s) => vec![s.parent],
        R::GetAttr(s) => vec![s.ino],
        R::SetAttr(s) => vec![s.ino],
        R::Create(s) => vec![s.parent],
        R::Symlink(s) => vec![s.parent],
        R::MakeNode(s) => vec![s.parent],
        R::Readlink(s) => vec![s.ino],
        R::MakeDirInode(s) => vec![s.parent],
        R::MakeDir(s) => vec![s.parent],
        R::DropInode(s) => vec![s.ino],
        R::InsertEntry(s) => vec![s.parent, s.ino],
        R::Unlink(s) => vec![s.parent],
        R::Rmdir(s) => vec![s.parent],
        R::RetireDir(s) => vec![s.ino],
        R::UnretireDir(s) => vec![s.ino],
        R::RemoveEntry(s) => vec![s.parent, s.ino],
        R::DropLink(s) => vec![s.ino],
        R::AddLink(s) => vec![s.ino],
        R::SetLinks(s) => vec![s.ino],
        R::SetParent(s) => vec![s.ino, s.parent],
        R::Rename(s) => vec![s.src_parent, s.dst_parent],
        R::Exchange(s) => vec![s.parent_a, s.parent_b],
        R::SwapEntry(s) => vec![s.parent, s.expected, s.ino],
        R::RenamePrepare(s) => vec![s.parent],
        R::RenameFinish(s) => vec![s.parent, s.ino],
        R::Readdir(s) => vec![s.ino],
        R::Open(s) => vec![s.ino],
        R::Append(s) => vec![s.ino],
        R::Grant(s) => vec![s.ino],
        R::Commit(s) => vec![s.ino],
        R::NoteAllocation(s) => s.notes.iter().map(|note| note.ino).collect(),
        R::SetLock(s) => vec![s.ino],
        R::GetLock(s) => vec![s.ino],
        R::GetXattr(s) => vec![s.ino],
        R::SetXattr(s) => vec![s.ino],
        R::ListXattr(s) => vec![s.ino],
        R::RemoveXattr(s) => vec![s.ino],
        R::LayoutOf(s) => vec![s.dir],
        R::Delegate(s) => vec![s.dir],
        R::CreateAs(s) => vec![s.parent, s.ino],
        // Checked by its own step: only the holder may give a directory back.
        R::GiveBack(_) => Vec::new(),
    }
}
