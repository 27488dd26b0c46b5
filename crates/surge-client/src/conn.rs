//! Connections to servers. One TCP connection per server carries any number of concurrent
//! requests: a writer task batches outgoing frames, a reader task hands each reply to whoever
//! waits for its request id. A connection that breaks fails everything waiting on it at once
//! (no hang) and is replaced by a fresh one on the next request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use surge_proto::auth::{self, Secret};
use surge_proto::frame::{decode_message, encode_frame};
use surge_proto::frame_io::{read_frame, write_frame};
use surge_proto::{ErrorCode, FrameKind, Notice, Reply, Request, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};

const IO_BUFFER: usize = 256 * 1024;

pub type Response = Result<(Reply, Vec<u8>)>;
type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Response>>>>;

/// Receives a watching client's change notices (see [`crate::Client::watch`]). Called on the
/// connection's reader task: do little, never block.
pub trait Watcher: Send + Sync {
    /// Once this returns, the notice is acknowledged if the server asked (a name changed) and
    /// the change may be answered: act on it before returning.
    fn notice(&self, notice: Notice);
    /// The connection to server `server` broke: notices from it may have been missed.
    fn lost(&self, server: usize);
}

/// A watcher and the index of the server a connection goes to.
pub type WatchedBy = (Arc<dyn Watcher>, usize);

struct Outgoing {
    head: Vec<u8>,
    payload: Bytes,
}

pub struct Connection {
    server: String,
    tx: mpsc::UnboundedSender<Outgoing>,
    waiters: Waiters,
    next_id: AtomicU64,
    broken: Arc<AtomicBool>,
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
        let _ = tx.send(Ok((Reply::Data, data)));
        Pending { rx, id: 0, waiters: Arc::new(Mutex::new(HashMap::new())), server: String::new(), op: "read" }
    }

    pub async fn wait(self, timeout: Duration) -> Response {
        match tokio::time::timeout(timeout, self.rx).await {
            Ok(Ok(response)) => response,
            Ok(Err(_)) => Err(Error::new(ErrorCode::ServerDown, format!("{}: connection to {} lost", self.op, self.server))),
            Err(_) => {
                self.waiters.lock().unwrap().remove(&self.id);
                Err(Error::new(ErrorCode::TimedOut, format!("{}: no answer from {} within {:?}", self.op, self.server, timeout)))
            }
        }
    }
}

fn fail_all(waiters: &Waiters, server: &str, why: &str) {
    let drained: Vec<_> = waiters.lock().unwrap().drain().collect();
    for (_, tx) in drained {
        let _ = tx.send(Err(Error::new(ErrorCode::ServerDown, format!("server {server}: {why}"))));
    }
}

impl Connection {
    /// Connects (from `source` when given, so a test "node" has its own address), answers the
    /// server's challenge and starts the reader and writer tasks.
    /// With `watcher`, the connection asks the server for change notices (before it returns,
    /// so nothing it is told later can change unnoticed) and hands them to the watcher.
    pub async fn open(addr: SocketAddr, source: Option<IpAddr>, secret: &Secret, session: u64, timeout: Duration, watcher: Option<WatchedBy>) -> Result<Arc<Connection>> {
        let server = addr.to_string();
        let down = |what: &str, e: &dyn std::fmt::Display| Error::new(ErrorCode::ServerDown, format!("{what} {server}: {e}"));
        let connect = async {
            let socket = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.map_err(|e| down("socket for", &e))?;
            if let Some(ip) = source {
                socket.bind(SocketAddr::new(ip, 0)).map_err(|e| down(&format!("bind {ip} to reach"), &e))?;
            }
            socket.connect(addr).await.map_err(|e| down("connect to", &e))
        };
        let stream: TcpStream = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| Error::new(ErrorCode::TimedOut, format!("connect to {server}: no answer within {timeout:?}")))??;
        stream.set_nodelay(true).map_err(|e| down("configure", &e))?;
        let (rd, wr) = stream.into_split();
        let mut reader = BufReader::with_capacity(IO_BUFFER, rd);
        let mut writer = BufWriter::with_capacity(IO_BUFFER, wr);

