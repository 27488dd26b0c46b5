//! One client connection: challenge, authentication, then request frames answered in order.
//!
//! Requests are handled inline on the connection's task (metadata steps take microseconds;
//! chunk I/O goes to node-local SSD or RAM), and replies are buffered and flushed only when no
//! further request is already waiting, so a client that pipelines gets batched replies.
//! The two slow requests, a stage copy order (PFS I/O) and a stage submission (planning),
//! run in tasks of their own and answer when done, out of order; so does a change whose
//! notices watchers must acknowledge first (see [`crate::watch`]). Clients match replies to
//! requests by id.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use surge_proto::frame::decode_message;
use surge_proto::frame_io::{read_frame, write_frame, ReadError};
use surge_proto::{auth, ErrorCode, FrameKind, Ino, Reply, Request, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::Mutex as AsyncMutex;

use crate::error::{Result, ServerError};
use crate::watch::{Effects, WatcherId};
use crate::Shared;

/// A peer that connects and says nothing is dropped after this long.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Before authentication a frame can only be a small Hello.
const PRE_AUTH_MAX_MESSAGE: usize = 4096;
const IO_BUFFER: usize = 256 * 1024;

pub async fn serve(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let (rd, wr) = stream.into_split();
    let mut reader = BufReader::with_capacity(IO_BUFFER, rd);
    let mut writer = BufWriter::with_capacity(IO_BUFFER, wr);

    let mut challenge = [0u8; auth::CHALLENGE_LEN];
    getrandom::getrandom(&mut challenge).map_err(|e| anyhow::anyhow!("no randomness for the challenge: {e}"))?;
    let hello = Reply::Challenge { challenge, server_index: shared.index as u32, server_count: shared.count as u32 };
    write_frame(&mut writer, FrameKind::Reply, 0, &hello, &[]).await?;
    writer.flush().await?;

    let first = tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut reader, PRE_AUTH_MAX_MESSAGE, 0))
        .await
        .context("no hello within the time limit")?;
    let frame = match first {
        Ok(Some(frame)) => frame,
        Ok(None) => return Ok(()),
        Err(e) => {
            refuse(&mut writer, 0, ErrorCode::Protocol, &e.to_string()).await;
            bail!("bad first frame from {peer}: {e}");
        }
    };
    let request_id = frame.header.request_id;
    match decode_message::<Request>(&frame.message) {
        Ok(Request::Hello { proof, .. }) if auth::verify(&shared.secret, &challenge, &proof) => {
            write_frame(&mut writer, FrameKind::Reply, request_id, &Reply::Welcome { local: shared.local.clone() }, &[]).await?;
            writer.flush().await?;
        }
        Ok(Request::Hello { .. }) => {
            tracing::warn!(%peer, "refused a client with a wrong instance token");
            refuse(&mut writer, request_id, ErrorCode::Unauthenticated, "wrong instance token").await;
            return Ok(());
        }
        _ => {
            refuse(&mut writer, request_id, ErrorCode::Unauthenticated, "the first request must be hello").await;
            bail!("{peer} did not start with hello");
        }
    }

    let writer = Arc::new(AsyncMutex::new(writer));
    let mut session =
        Session { shared: shared.clone(), opens: HashMap::new(), watcher: None, awaited: Vec::new(), reserved: HashMap::new() };
    let result = session.serve_requests(&mut reader, &writer).await;
    session.release_all();
    if let Some(id) = session.watcher {
        shared.watchers.unregister(id);
    }
    result
}

/// Reads at least this large are sent with `sendfile`: from the page cache to the socket in
/// one copy instead of two (pread into a buffer, then send).
const SENDFILE_MIN: usize = 128 * 1024;

