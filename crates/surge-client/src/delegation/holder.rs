//! The directories one client holds under delegations (docs/delegation.md), for an adapter
//! that answers creates and unlinks in them ([`DelegatedDir`]): the mount and the interception
//! library each keep one. It decides when a directory is worth asking for, writes each held
//! directory's log back every few milliseconds, renews its numbers before they run out, gives
//! it back when the home recalls it or when it has been idle, and lets the adapter wait for
//! every step answered so far to reach its home ([`Delegations::settle`]).
//!
//! A directory is asked for after a few creates or unlinks there took the ordinary path, in a
//! directory whose every name the adapter knows (the mount: one its kernel listed in full; the
//! library: any, as the grant brings the listing), and only where servers do not check
//! identities (a file made under a delegation has no data ticket until its write-back). The
//! home recalls the directory when another client names it; the recall comes as a notice
//! ([`Delegations::recall`]), and the directory is given back at once, its log written back
//! first. When the connection to a directory's home is lost (the home restarted, or the network
//! broke), the delegation stops answering and is given back in the background once the home
//! is reached again, with whatever of its log the home had not applied (see [`DelegatedDir`]);
//! the home holds the directory meanwhile.
//!
//! What the holder answered and has not written back lives in its memory only: an adapter
//! gives everything back before it goes away ([`Delegations::give_all_back`]); a holder killed
//! outright loses the steps of its last few milliseconds.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use surge_proto::{Attr, AttrChanges};
use tokio::runtime::Handle;

use super::{DelegatedDir, Named};
use crate::{Client, Result};

/// Creates and unlinks in a directory before the holder asks for it: a directory used once
/// (a file dropped into a shared one) is not worth the grant and its listing.
const ASK_AFTER: u32 = 16;
/// After each refusal or recall a directory is asked for only after twice as many (up to this shift).
const MAX_BACKOFF: u32 = 10;
/// Inode numbers asked for with a delegation, and with each renewal.
const NUMBERS: u32 = 4096;
/// A delegation is renewed when fewer numbers than this are left: at 25,000 creates a second
/// the renewal has 40 ms to come back before the creates there take the ordinary path.
const RENEW_BELOW: usize = 1024;
/// How often a delegation's log is written back while it has steps: what another node's
/// recall waits for at most, besides the write-back itself.
const WRITE_BACK_EVERY: Duration = Duration::from_millis(10);
/// Delegations held at once: every request that may name one waits for its write-backs.
const MAX_HELD: usize = 64;
/// A delegation with no step for this long is given back: the directory's burst is over
/// (and one removed, or forgotten by the adapter, is given back at once).
const IDLE_FOR: Duration = Duration::from_secs(2);

/// The delegations one client holds.
pub struct Delegations {
    client: Client,
    runtime: Handle,
    /// Never held while a delegation's own lock is taken (see [`Delegations::all_held`]).
    state: Arc<Mutex<State>>,
    /// The servers check identities: no delegation is asked for.
    never: AtomicBool,
    /// Each recall of a directory doubles the steps before it is asked for again (see
    /// [`Delegations::back_off_after_recalls`]).
    recall_backoff: AtomicBool,
}

#[derive(Default)]
struct State {
    held: HashMap<u64, Arc<DelegatedDir>>,
    /// Creates and unlinks per directory since it was last asked for or given back.
    steps: HashMap<u64, u32>,
    refusals: HashMap<u64, u32>,
    /// Recalls per directory: one another client works in too (a shared output directory
    /// where each process creates its own files) is asked for after twice as many steps for
    /// each recall, and this is never reset, so that two holders do not hand it to and fro.
    recalls: HashMap<u64, u32>,
    /// Asked for, no answer yet.
    asking: HashMap<u64, Asking>,
    /// Being given back: asked for again only once that is done.
    returning: HashSet<u64>,
}

