//! Directories whose every name this mount knows, so that "no such name" needs no round trip.
//!
//! The kernel looks every name up before it creates it, so without this a create costs two
//! round trips. A directory is known in full when this mount made it (the server watches it for
//! this mount from the moment it exists), or after the mount fetched its listing because names
//! kept turning out missing there. Either way the server notices every change other clients
//! make to it from then on, and this mount records its own. Any change from elsewhere drops
//! the listing, so a name another node creates is never answered as missing once its creation
//! has returned (name notices are acknowledged before the change is answered, see the
//! server's `watch` module).
//!
//! A fetch races with changes: the server starts watching at the first page, so a change
//! from elsewhere after that arrives as a notice and spoils the fetch; this mount's own
//! changes meanwhile are kept and applied to the fetched names. A directory whose listings
//! keep being spoiled (a directory shared with busy writers elsewhere) is fetched ever more
//! rarely.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Missing names in one directory before its listing is fetched (doubled each time a listing
/// of it was spoiled, up to `MISSES_BEFORE_FETCH << MAX_BACKOFF`).
const MISSES_BEFORE_FETCH: u32 = 8;
const MAX_BACKOFF: u32 = 9;
/// Larger directories are not kept in full (memory; the server keeps them anyway).
pub const MAX_LISTED: usize = 100_000;

#[derive(Default)]
pub struct Listings {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    known: HashMap<u64, HashSet<String>>,
    fetching: HashMap<u64, Fetch>,
    misses: HashMap<u64, Misses>,
}

/// A listing on its way: this mount's own changes meanwhile, or spoiled by a change elsewhere.
#[derive(Default)]
struct Fetch {
    own: Vec<(String, bool)>,
    spoiled: bool,
}

#[derive(Default)]
struct Misses {
    count: u32,
    spoiled: u32,
    /// Its listing was longer than `MAX_LISTED`: not fetched again.
    too_big: bool,
}

impl Listings {
    /// Whether `dir` is known to have no entry `name`.
    pub fn known_missing(&self, dir: u64, name: &str) -> bool {
        self.state.lock().unwrap().known.get(&dir).is_some_and(|names| !names.contains(name))
    }

    /// Whether `dir` is known to have no entries.
    pub fn known_empty(&self, dir: u64) -> bool {
        self.state.lock().unwrap().known.get(&dir).is_some_and(|names| names.is_empty())
    }

    /// Whether every name in `dir` is known here.
    pub fn knows(&self, dir: u64) -> bool {
        self.state.lock().unwrap().known.contains_key(&dir)
    }

    /// This mount made `dir`: it is empty and watched from birth.
    pub fn made(&self, dir: u64) {
        self.state.lock().unwrap().known.insert(dir, HashSet::new());
    }

    /// This mount's own change to `dir/name`: `Some(true)` the name exists now, `Some(false)`
    /// it is gone, `None` the outcome is unknown (a failure), which drops what is known.
    pub fn named(&self, dir: u64, name: &str, exists: Option<bool>) {
        let mut st = self.state.lock().unwrap();
        if let Some(fetch) = st.fetching.get_mut(&dir) {
            match exists {
                Some(exists) => fetch.own.push((name.to_string(), exists)),
                None => fetch.spoiled = true,
            }
        }
        match (st.known.get_mut(&dir), exists) {
            (None, _) => {}
            (Some(names), Some(true)) => {
                names.insert(name.to_string());
            }
            (Some(names), Some(false)) => {
                names.remove(name);
            }
            (Some(_), None) => {
                st.known.remove(&dir);
            }
        }
    }

    /// Another client changed a name in `dir` (a notice).
    pub fn changed_elsewhere(&self, dir: u64) {
        let mut st = self.state.lock().unwrap();
        let dropped = st.known.remove(&dir).is_some();
        let spoiled = st.fetching.get_mut(&dir).map(|f| f.spoiled = true).is_some();
        if dropped || spoiled {
            let misses = st.misses.entry(dir).or_default();
            misses.spoiled = (misses.spoiled + 1).min(MAX_BACKOFF);
        }
    }

    /// Forgets `dir` (the kernel did, or notices from its server may have been missed).
    pub fn forget(&self, dir: u64) {
        // Not `forget_where`: this runs at every rmdir and every inode the kernel forgets,
        // and a walk of every known directory made removing 20,000 of them quadratic.
        let mut st = self.state.lock().unwrap();
        st.known.remove(&dir);
        st.misses.remove(&dir);
        if let Some(fetch) = st.fetching.get_mut(&dir) {
            fetch.spoiled = true;
        }
    }

