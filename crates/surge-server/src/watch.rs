//! Who may be caching what, and telling them when it changes.
//!
//! A client that caches metadata (the FUSE mount, whose kernel keeps names and attributes)
//! sends `Watch` once per connection. From then on this server notes, for every reply that
//! hands such a connection an inode's attributes or a name in one of its directories, that the
//! connection may be holding them. When another connection changes one of them, the watcher
//! gets a [`Notice`] before the change is answered, so its cache can be kept for long without
//! going stale: the scheme of NFSv4 delegations or CephFS capabilities. A notice that a name
//! changed is acknowledged, and the change is answered only once every watcher acknowledged it
//! (or after `ACK_TIMEOUT`): a watcher that answers "no such name" from what it knows of a
//! directory can never miss a name that another client was already told exists. Attribute
//! notices are not waited for: a watcher's `stat` lags such a change by the notice's flight.
//!
//! Bookkeeping is per server and only for what this server homes. A notified connection is
//! forgotten for that inode's attributes until it asks for them again (its cache dropped
//! them); a directory stays watched for as long as the connection lives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use surge_proto::{Ino, Notice, Reply, Request, Unlinked};
use tokio::sync::{mpsc, oneshot};

/// How long a change waits for watchers to acknowledge its notices before it is answered
/// anyway (a watcher that hangs must not hang everybody).
pub const ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A notice and the number its acknowledgement must quote (0: none wanted).
pub type Outgoing = (u64, Notice);

/// A watching connection, as known to this server.
pub type WatcherId = u64;

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
    /// Acknowledgements awaited, by number: whose, and whom to wake.
    acks: HashMap<u64, (WatcherId, oneshot::Sender<()>)>,
    next_ack: u64,
    /// Connections that may hold an inode's attributes.
    attrs: HashMap<Ino, Vec<WatcherId>>,
    /// Connections that may hold names in a directory.
    dirs: HashMap<Ino, Vec<WatcherId>>,
}

/// What one successful request told its connection and what it changed.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Effects {
    pub told_attrs: Vec<Ino>,
    pub told_dirs: Vec<Ino>,
    pub changed_attrs: Vec<Ino>,
    pub changed_entries: Vec<(Ino, String)>,
    /// Inodes that no longer exist: nothing to watch any more.
    pub gone: Vec<Ino>,
}

impl Effects {
    /// Whether `request` can tell or change anything watched (data and staging cannot).
    pub fn possible(request: &Request) -> bool {
        matches!(
            request,
            Request::Lookup { .. }
                | Request::GetAttr { .. }
                | Request::Open { .. }
                | Request::MakeDirInode { .. }
                | Request::SetAttr { .. }
                | Request::Create { .. }
                | Request::Symlink { .. }
                | Request::InsertEntry { .. }
                | Request::Unlink { .. }
                | Request::Rmdir { .. }
                | Request::RemoveEntry { .. }
                | Request::RenameFinish { .. }
                | Request::Rename { .. }
                | Request::DropLink { .. }
                | Request::SetParent { .. }
                | Request::Commit { .. }
                | Request::Readdir { .. }
        )
    }

    /// What `request`, answered with `reply` (not an error), told and changed.
    pub fn of(request: &Request, reply: &Reply) -> Effects {
        let mut fx = Effects::default();
        match (request, reply) {
            (Request::Lookup { parent, .. }, Reply::Entry(entry)) => {
                fx.told_dirs.push(*parent);
                if entry.attr.is_some() {
                    fx.told_attrs.push(entry.ino);
                }
            }
            (Request::GetAttr { ino } | Request::Open { ino }, _) => fx.told_attrs.push(*ino),
            (Request::MakeDirInode { .. }, Reply::Attr(attr)) => {
                // Watched from birth: a client that made a directory may know all its names.
                fx.told_attrs.push(attr.ino);
                fx.told_dirs.push(attr.ino);
            }
            (Request::SetAttr { ino, .. }, _) => {
                fx.changed_attrs.push(*ino);
                fx.told_attrs.push(*ino);
            }
            (Request::Create { parent, name, .. }, Reply::Entry(entry)) => {
                fx.new_name(*parent, name, Some(entry.ino));
            }
            (Request::Symlink { parent, name, .. }, Reply::Attr(attr)) => fx.new_name(*parent, name, Some(attr.ino)),
            (Request::InsertEntry { parent, name, .. }, Reply::Renamed { replaced, .. }) => {
                fx.new_name(*parent, name, None);
                fx.lost_link(replaced.as_ref());
            }
            (Request::Unlink { parent, name }, Reply::Unlinked(unlinked)) => {
                fx.removed_name(*parent, name);
                fx.lost_link(Some(unlinked));
            }
            (Request::Rmdir { parent, name } | Request::RemoveEntry { parent, name, .. }, _) => fx.removed_name(*parent, name),
            (Request::RenameFinish { parent, name, commit: true, .. }, _) => fx.removed_name(*parent, name),
            (Request::Rename { src_parent, src_name, dst_parent, dst_name, .. }, Reply::Renamed { replaced, .. }) => {
                fx.removed_name(*src_parent, src_name);
                fx.new_name(*dst_parent, dst_name, None);
                fx.lost_link(replaced.as_ref());
            }
            (Request::DropLink { ino }, Reply::Dropped { purge, .. }) => {
                fx.changed_attrs.push(*ino);
                if *purge {
                    fx.gone.push(*ino);
                }
            }
            (Request::SetParent { ino, .. }, _) => fx.changed_attrs.push(*ino),
            (Request::Commit { ino, size, mtime, .. }, Reply::Dropped { purge, .. }) => {
                if size.is_some() || mtime.is_some() {
                    fx.changed_attrs.push(*ino);
                }
                if *purge {
                    fx.gone.push(*ino);
                }
            }
            (Request::Readdir { ino, .. }, _) => fx.told_dirs.push(*ino),
            _ => {}
        }
        fx
    }

