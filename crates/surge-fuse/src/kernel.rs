//! What the kernel may hold of this mount (attributes and names, for the cache time) and how
//! it is taken back: by the servers' change notices ([`Invalidations`]), and by opens that find
//! it out of date. Nothing here answers a request; the operations layer consults and updates it.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use surge_client::surge_proto::admin::Notice;
use surge_client::surge_proto::{Attr, ContentVersion, ErrorCode, FileKind, Timestamp};
use surge_fuse_session::Notifier;

use crate::listings::Listings;
use crate::reopens::Reopens;
use surge_client::Delegations;

/// How long after ESTALE the kernel's retry may take on a loaded node (see
/// `KernelCache::stale`). An open's retry is known to be over when the open succeeds or a
/// name is missing; a `stat`'s retry is not (its steps look like any other), so this is
/// also how long one thread's next stale name right after a `stat` retry gets ENOENT.
const STALE_RETRY: Duration = Duration::from_millis(500);
/// How long the mount answers a directory's GETATTR from what it last heard (see
/// `KernelCache::directory`): changes made on other nodes drop it at once (notices), but this
/// node's own creates and unlinks move the directory's mtime without a notice.
const DIRECTORY_ATTR_WINDOW: Duration = Duration::from_secs(1);
/// How long a lookup that found a moved directory waits for its old entry to be dropped (see
/// `KernelCache::drop_entry`).
const MOVED_WAIT: Duration = Duration::from_millis(50);

/// Slots of [`KernelCache::attrs_changed_at`]: inodes share a slot by their number modulo
/// this, which only makes a reply racing another inode's change less cached.
const CHANGE_SLOTS: usize = 4096;

/// What the kernel may have cached (attributes and entries, for `ttl`), and how to take it
/// back when an open finds it out of date.
pub(crate) struct KernelCache {
    pub(crate) ttl: Duration,
    pub(crate) blksize: u32,
    /// Set once the session exists (the session owns the file system).
    pub(crate) notifier: Arc<OnceLock<Notifier>>,
    /// The (size, mtime, ctime) last reported to the kernel for each inode it knows.
    pub(crate) reported: Mutex<HashMap<u64, (u64, Timestamp, Timestamp)>>,
    /// Unlinked inodes whose open was refused once as stale (see `open`).
    pub(crate) refused: Mutex<HashSet<u64>>,
    /// Callers recently told ESTALE, by pid (see `stale`).
    pub(crate) told_stale: Mutex<HashMap<u32, Instant>>,
    /// Directory attributes answered for a short window, for `getattr` (see `directory`).
    pub(crate) directories: Mutex<HashMap<u64, (Attr, Instant)>>,
    /// The name the kernel holds each directory by, for `looked_up_directory`.
    directory_names: Mutex<DirectoryNames>,
    /// Directories this mount removed (rmdir, a rename over them) that the kernel still holds:
    /// their last attributes, with no link left, for `getattr` (see `removed_directory`).
    removed_directories: Mutex<HashMap<u64, Attr>>,
    /// Kernel invalidations to send, for the thread that sends them (see [`Invalidations`]).
    pub(crate) invalidations: OnceLock<std::sync::mpsc::Sender<Invalidation>>,
    /// Directories whose every name this mount knows ([`listings`]).
    pub(crate) listings: Listings,
    /// The content version whose bytes the kernel's page cache holds, per inode opened on
    /// the request path (see [`KernelCache::open_pages`]).
    pages: Mutex<HashMap<u64, HeldPages>>,
    /// What released handles on this node wrote to each file, for the handles opened before
    /// (see [`KernelCache::written_end`]).
    written: Mutex<HashMap<u64, WrittenHere>>,
    /// Changes this mount made to names or heard of (names or attributes), and inodes the
    /// kernel forgot: a listing taken before the count moved may no longer be what the servers
    /// hold (see [`KernelCache::may_give`]).
    changes: AtomicU64,
    /// Extended attributes the servers said an inode the kernel holds does not have (see
    /// [`KernelCache::absent_xattr`]): `ls -l` asks for `security.selinux` and the access ACL
    /// of every file, the kernel keeps neither answer, and nearly every file has neither.
    absent_xattrs: Mutex<HashMap<u64, AbsentXattrs>>,
    /// The count of changes when an inode's attributes last changed or were heard to, by slot
    /// (see [`KernelCache::changed_since`]).
    attrs_changed_at: Box<[AtomicU64]>,
}

