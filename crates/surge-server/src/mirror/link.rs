//! The link to this server's mirror: one connection to the successor, kept up (retried every
//! second while the successor cannot be reached), over which the whole share is sent when it
//! opens, then every change as it is noted ([`super::Feed`]).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use surge_meta::poison_free::LockRecover;
use surge_proto::frame::decode_message;
use surge_proto::frame_io::{read_frame, write_frame};
use surge_proto::handshake::{Challenge, Hello, Welcome};
use surge_proto::mirror::*;
use surge_proto::{auth, FrameKind, Ino, Request, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::Change;

use crate::ServerState;

/// How long the link waits between attempts to reach the successor.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A connection or handshake that takes longer than this counts as a failed attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// An idle link says it is there this often, and one that hears nothing from the mirror for
/// [`SILENCE`] counts it gone.
const PING_EVERY: Duration = Duration::from_secs(1);
const SILENCE: Duration = Duration::from_secs(5);
/// File data goes in pieces of at most this much per request.
const PIECE: u64 = 4 << 20;
const IO_BUFFER: usize = 256 * 1024;

type Writer = BufWriter<OwnedWriteHalf>;

/// Keeps the link to the mirror at `to` up until the task is aborted.
pub fn start(server: Arc<ServerState>, to: SocketAddr, epoch: u64) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let mut said_unreached = false;
        // Until another task takes over the link (see the feed's epochs).
        while server.replication.feed.is_current(epoch) {
            match connect(&server, to).await {
                Ok((reader, writer)) => {
                    said_unreached = false;
                    tracing::info!(%to, "mirror reached: sending it the whole share");
                    let ended = mirror(&server, reader, writer, epoch).await;
                    server.replication.feed.link_ended(epoch);
                    tracing::warn!(%to, "mirror lost ({}): this share goes on alone until it is back", describe(ended));
                }
                Err(e) if !said_unreached => {
                    said_unreached = true;
                    server.replication.feed.link_ended(epoch);
                    tracing::warn!(%to, "mirror not reached ({e}): this share goes on alone, trying again every {RETRY_EVERY:?}");
                }
                Err(_) => {}
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    })
    .abort_handle()
}

fn describe(ended: io::Result<()>) -> String {
    match ended {
        Ok(()) => "the connection closed".into(),
        Err(e) => e.to_string(),
    }
}