    /// `parent/name` was created or replaced (by `ino` when it is homed here): the requester's
    /// kernel will cache the name.
    fn new_name(&mut self, parent: Ino, name: &str, ino: Option<Ino>) {
        self.changed_entries.push((parent, name.to_string()));
        self.changed_attrs.push(parent);
        self.told_dirs.push(parent);
        self.told_attrs.extend(ino);
    }

    fn removed_name(&mut self, parent: Ino, name: &str) {
        self.changed_entries.push((parent, name.to_string()));
        self.changed_attrs.push(parent);
    }

    /// An inode lost a name; when it is homed here, its link count changed or it is gone.
    fn lost_link(&mut self, unlinked: Option<&Unlinked>) {
        if let Some(u) = unlinked.filter(|u| !u.remote) {
            self.changed_attrs.push(u.ino);
            if u.purge {
                self.gone.push(u.ino);
            }
        }
    }
}

fn add(set: &mut Vec<WatcherId>, id: WatcherId) {
    if !set.contains(&id) {
        set.push(id);
    }
}

impl Watchers {
    /// A new watching connection and the notices for it.
    pub fn register(&self) -> (WatcherId, mpsc::UnboundedReceiver<Outgoing>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.state.lock().unwrap().outboxes.insert(id, tx);
        self.count.fetch_add(1, Ordering::Relaxed);
        (id, rx)
    }

    /// The connection is gone.
    pub fn unregister(&self, id: WatcherId) {
        let mut st = self.state.lock().unwrap();
        let Ledger { outboxes, attrs, dirs, acks, .. } = &mut *st;
        if outboxes.remove(&id).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        // Whoever waits for this connection's acknowledgements stops waiting.
        acks.retain(|_, (w, _)| *w != id);
        for sets in [attrs, dirs] {
            sets.retain(|_, set| {
                set.retain(|&w| w != id);
                !set.is_empty()
            });
        }
    }

    /// A watcher acknowledged notice `ack`.
    pub fn seen(&self, ack: u64) {
        if let Some((_, wake)) = self.state.lock().unwrap().acks.remove(&ack) {
            let _ = wake.send(());
        }
    }

    /// Whether anything needs recording at all (no watcher: plain clients pay nothing).
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// The ledger, to hold while a metadata step runs and until its effects are applied: then
    /// no change can slip between what a watcher is told and its registration (it would never
    /// hear of that change).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.state.lock().unwrap()
    }
}