/// Answers a read with the bytes of `source`, sent from its file (the reply's length is
/// fixed by the header first: bytes the file lost meanwhile, to a truncation, go out as zeros).
async fn send_from_file(w: &mut BufWriter<OwnedWriteHalf>, request_id: u64, source: &crate::data::ReadSource) -> std::io::Result<()> {
    use tokio::io::Interest;
    let head = surge_proto::frame::encode_frame(FrameKind::Reply, request_id, &Reply::Data, source.len);
    w.write_all(&head).await?;
    w.flush().await?;
    let socket = w.get_ref().as_ref();
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

/// Waits until every watcher told of a request's name changes has acknowledged them (see
/// `watch`), for at most `ACK_TIMEOUT`; a watcher that went away counts as done.
async fn await_acknowledgements(awaited: Vec<tokio::sync::oneshot::Receiver<()>>) {
    let all = async {
        for receiver in awaited {
            let _ = receiver.await;
        }
    };
    if tokio::time::timeout(crate::watch::ACK_TIMEOUT, all).await.is_err() {
        tracing::warn!("a watching client did not acknowledge a change notice within {:?}", crate::watch::ACK_TIMEOUT);
    }
}

async fn refuse<W: tokio::io::AsyncWrite + Unpin>(writer: &mut W, request_id: u64, code: ErrorCode, detail: &str) {
    let reply = Reply::Error { code, detail: detail.to_string() };
    if write_frame(writer, FrameKind::Reply, request_id, &reply, &[]).await.is_ok() {
        let _ = writer.flush().await;
    }
}

/// The connection's writing half: the request loop and out-of-order answers share it.
type SharedWriter = Arc<AsyncMutex<BufWriter<OwnedWriteHalf>>>;

/// Sends one reply now (an out-of-order answer: nothing else is batched behind it).
async fn answer(writer: &SharedWriter, request_id: u64, reply: &Reply) {
    let mut w = writer.lock().await;
    if write_frame(&mut *w, FrameKind::Reply, request_id, reply, &[]).await.is_ok() {
        let _ = w.flush().await;
    }
}

/// Writes a watching connection's notices as they come, several per flush when they queue up.
/// Ends when the connection is unregistered (its sender dropped) or the socket fails.
async fn send_notices(mut notices: tokio::sync::mpsc::UnboundedReceiver<crate::watch::Outgoing>, writer: SharedWriter) {
    while let Some(first) = notices.recv().await {
        let mut w = writer.lock().await;
        let mut next = Some(first);
        while let Some((ack, notice)) = next {
            if write_frame(&mut *w, FrameKind::Notice, ack, &notice, &[]).await.is_err() {
                return;
            }
            next = notices.try_recv().ok();
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}

struct Session {
    shared: Arc<Shared>,
    /// Open handles this connection registered, released if it goes away without closing them.
    opens: HashMap<Ino, u32>,
    /// Set once the connection asked to be told of changes (`Watch`).
    watcher: Option<WatcherId>,
    /// Acknowledgements of the notices the current request caused, awaited before its reply.
    awaited: Vec<tokio::sync::oneshot::Receiver<()>>,
    /// Capacity set aside for this client's local writes, by inode (given back if it goes).
    reserved: HashMap<Ino, u64>,
}

impl Session {
    async fn serve_requests<R>(&mut self, reader: &mut BufReader<R>, writer: &SharedWriter) -> anyhow::Result<()>
    where
        R: tokio::io::AsyncRead + Unpin,
    {
        loop {
            // Replies to a burst of requests are written together and sent once nothing more
            // is waiting to be read. That check sits here, before the wait for the next frame,
            // because not every request writes a reply: a one-way acknowledgement, or one
            // answered later by a task, ending a burst must not hold back the replies before it.
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
                    bail!("protocol error: {e}");
                }
            };
            let request_id = frame.header.request_id;
            let (reply, data) = match decode_message::<Request>(&frame.message) {
                Ok(Request::Shutdown) => {
                    answer(writer, request_id, &Reply::Ok).await;
                    self.shared.shutdown.notify_one();
                    return Ok(());
                }
                Ok(Request::StageCopy(order)) => {
                    let (shared, writer) = (self.shared.clone(), writer.clone());
                    tokio::spawn(async move {
                        let work = tokio::task::spawn_blocking(move || {
                            crate::stage_copy::execute(&shared.data, shared.index, shared.count, &order)
                        });
                        let reply = match work.await {
                            Ok(outcomes) => Reply::Copied(outcomes),
                            Err(e) => Reply::Error { code: ErrorCode::Io, detail: format!("copy order failed: {e}") },
                        };
                        answer(&writer, request_id, &reply).await;
                    });
                    continue;
                }
                Ok(Request::Watch) => {
                    if self.watcher.is_none() {
                        let (id, notices) = self.shared.watchers.register();
                        self.watcher = Some(id);
                        tokio::spawn(send_notices(notices, writer.clone()));
                    }
                    (Reply::Ok, Vec::new())
                }
                Ok(Request::StageSubmit { spec }) => {
                    let (submitted, writer) = (self.shared.coordinator().map(|c| c.submit(spec)), writer.clone());
                    tokio::spawn(async move {
                        let reply = match submitted {
                            Ok(submitted) => match submitted.await {
                                Ok(id) => Reply::StageId { id },
                                Err(e) => Reply::Error { code: e.code, detail: e.detail },
                            },
                            Err(e) => Reply::Error { code: e.code, detail: e.detail },
                        };
                        answer(&writer, request_id, &reply).await;
                    });
                    continue;
                }
                Ok(Request::NoticeSeen { ack }) => {
                    // One-way: no reply.
                    self.shared.watchers.seen(ack);
                    continue;
                }
                Ok(Request::Read { ino, offset, len }) if len as usize >= SENDFILE_MIN => {
                    match self.shared.data.read_source(ino, offset, len) {
                        Ok(Some(source)) => {
                            send_from_file(&mut *writer.lock().await, request_id, &source).await?;
                            continue;
                        }
                        Ok(None) => (Reply::Data, Vec::new()),
                        Err(e) => (Reply::Error { code: e.code, detail: e.detail }, Vec::new()),
                    }
                }
                Ok(request) => self.handle(request, frame.payload),
                Err(e) => (Reply::Error { code: ErrorCode::Protocol, detail: e.to_string() }, Vec::new()),
            };
            if !self.awaited.is_empty() {
                // Answered once the watchers acknowledged, by a task of its own: this loop
                // must go on reading, since the acknowledgement this connection owes another
                // change may be next in line (two nodes creating in one directory would
                // otherwise each wait for the other until the timeout).
                let (awaited, writer) = (std::mem::take(&mut self.awaited), writer.clone());
                tokio::spawn(async move {
                    await_acknowledgements(awaited).await;
                    answer(&writer, request_id, &reply).await;
                });
                continue;
            }
            write_frame(&mut *writer.lock().await, FrameKind::Reply, request_id, &reply, &data).await?;
        }
    }

    fn handle(&mut self, request: Request, payload: Vec<u8>) -> (Reply, Vec<u8>) {
        let op = request.name();
        let result = match request {
            Request::Read { ino, offset, len } => match self.shared.data.read(ino, offset, len) {
                Ok(bytes) => return (Reply::Data, bytes),
                Err(e) => Err(e),
            },
            other => self.dispatch(&other, &payload),
        };
        match result {
            Ok(reply) => (reply, Vec::new()),
            Err(ServerError { code, detail, .. }) => {
                tracing::debug!(op, ?code, detail, "request failed");
                (Reply::Error { code, detail }, Vec::new())
            }
        }
    }

    fn dispatch(&mut self, request: &Request, payload: &[u8]) -> Result<Reply> {
        let shared = self.shared.clone();
        let data = &shared.data;
        let meta = || shared.meta.lock().unwrap();
        // Changes and registrations are ordered with the step itself (see `Watchers::lock`).
        // (A batch takes it per request inside.)
        let watching = self.watcher.is_some() || shared.watchers.any();
        let mut ledger = (watching && Effects::possible(request)).then(|| shared.watchers.lock());
        let reply = match request {
            Request::Hello { .. } => return Err(ServerError::new(ErrorCode::Protocol, "already authenticated")),
            Request::Lookup { parent, name } => Reply::Entry(meta().lookup(*parent, name)?),
            Request::GetAttr { ino } => Reply::Attr(meta().getattr(*ino)?),
            Request::SetAttr { ino, changes } => Reply::Attr(meta().setattr(*ino, changes)?),
            Request::Create { parent, name, mode, uid, gid, exclusive, open } => {
                let entry = meta().create(*parent, name, *mode, *uid, *gid, *exclusive, *open)?;
                if *open && entry.attr.is_some() {
                    *self.opens.entry(entry.ino).or_default() += 1;
                }
                Reply::Entry(entry)
            }
            Request::Symlink { parent, name, target, uid, gid } => Reply::Attr(meta().symlink(*parent, name, target, *uid, *gid)?),
            Request::Readlink { ino } => Reply::Link(meta().readlink(*ino)?),
            Request::MakeDirInode { parent, mode, uid, gid } => Reply::Attr(meta().make_dir_inode(*parent, *mode, *uid, *gid)),
            Request::DropInode { ino } => {
                meta().drop_inode(*ino)?;
                Reply::Ok
            }
            Request::InsertEntry { parent, name, ino, kind, replace, retired_target } => {
                let (replaced, reparent) = meta().insert_entry(*parent, name, *ino, *kind, *replace, *retired_target)?;
                Reply::Renamed { replaced, reparent }
            }
            Request::Unlink { parent, name } => Reply::Unlinked(meta().unlink(*parent, name)?),
            Request::Rmdir { parent, name } => {
                meta().rmdir(*parent, name)?;
                Reply::Ok
            }
            Request::RetireDir { ino } => {
                meta().set_retired(*ino, true)?;
                Reply::Ok
            }
            Request::UnretireDir { ino } => {
                meta().set_retired(*ino, false)?;
                Reply::Ok
            }
            Request::RemoveEntry { parent, name, ino } => {
                meta().remove_entry(*parent, name, *ino)?;
                Reply::Ok
            }
            Request::DropLink { ino } => {
                let (purge, size) = meta().drop_link(*ino)?;
                Reply::Dropped { purge, size }
            }
            Request::SetParent { ino, parent } => {
                meta().set_parent(*ino, *parent)?;
                Reply::Ok
            }
            Request::Rename { src_parent, src_name, dst_parent, dst_name, noreplace, retired_target } => {
                let (replaced, reparent) = meta().rename(*src_parent, src_name, *dst_parent, dst_name, *noreplace, *retired_target)?;
                Reply::Renamed { replaced, reparent }
            }
            Request::RenamePrepare { parent, name } => Reply::Entry(meta().rename_prepare(*parent, name)?),
            Request::RenameFinish { parent, name, ino, commit } => {
                meta().rename_finish(*parent, name, *ino, *commit)?;
                Reply::Ok
            }
            Request::Readdir { ino, after, limit } => {
                let (entries, more) = meta().readdir(*ino, after.as_deref(), *limit)?;
                Reply::Entries { entries, more }
            }
            Request::Open { ino } => {
                let attr = meta().open(*ino)?;
                *self.opens.entry(*ino).or_default() += 1;
                Reply::Attr(attr)
            }
            Request::Commit { ino, size, mtime, release } => {
                if *release {
                    self.forget_open(*ino);
                }
                let (purge, size) = meta().commit(*ino, *size, *mtime, *release)?;
                Reply::Dropped { purge, size }
            }
            Request::Write { ino, offset } => Reply::Written { len: data.write(*ino, *offset, payload)? },
            Request::Read { .. } => unreachable!("reads are answered with a payload in handle()"),
            Request::TruncateData { ino, size } => {
                data.truncate(*ino, *size)?;
                Reply::Ok
            }
            Request::PurgeData { ino } => {
                data.purge(*ino)?;
                Reply::Ok
            }
            Request::SyncData { ino } => {
                data.sync(*ino)?;
                Reply::Ok
            }
            Request::ReserveLocal { ino, bytes } => {
                data.reserve_local(*ino, *bytes)?;
                *self.reserved.entry(*ino).or_default() += bytes;
                Reply::Ok
            }
            Request::LocalWritten { ino, reserved } => {
                let held = self.reserved.get(ino).copied().unwrap_or(0);
                let released = (*reserved).min(held);
                if held == released {
                    self.reserved.remove(ino);
                } else {
                    self.reserved.insert(*ino, held - released);
                }
                data.local_written(*ino, released)?;
                Reply::Ok
            }
            Request::StatFs => {
                let (inodes, files, dirs) = meta().counts();
                Reply::Stats(surge_proto::ServerStats {
                    server_index: shared.index as u32,
                    capacity: data.capacity(),
                    used: data.used(),
                    inodes,
                    files,
                    dirs,
                    read_bytes: data.read_bytes(),
                    written_bytes: data.written_bytes(),
                })
            }
            Request::StageList { bb_path } => Reply::Stages(shared.coordinator()?.list(bb_path.as_deref())),
            Request::StageFiles { id, offset, limit } => {
                let (files, total) = shared.coordinator()?.files(*id, *offset, *limit)?;
                Reply::StageFiles { files, total }
            }
            Request::StageCancel { id } => {
                shared.coordinator()?.cancel(*id)?;
                Reply::Ok
            }
            Request::StageRevoke { bb_path } => {
                shared.coordinator()?.revoke(bb_path)?;
                Reply::Ok
            }
            Request::StageJobEnd => {
                shared.coordinator()?.job_end();
                Reply::Ok
            }
            Request::Batch(requests) => Reply::Batch(requests.iter().map(|r| self.dispatch_batched(r)).collect()),
            Request::Shutdown | Request::StageCopy(_) | Request::StageSubmit { .. } | Request::Watch | Request::NoticeSeen { .. } => {
                unreachable!("handled by the request loop")
            }
        };
        if let Some(ledger) = ledger.as_mut() {
            let awaited = ledger.apply(self.watcher, Effects::of(request, &reply));
            self.awaited.extend(awaited);
        }
        Ok(reply)
    }

    /// One request of a batch: anything but payloads, nesting and the loop-level requests.
    fn dispatch_batched(&mut self, request: &Request) -> Reply {
        match request {
            Request::Hello { .. }
            | Request::Read { .. }
            | Request::Write { .. }
            | Request::Batch(_)
            | Request::Shutdown
            | Request::StageCopy(_)
            | Request::StageSubmit { .. }
            | Request::Watch
            | Request::NoticeSeen { .. } => {
                Reply::Error { code: ErrorCode::Invalid, detail: format!("{} cannot be batched", request.name()) }
            }
            other => self.dispatch(other, &[]).unwrap_or_else(|e| Reply::Error { code: e.code, detail: e.detail }),
        }
    }

    fn forget_open(&mut self, ino: Ino) {
        if let Some(count) = self.opens.get_mut(&ino) {
            *count -= 1;
            if *count == 0 {
                self.opens.remove(&ino);
            }
        }
    }

    /// The client went away holding open handles: release them. A file that was unlinked
    /// meanwhile loses its data here; chunks on other servers stay until the instance ends
    /// (servers never talk to each other), which is logged.
    fn release_all(&mut self) {
        for (ino, reserved) in std::mem::take(&mut self.reserved) {
            // What the client wrote itself before it went is kept and accounted.
            let _ = self.shared.data.local_written(ino, reserved);
        }
        for (ino, count) in std::mem::take(&mut self.opens) {
            for _ in 0..count {
                if let Ok((true, _)) = self.shared.meta.lock().unwrap().commit(ino, None, None, true) {
                    tracing::info!(
                        ino = format!("{ino:#x}"),
                        "released an unlinked file of a vanished client; its chunks on other servers remain until teardown"
                    );
                    let _ = self.shared.data.purge(ino);
                }
            }
        }
    }
}
