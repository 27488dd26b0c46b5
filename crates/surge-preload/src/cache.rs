//! What the library answers `stat` from without asking a server: the names and file
//! attributes its client was told, kept exactly.
//!
//! Why an answer from here is never stale:
//! * the client watches its servers with `Keeps::Exactly`: a change another client makes to a
//!   name or a file's attributes held here is answered to that client only once this cache
//!   dropped it (the notice's acknowledgement goes after), and before another client is
//!   granted a directory's delegation this cache forgets the directory's names;
//! * a home that waits for an acknowledgement in vain answers the change after 2 s all the
//!   same (the servers' `ACK_TIMEOUT`): so an entry is answered only while its home's notices
//!   are known to be all in (`surge_client::NoticeLease`: the home reached within 1.5 s);
//! * what this process changes itself is dropped here as it changes it (a server tells no
//!   client of its own changes);
//! * an answer that was on its way while a notice came is not kept ([`Cache::epoch`]);
//! * a directory's own attributes are never kept: a name made in it moves its times with no
//!   acknowledgement awaited.
//!
//! A directory whose names miss here again and again is listed once, with attributes, in the
//! background ([`Cache::missed`]): one request per page of names instead of one per `stat`,
//! slowed to a page per [`PAGE_EVERY_BESIDE_DATA`] while the program reads or writes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use surge_client::surge_proto::admin::Notice;
use surge_client::surge_proto::{ino, Attr, FileKind, Ino};
use surge_client::{Client, NoticeLease};
use tokio::runtime::Handle;

/// File attributes kept at most; past it, the directories used longest ago are dropped
/// (everything, when that is not enough).
const MAX_KEPT: usize = 2_000_000;

/// Misses in one directory after which it is listed whole, in the background.
const MISSES_BEFORE_LISTING: u32 = 16;

/// Names asked for per page of a background listing.
const LISTING_PAGE: u32 = 4096;

/// While the process reads or writes, a background listing asks for at most one page per
/// this long: it is a guess at `stat`s to come, and must not take the CPUs (this process's
/// and the servers') from the data the program moves now. It goes on, slower, so that a
/// program that both reads files and stats their names still gets it.
const PAGE_EVERY_BESIDE_DATA: std::time::Duration = std::time::Duration::from_millis(100);

pub(crate) struct Cache {
    state: Mutex<State>,
    lease: NoticeLease,
    client: Client,
    runtime: Handle,
}

/// The maps here are looked up on every `stat` and `readdir` the library serves: hashed with
/// aHash (keyed per process, several times faster than the standard SipHash on names and
/// numbers) rather than the default hasher.
type Map<K, V> = HashMap<K, V, ahash::RandomState>;

#[derive(Default)]
struct State {
    /// Per directory: its names and what each names.
    names: Map<Ino, KeptDir>,
    /// Counts answers and keeps, for [`KeptDir::used`].
    tick: u64,
    attrs: Map<Ino, Attr>,
    /// Counts every drop: an answer that saw another epoch may be stale.
    epoch: u64,
    misses: Map<Ino, u32>,
    /// Directories listed (or being listed) in the background: not again.
    listed: HashSet<Ino>,
    /// Directories whose background listing is under way: never dropped for room (two
    /// listings too large together would otherwise drop each other, page by page).
    listing_now: HashSet<Ino>,
}

/// A directory's names kept here.
#[derive(Default)]
struct KeptDir {
    names: Map<String, Ino>,
    /// When one was last answered or kept ([`State::tick`]): the directory used longest ago is
    /// the first dropped for room.
    used: u64,
}

impl Cache {
    pub(crate) fn new(client: Client, runtime: Handle) -> Arc<Cache> {
        Arc::new(Cache { state: Mutex::default(), lease: NoticeLease::new(client.clone(), runtime.clone()), client, runtime })
    }

