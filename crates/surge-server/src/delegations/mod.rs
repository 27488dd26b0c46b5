//! Directory delegations (design and rules: docs/delegation.md): a watching connection may
//! hold a directory of this server's share alone, making its creates, unlinks and renames
//! itself and writing them back afterwards, in order, as ordinary steps (`CreateAs` for a
//! create, with one of the inode numbers its grant set aside). This module keeps who holds
//! what ([`Delegations`]) and the guard; [`handlers`] answers the delegation calls.
//!
//! Guarantees:
//! * a step of another connection that names a delegated directory, or an inode set aside
//!   for (or made under) a delegation, is answered `Recalling` at once, never waited for in
//!   the connection's loop (no two nodes can deadlock), and the holder is sent one `Recall`;
//! * a holder that has not given the directory back [`RECALL_DEADLINE`] after the recall
//!   loses it, with what it had not written back, and its later write-backs are refused;
//! * a holder that is away (its connection ended, or this server restarted: the journal keeps
//!   every unended delegation, [`surge_meta::delegated`]) may reclaim it with its token for
//!   [`RECALL_DEADLINE`] ([`RECLAIM_AFTER_RESTART`] after a restart), and meanwhile everybody
//!   else is answered `Recalling`;
//! * every end of a delegation is journaled with the next record;
//! * a clean stop recalls every delegation and waits for the holders' write-backs before the
//!   share is folded into its snapshot ([`Delegations::give_all_back_before_stop`]).

mod handlers;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use surge_meta::delegated::DelegationMark;
use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_meta::{InoMap, MetaStore};
use surge_proto::admin::Notice;
use surge_proto::namespace::NamespaceRequest;
use surge_proto::{ErrorCode, Ino};

use crate::server::ChangeHook;
use crate::watch::{WatcherId, Watchers};

/// How long a recalled holder has to write back and give the directory up before the
/// delegation is taken from it; and how long a holder whose connection ended has to reclaim it.
pub(crate) const RECALL_DEADLINE: Duration = Duration::from_secs(5);
/// How long the holders of the delegations a restart found in the journal have to reclaim them
/// (a grace period, as an NFSv4 server's after its restart): every holder must notice the
/// restart, reconnect and reclaim, all at once, on nodes that may be busy.
pub(crate) const RECLAIM_AFTER_RESTART: Duration = Duration::from_secs(30);

#[derive(Default)]
pub(crate) struct Delegations {
    /// How many directories are delegated: steps pay nothing for the guard while none is.
    count: AtomicUsize,
    /// The server is stopping: no more grants.
    stopping: AtomicBool,
    state: Mutex<State>,
    /// Delegations ended and not journaled as ended yet (directory, token), and whether there
    /// are any: [`Delegations::take_ended`].
    ended: Mutex<Vec<(Ino, Ino)>>,
    ends_due: AtomicBool,
}

#[derive(Default)]
struct State {
    dirs: InoMap<Held>,
    /// Every inode number set aside for a delegation, with its directory.
    set_aside: InoMap<Ino>,
}

struct Held {
    holder: Holder,
    token: Ino,
    inos: Vec<Ino>,
    /// When the holder was sent `Recall`.
    recalled: Option<Instant>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Holder {
    /// Held through this watching connection.
    Connected(WatcherId),
    /// The holder's connection ended, or this server restarted (or the holder reclaimed it):
    /// reclaimable until `until`.
    Away { until: Instant },
}

impl Delegations {
    /// The delegations a restart found unended in the journal: each is its holder's to
    /// reclaim for [`RECLAIM_AFTER_RESTART`].
    pub(crate) fn restored<'a>(marks: impl Iterator<Item = &'a DelegationMark>) -> Delegations {
        let delegations = Delegations::default();
        let until = Instant::now() + RECLAIM_AFTER_RESTART;
        for mark in marks {
            delegations
                .insert(mark.dir, Held { holder: Holder::Away { until }, token: mark.token, inos: mark.inos.clone(), recalled: None });
        }
        let count = delegations.count.load(Ordering::Relaxed);
        if count > 0 {
            tracing::info!(
                "{count} delegation(s) granted before the restart: their holders may reclaim them for {RECLAIM_AFTER_RESTART:?}"
            );
        }
        delegations
    }

    /// Whether any directory is delegated.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Whether the server is stopping (no more grants).
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// A clean stop: no new grants, and every connected holder is asked to write back and give
    /// its directory up; completes once all have, or after [`RECALL_DEADLINE`] (what those
    /// holders had not written back they may still write back after the restart: their
    /// delegations stay in the journal). The connections must still be served meanwhile: the
    /// write-backs come over them.
    pub(crate) async fn give_all_back_before_stop(&self, watchers: &Watchers) {
        self.stopping.store(true, Ordering::Relaxed);
        if !self.any() {
            return;
        }
        // Recalls every delegation (answered `Recalling`: nobody to answer here).
        let _ = self.guard(None, &[], true, watchers);
        let deadline = Instant::now() + RECALL_DEADLINE;
        while self.connected() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match self.count.load(Ordering::Relaxed) {
            0 => tracing::info!("every delegation given back before the stop"),
            left => tracing::warn!("{left} delegation(s) not given back before the stop: their holders may reclaim them after the restart"),
        }
    }

