//! Who may be caching what, and telling them when it changes.
//!
//! A client that caches metadata (the FUSE mount, whose kernel keeps names and attributes)
//! sends `Watch` once per connection. From then on this server notes, for every reply that
//! hands such a connection an inode's attributes or a name in one of its directories, that the
//! connection may be holding them. When another connection changes one of them, the watcher
//! gets a [`Notice`] before the change is answered, so its cache can be kept for long without
//! going stale. A notice that a name
//! changed is acknowledged, and the change is answered only once every watcher acknowledged it
//! (or after `ACK_TIMEOUT`): a watcher that answers "no such name" from what it knows of a
//! directory can never miss a name that another client was already told exists. Attribute
//! notices are not waited for (a watcher's `stat` lags such a change by the notice's flight),
//! except to a watcher that keeps the file to answer its opens itself
//! (`Open { keep: true }`): close-to-open then holds for the opens it answers; and except
//! when the changer asked for it (`AwaitWatchers`: the interception library, whose program
//! also asks the kernel through the mount of its node), and except to a watcher that answers
//! `stat` from what it was told (`Keeps::Exactly`: the interception library's cache).
//!
//! Bookkeeping is per server and only for what this server homes. A notified connection is
//! forgotten for that inode's attributes until it asks for them again (its cache dropped
//! them); a directory stays watched for as long as the connection lives.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use smallvec::SmallVec;
use surge_meta::poison_free::LockRecover;
use surge_meta::InoMap;
use surge_proto::admin::{Keeps, Notice};
use surge_proto::{Ino, Unlinked};
use tokio::sync::{mpsc, oneshot};

/// How long a change waits for watchers to acknowledge its notices before it is answered
/// anyway (a watcher that hangs must not hang everybody).
pub const ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A notice and the number its acknowledgement must quote (0: none wanted).
pub type Outgoing = (u64, Notice);

/// A watching connection, as known to this server.
pub type WatcherId = u64;

/// The connections registered for one inode: nearly always one or two, kept inline (a
/// listing of a million files registers a million of these).
type Watching = SmallVec<[WatcherId; 2]>;

#[derive(Default)]
pub struct Watchers {
    next_id: AtomicU64,
    /// Watching connections; nothing is recorded while there are none.
    count: AtomicUsize,
    state: Mutex<Ledger>,
}

/// Who may hold what; locked around a metadata step and its bookkeeping together (see
/// [`Watchers::lock`]).
#[derive(Default)]
pub struct Ledger {
    outboxes: HashMap<WatcherId, mpsc::UnboundedSender<Outgoing>>,
    /// Acknowledgements awaited, by number: whose, whom to wake, and since when.
    acks: HashMap<u64, (WatcherId, oneshot::Sender<()>, Instant)>,
    next_ack: u64,
    /// Connections that may hold an inode's attributes.
    attrs: InoMap<Watching>,
    /// Connections that may hold names in a directory.
    dirs: InoMap<Watching>,
    /// Connections that keep a file to answer its opens themselves, until the next change to
    /// its attributes.
    kept: InoMap<Watching>,
    /// Connections that keep nothing they are told (`Keeps::Nothing`): never registered for
    /// names or attributes, told only of recalls.
    keep_nothing: HashSet<WatcherId>,
    /// Connections that answer from what they are told as it is (`Keeps::Exactly`): every
    /// change to it waits for their acknowledgement, and their names in a directory are
    /// taken back before another connection is granted its delegation.
    keep_exactly: HashSet<WatcherId>,
    /// Attributes a connection that keeps exactly was told by listing a directory, by inode:
    /// who keeps it, from a listing of which directory. A change to one takes back the whole
    /// listing at once ([`Notice::Names`]): a process that listed a directory of a million
    /// files another one then removes is told once, not a million times.
    listed_attrs: InoMap<SmallVec<[(WatcherId, Ino); 1]>>,
    /// Listings taken back from a connection that keeps exactly: what it was told there is no
    /// longer its business, until it lists the directory again.
    taken_back: HashSet<(WatcherId, Ino)>,
    /// Directories a connection that keeps everything is registered for only because it made
    /// them (it may answer that a name is not there): it has been told no name in them since.
    /// The first change another client makes there is noticed to it (it forgets that it knew
    /// every name) and ends the registration, so that the next changes wait for nobody and
    /// the directory may be delegated (a job's script makes an output directory through the
    /// mount, and its processes then fill it under the interception library).
    born: HashSet<(WatcherId, Ino)>,
    /// Where each watching connection comes from: for the warning about one that does not
    /// acknowledge.
    peers: HashMap<WatcherId, std::net::SocketAddr>,
    /// The number of the last acknowledged notice written to each watching connection's
    /// socket (by `conn::send_notices`): for the same warning, which says whether what is
    /// owed reached the client.
    written: HashMap<WatcherId, Arc<AtomicU64>>,
    /// What each watching connection was registered for, map by map: what its departure
    /// visits, so that a process that leaves costs what it held, not every registration of
    /// every watcher (a mount holding millions of names while short-lived processes come and
    /// go, each under the ledger's lock).
    trails: HashMap<WatcherId, Trails>,
}

/// The inodes one watcher was registered for in each of the ledger's maps.
#[derive(Default)]
struct Trails {
    attrs: Trail,
    dirs: Trail,
    kept: Trail,
    listed_attrs: Trail,
}

