//! FUSE over io_uring (Linux 6.14+, the fuse module's `enable_uring`): the file system
//! registers ring entries, one queue per CPU, each entry a header and a payload buffer. The
//! kernel writes a request into a free entry of the queue of the CPU the calling process runs
//! on and completes that entry's command; the reply is written into the same entry and
//! committed with one command that also makes the entry wait for the next request.
//!
//! A queue is driven either by a thread of its own, or by the caller's event loop through
//! [`Ring`] (its descriptor is readable when completions wait). Either way the thread that
//! drives it submits the commits: the kernel delivers an entry's next request as task work
//! of the thread that submitted the entry's commit, so that thread must live as long as the
//! queue. A reply given on that thread is submitted by it (on a queue thread, with the
//! system call that waits for the next completion); a reply from any other thread is queued
//! and the driver woken through the queue's eventfd, which the ring reads.
//!
//! No queue is ever wholly held by lock waits: a queue registers more entries while a quarter
//! of them is still free, up to a limit, and at the limit answers a lock wait that would take
//! one of its last [`LOCK_WAIT_RESERVE`] entries ENOLCK ("no locks available", said in the
//! log). Why (a queue held whole by waiters hangs them unkillably): docs/fuse-transport.md,
//! "Ring queues: growth and the lock-wait reserve".
//!
//! Forgets, interrupts and notices still go through /dev/fuse, whose reader keeps running
//! beside the queues (with the odd request queued there as the rings became ready). Until
//! every CPU's queue has registered an entry the kernel holds all other requests, and a queue
//! that stops leaves its CPU's requests waiting: the rings are made before the init reply
//! asks for io_uring (a ring that cannot be made means /dev/fuse alone), and a queue that
//! fails afterwards ends the process, which ends the connection ([`queue_lost`]).
//!
//! Ownership of an entry's buffers alternates: the kernel's from registration (or a commit)
//! until it completes the entry's command with a request, then the file system's until the
//! reply is committed. Only the holder of the entry's [`EntryRef`] (one per request) touches
//! them in between.

use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use io_uring::{opcode, squeue, types, IoUring};
use zerocopy::{FromZeros, IntoBytes};

use crate::abi::{self, fuse_uring_cmd_req, fuse_uring_req_header};
use crate::channel::Dev;
use crate::reply::{Responder, Route};
use crate::request;

/// io_uring_enter's flag to wait for completions.
const ENTER_GETEVENTS: u32 = 1;

/// One ring entry's buffers, at fixed addresses for the kernel.
struct Entry {
    header: UnsafeCell<Box<fuse_uring_req_header>>,
    payload: UnsafeCell<Box<[u8]>>,
    /// The two iovecs registration hands the kernel (header, payload).
    iov: Box<[libc::iovec; 2]>,
    state: Mutex<EntryState>,
}

/// Whether the entry's request is being handed to the file system (its buffers are then
/// borrowed by the decoded request, and a reply given meanwhile waits here until the
/// hand-over returns).
#[derive(Default)]
struct EntryState {
    dispatching: bool,
    deferred: Option<Deferred>,
    /// The request in the entry, while it is the file system's: since when, its id and
    /// opcode (for the watchdog's report of requests left unanswered).
    holding: Option<(std::time::Instant, u64, u32)>,
    /// The watchdog has reported the request it holds.
    reported: bool,
}

struct Deferred {
    commit_id: u64,
    unique: u64,
    error: i32,
    bytes: Vec<u8>,
}

impl Entry {
    /// An entry with buffers for a header and `payload_size` bytes. The payload is allocated
    /// zeroed, which for a buffer this large maps pages the kernel provides on first touch:
    /// entries rarely used cost address space, not memory.
    fn new(payload_size: usize) -> Entry {
        let mut header = Box::new(fuse_uring_req_header::new_zeroed());
        let mut payload = vec![0u8; payload_size].into_boxed_slice();
        let iov = Box::new([
            libc::iovec { iov_base: header.as_mut_bytes().as_mut_ptr().cast(), iov_len: size_of::<fuse_uring_req_header>() },
            libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() },
        ]);
        Entry { header: UnsafeCell::new(header), payload: UnsafeCell::new(payload), iov, state: Default::default() }
    }
}