fn protocol(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Connects to the successor and authenticates as any client does (a MUNGE credential too
/// where the servers check identities: servers run as the instance's owner).
async fn connect(server: &ServerState, to: SocketAddr) -> io::Result<(BufReader<OwnedReadHalf>, Writer)> {
    connect_to(server, to, Some(mirror_of(server.index, server.count))).await
}

/// Connects to the server at `to` (server `index`, when given) and authenticates.
pub(crate) async fn connect_to(
    server: &ServerState,
    to: SocketAddr,
    index: Option<usize>,
) -> io::Result<(BufReader<OwnedReadHalf>, Writer)> {
    let handshake = async {
        let stream = TcpStream::connect(to).await?;
        stream.set_nodelay(true)?;
        let (rd, wr) = stream.into_split();
        let (mut reader, mut writer) = (BufReader::with_capacity(IO_BUFFER, rd), BufWriter::with_capacity(IO_BUFFER, wr));
        let frame =
            read_frame(&mut reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| protocol(e.to_string()))?.ok_or_else(|| protocol("closed"))?;
        let challenge: Challenge = decode_message(&frame.message).map_err(|e| protocol(format!("no challenge: {e}")))?;
        if index.is_some_and(|index| challenge.server_index as usize != index) {
            return Err(protocol(format!("{to} is server {}, not server {}", challenge.server_index, index.unwrap_or_default())));
        }
        let identity = if challenge.wants_identity {
            let payload = surge_proto::identity::payload_of(&challenge.challenge);
            let made = tokio::task::spawn_blocking(move || surge_proto::identity::credential(&payload)).await;
            Some(made.map_err(io::Error::other)?.map_err(io::Error::other)?)
        } else {
            None
        };
        let hello = Hello { session: rand_session(), proof: auth::answer(&server.secret, &challenge.challenge), identity, share: None };
        write_frame(&mut writer, FrameKind::Request, 1, &hello, &[]).await?;
        writer.flush().await?;
        let frame =
            read_frame(&mut reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| protocol(e.to_string()))?.ok_or_else(|| protocol("closed"))?;
        if frame.header.kind != FrameKind::Reply {
            let refusal: Option<surge_proto::Error> = decode_message(&frame.message).ok();
            return Err(protocol(format!("refused: {}", refusal.map_or("?".into(), |e| e.to_string()))));
        }
        let _: Welcome = decode_message(&frame.message).map_err(|e| protocol(format!("no welcome: {e}")))?;
        Ok((reader, writer))
    };
    tokio::time::timeout(CONNECT_TIMEOUT, handshake).await.map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer"))?
}

fn rand_session() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::getrandom(&mut bytes);
    u64::from_le_bytes(bytes)
}

/// What the reply to a request tells, once it comes: the last request of change `seq`.
struct Awaited {
    request_id: u64,
    seq: u64,
    journal: Option<u64>,
    filled: bool,
}

/// Changes sent and not yet answered (replies come in order), and the last reply: a reply
/// can come before its change is entered here, since a large request goes out while it is
/// being written.
#[derive(Default)]
struct Replies {
    awaited: VecDeque<Awaited>,
    last: u64,
}

type InFlight = Arc<Mutex<Replies>>;

/// Tells the feed the mirror of link task `epoch` has change `awaited`.
fn done(server: &ServerState, awaited: &Awaited, epoch: u64) {
    server.replication.feed.acknowledged(awaited.seq, awaited.journal);
    if awaited.filled {
        tracing::info!("mirror complete: every change is on both nodes before it is answered");
        server.replication.feed.in_step(epoch);
    }
}

/// Opens the mirror, sends the whole share and then each change, until the connection fails.
async fn mirror(server: &Arc<ServerState>, mut reader: BufReader<OwnedReadHalf>, mut writer: Writer, epoch: u64) -> io::Result<()> {
    let mut sender = Sender { writer: &mut writer, next_id: 2 };
    sender.request(MirrorOpen { from: server.index as u32 }, &[]).await?;
    sender.writer.flush().await?;
    if let Err(refused) = expect_reply(&mut reader, 2).await {
        return Err(stop_if_taken_over(server, refused));
    }
    super::failover::unfence(server);

    let Some(mut changes) = server.replication.feed.open(epoch) else {
        return Err(io::Error::other("another link task took over"));
    };
    // The journal as it is now, in order with the appends noted from here on; then every
    // data file (changes noted meanwhile are sent again after it, harmlessly).
    server.journal.note_whole();
    server.replication.feed.note(Change::AllData);
    server.replication.feed.note(Change::Filled);

    let in_flight: InFlight = Default::default();
    let replies = tokio::spawn(read_replies(reader, in_flight.clone(), server.clone(), epoch));
    let sending = async {
        loop {
            let next = tokio::time::timeout(PING_EVERY, changes.recv()).await;
            let Ok(next) = next else {
                sender.request(MirrorPing, &[]).await?;
                sender.writer.flush().await?;
                continue;
            };
            let Some((seq, change)) = next else { break };
            let (journal, filled) = match &change {
                Change::Journal { seq, .. } | Change::Snapshot { seq, .. } => (Some(*seq), false),
                Change::Filled => (None, true),
                _ => (None, false),
            };
            sender.send(server, change).await?;
            // The reply to the request just sent tells the mirror has this change.
            let awaited = Awaited { request_id: sender.next_id - 1, seq, journal, filled };
            {
                let mut replies = in_flight.lock_or_recover();
                if replies.last >= awaited.request_id {
                    done(server, &awaited, epoch);
                } else {
                    replies.awaited.push_back(awaited);
                }
            }
            if changes.is_empty() {
                sender.writer.flush().await?;
            }
        }
        Ok::<_, io::Error>(())
    };
    // The reader goes with the link (it must not tell the feed of a link that is over).
    let reader = replies.abort_handle();
    let ended = tokio::select! {
        sent = sending => sent,
        replied = replies => replied.map_err(io::Error::other).and_then(|replied| replied),
    };
    reader.abort();
    ended
}

/// A refusal that says the successor took this share over (it serves it now: this server's
/// copy is behind it for good and must not be served again) stops the server.
fn stop_if_taken_over(server: &ServerState, refused: io::Error) -> io::Error {
    if refused.kind() == io::ErrorKind::PermissionDenied {
        tracing::error!("{refused}: this server's share is served by its successor; stopping");
        server.shutdown.notify_one();
    }
    refused
}

/// The mirror's next answer, within [`SILENCE`] (an idle link pings every second).
async fn next_frame(reader: &mut BufReader<OwnedReadHalf>) -> io::Result<surge_proto::frame_io::Frame> {
    let read = tokio::time::timeout(SILENCE, read_frame(reader, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN)).await;
    let frame = read.map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("the mirror said nothing for {SILENCE:?}")))?;
    let frame = frame.map_err(|e| protocol(e.to_string()))?.ok_or_else(|| protocol("the mirror closed the connection"))?;
    if frame.header.kind == FrameKind::Failure {
        let e: surge_proto::Error = decode_message(&frame.message).map_err(|e| protocol(e.to_string()))?;
        // Stale: the share was taken over there.
        let kind = if e.code == surge_proto::ErrorCode::Stale { io::ErrorKind::PermissionDenied } else { io::ErrorKind::Other };
        return Err(io::Error::new(kind, format!("the mirror refused: {e}")));
    }
    Ok(frame)
}

