//! The namespace share on disk, so that a server restarted on its directory (after a clean
//! stop or a kill -9) comes back with it.
//!
//! The store in memory stays the one every request reads and changes. After each namespace
//! step its changes ([`crate::Record`]) are appended here, under the metadata lock, so
//! records are in the order of the steps, and written to the journal file at once (one
//! `write`, into the page cache): a server killed, even with -9, right after answering a
//! step has it in its journal. A flusher thread makes what was written durable
//! (`fdatasync`) in one go: a group commit, whose cost is shared by every step that came in
//! while the previous group was being synced. A step that must be durable before it is
//! answered (a close or fsync publishing a file's size, a step another server builds on)
//! waits for its record's group ([`Journal::durable`]); others are answered at once and are
//! durable a moment later: only the node's own crash (power, kernel) can lose them, and then
//! whole. A record the disk refuses (full, failing) is cut back off the journal and written
//! again by the flusher, with every record after it, in order; the steps waiting for it are
//! answered EIO rather than left waiting, as are those still waiting when the journal closes.
//!
//! Files in `<root>/meta`: `snapshot` (everything, as a few records: one would not fit a
//! frame's length once inodes hold large attributes) and `journal` (the records after it).
//! Each record is framed `length (u32) | checksum (first 8 bytes of BLAKE3) | postcard`: a
//! record cut short by a crash fails its checksum and ends the replay. At open
//! the snapshot and the journal are replayed, then written as a new snapshot and the journal
//! emptied; the same happens at a clean stop, and when the journal grows past
//! [`SNAPSHOT_AFTER`].
//!
//! `format` names the records' layout ([`FORMAT`]). A directory of a layout this build does
//! not know, or a record that is whole (its checksum holds) yet does not read, stops the
//! server with an error rather than being replayed in part: folding a partial replay into a
//! new snapshot would lose the rest for good. Only the journal's last record may be cut short (a crash in
//! the middle of its write); the snapshot is always whole (written aside, then renamed).
//!
//! A directory of an earlier format (one with records and no marker is format 1) is read
//! through that format's frozen types ([`crate::formats`]) and rewritten in this build's
//! format at once; a crash at any point of the rewrite leaves either the earlier format whole
//! or the new snapshot, which the next start puts in place before it replays anything. How:
//! docs/architecture.md, "The namespace journal on disk".

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Poll, Waker};

use serde::de::DeserializeOwned;
use serde::Serialize;

use surge_proto::ErrorCode;

use crate::error::{Result, ServerError};
use crate::formats::{format1, format2, format3, format4};
use crate::poison_free::LockRecover;
use crate::{MetaStore, Record};

/// Who is told what the journal writes, in the order it writes it (the server's mirror, which
/// sends the same bytes to the share's copy). Called with the journal file's lock held, so
/// that the calls come in the order the bytes are in the files.
pub trait Observer: Send + Sync {
    /// `bytes` were written at byte `at` of the journal file; they hold the records up to
    /// number `seq`.
    fn journal_written(&self, at: u64, bytes: Vec<u8>, seq: u64);
    /// The journal was folded: `bytes` are the new snapshot, holding the records up to number
    /// `seq`; the journal is empty after it.
    fn snapshot_written(&self, bytes: Vec<u8>, seq: u64);
}

/// Nobody observes: a share without a mirror (tests, tools).
impl Observer for () {
    fn journal_written(&self, _at: u64, _bytes: Vec<u8>, _seq: u64) {}
    fn snapshot_written(&self, _bytes: Vec<u8>, _seq: u64) {}
}

/// A journal this long is folded into a new snapshot.
pub const SNAPSHOT_AFTER: u64 = 64 << 20;

/// What [`Journal::append`] tells the caller, read under one lock.
pub struct Appended {
    /// The record's sequence number, for [`Journal::durable`].
    pub seq: u64,
    /// The journal has grown past [`SNAPSHOT_AFTER`]: fold it into a snapshot
    /// ([`Journal::fold`]).
    pub fold_due: bool,
}

/// Written records are synced at least this often, and at once when someone waits for them
/// or [`FLUSH_BYTES`] of them have accumulated: waking the flusher for every record costs a thread switch
/// per metadata step (creates through a mount measured 30-40% slower with a 5 ms period,
/// within 20% with 50 ms). What is not waited for may be lost for this long in a crash of
/// the node, whole.
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
const FLUSH_BYTES: usize = 64 << 10;
/// A step waiting for its record syncs the journal itself, when no group is being synced,
/// while syncs take less than this on average: on the devices a burst buffer keeps its
/// metadata on (RAM, NVMe) a sync costs microseconds, and waking the flusher and being woken
/// by it two thread switches (in a VM, tens of microseconds per durable step). Slower syncs
/// go to the flusher, so that a runtime thread is never held for a disk's milliseconds.
const INLINE_SYNC_BELOW: std::time::Duration = std::time::Duration::from_micros(200);

/// How long the flusher waits before writing records again after the journal could not be
/// written (a full or failing metadata disk).
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// What one sync of the journal did ([`Journal::sync_group`]).
struct Synced {
    /// Everything written before it is durable; false when the disk refused a write or the
    /// sync (tried again by the flusher).
    done: bool,
    /// The journal is closing.
    stopping: bool,
}

/// The journal file's end, as appends write it.
struct Pending {
    /// The journal file (opened to append), written by [`Journal::append`].
    writer: File,
    /// Sequence number of the last record appended.
    appended: u64,
    /// Sequence number of the last record in the file (the ones after it are `unwritten`).
    written: u64,
    /// Bytes the journal file holds.
    journal_len: u64,
    /// The bytes written since the flusher last took them (the journal's last ones), for it
    /// to sync and hand to the observer.
    unsynced: Vec<u8>,
    /// Records after a write the disk refused, framed, in order: the flusher writes them.
    unwritten: Vec<u8>,
    /// Somebody waits for what is written to be durable: sync it now.
    waited: bool,
    /// The flusher's clock runs for a group: records appended meanwhile need not wake it
    /// (a step that synced inline may have emptied the group; see [`Journal::durable`]).
    grouping: bool,
    stopping: bool,
}