        let handshake = async {
            let frame = read_frame(&mut reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| down("handshake with", &e))?;
            let frame = frame.ok_or_else(|| down("handshake with", &"closed"))?;
            let challenge = match decode_message::<Reply>(&frame.message) {
                Ok(Reply::Challenge { challenge, .. }) => challenge,
                _ => return Err(Error::new(ErrorCode::Protocol, format!("{server} did not send a challenge"))),
            };
            let hello = Request::Hello { session, proof: auth::answer(secret, &challenge) };
            write_frame(&mut writer, FrameKind::Request, 1, &hello, &[]).await.map_err(|e| down("handshake with", &e))?;
            writer.flush().await.map_err(|e| down("handshake with", &e))?;
            let frame = read_frame(&mut reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| down("handshake with", &e))?;
            match frame.map(|f| decode_message::<Reply>(&f.message)) {
                Some(Ok(Reply::Welcome)) => {}
                Some(Ok(Reply::Error { code, detail })) => return Err(Error::new(code, format!("{server} refused this client: {detail}"))),
                _ => return Err(Error::new(ErrorCode::Unauthenticated, format!("{server} closed the connection during authentication"))),
            }
            if watcher.is_some() {
                write_frame(&mut writer, FrameKind::Request, 1, &Request::Watch, &[]).await.map_err(|e| down("watch", &e))?;
                writer.flush().await.map_err(|e| down("watch", &e))?;
                let frame = read_frame(&mut reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| down("watch", &e))?;
                match frame.map(|f| decode_message::<Reply>(&f.message)) {
                    Some(Ok(Reply::Ok)) => {}
                    _ => return Err(Error::new(ErrorCode::Protocol, format!("{server} refused to send change notices"))),
                }
            }
            Ok(())
        };
        tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| Error::new(ErrorCode::TimedOut, format!("handshake with {server}: no answer within {timeout:?}")))??;

        let waiters: Waiters = Arc::new(Mutex::new(HashMap::new()));
        let broken = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(writer, rx, waiters.clone(), broken.clone(), server.clone()));
        tokio::spawn(read_loop(reader, waiters.clone(), broken.clone(), server.clone(), watcher.map(|w| (w, tx.clone()))));
        Ok(Arc::new(Connection { server, tx, waiters, next_id: AtomicU64::new(2), broken }))
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Queues a request; the reply arrives through the returned [`Pending`].
    pub fn send(&self, request: &Request, payload: Bytes) -> Result<Pending> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply_tx, rx) = oneshot::channel();
        self.waiters.lock().unwrap().insert(id, reply_tx);
        let head = encode_frame(FrameKind::Request, id, request, payload.len());
        let pending = Pending { rx, id, waiters: self.waiters.clone(), server: self.server.clone(), op: request.name() };
        if self.is_broken() || self.tx.send(Outgoing { head, payload }).is_err() {
            self.waiters.lock().unwrap().remove(&id);
            return Err(Error::new(ErrorCode::ServerDown, format!("{}: connection to {} lost", request.name(), self.server)));
        }
        Ok(pending)
    }
}

async fn write_loop(mut writer: BufWriter<tokio::net::tcp::OwnedWriteHalf>, mut rx: mpsc::UnboundedReceiver<Outgoing>, waiters: Waiters, broken: Arc<AtomicBool>, server: String) {
    let result: std::io::Result<()> = async {
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(out) = next {
                writer.write_all(&out.head).await?;
                if !out.payload.is_empty() {
                    writer.write_all(&out.payload).await?;
                }
                next = rx.try_recv().ok();
            }
            writer.flush().await?;
        }
        Ok(())
    }
    .await;
    broken.store(true, Ordering::Relaxed);
    if let Err(e) = result {
        fail_all(&waiters, &server, &format!("send failed: {e}"));
    }
}

/// `watcher`: who gets the notices, and the way out for their acknowledgements.
async fn read_loop(
    mut reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    waiters: Waiters,
    broken: Arc<AtomicBool>,
    server: String,
    watcher: Option<(WatchedBy, mpsc::UnboundedSender<Outgoing>)>,
) {
    let why = loop {
        match read_frame(&mut reader, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN).await {
            Ok(Some(frame)) if frame.header.kind == FrameKind::Notice => match (&watcher, decode_message::<Notice>(&frame.message)) {
                (Some(((watcher, _), outgoing)), Ok(notice)) => {
                    watcher.notice(notice);
                    let ack = frame.header.request_id;
                    if ack != 0 {
                        // Acted on: the change it reports may now be answered.
                        let head = encode_frame(FrameKind::Request, 0, &Request::NoticeSeen { ack }, 0);
                        let _ = outgoing.send(Outgoing { head, payload: Bytes::new() });
                    }
                }
                (None, _) => break "a change notice on a connection that did not ask for them".to_string(),
                (_, Err(e)) => break format!("undecodable notice: {e}"),
            },
            Ok(Some(frame)) => {
                let response = match decode_message::<Reply>(&frame.message) {
                    Ok(Reply::Error { code, detail }) => Err(Error::new(code, format!("server {server}: {detail}"))),
                    Ok(reply) => Ok((reply, frame.payload)),
                    Err(e) => Err(Error::new(ErrorCode::Protocol, format!("server {server}: {e}"))),
                };
                if frame.header.request_id == 0 {
                    // A connection-level complaint (the server is closing on us).
                    if let Err(e) = response {
                        break e.detail;
                    }
                    continue;
                }
                if let Some(tx) = waiters.lock().unwrap().remove(&frame.header.request_id) {
                    let _ = tx.send(response);
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
