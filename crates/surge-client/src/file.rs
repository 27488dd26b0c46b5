//! Open files: striped reads and writes, publication of size and mtime, and the two streaming
//! aids that keep every server busy for a single sequential stream:
//!
//! * **write-behind** ([`File::set_write_behind`]): `pwrite` returns once its chunks are sent,
//!   with up to `window` bytes unacknowledged; a failure is reported by a later `pwrite`, or at
//!   the latest by `fsync` / `close`, which wait for everything (as NFS does) — and by every
//!   call after it: the handle's data has a hole its writer was told was filled, so nothing
//!   written, synced or closed through it may look whole again (a caller that continues where
//!   a short write left off, or a second descriptor closed first, would hide it). Off by
//!   default: plain `pwrite` reports its own errors.
//! * **read-ahead** ([`File::set_read_ahead`]): when reads are sequential, the chunks after the
//!   current request are requested before they are asked for.
//!
//! And one that skips the network: **local I/O** (the `local` module). Chunks held by a server on
//! this node are read and written in that server's data file directly.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use surge_proto::data::{LocalWritten, Read, ReserveLocal, SyncData, Write};
use surge_proto::namespace::{Append, Commit};
use surge_proto::ticket::Ticket;
use surge_proto::{Attr, AttrChanges, ContentVersion, Ino, InodeFate, Request, Timestamp};

use crate::conn::Pending;
use crate::error::Result;
use crate::local::LocalFiles;
use crate::Client;

/// Writes sent but not yet acknowledged (write-behind).
#[derive(Default)]
struct WriteBehind {
    window: u64,
    queued_bytes: u64,
    queue: VecDeque<InFlight>,
    /// Writes in `queue` by server index, sent over the network and handed to the local writer.
    /// A server's bytes must never be written both ways at once: one could overtake the other.
    sent: Vec<u32>,
    local: Vec<u32>,
    /// Write calls begun on the handle; each write in `queue` carries the number of its call.
    calls: u64,
}

/// A write sent to a server, or handed to the local writer.
struct InFlight {
    len: u64,
    pending: Pending,
    server: usize,
    local: bool,
    /// The write call it is part of (see [`WriteBehind::begin_call`]).
    call: u64,
}

impl WriteBehind {
    fn counts(&mut self, local: bool) -> &mut Vec<u32> {
        if local {
            &mut self.local
        } else {
            &mut self.sent
        }
    }

    /// Numbers a new write call: what it pushes is told apart from the writes of calls already
    /// answered, whose failure the caller has not seen.
    fn begin_call(&mut self) -> u64 {
        self.calls += 1;
        self.calls
    }

    /// Queues a write of the call begun last.
    fn push(&mut self, server: usize, len: u64, pending: Pending, local: bool) {
        let counts = self.counts(local);
        if counts.len() <= server {
            counts.resize(server + 1, 0);
        }
        counts[server] += 1;
        self.queue.push_back(InFlight { len, pending, server, local, call: self.calls });
        self.queued_bytes += len;
    }

    fn pop(&mut self) -> Option<InFlight> {
        let done = self.queue.pop_front()?;
        self.queued_bytes -= done.len;
        self.counts(done.local)[done.server] -= 1;
        Some(done)
    }

    /// Some write to one of `servers` is in flight the other way than `local`.
    fn crossing(&self, servers: impl IntoIterator<Item = usize>, local: bool) -> bool {
        let other = if local { &self.sent } else { &self.local };
        servers.into_iter().any(|s| other.get(s).is_some_and(|&n| n > 0))
    }
}

/// Chunk reads requested ahead of a sequential reader.
#[derive(Default)]
struct ReadAhead {
    window: u64,
    /// Where the next sequential read is expected to start.
    expected: u64,
    /// Offset up to which chunks have been requested.
    requested_to: u64,
    queue: VecDeque<(u64, u64, Pending)>,
}

/// An open file. Writes go to the servers; size and mtime are published to the file's home
/// server at [`File::fsync`] and [`File::close`] (close-to-open consistency). Dropping a
/// `File` without `close` leaves its open handle registered until the connection ends.
pub struct File {
    client: Client,
    ino: Ino,
    /// Size seen at open, grown by our own writes: where reads stop.
    size: AtomicU64,
    /// Highest end offset written through this handle.
    written_end: AtomicU64,
    dirty: AtomicBool,
    /// Written since the last publication or since times were set explicitly: the next
    /// publication sets mtime to its own time.
    mtime_due: AtomicBool,
    /// The handle was opened for writing, or something written through it was published: its
    /// release publishes the file in its directory's log (close after writing).
    writer: AtomicBool,
    behind: tokio::sync::Mutex<WriteBehind>,
    ahead: tokio::sync::Mutex<ReadAhead>,
    /// The first write-behind failure: reported by every later write, fsync and close.
    write_failure: Mutex<Option<crate::Error>>,
    /// Attributes when the handle was opened.
    opened: Attr,
    /// The file's content version as the home last told this handle: at open, then after
    /// each truncation through it.
    version: Mutex<ContentVersion>,
    /// Data files of servers on this node, for local I/O.
    local: LocalFiles,
    /// What the data requests carry where servers check identities (see
    /// [`surge_proto::ticket`]).
    ticket: Option<Ticket>,
    /// Set when the kernel reads and writes the data file itself ([`crate::passthrough`]).
    pub(crate) passthrough: Mutex<Option<crate::passthrough::Passthrough>>,
    /// The file's content version before and after this handle's last publication (see
    /// [`File::take_publication`]).
    publication: Mutex<Option<(ContentVersion, ContentVersion)>>,
    /// Whether this handle's writes wait at a high-water mark, once known (see
    /// [`File::may_wait`]).
    may_wait: tokio::sync::OnceCell<bool>,
    /// The delegation the file was made under, while its home may not know the file yet
    /// (see [`Client::file_made_under`]); None once it does.
    made_under: Mutex<Option<std::sync::Arc<crate::DelegatedDir>>>,
    /// A read-only handle answered from a kept file ([`File::sharing`], [`File::split_kept`]):
    /// its release publishes nothing and waits for nothing ([`File::release_shared`]).
    shares_open: bool,
}