async fn expect_reply(reader: &mut BufReader<OwnedReadHalf>, id: u64) -> io::Result<()> {
    match next_frame(reader).await? {
        frame if frame.header.request_id == id => Ok(()),
        _ => Err(protocol("an answer out of order")),
    }
}

/// Reads the mirror's replies, in order, and tells the feed what the mirror has.
async fn read_replies(mut reader: BufReader<OwnedReadHalf>, in_flight: InFlight, server: Arc<ServerState>, epoch: u64) -> io::Result<()> {
    loop {
        let frame = next_frame(&mut reader).await.map_err(|e| stop_if_taken_over(&server, e))?;
        server.replication.feed.heard_from();
        let mut replies = in_flight.lock_or_recover();
        replies.last = frame.header.request_id;
        while replies.awaited.front().is_some_and(|awaited| awaited.request_id <= replies.last) {
            let awaited = replies.awaited.pop_front().expect("checked");
            done(&server, &awaited, epoch);
        }
    }
}

struct Sender<'a> {
    writer: &'a mut Writer,
    next_id: u64,
}

impl Sender<'_> {
    async fn request(&mut self, call: impl Into<MirrorRequest>, payload: &[u8]) -> io::Result<()> {
        let request = Request::Mirror(call.into());
        write_frame(self.writer, FrameKind::Request, self.next_id, &request, payload).await?;
        self.next_id += 1;
        Ok(())
    }

    /// Sends one change as one or more requests.
    async fn send(&mut self, server: &ServerState, change: Change) -> io::Result<()> {
        match change {
            Change::Journal { at, bytes, .. } => {
                let mut pieces = bytes.chunks(PIECE as usize).peekable();
                if pieces.peek().is_none() {
                    return self.request(MirrorJournal { at }, &[]).await;
                }
                let mut at = at;
                for piece in pieces {
                    self.request(MirrorJournal { at }, piece).await?;
                    at += piece.len() as u64;
                }
                Ok(())
            }
            Change::Snapshot { bytes, .. } => {
                let count = bytes.len().div_ceil(PIECE as usize).max(1);
                for part in 0..count {
                    let piece = bytes.get(part * PIECE as usize..bytes.len().min((part + 1) * PIECE as usize)).unwrap_or(&[]);
                    self.request(MirrorSnapshot { last: part + 1 == count }, piece).await?;
                }
                Ok(())
            }
            Change::Data { ino, range, sync } => self.data(&server.data.path(ino), ino, range, sync).await,
            Change::AllData => {
                let inos = server.data.data_files().map_err(|e| io::Error::other(e.to_string()))?;
                let count = inos.len();
                for ino in inos {
                    self.data(&server.data.path(ino), ino, None, false).await?;
                }
                tracing::info!(files = count, "mirror sent every data file");
                // With no file, the reply to the request before answers for this change.
                Ok(())
            }
            Change::Filled => self.request(MirrorSynced, &[]).await,
        }
    }

    /// Sends `ino`'s data file as it is now over `range` (whole: None): its bytes, its holes
    /// and its length; or that it is gone.
    ///
    /// Holes are found with SEEK_DATA (which skips a hole in one step) and, inside the pieces
    /// read, as runs of zero blocks: never with SEEK_HOLE, which on tmpfs walks every page up to
    /// the next hole, so that mirroring a small write into a large file cost time in the size of
    /// the file. A run of zeros the home wrote is a hole on the mirror: it reads the same.
    async fn data(&mut self, path: &Path, ino: Ino, range: Option<(u64, u64)>, sync: bool) -> io::Result<()> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.request(MirrorPurge { ino }, &[]).await,
            Err(e) => return Err(e),
        };
        let file_len = file.metadata()?.len();
        let (from, to) = range.unwrap_or((0, file_len));
        let (mut at, to) = (from.min(file_len), to.min(file_len));
        let mut sent_any = false;
        let mut bytes = Vec::new();
        while at < to {
            let data = crate::data::seek(&file, at, libc::SEEK_DATA)?.unwrap_or(to).min(to);
            if data > at {
                // A hole up to the next data (or the range's end).
                self.request(MirrorData { ino, offset: at, hole: data - at, file_len, sync: false }, &[]).await?;
                sent_any = true;
                at = data;
                continue;
            }
            bytes.resize((to - at).min(PIECE) as usize, 0);
            let got = read_at(&file, &mut bytes, at)?;
            if got == 0 {
                break; // Truncated meanwhile: the length below says so.
            }
            for run in data_runs(&bytes[..got], at) {
                let payload = &bytes[run.start..run.start + run.len];
                let offset = at + run.start as u64;
                self.request(MirrorData { ino, offset, hole: run.hole_after, file_len, sync: false }, payload).await?;
            }
            sent_any = true;
            at += got as u64;
        }
        if !sent_any || sync {
            // The length (and a sync) alone.
            self.request(MirrorData { ino, offset: file_len, hole: 0, file_len, sync }, &[]).await?;
        }
        Ok(())
    }
}