impl Ledger {
    /// Records what `by` (None: a connection that does not watch) was told and notifies the
    /// other watchers of what it changed. Returns the acknowledgements to wait for before the
    /// change is answered.
    pub fn apply(&mut self, by: Option<WatcherId>, effects: Effects) -> Vec<oneshot::Receiver<()>> {
        let Ledger { outboxes, attrs, dirs, acks, next_ack } = self;
        let mut awaited = Vec::new();
        let mut send = |to: WatcherId, notice: Notice| {
            let Some(outbox) = outboxes.get(&to) else { return };
            let ack = if matches!(notice, Notice::Entry { .. }) {
                *next_ack += 1;
                let (wake, woken) = oneshot::channel();
                acks.insert(*next_ack, (to, wake));
                awaited.push(woken);
                *next_ack
            } else {
                0
            };
            let _ = outbox.send((ack, notice));
        };
        for ino in effects.changed_attrs {
            if let Some(set) = attrs.get_mut(&ino) {
                for &w in set.iter().filter(|&&w| Some(w) != by) {
                    send(w, Notice::Attr { ino });
                }
                // The notified dropped what they had; they register again when they ask.
                set.retain(|&w| Some(w) == by);
                if set.is_empty() {
                    attrs.remove(&ino);
                }
            }
        }
        for (parent, name) in effects.changed_entries {
            if let Some(set) = dirs.get(&parent) {
                for &w in set.iter().filter(|&&w| Some(w) != by) {
                    send(w, Notice::Entry { parent, name: name.clone() });
                }
            }
        }
        for ino in effects.gone {
            attrs.remove(&ino);
            dirs.remove(&ino);
        }
        if let Some(id) = by {
            for ino in effects.told_attrs {
                add(attrs.entry(ino).or_default(), id);
            }
            for ino in effects.told_dirs {
                add(dirs.entry(ino).or_default(), id);
            }
        }
        awaited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(attrs: &[Ino], dirs: &[Ino]) -> Effects {
        Effects { told_attrs: attrs.to_vec(), told_dirs: dirs.to_vec(), ..Default::default() }
    }

    #[test]
    fn changes_reach_other_watchers_once_and_not_the_changer() {
        let w = Watchers::default();
        let (a, mut rx_a) = w.register();
        let (b, mut rx_b) = w.register();
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

    #[test]
    fn a_name_change_waits_for_acknowledgements_until_seen_or_the_watcher_leaves() {
        let w = Watchers::default();
        let (a, mut rx_a) = w.register();
        let (b, _rx_b) = w.register();
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
    fn every_request_with_effects_takes_the_ledger() {
        use surge_proto::{Attr, AttrChanges, DirEntry, FileKind, Timestamp};
        let attr = Attr {
            ino: 7,
            kind: FileKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 1,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
        };
        let entry = DirEntry { name: "x".into(), ino: 7, kind: FileKind::File, attr: Some(attr.clone()) };
        let unlinked = Unlinked { ino: 7, kind: FileKind::File, remote: false, purge: true, size: 0 };
        let name = || "x".to_string();
        let cases = [
            (Request::Lookup { parent: 1, name: name() }, Reply::Entry(entry.clone())),
            (Request::GetAttr { ino: 7 }, Reply::Attr(attr.clone())),
            (Request::Open { ino: 7 }, Reply::Attr(attr.clone())),
            (Request::SetAttr { ino: 7, changes: AttrChanges::default() }, Reply::Attr(attr.clone())),
            (
                Request::Create { parent: 1, name: name(), mode: 0o644, uid: 0, gid: 0, exclusive: true, open: true },
                Reply::Entry(entry.clone()),
            ),
            (Request::Symlink { parent: 1, name: name(), target: "t".into(), uid: 0, gid: 0 }, Reply::Attr(attr.clone())),
            (Request::MakeDirInode { parent: 1, mode: 0o755, uid: 0, gid: 0 }, Reply::Attr(attr.clone())),
            (
                Request::InsertEntry { parent: 1, name: name(), ino: 7, kind: FileKind::File, replace: true, retired_target: None },
                Reply::Renamed { replaced: Some(unlinked.clone()), reparent: None },
            ),
            (Request::Unlink { parent: 1, name: name() }, Reply::Unlinked(unlinked.clone())),
            (Request::Rmdir { parent: 1, name: name() }, Reply::Ok),
            (Request::RemoveEntry { parent: 1, name: name(), ino: 7 }, Reply::Ok),
            (Request::RenameFinish { parent: 1, name: name(), ino: 7, commit: true }, Reply::Ok),
            (
                Request::Rename {
                    src_parent: 1,
                    src_name: name(),
                    dst_parent: 2,
                    dst_name: name(),
                    noreplace: false,
                    retired_target: None,
                },
                Reply::Renamed { replaced: None, reparent: None },
            ),
            (Request::DropLink { ino: 7 }, Reply::Dropped { purge: true, size: 0 }),
            (Request::SetParent { ino: 7, parent: 2 }, Reply::Ok),
            (Request::Commit { ino: 7, size: Some(1), mtime: None, release: false }, Reply::Dropped { purge: false, size: 1 }),
            (Request::Readdir { ino: 1, after: None, limit: 10 }, Reply::Entries { entries: vec![], more: false }),
        ];
        for (request, reply) in &cases {
            assert_ne!(Effects::of(request, reply), Effects::default(), "{} has effects", request.name());
            assert!(Effects::possible(request), "{} must take the ledger", request.name());
        }
        // Data requests have none and do not take it.
        assert!(!Effects::possible(&Request::Read { ino: 7, offset: 0, len: 1 }));
        assert_eq!(Effects::of(&Request::Read { ino: 7, offset: 0, len: 1 }, &Reply::Data), Effects::default());
    }

    #[test]
    fn a_gone_connection_or_inode_is_forgotten() {
        let w = Watchers::default();
        let (a, mut rx_a) = w.register();
        w.lock().apply(Some(a), told(&[10, 11], &[1]));
        w.lock().apply(None, Effects { gone: vec![10], ..Default::default() });
        w.lock().apply(None, Effects { changed_attrs: vec![10], ..Default::default() });
        assert!(rx_a.try_recv().is_err());
        w.unregister(a);
        assert!(!w.any());
        assert!(w.state.lock().unwrap().attrs.is_empty() && w.state.lock().unwrap().dirs.is_empty());
    }
}