/// Local writes start once a handle has written this much: a small file stays one request per
/// write (a reservation and its report would cost two).
const LOCAL_WRITES_AFTER: u64 = 1 << 20;

impl File {
    pub(crate) fn new(client: Client, attr: &Attr, ticket: Option<Ticket>) -> File {
        File {
            local: LocalFiles::new(client.clone(), attr.ino),
            client,
            ino: attr.ino,
            size: AtomicU64::new(attr.size),
            written_end: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            mtime_due: AtomicBool::new(false),
            writer: AtomicBool::new(false),
            behind: Default::default(),
            ahead: Default::default(),
            write_failure: Mutex::new(None),
            opened: attr.clone(),
            version: Mutex::new(attr.content_version()),
            ticket,
            passthrough: Mutex::new(None),
            publication: Mutex::new(None),
            may_wait: tokio::sync::OnceCell::new(),
            made_under: Mutex::new(None),
            shares_open: false,
        }
    }

    /// What [`Client::open_ino_kept`] opened is two things: the file kept at its home, to
    /// answer later opens from ([`File::sharing`]; let go with [`File::release_kept`]), and
    /// one read-only handle, registered there by that open. Answers (kept, handle).
    pub fn split_kept(self) -> (File, File) {
        let handle = self.shared_handle();
        (self, handle)
    }

    /// Another read-only handle of this kept file, answered without waiting for its home:
    /// its open is registered there on the way (a request whose answer nobody waits for:
    /// the kept file holds the file and its data meanwhile), and it starts from the
    /// attributes the file was kept with. The caller vouches that they are still the file's
    /// (its home tells the keeper of every change before answering it) and keeps the file
    /// until the handle is released. None when the home is not connected now.
    pub fn sharing(&self) -> Option<File> {
        let conn = self.client.connection_now(surge_proto::ino::home(self.ino))?;
        let register = Request::from(surge_proto::namespace::Open { ino: self.ino, keep: false });
        conn.send_then(&register, self.client.timeout(), Box::new(|_| {}));
        Some(self.shared_handle())
    }

    /// A read-only handle of this kept file, as the file was kept.
    fn shared_handle(&self) -> File {
        File { shares_open: true, ..File::new(self.client.clone(), &self.opened, self.ticket) }
    }

    /// Releases a handle answered from a kept file (read-only: nothing to publish) by a
    /// request whose answer nobody waits for ([`crate::background`]). The kept file usually
    /// holds the file meanwhile, but not always (it is let go at once when a change overtook
    /// its open): a release that turns out to be the last hold on a removed file purges its
    /// data, as any last close does. A connection gone since took the handle's registration
    /// with it.
    pub fn release_shared(&self) {
        let Some(conn) = self.client.connection_now(surge_proto::ino::home(self.ino)) else { return };
        self.release_on(&conn);
    }

    /// Releases a handle that has nothing to publish (it never wrote, was not opened for
    /// writing and was registered at its home by its open) as [`File::release_shared`] does:
    /// by a request whose answer nobody waits for, as the kernel sends a mount's release after
    /// close(2) returned. True when sent; false when the handle has something to publish or
    /// wait for, or its home's connection is not open now (call [`File::release`]).
    pub fn release_unwaited(&self) -> bool {
        if self.is_writer() || !self.is_clean() || self.made_under.lock().unwrap().is_some() {
            return false;
        }
        let Some(conn) = self.client.connection_now(surge_proto::ino::home(self.ino)) else { return false };
        self.release_on(&conn);
        true
    }