/// Zero runs shorter than this are sent as data: holes of a few blocks would cost a request
/// each and save little room.
const HOLE_AT_LEAST: usize = 64 * 1024;
/// Holes are whole blocks of this size, aligned in the file.
const BLOCK: u64 = 4096;

/// A piece of a data file as the mirror is sent it: `len` bytes from `start` in the piece, then
/// a hole of `hole_after` bytes.
#[derive(Debug, PartialEq, Eq)]
struct DataRun {
    start: usize,
    len: usize,
    hole_after: u64,
}

/// Splits `bytes`, read from the file at `at`, into data each followed by the zero blocks after
/// it: runs of at least [`HOLE_AT_LEAST`] zero bytes in aligned blocks (or all that is left of
/// the piece, when it is zeros).
fn data_runs(bytes: &[u8], at: u64) -> Vec<DataRun> {
    // Or-ing 64 bytes at a time (which vectorises) rather than stopping at the first non-zero one.
    let is_zero = |range: std::ops::Range<usize>| bytes[range].chunks(64).all(|chunk| chunk.iter().fold(0, |any, &b| any | b) == 0);
    let mut runs = Vec::new();
    let mut start = 0;
    // Block boundaries in the piece: the first aligned offset, then every block.
    let first = ((BLOCK - at % BLOCK) % BLOCK) as usize;
    let mut block = first.min(bytes.len());
    let mut zeros_from: Option<usize> = None;
    let end_run = |runs: &mut Vec<DataRun>, start: &mut usize, zeros: usize, zeros_end: usize| {
        runs.push(DataRun { start: *start, len: zeros - *start, hole_after: (zeros_end - zeros) as u64 });
        *start = zeros_end;
    };
    while block < bytes.len() {
        let block_end = (block + BLOCK as usize).min(bytes.len());
        if is_zero(block..block_end) {
            zeros_from.get_or_insert(block);
        } else if let Some(zeros) = zeros_from.take() {
            if block - zeros >= HOLE_AT_LEAST {
                end_run(&mut runs, &mut start, zeros, block);
            }
        }
        block = block_end;
    }
    match zeros_from {
        Some(zeros) if bytes.len() - zeros >= HOLE_AT_LEAST || zeros == start => end_run(&mut runs, &mut start, zeros, bytes.len()),
        _ => runs.push(DataRun { start, len: bytes.len() - start, hole_after: 0 }),
    }
    runs
}

fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], at + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: usize, len: usize, hole_after: u64) -> DataRun {
        DataRun { start, len, hole_after }
    }

    #[test]
    fn data_runs_keep_bytes_and_make_long_zero_runs_holes() {
        let hole = HOLE_AT_LEAST;
        // Data, a long zero run, data again, a short zero run (kept as data), zeros to the end.
        let mut bytes = vec![1u8; 8192];
        bytes.extend(vec![0u8; hole]);
        bytes.extend(vec![2u8; 4096]);
        bytes.extend(vec![0u8; 4096]);
        bytes.extend(vec![3u8; 10]);
        bytes.extend(vec![0u8; hole + 4096 - 10]);
        let runs = data_runs(&bytes, 0);
        let second = 8192 + hole;
        let tail_zeros = second + 4096 + 4096 + 4096;
        assert_eq!(runs, vec![run(0, 8192, hole as u64), run(second, tail_zeros - second, (bytes.len() - tail_zeros) as u64)]);
        // What the runs say is the piece: data where they send bytes, zeros in their holes.
        let mut rebuilt = vec![0u8; bytes.len()];
        let mut covered = 0;
        for r in &runs {
            assert_eq!(r.start, covered, "runs follow each other");
            rebuilt[r.start..r.start + r.len].copy_from_slice(&bytes[r.start..r.start + r.len]);
            covered = r.start + r.len + r.hole_after as usize;
        }
        assert_eq!((covered, rebuilt), (bytes.len(), bytes));
    }

    #[test]
    fn data_runs_align_holes_to_blocks_of_the_file() {
        // A piece read from 100 bytes into a block: the zeros before the first boundary are data.
        let bytes = vec![0u8; 4096 - 100 + HOLE_AT_LEAST];
        assert_eq!(data_runs(&bytes, 100), vec![run(0, 4096 - 100, HOLE_AT_LEAST as u64)]);
        // A piece that is all zeros from a boundary is one hole; an all-data piece one run.
        assert_eq!(data_runs(&[0u8; 4096], 8192), vec![run(0, 0, 4096)]);
        assert_eq!(data_runs(&[9u8; 5000], 7), vec![run(0, 5000, 0)]);
        assert_eq!(data_runs(&[], 0), vec![run(0, 0, 0)]);
    }
}