/// Inodes a watcher was registered for in one map, in the order registered. Some may no
/// longer name it (a notice, a gone inode or a take-back removed it) or appear twice (it
/// registered again): whenever the trail has doubled since it was last compacted, it keeps
/// only those that still name it, once each, so it stays within twice what the watcher holds.
#[derive(Default)]
struct Trail {
    inos: Vec<Ino>,
    compacted_len: usize,
}

/// Below this length a trail is never compacted.
const TRAIL_COMPACTS_FROM: usize = 1024;

impl Trail {
    /// `ino` now names the watcher; `still_names(ino)`: whether an inode still does.
    fn push(&mut self, ino: Ino, still_names: impl Fn(Ino) -> bool) {
        self.inos.push(ino);
        if self.inos.len() >= 2 * self.compacted_len.max(TRAIL_COMPACTS_FROM / 2) {
            self.inos.sort_unstable();
            self.inos.dedup();
            self.inos.retain(|&ino| still_names(ino));
            self.compacted_len = self.inos.len();
        }
    }
}

/// A watching connection that owes acknowledgements (see [`Watchers::owing`]).
pub struct Owing {
    pub watcher: WatcherId,
    pub peer: Option<std::net::SocketAddr>,
    pub count: usize,
    /// The oldest notice owed: its number and how long ago it was queued.
    pub oldest: u64,
    pub oldest_age: std::time::Duration,
    /// The last acknowledged notice written to the connection's socket.
    pub written: u64,
}

impl std::fmt::Display for Owing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peer = self.peer.map_or("?".to_string(), |p| p.to_string());
        let reached = if self.written >= self.oldest { "written to its socket" } else { "still queued here" };
        write!(f, "{} ({peer}): {} owed, the oldest (#{}) {:?} old and {reached}", self.watcher, self.count, self.oldest, self.oldest_age)
    }
}

/// Why an inode's attributes are noticed as changed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Moved {
    /// A step changed them (`awaited`: its changer asked that every notice be acknowledged).
    Attrs { awaited: bool },
    /// A directory's times and link count moved with its names ([`Effects::changed_dirs`]).
    DirTimes,
}

/// What one successful request told its connection and what it changed.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Effects {
    pub told_attrs: Vec<Ino>,
    pub told_dirs: Vec<Ino>,
    pub changed_attrs: Vec<Ino>,
    /// Directories whose times and link count a change of their names moved: noticed as
    /// attributes, never waited for (not even by an `AwaitWatchers` changer: what it asks
    /// to be exact at once is the files it changes, and a directory's mtime lagging by a
    /// notice's flight costs nobody a byte), and not told at all to a watcher that keeps
    /// exactly (it never keeps a directory's times: were it told, every create in a
    /// directory it looked at would wait for its acknowledgement).
    pub changed_dirs: Vec<Ino>,
    pub changed_entries: Vec<(Ino, String)>,
    /// A file the requester keeps to answer its opens itself (see [`Ledger::kept`]).
    pub kept_open: Option<Ino>,
    /// Inodes that no longer exist: nothing to watch any more.
    pub gone: Vec<Ino>,
    /// The changer asked that its attribute notices be acknowledged before it is answered
    /// (`AwaitWatchers`), as notices to keepers and of names always are.
    pub attrs_awaited: bool,
    /// `told_attrs` are a listing of this directory's: a watcher that keeps exactly is taken
    /// them back whole, on the first change to any (see [`Ledger::listed_attrs`]).
    pub listed: Option<Ino>,
    /// A directory the request made: its maker may know every name in it (none), and is
    /// registered for them until it is told one or another client changes one (see
    /// [`Ledger::born`]).
    pub made_dir: Option<Ino>,
    /// The request only asked (a lookup, a getattr, a listing): what it told is what a
    /// watcher that keeps exactly keeps. What other steps tell (a create, an open, a
    /// setattr's answer) such a watcher does not keep, so it is not registered for it: every
    /// later change to it would wait for an acknowledgement for nothing.
    pub queried: bool,
}

impl Effects {
    /// `parent/name` was created or replaced (by `ino` when it is homed here): the requester's
    /// kernel will cache the name.
    pub(crate) fn new_name(&mut self, parent: Ino, name: &str, ino: Option<Ino>) {
        self.changed_entries.push((parent, name.to_string()));
        self.changed_dirs.push(parent);
        self.told_dirs.push(parent);
        self.told_attrs.extend(ino);
    }

    pub(crate) fn removed_name(&mut self, parent: Ino, name: &str) {
        self.changed_entries.push((parent, name.to_string()));
        self.changed_dirs.push(parent);
    }

    /// An inode lost a name; when it is homed here, its link count changed or it is gone.
    pub(crate) fn lost_link(&mut self, unlinked: Option<&Unlinked>) {
        if let Some(u) = unlinked.filter(|u| !u.remote) {
            self.changed_attrs.push(u.ino);
            if u.purge {
                self.gone.push(u.ino);
            }
        }
    }
}

/// `w` no longer holds names in `dir`.
fn forget_names(dirs: &mut InoMap<Watching>, dir: Ino, w: WatcherId) {
    remove_from(dirs, dir, |&x| x != w);
}