/// How many entries a queue registers first, and how many it may grow to (1 <= initial <= max:
/// the session makes it so).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Depth {
    pub initial: usize,
    pub max: usize,
}

// SAFETY: an entry's buffers are touched by one party at a time (see the module
// documentation): the queue thread reads a request between the kernel's completion and the
// hand-over of its EntryRef, and the EntryRef's holder writes the reply before committing it.
unsafe impl Sync for Entry {}
// SAFETY: as above; the raw pointers in `iov` point into the entry's own boxes.
unsafe impl Send for Entry {}

/// One CPU's queue: its io_uring and its entries.
pub(crate) struct Queue {
    qid: u16,
    ring: IoUring<squeue::Entry128>,
    /// Serializes pushes to the submission queue (replies come from any thread).
    submissions: Mutex<()>,
    /// Room for as many entries as the queue may grow to; the first `registered` are made
    /// (each at a fixed address from then on: the kernel writes into its buffers).
    entries: Box<[std::sync::OnceLock<Entry>]>,
    /// How many entries have been made and registered; grown by the driving thread only.
    registered: AtomicUsize,
    /// How many requests the file system holds (handed over, reply not yet committed).
    held: AtomicUsize,
    /// How many entries the queue registers first.
    initial_depth: usize,
    /// Refusing lock waits at the limit has been said in the log.
    lock_waits_refused_said: std::sync::atomic::AtomicBool,
    /// The size of an entry's payload buffer.
    payload_size: usize,
    dev: Arc<Dev>,
    /// Written by a reply from another thread to wake the queue's thread, which submits the
    /// commit: the kernel delivers the entry's next request in the context of the thread that
    /// submitted the commit, so that must be one that lives as long as the queue.
    wake: std::fs::File,
    /// Where the ring reads `wake`'s counter into.
    wake_counter: UnsafeCell<Box<u64>>,
}

/// Entries a queue at its limit keeps from blocking lock waits (F_SETLKW, flock without
/// LOCK_NB), which may be held for as long as the lock is: the requests that end the waits
/// must find an entry.
pub(crate) const LOCK_WAIT_RESERVE: usize = 16;

/// `user_data` of the ring's read of `wake` (entries use their index).
const WAKE: u64 = u64::MAX;

// SAFETY: `wake_counter` is written only by the kernel (the ring's read of `wake`) and never
// read; every other field is Sync, or touched under `submissions` (the ring's submission
// side) or by the queue's thread alone (its completion side).
unsafe impl Sync for Queue {}

/// The right to answer the request in one entry, once.
pub(crate) struct EntryRef {
    queue: Arc<Queue>,
    index: usize,
    commit_id: u64,
}