impl Pending {
    /// Whether the flusher has anything to do: records to sync, or to write again.
    fn holds_records(&self) -> bool {
        !self.unsynced.is_empty() || !self.unwritten.is_empty()
    }
}

/// How far the journal got, for the steps waiting on it.
#[derive(Clone, Copy, Default)]
struct Progress {
    /// Every record up to this one is durable.
    durable: u64,
    /// The last record of a group that could not be written: those of it are not durable
    /// (unless a later snapshot holds them).
    failed: u64,
    /// The journal was closed: nothing appended after it will be written.
    closed: bool,
}

impl Progress {
    /// Whether record `seq` is durable (Ok), never will be (Err), or may be later (None).
    fn of(&self, seq: u64) -> Option<Result<()>> {
        if self.durable >= seq {
            Some(Ok(()))
        } else if self.failed >= seq {
            Some(Err(ServerError::new(
                ErrorCode::Io,
                "the metadata journal could not be written (see the server's log): the change may be lost",
            )))
        } else if self.closed {
            Some(Err(ServerError::new(ErrorCode::ServerDown, "the server stopped before the change was durable")))
        } else {
            None
        }
    }
}

/// [`Progress`], and the steps waiting for it to change: each waits until its record's outcome
/// is known ([`Progress::of`]). A future of std's, woken from the flusher's thread: the
/// journal needs no async runtime, and works under whichever its caller runs.
#[derive(Default)]
struct Watched {
    state: Mutex<(Progress, Vec<Waker>)>,
}

/// Raises `value` to `to`; whether it rose.
fn raise(value: &mut u64, to: u64) -> bool {
    let rose = to > *value;
    *value = (*value).max(to);
    rose
}

impl Watched {
    fn get(&self) -> Progress {
        self.state.lock_or_recover().0
    }

    /// Changes the progress, and wakes the waiting steps when `change` says it moved.
    fn update(&self, change: impl FnOnce(&mut Progress) -> bool) {
        let woken = {
            let mut state = self.state.lock_or_recover();
            if !change(&mut state.0) {
                return;
            }
            std::mem::take(&mut state.1)
        };
        woken.into_iter().for_each(Waker::wake);
    }

    /// Completes with record `seq`'s outcome once it is known. (A waiter that goes away
    /// leaves its waker until the next change, which wakes it for nothing.)
    fn outcome(&self, seq: u64) -> impl Future<Output = Result<()>> + '_ {
        std::future::poll_fn(move |cx| {
            let mut state = self.state.lock_or_recover();
            if let Some(outcome) = state.0.of(seq) {
                return Poll::Ready(outcome);
            }
            if !state.1.iter().any(|waker| waker.will_wake(cx.waker())) {
                state.1.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

pub struct Journal {
    dir: PathBuf,
    pending: Mutex<Pending>,
    work: Condvar,
    /// The journal file; held by whoever writes it (the flusher, or a snapshot).
    file: Mutex<File>,
    /// How far the journal got.
    progress: Watched,
    /// Who is told what is written, under the file's lock: in the order it is written.
    observer: Arc<dyn Observer>,
    /// The recent syncs' average duration in nanoseconds (see [`INLINE_SYNC_BELOW`]).
    sync_nanos: std::sync::atomic::AtomicU64,
    /// Tests: every write fails, torn, as on a full disk.
    #[cfg(test)]
    fail_writes: std::sync::atomic::AtomicBool,
}

/// The bytes of a `snapshot` or `journal` file holding `records`, framed as the journal
/// writes them (tests and the fuzz target `journal` write metadata directories with it).
pub fn framed(records: &[impl Serialize]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for record in records {
        frame(record, &mut bytes);
    }
    bytes
}

fn frame(record: &impl Serialize, out: &mut Vec<u8>) {
    let payload = postcard::to_allocvec(record).expect("a record serializes");
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&blake3::hash(&payload).as_bytes()[..8]);
    out.extend_from_slice(&payload);
}

/// The layout of the records this build writes, kept in `meta/format`. Raise it when a
/// record's layout changes in a way older records cannot be read with (a new field; new enum
/// variants appended at the end read old records as before), and read the older layout
/// through types of its own (see the module notes).
pub const FORMAT: &str = "surge-meta 5";
/// Where an upgrade from an earlier format writes the new snapshot before the marker changes.
const NEXT_SNAPSHOT: &str = "snapshot.next";

/// The layout of a directory's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Current,
    /// Before files' data reach.
    Format4,
    /// Before publication logs.
    Format3,
    /// Before directory layouts.
    Format2,
    /// Before extended attributes.
    Format1,
}

impl Layout {
    const ALL: [Layout; 5] = [Layout::Current, Layout::Format4, Layout::Format3, Layout::Format2, Layout::Format1];

    fn marker(self) -> &'static str {
        match self {
            Layout::Current => FORMAT,
            Layout::Format4 => "surge-meta 4",
            Layout::Format3 => "surge-meta 3",
            Layout::Format2 => "surge-meta 2",
            Layout::Format1 => "surge-meta 1",
        }
    }
}

/// The records in `bytes` (the file `path`), in order. A record cut short or failing its
/// checksum ends them where a crash may leave one (`torn_tail_allowed`: the journal's end);
/// anywhere else, and for a whole record that does not read, the answer is an error.
fn records<R: DeserializeOwned>(bytes: &[u8], path: &Path, torn_tail_allowed: bool) -> io::Result<Vec<R>> {
    let damaged =
        |at: usize, what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{}: the record at byte {at} {what}", path.display()));
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let whole = bytes.get(at..at + 12).and_then(|head| {
            let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
            let payload = bytes.get(at + 12..at + 12 + len)?;
            (blake3::hash(payload).as_bytes()[..8] == head[4..12]).then_some(payload)
        });
        let Some(payload) = whole else {
            if torn_tail_allowed {
                break; // The last write before a crash.
            }
            return Err(damaged(at, "is cut short or damaged"));
        };
        let record = postcard::from_bytes(payload)
            .map_err(|e| damaged(at, &format!("is whole but does not read ({e}): written by another Surge version?")))?;
        out.push(record);
        at += 12 + payload.len();
    }
    Ok(out)
}