    /// What `dir/name` names, with its attributes, if both are kept and may be answered.
    pub(crate) fn lookup(&self, dir: Ino, name: &str) -> Option<Attr> {
        let attr = {
            let mut state = self.state.lock().unwrap();
            state.tick += 1;
            let tick = state.tick;
            let kept = state.names.get_mut(&dir)?;
            kept.used = tick;
            let ino = *kept.names.get(name)?;
            state.attrs.get(&ino)?.clone()
        };
        (self.lease.holds(ino::home(dir)) && self.lease.holds(ino::home(attr.ino))).then_some(attr)
    }

    /// A file's attributes, if kept and they may be answered.
    pub(crate) fn attr(&self, ino: Ino) -> Option<Attr> {
        let attr = self.state.lock().unwrap().attrs.get(&ino)?.clone();
        self.lease.holds(ino::home(ino)).then_some(attr)
    }

    /// To take before asking a server for what to keep: [`Cache::keep`] keeps the answer only
    /// if nothing was dropped meanwhile.
    pub(crate) fn epoch(&self) -> u64 {
        self.state.lock().unwrap().epoch
    }

    /// Keeps `dir/name` naming `attr`'s file (None: only the attributes), as a request sent
    /// at `sent` answered, if nothing was dropped since `epoch`.
    pub(crate) fn keep(&self, epoch: u64, sent: Instant, name: Option<(Ino, &str)>, attr: &Attr) {
        self.lease.reached(ino::home(attr.ino), sent);
        if let Some((dir, _)) = name {
            self.lease.reached(ino::home(dir), sent);
        }
        if attr.kind == FileKind::Dir {
            return;
        }
        let mut state = self.state.lock().unwrap();
        if state.epoch != epoch {
            return;
        }
        if !state.make_room(1, name.map(|(dir, _)| dir)) {
            return;
        }
        if let Some((dir, name)) = name {
            state.kept_dir(dir).names.insert(name.to_string(), attr.ino);
        }
        state.attrs.insert(attr.ino, attr.clone());
    }

    /// A server's notice: what it names is dropped (before the notice is acknowledged).
    pub(crate) fn notice(&self, notice: &Notice) {
        let mut state = self.state.lock().unwrap();
        state.epoch += 1;
        match notice {
            Notice::Attr { ino } => _ = state.attrs.remove(ino),
            Notice::Entry { parent, name } => {
                if let Some(kept) = state.names.get_mut(parent) {
                    kept.names.remove(name);
                }
            }
            // The server takes back the whole directory: its names, and the attributes of the
            // files they name, which it no longer tells this process of.
            Notice::Names { dir } => state.drop_dir(*dir),
            Notice::Recall { .. } => {}
        }
    }

    /// Notices from `server` may have been missed: nothing homed there is answered until
    /// asked again.
    pub(crate) fn lost(&self, server: usize) {
        self.lease.lost(server);
        let mut state = self.state.lock().unwrap();
        state.epoch += 1;
        state.names.retain(|&dir, _| ino::home(dir) != server);
        state.attrs.retain(|&ino, _| ino::home(ino) != server);
        state.listed.retain(|&dir| ino::home(dir) != server);
    }

    /// This process changed file `ino` (wrote, truncated, published, opened it truncating).
    pub(crate) fn changed_here(&self, ino: Ino) {
        let mut state = self.state.lock().unwrap();
        state.epoch += 1;
        state.attrs.remove(&ino);
    }

    /// This process changed what `dir/name` names (made, removed or replaced it).
    pub(crate) fn name_changed_here(&self, dir: Ino, name: &str) {
        let mut state = self.state.lock().unwrap();
        state.epoch += 1;
        let named = state.names.get_mut(&dir).and_then(|kept| kept.names.remove(name));
        if let Some(ino) = named {
            // Its link count moved too.
            state.attrs.remove(&ino);
        }
    }

