//! One client connection: challenge, authentication, then request frames answered in order.
//!
//! Requests are handled inline on the connection's task (metadata steps take microseconds;
//! chunk I/O goes to node-local SSD or RAM) by the connection's [`Session`]
//! ([`crate::handle`]), and replies are buffered and flushed only when no further request is
//! already waiting, so a client that pipelines gets batched replies. The slow requests (a
//! stage copy order, a stage submission) are answered by tasks of their own when done, out of
//! order; so is a change whose notices watchers must acknowledge first (see
//! [`crate::watch`]). Clients match answers to requests by id.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use surge_meta::access::Caller;
use surge_meta::error::{Result, ServerError};
use surge_proto::frame::{decode_message, encode_frame};
use surge_proto::frame_io::{read_frame, write_frame, ReadError};
use surge_proto::handshake::{Challenge, Hello, Welcome};
use surge_proto::transport::{ReadHalf, WriteHalf};
use surge_proto::{auth, ErrorCode, FrameHeader, FrameKind, Request, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::Mutex as AsyncMutex;

use crate::caller;
use crate::data::ReadSource;
use crate::handle::Answer;
use crate::session::Session;
use crate::ServerState;

/// A peer that connects and says nothing is dropped after this long.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Before authentication a frame can only be a small Hello.
const PRE_AUTH_MAX_MESSAGE: usize = 4096;
const IO_BUFFER: usize = 256 * 1024;

/// The connection's writing half: the request loop, out-of-order answers and notices share it.
pub(crate) type SharedWriter = Arc<AsyncMutex<BufWriter<WriteHalf>>>;

/// Serves one client's connection, TCP or a Unix socket (the same in every way but the
/// kernel's path: `peer` names a TCP client, or this server's own address for one on its node).
pub async fn serve(server: Arc<ServerState>, (rd, wr): (ReadHalf, WriteHalf), peer: SocketAddr) -> Result<()> {
    let mut reader = BufReader::with_capacity(IO_BUFFER, rd);
    let mut writer = BufWriter::with_capacity(IO_BUFFER, wr);
    let Some((caller, server)) = authenticate(&server, &mut reader, &mut writer, peer).await? else {
        return Ok(());
    };
    let writer = Arc::new(AsyncMutex::new(writer));
    // Dropped on every way out of here, giving back what the connection held.
    let mut session = Session::new(server, writer.clone(), peer);
    session.caller = caller;
    serve_requests(&mut session, &mut reader, &writer).await
}

/// Challenge, then the client's answer: `Some` when it holds the instance's secret (and,
/// when this server checks identities, a MUNGE credential for this connection: then whom
/// the requests are checked as), with the share it asked for (this server's, or one it
/// stands in for).
async fn authenticate(
    server: &Arc<ServerState>,
    reader: &mut BufReader<ReadHalf>,
    writer: &mut BufWriter<WriteHalf>,
    peer: SocketAddr,
) -> Result<Option<(Option<Caller>, Arc<ServerState>)>> {
    let mut challenge = [0u8; auth::CHALLENGE_LEN];
    getrandom::getrandom(&mut challenge).map_err(|e| ServerError::new(ErrorCode::Io, format!("no randomness for the challenge: {e}")))?;
    let hello = Challenge {
        challenge,
        server_index: server.index as u32,
        server_count: server.count as u32,
        wants_identity: server.ticket_key.is_some(),
    };
    write_frame(writer, FrameKind::Reply, 0, &hello, &[]).await?;
    writer.flush().await?;

    let first = tokio::time::timeout(HELLO_TIMEOUT, read_frame(reader, PRE_AUTH_MAX_MESSAGE, 0))
        .await
        .map_err(|_| ServerError::new(ErrorCode::TimedOut, format!("{peer} sent no hello within {HELLO_TIMEOUT:?}")))?;
    let frame = match first {
        Ok(Some(frame)) => frame,
        Ok(None) => return Ok(None),
        Err(e) => {
            refuse(writer, 0, ErrorCode::Protocol, &e.to_string()).await;
            return Err(ServerError::new(ErrorCode::Protocol, format!("bad first frame from {peer}: {e}")));
        }
    };
    let request_id = frame.header.request_id;
    match decode_message::<Hello>(&frame.message) {
        Ok(Hello { proof, identity, share, .. })
            if frame.header.kind == FrameKind::Request && auth::verify(&server.secret, &challenge, &proof) =>
        {
            let Some(share) = server.share(share) else {
                let detail = format!("server {} does not serve server {}'s share", server.index, share.unwrap_or_default());
                refuse(writer, request_id, ErrorCode::ServerDown, &detail).await;
                return Ok(None);
            };
            let caller = match (server.ticket_key.is_some(), identity) {
                (false, _) => None,
                (true, None) => {
                    refuse(writer, request_id, ErrorCode::Unauthenticated, "this instance wants a MUNGE credential (is munged running?)")
                        .await;
                    return Ok(None);
                }
                (true, Some(credential)) => match caller::prove(credential, &challenge).await {
                    Ok(caller) => Some(caller),
                    Err(why) => {
                        tracing::warn!(%peer, "refused a client's identity: {why}");
                        refuse(writer, request_id, ErrorCode::Unauthenticated, &why).await;
                        return Ok(None);
                    }
                },
            };
            write_frame(
                writer,
                FrameKind::Reply,
                request_id,
                &Welcome { local: share.local.clone(), holds_writers: share.workflow.holds_writers() },
                &[],
            )
            .await?;
            writer.flush().await?;
            Ok(Some((caller, share)))
        }
        Ok(_) => {
            tracing::warn!(%peer, "refused a client with a wrong instance token");
            refuse(writer, request_id, ErrorCode::Unauthenticated, "wrong instance token").await;
            Ok(None)
        }
        Err(_) => {
            refuse(writer, request_id, ErrorCode::Unauthenticated, "the first request must be hello").await;
            Err(ServerError::new(ErrorCode::Protocol, format!("{peer} did not start with hello")))
        }
    }
}

async fn serve_requests<R>(session: &mut Session, reader: &mut BufReader<R>, writer: &SharedWriter) -> Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
{
    loop {
        // Replies to a burst of requests are written together and sent once nothing more is
        // waiting to be read. That check sits here, before the wait for the next frame,
        // because not every request writes a reply: a one-way acknowledgement, or one answered
        // later by a task, ending a burst must not hold back the replies before it.
        if reader.buffer().is_empty() {
            let mut w = writer.lock().await;
            if !w.buffer().is_empty() {
                w.flush().await?;
            }
        }
        let frame = match read_frame(reader, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(()),
            Err(ReadError::Io(e)) => return Err(e.into()),
            Err(e) => {
                // The stream can no longer be trusted to be in step: say why, then close.
                refuse(&mut *writer.lock().await, 0, ErrorCode::Protocol, &e.to_string()).await;
                return Err(ServerError::new(ErrorCode::Protocol, format!("protocol error: {e}")));
            }
        };
        let request_id = frame.header.request_id;
        let (answer, op) = match decode_message::<Request>(&frame.message) {
            Ok(request) if frame.header.kind == FrameKind::Request => {
                let op = request.name();
                (session.handle(request, frame.payload), op)
            }
            Ok(_) => (Answer::Failure(ServerError::new(ErrorCode::Protocol, "expected a request frame")), "?"),
            Err(e) => (Answer::Failure(ServerError::new(ErrorCode::Protocol, e.to_string())), "?"),
        };
        // Answered once the watchers acknowledged and the journal holds what must be
        // durable, by a task of its own: this loop must go on reading, since the
        // acknowledgement this connection owes another change may be next in line (two nodes
        // creating in one directory would otherwise each wait for the other until the timeout).
        let awaited = std::mem::take(&mut session.awaited);
        let durable = session.durable.take();
        let mirrored = session.mirrored.take();
        let answer = if awaited.is_empty() && durable.is_none() && mirrored.is_none() {
            answer
        } else {
            let waits = Waits { awaited, durable, mirrored, server: session.server.clone() };
            match answer {
                Answer::Reply { message, .. } => answer_after(waits, Ok(message)),
                Answer::Failure(e) => answer_after(waits, Err(e)),
                other => other,
            }
        };
        match answer {
            Answer::Reply { message, payload } => {
                write_raw(&mut *writer.lock().await, FrameKind::Reply, request_id, &message, &payload).await?
            }
            Answer::Failure(e) => {
                tracing::debug!(op, code = ?e.code, detail = e.detail, "request failed");
                let failure = surge_proto::Error::from(e);
                write_frame(&mut *writer.lock().await, FrameKind::Failure, request_id, &failure, &[]).await?;
            }
            Answer::File(source) => send_from_file(&mut *writer.lock().await, request_id, &source).await?,
            Answer::Later(work) => {
                let writer = writer.clone();
                tokio::spawn(async move {
                    let outcome = work.await;
                    answer_now(&writer, request_id, outcome).await;
                });
            }
            Answer::Nothing => {}
            Answer::Stop => {
                answer_now(writer, request_id, Ok(Vec::new())).await;
                session.server.shutdown.notify_one();
                return Ok(());
            }
        }
    }
}

/// Writes a frame whose message is already encoded (not flushed). A reply larger than the
/// protocol allows is answered with a failure instead: the client gets an error, not a
/// connection cut in mid-frame.
async fn write_raw(w: &mut BufWriter<WriteHalf>, kind: FrameKind, request_id: u64, message: &[u8], payload: &[u8]) -> std::io::Result<()> {
    if message.len() > MAX_MESSAGE_LEN || payload.len() > MAX_PAYLOAD_LEN {
        let detail = format!("the answer ({} + {} bytes) exceeds the protocol's frame limits", message.len(), payload.len());
        return write_frame(w, FrameKind::Failure, request_id, &surge_proto::Error::new(ErrorCode::Invalid, detail), &[]).await;
    }
    let header = FrameHeader { kind, message_len: message.len() as u32, payload_len: payload.len() as u32, request_id };
    w.write_all(&header.encode()).await?;
    w.write_all(message).await?;
    if !payload.is_empty() {
        w.write_all(payload).await?;
    }
    Ok(())
}

/// Sends one answer now (an out-of-order answer: nothing else is batched behind it).
async fn answer_now(writer: &SharedWriter, request_id: u64, outcome: Result<Vec<u8>>) {
    let mut w = writer.lock().await;
    let written = match outcome {
        Ok(message) => write_raw(&mut w, FrameKind::Reply, request_id, &message, &[]).await,
        Err(e) => write_frame(&mut *w, FrameKind::Failure, request_id, &surge_proto::Error::from(e), &[]).await,
    };
    if written.is_ok() {
        let _ = w.flush().await;
    }
}

/// Answers a read with the bytes of `source`, sent from its file (the reply's length is fixed
/// by the header first: bytes the file lost meanwhile, to a truncation, go out as zeros).
async fn send_from_file(w: &mut BufWriter<WriteHalf>, request_id: u64, source: &ReadSource) -> std::io::Result<()> {
    use tokio::io::Interest;
    let head = encode_frame(FrameKind::Reply, request_id, &(), source.len);
    w.write_all(&head).await?;
    w.flush().await?;
    let socket = w.get_ref();
    let (mut sent, mut at) = (0usize, source.offset as libc::off_t);
    while sent < source.len {
        socket.writable().await?;
        let step = socket.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the call; the kernel moves at most the
            // count asked and advances `at` itself.
            let n = unsafe { libc::sendfile(std::os::fd::AsRawFd::as_raw_fd(socket), source.fd(), &mut at, source.len - sent) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match step {
            Ok(0) => {
                // The file is shorter than when the header went out.
                let zeros = vec![0u8; source.len - sent];
                w.write_all(&zeros).await?;
                w.flush().await?;
                return Ok(());
            }
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What an answer waits for: the watchers' acknowledgements, the journal record that must
/// be durable, the change the mirror must have.
struct Waits {
    awaited: Vec<tokio::sync::oneshot::Receiver<()>>,
    durable: Option<u64>,
    mirrored: Option<u64>,
    server: Arc<ServerState>,
}

/// The answer `outcome`, sent once what `waits` names has happened.
fn answer_after(waits: Waits, outcome: Result<Vec<u8>>) -> Answer {
    Answer::Later(Box::pin(async move {
        await_acknowledgements(waits.awaited, &waits.server).await;
        if let Some(seq) = waits.durable {
            waits.server.durable(seq).await?;
        }
        if let Some(seq) = waits.mirrored {
            waits.server.replication.feed.reached(seq).await;
        }
        outcome
    }))
}

/// Waits until every watcher told of a request's name changes has acknowledged them (see
/// `watch`), for at most `ACK_TIMEOUT`; a watcher that went away counts as done.
async fn await_acknowledgements(awaited: Vec<tokio::sync::oneshot::Receiver<()>>, server: &ServerState) {
    let all = async {
        for receiver in awaited {
            let _ = receiver.await;
        }
    };
    if tokio::time::timeout(crate::watch::ACK_TIMEOUT, all).await.is_err() {
        let owing: Vec<String> = server.watchers.owing().iter().map(|o| o.to_string()).collect();
        tracing::warn!(
            "a watching client did not acknowledge a change notice within {:?} (watchers owing acknowledgements now: {})",
            crate::watch::ACK_TIMEOUT,
            owing.join("; ")
        );
    }
}

async fn refuse<W: tokio::io::AsyncWrite + Unpin>(writer: &mut W, request_id: u64, code: ErrorCode, detail: &str) {
    let failure = surge_proto::Error::new(code, detail);
    if write_frame(writer, FrameKind::Failure, request_id, &failure, &[]).await.is_ok() {
        let _ = writer.flush().await;
    }
}

/// Writes a watching connection's notices as they come, several per flush when they queue up.
/// Ends when the connection is unregistered (its sender dropped) or the socket fails.
/// `written`: where the number of the last acknowledged notice written goes.
pub(crate) async fn send_notices(
    mut notices: tokio::sync::mpsc::UnboundedReceiver<crate::watch::Outgoing>,
    writer: SharedWriter,
    written: Arc<std::sync::atomic::AtomicU64>,
) {
    while let Some(first) = notices.recv().await {
        let mut w = writer.lock().await;
        let mut next = Some(first);
        let mut last_acknowledged = 0;
        while let Some((ack, notice)) = next {
            if write_frame(&mut *w, FrameKind::Notice, ack, &notice, &[]).await.is_err() {
                return;
            }
            last_acknowledged = last_acknowledged.max(ack);
            next = notices.try_recv().ok();
        }
        if w.flush().await.is_err() {
            return;
        }
        written.fetch_max(last_acknowledged, std::sync::atomic::Ordering::Relaxed);
    }
}