thread_local! {
    /// The queue whose thread this is (its address), if any: a commit made there is submitted
    /// by the queue's next wait instead of a system call of its own.
    static QUEUE_OF_THIS_THREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// This thread drives rings for an event loop ([`Ring::serve_ready`]): it lives as long as
    /// they do, so it may submit commits itself. `DRIVING` while it is inside `serve_ready`,
    /// which submits what was queued when it returns.
    static DRIVER: std::cell::Cell<Driver> = const { std::cell::Cell::new(Driver::No) };
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Driver {
    No,
    Idle,
    Driving,
}

impl EntryRef {
    /// Commits the reply (the entry then waits for the next request); while the request is
    /// still being handed over, the reply waits for the hand-over to return.
    pub(crate) fn commit(self, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
        let mut state = self.queue.entry(self.index).state.lock().unwrap();
        if state.dispatching {
            state.deferred = Some(Deferred { commit_id: self.commit_id, unique, error, bytes: parts.concat() });
            return Ok(());
        }
        drop(state);
        self.queue.commit(self.index, self.commit_id, unique, error, parts)
    }
}

/// A `URING_CMD` to /dev/fuse carrying `cmd`, with `iov` (the registration's iovecs) in
/// the entry's address and length fields.
fn command(fd: i32, cmd_op: u32, cmd: &fuse_uring_cmd_req, iov: Option<&[libc::iovec; 2]>) -> squeue::Entry128 {
    let mut area = [0u8; 80];
    area[..size_of::<fuse_uring_cmd_req>()].copy_from_slice(cmd.as_bytes());
    let mut builder = opcode::UringCmd80::new(types::Fd(fd), cmd_op).cmd(area);
    if let Some(iov) = iov {
        builder = builder.addr(Some(iov.as_ptr() as u64));
    }
    let sqe = builder.build();
    match iov {
        None => sqe,
        Some(iov) => with_len(sqe, iov.len() as u32),
    }
}

/// Sets an SQE's `len` field, which the io_uring crate's `UringCmd80` leaves at 0 and the
/// kernel reads as the number of registration iovecs.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    /// `len`'s offset in `struct io_uring_sqe` (after opcode, flags, ioprio, fd, off, addr).
    const LEN_OFFSET: usize = 24;
    // SAFETY: Entry128 is a repr(C) pair of the kernel's 64-byte SQE and 64 more bytes, any
    // byte pattern of which is a valid value; the transmutes only reinterpret them.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(sqe) };
    bytes[LEN_OFFSET..LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

impl Queue {
    /// Writes a reply into entry `index` and commits it.
    fn commit(&self, index: usize, commit_id: u64, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
        let entry = self.entry(index);
        entry.state.lock().unwrap().holding = None;
        self.held.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the entry's request has been answered by its one EntryRef and is no longer
        // borrowed (EntryState); the kernel does not touch the buffers until the commit.
        let (header, payload) = unsafe { (&mut *entry.header.get(), &mut *entry.payload.get()) };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let (error, len) = if len > payload.len() {
            tracing::warn!("reply to request {unique} ({len} bytes) is larger than a ring entry's buffer: answered EIO");
            (-libc::EIO, 0)
        } else {
            let mut at = 0;
            for part in parts {
                payload[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            (error, len)
        };
        let out = abi::fuse_out_header { len: (abi::OUT_HEADER_LEN + len) as u32, error, unique };
        header.in_out[..abi::OUT_HEADER_LEN].copy_from_slice(out.as_bytes());
        header.ring_ent_in_out.payload_sz = len as u32;
        let cmd = fuse_uring_cmd_req { commit_id, qid: self.qid, ..Default::default() };
        tracing::trace!(qid = self.qid, index, unique, error, "ring commit");
        self.submit(command(self.dev.raw_fd(), abi::FUSE_IO_URING_CMD_COMMIT_AND_FETCH, &cmd, None).user_data(index as u64))
    }

    /// Entry `index`, which has been made (the kernel only names registered entries).
    fn entry(&self, index: usize) -> &Entry {
        self.entries[index].get().expect("a registered ring entry")
    }

    /// The entries made so far, with their indices.
    fn made_entries(&self) -> impl Iterator<Item = (usize, &Entry)> {
        self.entries.iter().enumerate().filter_map(|(index, slot)| Some((index, slot.get()?)))
    }

    fn new(qid: u16, depth: Depth, payload_size: usize, dev: Arc<Dev>) -> io::Result<Queue> {
        // One submission per entry at most, and the read of `wake`.
        let ring = IoUring::<squeue::Entry128>::builder().build(depth.max as u32 + 1)?;
        let entries = (0..depth.max).map(|_| std::sync::OnceLock::new()).collect();
        // SAFETY: eventfd only creates a descriptor, checked below.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `wake` was just created and is owned by nothing else.
        let wake = std::fs::File::from(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(wake) });
        let queue = Queue {
            qid,
            ring,
            submissions: Mutex::new(()),
            entries,
            registered: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            initial_depth: depth.initial,
            lock_waits_refused_said: Default::default(),
            payload_size,
            dev,
            wake,
            wake_counter: UnsafeCell::new(Box::new(0)),
        };
        Ok(queue)
    }

    /// Queues `sqe`; submits it at once unless this is the queue's own thread, whose next
    /// wait submits it.
    fn submit(&self, sqe: squeue::Entry128) -> io::Result<()> {
        let _serialized = self.submissions.lock().unwrap();
        // SAFETY: the submission queue is only touched under `submissions`; the SQE's
        // buffers (an entry's, and its iovecs) live as long as the queue.
        unsafe {
            let mut sq = self.ring.submission_shared();
            sq.push(&sqe).map_err(|_| io::Error::other("ring submission queue full"))?;
            sq.sync();
        }
        drop(_serialized);
        if QUEUE_OF_THIS_THREAD.get() == self as *const Queue as usize {
            return Ok(());
        }
        match DRIVER.get() {
            Driver::Driving => Ok(()),
            Driver::Idle => self.submit_now(),
            Driver::No => {
                use std::io::Write;
                (&self.wake).write_all(&1u64.to_ne_bytes())
            }
        }
    }

    /// Submits what is queued, without waiting.
    fn submit_now(&self) -> io::Result<()> {
        self.enter(false)
    }

    /// Asks the ring to complete an entry `WAKE` when `wake` is written to.
    fn arm_wake(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: the counter is boxed in the queue, which outlives the ring's read of it.
        let counter = unsafe { (*self.wake_counter.get()).as_mut() as *mut u64 };
        let read = opcode::Read::new(types::Fd(self.wake.as_raw_fd()), counter.cast(), 8).build().user_data(WAKE);
        self.submit(read.into())
    }

    /// How many submissions are queued and not yet taken by the kernel.
    fn queued(&self) -> usize {
        let serialized = self.submissions.lock().unwrap();
        // SAFETY: used under `submissions`, as every use of the submission queue.
        let snapshot = unsafe { self.ring.submission_shared() };
        let queued = snapshot.len();
        // The snapshot writes its view of the queue's tail back when dropped: it must go
        // before the lock does, or it could undo a submission queued in between (a
        // temporary in a block's last expression would outlive the block's lock guard).
        drop(snapshot);
        drop(serialized);
        queued
    }

    /// Submits what is queued and waits for at least one completion.
    fn submit_and_wait(&self) -> io::Result<()> {
        self.enter(true)
    }

    /// Submits what is queued and, if `wait`, waits for at least one completion. Another
    /// thread may submit concurrently: the kernel submits what is published, whoever asks.
    fn enter(&self, wait: bool) -> io::Result<()> {
        let pending = self.queued() as u32;
        if pending == 0 && !wait {
            return Ok(());
        }
        let (min_complete, flags) = if wait { (1, ENTER_GETEVENTS) } else { (0, 0) };
        // SAFETY: plain io_uring_enter with no argument structure.
        match unsafe { self.ring.submitter().enter::<libc::sigset_t>(pending, min_complete, flags, None) } {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands the request the kernel completed entry `index` with to `serve`, with the right
    /// to answer it.
    fn take_request(self: &Arc<Self>, index: usize, serve: &mut dyn FnMut(request::Request<'_>, Responder)) {
        let entry = self.entry(index);
        self.held.fetch_add(1, Ordering::Relaxed);
        {
            // SAFETY: the kernel completed this entry's command, so the request in it is ours;
            // a reply given while it is borrowed here waits in EntryState (module documentation).
            let (header, payload) = unsafe { (&*entry.header.get(), &*entry.payload.get()) };
            let in_header = abi::read::<abi::fuse_in_header>(&header.in_out).unwrap_or_default();
            {
                let mut state = entry.state.lock().unwrap();
                state.dispatching = true;
                state.holding = Some((std::time::Instant::now(), in_header.unique, in_header.opcode));
                state.reported = false;
            }
            let ring = header.ring_ent_in_out;
            let entry_ref = EntryRef { queue: self.clone(), index, commit_id: ring.commit_id };
            let responder = Responder::new(self.dev.clone(), in_header.unique, Route::Ring(entry_ref));
            let used = (ring.payload_sz as usize).min(payload.len());
            tracing::trace!(qid = self.qid, index, unique = in_header.unique, opcode = in_header.opcode, "ring request");
            if is_lock_wait(&in_header, &header.op_in) && self.keeps_entries_from_lock_waits() {
                crate::reply::ReplyEmpty::new(responder).error(libc::ENOLCK);
            } else {
                match request::decode(&in_header, &header.op_in, &payload[..used]) {
                    Ok(request) => serve(request, responder),
                    Err(malformed) => {
                        tracing::warn!("request {} (opcode {}) malformed: {}", in_header.unique, in_header.opcode, malformed.0);
                        crate::reply::ReplyEmpty::new(responder).error(libc::EINVAL);
                    }
                }
            }
        }
        let deferred = {
            let mut state = entry.state.lock().unwrap();
            state.dispatching = false;
            state.deferred.take()
        };
        if let Some(d) = deferred {
            if let Err(e) = self.commit(index, d.commit_id, d.unique, d.error, &[&d.bytes]) {
                tracing::warn!("reply to request {} not delivered: {e}", d.unique);
            }
        }
        if let Err(e) = self.grow_if_short() {
            tracing::warn!("io_uring queue {}: could not add entries ({e})", self.qid);
        }
    }

    /// How many entries are registered, and how many of them hold no request.
    fn occupancy(&self) -> (usize, usize) {
        let registered = self.registered.load(Ordering::Relaxed);
        (registered, registered.saturating_sub(self.held.load(Ordering::Relaxed)))
    }

    /// Whether a lock wait would take one of the entries a queue at its limit keeps for the
    /// requests that end such waits (the one being handed over already counts as held).
    fn keeps_entries_from_lock_waits(&self) -> bool {
        let (registered, free) = self.occupancy();
        let reserve = LOCK_WAIT_RESERVE.min(registered / 2);
        let keeps = registered == self.entries.len() && free < reserve;
        if keeps && !self.lock_waits_refused_said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "io_uring queue {}: {} of its {registered} entries hold requests; lock waits from CPU {} are answered ENOLCK while fewer than {reserve} are free (--ring-entries raises the limit)",
                self.qid,
                registered - free,
                self.qid,
            );
        }
        keeps
    }

    /// Registers more entries while a quarter of them is still free (twice as many, up to the
    /// limit), so that requests held long cannot take the last one. On the driving thread.
    fn grow_if_short(&self) -> io::Result<()> {
        let (registered, free) = self.occupancy();
        if free * 4 >= registered {
            return Ok(());
        }
        let limit = self.entries.len();
        if registered == limit {
            return Ok(());
        }
        let grown = (registered * 2).min(limit);
        tracing::debug!(qid = self.qid, registered, held = registered - free, grown, "ring queue grows");
        self.register_entries(registered..grown)
    }

    /// Makes entries `indices` and registers them (queued: the driving thread submits them).
    fn register_entries(&self, indices: std::ops::Range<usize>) -> io::Result<()> {
        for index in indices {
            let entry = self.entries[index].get_or_init(|| Entry::new(self.payload_size));
            let cmd = fuse_uring_cmd_req { qid: self.qid, ..Default::default() };
            self.submit(command(self.dev.raw_fd(), abi::FUSE_IO_URING_CMD_REGISTER, &cmd, Some(&entry.iov)).user_data(index as u64))?;
            self.registered.store(index + 1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Arms the wake-up read and registers the first entries (queued: the caller submits them).
    fn register(&self) -> io::Result<()> {
        self.arm_wake()?;
        self.register_entries(0..self.initial_depth)
    }

    /// Hands over the requests of the completions there are; how many completions there were,
    /// or why the queue ends.
    fn handle_completions(self: &Arc<Self>, serve: &mut dyn FnMut(request::Request<'_>, Responder)) -> Result<usize, QueueEnd> {
        // SAFETY: only the thread driving the queue reads its completion queue.
        let completions: Vec<(u64, i32)> = unsafe { self.ring.completion_shared() }.map(|c| (c.user_data(), c.result())).collect();
        for &(index, result) in &completions {
            tracing::trace!(qid = self.qid, index, result, "ring completion");
            if index == WAKE && result >= 0 {
                // Commits from other threads are queued; the caller submits them next.
                if let Err(e) = self.arm_wake() {
                    return Err(QueueEnd::Failed(e));
                }
                continue;
            }
            if result < 0 {
                let e = io::Error::from_raw_os_error(-result);
                return Err(match -result {
                    // The connection ended (unmount) or the ring is being torn down.
                    libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => {
                        tracing::debug!("io_uring queue {} ends: {e}", self.qid);
                        QueueEnd::Unmounted
                    }
                    _ => QueueEnd::Failed(io::Error::new(e.kind(), format!("the kernel refused an entry: {e}"))),
                });
            }
            if let Some(index) = usize::try_from(index).ok().filter(|&i| i < self.registered.load(Ordering::Relaxed)) {
                self.take_request(index, serve);
            }
        }
        Ok(completions.len())
    }

    /// On a thread of the queue's own: registers every entry, then serves requests until the
    /// kernel ends the connection.
    fn run(self: Arc<Self>, mut serve: impl FnMut(request::Request<'_>, Responder)) {
        QUEUE_OF_THIS_THREAD.set(Arc::as_ptr(&self) as usize);
        pin_to_cpu(self.qid);
        if let Err(e) = self.register() {
            queue_lost(self.qid, &e);
        }
        loop {
            if let Err(e) = self.submit_and_wait() {
                queue_lost(self.qid, &e);
            }
            match self.handle_completions(&mut serve) {
                Ok(_) => {}
                Err(QueueEnd::Unmounted) => return,
                Err(QueueEnd::Failed(e)) => queue_lost(self.qid, &e),
            }
        }
    }
}

/// Keeps this thread on CPU `cpu`, the CPU whose callers' requests its queue receives: a
/// caller waiting for its reply then gives its CPU to the queue's thread and takes it back,
/// where an unpinned thread is woken on the other CPU and the reply wakes the caller there
/// too (mdtest creates: 22,000-27,000/s pinned, 12,000-18,000 unpinned, bench/RESULTS.md).
/// Where the process may not run on that CPU (a cpuset), the thread stays unpinned.
fn pin_to_cpu(cpu: u16) {
    if cpu as usize >= libc::CPU_SETSIZE as usize {
        return;
    }
    // SAFETY: cpu_set_t is plain data, all zeroes the empty set; sched_setaffinity only
    // reads it.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !pinned {
        tracing::debug!("io_uring queue {cpu}: thread not pinned to its CPU ({})", io::Error::last_os_error());
    }
}

/// Whether the request waits for a lock (F_SETLKW, or flock without LOCK_NB) and may hold its
/// entry as long as another owner holds the lock. An unlock comes as F_SETLKW too
/// (`flock(fd, LOCK_UN)`), and ends waits rather than making one: never refused.
fn is_lock_wait(in_header: &abi::fuse_in_header, op_in: &[u8]) -> bool {
    in_header.opcode == abi::fuse_opcode::FUSE_SETLKW as u32
        && abi::read::<abi::fuse_lk_in>(op_in).is_some_and(|lk| lk.lk.type_ != libc::F_UNLCK as u32)
}

/// Why a queue stops taking requests.
enum QueueEnd {
    /// The connection ended (an unmount).
    Unmounted,
    /// The queue cannot go on while the connection lives.
    Failed(io::Error),
}

/// The request handler a driven ring hands requests to.
type Serve = Box<dyn Fn(request::Request<'_>, Responder) + Send + Sync>;

/// One CPU's ring queue, for an event loop to drive instead of a thread of its own: wait
/// until [`Ring::fd`] is readable (completions waiting), then call [`Ring::serve_ready`].
/// The thread that drives a ring must live as long as the ring (an event loop's own thread):
/// the kernel delivers requests as task work of the thread that submitted their entries.
pub struct Ring {
    queue: Arc<Queue>,
    serve: Serve,
    registered: std::sync::atomic::AtomicBool,
}

impl Ring {
    /// The ring's descriptor: readable when completions wait.
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.queue.ring.as_raw_fd()
    }

    /// Submits what is queued and hands over the requests that arrived, at most `limit`
    /// rounds of completions; registers the ring's entries the first time.
    pub fn serve_ready(&self, limit: usize) -> io::Result<crate::Flow> {
        let was = DRIVER.replace(Driver::Driving);
        let flow = self.serve_ready_driving(limit);
        DRIVER.set(if was == Driver::No { Driver::Idle } else { was });
        flow
    }

    fn serve_ready_driving(&self, limit: usize) -> io::Result<crate::Flow> {
        if !self.registered.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.queue.register()?;
        }
        let mut serve = |request: request::Request<'_>, responder: Responder| (self.serve)(request, responder);
        for _ in 0..limit {
            self.queue.submit_now()?;
            match self.queue.handle_completions(&mut serve) {
                Err(QueueEnd::Unmounted) => return Ok(crate::Flow::Unmounted),
                Err(QueueEnd::Failed(e)) => return Err(e),
                Ok(0) => return Ok(crate::Flow::Idle),
                Ok(_) => {}
            }
        }
        self.queue.submit_now()?;
        Ok(crate::Flow::More)
    }
}

/// How many queues the kernel expects: one per possible CPU (it is ready only when each has
/// an entry).
fn possible_cpus() -> io::Result<u16> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let last = text.trim().rsplit(['-', ',']).next().and_then(|n| n.parse::<u16>().ok());
    last.map(|n| n + 1).ok_or_else(|| io::Error::other(format!("cannot read the possible CPUs from {text:?}")))
}

/// One queue per CPU, their rings made but no entry registered yet.
pub(crate) struct Queues(Vec<Arc<Queue>>);

/// Makes the rings of one queue per CPU. This is what can fail for want of resources:
/// io_uring counts a ring's memory against the locked-memory limit (RLIMIT_MEMLOCK, per
/// user) of a process without CAP_IPC_LOCK, as a mount daemon running as the job's user is,
/// and a ring sized for a queue's growth takes about 330 KiB.
pub(crate) fn make(dev: &Arc<Dev>, depth: Depth, payload_size: usize) -> io::Result<Queues> {
    let cpus = possible_cpus()?;
    let mut queues = Vec::with_capacity(cpus.into());
    for qid in 0..cpus {
        let queue = Queue::new(qid, depth, payload_size, dev.clone()).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::ENOMEM) {
                " (io_uring counts rings against the locked-memory limit, `ulimit -l`, of a process without CAP_IPC_LOCK)"
            } else {
                ""
            };
            io::Error::new(e.kind(), format!("the ring of queue {qid} of {cpus} could not be made: {e}{hint}"))
        })?;
        queues.push(Arc::new(queue));
    }
    Ok(Queues(queues))
}

/// Starts the queues once the init reply has asked for io_uring, each serving requests with
/// `serve`: on a thread of its own each (`threads`), or returned as [`Ring`]s for the
/// caller's event loop to drive.
pub(crate) fn start(
    queues: Queues,
    threads: bool,
    serve: impl Fn(request::Request<'_>, Responder) + Clone + Send + Sync + 'static,
) -> io::Result<Vec<Ring>> {
    let watched = queues.0.iter().map(Arc::downgrade).collect();
    let mut rings = vec![];
    for queue in queues.0 {
        let serve = serve.clone();
        if threads {
            std::thread::Builder::new().name(format!("fuse-ring-{}", queue.qid)).spawn(move || queue.run(serve))?;
        } else {
            rings.push(Ring { queue, serve: Box::new(serve), registered: Default::default() });
        }
    }
    std::thread::Builder::new().name("fuse-ring-watch".into()).spawn(move || watch(watched))?;
    Ok(rings)
}

/// A queue's thread could not go on while the connection lives: its CPU's requests (and,
/// before every queue has registered, all requests) would wait for ever. Ending the process
/// closes /dev/fuse, so the kernel ends the connection and those callers get ENOTCONN.
fn queue_lost(qid: u16, e: &io::Error) -> ! {
    tracing::error!("io_uring queue {qid} failed ({e}): the mount cannot serve without it; ending, which ends the mount's connection");
    std::process::exit(1)
}

/// How long a request may stay unanswered before the watchdog says so.
const UNANSWERED_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Reports, once each, requests the file system has held longer than `UNANSWERED_AFTER`
/// (their callers are waiting); ends with the queues.
fn watch(queues: Vec<std::sync::Weak<Queue>>) {
    loop {
        std::thread::sleep(UNANSWERED_AFTER / 2);
        let mut alive = false;
        for queue in queues.iter().filter_map(std::sync::Weak::upgrade) {
            alive = true;
            for (index, entry) in queue.made_entries() {
                let mut state = entry.state.lock().unwrap();
                if let Some((since, unique, opcode)) = state.holding {
                    if !state.reported && since.elapsed() > UNANSWERED_AFTER {
                        state.reported = true;
                        tracing::warn!(
                            "request {unique} (opcode {opcode}) unanswered for {:.0} s (ring queue {}, entry {index}, dispatching {}, reply waiting {})",
                            since.elapsed().as_secs_f64(),
                            queue.qid,
                            state.dispatching,
                            state.deferred.is_some()
                        );
                    }
                }
            }
        }
        if !alive {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FUSE_SETLKW's header and argument area for a lock of `kind` (F_RDLCK, F_WRLCK, F_UNLCK).
    fn setlkw(kind: i32) -> (abi::fuse_in_header, Vec<u8>) {
        let header = abi::fuse_in_header { opcode: abi::fuse_opcode::FUSE_SETLKW as u32, ..Default::default() };
        let mut lk = abi::fuse_lk_in::new_zeroed();
        lk.lk.type_ = kind as u32;
        lk.lk.end = u64::MAX;
        let mut op_in = lk.as_bytes().to_vec();
        op_in.resize(abi::URING_OP_IN_OUT_SZ, 0);
        (header, op_in)
    }

    #[test]
    fn unlocks_sent_as_lock_waits_are_not_lock_waits() {
        for (kind, waits) in [(libc::F_WRLCK, true), (libc::F_RDLCK, true), (libc::F_UNLCK, false)] {
            let (header, op_in) = setlkw(kind);
            assert_eq!(is_lock_wait(&header, &op_in), waits, "lock type {kind}");
        }
        let (mut header, op_in) = setlkw(libc::F_WRLCK);
        header.opcode = abi::fuse_opcode::FUSE_SETLK as u32;
        assert!(!is_lock_wait(&header, &op_in), "F_SETLK does not wait");
    }
}