    /// Delegations held through a connection.
    fn connected(&self) -> usize {
        self.state.lock_or_recover().dirs.values().filter(|held| matches!(held.holder, Holder::Connected(_))).count()
    }

    /// Whether `dir` is delegated: to `Some(connection)`, or to a holder away (None).
    pub(crate) fn delegated_to(&self, dir: Ino) -> Option<Option<WatcherId>> {
        self.state.lock_or_recover().dirs.get(&dir).map(|held| match held.holder {
            Holder::Connected(id) => Some(id),
            Holder::Away { .. } => None,
        })
    }

    /// `dir` is `holder`'s from now on, as delegation `token`, with `inos` for its creates
    /// (checked by the caller: not delegated yet).
    pub(crate) fn grant(&self, dir: Ino, holder: WatcherId, token: Ino, inos: Vec<Ino>) {
        self.insert(dir, Held { holder: Holder::Connected(holder), token, inos, recalled: None });
    }

    /// Whether connection `by` may renew delegation `token` of `dir`: it holds it, and it
    /// was not recalled (a recalled holder is to give the directory back, not grow it).
    pub(crate) fn may_renew(&self, by: Option<WatcherId>, dir: Ino, token: Ino) -> Result<()> {
        let st = self.state.lock_or_recover();
        match st.dirs.get(&dir) {
            Some(held) if held.theirs(by, token) && held.recalled.is_none() && matches!(held.holder, Holder::Connected(_)) => Ok(()),
            Some(held) if held.theirs(by, token) => {
                Err(ServerError::new(ErrorCode::NotPermitted, format!("delegation {token:#x} of {dir:#x} is being recalled")))
            }
            _ => Err(ServerError::new(ErrorCode::Invalid, format!("delegation {token:#x} of {dir:#x} is not this connection's"))),
        }
    }

    /// Delegation `token` of `dir` renewed: `inos` are its too. False when it ended since
    /// [`Delegations::may_renew`] (the numbers are then nobody's: never handed out again).
    pub(crate) fn renewed(&self, dir: Ino, token: Ino, inos: &[Ino]) -> bool {
        let mut st = self.state.lock_or_recover();
        let Some(held) = st.dirs.get_mut(&dir).filter(|held| held.token == token) else { return false };
        held.inos.extend_from_slice(inos);
        st.set_aside_for(dir, inos);
        true
    }