/// What extended attributes an inode is known not to have.
enum AbsentXattrs {
    /// It has none (a listing said so).
    All,
    Names(HashSet<String>),
}

/// How far released handles on this node wrote a file, and which handles that is news to:
/// those opened before the home had it all (a handle opened later had the home's size at
/// its open, which a change made elsewhere since may have lowered: it must not be raised
/// back).
#[derive(Default)]
struct WrittenHere {
    end: u64,
    /// Releases whose publication has not come back yet.
    publishing: u32,
    /// The first handle number given out after the last of them came back.
    opened_before: u64,
}

/// The version the kernel's pages of a file hold, and this node's publications whose answers
/// came back before the one they follow (handles of one file closing at once).
struct HeldPages {
    version: ContentVersion,
    early: Vec<(ContentVersion, ContentVersion)>,
}

/// The name the kernel holds each directory by (it has one entry per directory), both ways,
/// as this mount gave them (lookups, mkdir) and moved them (its renames).
#[derive(Default)]
struct DirectoryNames {
    by_ino: HashMap<u64, (u64, String)>,
    by_name: HashMap<(u64, String), u64>,
}

impl DirectoryNames {
    /// Records `ino` as `parent/name` (a directory that had that name before has lost it).
    fn given(&mut self, ino: u64, parent: u64, name: &str) {
        let named = (parent, name.to_string());
        if self.by_ino.get(&ino) == Some(&named) {
            return;
        }
        if let Some(before) = self.by_name.insert(named.clone(), ino) {
            if before != ino {
                self.by_ino.remove(&before);
            }
        }
        if let Some(old) = self.by_ino.insert(ino, named) {
            self.by_name.remove(&old);
        }
    }

    /// Moves the names; the directory a rename (not an exchange) replaced, if the kernel
    /// held one by the target name.
    fn renamed(&mut self, from: (u64, String), to: (u64, String), exchange: bool) -> Option<u64> {
        let moved = self.by_name.remove(&from);
        let other = self.by_name.remove(&to);
        if let Some(ino) = other {
            self.by_ino.remove(&ino);
        }
        if let Some(ino) = moved {
            self.by_ino.insert(ino, to.clone());
            self.by_name.insert(to, ino);
        }
        if let (Some(ino), true) = (other, exchange) {
            self.by_ino.insert(ino, from.clone());
            self.by_name.insert(from, ino);
            return None;
        }
        other
    }

    fn forget(&mut self, ino: u64) {
        if let Some(named) = self.by_ino.remove(&ino) {
            self.by_name.remove(&named);
        }
    }
}

/// Publications kept waiting for the one before them, per file: handles of one file on one
/// node rarely close more at once than this (IOR's ranks, a job's threads).
const MAX_EARLY_PUBLICATIONS: usize = 64;