    /// `dir/name` was not kept here: after [`MISSES_BEFORE_LISTING`] such misses in one
    /// directory, the directory is listed with its attributes in the background.
    pub(crate) fn missed(self: &Arc<Self>, dir: Ino) {
        {
            let mut state = self.state.lock().unwrap();
            if state.listed.contains(&dir) {
                return;
            }
            let misses = state.misses.entry(dir).or_default();
            *misses += 1;
            if *misses < MISSES_BEFORE_LISTING {
                return;
            }
            state.misses.remove(&dir);
            state.listed.insert(dir);
            state.listing_now.insert(dir);
        }
        let cache = self.clone();
        self.runtime.spawn(async move {
            cache.list(dir).await;
            cache.state.lock().unwrap().listing_now.remove(&dir);
        });
    }

    /// Keeps every name of `dir`, page by page; a page over which something was dropped is
    /// asked for again (a few times: a directory that keeps changing is left to lookups).
    async fn list(&self, dir: Ino) {
        let mut after = None;
        let mut spoiled = 0;
        let mut data_calls = crate::report::data_calls();
        let mut last_page = Instant::now();
        loop {
            if crate::report::data_calls() != data_calls {
                tokio::time::sleep_until((last_page + PAGE_EVERY_BESIDE_DATA).into()).await;
            }
            data_calls = crate::report::data_calls();
            let (epoch, sent) = (self.epoch(), Instant::now());
            last_page = sent;
            let page = match self.client.readdir_page_watching_attrs(dir, after.clone(), LISTING_PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::debug!(dir = format!("{dir:#x}"), "listing a directory to keep its names: {e}");
                    return;
                }
            };
            match self.keep_page(epoch, sent, dir, &page.entries) {
                Kept::Yes => {}
                Kept::Spoiled => {
                    spoiled += 1;
                    if spoiled == 3 {
                        return;
                    }
                    continue;
                }
                // What is kept of it stays; missed again, it is listed again (by then the
                // other listings are done and may be dropped for it).
                Kept::NoRoom => {
                    self.state.lock().unwrap().listed.remove(&dir);
                    return;
                }
            }
            if !page.more || page.entries.is_empty() || !self.state.lock().unwrap().listed.contains(&dir) {
                return;
            }
            after = page.entries.last().map(|e| e.name.clone());
        }
    }

    /// Keeps a page of `dir`'s names with their attributes, unless something was dropped
    /// since `epoch` or there is no room.
    fn keep_page(&self, epoch: u64, sent: Instant, dir: Ino, entries: &[surge_client::surge_proto::DirEntry]) -> Kept {
        self.lease.reached(ino::home(dir), sent);
        let mut state = self.state.lock().unwrap();
        if state.epoch != epoch {
            return Kept::Spoiled;
        }
        if !state.make_room(entries.len(), Some(dir)) {
            return Kept::NoRoom;
        }
        for entry in entries {
            // Attributes come with the names homed with the directory (the others are looked
            // up one by one when asked); a directory's are never kept.
            let Some(attr) = entry.attr.as_ref().filter(|a| a.kind != FileKind::Dir) else { continue };
            state.kept_dir(dir).names.insert(entry.name.clone(), entry.ino);
            state.attrs.insert(entry.ino, attr.clone());
        }
        Kept::Yes
    }
}

/// What became of a page of a background listing.
enum Kept {
    Yes,
    /// Something was dropped while it was on its way: asked for again.
    Spoiled,
    /// Only other listings under way could have made room for it.
    NoRoom,
}

impl State {
    /// Room for `more` attributes: drops the directories used longest ago (never `filling`,
    /// the one they go to, nor one being listed), and everything when that is not enough and
    /// no listing is under way. False: no room (only listings under way hold the rest).
    fn make_room(&mut self, more: usize, filling: Option<Ino>) -> bool {
        self.make_room_within(more, filling, MAX_KEPT)
    }