/// A directory asked for, while the answer is on its way.
#[derive(Default)]
struct Asking {
    /// The home recalled it meanwhile (the recall can overtake the grant's answer).
    recalled: bool,
    /// The holder's own changes to names in it meanwhile, in order: the listing that comes
    /// with the grant may have been taken before or after each.
    changes: Vec<(String, Option<Named>)>,
}

impl Delegations {
    pub fn new(client: Client, runtime: Handle) -> Arc<Delegations> {
        Arc::new(Delegations {
            client,
            runtime,
            state: Default::default(),
            never: AtomicBool::new(false),
            recall_backoff: AtomicBool::new(false),
        })
    }

    /// The delegation of `dir`, if held here (it may have ended: see
    /// [`DelegatedDir::is_held`]).
    pub fn held(&self, dir: u64) -> Option<Arc<DelegatedDir>> {
        self.state.lock().unwrap().held.get(&dir).cloned()
    }

    /// From now on each recall of a directory doubles the steps before it is asked for again,
    /// for good: for a holder that is one of several processes of a job on a node (the
    /// interception library), where ranks sharing a directory would otherwise take it from
    /// each other for ever. The mount, the one holder of its node, keeps asking as before.
    pub fn back_off_after_recalls(&self) {
        self.recall_backoff.store(true, Ordering::Relaxed);
    }

    /// Whether any directory is held (or being given back) or asked for.
    pub fn any_wanted(&self) -> bool {
        let st = self.state.lock().unwrap();
        !st.held.is_empty() || !st.asking.is_empty()
    }

    /// Whether `dir` is asked for, its answer not come yet: while it is, an adapter should not
    /// have others ask the home about the directory (a request from another client would
    /// recall the grant as soon as it is made).
    pub fn asking(&self, dir: u64) -> bool {
        self.state.lock().unwrap().asking.contains_key(&dir)
    }

    /// A create or unlink in `dir` took the ordinary path; `known_in_full`: the adapter knows
    /// every name in it. Asks for the directory once that has happened often enough.
    pub fn stepped_in(self: &Arc<Self>, dir: u64, known_in_full: bool) {
        if !known_in_full || self.never.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.state.lock().unwrap();
        if st.held.contains_key(&dir) || st.asking.contains_key(&dir) || st.returning.contains(&dir) || st.held.len() >= MAX_HELD {
            return;
        }
        let backoff = st.refusals.get(&dir).copied().unwrap_or(0) + st.recalls.get(&dir).copied().unwrap_or(0);
        let due = ASK_AFTER << backoff.min(MAX_BACKOFF);
        let steps = st.steps.entry(dir).or_default();
        *steps += 1;
        if *steps < due {
            return;
        }
        st.steps.remove(&dir);
        st.asking.insert(dir, Asking::default());
        drop(st);
        let delegations = self.clone();
        self.runtime.spawn(async move { delegations.ask(dir).await });
    }