/// The records of the file `path` in `layout`, as this build's records.
fn read_records(path: &Path, torn_tail_allowed: bool, layout: Layout) -> io::Result<Vec<Record>> {
    let bytes = read_all(path)?;
    match layout {
        Layout::Current => records(&bytes, path, torn_tail_allowed),
        Layout::Format4 => Ok(records::<format4::Record>(&bytes, path, torn_tail_allowed)?.into_iter().map(Record::from).collect()),
        Layout::Format3 => Ok(records::<format3::Record>(&bytes, path, torn_tail_allowed)?.into_iter().map(Record::from).collect()),
        Layout::Format2 => Ok(records::<format2::Record>(&bytes, path, torn_tail_allowed)?.into_iter().map(Record::from).collect()),
        Layout::Format1 => Ok(records::<format1::Record>(&bytes, path, torn_tail_allowed)?.into_iter().map(Record::from).collect()),
    }
}

/// The layout of `dir`'s records, by its format marker; a new directory gets the marker of
/// this build's. A directory with records and no marker predates the marker: format 1.
fn layout_of(dir: &Path) -> io::Result<Layout> {
    match std::fs::read_to_string(dir.join("format")) {
        Ok(found) => Layout::ALL.into_iter().find(|layout| layout.marker() == found.trim()).ok_or_else(|| {
            let known: Vec<String> = Layout::ALL.iter().map(|layout| format!("'{}'", layout.marker())).collect();
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: metadata in format '{}', this server reads {}: start it with the Surge version that wrote them",
                    dir.display(),
                    found.trim(),
                    known.join(", ")
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let holds_records = ["snapshot", "journal"].iter().any(|name| std::fs::metadata(dir.join(name)).is_ok_and(|m| m.len() > 0));
            if holds_records {
                return Ok(Layout::Format1);
            }
            write_marker(dir)?;
            Ok(Layout::Current)
        }
        Err(e) => Err(e),
    }
}

/// Marks `dir` as holding this build's format, in one step (written aside, then renamed).
fn write_marker(dir: &Path) -> io::Result<()> {
    let tmp = dir.join("format.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(format!("{FORMAT}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join("format"))?;
    File::open(dir)?.sync_all()
}

/// The end of an upgrade from an earlier format whose marker changed (see the module notes):
/// the journal's records, the older format's, are all in the new snapshot, which goes in place.
fn finish_upgrade(dir: &Path) -> io::Result<()> {
    let next = dir.join(NEXT_SNAPSHOT);
    if !next.exists() {
        return Ok(());
    }
    let journal = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("journal"))?;
    journal.set_len(0)?;
    journal.sync_all()?;
    std::fs::rename(&next, dir.join("snapshot"))?;
    File::open(dir)?.sync_all()
}