    pub fn forget_where(&self, which: impl Fn(u64) -> bool) {
        let mut st = self.state.lock().unwrap();
        st.known.retain(|&d, _| !which(d));
        st.misses.retain(|&d, _| !which(d));
        for (_, fetch) in st.fetching.iter_mut().filter(|(&d, _)| which(d)) {
            fetch.spoiled = true;
        }
    }

    /// The servers said `dir` has no such name. True when it is time to fetch the listing:
    /// the caller then reads the directory and hands the names to [`Listings::fetched`].
    pub fn missed(&self, dir: u64) -> bool {
        let mut st = self.state.lock().unwrap();
        if st.known.contains_key(&dir) || st.fetching.contains_key(&dir) {
            return false;
        }
        let misses = st.misses.entry(dir).or_default();
        misses.count += 1;
        if misses.too_big || misses.count < MISSES_BEFORE_FETCH << misses.spoiled {
            return false;
        }
        misses.count = 0;
        st.fetching.insert(dir, Fetch::default());
        true
    }

    /// The fetch of `dir` is over: `names` as read (None: it failed).
    pub fn fetched(&self, dir: u64, names: Option<Vec<String>>) {
        let mut st = self.state.lock().unwrap();
        let Some(fetch) = st.fetching.remove(&dir) else { return };
        if names.as_ref().is_some_and(|n| n.len() > MAX_LISTED) {
            st.misses.entry(dir).or_default().too_big = true;
            return;
        }
        let Some(names) = names.filter(|_| !fetch.spoiled) else { return };
        let mut known: HashSet<String> = names.into_iter().collect();
        for (name, exists) in fetch.own {
            if exists {
                known.insert(name);
            } else {
                known.remove(&name);
            }
        }
        st.known.insert(dir, known);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch_after_misses(l: &Listings, dir: u64) -> u32 {
        (1..=10_000).find(|_| l.missed(dir)).unwrap()
    }

    #[test]
    fn a_made_directory_is_known_and_follows_own_changes() {
        let l = Listings::default();
        l.made(5);
        assert!(l.known_missing(5, "a"));
        l.named(5, "a", Some(true));
        assert!(!l.known_missing(5, "a"));
        l.named(5, "a", Some(false));
        assert!(l.known_missing(5, "a"));
        l.named(5, "b", None);
        assert!(!l.known_missing(5, "a"), "an unknown outcome drops the listing");
    }

    #[test]
    fn a_fetched_listing_keeps_own_changes_made_meanwhile_and_is_dropped_by_others() {
        let l = Listings::default();
        assert_eq!(fetch_after_misses(&l, 7), MISSES_BEFORE_FETCH);
        assert!(!l.missed(7), "one fetch at a time");
        l.named(7, "new", Some(true));
        l.named(7, "old", Some(false));
        l.fetched(7, Some(vec!["old".into(), "other".into()]));
        assert!(!l.known_missing(7, "new") && !l.known_missing(7, "other"));
        assert!(l.known_missing(7, "old") && l.known_missing(7, "never"));
        l.changed_elsewhere(7);
        assert!(!l.known_missing(7, "never"));
        // Spoiled once: the next fetch waits for twice as many misses.
        assert_eq!(fetch_after_misses(&l, 7), MISSES_BEFORE_FETCH * 2);
    }

    #[test]
    fn a_fetch_spoiled_by_a_change_elsewhere_or_a_failure_is_not_kept() {
        let l = Listings::default();
        fetch_after_misses(&l, 9);
        l.changed_elsewhere(9);
        l.fetched(9, Some(vec![]));
        assert!(!l.known_missing(9, "x"));
        fetch_after_misses(&l, 9);
        l.named(9, "y", None);
        l.fetched(9, Some(vec![]));
        assert!(!l.known_missing(9, "x"));
        fetch_after_misses(&l, 9);
        l.fetched(9, None);
        assert!(!l.known_missing(9, "x"));
        fetch_after_misses(&l, 9);
        l.fetched(9, Some(vec![]));
        assert!(l.known_missing(9, "x"));
        // A huge directory is not kept, nor fetched again.
        fetch_after_misses(&l, 11);
        l.fetched(11, Some((0..=MAX_LISTED).map(|i| i.to_string()).collect()));
        assert!(!l.known_missing(11, "x"));
        assert!((0..100_000).all(|_| !l.missed(11)));
    }
}