    async fn ask(self: Arc<Self>, dir: u64) {
        let granted = match self.client.checks_identity(dir).await {
            Ok(true) => {
                self.never.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Ok(false) => self.client.delegate(dir, NUMBERS).await,
            Err(e) => Err(e),
        };
        let mut st = self.state.lock().unwrap();
        let asking = st.asking.remove(&dir).unwrap_or_default();
        let recalled = asking.recalled;
        match granted {
            Ok(Some(delegated)) => {
                // Replayed over the grant's listing: each says what its name is after it, so
                // the last word on every name is the holder's latest change.
                for (name, now) in asking.changes {
                    delegated.learned(&name, now);
                }
                let delegated = Arc::new(delegated);
                st.refusals.remove(&dir);
                st.held.insert(dir, delegated.clone());
                drop(st);
                tracing::debug!(dir = format!("{dir:#x}"), "delegated");
                self.runtime.spawn(write_back_while_held(Arc::downgrade(&self), dir, delegated));
                if recalled {
                    self.give_back(dir);
                }
            }
            refused => {
                if let Err(e) = refused {
                    tracing::debug!(dir = format!("{dir:#x}"), "no delegation: {e}");
                }
                st.refusals.entry(dir).and_modify(|n| *n = (*n + 1).min(MAX_BACKOFF)).or_insert(1);
            }
        }
    }

    /// The home recalls `dir` (another client names it): give it back at once.
    pub fn recall(&self, dir: u64) {
        tracing::debug!(dir = format!("{dir:#x}"), "recalled");
        let mut st = self.state.lock().unwrap();
        if let Some(asking) = st.asking.get_mut(&dir) {
            asking.recalled = true;
        }
        if self.recall_backoff.load(Ordering::Relaxed) {
            st.recalls.entry(dir).and_modify(|n| *n = (*n + 1).min(MAX_BACKOFF)).or_insert(1);
        }
        drop(st);
        self.give_back(dir);
    }

    /// The holder changed `dir/name` the ordinary way (after a write-back): `now` is what the
    /// name names after it (None: nothing), or the outcome is not known (`Err`). A delegation
    /// of `dir`, held or on its way, learns it; one that cannot is given back.
    pub fn changed(&self, dir: u64, name: &str, now: std::result::Result<Option<Named>, ()>) {
        let mut st = self.state.lock().unwrap();
        if let Some(asking) = st.asking.get_mut(&dir) {
            match now {
                Ok(now) => asking.changes.push((name.to_string(), now)),
                Err(()) => asking.recalled = true,
            }
            return;
        }
        let Some(delegated) = st.held.get(&dir).cloned() else { return };
        drop(st);
        match now {
            Ok(now) => delegated.learned(name, now),
            Err(()) => self.give_back(dir),
        }
    }

    /// Gives `dir` back (its log written back first), in the background; it stays listed
    /// until that is done, so that [`Delegations::settle`] waits for the write-back.
    pub fn give_back(&self, dir: u64) {
        tracing::debug!(dir = format!("{dir:#x}"), "giving back");
        let mut st = self.state.lock().unwrap();
        let Some(delegated) = st.held.get(&dir).cloned() else { return };
        if !st.returning.insert(dir) {
            return;
        }
        drop(st);
        let state = self.state.clone();
        self.runtime.spawn(async move {
            if let Err(e) = delegated.give_back().await {
                tracing::warn!(dir = format!("{dir:#x}"), "a delegation was not given back cleanly: {e}");
            }
            let mut st = state.lock().unwrap();
            st.held.remove(&dir);
            st.returning.remove(&dir);
        });
    }

    /// Gives `dir` back and waits until it is, for a change to the directory that decides
    /// what is made in it from then on (its mode or group: a set-group-ID directory gives its
    /// group, which the delegation was granted with): nothing made in it after is answered
    /// here.
    pub async fn give_back_now(&self, dir: u64) -> Result<()> {
        let held = {
            let mut st = self.state.lock().unwrap();
            if let Some(asking) = st.asking.get_mut(&dir) {
                asking.recalled = true;
            }
            st.held.remove(&dir)
        };
        match held {
            Some(delegated) => delegated.give_back().await,
            None => Ok(()),
        }
    }

    /// Sets the times of file `ino` at once when a delegation held here made it and has not
    /// written it back yet (see [`DelegatedDir::set_times`]): its attributes after. None: the
    /// ordinary path.
    pub fn set_times(&self, ino: u64, changes: &AttrChanges) -> Option<Attr> {
        if changes.atime.is_none() && changes.mtime.is_none() {
            return None;
        }
        self.all_held().iter().find_map(|delegated| delegated.set_times(ino, changes))
    }

    /// Every delegation held, taken out of `state` so that their own locks are taken without
    /// it: a delegation calls back into the adapter under its lock (a rename's check of the
    /// directory it replaces asks [`Delegations::held`]), so `state` is never held while
    /// taking a delegation's lock.
    fn all_held(&self) -> Vec<Arc<DelegatedDir>> {
        self.state.lock().unwrap().held.values().cloned().collect()
    }

    /// The adapter forgot directory `ino` (removed, or not used for long):
    /// a delegation of it is given back.
    pub fn forgotten(&self, ino: u64) {
        self.state.lock().unwrap().recalls.remove(&ino);
        self.give_back(ino);
    }

    /// Waits until every step answered under a delegation before the call is applied at the
    /// directory's home: what a request about anything else must see (a lookup, a listing, an
    /// open, attributes, another namespace change). Costs nothing while no write-back is due.
    /// Steps waiting for a home that was lost are not waited for: that home answers nobody
    /// about the directory (`Recalling`) until they are written back.
    pub async fn settle(&self) -> Result<()> {
        let held = self.all_held();
        for delegated in held.iter().filter(|d| !d.is_quiet() && !d.is_away()) {
            match delegated.write_back().await {
                Err(e) if !e.code.is_lost_contact() => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// The connection to server `server` was lost: the delegations of directories homed
    /// there stop answering and are given back once it is reached again.
    pub fn home_lost(&self, server: usize) {
        let lost: Vec<(u64, Arc<DelegatedDir>)> = {
            let st = self.state.lock().unwrap();
            st.held.iter().filter(|(&dir, _)| surge_proto::ino::home(dir) == server).map(|(&dir, d)| (dir, d.clone())).collect()
        };
        for (dir, delegated) in lost {
            delegated.lost_home();
            self.give_back(dir);
        }
    }

    /// Gives every delegation back and waits for it (the adapter is going away). All at once: a
    /// home that is away is waited for once (up to `ClientOptions::reclaim_for`), not once per
    /// directory. One already on its way back is given back again: that waits for the first
    /// and costs nothing more.
    pub async fn give_all_back(&self) {
        let held: Vec<(u64, Arc<DelegatedDir>)> = {
            let mut st = self.state.lock().unwrap();
            st.returning.clear();
            st.held.drain().collect()
        };
        let giving: Vec<_> =
            held.into_iter().map(|(dir, delegated)| (dir, self.runtime.spawn(async move { delegated.give_back().await }))).collect();
        for (dir, given) in giving {
            match given.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(dir = format!("{dir:#x}"), "a delegation was not given back cleanly: {e}"),
                Err(e) => tracing::warn!(dir = format!("{dir:#x}"), "a delegation's give-back did not finish: {e}"),
            }
        }
    }
}

/// Writes `delegated`'s log back every few milliseconds while it has steps, until it ends;
/// renews it before its numbers run out; gives it back once it has answered no step for
/// [`IDLE_FOR`].
async fn write_back_while_held(delegations: Weak<Delegations>, dir: u64, delegated: Arc<DelegatedDir>) {
    let mut tick = tokio::time::interval(WRITE_BACK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_step = Instant::now();
    let mut answered = delegated.steps_answered();
    let mut renewal_refused = false;
    while delegated.is_held() {
        tick.tick().await;
        // Idle means no step answered: a log found empty may have been written back by an
        // ordinary step (which writes back first) in a directory still in full use.
        let now_answered = delegated.steps_answered();
        if now_answered != answered {
            answered = now_answered;
            last_step = Instant::now();
        }
        if delegated.numbers_left() < RENEW_BELOW && !renewal_refused {
            // A refusal means a recall is on its way (or the delegation ended): not asked again.
            let renewed = delegated.renew(NUMBERS).await;
            tracing::debug!(dir = format!("{dir:#x}"), "renewed: {renewed:?}");
            renewal_refused = matches!(renewed, Ok(false));
        }
        if delegated.pending() > 0 {
            last_step = Instant::now();
            // A refusal ends the delegation and is logged there; the files it concerned report
            // it when their handles next ask their home.
            let _ = delegated.write_back().await;
        } else if last_step.elapsed() >= IDLE_FOR {
            let Some(delegations) = delegations.upgrade() else { return };
            delegations.give_back(dir);
            last_step = Instant::now();
        }
    }
    // Ended by a refused write-back rather than given back: off the list too, or it keeps
    // one of the places until the next create in its directory.
    if let Some(delegations) = delegations.upgrade() {
        delegations.give_back(dir);
    }
}
