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
//! background ([`Cache::missed`]): one request per page of names instead of one per `stat`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use surge_client::surge_proto::admin::Notice;
use surge_client::surge_proto::{ino, Attr, FileKind, Ino};
use surge_client::{Client, NoticeLease};
use tokio::runtime::Handle;

/// Names (and attributes) kept at most; past it, everything is dropped and kept afresh.
const MAX_KEPT: usize = 2_000_000;

/// Misses in one directory after which it is listed whole, in the background.
const MISSES_BEFORE_LISTING: u32 = 16;

/// Names asked for per page of a background listing.
const LISTING_PAGE: u32 = 4096;

pub(crate) struct Cache {
    state: Mutex<State>,
    lease: NoticeLease,
    client: Client,
    runtime: Handle,
}

#[derive(Default)]
struct State {
    /// Per directory: its names and what each names.
    names: HashMap<Ino, HashMap<String, Ino>>,
    attrs: HashMap<Ino, Attr>,
    /// Counts every drop: an answer that saw another epoch may be stale.
    epoch: u64,
    misses: HashMap<Ino, u32>,
    /// Directories listed (or being listed) in the background: not again.
    listed: HashSet<Ino>,
}

impl Cache {
    pub(crate) fn new(client: Client, runtime: Handle) -> Arc<Cache> {
        Arc::new(Cache { state: Mutex::default(), lease: NoticeLease::new(client.clone(), runtime.clone()), client, runtime })
    }

    /// What `dir/name` names, with its attributes, if both are kept and may be answered.
    pub(crate) fn lookup(&self, dir: Ino, name: &str) -> Option<Attr> {
        let attr = {
            let state = self.state.lock().unwrap();
            let ino = *state.names.get(&dir)?.get(name)?;
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
        state.make_room(1);
        if let Some((dir, name)) = name {
            state.names.entry(dir).or_default().insert(name.to_string(), attr.ino);
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
                if let Some(names) = state.names.get_mut(parent) {
                    names.remove(name);
                }
            }
            // The server takes back the whole directory: its names, and the attributes of the
            // files they name, which it no longer tells this process of.
            Notice::Names { dir } => {
                if let Some(names) = state.names.remove(dir) {
                    for ino in names.values() {
                        state.attrs.remove(ino);
                    }
                }
                state.listed.remove(dir);
            }
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
        let named = state.names.get_mut(&dir).and_then(|names| names.remove(name));
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
        }
        let cache = self.clone();
        self.runtime.spawn(async move { cache.list(dir).await });
    }

    /// Keeps every name of `dir`, page by page; a page over which something was dropped is
    /// asked for again (a few times: a directory that keeps changing is left to lookups).
    async fn list(&self, dir: Ino) {
        let mut after = None;
        let mut spoiled = 0;
        loop {
            let (epoch, sent) = (self.epoch(), Instant::now());
            let page = match self.client.readdir_page_watching_attrs(dir, after.clone(), LISTING_PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::debug!(dir = format!("{dir:#x}"), "listing a directory to keep its names: {e}");
                    return;
                }
            };
            let kept = self.keep_page(epoch, sent, dir, &page.entries);
            if !kept {
                spoiled += 1;
                if spoiled == 3 {
                    return;
                }
                continue;
            }
            if !page.more || page.entries.is_empty() || !self.state.lock().unwrap().listed.contains(&dir) {
                return;
            }
            after = page.entries.last().map(|e| e.name.clone());
        }
    }

    /// Keeps a page of `dir`'s names with their attributes: false if something was dropped
    /// since `epoch` (nothing kept).
    fn keep_page(&self, epoch: u64, sent: Instant, dir: Ino, entries: &[surge_client::surge_proto::DirEntry]) -> bool {
        self.lease.reached(ino::home(dir), sent);
        let mut state = self.state.lock().unwrap();
        if state.epoch != epoch {
            return false;
        }
        state.make_room(entries.len());
        for entry in entries {
            // Attributes come with the names homed with the directory (the others are looked
            // up one by one when asked); a directory's are never kept.
            let Some(attr) = entry.attr.as_ref().filter(|a| a.kind != FileKind::Dir) else { continue };
            state.names.entry(dir).or_default().insert(entry.name.clone(), entry.ino);
            state.attrs.insert(entry.ino, attr.clone());
        }
        true
    }
}

impl State {
    /// Drops everything when `more` would take the cache past [`MAX_KEPT`] files.
    fn make_room(&mut self, more: usize) {
        if self.attrs.len() + more > MAX_KEPT {
            self.names.clear();
            self.attrs.clear();
            self.listed.clear();
            self.epoch += 1;
        }
    }
}