fn read_all(path: &Path) -> io::Result<Vec<u8>> {
    match File::open(path) {
        Ok(mut f) => {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            Ok(bytes)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

impl Journal {
    /// Replays `<root>/meta` into `store` (a fresh one), folds it into a new snapshot, and
    /// starts journaling. Returns the journal and the files that were unlinked while open
    /// before the stop (their data is to be purged).
    pub fn open(root: &Path, store: &mut MetaStore, observer: Arc<dyn Observer>) -> io::Result<(Arc<Journal>, Vec<surge_proto::Ino>)> {
        let dir = root.join("meta");
        std::fs::create_dir_all(&dir)?;
        let layout = layout_of(&dir)?;
        if layout == Layout::Current {
            finish_upgrade(&dir)?;
        }
        let mut replayed = 0;
        for (path, torn_tail_allowed) in [(dir.join("snapshot"), false), (dir.join("journal"), true)] {
            for record in read_records(&path, torn_tail_allowed, layout)? {
                store.apply(record).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
                replayed += 1;
            }
        }
        let orphans = store.settle();
        store.track_changes();
        let _ = store.take_changes();
        let file = OpenOptions::new().create(true).append(true).open(dir.join("journal"))?;
        let pending = Pending {
            writer: file.try_clone()?,
            appended: 0,
            written: 0,
            journal_len: 0,
            unsynced: Vec::new(),
            unwritten: Vec::new(),
            waited: false,
            grouping: false,
            stopping: false,
        };
        let journal = Arc::new(Journal {
            dir,
            pending: Mutex::new(pending),
            work: Condvar::new(),
            file: Mutex::new(file),
            progress: Watched::default(),
            observer,
            sync_nanos: Default::default(),
            #[cfg(test)]
            fail_writes: Default::default(),
        });
        match layout {
            Layout::Current => journal.fold(store)?,
            older => {
                journal.write_snapshot(store, NEXT_SNAPSHOT)?;
                write_marker(&journal.dir)?;
                finish_upgrade(&journal.dir)?;
                tracing::info!("metadata rewritten from {} to {FORMAT}", older.marker());
            }
        }
        if replayed > 0 {
            tracing::info!(records = replayed, orphans = orphans.len(), "namespace share replayed from the journal");
        }
        let flusher = journal.clone();
        std::thread::Builder::new().name("surge-journal".into()).spawn(move || flusher.flush_loop())?;
        Ok((journal, orphans))
    }

    /// Appends what a step changed. Call with the metadata lock held, so that records keep
    /// the order of the steps.
    pub fn append(&self, record: Record) -> Appended {
        let mut pending = self.pending.lock_or_recover();
        if !record.is_empty() {
            let mut bytes = Vec::new();
            frame(&record, &mut bytes);
            pending.appended += 1;
            let first = !pending.holds_records();
            if pending.unwritten.is_empty() {
                let seq = pending.appended;
                self.write_frames(&mut pending, bytes, seq);
            } else {
                // Behind records the disk refused: in their order, after them.
                pending.unwritten.extend_from_slice(&bytes);
            }
            // The first record of a group starts the flusher's clock; a full group ends it.
            if first && !pending.grouping || pending.unsynced.len() >= FLUSH_BYTES {
                self.work.notify_one();
            }
        }
        Appended { seq: pending.appended, fold_due: pending.journal_len > SNAPSHOT_AFTER }
    }

    /// Writes framed records, up to number `seq`, at the journal's end. What the disk refuses
    /// is cut back off the file (a torn record inside the journal would end every later
    /// replay there) and kept in `unwritten` for the flusher; the steps of those records are
    /// told now that they may be lost (EIO) rather than left waiting.
    fn write_frames(&self, pending: &mut Pending, bytes: Vec<u8>, seq: u64) {
        match self.write_bytes(&mut pending.writer, &bytes) {
            Ok(()) => {
                pending.journal_len += bytes.len() as u64;
                pending.written = seq;
                pending.unsynced.extend_from_slice(&bytes);
            }
            Err(e) => {
                let cut = pending.writer.set_len(pending.journal_len);
                pending.unwritten = bytes;
                self.progress.update(|progress| raise(&mut progress.failed, seq));
                match cut {
                    Ok(()) => tracing::error!("could not write the metadata journal: {e}; its changes are not durable yet, tried again"),
                    Err(cut) => tracing::error!(
                        "could not write the metadata journal ({e}) nor cut it back ({cut}): a restart may lose the changes after this point"
                    ),
                }
            }
        }
    }

    /// The sequence number of the last record appended.
    pub fn last_seq(&self) -> u64 {
        self.pending.lock_or_recover().appended
    }

    /// Completes once record `seq` (and every one before it) is durable; or fails once it
    /// cannot be (its write failed, or the journal was closed before it was written), rather
    /// than leave its step waiting for ever.
    pub async fn durable(&self, seq: u64) -> Result<()> {
        if self.progress.get().of(seq).is_none() && !self.sync_here() {
            let mut pending = self.pending.lock_or_recover();
            pending.waited = true;
            self.work.notify_one();
        }
        self.progress.outcome(seq).await
    }

    /// Syncs what is written on the caller's thread, if syncs are cheap
    /// ([`INLINE_SYNC_BELOW`]) and nobody else is syncing or folding: true when that made
    /// everything appended so far durable. False: leave it to the flusher.
    fn sync_here(&self) -> bool {
        if self.sync_nanos.load(std::sync::atomic::Ordering::Relaxed) >= INLINE_SYNC_BELOW.as_nanos() as u64 {
            return false;
        }
        let file = match self.file.try_lock() {
            Ok(file) => file,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        let synced = self.sync_group(file);
        synced.done
    }

    /// Writes what the disk refused before, syncs every written record and tells the observer
    /// and the waiting steps; `file` is the journal file's lock, taken before anything to sync
    /// is chosen (a fold, which takes the locks in the same order, then happens wholly before or
    /// after this sync, and the observer hears of the bytes in the order they are in the files).
    fn sync_group(&self, file: std::sync::MutexGuard<'_, File>) -> Synced {
        let (at, bytes, upto, refused, stopping) = {
            let mut pending = self.pending.lock_or_recover();
            if !pending.unwritten.is_empty() {
                let (bytes, seq) = (std::mem::take(&mut pending.unwritten), pending.appended);
                self.write_frames(&mut pending, bytes, seq);
            }
            let bytes = std::mem::take(&mut pending.unsynced);
            let at = pending.journal_len - bytes.len() as u64;
            (at, bytes, pending.written, !pending.unwritten.is_empty(), pending.stopping)
        };
        if bytes.is_empty() {
            return Synced { done: !refused, stopping };
        }
        let started = std::time::Instant::now();
        match file.sync_data() {
            Ok(()) => {
                self.sync_took(started.elapsed());
                self.observer.journal_written(at, bytes, upto);
                drop(file);
                self.progress.update(|progress| raise(&mut progress.durable, upto));
                Synced { done: !refused, stopping }
            }
            Err(e) => {
                // Synced again with the next group (a fold cannot come between: it takes the
                // file's lock, held here), so that the observer still gets every byte in
                // order; their steps are told now that they may be lost.
                {
                    let mut pending = self.pending.lock_or_recover();
                    let later = std::mem::replace(&mut pending.unsynced, bytes);
                    pending.unsynced.extend(later);
                }
                drop(file);
                self.progress.update(|progress| raise(&mut progress.failed, upto));
                tracing::error!("could not sync the metadata journal: {e}; tried again");
                Synced { done: false, stopping }
            }
        }
    }

    /// Keeps the recent syncs' average (each new one weighs an eighth).
    fn sync_took(&self, took: std::time::Duration) {
        let nanos = took.as_nanos().min(u64::MAX as u128) as u64;
        let average = &self.sync_nanos;
        let old = average.load(std::sync::atomic::Ordering::Relaxed);
        average.store(old - old / 8 + nanos / 8, std::sync::atomic::Ordering::Relaxed);
    }

    /// Tells the observer the snapshot and the journal as they are now, as if just written
    /// (a mirror filled anew starts from them; what is written after follows them in the
    /// files).
    pub fn note_whole(&self) {
        let _file = self.file.lock_or_recover();
        let read = |name: &str| read_all(&self.dir.join(name));
        match (read("snapshot"), read("journal")) {
            (Ok(snapshot), Ok(journal)) => {
                let seq = self.progress.get().durable;
                self.observer.snapshot_written(snapshot, seq);
                self.observer.journal_written(0, journal, seq);
            }
            (Err(e), _) | (_, Err(e)) => tracing::error!("could not read the metadata journal for the mirror: {e}"),
        }
    }

    /// Writes `store` (which must hold every appended change) as the new snapshot and empties
    /// the journal. Call with the metadata lock held.
    pub fn fold(&self, store: &MetaStore) -> io::Result<()> {
        let file = self.file.lock_or_recover();
        let appended = {
            let mut pending = self.pending.lock_or_recover();
            // In the snapshot.
            pending.unsynced.clear();
            pending.unwritten.clear();
            pending.journal_len = 0;
            pending.written = pending.appended;
            pending.appended
        };
        let snapshot = self.write_snapshot(store, "snapshot")?;
        // Only once the snapshot is in place: a crash before this leaves the old journal,
        // whose records re-applied over the new snapshot change nothing.
        file.set_len(0)?;
        file.sync_all()?;
        self.progress.update(|progress| raise(&mut progress.durable, appended));
        self.observer.snapshot_written(snapshot, appended);
        Ok(())
    }

    /// Writes `store` to the file `name` in one step (written aside, then renamed): it is
    /// there whole or not at all. A few records, each small enough for its frame. Returns
    /// the bytes written.
    fn write_snapshot(&self, store: &MetaStore, name: &str) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        for piece in store.snapshot().split() {
            frame(&piece, &mut bytes);
        }
        let tmp = self.dir.join("snapshot.tmp");
        let mut snapshot = File::create(&tmp)?;
        snapshot.write_all(&bytes)?;
        snapshot.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(name))?;
        File::open(&self.dir)?.sync_all()?;
        Ok(bytes)
    }

    fn flush_loop(&self) {
        loop {
            {
                let mut pending = self.pending.lock_or_recover();
                while !pending.holds_records() && !pending.stopping {
                    pending = self.work.wait(pending).unwrap_or_else(|p| p.into_inner());
                }
                // A group: until the period is over, or somebody waits, or enough accumulated.
                pending.grouping = true;
                let deadline = std::time::Instant::now() + FLUSH_EVERY;
                while !pending.waited && !pending.stopping && pending.unsynced.len() < FLUSH_BYTES {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    pending = self.work.wait_timeout(pending, left).map(|(p, _)| p).unwrap_or_else(|p| p.into_inner().0);
                }
                pending.waited = false;
                pending.grouping = false;
                if !pending.holds_records() {
                    if pending.stopping {
                        return;
                    }
                    continue;
                }
            }
            let synced = self.sync_group(self.file.lock_or_recover());
            if !synced.done {
                if synced.stopping {
                    return; // The clean stop's snapshot holds them, or could not be written either.
                }
                std::thread::sleep(RETRY_AFTER);
            }
        }
    }

    /// Writes framed records at the journal's end (opened to append).
    fn write_bytes(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        #[cfg(test)]
        if self.fail_writes.load(std::sync::atomic::Ordering::Relaxed) {
            file.write_all(&bytes[..bytes.len() / 2])?; // Torn, as a full disk tears it.
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        file.write_all(bytes)
    }

    /// A clean stop: everything appended is written, and folded into a snapshot.
    pub fn close(&self, store: &MetaStore) -> io::Result<()> {
        self.pending.lock_or_recover().stopping = true;
        self.work.notify_one();
        let folded = self.fold(store);
        // What the snapshot holds is durable; what comes after it never will be.
        self.progress.update(|progress| !std::mem::replace(&mut progress.closed, true));
        folded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::placement::DirLayout;
    use surge_proto::{FileKind, ROOT_INO};

    /// A journal opened on a fresh directory, for test `test`: the directory, its store and
    /// the journal.
    fn fresh_journal(test: &str) -> (std::path::PathBuf, MetaStore, Arc<Journal>) {
        let root = std::env::temp_dir().join(format!("surge-journal-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut store = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root, &mut store, Arc::new(())).unwrap();
        (root, store, journal)
    }

    /// Creates file `name` in the root of `store` and appends the change to `journal`: the
    /// record's number.
    fn create_appended(journal: &Journal, store: &mut MetaStore, name: &str) -> u64 {
        store.create(ROOT_INO, name, 0o644, 0, 0, 0, true, false, None).unwrap();
        journal.append(store.take_changes()).seq
    }

    #[test]
    fn a_record_cut_short_ends_the_journal_and_the_ones_before_survive() {
        let path = Path::new("journal");
        let mut bytes = Vec::new();
        let one = Record { next_local: 5, ..Record::default() };
        let two = Record { next_local: 9, ..Record::default() };
        frame(&one, &mut bytes);
        frame(&two, &mut bytes);
        assert_eq!(records::<Record>(&bytes, path, true).unwrap(), vec![one.clone(), two]);
        bytes.truncate(bytes.len() - 1);
        assert_eq!(records::<Record>(&bytes, path, true).unwrap(), vec![one.clone()], "a torn last record is dropped");
        let n = bytes.len();
        bytes[n - 3] ^= 0xff;
        assert_eq!(records::<Record>(&bytes, path, true).unwrap(), vec![one], "a damaged last record too");
        let err = records::<Record>(&bytes, Path::new("snapshot"), false).unwrap_err();
        assert!(err.to_string().contains("cut short or damaged"), "a snapshot is whole or refused: {err}");
    }

    /// A record whose checksum holds but whose layout this build does not know (another
    /// version wrote it) stops the replay with an error: replaying the records before it and
    /// folding them into a snapshot would lose the rest for good.
    #[test]
    fn a_whole_record_that_does_not_read_is_an_error_not_an_end() {
        let mut bytes = Vec::new();
        frame(&Record { next_local: 5, ..Record::default() }, &mut bytes);
        let unreadable = [0xffu8; 16];
        bytes.extend_from_slice(&(unreadable.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&blake3::hash(&unreadable).as_bytes()[..8]);
        bytes.extend_from_slice(&unreadable);
        let err = records::<Record>(&bytes, Path::new("journal"), true).unwrap_err();
        assert!(err.to_string().contains("another Surge version"), "{err}");
    }

    #[test]
    fn metadata_of_another_format_is_refused() {
        let root = std::env::temp_dir().join(format!("surge-format-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("meta")).unwrap();
        std::fs::write(root.join("meta/format"), "surge-meta 99\n").unwrap();
        let err = Journal::open(&root, &mut MetaStore::new(0, 0, 0), Arc::new(())).err().expect("refused");
        assert!(err.to_string().contains("surge-meta 99"), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A scratch root of a test's own, removed when dropped.
    struct Root(std::path::PathBuf);

    impl Root {
        fn new(test: &str) -> Root {
            let root = std::env::temp_dir().join(format!("surge-journal-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("meta")).unwrap();
            Root(root)
        }

        fn meta(&self, name: &str) -> std::path::PathBuf {
            self.0.join("meta").join(name)
        }

        /// A directory an older release left: its format marker, a snapshot and a journal of
        /// one record each, in that release's layout.
        fn written_by(&self, marker: &str, snapshot: impl Serialize, journal: impl Serialize) {
            std::fs::write(self.meta("format"), format!("{marker}\n")).unwrap();
            std::fs::write(self.meta("snapshot"), framed(&[snapshot])).unwrap();
            std::fs::write(self.meta("journal"), framed(&[journal])).unwrap();
        }
    }

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A record as format 1 wrote it (the same, less the attributes).
    fn format1(record: Record) -> format1::Record {
        assert!(record.xattrs.is_empty(), "format 1 had no attributes");
        let old = format2::Record::from(record);
        format1::Record { next_local: old.next_local, inodes: old.inodes, removed: old.removed, entries: old.entries }
    }

    /// A directory the release before extended attributes wrote (format 1's marker, its
    /// snapshot and journal records) comes back whole, and is rewritten as format 2 at once:
    /// the next start reads it as such, with an attribute set meanwhile.
    #[test]
    fn a_format_1_directory_comes_back_and_is_rewritten_as_format_2() {
        let root = Root::new("format1");
        let mut old = MetaStore::new(0, 0, 0);
        let dir = old.make_dir_inode(ROOT_INO, 0o750, 0, 7, 7, None, DirLayout::Striped, None, None).unwrap();
        old.insert_entry(ROOT_INO, "dir", dir.ino, FileKind::Dir, false, None).unwrap();
        let snapshot = format1(old.snapshot());
        old.track_changes();
        let file = old.create(dir.ino, "file", 0o640, 0, 7, 7, true, false, None).unwrap();
        let journal = format1(old.take_changes());
        root.written_by("surge-meta 1", snapshot, journal);

        let mut store = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut store, Arc::new(())).unwrap();
        assert_eq!(store.lookup(ROOT_INO, "dir").unwrap().attr.unwrap().mode, 0o750);
        assert_eq!(store.lookup(dir.ino, "file").unwrap().ino, file.ino, "the journal's record too");
        assert_eq!(std::fs::read_to_string(root.meta("format")).unwrap().trim(), FORMAT);
        assert_eq!(std::fs::metadata(root.meta("journal")).unwrap().len(), 0, "format 1's records are all in the snapshot");
        assert!(!root.meta(NEXT_SNAPSHOT).exists());
        store.set_xattr(file.ino, "user.new", b"v".to_vec(), surge_proto::XattrSetMode::Either).unwrap();
        journal.close(&store).unwrap();

        let mut again = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut again, Arc::new(())).unwrap();
        assert_eq!(again.lookup(dir.ino, "file").unwrap().ino, file.ino);
        assert_eq!(again.get_xattr(file.ino, "user.new").unwrap(), b"v");
        journal.close(&again).unwrap();
    }

    /// A directory the release before files' data reach wrote (format 4) comes back whole
    /// (each file reaching as far as its size) and is rewritten in this format, which then
    /// keeps how far a file's data reaches past its size across a restart.
    #[test]
    fn a_format_4_directory_is_rewritten_and_then_keeps_the_data_reach() {
        let root = Root::new("format4");
        let mut old = MetaStore::new(0, 0, 0);
        old.track_changes();
        let file = old.create(ROOT_INO, "file", 0o644, 0, 0, 0, true, true, None).unwrap();
        old.commit(file.ino, Some(4096), None, false, true).unwrap();
        let record = old.take_changes();
        root.written_by("surge-meta 4", format4::Record::from(MetaStore::new(0, 0, 0).snapshot()), format4::Record::from(record));

        let mut store = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut store, Arc::new(())).unwrap();
        assert_eq!(store.getattr(file.ino).unwrap().size, 4096);
        assert_eq!(std::fs::read_to_string(root.meta("format")).unwrap().trim(), FORMAT);
        store.setattr(file.ino, &surge_proto::AttrChanges { size: Some(0), ..Default::default() }).unwrap();
        journal.append(store.take_changes());
        journal.close(&store).unwrap();

        let mut again = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut again, Arc::new(())).unwrap();
        assert_eq!(again.unlink(ROOT_INO, "file").unwrap().size, 4096, "the size before the truncation, kept across the restart");
        journal.close(&again).unwrap();
    }

    /// A directory the release before publication logs wrote (format 3) comes back whole,
    /// is rewritten in this format, and then keeps what its directories publish across restarts.
    #[test]
    fn a_format_3_directory_is_rewritten_and_then_keeps_its_publications() {
        let root = Root::new("format3");
        let mut old = MetaStore::new(0, 0, 0);
        old.track_changes();
        let kept = old.create(ROOT_INO, "kept", 0o644, 0, 0, 0, true, true, None).unwrap();
        let record = old.take_changes();
        root.written_by("surge-meta 3", format3::Record::from(MetaStore::new(0, 0, 0).snapshot()), format3::Record::from(record));

        let mut store = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut store, Arc::new(())).unwrap();
        assert_eq!(store.lookup(ROOT_INO, "kept").unwrap().ino, kept.ino);
        assert_eq!(std::fs::read_to_string(root.meta("format")).unwrap().trim(), FORMAT);
        // The replayed name is what a close publishes under.
        store.open(kept.ino).unwrap();
        store.commit(kept.ino, Some(5), None, true, true).unwrap();
        journal.append(store.take_changes());
        journal.close(&store).unwrap();

        let mut again = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut again, Arc::new(())).unwrap();
        let everything = crate::workflow::publications::NamePattern::default();
        let page = again.publications(ROOT_INO, 0, 10, &everything).unwrap();
        assert_eq!(page.publications.len(), 1);
        assert_eq!((page.publications[0].name.as_str(), page.publications[0].size), ("kept", Some(5)));
        journal.close(&again).unwrap();
    }

    /// A directory the release before layouts wrote (format 2) comes back with its
    /// attributes, every directory striped, and takes a layout once rewritten as format 3.
    #[test]
    fn a_format_2_directory_comes_back_striped_and_is_rewritten() {
        let root = Root::new("format2");
        let mut old = MetaStore::new(0, 0, 0);
        old.track_changes();
        let dir = old.make_dir_inode(ROOT_INO, 0o750, 0, 7, 7, None, DirLayout::Striped, None, None).unwrap();
        old.insert_entry(ROOT_INO, "dir", dir.ino, FileKind::Dir, false, None).unwrap();
        old.set_xattr(dir.ino, "user.kept", b"yes".to_vec(), surge_proto::XattrSetMode::Either).unwrap();
        root.written_by(
            "surge-meta 2",
            format2::Record::from(MetaStore::new(0, 0, 0).snapshot()),
            format2::Record::from(old.take_changes()),
        );

        let mut store = MetaStore::with_root_layout(0, 0, 0, DirLayout::NodeLocal);
        let (journal, _) = Journal::open(&root.0, &mut store, Arc::new(())).unwrap();
        assert_eq!(store.get_xattr(dir.ino, "user.kept").unwrap(), b"yes");
        assert_eq!(store.layout_of(dir.ino).unwrap(), DirLayout::Striped);
        assert_eq!(store.layout_of(ROOT_INO).unwrap(), DirLayout::Striped, "the replayed root, not a fresh one's default");
        assert_eq!(std::fs::read_to_string(root.meta("format")).unwrap().trim(), FORMAT);
        store.set_layout(dir.ino, DirLayout::NodeLocal).unwrap();
        journal.append(store.take_changes());
        journal.close(&store).unwrap();

        let mut again = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut again, Arc::new(())).unwrap();
        assert_eq!(again.layout_of(dir.ino).unwrap(), DirLayout::NodeLocal);
        journal.close(&again).unwrap();
    }

    /// Records and no marker: a directory from before the marker, format 1.
    #[test]
    fn a_directory_without_marker_is_format_1() {
        let root = Root::new("unmarked");
        let mut old = MetaStore::new(0, 0, 0);
        old.create(ROOT_INO, "kept", 0o644, 0, 0, 0, true, false, None).unwrap();
        std::fs::write(root.meta("snapshot"), framed(&[format1(old.snapshot())])).unwrap();
        let mut store = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut store, Arc::new(())).unwrap();
        assert!(store.lookup(ROOT_INO, "kept").is_ok());
        assert_eq!(std::fs::read_to_string(root.meta("format")).unwrap().trim(), FORMAT);
        journal.close(&store).unwrap();
    }

    /// An upgrade that crashed after its marker changed: the new snapshot waits aside and the
    /// journal still holds format 1's records (which do not read as format 2's). The next
    /// start puts the snapshot in place and drops them.
    #[test]
    fn an_upgrade_cut_short_after_its_marker_is_finished_at_the_next_start() {
        let root = Root::new("upgrade-cut");
        let mut old = MetaStore::new(0, 0, 0);
        old.create(ROOT_INO, "kept", 0o644, 0, 0, 0, true, false, None).unwrap();
        std::fs::write(root.meta("format"), format!("{FORMAT}\n")).unwrap();
        std::fs::write(root.meta(NEXT_SNAPSHOT), framed(&[old.snapshot()])).unwrap();
        std::fs::write(root.meta("snapshot"), framed(&[format1(MetaStore::new(0, 0, 0).snapshot())])).unwrap();
        old.track_changes();
        old.create(ROOT_INO, "also", 0o644, 0, 0, 0, true, false, None).unwrap();
        std::fs::write(root.meta("journal"), framed(&[format1(old.take_changes())])).unwrap();
        let mut store = MetaStore::new(0, 0, 0);
        let (journal, _) = Journal::open(&root.0, &mut store, Arc::new(())).unwrap();
        assert!(store.lookup(ROOT_INO, "kept").is_ok(), "the new snapshot is in place");
        assert!(!root.meta(NEXT_SNAPSHOT).exists());
        journal.close(&store).unwrap();
    }

    /// A group the disk refused (torn, as a full disk leaves it) fails its steps at once
    /// instead of leaving them waiting; what was written of it is cut, and its records are
    /// written again once the disk takes them, so the journal after a crash holds them and
    /// every later record (a torn record inside it would end the replay there).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_group_the_disk_refused_is_written_again_whole() {
        let (root, mut store, journal) = fresh_journal("refused");
        let create = |store: &mut MetaStore, name: &str| create_appended(&journal, store, name);
        let first = create(&mut store, "before");
        journal.durable(first).await.unwrap();

        journal.fail_writes.store(true, std::sync::atomic::Ordering::Relaxed);
        let refused = create(&mut store, "refused");
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), journal.durable(refused)).await;
        assert_eq!(outcome.expect("answered, not left waiting").unwrap_err().code, ErrorCode::Io);

        journal.fail_writes.store(false, std::sync::atomic::Ordering::Relaxed);
        let after = create(&mut store, "after");
        journal.durable(after).await.unwrap();
        // A crash: no clean stop, the journal as written.
        let mut again = MetaStore::new(0, 0, 0);
        let (journal2, _) = Journal::open(&root, &mut again, Arc::new(())).unwrap();
        for name in ["before", "refused", "after"] {
            assert!(again.lookup(ROOT_INO, name).is_ok(), "'{name}' lost");
        }
        journal2.close(&again).unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A step waiting for its record is woken from another thread once the record's outcome
    /// is known, not before: not by progress short of it, nor by a change that moves nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_step_is_woken_when_its_record_is_durable() {
        let watched = Arc::new(Watched::default());
        let waiter = tokio::spawn({
            let watched = watched.clone();
            async move { watched.outcome(3).await }
        });
        let pause = || std::thread::sleep(std::time::Duration::from_millis(20));
        std::thread::spawn({
            let watched = watched.clone();
            move || {
                pause();
                watched.update(|progress| raise(&mut progress.durable, 2));
                pause();
                watched.update(|progress| raise(&mut progress.durable, 1));
            }
        })
        .join()
        .unwrap();
        assert!(!waiter.is_finished(), "answered before its record was durable");
        std::thread::spawn(move || watched.update(|progress| raise(&mut progress.durable, 3))).join().unwrap();
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("woken");
        assert!(outcome.unwrap().is_ok());
    }

    /// A step waiting for its record syncs the journal itself while syncs are cheap and
    /// nobody else syncs; otherwise (slow syncs, or the file's lock held by a sync or fold
    /// under way) the flusher does, also when the record came in while the flusher's clock
    /// ran for a group that an inline sync emptied (no wake-up is lost to that).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_step_syncs_itself_only_when_syncs_are_cheap_and_nobody_else_syncs() {
        use std::sync::atomic::Ordering::Relaxed;
        let (root, mut store, journal) = fresh_journal("inline");
        let create = |store: &mut MetaStore, name: &str| create_appended(&journal, store, name);
        let in_time = |seq| tokio::time::timeout(std::time::Duration::from_secs(5), journal.durable(seq));

        // Cheap syncs: the record is durable once the step's own sync returns.
        let cheap = create(&mut store, "cheap");
        assert!(journal.sync_here(), "not synced inline although syncs are cheap");
        assert!(journal.progress.get().durable >= cheap);

        // Somebody holds the file (a sync or a fold): not inline; the flusher does it.
        let held = journal.file.lock().unwrap();
        let behind_a_sync = create(&mut store, "behind a sync");
        assert!(!journal.sync_here(), "synced inline while another sync held the file");
        drop(held);
        in_time(behind_a_sync).await.expect("made durable by the flusher").unwrap();

        // Slow syncs: left to the flusher, whose group clock may be running already.
        journal.sync_nanos.store(INLINE_SYNC_BELOW.as_nanos() as u64 * 10, Relaxed);
        let first_of_group = create(&mut store, "first of a group");
        let slow = create(&mut store, "slow");
        assert!(!journal.sync_here(), "synced inline although syncs are slow");
        in_time(slow).await.expect("made durable by the flusher").unwrap();
        assert!(journal.progress.get().durable >= first_of_group);
        journal.close(&store).unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A step's records are in the journal file once appended, before any sync: a server
    /// killed (-9) right after answering a step that did not wait comes back with it.
    #[test]
    fn an_appended_step_is_in_the_journal_before_it_is_synced() {
        let (root, mut store, journal) = fresh_journal("written");
        let file = store.create(ROOT_INO, "answered", 0o644, 0, 0, 0, true, false, None).unwrap();
        journal.append(store.take_changes());
        // The process's end as a kill leaves it: the file as written, no sync, no stop.
        let mut again = MetaStore::new(0, 0, 0);
        let (journal2, _) = Journal::open(&root, &mut again, Arc::new(())).unwrap();
        assert_eq!(again.lookup(ROOT_INO, "answered").unwrap().ino, file.ino);
        journal2.close(&again).unwrap();
        drop((journal, journal2));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_comes_back_from_its_journal() {
        let (root, mut store, journal) = fresh_journal("test");
        let file = store.create(ROOT_INO, "kept", 0o644, 0, 0, 0, true, false, None).unwrap();
        let seq = journal.append(store.take_changes()).seq;
        journal.durable(seq).await.unwrap();
        // A crash: no clean stop, the journal as written.
        let mut again = MetaStore::new(0, 0, 0);
        let (journal2, _) = Journal::open(&root, &mut again, Arc::new(())).unwrap();
        assert_eq!(again.lookup(ROOT_INO, "kept").unwrap().ino, file.ino);
        assert_eq!(again.lookup(ROOT_INO, "kept").unwrap().kind, FileKind::File);
        journal2.close(&again).unwrap();
        drop((journal, journal2));
        let _ = std::fs::remove_dir_all(&root);
    }
}