    fn release_on(&self, conn: &crate::conn::Connection) {
        let (client, ino) = (self.client.clone(), self.ino);
        let outstanding = self.client.outstanding();
        let then = move |response: crate::conn::Response| match response.and_then(|answer| answer.reply::<Commit>()) {
            Ok(fate) if fate.purge => {
                // The reply is handed over on the connection's reader task, in the runtime.
                tokio::spawn(async move {
                    if let Err(e) = client.purge_data(ino, fate.size, fate.ticket).await {
                        tracing::warn!(ino = format!("{ino:#x}"), "purging a removed file's data after its last close: {e}");
                    }
                    drop(outstanding);
                });
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(ino = format!("{ino:#x}"), "releasing a shared handle: {e}"),
        };
        conn.send_then(&Request::from(self.commit(true)), self.client.timeout(), Box::new(then));
    }

    /// Whether this handle was answered from a kept file ([`File::sharing`], [`File::split_kept`]).
    pub fn shares_open(&self) -> bool {
        self.shares_open
    }

    /// Lets go of the file kept by [`Client::open_ino_kept`]; purges its data when that
    /// was the last thing holding a removed file.
    pub async fn release_kept(&self) -> Result<()> {
        let fate = self.client.call_home(self.ino, surge_proto::namespace::ReleaseKept { ino: self.ino }).await?;
        if fate.purge {
            self.client.purge_data(self.ino, fate.size, fate.ticket).await?;
        }
        Ok(())
    }

    /// A handle of a file made under delegation `dir`, whose writes are known to wait or not.
    pub(crate) fn made_under(mut self, dir: std::sync::Arc<crate::DelegatedDir>, may_wait: bool, write_behind: u64) -> File {
        let _ = self.may_wait.set(may_wait);
        self.behind.get_mut().window = write_behind;
        self.writer.store(true, Ordering::Relaxed);
        *self.made_under.lock().unwrap() = Some(dir);
        self
    }

    /// Makes sure the file's home knows the file (and counts this handle's open) before a
    /// request names it there: writes back the delegation it was made under, if any.
    async fn known_at_home(&self) -> Result<()> {
        let Some(dir) = self.made_under.lock().unwrap().clone() else { return Ok(()) };
        dir.write_back().await?;
        *self.made_under.lock().unwrap() = None;
        Ok(())
    }

    /// Whether this handle's writes wait for room at their servers' high-water marks rather
    /// than being written while there is room at all (see
    /// [`surge_proto::workflow::WaitsForRoom`]): on an instance that holds writers (every
    /// server of an instance does or none; the server of the write's first byte, at `offset`,
    /// tells), asked of the file's home once. Writes need only their data servers, so a home
    /// out of reach (lost, being taken over) does not fail them: they may wait, as every write
    /// did before the question existed, and the home is asked again at the next write.
    pub(crate) async fn may_wait(&self, offset: u64) -> Result<bool> {
        if let Some(&known) = self.may_wait.get() {
            return Ok(known);
        }
        let via = self.client.layout().pieces(self.ino, offset, 1).next().map_or(0, |piece| piece.server);
        let known = match self.client.connection(via).await?.holds_writers() {
            false => false,
            true => match self.client.call(surge_proto::ino::home(self.ino), surge_proto::workflow::WaitsForRoom { ino: self.ino }).await {
                Ok(known) => known,
                Err(_) => return Ok(true),
            },
        };
        Ok(*self.may_wait.get_or_init(|| async { known }).await)
    }

    /// The file's content version before and after this handle's last publication of a
    /// size or mtime, taken once (None: none since the last take). A node that keeps the
    /// bytes it wrote (the kernel's page cache) may keep them as the file's at the "after"
    /// version if it held them at the "before" one: nobody else changed the file between.
    pub fn take_publication(&self) -> Option<(ContentVersion, ContentVersion)> {
        self.publication.lock().unwrap().take()
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn ticket(&self) -> Option<Ticket> {
        self.ticket
    }

    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// The file's attributes when this handle was opened or created.
    pub fn attr_at_open(&self) -> &Attr {
        &self.opened
    }

    /// The file's content version as the home last told this handle: at open, or after a
    /// truncation through it (O_TRUNC), whose pages a node starts from.
    pub fn content_version(&self) -> ContentVersion {
        *self.version.lock().unwrap()
    }

    /// The file's size as this handle knows it.
    pub fn size(&self) -> u64 {
        let size = self.size.load(Ordering::Relaxed);
        // Under passthrough the kernel's writes are in the data file alone.
        self.passthrough_len().map_or(size, |len| size.max(len))
    }

    /// How far the writes through this handle that its home has not been told of reach, if
    /// there are any: what a `stat` on this node shows beyond the home's size. Sizes this
    /// handle saw at its open or learned from other handles here do not count: a size set
    /// later elsewhere (a truncate on another node) wins over them.
    pub fn unpublished_end(&self) -> Option<u64> {
        let own = self.dirty.load(Ordering::Relaxed).then(|| self.written_end.load(Ordering::Relaxed));
        own.max(self.passthrough_unreported_len())
    }

    /// How far the writes through this handle reach, published or not (under passthrough,
    /// the data file's length: the kernel's writes are there alone).
    pub fn written_through(&self) -> u64 {
        let own = self.written_end.load(Ordering::Relaxed);
        self.passthrough_len().map_or(own, |len| own.max(len))
    }

    /// Lets up to `window` bytes of writes be in flight unacknowledged (0: off).
    pub async fn set_write_behind(&self, window: u64) -> Result<()> {
        self.drain_writes(0, None).await?;
        self.behind.lock().await.window = window;
        Ok(())
    }

    /// Requests up to `window` bytes ahead of sequential reads (0: off).
    pub async fn set_read_ahead(&self, window: u64) {
        let mut ahead = self.ahead.lock().await;
        ahead.queue.clear();
        ahead.window = window;
    }

    /// The handle's write-behind failure, if one happened (it stays: see the module's doc).
    fn write_failed(&self) -> Result<()> {
        match &*self.write_failure.lock().unwrap() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Waits until at most `keep` bytes of writes are unacknowledged. The handle's
    /// write-behind failure, among them or earlier, is returned; else the failure of a write
    /// of call `own`, the caller's, which is reported by that call alone (nobody was told it
    /// was written).
    async fn drain_writes(&self, keep: u64, own: Option<u64>) -> Result<()> {
        let timeout = self.client.timeout();
        let mut own_failure = None;
        let mut behind = self.behind.lock().await;
        while behind.queued_bytes > keep {
            let Some(InFlight { pending, call, .. }) = behind.pop() else { break };
            match pending.wait(timeout).await {
                Err(e) if Some(call) == own => _ = own_failure.get_or_insert(e),
                Err(e) => _ = self.write_failure.lock().unwrap().get_or_insert(e),
                Ok(_) => {}
            }
        }
        drop(behind);
        self.write_failed()?;
        own_failure.map_or(Ok(()), Err)
    }

    /// Writes `data` at `offset`. The chunks it covers are sent to their servers concurrently.
    pub async fn pwrite(&self, offset: u64, data: &[u8]) -> Result<usize> {
        self.pwrite_bytes(offset, Bytes::copy_from_slice(data)).await
    }

    /// Like [`File::pwrite`] without copying `data` (the pieces sent are slices of it).
    pub async fn pwrite_bytes(&self, offset: u64, data: Bytes) -> Result<usize> {
        let len = data.len();
        if len == 0 {
            return Ok(0);
        }
        self.write_failed()?;
        // Chunks fetched ahead may hold what this write replaces.
        self.forget_read_ahead().await;
        let local = self.prepare_local_write(offset, len as u64).await?;
        let may_wait = self.may_wait(offset).await?;
        let (window, call) = {
            let mut behind = self.behind.lock().await;
            let mut call = behind.begin_call();
            if !(local && self.write_locally(&mut behind, offset, &data)) {
                if behind.crossing(self.servers_of(offset, len as u64), false) {
                    // Local writes to these servers still going: this one must not overtake them.
                    drop(behind);
                    self.drain_writes(0, None).await?;
                    behind = self.behind.lock().await;
                    call = behind.begin_call();
                }
                for piece in self.client.layout().pieces(self.ino, offset, len as u64) {
                    let payload = data.slice(piece.buf_offset..piece.buf_offset + piece.len as usize);
                    let pending = self
                        .client
                        .send(
                            piece.server,
                            &Request::from(Write { ino: self.ino, offset: piece.file_offset, ticket: self.ticket, may_wait }),
                            payload,
                        )
                        .await?;
                    behind.push(piece.server, piece.len, pending, false);
                }
            }
            (behind.window, call)
        };
        self.wrote(offset + len as u64);
        self.drain_writes(window, Some(call)).await?;
        Ok(len)
    }

    /// [`File::pwrite`] of a buffer the caller only lends: a write whose every chunk goes to a
    /// server of this node with room set aside is written from `data` into the data files on
    /// the caller's thread, after the handle's writes in flight (no copy into a buffer of the
    /// client's, no hand-off to the local writer: for a stream of large writes, what keeps it
    /// at the speed of the page cache); any other is copied and sent as `pwrite` sends it.
    pub async fn pwrite_in_place(&self, offset: u64, data: &[u8]) -> Result<usize> {
        let len = data.len() as u64;
        if len == 0 {
            return Ok(0);
        }
        self.write_failed()?;
        if self.no_read_ahead() && self.prepare_local_write(offset, len).await? {
            let mut behind = self.behind.lock().await;
            if !behind.queue.is_empty() {
                drop(behind);
                self.drain_writes(0, None).await?;
                behind = self.behind.lock().await;
            }
            // Claimed with the queue's lock held: no other write of this handle comes between;
            // and with no read-ahead, nothing fetched ahead can hold what this write replaces.
            let claimable = behind.queue.is_empty() && self.no_read_ahead();
            if let Some(claimed) = claimable.then(|| self.local.claim(offset, len)).flatten() {
                self.local.write_claimed(claimed, data)?;
                drop(behind);
                self.wrote(offset + len);
                return Ok(data.len());
            }
        }
        self.pwrite_bytes(offset, Bytes::copy_from_slice(data)).await
    }

    /// Hands the write to the local writer if every chunk of it can be written locally now
    /// (see [`crate::local`]); false: it was not.
    fn write_locally(&self, behind: &mut WriteBehind, offset: u64, data: &Bytes) -> bool {
        if behind.crossing(self.servers_of(offset, data.len() as u64), true) || !self.no_read_ahead() {
            return false;
        }
        let Some(claimed) = self.local.claim(offset, data.len() as u64) else { return false };
        let writer = self.client.local_writer();
        for (file, piece) in claimed {
            let payload = data.slice(piece.buf_offset..piece.buf_offset + piece.len as usize);
            behind.push(piece.server, piece.len, writer.submit(file, self.ino, piece.server, piece.file_offset, payload), true);
        }
        true
    }

    /// The servers holding `[offset, offset + len)`.
    fn servers_of(&self, offset: u64, len: u64) -> impl Iterator<Item = usize> + '_ {
        self.client.layout().pieces(self.ino, offset, len).map(|piece| piece.server)
    }

    /// Records a write up to `end` (size, publication at the next flush).
    fn wrote(&self, end: u64) {
        self.written_end.fetch_max(end, Ordering::Relaxed);
        self.size.fetch_max(end, Ordering::Relaxed);
        self.changed_content();
    }

    /// Bytes of the file changed through this handle (a write, a hole punched, a range
    /// zeroed): the next flush publishes the new mtime.
    pub(crate) fn changed_content(&self) {
        self.dirty.store(true, Ordering::Relaxed);
        self.mtime_due.store(true, Ordering::Relaxed);
    }

    /// Writes `data` at the end of the file as it stands on its home, whatever other clients
    /// append meanwhile (O_APPEND across nodes): the home sets the range aside, then the
    /// data goes there. Answers the offset it landed at.
    pub async fn append(&self, data: Bytes) -> Result<u64> {
        self.known_at_home().await?;
        let offset = self.client.call_home(self.ino, Append { ino: self.ino, len: data.len() as u64 }).await?;
        self.pwrite_bytes(offset, data).await?;
        Ok(offset)
    }

    /// The file's times were set explicitly (futimens, utimensat) after what this handle
    /// wrote: its close must not replace them with its own time (as `cp -a`, `cp -p` and
    /// `tar x` need). Writes after this set mtime again.
    pub fn times_set_explicitly(&self) {
        self.mtime_due.store(false, Ordering::Relaxed);
    }

    /// [`File::pwrite_bytes`] for a write-behind handle, when it can be done without waiting:
    /// the window has room once the writes already acknowledged are let go, nothing failed
    /// yet, and either every chunk of the range can be written locally with room already set
    /// aside, or the range lies in one chunk whose server's connection is open. The write is
    /// then handed to the local writer or sent from the calling thread, and counted as written
    /// (its outcome is collected later, like any write-behind). Otherwise `data` comes back
    /// (call `pwrite_bytes`).
    pub fn write_behind_now(&self, offset: u64, data: Bytes) -> std::result::Result<usize, Bytes> {
        let len = data.len();
        let no_read_ahead = self.no_read_ahead();
        let Ok(mut behind) = self.behind.try_lock() else { return Err(data) };
        if len == 0 || behind.window == 0 || !no_read_ahead || self.write_failure.lock().unwrap().is_some() {
            return Err(data);
        }
        // Let go of the writes already done; a failure among them is reported by this write,
        // on the ordinary path, and every one after it.
        while let Some(first) = behind.queue.front_mut() {
            match first.pending.try_take() {
                None => break,
                Some(outcome) => {
                    behind.pop();
                    if let Err(e) = outcome {
                        self.write_failure.lock().unwrap().get_or_insert(e);
                        return Err(data);
                    }
                }
            }
        }
        if behind.queued_bytes + len as u64 > behind.window {
            return Err(data);
        }
        behind.begin_call();
        if self.write_locally(&mut behind, offset, &data) {
            self.wrote(offset + len as u64);
            return Ok(len);
        }
        if behind.crossing(self.servers_of(offset, len as u64), false) || self.local_write_possible(offset, len as u64) {
            // Must wait for local writes in flight to the same server, or can be a local write
            // once room is set aside: either takes `pwrite_bytes`.
            return Err(data);
        }
        let Some((server, conn)) = self.lone_chunk_connection(offset, len as u64) else { return Err(data) };
        // Not asked yet whether the writes may wait: the asynchronous path asks.
        let Some(&may_wait) = self.may_wait.get() else { return Err(data) };
        match conn.send(&Request::from(Write { ino: self.ino, offset, ticket: self.ticket, may_wait }), data.clone()) {
            Ok(pending) => behind.push(server, len as u64, pending, false),
            Err(_) => return Err(data),
        }
        self.wrote(offset + len as u64);
        Ok(len)
    }

    /// True when [`File::flush`] would have nothing to do: no write in flight or unpublished,
    /// no failure to report. Lets a caller on a latency-critical path skip it.
    pub fn is_clean(&self) -> bool {
        !self.dirty.load(Ordering::Relaxed) && self.writes_settled() && !self.passthrough_unreported()
    }

    /// No write of this handle in flight (as far as can be told without waiting), no failure
    /// to report.
    fn writes_settled(&self) -> bool {
        self.write_failure.lock().unwrap().is_none() && self.behind.try_lock().is_ok_and(|behind| behind.queue.is_empty())
    }

    fn no_read_ahead(&self) -> bool {
        self.ahead.try_lock().is_ok_and(|ahead| ahead.window == 0)
    }

    /// The server of the one chunk `[offset, offset + len)` lies in, and its open connection;
    /// None when the range spans chunks or the connection is not ready without waiting.
    fn lone_chunk_connection(&self, offset: u64, len: u64) -> Option<(usize, std::sync::Arc<crate::conn::Connection>)> {
        let mut pieces = self.client.layout().pieces(self.ino, offset, len);
        let (Some(piece), None) = (pieces.next(), pieces.next()) else { return None };
        Some((piece.server, self.client.connection_now(piece.server)?))
    }

    /// Reads up to `len` bytes at `offset` like [`File::pread`], handing the outcome to `then`
    /// on the connection's reader task — when that can be done without waiting: the range
    /// lies in one chunk, no write of this handle is in flight, no read-ahead is set, and the
    /// connection to the chunk's server is open. Otherwise `then` comes back unused (call
    /// `pread`). For a caller on a thread of its own (the FUSE session thread), this costs the
    /// runtime no task and no wake-up until the reply arrives.
    pub fn read_then<F>(&self, offset: u64, len: usize, then: F) -> std::result::Result<(), F>
    where
        F: FnOnce(Result<Vec<u8>>) + Send + 'static,
    {
        let size = self.size();
        if offset >= size || len == 0 {
            then(Ok(Vec::new()));
            return Ok(());
        }
        let len = (len as u64).min(size - offset);
        if !(self.writes_settled() && self.no_read_ahead()) || self.local.unreported() {
            return Err(then);
        }
        let Some((_, conn)) = self.lone_chunk_connection(offset, len) else { return Err(then) };
        let request = Request::from(Read { ino: self.ino, offset, len: len as u32, ticket: self.ticket });
        conn.send_then(
            &request,
            self.client.timeout(),
            Box::new(move |response| {
                then(response.map(|answer| {
                    let mut bytes = answer.payload;
                    // A hole's tail reads as zeros, as in `read_now`.
                    bytes.resize(len as usize, 0);
                    bytes
                }))
            }),
        );
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` like [`File::pread`], on the calling thread, when
    /// every chunk of the range is held by a server on this node (a local read); None when a
    /// chunk is not, or this handle has writes in flight (call `pread`).
    pub fn read_local(&self, offset: u64, len: usize) -> Option<Result<Vec<u8>>> {
        match self.local_read_len(offset, len)? {
            0 => Some(Ok(Vec::new())),
            len => self.local.read(offset, len as u64),
        }
    }

    /// [`File::read_local`] into `buf`, the caller's buffer: up to `buf.len()` bytes, stopping
    /// at the file's size; answers how many.
    pub fn read_local_into(&self, offset: u64, buf: &mut [u8]) -> Option<Result<usize>> {
        match self.local_read_len(offset, buf.len())? {
            0 => Some(Ok(0)),
            len => self.local.read_into(offset, &mut buf[..len]).map(|read| read.map(|()| len)),
        }
    }

    /// How much a local read of up to `len` bytes at `offset` reads (0 at or past the end), or
    /// None when it cannot be a local read now (local I/O off, this handle's writes in flight).
    fn local_read_len(&self, offset: u64, len: usize) -> Option<usize> {
        if !self.local.enabled() {
            return None;
        }
        let size = self.size();
        if offset >= size || len == 0 {
            return Some(0);
        }
        if !self.writes_settled() {
            return None;
        }
        Some((len as u64).min(size - offset) as usize)
    }

    /// Local I/O is on and this handle has written enough for its writes to go local.
    fn local_writes_due(&self) -> bool {
        self.local.enabled() && self.written_end.load(Ordering::Relaxed) >= LOCAL_WRITES_AFTER
    }

    /// The write of `len` bytes at `offset` can be a local one, given room set aside.
    fn local_write_possible(&self, offset: u64, len: u64) -> bool {
        self.local_writes_due() && self.local.shortfall(offset, len).is_some()
    }

    /// Makes the write of `len` bytes at `offset` a local one if it can be: waits for the
    /// handle's writes in flight and has the servers set room aside. False: send it instead.
    async fn prepare_local_write(&self, offset: u64, len: u64) -> Result<bool> {
        if !self.local_writes_due() {
            return Ok(false);
        }
        // Local I/O needs the servers' connections up (they say where the data directories
        // are); a handle's first writes may be the first to need them.
        for piece in self.client.layout().pieces(self.ino, offset, len) {
            self.client.connection(piece.server).await?;
        }
        let Some(short) = self.local.shortfall(offset, len) else { return Ok(false) };
        let crossing = self.behind.lock().await.crossing(self.servers_of(offset, len), true);
        if crossing {
            // Writes to these servers in flight over the network: a local write could overtake.
            self.drain_writes(0, None).await?;
        }
        // A step ahead from every server at once; from one that has no room for that, just what
        // this write needs.
        let ahead = |need: u64| need.max(crate::local::RESERVATION);
        let requests: Vec<(usize, ReserveLocal)> =
            short.iter().map(|&(server, need)| (server, ReserveLocal { ino: self.ino, bytes: ahead(need), ticket: self.ticket })).collect();
        let outcomes = self.client.send_all(requests).await;
        let mut all_reserved = true;
        for (&(server, need), outcome) in short.iter().zip(outcomes) {
            if outcome.is_ok() {
                self.local.reserved(server, ahead(need));
            } else if need > 0 && self.client.call(server, ReserveLocal { ino: self.ino, bytes: need, ticket: self.ticket }).await.is_ok() {
                self.local.reserved(server, need);
            } else {
                // No room even for this write (the server says so, with how much there is,
                // when the write is sent), or the server is gone: it goes over the network.
                all_reserved = false;
            }
        }
        Ok(all_reserved)
    }

    /// Tells every server this handle wrote to locally that it is done for now (the server
    /// then serves those bytes to other nodes, and gets its set-aside room back).
    async fn report_local_writes(&self) -> Result<()> {
        let done = self.local.take_unreported();
        let mut requests: Vec<(usize, LocalWritten)> =
            done.into_iter().map(|(server, reserved)| (server, LocalWritten { ino: self.ino, reserved, ticket: self.ticket })).collect();
        if let Some((server, report, written)) = self.take_passthrough_report() {
            requests.push((server, report));
            if let Some(len) = written {
                // The kernel wrote: publish as for a write through this handle.
                self.written_end.fetch_max(len, Ordering::Relaxed);
                self.size.fetch_max(len, Ordering::Relaxed);
                self.dirty.store(true, Ordering::Relaxed);
                self.mtime_due.store(true, Ordering::Relaxed);
            }
        }
        crate::client::first_failure(self.client.send_all(requests).await)
    }

    /// Reads up to `len` bytes at `offset`, stopping at the file's size; holes read as zeros.
    pub async fn pread(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let size = self.size();
        if offset >= size || len == 0 {
            return Ok(Vec::new());
        }
        let len = (len as u64).min(size - offset);
        // Read what this handle wrote, even if it is still in flight.
        self.drain_writes(0, None).await?;
        if let Some(read) = self.read_local(offset, len as usize) {
            return read;
        }
        // A server reads back over the network only what it was told was written here.
        self.report_local_writes().await?;
        let mut ahead = self.ahead.lock().await;
        if ahead.window == 0 || offset != ahead.expected {
            // Not (or no longer) sequential: read just what was asked, fetch nothing ahead.
            ahead.queue.clear();
            ahead.requested_to = offset + len;
            ahead.expected = offset + len;
            drop(ahead);
            return self.read_now(offset, len).await;
        }
        let end = offset + len;
        let horizon = (end + ahead.window).min(size);
        // Request everything up to the horizon, chunk by chunk.
        let from = ahead.requested_to.max(offset);
        if horizon > from {
            for piece in self.client.layout().pieces(self.ino, from, horizon - from) {
                let request = Request::from(Read { ino: self.ino, offset: piece.file_offset, len: piece.len as u32, ticket: self.ticket });
                let pending = self.client.send(piece.server, &request, Bytes::new()).await?;
                ahead.queue.push_back((piece.file_offset, piece.len, pending));
            }
            ahead.requested_to = horizon;
        }
        let mut out = Vec::with_capacity(len as usize);
        while (out.len() as u64) < len {
            let Some((at, piece_len, pending)) = ahead.queue.pop_front() else { break };
            let mut bytes = pending.wait(self.client.timeout()).await?.payload;
            bytes.resize(piece_len as usize, 0);
            if out.is_empty() && at == offset && piece_len == len {
                // The request is exactly one fetched chunk: hand its buffer over, no copy.
                out = bytes;
                break;
            }
            let skip = (offset + out.len() as u64 - at) as usize;
            let want = ((len - out.len() as u64) as usize).min(bytes.len() - skip);
            out.extend_from_slice(&bytes[skip..skip + want]);
            if skip + want < bytes.len() {
                // The request ended inside this chunk: keep its tail for the next read.
                let rest = bytes[skip + want..].to_vec();
                ahead.queue.push_front((at + (skip + want) as u64, rest.len() as u64, Pending::ready(rest)));
            }
        }
        ahead.expected = offset + out.len() as u64;
        Ok(out)
    }

    /// Waits until every write sent through this handle is acknowledged (another handle's
    /// reader on this node must see them); reports a failure among them.
    pub async fn wait_writes(&self) -> Result<()> {
        let drained = self.drain_writes(0, None).await;
        // Whatever the writes' outcome: the report gives back the room the servers set aside
        // for this handle's local writes, which a failed write (ENOSPC) would otherwise keep
        // from every writer until this client disconnects.
        let reported = self.report_local_writes().await;
        drained.and(reported)
    }

    /// Drops chunks fetched ahead: another handle on this node wrote to the file.
    pub async fn forget_read_ahead(&self) {
        let mut ahead = self.ahead.lock().await;
        ahead.queue.clear();
        ahead.requested_to = ahead.expected;
    }

    async fn read_now(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let client = &self.client;
        let mut pending = Vec::new();
        for piece in client.layout().pieces(self.ino, offset, len) {
            let request = Request::from(Read { ino: self.ino, offset: piece.file_offset, len: piece.len as u32, ticket: self.ticket });
            pending.push((piece.buf_offset, client.send(piece.server, &request, Bytes::new()).await?));
        }
        if pending.len() == 1 {
            // Within one chunk: hand over the received buffer, zero-filling a hole's tail.
            let (_, p) = pending.pop().expect("one");
            let mut bytes = p.wait(client.timeout()).await?.payload;
            bytes.resize(len as usize, 0);
            return Ok(bytes);
        }
        let mut out = vec![0u8; len as usize];
        for (at, p) in pending {
            let bytes = p.wait(client.timeout()).await?.payload;
            out[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(out)
    }

    /// What a publication tells the home: the size and mtime due since the last one (taken:
    /// the next says only what changes after it), and, with `release`, the handle's end.
    fn commit(&self, release: bool) -> Commit {
        let dirty = self.dirty.swap(false, Ordering::Relaxed);
        let written = self.written_end.load(Ordering::Relaxed);
        let mtime_due = self.mtime_due.swap(false, Ordering::Relaxed);
        let wrote = self.writer.fetch_or(dirty, Ordering::Relaxed) || dirty;
        Commit {
            ino: self.ino,
            size: (dirty && written > 0).then_some(written),
            mtime: mtime_due.then(Timestamp::now),
            release,
            wrote: release && wrote,
        }
    }

    /// Releases a handle made under a delegation that its home has not registered, by
    /// logging its release there ([`crate::DelegatedDir::log_release`]): true when that was
    /// done (the handle is released; nothing was due but what the log carries). False: the
    /// handle is not such a one, or has writes or reports to wait for (call `release`).
    pub fn release_logged(&self) -> bool {
        // The cheap test first: every release of the mount asks.
        self.made_under.lock().unwrap().is_some() && self.is_clean() && self.log_release()
    }

    /// Logs this handle's release, with what it publishes, in the delegation its file was
    /// made under, if the home has not registered it: true when done. Otherwise what the
    /// release took is due again.
    fn log_release(&self) -> bool {
        let Some(dir) = self.made_under.lock().unwrap().clone() else { return false };
        let commit = self.commit(true);
        if dir.log_release(self.ino, commit.clone()) {
            *self.made_under.lock().unwrap() = None;
            return true;
        }
        // Registered at a write-back meanwhile: put back what the commit took.
        if commit.size.is_some() {
            self.dirty.store(true, Ordering::Relaxed);
        }
        if commit.mtime.is_some() {
            self.mtime_due.store(true, Ordering::Relaxed);
        }
        false
    }

    async fn publish(&self, release: bool) -> Result<InodeFate> {
        if release && self.log_release() {
            return Ok(InodeFate { purge: false, size: self.size(), ticket: None, published: None });
        }
        self.known_at_home().await?;
        let commit = self.commit(release);
        let fate = self.client.call_home(self.ino, commit).await?;
        if fate.published.is_some() {
            *self.publication.lock().unwrap() = fate.published;
        }
        Ok(fate)
    }

    /// Waits for every write, makes the data durable on the servers' devices and publishes
    /// size and mtime.
    pub async fn fsync(&self) -> Result<()> {
        self.wait_writes().await?;
        self.client.broadcast(SyncData { ino: self.ino, ticket: self.ticket }).await?;
        self.publish(false).await.map(|_| ())
    }

    /// Waits for every write and publishes size and mtime, keeping the handle open (what a
    /// FUSE flush, i.e. every close(2) of a descriptor, needs).
    pub async fn flush(&self) -> Result<()> {
        self.wait_writes().await?;
        if !self.dirty.load(Ordering::Relaxed) {
            // Nothing written since the last publication: nothing to tell the home server.
            return Ok(());
        }
        self.publish(false).await.map(|_| ())
    }

    /// Waits for every write, publishes size and mtime and releases the handle. After this
    /// returns, an open on any node sees everything written through this handle. A write
    /// failure not reported yet is reported here (the handle is released all the same).
    pub async fn close(self) -> Result<()> {
        self.release().await
    }

    /// [`File::close`] for a handle shared behind a reference; do not use it afterwards.
    pub async fn release(&self) -> Result<()> {
        let drained = self.wait_writes().await;
        if self.shares_open {
            self.release_shared();
            return drained;
        }
        let fate = self.publish(true).await?;
        if fate.purge {
            // The file was unlinked while open and this was the last handle.
            self.client.purge_data_behind(self.ino, fate.size, fate.ticket).await;
        }
        drained
    }

    /// Sets the file's size (ftruncate).
    pub async fn set_len(&self, size: u64) -> Result<()> {
        self.drain_writes(0, None).await?;
        self.known_at_home().await?;
        let changes = AttrChanges { size: Some(size), cut_at: Some(self.content_version()), ..Default::default() };
        let attr = self.client.setattr_unmeasured(self.ino, changes).await?;
        *self.version.lock().unwrap() = attr.content_version();
        self.size.store(size, Ordering::Relaxed);
        self.written_end.store(self.written_end.load(Ordering::Relaxed).min(size), Ordering::Relaxed);
        self.passthrough_resized();
        self.ahead.lock().await.queue.clear();
        Ok(())
    }

    /// The handle was opened for writing (O_WRONLY or O_RDWR, or made by a create): its
    /// release publishes the file even if nothing was written (as inotify's IN_CLOSE_WRITE).
    pub fn opened_for_writing(&self) {
        self.writer.store(true, Ordering::Relaxed);
    }

    /// The handle was opened for writing (or made by a create), or wrote: what it says of the
    /// size is what it made the file, not only what it saw.
    pub fn is_writer(&self) -> bool {
        self.writer.load(Ordering::Relaxed) || self.dirty.load(Ordering::Relaxed)
    }

    /// Raises this handle's idea of the size (another handle on this node wrote further).
    pub fn note_size(&self, size: u64) {
        self.size.fetch_max(size, Ordering::Relaxed);
    }

    /// Another handle on this node truncated or extended the file to `size` (it has waited
    /// for its own writes): this handle's idea of the size follows, lower too; its own later
    /// writes raise it again.
    pub fn note_resize(&self, size: u64) {
        self.size.store(size, Ordering::Relaxed);
        self.written_end.fetch_min(size, Ordering::Relaxed);
    }

    /// Re-reads the size from the file's home (to see another node's published writes
    /// through a handle opened earlier).
    pub async fn refresh(&self) -> Result<u64> {
        self.known_at_home().await?;
        let attr = self.client.getattr(self.ino).await?;
        self.size.fetch_max(attr.size, Ordering::Relaxed);
        Ok(self.size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a file striped over servers on this node and elsewhere, local and network writes
    /// go on side by side; only the same server's bytes may not be in flight both ways.
    #[test]
    fn writes_in_flight_cross_only_on_the_same_server() {
        let mut behind = WriteBehind::default();
        behind.push(2, 4096, Pending::ready(Vec::new()), false);
        behind.push(0, 4096, Pending::ready(Vec::new()), true);
        assert!(!behind.crossing([1, 3], true) && !behind.crossing([1, 3], false), "idle servers");
        assert!(behind.crossing([2], true), "a local write to server 2 would race the one sent there");
        assert!(!behind.crossing([2], false), "another sent write to server 2 is ordered behind it");
        assert!(behind.crossing([0], false) && !behind.crossing([0], true));
        behind.pop();
        assert!(!behind.crossing([2], true), "the sent write is done");
        behind.pop();
        assert!(!behind.crossing([0], false) && behind.queued_bytes == 0);
    }
}