    fn make_room_within(&mut self, more: usize, filling: Option<Ino>, max: usize) -> bool {
        while self.attrs.len() + more > max {
            let oldest = self
                .names
                .iter()
                .filter(|&(&dir, _)| Some(dir) != filling && !self.listing_now.contains(&dir))
                .min_by_key(|(_, kept)| kept.used)
                .map(|(&dir, _)| dir);
            match oldest {
                Some(dir) => self.drop_dir(dir),
                None if self.listing_now.iter().any(|&dir| Some(dir) != filling) => return false,
                None => {
                    self.names.clear();
                    self.attrs.clear();
                    self.listed.clear();
                    self.epoch += 1;
                    return true;
                }
            }
        }
        true
    }

    /// `dir`'s names kept here, marked used now.
    fn kept_dir(&mut self, dir: Ino) -> &mut KeptDir {
        self.tick += 1;
        let kept = self.names.entry(dir).or_default();
        kept.used = self.tick;
        kept
    }

    /// Drops `dir`'s names and the attributes of the files they name; it may be listed again.
    fn drop_dir(&mut self, dir: Ino) {
        if let Some(kept) = self.names.remove(&dir) {
            for ino in kept.names.values() {
                self.attrs.remove(ino);
            }
        }
        self.listed.remove(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ino: Ino) -> Attr {
        let at = surge_client::surge_proto::Timestamp::default();
        Attr { ino, kind: FileKind::File, mode: 0o644, uid: 0, gid: 0, size: 0, nlink: 1, atime: at, mtime: at, ctime: at, blocks: None }
    }

    fn fill(state: &mut State, dir: Ino, inos: std::ops::Range<Ino>, max: usize) {
        assert!(state.make_room_within(inos.clone().count(), Some(dir), max));
        for ino in inos {
            state.kept_dir(dir).names.insert(format!("f{ino}"), ino);
            state.attrs.insert(ino, attr(ino));
        }
    }

    /// Past the bound, the directories used longest ago go first, whole, and may be listed
    /// again; the one being filled stays; a directory larger than the bound empties it all.
    #[test]
    fn room_is_made_by_dropping_the_directories_used_longest_ago() {
        let mut state = State::default();
        fill(&mut state, 1, 100..110, 25);
        fill(&mut state, 2, 200..210, 25);
        state.listed.insert(1);
        state.kept_dir(1); // used after 2
        fill(&mut state, 3, 300..310, 25);
        assert!(!state.names.contains_key(&2), "the directory used longest ago is dropped");
        assert!(!state.attrs.contains_key(&200), "with the attributes of its files");
        assert!(state.names.contains_key(&1) && state.names.contains_key(&3));
        assert_eq!(state.attrs.len(), 20);
        assert!(state.listed.contains(&1));

        fill(&mut state, 3, 310..330, 25);
        assert!(!state.names.contains_key(&1) && !state.listed.contains(&1), "dropped, and listed again when missed again");
        assert_eq!(state.attrs.len(), 20, "the directory being filled stays");
        let epoch = state.epoch;
        fill(&mut state, 4, 400..430, 25);
        assert!(state.epoch > epoch && state.names.len() == 1, "too big for the bound: everything else goes");
    }

    /// Two listings under way that do not fit together do not drop each other: the page
    /// that finds no room is refused (its listing stops), and once the other is done it may
    /// be dropped for a new listing.
    #[test]
    fn listings_under_way_are_never_dropped_for_room() {
        let mut state = State::default();
        state.listing_now.extend([1, 2]);
        fill(&mut state, 1, 100..110, 25);
        fill(&mut state, 2, 200..210, 25);
        assert!(!state.make_room_within(10, Some(1), 25), "no room but the other listing's");
        assert!(state.names.contains_key(&2) && state.attrs.len() == 20);
        state.listing_now.remove(&2);
        assert!(state.make_room_within(10, Some(1), 25), "a finished listing may go");
        assert!(!state.names.contains_key(&2) && state.names.contains_key(&1));
    }
}