    fn insert(&self, dir: Ino, held: Held) {
        let mut st = self.state.lock_or_recover();
        st.set_aside_for(dir, &held.inos);
        if st.dirs.insert(dir, held).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether connection `by` may write `step` back as part of delegation `token` of `dir`:
    /// it holds the delegation (or the delegation's holder is away: the token stands for it),
    /// and the step is a create, mkdir, unlink, rmdir, rename or commit in the directory or of
    /// a file made under it, or a change of such a file's attributes other than its size.
    pub(crate) fn may_write_back(&self, by: Option<WatcherId>, dir: Ino, token: Ino, step: &NamespaceRequest) -> Result<()> {
        let st = self.state.lock_or_recover();
        if !st.dirs.get(&dir).is_some_and(|held| held.theirs(by, token)) {
            return Err(ServerError::new(
                ErrorCode::Invalid,
                format!("delegation {token:#x} of directory {dir:#x} is not this connection's"),
            ));
        }
        let ours = |ino: &Ino| *ino == dir || st.set_aside.get(ino) == Some(&dir);
        let set_aside_here = |parent: Ino, ino: Ino| parent == dir && st.set_aside.get(&ino) == Some(&dir);
        let fits = match step {
            NamespaceRequest::CreateAs(s) => set_aside_here(s.parent, s.ino),
            NamespaceRequest::MakeDir(s) => s.ino.is_some_and(|ino| set_aside_here(s.parent, ino)),
            NamespaceRequest::Unlink(_) | NamespaceRequest::Rmdir(_) | NamespaceRequest::Rename(_) | NamespaceRequest::Commit(_) => {
                named(step).iter().all(ours)
            }
            // Times of a file made under it (its size goes through the data servers' cut).
            NamespaceRequest::SetAttr(s) => ours(&s.ino) && s.ino != dir && s.changes.size.is_none(),
            _ => false,
        };
        if !fits {
            return Err(ServerError::new(ErrorCode::Invalid, format!("a write-back of directory {dir:#x} holds a step outside it")));
        }
        Ok(())
    }

    /// Delegation `token` of `dir` is taken up again by a holder that lost its connection
    /// (or whose home restarted): it has [`RECALL_DEADLINE`] from now to write back and give
    /// it up. (Asked by the holding connection itself, nothing changes.)
    pub(crate) fn reclaim(&self, by: Option<WatcherId>, dir: Ino, token: Ino) -> Result<()> {
        let mut st = self.state.lock_or_recover();
        match st.dirs.get_mut(&dir) {
            Some(held) if held.token == token => {
                if by.is_none_or(|by| held.holder != Holder::Connected(by)) {
                    held.holder = Holder::Away { until: Instant::now() + RECALL_DEADLINE };
                }
                Ok(())
            }
            _ => Err(ServerError::new(ErrorCode::NotFound, format!("delegation {token:#x} of directory {dir:#x} has ended"))),
        }
    }

    /// `by` gives delegation `token` of `dir` up.
    pub(crate) fn give_back(&self, by: Option<WatcherId>, dir: Ino, token: Ino) -> Result<()> {
        let mut st = self.state.lock_or_recover();
        if !st.dirs.get(&dir).is_some_and(|held| held.theirs(by, token)) {
            return Err(ServerError::new(ErrorCode::Invalid, format!("directory {dir:#x} is not delegated to this connection")));
        }
        self.end(&mut st, dir);
        Ok(())
    }

    /// `holder`'s connection ended: its delegations wait for it to reclaim them. Answers the
    /// directories.
    pub(crate) fn connection_ended(&self, holder: WatcherId) -> Vec<Ino> {
        let mut st = self.state.lock_or_recover();
        let until = Instant::now() + RECALL_DEADLINE;
        let mut away = Vec::new();
        for (&dir, held) in st.dirs.iter_mut() {
            if held.holder == Holder::Connected(holder) {
                held.holder = Holder::Away { until };
                away.push(dir);
            }
        }
        away
    }

    /// Delegations ended since the last call, as (directory, token): the journal records
    /// their end with the next record. Costs an atomic load while there are none.
    fn take_ended(&self) -> Vec<(Ino, Ino)> {
        if !self.ends_due.swap(false, Ordering::Relaxed) {
            return Vec::new();
        }
        std::mem::take(&mut *self.ended.lock_or_recover())
    }

    fn end(&self, st: &mut State, dir: Ino) {
        if let Some(held) = st.dirs.remove(&dir) {
            for ino in held.inos {
                st.set_aside.remove(&ino);
            }
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.ended.lock_or_recover().push((dir, held.token));
            self.ends_due.store(true, Ordering::Relaxed);
        }
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
            met.retain(|dir| st.dirs.get(dir).is_some_and(|held| by.is_none_or(|by| held.holder != Holder::Connected(by))));
            if met.is_empty() {
                return Ok(());
            }
            met.sort_unstable();
            met.dedup();
            let mut to_recall = Vec::new();
            let mut still_held = false;
            for dir in met {
                let held = st.dirs.get_mut(&dir).expect("met only held directories");
                let overdue = match (held.holder, held.recalled) {
                    (Holder::Away { until }, _) => Instant::now() >= until,
                    (Holder::Connected(holder), None) => {
                        held.recalled = Some(Instant::now());
                        to_recall.push((holder, dir));
                        false
                    }
                    (Holder::Connected(_), Some(at)) => at.elapsed() >= RECALL_DEADLINE,
                };
                if overdue {
                    tracing::warn!(
                        dir = format!("{dir:#x}"),
                        "a delegation's holder did not give it back in time: taken from it, with what it had not written back"
                    );
                    self.end(&mut st, dir);
                } else {
                    still_held = true;
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

/// The delegations that ended are journaled as ended with the next record.
impl ChangeHook for Delegations {
    fn before_journaling(&self, meta: &mut MetaStore) {
        for (dir, token) in self.take_ended() {
            meta.delegation_ended(dir, token);
        }
    }
}

impl State {
    /// `inos` are set aside for delegated directory `dir`.
    fn set_aside_for(&mut self, dir: Ino, inos: &[Ino]) {
        self.set_aside.extend(inos.iter().map(|&ino| (ino, dir)));
    }
}

impl Held {
    /// Whether connection `by`, quoting `token`, speaks for the holder: it is the holder's
    /// connection, or the holder is away (the token stands for it).
    fn theirs(&self, by: Option<WatcherId>, token: Ino) -> bool {
        self.token == token
            && match self.holder {
                Holder::Away { .. } => true,
                Holder::Connected(holder) => by == Some(holder),
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
        R::OpenAt(s) => vec![s.parent],
        R::GetAttr(s) => vec![s.ino],
        R::SetAttr(s) => vec![s.ino],
        R::Create(s) => vec![s.parent],
        R::Symlink(s) => vec![s.parent],
        R::MakeNode(s) => vec![s.parent],
        R::Readlink(s) => vec![s.ino],
        R::MakeDirInode(s) => vec![s.parent],
        R::MakeDir(s) => s.ino.into_iter().chain([s.parent]).collect(),
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
        R::IssueTicket(s) => vec![s.ino],
        R::Commit(s) => vec![s.ino],
        R::ReleaseKept(s) => vec![s.ino],
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
        // Checked by their own steps: only the holder may give a directory back or reclaim it.
        R::GiveBack(_) | R::Reclaim(_) | R::Renew(_) => Vec::new(),
    }
}
