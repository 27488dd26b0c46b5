//! Connections to servers. One connection per server (TCP, or the server's Unix socket when
//! it is on this node: `surge_proto::transport`) carries any number of concurrent requests. A request with no or a small payload is written to the socket by the thread that
//! sends it when nothing is queued ahead of it (no hand-off to another thread on the way out);
//! anything else joins a queue that a flusher task writes out in order. A reader task
//! hands each reply to whoever waits for its request id: a task (through [`Pending`]) or a
//! callback run on the reader itself ([`Connection::send_then`], which needs no task at all).
//! A connection that breaks fails everything waiting on it at once (no hang) and is replaced by
//! a fresh one on the next request.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use surge_proto::admin::{AwaitWatchers, Keeps, Notice, NoticeSeen, Watch};
use surge_proto::auth::{self, Secret};
use surge_proto::frame::{decode_message, encode_frame};
use surge_proto::frame_io::{read_frame, write_frame};
use surge_proto::handshake::{Challenge, Hello, Welcome};
use surge_proto::transport::{self, ReadHalf, WriteHalf};
use surge_proto::{Call, ErrorCode, FrameKind, Request, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;

use crate::error::{Error, Result};

const IO_BUFFER: usize = 256 * 1024;
/// Largest payload a sender writes to the socket itself (see [`WriteSide::push`]).
const DIRECT_PAYLOAD_MAX: usize = 64 * 1024;

/// A server's answer to a request that succeeded: the encoded reply (decode it with
/// [`Answer::reply`], knowing the call) and the payload (the bytes of a read).
#[derive(Debug, Default)]
pub struct Answer {
    pub message: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Answer {
    /// An answer that is nothing but a payload (a read answered without a server).
    pub fn payload(payload: Vec<u8>) -> Answer {
        Answer { message: Vec::new(), payload }
    }

    /// The reply of call `C`, which this answers.
    pub fn reply<C: Call>(&self) -> Result<C::Reply> {
        decode_message::<C::Reply>(&self.message)
            .map_err(|e| Error::new(ErrorCode::Protocol, format!("{}: undecodable reply: {e}", C::NAME)))
    }
}

pub type Response = Result<Answer>;
/// What a reply is handed to when it comes through [`Connection::send_then`].
pub type Callback = Box<dyn FnOnce(Response) + Send>;

/// Whoever waits for a reply.
enum Waiter {
    Task(oneshot::Sender<Response>),
    /// Run on the reader task; failed with TimedOut after the deadline by the sweeper.
    Call(Callback, std::time::Instant),
}

impl Waiter {
    fn answer(self, response: Response) {
        match self {
            Waiter::Task(tx) => {
                let _ = tx.send(response);
            }
            Waiter::Call(call, _) => call(response),
        }
    }
}

type Waiters = Arc<Mutex<HashMap<u64, Waiter>>>;

/// Receives a watching client's change notices (see [`crate::Client::watch`]). Called on the
/// connection's reader task: do little, never block.
pub trait Watcher: Send + Sync {
    /// Acts on `notice`. If the server asked for an acknowledgement (the change it reports is
    /// answered only after it), `seen` sends it when dropped: at once when this drops it, or
    /// later from wherever it is handed on (once the kernel was told, on another thread).
    fn notice(&self, notice: Notice, seen: Seen);
    /// The connection to server `server` broke: notices from it may have been missed.
    fn lost(&self, server: usize);
    /// What it keeps of what the servers tell it (names, attributes), and so must hear of
    /// when they change: everything, as a kernel's caches do, by default (see
    /// `surge_proto::admin::Keeps`).
    fn keeps(&self) -> Keeps {
        Keeps::Everything
    }
}

/// The acknowledgement a notice may owe its server: sent when dropped (nothing when the server
/// did not ask, or the connection is gone).
pub struct Seen {
    ack: u64,
    out: Option<Arc<WriteSide>>,
}

impl Seen {
    /// An acknowledgement owed to nobody (a notice made up by a test).
    pub fn none() -> Seen {
        Seen { ack: 0, out: None }
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        if let (Some(out), true) = (self.out.take(), self.ack != 0) {
            // Acted on: the change it reports may now be answered.
            let head = encode_frame(FrameKind::Request, 0, &Request::from(NoticeSeen { ack: self.ack }), 0);
            let _ = out.push(Outgoing { head, payload: Bytes::new() });
        }
    }
}

/// A watcher and the index of the server a connection goes to.
pub type WatchedBy = (Arc<dyn Watcher>, usize);

/// One frame on its way out: header and message, then the raw payload.
struct Outgoing {
    head: Vec<u8>,
    payload: Bytes,
}

impl Outgoing {
    fn len(&self) -> usize {
        self.head.len() + self.payload.len()
    }

    /// Drops the first `n` bytes (written already).
    fn advance(&mut self, n: usize) {
        let from_head = n.min(self.head.len());
        self.head.drain(..from_head);
        bytes::Buf::advance(&mut self.payload, n - from_head);
    }
}

/// The sending half of a connection, shared by every sender and the flusher task.
struct WriteSide {
    half: WriteHalf,
    /// The connection's broken flag (set here when a write fails, by the reader when reading does).
    broken: Arc<AtomicBool>,
    state: Mutex<WriteState>,
    /// Wakes the flusher: frames were queued, or the connection is being dropped.
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct WriteState {
    queue: VecDeque<Outgoing>,
    /// The flusher owns the socket until the queue is empty again.
    flushing: bool,
    closed: bool,
}

impl WriteSide {
    /// Writes a small `out` from the calling thread if nothing is ahead of it and the
    /// socket takes it, else queues (the rest of) it for the flusher. The state lock keeps frames whole and in
    /// order: a sender writes directly only while no flush is under way.
    fn push(&self, mut out: Outgoing) -> std::io::Result<()> {
        let mut st = self.state.lock().unwrap();
        if st.closed || self.broken.load(Ordering::Relaxed) {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        // Bulk payloads always go through the flusher: the copy into the socket then runs
        // beside the writer rather than in its way (a sender writing its own 1 MiB frames
        // costs sequential writes through the mount about a tenth of their rate).
        if !st.flushing && st.queue.is_empty() && out.payload.len() <= DIRECT_PAYLOAD_MAX {
            match write_now(&self.half, &mut out) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    self.broken.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        st.queue.push_back(out);
        if !st.flushing {
            st.flushing = true;
            self.wake.notify_one();
        }
        Ok(())
    }
}

/// Writes as much of `out` as the socket takes without waiting; true when all of it went.
fn write_now(half: &WriteHalf, out: &mut Outgoing) -> std::io::Result<bool> {
    while out.len() > 0 {
        let slices = [std::io::IoSlice::new(&out.head), std::io::IoSlice::new(&out.payload)];
        match half.try_write_vectored(&slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => out.advance(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

pub struct Connection {
    server: String,
    out: Arc<WriteSide>,
    waiters: Waiters,
    next_id: AtomicU64,
    broken: Arc<AtomicBool>,
    /// The server's data directory, when it is on this node (see [`surge_proto::LocalData`]).
    local_dir: Option<PathBuf>,
    /// Clients may write the server's data files themselves (not where its share is mirrored).
    local_writes: bool,
    /// The server checks permissions against this client's MUNGE-proven identity.
    checks_identity: bool,
    /// The server holds writes at a high-water mark (see [`surge_proto::handshake::Welcome`]).
    holds_writers: bool,
}

impl Drop for Connection {
    /// Lets the flusher end, which closes the socket (the server then releases what this
    /// connection held open).
    fn drop(&mut self) {
        self.out.state.lock().unwrap().closed = true;
        self.out.wake.notify_one();
    }
}

/// A request on its way; `wait` gives its reply.
pub struct Pending {
    rx: oneshot::Receiver<Response>,
    id: u64,
    waiters: Waiters,
    server: String,
    op: &'static str,
}

impl Pending {
    /// A request already answered with `data` (read-ahead keeps the unread tail of a chunk so).
    pub fn ready(data: Vec<u8>) -> Pending {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Ok(Answer::payload(data)));
        Pending { rx, id: 0, waiters: Arc::new(Mutex::new(HashMap::new())), server: String::new(), op: "read" }
    }

    /// The outcome of a local write (see [`crate::local::LocalWriter`]).
    pub(crate) fn local(rx: oneshot::Receiver<Response>) -> Pending {
        Pending { rx, id: 0, waiters: Arc::new(Mutex::new(HashMap::new())), server: "this node".into(), op: "local write" }
    }

    /// The reply, if it has arrived (a connection lost counts as arrived).
    pub fn try_take(&mut self) -> Option<Response> {
        match self.rx.try_recv() {
            Ok(response) => Some(response),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(connection_lost(self.op, &self.server))),
        }
    }

    /// The reply, however long it takes (a wait for a lock); a connection lost ends it.
    pub async fn wait_untimed(self) -> Response {
        self.rx.await.unwrap_or_else(|_| Err(connection_lost(self.op, &self.server)))
    }

    pub async fn wait(self, timeout: Duration) -> Response {
        match tokio::time::timeout(timeout, self.rx).await {
            Ok(Ok(response)) => response,
            Ok(Err(_)) => Err(connection_lost(self.op, &self.server)),
            Err(_) => {
                self.waiters.lock().unwrap().remove(&self.id);
                Err(Error::new(ErrorCode::TimedOut, format!("{}: no answer from {} within {:?}", self.op, self.server, timeout)))
            }
        }
    }
}

/// What the server answered a frame of the handshake.
enum Handshake<T> {
    Answered(T),
    Refused(surge_proto::Error),
    /// Closed, or something that is no answer.
    Closed,
}

/// One frame of the handshake and its answer, before the reader and flusher tasks run.
async fn exchange<M: serde::Serialize, T: serde::de::DeserializeOwned>(
    reader: &mut BufReader<ReadHalf>,
    writer: &mut BufWriter<WriteHalf>,
    message: &M,
) -> std::result::Result<Handshake<T>, String> {
    write_frame(writer, FrameKind::Request, 1, message, &[]).await.map_err(|e| e.to_string())?;
    writer.flush().await.map_err(|e| e.to_string())?;
    let Some(frame) = read_frame(reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| e.to_string())? else { return Ok(Handshake::Closed) };
    Ok(match frame.header.kind {
        FrameKind::Reply => decode_message::<T>(&frame.message).map_or(Handshake::Closed, Handshake::Answered),
        FrameKind::Failure => decode_message::<surge_proto::Error>(&frame.message).map_or(Handshake::Closed, Handshake::Refused),
        _ => Handshake::Closed,
    })
}

/// The error of a request whose connection broke before its reply came.
fn connection_lost(op: &str, server: &str) -> Error {
    Error::new(ErrorCode::ServerDown, format!("{op}: connection to {server} lost"))
}

fn fail_all(waiters: &Waiters, server: &str, why: &str) {
    let drained: Vec<_> = waiters.lock().unwrap().drain().collect();
    for (_, waiter) in drained {
        waiter.answer(Err(Error::new(ErrorCode::ServerDown, format!("server {server}: {why}"))));
    }
}

/// How a connection is made: from which address, how long the handshake may take, and what
/// the client asks of the server beyond answering (see [`Connection::open`]).
#[derive(Clone, Copy)]
pub struct Dial {
    /// The node's address to connect from (a test "node" has its own); None: the OS picks.
    pub source: Option<IpAddr>,
    /// Reach a server on this node over its Unix socket (see [`Connection::open`]).
    pub local_socket: bool,
    pub timeout: Duration,
    /// Ask that this connection's attribute changes wait for watchers' acknowledgements
    /// ([`surge_proto::admin::AwaitWatchers`]).
    pub await_watchers: bool,
}

impl Connection {
    /// Connects (from `dial.source` when given), answers the server's challenge and starts
    /// the reader, flusher and sweeper tasks.
    /// With `watcher`, the connection asks the server for change notices (before it returns,
    /// so nothing it is told later can change unnoticed) and hands them to the watcher.
    /// `share`: another server's share this server took over (see [`surge_proto::mirror`]).
    pub async fn open(
        addr: SocketAddr,
        dial: Dial,
        secret: &Secret,
        session: u64,
        watcher: Option<WatchedBy>,
        share: Option<u32>,
    ) -> Result<Arc<Connection>> {
        let server = addr.to_string();
        let down = |what: &str, e: &dyn std::fmt::Display| Error::new(ErrorCode::ServerDown, format!("{what} {server}: {e}"));
        let timeout = dial.timeout;
        // A server on this node is reached over its Unix socket (a test "node" dialing from an
        // address of its own reaches only its own node's server that way).
        let on_this_node = dial.local_socket && dial.source.is_none_or(|ip| ip == addr.ip());
        let (rd, wr) = match on_this_node.then(|| transport::connect_local(addr)).flatten() {
            Some(stream) => transport::split_unix(stream),
            None => {
                let connect = async {
                    let socket =
                        if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.map_err(|e| down("socket for", &e))?;
                    if let Some(ip) = dial.source {
                        socket.bind(SocketAddr::new(ip, 0)).map_err(|e| down(&format!("bind {ip} to reach"), &e))?;
                    }
                    socket.connect(addr).await.map_err(|e| down("connect to", &e))
                };
                let stream: TcpStream = tokio::time::timeout(timeout, connect)
                    .await
                    .map_err(|_| Error::new(ErrorCode::TimedOut, format!("connect to {server}: no answer within {timeout:?}")))??;
                transport::split_tcp(stream).map_err(|e| down("configure", &e))?
            }
        };
        let mut reader = BufReader::with_capacity(IO_BUFFER, rd);
        let mut writer = BufWriter::with_capacity(IO_BUFFER, wr);

        let handshake = async {
            let frame = read_frame(&mut reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| down("handshake with", &e))?;
            let frame = frame.ok_or_else(|| down("handshake with", &"closed"))?;
            let (challenge, wants_identity) = match decode_message::<Challenge>(&frame.message) {
                Ok(Challenge { challenge, wants_identity, .. }) if frame.header.kind == FrameKind::Reply => (challenge, wants_identity),
                _ => return Err(Error::new(ErrorCode::Protocol, format!("{server} did not send a challenge"))),
            };
            // Who this process is, when the server checks permissions itself.
            let identity = if wants_identity {
                let payload = surge_proto::identity::payload_of(&challenge);
                let made = tokio::task::spawn_blocking(move || surge_proto::identity::credential(&payload)).await;
                match made {
                    Ok(Ok(credential)) => Some(credential),
                    Ok(Err(why)) => {
                        return Err(Error::new(ErrorCode::Unauthenticated, format!("{server} wants a MUNGE credential: {why}")))
                    }
                    Err(e) => return Err(Error::new(ErrorCode::Io, format!("making a MUNGE credential: {e}"))),
                }
            } else {
                None
            };
            let hello = Hello { session, proof: auth::answer(secret, &challenge), identity, share };
            let welcome = match exchange::<_, Welcome>(&mut reader, &mut writer, &hello).await.map_err(|e| down("handshake with", &e))? {
                Handshake::Answered(welcome) => welcome,
                Handshake::Refused(e) => return Err(Error::new(e.code, format!("{server} refused this client: {}", e.detail))),
                Handshake::Closed => {
                    return Err(Error::new(ErrorCode::Unauthenticated, format!("{server} closed the connection during authentication")))
                }
            };
            if watcher.is_some() {
                let keeps = watcher.as_ref().map_or(Keeps::Everything, |(w, _)| w.keeps());
                let watch = Request::from(Watch { keeps });
                match exchange::<_, ()>(&mut reader, &mut writer, &watch).await.map_err(|e| down("watch", &e))? {
                    Handshake::Answered(()) => {}
                    _ => return Err(Error::new(ErrorCode::Protocol, format!("{server} refused to send change notices"))),
                }
            }
            if dial.await_watchers {
                let asked = Request::from(AwaitWatchers);
                match exchange::<_, ()>(&mut reader, &mut writer, &asked).await.map_err(|e| down("await-watchers", &e))? {
                    Handshake::Answered(()) => {}
                    _ => return Err(Error::new(ErrorCode::Protocol, format!("{server} refused to await its watchers"))),
                }
            }
            let local = welcome.local.filter(crate::local::is_on_this_node);
            let local_writes = local.as_ref().is_some_and(|local| local.writes);
            Ok((local.map(|local| PathBuf::from(local.dir)), local_writes, wants_identity, welcome.holds_writers))
        };
        let (local_dir, local_writes, wants_identity, holds_writers) = tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| Error::new(ErrorCode::TimedOut, format!("handshake with {server}: no answer within {timeout:?}")))??;

        let waiters: Waiters = Arc::new(Mutex::new(HashMap::new()));
        let broken = Arc::new(AtomicBool::new(false));
        // The handshake's frames were flushed: nothing is left in the buffer.
        let out =
            Arc::new(WriteSide { half: writer.into_inner(), broken: broken.clone(), state: Default::default(), wake: Default::default() });
        tokio::spawn(flush_loop(out.clone(), waiters.clone(), server.clone()));
        tokio::spawn(read_loop(reader, waiters.clone(), broken.clone(), server.clone(), watcher.map(|w| (w, out.clone()))));
        tokio::spawn(sweep_loop(waiters.clone(), broken.clone(), server.clone()));
        Ok(Arc::new(Connection {
            server,
            out,
            waiters,
            next_id: AtomicU64::new(2),
            broken,
            local_dir,
            local_writes,
            checks_identity: wants_identity,
            holds_writers,
        }))
    }

    /// The server's data directory when it is on this node: its files can be read and written
    /// directly (see the `local` module).
    pub fn checks_identity(&self) -> bool {
        self.checks_identity
    }

    /// Whether this connection is a Unix socket to a server on this node (else TCP).
    pub fn over_local_socket(&self) -> bool {
        self.out.half.is_local()
    }

    pub fn local_dir(&self) -> Option<&Path> {
        self.local_dir.as_deref()
    }

    /// Whether the data files in [`Connection::local_dir`] may be written here too.
    pub fn local_writes(&self) -> bool {
        self.local_writes
    }

    /// Whether the server holds writes at a high-water mark.
    pub fn holds_writers(&self) -> bool {
        self.holds_writers
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Sends a request; the reply arrives through the returned [`Pending`].
    pub fn send(&self, request: &Request, payload: Bytes) -> Result<Pending> {
        let (reply_tx, rx) = oneshot::channel();
        let id = self.send_for(request, payload, Waiter::Task(reply_tx)).map_err(|(e, _)| e)?;
        Ok(Pending { rx, id, waiters: self.waiters.clone(), server: self.server.clone(), op: request.name() })
    }

    /// Sends a request whose reply (or failure, or TimedOut after `timeout`) is handed to
    /// `then` on the connection's reader task. Callable from any thread, inside a runtime or
    /// not: a caller outside it (the FUSE session thread) then costs the runtime no wake-up on
    /// the way out. `then` must be quick: it holds up every reply behind it.
    pub fn send_then(&self, request: &Request, timeout: Duration, then: Callback) {
        let deadline = std::time::Instant::now() + timeout;
        if let Err((e, Some(Waiter::Call(then, _)))) = self.send_for(request, Bytes::new(), Waiter::Call(then, deadline)) {
            then(Err(e));
        }
    }

    /// Registers `waiter` under a fresh request id and sends; on failure the waiter comes back
    /// (unless the reader already failed it).
    fn send_for(&self, request: &Request, payload: Bytes, waiter: Waiter) -> std::result::Result<u64, (Error, Option<Waiter>)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Every request, by name (SURGE_LOG=surge_client=trace): what an operation costs in
        // round trips.
        tracing::trace!(server = %self.server, op = request.name(), id, "request");
        let lost = || connection_lost(request.name(), &self.server);
        if self.is_broken() {
            return Err((lost(), Some(waiter)));
        }
        self.waiters.lock().unwrap().insert(id, waiter);
        let head = encode_frame(FrameKind::Request, id, request, payload.len());
        if self.out.push(Outgoing { head, payload }).is_err() {
            return Err((lost(), self.waiters.lock().unwrap().remove(&id)));
        }
        Ok(id)
    }
}

/// Writes out queued frames, in order, until the connection fails or is dropped.
async fn flush_loop(out: Arc<WriteSide>, waiters: Waiters, server: String) {
    let result: std::io::Result<()> = async {
        loop {
            out.wake.notified().await;
            loop {
                let batch: Vec<Outgoing> = {
                    let mut st = out.state.lock().unwrap();
                    if st.closed {
                        // Readers may still hold this side (to acknowledge notices): end the
                        // stream now so the server closes and the reader ends too.
                        use std::os::fd::AsRawFd;
                        // SAFETY: shutdown on a socket descriptor this side owns; no memory involved.
                        unsafe { libc::shutdown(out.half.as_raw_fd(), libc::SHUT_WR) };
                        return Ok(());
                    }
                    if st.queue.is_empty() {
                        st.flushing = false;
                        break;
                    }
                    st.queue.drain(..).collect()
                };
                for mut frame in batch {
                    while !write_now(&out.half, &mut frame)? {
                        out.half.writable().await?;
                    }
                }
            }
        }
    }
    .await;
    if let Err(e) = result {
        out.broken.store(true, Ordering::Relaxed);
        fail_all(&waiters, &server, &format!("send failed: {e}"));
    }
}

/// Fails callbacks whose deadline passed (tasks time out on their own, see [`Pending::wait`]).
async fn sweep_loop(waiters: Waiters, broken: Arc<AtomicBool>, server: String) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while !broken.load(Ordering::Relaxed) {
        tick.tick().await;
        let now = std::time::Instant::now();
        let expired: Vec<Waiter> = {
            let mut waiters = waiters.lock().unwrap();
            let ids: Vec<u64> =
                waiters.iter().filter(|(_, w)| matches!(w, Waiter::Call(_, deadline) if *deadline < now)).map(|(id, _)| *id).collect();
            ids.iter().filter_map(|id| waiters.remove(id)).collect()
        };
        for waiter in expired {
            waiter.answer(Err(Error::new(ErrorCode::TimedOut, format!("no answer from {server} in time"))));
        }
    }
}

/// `watcher`: who gets the notices, and the way out for their acknowledgements.
async fn read_loop(
    mut reader: BufReader<ReadHalf>,
    waiters: Waiters,
    broken: Arc<AtomicBool>,
    server: String,
    watcher: Option<(WatchedBy, Arc<WriteSide>)>,
) {
    let why = loop {
        match read_frame(&mut reader, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN).await {
            Ok(Some(frame)) if frame.header.kind == FrameKind::Notice => match (&watcher, decode_message::<Notice>(&frame.message)) {
                (Some(((watcher, _), outgoing)), Ok(notice)) => {
                    watcher.notice(notice, Seen { ack: frame.header.request_id, out: Some(outgoing.clone()) });
                }
                (None, _) => break "a change notice on a connection that did not ask for them".to_string(),
                (_, Err(e)) => break format!("undecodable notice: {e}"),
            },
            Ok(Some(frame)) => {
                let response = match frame.header.kind {
                    FrameKind::Failure => match decode_message::<surge_proto::Error>(&frame.message) {
                        Ok(e) => Err(Error::new(e.code, format!("server {server}: {}", e.detail))),
                        Err(e) => Err(Error::new(ErrorCode::Protocol, format!("server {server}: undecodable failure: {e}"))),
                    },
                    FrameKind::Reply => Ok(Answer { message: frame.message, payload: frame.payload }),
                    FrameKind::Request => break "the server sent a request".to_string(),
                    FrameKind::Notice => unreachable!("notices are taken above"),
                };
                if frame.header.request_id == 0 {
                    // A connection-level complaint (the server is closing on us).
                    if let Err(e) = response {
                        break e.detail;
                    }
                    continue;
                }
                let waiter = waiters.lock().unwrap().remove(&frame.header.request_id);
                if let Some(waiter) = waiter {
                    waiter.answer(response);
                }
            }
            Ok(None) => break "connection closed".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    broken.store(true, Ordering::Relaxed);
    if let Some(((watcher, index), _)) = &watcher {
        watcher.lost(*index);
    }
    fail_all(&waiters, &server, &why);
}