impl KernelCache {
    pub(crate) fn new(ttl: Duration, blksize: u32) -> KernelCache {
        KernelCache {
            ttl,
            blksize,
            notifier: Default::default(),
            reported: Default::default(),
            refused: Default::default(),
            told_stale: Default::default(),
            directories: Default::default(),
            removed_directories: Default::default(),
            directory_names: Mutex::default(),
            invalidations: Default::default(),
            listings: Default::default(),
            pages: Default::default(),
            written: Default::default(),
            changes: AtomicU64::new(0),
            absent_xattrs: Default::default(),
            attrs_changed_at: (0..CHANGE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Whether the attributes of `ino` changed, or a notice said they did, after the count of
    /// changes stood at `mark`. A reply carrying attributes that the servers read before such
    /// a change may reach the kernel after its invalidation: one for an inode the kernel did
    /// not hold yet (a lookup) would find nothing to drop, and the kernel keeps what the reply
    /// says for the whole cache time. Such a reply is given no cache time.
    pub(crate) fn changed_since(&self, ino: u64, mark: u64) -> bool {
        self.attrs_changed_at[ino as usize % CHANGE_SLOTS].load(Ordering::SeqCst) > mark
    }

    /// Whether inode `ino` is known to have no extended attribute `name`.
    pub(crate) fn known_absent_xattr(&self, ino: u64, name: &str) -> bool {
        match self.absent_xattrs.lock().unwrap().get(&ino) {
            Some(AbsentXattrs::All) => true,
            Some(AbsentXattrs::Names(names)) => names.contains(name),
            None => false,
        }
    }

    /// The servers said, to a request sent when the count of changes stood at `mark`, that
    /// `ino` has no attribute `name` (None: none at all, as a listing said with the
    /// attributes given to the kernel): remembered while the servers send this mount the
    /// inode's change notices (the kernel holds it: they were asked to when it was given)
    /// and nothing changed since (a notice about it on its way would find nothing to drop).
    /// Dropped with the inode's attributes ([`Self::forget_attr`], [`Self::forgotten`]).
    pub(crate) fn absent_xattr(&self, ino: u64, name: Option<&str>, mark: u64) {
        let mut absent = self.absent_xattrs.lock().unwrap();
        if self.change_mark() != mark || !self.reported.lock().unwrap().contains_key(&ino) {
            return;
        }
        let Some(name) = name else {
            absent.insert(ino, AbsentXattrs::All);
            return;
        };
        if let AbsentXattrs::Names(names) = absent.entry(ino).or_insert_with(|| AbsentXattrs::Names(HashSet::new())) {
            names.insert(name.to_string());
        }
    }

    /// Where the count of changes stands, for [`KernelCache::may_give`]: read before a
    /// listing is asked for.
    pub(crate) fn change_mark(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether the kernel may be given the attributes of inode `ino` from a listing taken
    /// at `mark` with its name (READDIRPLUS), as a lookup would give them: nothing changed
    /// that this mount made or heard of since (so they are what a lookup answered now would
    /// say), and the kernel holds nothing of the inode that they might be older than (this
    /// node's own changes of an inode go through the kernel, which then holds it).
    pub(crate) fn may_give(&self, ino: u64, mark: u64) -> bool {
        self.change_mark() == mark && !self.reported.lock().unwrap().contains_key(&ino)
    }

    /// This mount changed `dir/name` (see [`Listings::named`]).
    pub(crate) fn named(&self, dir: u64, name: &str, exists: Option<bool>) {
        self.changed();
        self.listings.named(dir, name, exists);
    }

    /// A handle on this node that wrote `ino` up to `end` is being released; its publication
    /// is under way until [`KernelCache::published`].
    pub(crate) fn wrote(&self, ino: u64, end: u64) {
        let mut written = self.written.lock().unwrap();
        let here = written.entry(ino).or_default();
        here.end = here.end.max(end);
        here.publishing += 1;
    }

    /// A release noted by [`KernelCache::wrote`] was answered by the file's home (either way):
    /// handles from `next_handle` on open at a size that includes it. With no handle of the
    /// file left open here and nothing under way, there is nobody left to tell.
    pub(crate) fn published(&self, ino: u64, next_handle: u64, handles_open: bool) {
        let mut written = self.written.lock().unwrap();
        let Some(here) = written.get_mut(&ino) else { return };
        here.publishing = here.publishing.saturating_sub(1);
        if here.publishing == 0 {
            here.opened_before = next_handle;
            if !handles_open {
                written.remove(&ino);
            }
        }
    }

    /// How far released handles on this node had written `ino`, when handle `fh` may not know
    /// it (since the last truncation here): a read through a handle opened earlier must reach
    /// that far (a read sees every write that returned before it on the node, through any
    /// descriptor), where the handle's own idea of the size may be older. The kernel asks only
    /// within the size it knows, so the mount must not answer such a read short: a short read
    /// makes the kernel cut the file there. A handle opened after the home had those writes
    /// is not told: its size came from the home, and may be that of a later truncation.
    pub(crate) fn written_end(&self, ino: u64, fh: u64) -> Option<u64> {
        let written = self.written.lock().unwrap();
        let here = written.get(&ino)?;
        (here.publishing > 0 || fh < here.opened_before).then_some(here.end)
    }

    /// `ino` was truncated or extended to `size` here: what was written past it is gone.
    pub(crate) fn resized(&self, ino: u64, size: u64) {
        if let Some(here) = self.written.lock().unwrap().get_mut(&ino) {
            here.end = size;
        }
    }

    /// An open of `ino` on the request path, at content version `now`: whether the kernel
    /// may keep the pages it holds (FOPEN_KEEP_CACHE), because they are the bytes of this
    /// very version — read or written here since an open at it, with nobody else changing
    /// the file between (see [`KernelCache::published_pages`]). Otherwise the kernel drops
    /// them at this open, and what it reads from now on is of this version. Close-to-open
    /// stays exact: another node's publication changes the version (ctime moves with every
    /// one), so the next open here drops the pages.
    pub(crate) fn open_pages(&self, ino: u64, now: ContentVersion) -> bool {
        let held = self.pages.lock().unwrap().insert(ino, HeldPages { version: now, early: Vec::new() });
        let keep = held.as_ref().is_some_and(|held| held.version == now);
        tracing::trace!(ino, keep, held = ?held.map(|h| h.version), ?now, "open: the kernel's pages");
        keep
    }

    /// A handle on the request path published what it wrote (`publication`: the version
    /// before and after; written through the kernel's page cache, so the pages hold it): the
    /// pages stay good at the new version if they were good at the old one. A publication
    /// that follows one whose answer has not come back yet waits for it (several handles
    /// closing at once); one that follows someone else's change never applies, and the next
    /// open drops the pages. `clean`: the handle's writes all landed; a failure, like writes
    /// that went around the page cache (passthrough, O_APPEND's direct I/O), drops them.
    pub(crate) fn published_pages(&self, ino: u64, publication: Option<(ContentVersion, ContentVersion)>, clean: bool) {
        let mut pages = self.pages.lock().unwrap();
        tracing::trace!(ino, ?publication, clean, held = ?pages.get(&ino).map(|h| h.version), "published");
        let (Some((before, after)), true) = (publication, clean) else {
            if !clean {
                pages.remove(&ino);
            }
            return;
        };
        let Some(held) = pages.get_mut(&ino) else { return };
        if held.version != before {
            if held.early.len() == MAX_EARLY_PUBLICATIONS {
                pages.remove(&ino);
            } else {
                held.early.push((before, after));
            }
            return;
        }
        held.version = after;
        // Publications that came back early and follow this one, in turn.
        while let Some(next) = held.early.iter().position(|&(before, _)| before == held.version) {
            held.version = held.early.swap_remove(next).1;
        }
    }

    /// The kernel's pages of `ino` may not be the file's bytes (another node changed them,
    /// or they were written around the page cache): the next open drops them.
    pub(crate) fn forget_pages(&self, ino: u64) {
        self.pages.lock().unwrap().remove(&ino);
    }

    /// The kernel is about to be told `a`: remembered so that `revalidate` knows what it holds.
    pub(crate) fn told(&self, a: &Attr) {
        self.reported.lock().unwrap().insert(a.ino, (a.size, a.mtime, a.ctime));
        if a.kind == FileKind::Dir && !self.ttl.is_zero() {
            self.directories.lock().unwrap().insert(a.ino, (a.clone(), Instant::now()));
        }
    }

    /// The kernel evicted the inode: it holds nothing of it any more.
    pub(crate) fn forgotten(&self, ino: u64) {
        self.changed();
        self.absent_xattrs.lock().unwrap().remove(&ino);
        self.reported.lock().unwrap().remove(&ino);
        self.written.lock().unwrap().remove(&ino);
        self.forget_pages(ino);
        self.refused.lock().unwrap().remove(&ino);
        self.forget_directory(ino);
        self.removed_directories.lock().unwrap().remove(&ino);
        self.directory_names.lock().unwrap().forget(ino);
        self.listings.forget(ino);
    }

    /// The kernel is about to be given directory `ino` as `parent/name` by a lookup. If it
    /// holds it by a name in another directory, the directory was moved on another node and
    /// the kernel may still have the old entry (the notice's invalidation has not run yet, or
    /// is running). The kernel keeps one entry per directory and moves that one to the new
    /// name, which across parents needs locks it only tries: with the old parent locked (by
    /// that invalidation, or by a rename on this node) the lookup fails with ESTALE, and the
    /// syscall's one retry can meet the same, so `ls` or `stat` of a directory moved elsewhere
    /// would say "Stale file handle". So the old entry is dropped first
    /// ([`Self::drop_entry`]), and the new name recorded once it is gone (otherwise the next
    /// lookup drops it again).
    pub(crate) async fn looked_up_directory(&self, ino: u64, parent: u64, name: &str) {
        let moved_from = {
            let mut names = self.directory_names.lock().unwrap();
            match names.by_ino.get(&ino) {
                Some(old) if old.0 != parent => Some(old.clone()),
                _ => {
                    names.given(ino, parent, name);
                    None
                }
            }
        };
        if let Some((old_parent, old_name)) = moved_from {
            if self.drop_entry(old_parent, old_name).await {
                self.gave_directory(ino, parent, name);
            }
        }
    }

    /// The kernel is given directory `ino` as `parent/name`, and holds it by no other name.
    pub(crate) fn gave_directory(&self, ino: u64, parent: u64, name: &str) {
        self.directory_names.lock().unwrap().given(ino, parent, name);
    }

    /// This mount renamed `parent/name` to `newparent/newname` (or swapped the two): the
    /// kernel moved its entries likewise.
    pub(crate) fn renamed(&self, parent: u64, name: &str, newparent: u64, newname: &str, exchange: bool) {
        let replaced = self.directory_names.lock().unwrap().renamed((parent, name.to_string()), (newparent, newname.to_string()), exchange);
        if let Some(dir) = replaced {
            self.removed_directory(dir);
        }
    }

    /// This mount removed directory `parent/name` (rmdir).
    pub(crate) fn removed_directory_named(&self, parent: u64, name: &str) {
        let removed = self.directory_names.lock().unwrap().by_name.get(&(parent, name.to_string())).copied();
        if let Some(dir) = removed {
            self.removed_directory(dir);
        }
    }

    /// Directory `dir`, which the kernel holds, lost its name through this mount. The kernel
    /// then clears its link count and asks for its attributes again (an `fstat` through a
    /// descriptor still open on it), which its home no longer has: they are answered from
    /// here, as last told, with no link, until the kernel forgets it.
    fn removed_directory(&self, dir: u64) {
        if let Some((attr, _)) = self.directories.lock().unwrap().remove(&dir) {
            let gone = Attr { nlink: 0, ctime: Timestamp::now(), ..attr };
            self.removed_directories.lock().unwrap().insert(dir, gone);
        }
    }

    /// Drops the kernel's entry `parent/name` and waits until it is gone (after whatever
    /// invalidations were queued before it), or `MOVED_WAIT` at most: the invalidation takes
    /// the directory's lock in the kernel, which the very request waiting may hold (a rename
    /// on this node); that request then meets ESTALE, and the kernel's retry, which lets the
    /// lock go first, finds the old entry gone. Says whether it is gone.
    async fn drop_entry(&self, parent: u64, name: String) -> bool {
        let (done, dropped) = tokio::sync::oneshot::channel();
        self.invalidate(Invalidation::EntryThen(parent, name, done));
        matches!(tokio::time::timeout(MOVED_WAIT, dropped).await, Ok(Ok(())))
    }

    /// A directory's attributes told to the kernel less than `DIRECTORY_ATTR_WINDOW` ago. With
    /// permission checks in the kernel (`default_permissions`), it drops a directory's
    /// attributes after every create or unlink in it and asks again before the next one:
    /// answering that from here saves a round trip per create and per unlink. A directory's
    /// mode and owner change only through `setattr` (which forgets the entry here) or on
    /// another node (a notice forgets it); only its mtime may lag this node's own changes,
    /// by up to the window.
    /// Kept past the window (until a change or the kernel's forget drops them) for
    /// [`KernelCache::removed_directory`], not answered.
    pub(crate) fn directory(&self, ino: u64) -> Option<Attr> {
        if let Some(removed) = self.removed_directories.lock().unwrap().get(&ino) {
            return Some(removed.clone());
        }
        match self.directories.lock().unwrap().get(&ino) {
            Some((attr, at)) if at.elapsed() < self.ttl.min(DIRECTORY_ATTR_WINDOW) => Some(attr.clone()),
            _ => None,
        }
    }

    /// A name in directory `ino` changed under its delegation, answered here without its
    /// home: what is kept of its attributes follows (mtime and ctime now, the link count by
    /// `subdirs`, 2 + subdirectories, which `find` relies on), since its home learns of the
    /// change only when the delegation's log is written back.
    pub(crate) fn changed_under_delegation(&self, ino: u64, subdirs: i32) {
        if let Some((attr, _)) = self.directories.lock().unwrap().get_mut(&ino) {
            let now = Timestamp::now();
            attr.nlink = attr.nlink.saturating_add_signed(subdirs).max(2);
            attr.mtime = now;
            attr.ctime = now;
        }
    }

    /// A directory's attributes changed (a name in it through this mount, a setattr): what
    /// is kept of them goes, and the next getattr asks its home, exact at once.
    pub(crate) fn forget_directory(&self, ino: u64) {
        self.directories.lock().unwrap().remove(&ino);
    }

    /// Called at open with the attributes fresh from the file's home server: if they are not
    /// what the kernel was last told, drop its cached attributes, so that `stat` and reads
    /// (which stop at the size the kernel knows) see another node's published writes.
    pub(crate) fn revalidate(&self, fresh: &Attr) {
        let known = self.reported.lock().unwrap().get(&fresh.ino).copied();
        if known == Some((fresh.size, fresh.mtime, fresh.ctime)) {
            return;
        }
        if let Some(notifier) = self.notifier.get() {
            // Offset -1: attributes only; this open decides about the pages. Fails
            // harmlessly when the kernel has already forgotten the inode.
            let _ = notifier.inval_inode(fresh.ino, -1, 0);
        }
    }

    /// An unlinked inode reached by open: through a name the kernel cached while a rename or
    /// unlink on another node removed it (refuse with ESTALE, so the kernel looks the name
    /// up again and retries), or by reopening a descriptor of a deleted file (/proc/PID/fd),
    /// where the retry reaches the same inode without a lookup and is let through.
    pub(crate) fn refuse_once(&self, ino: u64) -> bool {
        let mut refused = self.refused.lock().unwrap();
        if refused.remove(&ino) {
            return false;
        }
        refused.insert(ino);
        true
    }

    /// The error for an inode that is gone or unlinked, reached through a name the kernel
    /// cached. ESTALE makes the kernel repeat the whole path walk once, looking every name up
    /// afresh. If that retry also meets a stale inode (the name was replaced again meanwhile),
    /// a second ESTALE would reach the program: it gets ENOENT, what an open racing a rename
    /// between its lookup and its open gets without any kernel cache.
    pub(crate) fn stale(&self, pid: u32) -> surge_client::Error {
        let mut told = self.told_stale.lock().unwrap();
        let now = Instant::now();
        told.retain(|_, at| now.duration_since(*at) < STALE_RETRY);
        if told.remove(&pid).is_some() {
            return ErrorCode::NotFound.into();
        }
        told.insert(pid, now);
        ErrorCode::Stale.into()
    }

    /// `pid`'s path walk is over: the next stale inode it meets is a new case.
    pub(crate) fn settled(&self, pid: u32) {
        self.told_stale.lock().unwrap().remove(&pid);
    }

    pub(crate) fn invalidate(&self, what: Invalidation) {
        if let Some(tx) = self.invalidations.get() {
            let _ = tx.send(what);
        }
    }

    /// [`KernelCache::attr_changed`], the kernel told before this returns rather than by the
    /// invalidation thread: for a change the request being answered made and its caller may
    /// look at next (set-id bits a write dropped: `stat -c %a` asks for the mode alone,
    /// which the kernel's own invalidation after a write leaves cached). Attributes only:
    /// that takes no lock in the kernel, so it may run while the kernel waits for the reply.
    pub(crate) fn attr_changed_now(&self, ino: u64) {
        self.changed();
        self.forget_attr(ino);
        match self.notifier.get() {
            Some(notifier) => _ = notifier.inval_inode(ino, -1, 0),
            None => self.invalidate(Invalidation::Attr(ino)),
        }
    }

    /// The attributes of `ino` changed elsewhere: nothing here may answer with the old ones.
    pub(crate) fn attr_changed(&self, ino: u64) {
        self.changed();
        self.forget_attr(ino);
        self.invalidate(Invalidation::Attr(ino));
    }

    /// Another node changed `ino` (or may have: its notices were lost): the kernel drops its
    /// attributes and its pages of the file at once, also under descriptors open here. (The
    /// mount does not let the kernel drop pages itself whenever it sees a new mtime, which
    /// would drop the pages this node just wrote; see the adapter's `init`.)
    pub(crate) fn changed_elsewhere(&self, ino: u64) {
        self.changed_elsewhere_then(ino, surge_client::Seen::none());
    }

    /// [`KernelCache::changed_elsewhere`], `seen` dropped once the kernel was told.
    pub(crate) fn changed_elsewhere_then(&self, ino: u64, seen: surge_client::Seen) {
        self.changed();
        self.forget_attr(ino);
        self.invalidate(Invalidation::Content(ino, seen));
    }

    fn forget_attr(&self, ino: u64) {
        self.attrs_changed_at[ino as usize % CHANGE_SLOTS].fetch_max(self.change_mark(), Ordering::SeqCst);
        self.absent_xattrs.lock().unwrap().remove(&ino);
        self.reported.lock().unwrap().remove(&ino);
        self.forget_pages(ino);
        self.forget_directory(ino);
    }
}

/// What the kernel must drop.
pub(crate) enum Invalidation {
    Attr(u64),
    /// Attributes and cached pages; the notice's acknowledgement, sent once they are dropped.
    Content(u64, surge_client::Seen),
    Entry(u64, String),
    /// An entry, and a word once it is dropped.
    EntryThen(u64, String, tokio::sync::oneshot::Sender<()>),
}

/// Turns the servers' change notices into kernel invalidations.
///
/// The daemon's own records are dropped on the connection's task, at once; the kernel is told
/// from a thread of its own, because invalidating an entry takes the directory's lock in the
/// kernel, which a request in that directory may hold while it waits for the very tasks that
/// would be blocked.
pub struct Invalidations {
    kernel: Arc<KernelCache>,
    delegations: Arc<Delegations>,
    reopens: Arc<Reopens>,
}

impl Invalidations {
    /// Starts the thread that sends invalidations through the session's notifier.
    pub(crate) fn start(kernel: Arc<KernelCache>, delegations: Arc<Delegations>, reopens: Arc<Reopens>) -> Invalidations {
        let (tx, rx) = std::sync::mpsc::channel::<Invalidation>();
        let _ = kernel.invalidations.set(tx);
        let notifier = kernel.notifier.clone();
        std::thread::Builder::new()
            .name("invalidate".into())
            .spawn(move || {
                for what in rx {
                    let Some(notifier) = notifier.get() else { continue };
                    // Errors say the kernel no longer holds the inode or name: nothing to drop.
                    let _ = match what {
                        // Offset -1: attributes only; whether the pages stay is the next open's
                        // question (KernelCache::open_pages).
                        Invalidation::Attr(ino) => notifier.inval_inode(ino, -1, 0),
                        // Offset 0, length 0: every page too.
                        Invalidation::Content(ino, seen) => {
                            let dropped = notifier.inval_inode(ino, 0, 0);
                            drop(seen);
                            dropped
                        }
                        Invalidation::Entry(parent, name) => notifier.inval_entry(parent, OsStr::new(&name)),
                        Invalidation::EntryThen(parent, name, done) => {
                            let dropped = notifier.inval_entry(parent, OsStr::new(&name));
                            let _ = done.send(());
                            dropped
                        }
                    };
                }
            })
            .expect("start the invalidation thread");
        Invalidations { kernel, delegations, reopens }
    }
}

impl surge_client::Watcher for Invalidations {
    fn notice(&self, notice: Notice, seen: surge_client::Seen) {
        match notice {
            Notice::Attr { ino } => {
                // Before the notice is acknowledged: no open is answered from what changed,
                // and the kernel holds neither the attributes nor the pages (the
                // acknowledgement goes once the kernel was told, from its thread).
                self.reopens.changed(ino);
                self.kernel.changed_elsewhere_then(ino, seen);
            }
            Notice::Entry { parent, name } => {
                self.kernel.changed();
                self.kernel.listings.changed_elsewhere(parent);
                self.kernel.invalidate(Invalidation::Entry(parent, name));
            }
            // Given back from a task: this is the connection's reader, which the write-back's
            // answers must come through.
            Notice::Recall { dir } => self.delegations.recall(dir),
            // Sent only to a watcher that keeps exactly (the mount keeps everything): its
            // names may be stale from now on all the same.
            Notice::Names { dir } => {
                self.kernel.changed();
                self.kernel.listings.changed_elsewhere(dir);
            }
        }
    }

    /// Notices from `server` may have been missed: drop every attribute homed there, and give
    /// back the delegations of directories homed there once it is back. Names
    /// the kernel holds in its directories stay until their time runs out; an open through one
    /// that went stale is still caught (see `open`).
    fn lost(&self, server: usize) {
        self.kernel.changed();
        self.delegations.home_lost(server);
        let homed_there = |ino: &u64| surge_client::surge_proto::ino::home(*ino) == server;
        self.kernel.listings.forget_where(|dir| homed_there(&dir));
        self.reopens.lost(server);
        let inos: Vec<u64> = self.kernel.reported.lock().unwrap().keys().copied().filter(homed_there).collect();
        for ino in inos {
            self.kernel.changed_elsewhere(ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(n: i64) -> ContentVersion {
        let at = Timestamp { secs: n, nanos: 0 };
        ContentVersion { size: 10, mtime: at, ctime: at }
    }

    /// Pages are kept only at the version they were taken at, carried over a publication
    /// only from the version before it, and dropped after anything else.
    #[test]
    fn pages_are_kept_only_at_their_own_version() {
        let cache = KernelCache::new(Duration::from_secs(1), 4096);
        assert!(!cache.open_pages(7, version(1)), "nothing held yet");
        assert!(cache.open_pages(7, version(1)));
        assert!(!cache.open_pages(7, version(2)), "changed elsewhere: dropped, now held at 2");
        cache.published_pages(7, Some((version(2), version(3))), true);
        assert!(cache.open_pages(7, version(3)), "our own publication carries the pages over");
        cache.published_pages(7, Some((version(5), version(6))), true);
        assert!(!cache.open_pages(7, version(6)), "someone else published between");
        // Two handles closing at once: the second publication's answer comes back first.
        cache.published_pages(7, Some((version(7), version(8))), true);
        cache.published_pages(7, Some((version(6), version(7))), true);
        assert!(cache.open_pages(7, version(8)), "both carried over, in their order");
        cache.published_pages(7, None, true);
        assert!(cache.open_pages(7, version(8)), "a clean close without a publication changes nothing");
        cache.published_pages(7, Some((version(8), version(9))), false);
        assert!(!cache.open_pages(7, version(9)), "a failed write: the pages may hold what the servers refused");
        cache.forgotten(7);
        assert!(!cache.open_pages(7, version(9)), "an inode the kernel forgot has no pages");
    }
}