/// Adds `id` to `set`; whether it was not there yet.
fn add(set: &mut Watching, id: WatcherId) -> bool {
    let new = !set.contains(&id);
    if new {
        set.push(id);
    }
    new
}

/// Keeps in `ino`'s set in `map` only what `names_other` accepts (the set goes when nobody
/// is left in it).
fn remove_from<A: smallvec::Array>(map: &mut InoMap<SmallVec<A>>, ino: Ino, names_other: impl Fn(&A::Item) -> bool) {
    if let Some(set) = map.get_mut(&ino) {
        set.retain(|item| names_other(item));
        if set.is_empty() {
            map.remove(&ino);
        }
    }
}

impl Watchers {
    /// A new watching connection and the notices for it; `keeps`: what it keeps of what it
    /// is told (see `surge_proto::admin::Keeps`).
    pub fn register(&self, keeps: Keeps, peer: std::net::SocketAddr) -> (WatcherId, mpsc::UnboundedReceiver<Outgoing>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.state.lock_or_recover();
        st.outboxes.insert(id, tx);
        st.peers.insert(id, peer);
        st.written.insert(id, Arc::default());
        match keeps {
            Keeps::Nothing => _ = st.keep_nothing.insert(id),
            Keeps::Exactly => _ = st.keep_exactly.insert(id),
            Keeps::Everything => {}
        }
        drop(st);
        self.count.fetch_add(1, Ordering::Relaxed);
        (id, rx)
    }

    /// The connection is gone: what it was registered for is forgotten (visiting only that).
    pub fn unregister(&self, id: WatcherId) {
        let mut st = self.state.lock_or_recover();
        let Ledger {
            outboxes,
            attrs,
            dirs,
            kept,
            acks,
            keep_nothing,
            keep_exactly,
            peers,
            written,
            listed_attrs,
            taken_back,
            born,
            trails,
            ..
        } = &mut *st;
        peers.remove(&id);
        written.remove(&id);
        taken_back.retain(|&(w, _)| w != id);
        keep_nothing.remove(&id);
        keep_exactly.remove(&id);
        if outboxes.remove(&id).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        // Whoever waits for this connection's acknowledgements stops waiting.
        acks.retain(|_, (w, _, _)| *w != id);
        let Some(trail) = trails.remove(&id) else { return };
        for &ino in &trail.dirs.inos {
            born.remove(&(id, ino));
        }
        for (map, trail) in [(attrs, trail.attrs), (dirs, trail.dirs), (kept, trail.kept)] {
            for ino in trail.inos {
                remove_from(map, ino, |&w| w != id);
            }
        }
        for ino in trail.listed_attrs.inos {
            remove_from(listed_attrs, ino, |&(w, _)| w != id);
        }
    }

    /// A watcher acknowledged notice `ack`.
    pub fn seen(&self, ack: u64) {
        if let Some((_, wake, _)) = self.state.lock_or_recover().acks.remove(&ack) {
            let _ = wake.send(());
        }
    }

    /// Where `conn::send_notices` records the last acknowledged notice it wrote for `id`.
    pub fn written_mark(&self, id: WatcherId) -> Arc<AtomicU64> {
        self.state.lock_or_recover().written.get(&id).cloned().unwrap_or_default()
    }

    /// The watching connections that owe acknowledgements now.
    pub fn owing(&self) -> Vec<Owing> {
        let st = self.state.lock_or_recover();
        let mut by_watcher: HashMap<WatcherId, Owing> = HashMap::new();
        for (&ack, &(watcher, _, since)) in &st.acks {
            let owing = by_watcher.entry(watcher).or_insert_with(|| Owing {
                watcher,
                peer: st.peers.get(&watcher).copied(),
                count: 0,
                oldest: ack,
                oldest_age: since.elapsed(),
                written: st.written.get(&watcher).map_or(0, |w| w.load(Ordering::Relaxed)),
            });
            owing.count += 1;
            if ack < owing.oldest {
                (owing.oldest, owing.oldest_age) = (ack, since.elapsed());
            }
        }
        let mut owing: Vec<Owing> = by_watcher.into_values().collect();
        owing.sort_unstable_by_key(|o| o.watcher);
        owing
    }

    /// Whether anything needs recording at all (no watcher: plain clients pay nothing).
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Sends `notice` to watcher `to`, no acknowledgement awaited (a delegation's recall).
    pub fn notify(&self, to: WatcherId, notice: Notice) {
        if let Some(outbox) = self.state.lock_or_recover().outboxes.get(&to) {
            let _ = outbox.send((0, notice));
        }
    }

    /// The ledger, to hold while a metadata step runs and until its effects are applied: then
    /// no change can slip between what a watcher is told and its registration (it would never
    /// hear of that change).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.state.lock_or_recover()
    }
}

impl Ledger {
    /// Whether a watcher other than `me` may hold names in directory `dir` that stand in the
    /// way of its delegation (those of watchers that keep exactly do not: see
    /// [`Ledger::take_back_names`]).
    pub fn others_hold_names(&self, dir: Ino, me: WatcherId) -> bool {
        self.dirs.get(&dir).is_some_and(|set| set.iter().any(|&w| w != me && !self.keep_exactly.contains(&w)))
    }

    /// Tells every watcher but `me` that keeps exactly to forget its names in `dir`
    /// ([`Notice::Names`]) and stops telling it of them: before `dir` is delegated to `me`,
    /// whose changes there nobody hears of until they are written back. Returns the
    /// acknowledgements to wait for before the delegation is answered.
    pub fn take_back_names(&mut self, dir: Ino, me: WatcherId) -> Vec<oneshot::Receiver<()>> {
        let Some(set) = self.dirs.get_mut(&dir) else { return Vec::new() };
        let (exact, stay): (Vec<WatcherId>, Vec<WatcherId>) = set.iter().partition(|&&w| w != me && self.keep_exactly.contains(&w));
        *set = stay.into();
        if set.is_empty() {
            self.dirs.remove(&dir);
        }
        let mut awaited = Vec::new();
        for w in exact {
            self.taken_back.insert((w, dir));
            let Some(outbox) = self.outboxes.get(&w) else { continue };
            self.next_ack += 1;
            let (wake, woken) = oneshot::channel();
            self.acks.insert(self.next_ack, (w, wake, Instant::now()));
            if outbox.send((self.next_ack, Notice::Names { dir })).is_ok() {
                awaited.push(woken);
            } else {
                self.acks.remove(&self.next_ack);
            }
        }
        awaited
    }

    /// Records what `by` (None: a connection that does not watch) was told and notifies the
    /// other watchers of what it changed. Returns the acknowledgements to wait for before the
    /// change is answered.
    pub fn apply(&mut self, by: Option<WatcherId>, effects: Effects) -> Vec<oneshot::Receiver<()>> {
        let Ledger {
            outboxes, attrs, dirs, kept, acks, next_ack, keep_nothing, keep_exactly, listed_attrs, taken_back, born, trails, ..
        } = self;
        let mut awaited = Vec::new();
        let mut send = |to: WatcherId, notice: Notice, acknowledged: bool| {
            let Some(outbox) = outboxes.get(&to) else { return };
            let ack = if acknowledged {
                *next_ack += 1;
                let (wake, woken) = oneshot::channel();
                acks.insert(*next_ack, (to, wake, Instant::now()));
                awaited.push(woken);
                *next_ack
            } else {
                0
            };
            let _ = outbox.send((ack, notice));
        };
        let changed = effects.changed_attrs.into_iter().map(|ino| (ino, Moved::Attrs { awaited: effects.attrs_awaited }));
        for (ino, moved) in changed.chain(effects.changed_dirs.into_iter().map(|ino| (ino, Moved::DirTimes))) {
            let told = |w: WatcherId| Some(w) != by && !(moved == Moved::DirTimes && keep_exactly.contains(&w));
            // A keeper answers opens from what it holds: it must have dropped it before the
            // change is answered. It keeps the file until it lets go, and answers opens again
            // only once it has opened through this server again.
            let keepers = match kept.get_mut(&ino) {
                Some(set) => {
                    let keepers: Vec<WatcherId> = set.iter().copied().filter(|&w| Some(w) != by).collect();
                    set.retain(|w| Some(*w) == by);
                    if set.is_empty() {
                        kept.remove(&ino);
                    }
                    keepers
                }
                None => Vec::new(),
            };
            for &w in &keepers {
                send(w, Notice::Attr { ino }, true);
            }
            if let Some(set) = attrs.get_mut(&ino) {
                for &w in set.iter().filter(|&&w| told(w) && !keepers.contains(&w)) {
                    let awaited = moved == (Moved::Attrs { awaited: true }) || keep_exactly.contains(&w);
                    send(w, Notice::Attr { ino }, awaited);
                }
                // The notified dropped what they had; they register again when they ask.
                set.retain(|w| !told(*w));
                if set.is_empty() {
                    attrs.remove(&ino);
                }
            }
            if let Some(set) = listed_attrs.get_mut(&ino) {
                for &(w, dir) in set.iter().filter(|&&(w, _)| told(w)) {
                    if taken_back.insert((w, dir)) {
                        send(w, Notice::Names { dir }, true);
                        forget_names(dirs, dir, w);
                    }
                }
                set.retain(|(w, _)| !told(*w));
                if set.is_empty() {
                    listed_attrs.remove(&ino);
                }
            }
        }
        for (parent, name) in effects.changed_entries {
            let Some(set) = dirs.get(&parent) else { continue };
            let (exact, others): (Vec<WatcherId>, Vec<WatcherId>) =
                set.iter().filter(|&&w| Some(w) != by).partition(|w| keep_exactly.contains(w));
            for w in others {
                send(w, Notice::Entry { parent, name: name.clone() }, true);
                if born.remove(&(w, parent)) {
                    forget_names(dirs, parent, w);
                }
            }
            // One that keeps exactly drops the whole directory, once: it lists it again when
            // it wants its names.
            for w in exact {
                taken_back.insert((w, parent));
                send(w, Notice::Names { dir: parent }, true);
                forget_names(dirs, parent, w);
            }
        }
        for ino in effects.gone {
            listed_attrs.remove(&ino);
            attrs.remove(&ino);
            for w in dirs.remove(&ino).unwrap_or_default() {
                born.remove(&(w, ino));
            }
            kept.remove(&ino);
        }
        if let Some(id) = by.filter(|id| !keep_nothing.contains(id) && (effects.queried || !keep_exactly.contains(id))) {
            let trail = trails.entry(id).or_default();
            let names_id = |map: &InoMap<Watching>, ino| map.get(&ino).is_some_and(|set| set.contains(&id));
            match effects.listed.filter(|_| keep_exactly.contains(&id)) {
                Some(dir) => {
                    taken_back.remove(&(id, dir));
                    for ino in effects.told_attrs {
                        let set = listed_attrs.entry(ino).or_default();
                        if !set.contains(&(id, dir)) {
                            set.push((id, dir));
                            let listed: &InoMap<SmallVec<[(WatcherId, Ino); 1]>> = listed_attrs;
                            trail.listed_attrs.push(ino, |ino| listed.get(&ino).is_some_and(|set| set.iter().any(|&(w, _)| w == id)));
                        }
                    }
                }
                None => {
                    for ino in effects.told_attrs {
                        if add(attrs.entry(ino).or_default(), id) {
                            trail.attrs.push(ino, |ino| names_id(attrs, ino));
                        }
                    }
                }
            }
            for ino in effects.told_dirs {
                born.remove(&(id, ino));
                if add(dirs.entry(ino).or_default(), id) {
                    trail.dirs.push(ino, |ino| names_id(dirs, ino));
                }
            }
            if let Some(ino) = effects.made_dir {
                if add(dirs.entry(ino).or_default(), id) {
                    trail.dirs.push(ino, |ino| names_id(dirs, ino));
                    born.insert((id, ino));
                }
            }
            if let Some(ino) = effects.kept_open {
                if add(kept.entry(ino).or_default(), id) {
                    trail.kept.push(ino, |ino| names_id(kept, ino));
                }
            }
        }
        awaited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: std::net::SocketAddr = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9));

    fn told(attrs: &[Ino], dirs: &[Ino]) -> Effects {
        Effects { told_attrs: attrs.to_vec(), told_dirs: dirs.to_vec(), queried: true, ..Default::default() }
    }

    /// A watcher that keeps exactly keeps a directory's owner and mode, not its times: a name
    /// made in the directory is not noticed to it as a change of the directory's attributes
    /// (nobody waits for it), while a change of its mode is, and waits for it.
    #[test]
    fn a_watcher_that_keeps_exactly_hears_of_a_directory_s_mode_not_of_its_times() {
        let w = Watchers::default();
        let (exact, mut rx_exact) = w.register(Keeps::Exactly, PEER);
        let (mount, mut rx_mount) = w.register(Keeps::Everything, PEER);
        w.lock().apply(Some(exact), told(&[5], &[]));
        w.lock().apply(Some(mount), told(&[5], &[]));
        let mut made = Effects::default();
        made.new_name(5, "f", Some(50));
        assert!(w.lock().apply(None, made).is_empty(), "nobody waited for");
        assert_eq!(rx_mount.try_recv().unwrap(), (0, Notice::Attr { ino: 5 }));
        assert!(rx_exact.try_recv().is_err(), "the directory's times are not its business");
        let awaited = w.lock().apply(None, Effects { changed_attrs: vec![5], ..Default::default() });
        assert_eq!(awaited.len(), 1, "its mode is, and is waited for");
        let (ack, notice) = rx_exact.try_recv().unwrap();
        assert!(ack != 0 && notice == Notice::Attr { ino: 5 });
        assert!(rx_mount.try_recv().is_err(), "the mount asks again before it is told again");
    }

    #[test]
    fn changes_reach_other_watchers_once_and_not_the_changer() {
        let w = Watchers::default();
        let (a, mut rx_a) = w.register(Keeps::Everything, PEER);
        let (b, mut rx_b) = w.register(Keeps::Everything, PEER);
        w.lock().apply(Some(a), told(&[10], &[1]));
        w.lock().apply(Some(b), told(&[10], &[1]));
        let change = || Effects { changed_attrs: vec![10], changed_entries: vec![(1, "x".into())], ..Default::default() };
        w.lock().apply(Some(a), change());
        assert_eq!(rx_b.try_recv().unwrap(), (0, Notice::Attr { ino: 10 }));
        assert_eq!(rx_b.try_recv().unwrap().1, Notice::Entry { parent: 1, name: "x".into() });
        assert!(rx_a.try_recv().is_err(), "the changer is not told of its own change");
        // b dropped the attributes: a second change tells it nothing until it asks again;
        // the directory stays watched.
        w.lock().apply(None, change());
        assert_eq!(rx_a.try_recv().unwrap(), (0, Notice::Attr { ino: 10 }));
        assert_eq!(rx_a.try_recv().unwrap().1, Notice::Entry { parent: 1, name: "x".into() });
        assert_eq!(rx_b.try_recv().unwrap().1, Notice::Entry { parent: 1, name: "x".into() });
        assert!(rx_b.try_recv().is_err());
    }

    /// A directory its maker was told no name in since it made it: the first change another
    /// client makes there is noticed to the maker (and waited for), the next are not, and
    /// the directory may then be delegated. One it was told a name in stays watched.
    #[test]
    fn a_directory_watched_from_birth_only_is_let_go_at_the_first_change_of_another() {
        let w = Watchers::default();
        let (mount, mut rx_mount) = w.register(Keeps::Everything, PEER);
        let (lib, _rx_lib) = w.register(Keeps::Exactly, PEER);
        let made = |dir| Effects { told_attrs: vec![dir], made_dir: Some(dir), ..Default::default() };
        let create = |dir, name: &str| Effects { changed_entries: vec![(dir, name.into())], ..Default::default() };
        w.lock().apply(Some(mount), made(5));
        w.lock().apply(Some(mount), made(6));
        assert!(w.lock().others_hold_names(5, lib), "its maker may answer that a name is not there");
        assert_eq!(w.lock().apply(Some(lib), create(5, "a")).len(), 1, "the first change waits for the maker");
        assert_eq!(rx_mount.try_recv().unwrap().1, Notice::Entry { parent: 5, name: "a".into() });
        assert!(w.lock().apply(Some(lib), create(5, "b")).is_empty(), "the next ones wait for nobody");
        assert!(rx_mount.try_recv().is_err());
        assert!(!w.lock().others_hold_names(5, lib), "it may be delegated now");
        // Told a name there (its own create, a lookup): watched for good.
        w.lock().apply(Some(mount), told(&[], &[6]));
        for name in ["a", "b"] {
            assert_eq!(w.lock().apply(Some(lib), create(6, name)).len(), 1);
            assert_eq!(rx_mount.try_recv().unwrap().1, Notice::Entry { parent: 6, name: name.into() });
        }
        assert!(w.lock().others_hold_names(6, lib));
        // Made again after it was let go: watched from birth again; gone, or its maker gone,
        // nothing of it is left.
        w.lock().apply(Some(mount), made(7));
        w.lock().apply(None, Effects { gone: vec![7], ..Default::default() });
        assert!(w.lock().born.is_empty() && !w.lock().others_hold_names(7, lib));
        w.lock().apply(Some(mount), made(8));
        w.unregister(mount);
        assert!(w.lock().born.is_empty() && w.lock().dirs.is_empty());
    }

    #[test]
    fn a_watcher_that_keeps_nothing_is_told_nothing_and_holds_no_names() {
        let w = Watchers::default();
        let (lib, mut rx_lib) = w.register(Keeps::Nothing, PEER);
        let (mount, _rx_mount) = w.register(Keeps::Everything, PEER);
        w.lock().apply(Some(lib), told(&[10], &[1]));
        assert!(!w.lock().others_hold_names(1, mount), "its lookups register nothing");
        let change = Effects { changed_attrs: vec![10], changed_entries: vec![(1, "x".into())], ..Default::default() };
        assert!(w.lock().apply(Some(mount), change).is_empty(), "nobody waits for it");
        assert!(rx_lib.try_recv().is_err());
        // A recall still reaches it.
        w.notify(lib, Notice::Recall { dir: 1 });
        assert_eq!(rx_lib.try_recv().unwrap(), (0, Notice::Recall { dir: 1 }));
    }

    #[test]
    fn a_name_change_waits_for_acknowledgements_until_seen_or_the_watcher_leaves() {
        let w = Watchers::default();
        let (a, mut rx_a) = w.register(Keeps::Everything, PEER);
        let (b, _rx_b) = w.register(Keeps::Everything, PEER);
        w.lock().apply(Some(a), told(&[], &[1]));
        w.lock().apply(Some(b), told(&[], &[1]));
        let name = || Effects { changed_entries: vec![(1, "x".into())], ..Default::default() };
        let mut awaited = w.lock().apply(None, name());
        assert_eq!(awaited.len(), 2);
        let (ack, _) = rx_a.try_recv().unwrap();
        assert!(awaited[0].try_recv().is_err(), "not acknowledged yet");
        w.seen(ack);
        assert_eq!(awaited[0].try_recv(), Ok(()));
        w.unregister(b);
        assert!(matches!(awaited[1].try_recv(), Err(oneshot::error::TryRecvError::Closed)));
    }

    #[test]
    fn a_gone_connection_or_inode_is_forgotten() {
        let w = Watchers::default();
        let (a, mut rx_a) = w.register(Keeps::Everything, PEER);
        w.lock().apply(Some(a), told(&[10, 11], &[1]));
        w.lock().apply(None, Effects { gone: vec![10], ..Default::default() });
        w.lock().apply(None, Effects { changed_attrs: vec![10], ..Default::default() });
        assert!(rx_a.try_recv().is_err());
        w.unregister(a);
        assert!(!w.any());
        assert!(w.state.lock_or_recover().attrs.is_empty() && w.state.lock_or_recover().dirs.is_empty());
    }

    /// A departing watcher takes all it was registered for with it and nothing of another's,
    /// however often it registered and was notified in between, and what it keeps track of
    /// for that stays within twice what it holds.
    #[test]
    fn a_departure_forgets_all_its_registrations_and_only_its_own() {
        let w = Watchers::default();
        let (mount, _rx_mount) = w.register(Keeps::Everything, PEER);
        let (lib, _rx_lib) = w.register(Keeps::Exactly, PEER);
        let files: Vec<Ino> = (100..5100).collect();
        w.lock().apply(Some(mount), told(&files, &[1, 2]));
        for round in 0..3 {
            // Told, then notified of a change (which unregisters it), then told again.
            w.lock().apply(Some(lib), told(&files, &[1]));
            w.lock().apply(Some(mount), Effects { changed_attrs: files[..2500].to_vec(), ..Default::default() });
            w.lock().apply(Some(lib), Effects { listed: Some(2), ..told(&files[2500..], &[2]) });
            assert!(w.lock().trails[&lib].attrs.inos.len() <= 2 * files.len(), "round {round}: the trail stays bounded");
        }
        w.lock().apply(Some(lib), Effects { kept_open: Some(7), ..Default::default() });
        w.unregister(lib);
        let st = w.state.lock_or_recover();
        assert!(st.attrs.values().chain(st.dirs.values()).chain(st.kept.values()).all(|set| !set.contains(&lib)));
        assert!(st.listed_attrs.is_empty() && st.kept.is_empty() && !st.trails.contains_key(&lib));
        assert!(files.iter().all(|ino| st.attrs[ino].as_slice() == [mount]));
        assert!(st.dirs[&1].as_slice() == [mount] && st.dirs[&2].as_slice() == [mount]);
    }

    /// A changer that asked for it (`AwaitWatchers`) is answered only once every holder of
    /// the attributes it changed acknowledged its notice; others are not kept waiting.
    #[test]
    fn a_changer_that_awaits_watchers_waits_for_the_holders_of_the_attributes() {
        let w = Watchers::default();
        let (holder, mut rx_holder) = w.register(Keeps::Everything, PEER);
        w.lock().apply(Some(holder), told(&[10, 11], &[]));
        let mut awaited = w.lock().apply(None, Effects { changed_attrs: vec![10], attrs_awaited: true, ..Default::default() });
        assert_eq!(awaited.len(), 1);
        let (ack, notice) = rx_holder.try_recv().unwrap();
        assert_eq!(notice, Notice::Attr { ino: 10 });
        assert!(ack != 0 && awaited[0].try_recv().is_err(), "answered before the holder dropped it");
        w.seen(ack);
        assert_eq!(awaited[0].try_recv(), Ok(()));
        assert!(w.lock().apply(None, Effects { changed_attrs: vec![11], ..Default::default() }).is_empty());
        assert_eq!(rx_holder.try_recv().unwrap(), (0, Notice::Attr { ino: 11 }), "told, not waited for");
        // A directory's times moved by a new name in it are told, never waited for.
        w.lock().apply(Some(holder), told(&[1], &[]));
        let mut named = Effects { attrs_awaited: true, ..Default::default() };
        named.new_name(1, "x", None);
        assert!(w.lock().apply(None, named).is_empty());
        assert_eq!(rx_holder.try_recv().unwrap(), (0, Notice::Attr { ino: 1 }));
    }

    /// A watcher that keeps exactly (the interception library's `stat` cache) acknowledges
    /// every change of the attributes it holds, whoever changes them; its names never stand
    /// in the way of a delegation, but are taken back (acknowledged) before one is granted.
    #[test]
    fn a_watcher_that_keeps_exactly_is_waited_for_and_gives_its_names_back_for_a_delegation() {
        let w = Watchers::default();
        let (cache, mut rx_cache) = w.register(Keeps::Exactly, PEER);
        let (mount, mut rx_mount) = w.register(Keeps::Everything, PEER);
        let (holder, _rx_holder) = w.register(Keeps::Nothing, PEER);
        w.lock().apply(Some(cache), told(&[10], &[1]));
        // What a create or an open told it, it does not keep: never noticed, never waited for.
        w.lock().apply(Some(cache), Effects { told_attrs: vec![20], told_dirs: vec![2], ..Default::default() });
        let elsewhere = Effects { changed_attrs: vec![20], changed_entries: vec![(2, "y".into())], ..Default::default() };
        assert!(w.lock().apply(None, elsewhere).is_empty());
        assert!(rx_cache.try_recv().is_err());
        w.lock().apply(Some(mount), told(&[10], &[]));
        let mut awaited = w.lock().apply(None, Effects { changed_attrs: vec![10], ..Default::default() });
        assert_eq!(awaited.len(), 1, "only the exact keeper's notice is waited for");
        let (ack, notice) = rx_cache.try_recv().unwrap();
        assert_eq!(notice, Notice::Attr { ino: 10 });
        assert_eq!(rx_mount.try_recv().unwrap(), (0, Notice::Attr { ino: 10 }));
        w.seen(ack);
        assert_eq!(awaited[0].try_recv(), Ok(()));

        assert!(!w.lock().others_hold_names(1, holder), "its names do not refuse a delegation");
        let mut forgotten = w.lock().take_back_names(1, holder);
        assert_eq!(forgotten.len(), 1);
        let (ack, notice) = rx_cache.try_recv().unwrap();
        assert_eq!(notice, Notice::Names { dir: 1 });
        assert!(ack != 0 && forgotten[0].try_recv().is_err(), "the grant waits until it forgot them");
        w.seen(ack);
        assert_eq!(forgotten[0].try_recv(), Ok(()));
        // Not told of the directory's names any more, until it is told them again.
        assert!(w.lock().apply(None, Effects { changed_entries: vec![(1, "x".into())], ..Default::default() }).is_empty());
        assert!(rx_cache.try_recv().is_err());
        // The mount's names still refuse one.
        w.lock().apply(Some(mount), told(&[], &[1]));
        assert!(w.lock().others_hold_names(1, holder));
        assert!(w.lock().take_back_names(1, holder).is_empty(), "nothing taken from the mount");
    }

    /// A connection that keeps a file open to answer its opens acknowledges every change of
    /// the file's attributes before the change is answered, once, and is told of none after
    /// until it keeps it again; one that only holds the attributes is told without waiting.
    #[test]
    fn a_kept_open_is_told_of_a_change_before_it_is_answered() {
        let w = Watchers::default();
        let (keeper, mut rx_keeper) = w.register(Keeps::Everything, PEER);
        let (holder, mut rx_holder) = w.register(Keeps::Everything, PEER);
        w.lock().apply(Some(keeper), Effects { told_attrs: vec![10], kept_open: Some(10), ..Default::default() });
        w.lock().apply(Some(holder), told(&[10], &[]));
        let change = || Effects { changed_attrs: vec![10], ..Default::default() };
        let mut awaited = w.lock().apply(None, change());
        assert_eq!(awaited.len(), 1, "only the keeper's notice is waited for");
        let (ack, notice) = rx_keeper.try_recv().unwrap();
        assert_eq!(notice, Notice::Attr { ino: 10 });
        assert!(ack != 0 && rx_keeper.try_recv().is_err(), "one notice, acknowledged");
        assert_eq!(rx_holder.try_recv().unwrap(), (0, Notice::Attr { ino: 10 }));
        w.seen(ack);
        assert_eq!(awaited[0].try_recv(), Ok(()));
        assert!(w.lock().apply(None, change()).is_empty(), "told once: it opens through the server again");
        assert!(rx_keeper.try_recv().is_err());
        // The keeper's own changes are not noticed to it, and it stays a keeper.
        w.lock().apply(Some(keeper), Effects { kept_open: Some(10), ..Default::default() });
        assert!(w.lock().apply(Some(keeper), change()).is_empty());
        assert_eq!(w.lock().apply(None, change()).len(), 1);
    }

    /// A process that keeps exactly what it listed is taken back the whole listing on the
    /// first change to anything in it (a name, or a listed file's attributes), with one
    /// acknowledged notice; later changes there are not its business until it lists again.
    #[test]
    fn a_listing_kept_exactly_is_taken_back_whole_and_once() {
        let w = Watchers::default();
        let (lib, mut rx_lib) = w.register(Keeps::Exactly, PEER);
        let (mount, mut rx_mount) = w.register(Keeps::Everything, PEER);
        let listing =
            |dir| Effects { told_attrs: vec![10, 11, 12], told_dirs: vec![dir], listed: Some(dir), queried: true, ..Default::default() };
        w.lock().apply(Some(lib), listing(1));
        w.lock().apply(Some(mount), told(&[10, 11], &[1]));

        let write = |ino| Effects { changed_attrs: vec![ino], ..Default::default() };
        assert_eq!(w.lock().apply(None, write(10)).len(), 1, "the listing's taking back is acknowledged");
        assert_eq!(rx_lib.try_recv().unwrap().1, Notice::Names { dir: 1 });
        assert!(rx_lib.try_recv().is_err(), "one notice for the whole listing");
        assert_eq!(rx_mount.try_recv().unwrap(), (0, Notice::Attr { ino: 10 }), "a mount is told of each inode");
        assert!(!w.lock().dirs.get(&1).is_some_and(|set| set.contains(&lib)), "its names there are taken back too");

        let unlink = Effects { changed_attrs: vec![11], changed_entries: vec![(1, "b".into())], gone: vec![11], ..Default::default() };
        w.lock().apply(None, unlink);
        assert!(rx_lib.try_recv().is_err(), "nothing more until it lists again");
        assert_eq!(rx_mount.try_recv().unwrap().1, Notice::Attr { ino: 11 });
        assert_eq!(rx_mount.try_recv().unwrap().1, Notice::Entry { parent: 1, name: "b".into() });

        w.lock().apply(Some(lib), listing(1));
        w.lock().apply(None, write(12));
        assert_eq!(rx_lib.try_recv().unwrap().1, Notice::Names { dir: 1 }, "listed again, told again");
        // Its own changes are no news to it.
        w.lock().apply(Some(lib), listing(1));
        w.lock().apply(Some(lib), write(12));
        assert!(rx_lib.try_recv().is_err());
        w.unregister(lib);
        assert!(w.lock().listed_attrs.values().all(|set| set.iter().all(|&(x, _)| x != lib)));
    }

    /// Names a process that keeps exactly looked up in a directory are taken back whole on
    /// the first change of a name there.
    #[test]
    fn names_kept_exactly_are_taken_back_whole_on_a_change() {
        let w = Watchers::default();
        let (lib, mut rx_lib) = w.register(Keeps::Exactly, PEER);
        w.lock().apply(Some(lib), told(&[], &[1]));
        let create = |name: &str| Effects { changed_entries: vec![(1, name.into())], ..Default::default() };
        assert_eq!(w.lock().apply(None, create("a")).len(), 1);
        assert_eq!(rx_lib.try_recv().unwrap().1, Notice::Names { dir: 1 });
        w.lock().apply(None, create("b"));
        assert!(rx_lib.try_recv().is_err(), "it holds no names there any more");
        w.lock().apply(Some(lib), told(&[], &[1]));
        w.lock().apply(None, create("c"));
        assert_eq!(rx_lib.try_recv().unwrap().1, Notice::Names { dir: 1 }, "looked up again, told again");
    }
}
