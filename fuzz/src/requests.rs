//! Target `requests`: a sequence of valid-looking requests, read out of the fuzzer's bytes,
//! sent over a real connection to a real one-server instance running in this process, then
//! the server checked. What a server must never do, whatever it is asked: panic, stop
//! answering, or corrupt its state without saying so.
//!
//! Inode numbers are mostly ones earlier replies returned, names come from a small pool (so
//! that steps meet each other's names), and offsets, lengths and sizes lean to the edges of
//! their types. The first byte picks one of two modes:
//!
//! * **client** mode sends what a client library sends: whole operations (mkdir is
//!   `MakeDirInode` then `InsertEntry`, dropping the inode if the link fails; an unlink whose
//!   file is gone is followed by its `PurgeData`; a handle is released only once opened),
//!   with any arguments. After it the namespace must be whole: every name names an inode
//!   there, of its kind; a file's link count is its number of names; a directory is named
//!   once, by its `..`, with 2 + subdirectories links; the counts `StatFs` reports match.
//! * **raw** mode may also send the half-steps of operations that span servers
//!   (`InsertEntry`, `DropInode`, `SetLinks`, a rename's lock ...) with any arguments: those
//!   trust the client to sequence them, so the namespace may be left inconsistent (what
//!   `surge fsck` repairs), but the server must go on answering, its scans must finish,
//!   and its counts must match what they list.
//!
//! In both modes the data a connection wrote reads back as written (a model of every file
//! written below 4 MiB), and the bytes the server accounts as used are those its data files
//! hold; and every inode's extended attributes are within their limits, on inodes that may
//! have them, an access ACL shown in the mode. Each run starts a fresh instance, so a finding
//! replays on its own.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;

use std::sync::OnceLock;
use std::time::Duration;

use serde::de::DeserializeOwned;
use surge_proto::acl::{Acl, AclKind, Entry, Tag};
use surge_proto::admin::*;
use surge_proto::data::{
    Allocate, AllocateMode, Allocated, DataExtents, Extents, LocalWritten, PurgeData, Read, ReserveLocal, SyncData, TruncateData, Write,
};
use surge_proto::frame::{decode_message, encode_frame};
use surge_proto::handshake::{Challenge, Hello};
use surge_proto::namespace::*;
use surge_proto::stage::{CopyItem, CopyOrder, CopyOutcome, StageCancel, StageDirection, StageFiles, StageJobEnd, StageList, StageRevoke};
use surge_proto::xattr::{self, MAX_XATTR_VALUE_LEN};
use surge_proto::*;
use surge_server::in_process::InProcessInstance;

use super::input::Input;

/// Each server's share of capacity: large enough for the writes of a run, small enough that
/// runs also meet a full server.
const CAPACITY: u64 = 64 << 20;
/// How long a request may take before the server counts as hung.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// Most steps a run sends (a run also ends where its bytes do).
const MAX_STEPS: usize = 64;
/// Files are modelled (their data compared on every read) below this size.
const MODELLED: u64 = 4 << 20;
/// Names steps draw from, so that they meet each other's entries.
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// Runs the sequence `data` describes against a fresh instance, and checks it.
pub fn run(data: &[u8]) {
    let runtime = runtime();
    let root = super::scratch_dir("requests");
    // Two copies of each share: the server holds its own mirror (its predecessor in a
    // one-server instance), so the mirror service is there to be sent anything.
    let instance = runtime.block_on(InProcessInstance::start_replicated(&root, 1, CAPACITY)).expect("an in-process instance starts");
    let mut run = Run::new(instance.addrs[0], &instance.secret, root.join("pfs"));
    let mut input = Input::new(data);
    run.raw = input.bool();
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        run.step(&mut input);
    }
    run.check();
    drop(run);
    runtime.block_on(instance.stop());
    let _ = std::fs::remove_dir_all(&root);
}

/// `SURGE_FUZZ_TRACE=1`: print every request and its outcome (to read what a finding does).
fn tracing() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("SURGE_FUZZ_TRACE").is_some())
}

/// One runtime for every run: the servers' tasks run on it while the target's thread plays
/// the client with blocking sockets.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime"))
}

/// A server's answer to one request. `payload` holds the bytes of a reply's payload up to
/// [`MODELLED`] long (the most a read of a modelled file returns); of a longer one, which no
/// check compares, only `payload_len` is kept.
enum Answer {
    Reply { message: Vec<u8>, payload: Vec<u8>, payload_len: usize },
    Failure(Error),
}

impl Answer {
    /// The reply, decoded as `R`: a reply that does not decode as its call's reply is a bug.
    fn decode<R: DeserializeOwned>(&self, what: &str) -> Option<R> {
        match self {
            Answer::Reply { message, .. } => {
                Some(decode_message(message).unwrap_or_else(|e| panic!("the reply to {what} does not decode: {e}")))
            }
            Answer::Failure(_) => None,
        }
    }
}

/// One connection, speaking raw frames, one request at a time.
struct Conn {
    stream: TcpStream,
    next_id: u64,
}

impl Conn {
    fn connect(addr: SocketAddr, secret: &auth::Secret) -> Conn {
        let stream = TcpStream::connect(addr).expect("the server accepts");
        stream.set_read_timeout(Some(ANSWER_TIMEOUT)).expect("a read timeout");
        stream.set_nodelay(true).expect("no delay");
        let mut conn = Conn { stream, next_id: 1 };
        let (header, message, _) = conn.frame();
        assert_eq!(header.kind, FrameKind::Reply, "a challenge first");
        let challenge: Challenge = decode_message(&message).expect("a challenge");
        let hello = Hello { session: 1, proof: auth::answer(secret, &challenge.challenge), identity: None, share: None };
        conn.stream.write_all(&encode_frame(FrameKind::Request, 1, &hello, 0)).expect("hello sent");
        assert_eq!(conn.frame().0.kind, FrameKind::Reply, "welcomed");
        conn
    }

    /// The next frame: its header, message and payload (see [`Answer`] for what is kept of a
    /// long payload).
    fn frame(&mut self) -> (FrameHeader, Vec<u8>, Vec<u8>) {
        let mut head = [0u8; FRAME_HEADER_LEN];
        if let Err(e) = self.stream.read_exact(&mut head) {
            panic!("no answer from the server within {ANSWER_TIMEOUT:?} (hung, or it closed the connection): {e}");
        }
        let header = FrameHeader::decode(&head).expect("the server sends well-formed frames");
        let mut message = vec![0u8; header.message_len as usize];
        self.stream.read_exact(&mut message).expect("a whole message");
        let payload_len = header.payload_len as u64;
        let mut payload = Vec::new();
        if payload_len <= MODELLED {
            (&mut self.stream).take(payload_len).read_to_end(&mut payload).expect("a whole payload");
            assert_eq!(payload.len() as u64, payload_len, "a whole payload");
        } else {
            // Up to 64 MiB of a sparse file's zeros, read into one buffer kept for the
            // process: a fresh buffer each time spent most of the target's time in page faults.
            thread_local!(static SINK: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 1 << 20]));
            SINK.with_borrow_mut(|sink| {
                let mut left = payload_len as usize;
                while left > 0 {
                    let n = left.min(sink.len());
                    self.stream.read_exact(&mut sink[..n]).expect("a whole payload");
                    left -= n;
                }
            });
        }
        (header, message, payload)
    }

    /// Sends a request frame whose message is `message`, and waits for its answer.
    fn send(&mut self, message: &[u8], payload: &[u8]) -> Answer {
        self.next_id += 1;
        let header = FrameHeader {
            kind: FrameKind::Request,
            message_len: message.len() as u32,
            payload_len: payload.len() as u32,
            request_id: self.next_id,
        };
        let mut frame = header.encode().to_vec();
        frame.extend_from_slice(message);
        frame.extend_from_slice(payload);
        self.stream.write_all(&frame).expect("the server reads requests");
        loop {
            let (header, message, payload) = self.frame();
            match header.kind {
                // Sent to watchers of what other connections change: none here, but harmless.
                FrameKind::Notice => continue,
                FrameKind::Reply => {
                    assert_eq!(header.request_id, self.next_id, "answers come in request order");
                    return Answer::Reply { message, payload, payload_len: header.payload_len as usize };
                }
                FrameKind::Failure => {
                    assert_eq!(header.request_id, self.next_id, "answers come in request order");
                    return Answer::Failure(decode_message(&message).expect("a failure carries an error"));
                }
                FrameKind::Request => panic!("the server sent a request frame"),
            }
        }
    }

    fn call(&mut self, request: impl Into<Request>, payload: &[u8]) -> Answer {
        let request: Request = request.into();
        let answer = self.send(&encode_frame(FrameKind::Request, 0, &request, 0)[FRAME_HEADER_LEN..], payload);
        if tracing() {
            let text = format!("{request:?}");
            let outcome = match &answer {
                Answer::Reply { message, payload_len, .. } => format!("reply of {} + {payload_len} bytes", message.len()),
                Answer::Failure(e) => format!("failure: {e}"),
            };
            eprintln!("{} (+{} bytes) -> {outcome}", &text[..text.len().min(300)], payload.len());
        }
        answer
    }

    /// A call that must succeed (the checks' scans and statistics).
    fn must<C: Call>(&mut self, call: C) -> C::Reply {
        match self.call(call, &[]) {
            Answer::Reply { message, .. } => decode_message(&message).unwrap_or_else(|e| panic!("{} reply does not decode: {e}", C::NAME)),
            Answer::Failure(e) => panic!("{} failed: {e}", C::NAME),
        }
    }
}

/// A file's data as this connection wrote it: `None` once it can no longer be told (written
/// at or past [`MODELLED`], or by a stage copy).
type Model = Option<Vec<u8>>;

struct Run {
    conn: Conn,
    raw: bool,
    /// Inode numbers replies returned, the root first.
    inos: Vec<Ino>,
    /// Open handles this connection holds.
    held: HashMap<Ino, u32>,
    /// Files this connection wrote (absent: never written, or purged: no data).
    data: HashMap<Ino, Model>,
    /// Where stage copies read and write their PFS files.
    pfs: PathBuf,
    /// The server's address (its own mirror, for [`Run::mirror_step`]).
    addr: SocketAddr,
    secret: auth::Secret,
    /// A second client, whose steps meet the first's delegations ([`Run::delegation_step`]).
    other: Option<Conn>,
    /// Inode numbers delegations granted to this connection set aside, and the directories
    /// with their delegations' tokens.
    set_aside: Vec<Ino>,
    delegated: Vec<(Ino, Ino)>,
}

impl Run {
    fn new(addr: SocketAddr, secret: &auth::Secret, pfs: PathBuf) -> Run {
        std::fs::create_dir_all(&pfs).expect("a PFS directory");
        std::fs::write(pfs.join("source"), (0..300_000u32).map(|i| i as u8).collect::<Vec<u8>>()).expect("a PFS file");
        Run {
            conn: Conn::connect(addr, secret),
            addr,
            secret: *secret,
            other: None,
            set_aside: Vec::new(),
            delegated: Vec::new(),
            raw: false,
            inos: vec![ROOT_INO],
            held: HashMap::new(),
            data: HashMap::new(),
            pfs,
        }
    }

    fn learn(&mut self, ino: Ino) {
        if !self.inos.contains(&ino) && self.inos.len() < 64 {
            self.inos.push(ino);
        }
    }

    /// Mostly an inode a reply returned; sometimes one nobody was given.
    fn ino(&mut self, input: &mut Input) -> Ino {
        if !input.one_in(8) {
            return self.inos[input.below(self.inos.len())];
        }
        match input.below(6) {
            0 => 0,
            1 => u64::MAX,
            2 => ino::make(1, 1),
            3 => ino::make(0, 2 + input.below(40) as u64),
            4 => (1 << 48) - 1,
            _ => input.u64(),
        }
    }

    fn name(&mut self, input: &mut Input) -> String {
        if !input.one_in(16) {
            return NAMES[input.below(NAMES.len())].to_string();
        }
        match input.below(8) {
            0 => String::new(),
            1 => ".".into(),
            2 => "..".into(),
            3 => "a/b".into(),
            4 => "a\0".into(),
            5 => "n".repeat(255),
            6 => "n".repeat(256),
            _ => "é".repeat(128),
        }
    }

    fn timestamp(input: &mut Input) -> Timestamp {
        match input.below(4) {
            0 => Timestamp { secs: i64::MIN, nanos: u32::MAX },
            1 => Timestamp { secs: i64::MAX, nanos: 999_999_999 },
            _ => Timestamp { secs: input.u32() as i64, nanos: input.u32() % 1_000_000_000 },
        }
    }

    fn layout(input: &mut Input) -> placement::DirLayout {
        placement::DirLayout::ALL[input.below(placement::DirLayout::ALL.len())]
    }

    fn opt<'a, T>(input: &mut Input<'a>, value: impl FnOnce(&mut Input<'a>) -> T) -> Option<T> {
        if input.bool() {
            Some(value(input))
        } else {
            None
        }
    }

    /// A directory's publications read, a file claimed or acknowledged in a group, the
    /// groups' status: never waiting (the server answers at once with nothing to give).
    fn workflow_step(&mut self, input: &mut Input) {
        use surge_proto::workflow::*;
        let dir = self.ino(input);
        let pattern = Self::opt(input, |i| ["*", "f*", ".*", "[", "**/x", "?"][i.below(6)].to_string());
        match input.below(6) {
            4 => {
                let policy = Self::opt(input, |i| RetentionPolicy {
                    pattern: ["*", "c*", "["][i.below(3)].to_string(),
                    keep_last: Self::opt(i, |i| i.below(4) as u32),
                    after_groups: i.bool(),
                    stage_out: Self::opt(i, |i| ["/pfs", "relative", "/"][i.below(3)].to_string()),
                    stage_every: i.below(4) as u32,
                });
                self.conn.call(SetRetention { dir, path: "/d".into(), policy }, &[]);
                self.conn.call(GetRetention { dir }, &[]).decode::<Option<RetentionStatus>>("get-retention");
            }
            5 => {
                let due = self.conn.call(RetentionDue {}, &[]).decode::<Vec<DueAction>>("retention-due").unwrap_or_default();
                let (cursor, staged) = match due.first() {
                    Some(d) if input.bool() => (d.cursor, matches!(d.action, Due::StageOut { .. })),
                    _ => (input.u64(), input.bool()),
                };
                self.conn.call(Retained { dir, cursor, staged }, &[]);
            }
            0 => {
                let (after, limit) = (if input.bool() { input.below(8) as u64 } else { input.u64() }, input.u32());
                let read = Publications { dir, after, limit, pattern, wait_ms: 0 };
                self.conn.call(read, &[]).decode::<PublicationPage>("publications");
            }
            1 => {
                let group = if input.bool() { "g".to_string() } else { self.name(input) };
                let consumer = self.name(input);
                let lease_ms = if input.bool() { 1 + input.below(1000) as u64 } else { input.u64() };
                let claim = Claim { dir, group, pattern, consumer, lease_ms, wait_ms: 0 };
                self.conn.call(claim, &[]).decode::<Option<Claimed>>("claim");
            }
            2 => {
                let group = Self::opt(input, |i| ["g", "f", ""][i.below(3)].to_string());
                let token = Self::opt(input, |i| i.below(4) as u64);
                let done = Done { dir, group, name: self.name(input), token };
                self.conn.call(done, &[]).decode::<String>("done");
            }
            _ => drop(self.conn.call(QueueStatus { dir }, &[]).decode::<Vec<GroupStatus>>("queue-status")),
        }
    }

    /// One step: a request, or a client's operation of a few.
    /// The mirror service with any arguments, in any order (a change before the mirror is
    /// opened, a snapshot of random bytes, a take-over of what that left), and the server's
    /// own mirror link started on itself or stopped. Any answer will do; none may hang.
    fn mirror_step(&mut self, input: &mut Input) {
        use surge_proto::mirror::*;
        let payload = input.bytes(256).to_vec();
        let answer = match input.below(10) {
            0 => self.conn.call(MirrorOpen { from: if input.bool() { 0 } else { input.u32() } }, &[]),
            1 => self.conn.call(MirrorSnapshot { last: input.bool() }, &payload),
            2 => self.conn.call(MirrorJournal { at: input.size() }, &payload),
            3 => {
                let data = MirrorData {
                    ino: self.ino(input),
                    offset: input.size(),
                    hole: input.size(),
                    file_len: input.size(),
                    sync: input.bool(),
                };
                self.conn.call(data, &payload)
            }
            4 => {
                let ino = self.ino(input);
                self.conn.call(MirrorPurge { ino }, &[])
            }
            5 => self.conn.call(MirrorSynced, &[]),
            6 => {
                // Automatic failover asked for with this one server (refused: it needs three).
                let failover_after_ms = input.bool().then(|| input.u16() as u64);
                self.conn.call(MirrorTo { to: input.bool().then_some(self.addr), peers: vec![self.addr], failover_after_ms }, &[])
            }
            7 => self.conn.call(CanReach { addr: self.addr }, &[]),
            8 => self.conn.call(MirrorPing, &[]),
            _ => self.conn.call(TakeOver { index: input.below(2) as u32 }, &[]),
        };
        if tracing() {
            eprintln!("mirror step: {}", if matches!(answer, Answer::Reply { .. }) { "answered" } else { "refused" });
        }
    }

    /// Directory delegations in any order (docs/delegation.md): a grant of any directory with
    /// any count, write-backs of creates with set-aside or made-up numbers (and of steps a
    /// write-back may not hold), creates outside a write-back, give-backs and reclaims with
    /// right or made-up tokens, and a second client's steps that meet a delegation (answered
    /// `Recalling` at once, the holder sent a notice, never a hang).
    fn delegation_step(&mut self, input: &mut Input) {
        let answer = match input.below(6) {
            0 => {
                let count = if input.bool() { input.below(8) as u32 } else { input.u32() };
                let dir = self.ino(input);
                let answer = self.conn.call(Delegate { dir, count, place_on: Self::opt(input, |i| i.below(3) as u32) }, &[]);
                if let Some(granted) = answer.decode::<Delegated>("delegate") {
                    self.set_aside.extend(granted.inos.into_iter().take(16));
                    self.delegated.push((dir, granted.token));
                }
                answer
            }
            1 => {
                let ino = match self.set_aside.len() {
                    0 => self.ino(input),
                    n if !input.one_in(8) => self.set_aside[input.below(n)],
                    _ => self.ino(input),
                };
                let (parent, token) = self.delegated_or_any(input);
                let (name, open) = (self.name(input), input.bool());
                let (mode, umask) = (input.u32(), input.u32());
                let made: NamespaceRequest = if input.one_in(4) {
                    MakeDir { parent, name, mode, umask, uid: 0, gid: 0, ino: Some(ino) }.into()
                } else {
                    CreateAs { parent, name, ino, mode, umask, uid: 0, gid: 0, open }.into()
                };
                if input.one_in(8) {
                    // Outside a write-back: refused.
                    return drop(self.conn.call(Request::Namespace(made), &[]));
                }
                let makes_dir = matches!(made, NamespaceRequest::MakeDir(_));
                let mut steps = vec![made];
                if input.one_in(4) {
                    let name = self.name(input);
                    steps.push(match input.below(4) {
                        0 => Unlink { parent, name }.into(),
                        1 => Rmdir { parent, name }.into(),
                        2 => {
                            // Within the directory, as a holder's rename answered at once.
                            let (dst_name, noreplace) = (self.name(input), input.bool());
                            Rename { src_parent: parent, src_name: name, dst_parent: parent, dst_name, noreplace, retired_target: None }
                                .into()
                        }
                        _ => Lookup { parent, name }.into(),
                    });
                }
                let first_seq = if input.bool() { input.below(4) as u64 } else { input.u64() };
                let answer = self.conn.call(WriteBack { dir: parent, token, first_seq, steps }, &[]);
                let created = answer.decode::<Vec<BatchOutcome>>("write-back").and_then(|outcomes| outcomes.into_iter().next()?.ok());
                match created.map(|message| Answer::Reply { message, payload: Vec::new(), payload_len: 0 }) {
                    Some(made) if makes_dir => drop(self.attr(&made).expect("a mkdir answers attributes")),
                    Some(made) => {
                        let entry = self.entry(&made).expect("a create-as answers an entry");
                        if open {
                            *self.held.entry(entry.ino).or_default() += 1;
                        }
                    }
                    None => {}
                }
                answer
            }
            2 => {
                let (dir, token) = self.delegated_or_any(input);
                self.conn.call(GiveBack { dir, token }, &[])
            }
            3 if input.bool() => {
                let (dir, token) = self.delegated_or_any(input);
                self.conn.call(Reclaim { dir, token }, &[])
            }
            3 => {
                let (dir, token) = self.delegated_or_any(input);
                let count = if input.bool() { input.below(8) as u32 } else { input.u32() };
                let answer = self.conn.call(Renew { dir, token, count, place_on: Self::opt(input, |i| i.below(3) as u32) }, &[]);
                if let Some(inos) = answer.decode::<Vec<Ino>>("renew") {
                    self.set_aside.extend(inos.into_iter().take(16));
                }
                answer
            }
            _ => {
                let (addr, secret) = (self.addr, self.secret);
                let other = self.other.get_or_insert_with(|| Conn::connect(addr, &secret));
                let (parent, name) = (self.inos[input.below(self.inos.len())], NAMES[input.below(NAMES.len())].to_string());
                let request: Request = match input.below(4) {
                    0 => Lookup { parent, name }.into(),
                    1 => Readdir { ino: parent, after: None, limit: 8, watch_names: input.bool(), watch_attrs: true }.into(),
                    2 => GetAttr { ino: parent }.into(),
                    _ => ListInodes { after: None }.into(),
                };
                other.call(request, &[])
            }
        };
        if tracing() {
            eprintln!("delegation step: {}", if matches!(answer, Answer::Reply { .. }) { "answered" } else { "refused" });
        }
    }

    /// Mostly a directory delegated to this connection, if any, with its token.
    fn delegated_or_any(&mut self, input: &mut Input) -> (Ino, Ino) {
        match self.delegated.len() {
            n if n > 0 && !input.one_in(4) => self.delegated[input.below(n)],
            _ => (self.ino(input), self.ino(input)),
        }
    }

    fn step(&mut self, input: &mut Input) {
        // Client steps 0-28, 44-47 (links, exchange, mknod, locks), 49-50 (extended
        // attributes, ACLs), 52 (layouts), 53 (fallocate, data extents) and 54 (publication
        // logs, consumer groups), added later: numbered after the rest so that kept inputs
        // mean what they meant; raw steps 29-43, 48, 51, 55 (replication) and 56
        // (delegations).
        let steps = if self.raw { 57 } else { 38 };
        let mut n = input.below(steps);
        if !self.raw && n >= 29 {
            n += match n {
                29..=32 => 15,
                33 | 34 => 16,
                _ => 17,
            };
        }
        match n {
            44..=47 => return self.posix_step(n - 44, input),
            49 | 50 => return self.xattr_step(n - 49, input),
            54 => return self.workflow_step(input),
            55 => return self.mirror_step(input),
            56 => return self.delegation_step(input),
            51 => {
                // mkdir's steps with a default ACL to inherit, and a link that claims one; or
                // mkdir in one step (its parent anywhere: refused unless homed here).
                let (parent, name, mode, umask) = (self.ino(input), self.name(input), input.u32(), input.u32());
                if input.one_in(3) {
                    // A number: refused outside a delegation's write-back.
                    let ino = if input.one_in(8) { Some(self.ino(input)) } else { None };
                    let answer = self.conn.call(MakeDir { parent, name, mode, umask, uid: 0, gid: 0, ino }, &[]);
                    self.attr(&answer);
                    return;
                }
                let inherited = DirInheritance {
                    default_acl: Self::opt(input, Self::acl_value),
                    layout: Self::layout(input),
                    group: Self::opt(input, |i| i.u32()),
                };
                let answer = self.conn.call(MakeDirInode { parent, mode, umask, uid: 0, gid: 0, inherited }, &[]);
                if let Some(attr) = self.attr(&answer) {
                    let new_dir = Self::opt(input, |i| DirInheritance {
                        default_acl: Self::opt(i, Self::acl_value),
                        layout: Self::layout(i),
                        group: Self::opt(i, |i| i.u32()),
                    });
                    let insert =
                        InsertEntry { parent, name, ino: attr.ino, kind: FileKind::Dir, replace: false, retired_target: None, new_dir };
                    if self.conn.call(insert, &[]).decode::<LinkOutcome>("insert-entry").is_none() {
                        self.conn.call(DropInode { ino: attr.ino }, &[]);
                    }
                }
                return;
            }
            53 => {
                // A range set aside, punched or zeroed (the model follows: punched and zeroed
                // bytes read as zeros), then the data ranges of a range asked for.
                let (ino, offset, len) = (self.ino(input), input.size(), input.size());
                let mode = [AllocateMode::Reserve, AllocateMode::PunchHole, AllocateMode::ZeroRange][input.below(3)];
                if let Answer::Reply { .. } = self.conn.call(Allocate { ino, offset, len, mode, ticket: None, may_wait: len % 2 == 0 }, &[])
                {
                    if let (AllocateMode::PunchHole | AllocateMode::ZeroRange, Some(Some(data))) = (mode, self.data.get_mut(&ino)) {
                        let end = offset.saturating_add(len).min(data.len() as u64) as usize;
                        if (offset as usize) < end {
                            data[offset as usize..end].fill(0);
                        }
                    }
                }
                let (from, to) = (input.size(), input.size());
                if let Some(extents) = self.conn.call(DataExtents { ino, from, to, ticket: None }, &[]).decode::<Extents>("data-extents") {
                    let in_order = extents.ranges.windows(2).all(|w| w[0].1 <= w[1].0);
                    let inside = extents.ranges.iter().all(|&(start, end)| from <= start && start < end && end <= to);
                    assert!(in_order && inside, "data extents of [{from}, {to}) out of order or outside it: {:?}", extents.ranges);
                }
                // The space files take (one count per file asked about), and notes of it with
                // versions that may or may not be the files' (hints: never refused).
                let inos: Vec<Ino> = (0..input.below(6)).map(|_| self.ino(input)).collect();
                if let Some(counts) = self.conn.call(Allocated { inos: inos.clone() }, &[]).decode::<Vec<u64>>("allocated") {
                    assert_eq!(counts.len(), inos.len(), "one count per file asked about");
                }
                let version = ContentVersion { size: input.size(), mtime: Timestamp::default(), ctime: Timestamp::default() };
                let notes = inos
                    .iter()
                    .map(|&ino| AllocationNote {
                        ino,
                        version,
                        blocks: Self::opt(input, |i| i.size()),
                        set_aside_to: Self::opt(input, |i| i.size()),
                    })
                    .collect();
                if let Answer::Failure(e) = self.conn.call(NoteAllocation { notes }, &[]) {
                    panic!("an allocation note refused: {e}");
                }
                return;
            }
            52 => {
                // A directory's layout asked or set, then a file made there for a server
                // that may or may not exist.
                let dir = self.ino(input);
                let set = Self::opt(input, Self::layout);
                self.conn.call(LayoutOf { dir, set }, &[]).decode::<placement::DirLayout>("layout");
                let place_on = Self::opt(input, |i| if i.bool() { i.below(8) as u32 } else { i.u32() });
                let (name, open) = (self.name(input), input.bool());
                let create = Create { parent: dir, name, mode: 0o644, umask: 0, uid: 0, gid: 0, exclusive: true, open, place_on };
                let answer = self.conn.call(create, &[]);
                if let Some(entry) = self.entry(&answer) {
                    if open && entry.attr.is_some() {
                        *self.held.entry(entry.ino).or_default() += 1;
                    }
                }
                return;
            }
            48 => {
                // The middle of a cross-server exchange, out of turn.
                let (parent, name, expected, ino) = (self.ino(input), self.name(input), self.ino(input), self.ino(input));
                let kind = [FileKind::File, FileKind::Dir, FileKind::Symlink, FileKind::Fifo][input.below(4)];
                if let Some(Some(dir)) =
                    self.conn.call(SwapEntry { parent, name, expected, ino, kind }, &[]).decode::<Option<Ino>>("swap-entry")
                {
                    self.conn.call(SetParent { ino: dir, parent }, &[]);
                }
                return;
            }
            _ => {}
        }
        match n {
            0 => {
                let (parent, name) = (self.ino(input), self.name(input));
                let answer = self.conn.call(Lookup { parent, name }, &[]);
                self.entry(&answer);
            }
            1 => {
                let ino = self.ino(input);
                let answer = self.conn.call(GetAttr { ino }, &[]);
                self.attr(&answer);
            }
            2 => {
                let ino = self.ino(input);
                let changes = AttrChanges {
                    mode: Self::opt(input, Input::u32),
                    uid: Self::opt(input, Input::u32),
                    gid: Self::opt(input, Input::u32),
                    size: Self::opt(input, Input::size),
                    atime: Self::opt(input, Self::timestamp),
                    mtime: Self::opt(input, Self::timestamp),
                    kill_set_id: input.bool(),
                    by: None,
                    cut_at: None,
                };
                let answer = self.conn.call(SetAttr { ino, changes }, &[]);
                self.attr(&answer);
            }
            3 => {
                let (parent, name) = (self.ino(input), self.name(input));
                let (mode, exclusive, open) = (input.u32(), input.bool(), input.bool());
                let create = Create { parent, name, mode, umask: 0o022, uid: 1000, gid: 1000, exclusive, open, place_on: None };
                let answer = self.conn.call(create, &[]);
                if let Some(entry) = self.entry(&answer) {
                    if open && entry.attr.is_some() {
                        *self.held.entry(entry.ino).or_default() += 1;
                    }
                }
            }
            4 => {
                let (parent, name) = (self.ino(input), self.name(input));
                let target = match input.below(4) {
                    0 => String::new(),
                    1 => "t".repeat(MAX_SYMLINK_LEN + input.below(2)),
                    _ => "a/../b".into(),
                };
                let answer = self.conn.call(Symlink { parent, name, target, uid: 0, gid: 0 }, &[]);
                self.attr(&answer);
            }
            5 => {
                let ino = self.ino(input);
                self.conn.call(Readlink { ino }, &[]);
            }
            6 => {
                let (parent, name) = (self.ino(input), self.name(input));
                self.mkdir(parent, name, input.u32());
            }
            7 => {
                let (parent, name) = (self.ino(input), self.name(input));
                if let Some(unlinked) = self.conn.call(Unlink { parent, name }, &[]).decode::<Unlinked>("unlink") {
                    self.finish_unlinked(&unlinked);
                }
            }
            8 => {
                let (parent, name) = (self.ino(input), self.name(input));
                self.conn.call(Rmdir { parent, name }, &[]);
            }
            9 => {
                let (src_parent, src_name, dst_parent, dst_name) = (self.ino(input), self.name(input), self.ino(input), self.name(input));
                let rename = Rename { src_parent, src_name, dst_parent, dst_name, noreplace: input.bool(), retired_target: None };
                if let Some(outcome) = self.conn.call(rename, &[]).decode::<LinkOutcome>("rename") {
                    self.finish_link(outcome, dst_parent);
                }
            }
            10 => {
                let ino = self.ino(input);
                let after = if input.bool() { Some(self.name(input)) } else { None };
                let limit = [0, 1, 2, u32::MAX][input.below(4)];
                if let Some(page) =
                    self.conn.call(Readdir { ino, after, limit, watch_names: true, watch_attrs: false }, &[]).decode::<DirPage>("readdir")
                {
                    assert!(page.entries.windows(2).all(|w| w[0].name < w[1].name), "readdir pages in name order");
                    for entry in page.entries {
                        self.learn(entry.ino);
                    }
                }
            }
            11 => {
                let ino = self.ino(input);
                // Kept or not by the number, not by another input byte: the kept findings replay as found.
                let answer = self.conn.call(Open { ino, keep: ino & 1 == 1 }, &[]);
                if self.attr(&answer).is_some() {
                    *self.held.entry(ino).or_default() += 1;
                }
            }
            12 => {
                // A close or fsync: a handle is released only by whom opened it.
                let ino = self.ino(input);
                let release = input.bool() && self.held.get(&ino).is_some_and(|&n| n > 0);
                let (size, mtime) = (Self::opt(input, Input::size), Self::opt(input, Self::timestamp));
                self.commit(Commit { ino, size, mtime, release, wrote: size.is_some() });
            }
            13 => {
                let (ino, offset) = (self.ino(input), input.size());
                let len = match input.below(8) {
                    0 => (1 << 20) + input.below(2),
                    1 => 0,
                    _ => input.u16() as usize % 20_000,
                };
                let fill = input.byte();
                let payload: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                let answer = self.conn.call(Write { ino, offset, ticket: None, may_wait: offset % 2 == 0 }, &payload);
                self.wrote(ino, offset, &payload, &answer);
            }
            14 => {
                let (ino, offset) = (self.ino(input), input.size());
                let len = match input.below(4) {
                    0 => input.size() as u32,
                    1 => u32::MAX,
                    _ => input.u16() as u32 * 8,
                };
                let answer = self.conn.call(Read { ino, offset, len, ticket: None }, &[]);
                self.read(ino, offset, len, &answer);
            }
            15 => {
                let (ino, size) = (self.ino(input), input.size());
                if let Answer::Reply { .. } = self.conn.call(TruncateData { ino, size, ticket: None }, &[]) {
                    if let Some(Some(data)) = self.data.get_mut(&ino) {
                        data.truncate(size.min(data.len() as u64) as usize);
                    }
                }
            }
            16 => {
                let ino = self.ino(input);
                self.purge(ino);
            }
            17 => {
                let ino = self.ino(input);
                self.conn.call(SyncData { ino, ticket: None }, &[]);
            }
            18 => {
                let (ino, bytes) = (self.ino(input), input.size());
                self.conn.call(ReserveLocal { ino, bytes, ticket: None }, &[]);
            }
            19 => {
                let (ino, reserved) = (self.ino(input), input.size());
                self.conn.call(LocalWritten { ino, reserved, ticket: None }, &[]);
            }
            20 => {
                self.conn.must(StatFs);
            }
            21 => {
                let after = Self::opt(input, |i| self.ino(i));
                self.conn.must(ListInodes { after });
            }
            22 => {
                let after = if input.bool() { Some((self.ino(input), self.name(input))) } else { None };
                self.conn.must(ListEntries { after });
            }
            23 => {
                let after = Self::opt(input, |i| self.ino(i));
                self.conn.must(ListDataFiles { after });
            }
            24 => self.conn.must(SyncMetadata),
            25 => self.conn.must(Watch { keeps: [Keeps::Nothing, Keeps::Everything, Keeps::Exactly][input.below(3)] }),
            26 => self.batch(input),
            27 => {
                // No stage coordinator runs beside these servers: refused, whatever is asked.
                let request: Request = match input.below(5) {
                    0 => StageList { bb_path: None, after: Some(input.u64()) }.into(),
                    1 => StageFiles { id: input.u64(), offset: input.u32(), limit: input.u32() }.into(),
                    2 => StageCancel { id: input.u64() }.into(),
                    3 => StageRevoke { bb_path: "/x".into() }.into(),
                    _ => StageJobEnd.into(),
                };
                assert!(matches!(self.conn.call(request, &[]), Answer::Failure(e) if e.code == ErrorCode::NotSupported));
            }
            28 => self.copy_order(input),
            // Raw mode only from here: the half-steps of operations across servers, and
            // garbage, with whatever arguments.
            29 => {
                let ino = self.ino(input);
                self.conn.call(DropInode { ino }, &[]);
            }
            30 => {
                let (parent, name, ino) = (self.ino(input), self.name(input), self.ino(input));
                let kind = [FileKind::File, FileKind::Dir, FileKind::Symlink][input.below(3)];
                let retired_target = Self::opt(input, |i| self.ino(i));
                let insert = InsertEntry { parent, name, ino, kind, replace: input.bool(), retired_target, new_dir: None };
                if let Some(outcome) = self.conn.call(insert, &[]).decode::<LinkOutcome>("insert-entry") {
                    self.finish_link(outcome, parent);
                }
            }
            31 => {
                let (parent, name, ino) = (self.ino(input), self.name(input), self.ino(input));
                self.conn.call(RemoveEntry { parent, name, ino }, &[]);
            }
            32 => {
                let ino = self.ino(input);
                if let Some(fate) = self.conn.call(DropLink { ino, ticket: None }, &[]).decode::<InodeFate>("drop-link") {
                    if fate.purge {
                        self.purge(ino);
                    }
                }
            }
            33 => {
                let (ino, expected, nlink) = (self.ino(input), input.u32() % 4, input.u32() % 4);
                self.conn.call(SetLinks { ino, expected, nlink }, &[]);
            }
            34 => {
                let (ino, parent) = (self.ino(input), self.ino(input));
                self.conn.call(SetParent { ino, parent }, &[]);
            }
            35 => {
                let ino = self.ino(input);
                self.conn.call(RetireDir { ino }, &[]);
            }
            36 => {
                let ino = self.ino(input);
                self.conn.call(UnretireDir { ino }, &[]);
            }
            37 => {
                let (parent, name) = (self.ino(input), self.name(input));
                let answer = self.conn.call(RenamePrepare { parent, name }, &[]);
                self.entry(&answer);
            }
            38 => {
                let (parent, name, ino) = (self.ino(input), self.name(input), self.ino(input));
                self.conn.call(RenameFinish { parent, name, ino, commit: input.bool() }, &[]);
            }
            39 => {
                let parent = self.ino(input);
                let answer =
                    self.conn.call(MakeDirInode { parent, mode: 0o755, umask: 0, uid: 0, gid: 0, inherited: Default::default() }, &[]);
                self.attr(&answer);
            }
            40 => {
                // A close by a connection that never opened.
                let (ino, release) = (self.ino(input), input.bool());
                self.commit(Commit { ino, size: None, mtime: None, release, wrote: false });
            }
            41 => {
                // Bytes where a request should be: refused, and the connection goes on.
                let message = input.bytes(64).to_vec();
                if decode_message::<Request>(&message).is_err() {
                    assert!(matches!(self.conn.send(&message, &[]), Answer::Failure(e) if e.code == ErrorCode::Protocol));
                }
            }
            42 => {
                // One-way: no answer comes.
                let frame = encode_frame(FrameKind::Request, 0, &Request::from(NoticeSeen { ack: input.u64() }), 0);
                self.conn.stream.write_all(&frame).expect("the server reads requests");
            }
            _ => {
                let ino = self.ino(input);
                let answer = self.conn.call(Commit { ino, size: Some(input.size()), mtime: None, release: false, wrote: true }, &[]);
                if let Some(fate) = answer.decode::<InodeFate>("commit") {
                    if fate.purge {
                        self.purge(ino);
                    }
                }
            }
        }
    }

    /// The steps of hard links, RENAME_EXCHANGE, mknod and locks, as a client sends them.
    fn posix_step(&mut self, which: usize, input: &mut Input) {
        match which {
            0 => {
                // A hard link: the count first, then the name; the count back if the name fails.
                let (ino, parent, name) = (self.ino(input), self.ino(input), self.name(input));
                let Some(added) = self.conn.call(AddLink { ino }, &[]).decode::<LinkAdded>("add-link") else { return };
                let insert = InsertEntry { parent, name, ino, kind: added.attr.kind, replace: false, retired_target: None, new_dir: None };
                if self.conn.call(insert, &[]).decode::<LinkOutcome>("insert-entry").is_none() {
                    let fate = self.conn.call(DropLink { ino, ticket: added.undo }, &[]).decode::<InodeFate>("drop-link");
                    assert!(fate.is_some_and(|f| !f.purge), "undoing a link leaves the file its names");
                }
            }
            1 => {
                let exchange =
                    Exchange { parent_a: self.ino(input), name_a: self.name(input), parent_b: self.ino(input), name_b: self.name(input) };
                if let Some(moved) = self.conn.call(exchange, &[]).decode::<Vec<(Ino, Ino)>>("exchange") {
                    for (ino, parent) in moved {
                        self.conn.call(SetParent { ino, parent }, &[]);
                    }
                }
            }
            2 => {
                let (parent, name) = (self.ino(input), self.name(input));
                let kind = match input.below(5) {
                    0 => FileKind::Fifo,
                    1 => FileKind::Socket,
                    2 => FileKind::CharDevice { rdev: input.u32() },
                    3 => FileKind::BlockDevice { rdev: input.u32() },
                    _ => FileKind::File, // refused: files are made by create
                };
                let answer = self.conn.call(MakeNode { parent, name, kind, mode: input.u32(), umask: 0o022, uid: 0, gid: 0 }, &[]);
                self.attr(&answer);
            }
            _ => {
                // Locks, never waiting: two owners of this one connection could wait on
                // each other for ever, which is theirs to avoid, not the server's.
                let (ino, owner) = (self.ino(input), input.below(3) as u64);
                let kind = [LockKind::Read, LockKind::Write, LockKind::Unlock][input.below(3)];
                let (start, end) = (input.size(), if input.bool() { u64::MAX } else { input.size() });
                if input.bool() {
                    self.conn.call(GetLock { ino, owner, kind, start, end }, &[]);
                } else {
                    self.conn.call(SetLock { ino, owner, pid: 1, kind, start, end, wait: false }, &[]);
                }
            }
        }
    }

    /// The extended attribute steps, as a client sends them: get, set, list and remove
    /// attributes of every namespace (and of none), and set or remove ACLs, valid or not.
    fn xattr_step(&mut self, which: usize, input: &mut Input) {
        let ino = self.ino(input);
        if which == 1 {
            let kind = if input.bool() { AclKind::Access } else { AclKind::Default };
            let name = kind.xattr_name().to_string();
            let answer = if input.one_in(4) {
                self.conn.call(RemoveXattr { ino, name }, &[])
            } else {
                let value = Self::acl_value(input);
                // On whose behalf: whether an access ACL keeps set-group-ID depends on it.
                let by =
                    if input.bool() { Some(Requester { uid: input.u32(), gid: input.u32(), groups: vec![input.u32()] }) } else { None };
                self.conn.call(SetXattr { ino, name, value, mode: XattrSetMode::Either, by }, &[])
            };
            self.attr(&answer);
            return;
        }
        let name = Self::xattr_name(input);
        match input.below(4) {
            0 => {
                if let Some(value) = self.conn.call(GetXattr { ino, name }, &[]).decode::<Vec<u8>>("get-xattr") {
                    assert!(value.len() <= MAX_XATTR_VALUE_LEN, "a value larger than any may be set");
                }
            }
            1 => {
                let value = match input.below(8) {
                    0 => vec![0; MAX_XATTR_VALUE_LEN + input.below(2)],
                    _ => input.bytes(24).to_vec(),
                };
                let mode = [XattrSetMode::Either, XattrSetMode::Create, XattrSetMode::Replace][input.below(3)];
                let answer = self.conn.call(SetXattr { ino, name, value, mode, by: None }, &[]);
                self.attr(&answer);
            }
            2 => drop(self.conn.call(ListXattr { ino }, &[]).decode::<Vec<String>>("list-xattr")),
            _ => {
                let answer = self.conn.call(RemoveXattr { ino, name }, &[]);
                self.attr(&answer);
            }
        }
    }

    /// Mostly a name of the pool of every namespace; sometimes one the server must refuse.
    fn xattr_name(input: &mut Input) -> String {
        const XATTR_NAMES: [&str; 6] =
            ["user.a", "user.b", "trusted.t", "security.s", "system.posix_acl_access", "system.posix_acl_default"];
        if !input.one_in(8) {
            return XATTR_NAMES[input.below(XATTR_NAMES.len())].to_string();
        }
        match input.below(6) {
            0 => String::new(),
            1 => "user.".into(),
            2 => "os2.a".into(),
            3 => format!("user.{}", "n".repeat(250)),
            4 => format!("user.{}", "n".repeat(251)),
            _ => "user.a\0".into(),
        }
    }

    /// An ACL's xattr form: mostly a valid ACL of any entries, sometimes a header alone, a
    /// valid one with a byte changed, or any bytes.
    fn acl_value(input: &mut Input) -> Vec<u8> {
        let perm = |i: &mut Input| i.below(8) as u32;
        let mut entries = vec![Entry { tag: Tag::UserObj, perm: perm(input) }];
        let named = input.bool();
        if named {
            entries.push(Entry { tag: Tag::User(1000 + input.below(3) as u32), perm: perm(input) });
        }
        entries.push(Entry { tag: Tag::GroupObj, perm: perm(input) });
        if named || input.bool() {
            entries.push(Entry { tag: Tag::Mask, perm: perm(input) });
        }
        entries.push(Entry { tag: Tag::Other, perm: perm(input) });
        let mut value = Acl::new(entries).expect("a valid ACL").encode();
        match input.below(8) {
            0 => value.truncate(4),
            1 => {
                let at = input.below(value.len());
                value[at] ^= input.byte() | 1;
            }
            2 => value = input.bytes(40).to_vec(),
            _ => {}
        }
        value
    }

    fn entry(&mut self, answer: &Answer) -> Option<DirEntry> {
        let entry = answer.decode::<DirEntry>("a step answering an entry")?;
        self.learn(entry.ino);
        if let Some(attr) = &entry.attr {
            assert_eq!((attr.ino, attr.kind), (entry.ino, entry.kind), "an entry's attributes are its inode's");
        }
        Some(entry)
    }

    fn attr(&mut self, answer: &Answer) -> Option<Attr> {
        let attr = answer.decode::<Attr>("a step answering attributes")?;
        self.learn(attr.ino);
        Some(attr)
    }

    /// mkdir as the client does it on one server.
    fn mkdir(&mut self, parent: Ino, name: String, mode: u32) {
        let answer = self.conn.call(MakeDirInode { parent, mode, umask: 0, uid: 0, gid: 0, inherited: Default::default() }, &[]);
        let Some(attr) = self.attr(&answer) else {
            // Refused only where the parent, homed here, is no directory (as the link would be).
            let Answer::Failure(e) = &answer else { unreachable!("no attributes, no failure") };
            assert!(matches!(e.code, ErrorCode::NotDir | ErrorCode::NotFound), "mkdir-inode failed: {e}");
            return;
        };
        let insert = InsertEntry { parent, name, ino: attr.ino, kind: FileKind::Dir, replace: false, retired_target: None, new_dir: None };
        match self.conn.call(insert, &[]).decode::<LinkOutcome>("insert-entry") {
            Some(outcome) => assert_eq!(outcome, LinkOutcome::default(), "a new name replaces nothing"),
            None => {
                assert!(
                    matches!(self.conn.call(DropInode { ino: attr.ino }, &[]), Answer::Reply { .. }),
                    "an unlinked new directory drops"
                );
            }
        }
    }

    /// What the client does after a name moved: a directory homed elsewhere gets its `..`,
    /// and what the target name used to name is finished off.
    fn finish_link(&mut self, outcome: LinkOutcome, parent: Ino) {
        if let Some(ino) = outcome.reparent {
            self.conn.call(SetParent { ino, parent }, &[]);
        }
        if let Some(unlinked) = outcome.replaced {
            self.finish_unlinked(&unlinked);
        }
    }

    fn finish_unlinked(&mut self, unlinked: &Unlinked) {
        let mut purge = unlinked.purge;
        if unlinked.remote {
            if unlinked.kind == FileKind::Dir {
                self.conn.call(DropInode { ino: unlinked.ino }, &[]);
                return;
            }
            purge = self
                .conn
                .call(DropLink { ino: unlinked.ino, ticket: unlinked.ticket }, &[])
                .decode::<InodeFate>("drop-link")
                .is_some_and(|f| f.purge);
        }
        if purge {
            self.purge(unlinked.ino);
        }
    }

    fn commit(&mut self, commit: Commit) {
        let (ino, release) = (commit.ino, commit.release);
        let answer = self.conn.call(commit, &[]);
        if let Answer::Reply { .. } = answer {
            if release {
                if let Some(n) = self.held.get_mut(&ino) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        if answer.decode::<InodeFate>("commit").is_some_and(|f| f.purge) {
            self.purge(ino);
        }
    }

    fn purge(&mut self, ino: Ino) {
        if let Answer::Reply { .. } = self.conn.call(PurgeData { ino, ticket: None }, &[]) {
            self.data.remove(&ino);
        }
    }

    /// A few namespace steps in one frame; each answered on its own, in order.
    fn batch(&mut self, input: &mut Input) {
        let mut requests: Vec<NamespaceRequest> = Vec::new();
        for _ in 0..input.below(6) {
            let (parent, name) = (self.ino(input), self.name(input));
            requests.push(match input.below(5) {
                0 => Lookup { parent, name }.into(),
                1 => GetAttr { ino: parent }.into(),
                2 => Create { parent, name, mode: 0o644, umask: 0, uid: 0, gid: 0, exclusive: input.bool(), open: false, place_on: None }
                    .into(),
                3 => Unlink { parent, name }.into(),
                _ => Readdir { ino: parent, after: None, limit: 3, watch_names: true, watch_attrs: false }.into(),
            });
        }
        let count = requests.len();
        let outcomes: Vec<BatchOutcome> = self.conn.must(Batch { requests: requests.clone() });
        assert_eq!(outcomes.len(), count, "one outcome per batched step");
        for (request, outcome) in requests.iter().zip(outcomes) {
            let Ok(reply) = outcome else { continue };
            let answer = Answer::Reply { message: reply, payload: Vec::new(), payload_len: 0 };
            match request {
                NamespaceRequest::Lookup(_) | NamespaceRequest::Create(_) => drop(self.entry(&answer)),
                NamespaceRequest::GetAttr(_) => drop(self.attr(&answer)),
                NamespaceRequest::Unlink(_) => {
                    let unlinked = answer.decode::<Unlinked>("a batched unlink").expect("decoded");
                    self.finish_unlinked(&unlinked);
                }
                _ => drop(answer.decode::<DirPage>("a batched readdir")),
            }
        }
    }

    /// What a stage coordinator orders a server to copy, with any sizes and chunk ranges,
    /// from and to PFS files of the run's own.
    fn copy_order(&mut self, input: &mut Input) {
        let direction = if input.bool() { StageDirection::In } else { StageDirection::Out };
        let chunk_size = [0, 1, 4095, 4096, 1 << 20, 64 << 20, (64 << 20) + 1, u64::MAX][input.below(8)];
        let mut items = Vec::new();
        for _ in 0..1 + input.below(3) {
            let ino = self.ino(input);
            let pfs_path = self.pfs.join(["source", "missing", "target"][input.below(3)]).to_string_lossy().into_owned();
            let publish = if input.one_in(4) { Some(self.pfs.join("published").to_string_lossy().into_owned()) } else { None };
            let file_size = match input.below(3) {
                0 => 300_000,
                _ => input.size(),
            };
            let (first_chunk, end_chunk) = match input.below(3) {
                0 => (0, file_size.div_ceil(chunk_size.max(1))),
                1 => (input.size(), input.size()),
                _ => (input.below(4) as u64, input.below(8) as u64),
            };
            // An order the server accepts is real work, a few microseconds per chunk: one at
            // the limit of 2^20 chunks takes seconds, which is no hang. Longer ones are kept
            // whole, for the refusal.
            let end_chunk =
                if end_chunk.saturating_sub(first_chunk) <= 1 << 20 { end_chunk.min(first_chunk.saturating_add(4096)) } else { end_chunk };
            items.push(CopyItem { ino, pfs_path, file_size, first_chunk, end_chunk, publish, mode: 0o644 });
        }
        if direction == StageDirection::Out {
            let _ = std::fs::write(self.pfs.join("target"), b"");
        }
        for item in &items {
            // Stage-in writes data this model does not follow.
            if direction == StageDirection::In {
                self.data.insert(item.ino, None);
            }
        }
        let count = items.len();
        let order = CopyOrder { direction, chunk_size, verify: input.bool(), items, uid: 0, gid: 0 };
        let outcomes: Vec<CopyOutcome> = self.conn.must(order);
        assert_eq!(outcomes.len(), count, "one outcome per item");
    }

    fn wrote(&mut self, ino: Ino, offset: u64, payload: &[u8], answer: &Answer) {
        match answer {
            // Nothing written, nothing changes (a file is as long as its last byte written).
            Answer::Reply { .. } if payload.is_empty() => {}
            Answer::Reply { .. } => {
                assert_eq!(answer.decode::<u32>("write"), Some(payload.len() as u32), "a write answers the bytes written");
                let end = offset + payload.len() as u64;
                let model = self.data.entry(ino).or_insert_with(|| Some(Vec::new()));
                match model {
                    Some(data) if end <= MODELLED => {
                        if data.len() < end as usize {
                            data.resize(end as usize, 0);
                        }
                        data[offset as usize..end as usize].copy_from_slice(payload);
                    }
                    _ => *model = None,
                }
            }
            // Refused before anything was written: bad ranges, a full server.
            Answer::Failure(e) if matches!(e.code, ErrorCode::Invalid | ErrorCode::NoSpace) => {}
            Answer::Failure(_) => drop(self.data.insert(ino, None)),
        }
    }

    fn read(&mut self, ino: Ino, offset: u64, len: u32, answer: &Answer) {
        let Answer::Reply { payload, payload_len, .. } = answer else { return };
        assert!(*payload_len <= len as usize, "a read answers at most what it asked");
        let expected: &[u8] = match self.data.get(&ino) {
            Some(Some(data)) => {
                let start = offset.min(data.len() as u64) as usize;
                let end = offset.saturating_add(len as u64).min(data.len() as u64) as usize;
                &data[start..end.max(start)]
            }
            // Never written: no data file, nothing to read.
            None => &[],
            Some(None) => return,
        };
        assert!(
            *payload_len == expected.len() && payload[..] == *expected,
            "read {len} bytes at {offset} of {ino:#x}: {payload_len} bytes back, {} written there",
            expected.len()
        );
    }

    /// The server after the run: still answering, its scans finish, its counts match them,
    /// and (in client mode) its namespace is whole.
    fn check(&mut self) {
        let stats = self.conn.must(StatFs);
        let (mut inodes, mut after) = (Vec::<InodeSummary>::new(), None);
        loop {
            let page = self.conn.must(ListInodes { after });
            assert!(page.inodes.windows(2).all(|w| w[0].ino < w[1].ino), "inodes listed in order");
            assert!(after.is_none_or(|a| page.inodes.first().is_none_or(|i| i.ino > a)), "a page starts after the last");
            after = page.inodes.last().map(|i| i.ino);
            inodes.extend(page.inodes);
            if !page.more {
                break;
            }
            assert!(after.is_some(), "a page with more has entries");
        }
        let (mut entries, mut after) = (Vec::<EntrySummary>::new(), None::<(Ino, String)>);
        loop {
            let page = self.conn.must(ListEntries { after: after.clone() });
            let keys: Vec<(Ino, &str)> = page.entries.iter().map(|e| (e.dir, e.name.as_str())).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "entries listed in order");
            if let (Some((d, n)), Some(first)) = (&after, keys.first()) {
                assert!((*d, n.as_str()) < *first, "a page starts after the last");
            }
            after = page.entries.last().map(|e| (e.dir, e.name.clone()));
            entries.extend(page.entries);
            if !page.more {
                break;
            }
            assert!(after.is_some(), "a page with more has entries");
        }
        let (mut files, mut after) = (Vec::<DataFileSummary>::new(), None);
        loop {
            let page = self.conn.must(ListDataFiles { after });
            after = page.files.last().map(|f| f.ino);
            files.extend(page.files);
            if !page.more {
                break;
            }
        }
        let dirs = inodes.iter().filter(|i| i.kind == FileKind::Dir).count() as u64;
        assert_eq!(
            (stats.inodes, stats.dirs, stats.files),
            (inodes.len() as u64, dirs, inodes.len() as u64 - dirs),
            "StatFs counts what ListInodes lists"
        );
        let allocated: u64 = files.iter().map(|f| f.allocated).sum();
        assert_eq!(stats.used, allocated, "used is what the data files hold ({files:?})");
        for (ino, model) in &self.data {
            if let Some(data) = model {
                let len = files.iter().find(|f| f.ino == *ino).map_or(0, |f| f.len);
                assert_eq!(len, data.len() as u64, "data file of {ino:#x} as long as written");
            }
        }
        for inode in &inodes {
            self.check_xattrs(inode);
        }
        if !self.raw {
            check_namespace(&inodes, &entries);
        }
    }

    /// What any inode's attributes must be, whatever was sent: within Linux's limits and the
    /// bound per inode, each listed name readable, user attributes only on files and
    /// directories, a default ACL only on a directory, and an access ACL valid and shown in
    /// the mode's permission bits (owner, mask or owning group, other).
    fn check_xattrs(&mut self, inode: &InodeSummary) {
        let names = self.conn.must(ListXattr { ino: inode.ino });
        assert!(xattr::xattr_list_len(names.iter().map(String::as_str)) <= xattr::MAX_XATTR_LIST_LEN, "{:#x}: {names:?}", inode.ino);
        let mut total = 0;
        for name in &names {
            let value = self.conn.must(GetXattr { ino: inode.ino, name: name.clone() });
            total += name.len() + value.len();
            assert!(value.len() <= MAX_XATTR_VALUE_LEN, "{:#x}: {name} of {} bytes", inode.ino, value.len());
            match XattrNamespace::of(name).unwrap_or_else(|e| panic!("{:#x}: a name no set may make: {name}: {e}", inode.ino)) {
                XattrNamespace::User => {
                    assert!(matches!(inode.kind, FileKind::File | FileKind::Dir), "{:#x}: {name} on a {:?}", inode.ino, inode.kind)
                }
                XattrNamespace::Acl(AclKind::Default) => assert_eq!(inode.kind, FileKind::Dir, "{:#x}: a default ACL", inode.ino),
                XattrNamespace::Acl(AclKind::Access) => {
                    let acl =
                        Acl::decode(&value).ok().flatten().unwrap_or_else(|| panic!("{:#x}: an access ACL that does not read", inode.ino));
                    let perm = |tag| acl.perm(tag).unwrap_or(0);
                    let group = acl.perm(Tag::Mask).unwrap_or_else(|| perm(Tag::GroupObj));
                    let shown = (perm(Tag::UserObj) << 6) | (group << 3) | perm(Tag::Other);
                    let mode = self.conn.must(GetAttr { ino: inode.ino }).mode;
                    assert_eq!(mode & 0o777, shown, "{:#x}: mode {mode:o} and its ACL {acl:?}", inode.ino);
                }
                _ => {}
            }
        }
        assert!(total <= xattr::MAX_XATTR_BYTES, "{:#x}: {total} bytes of attributes", inode.ino);
    }
}

/// What a namespace share must be between whole operations of clients, on a one-server
/// instance (where every inode is homed on server 0).
fn check_namespace(inodes: &[InodeSummary], entries: &[EntrySummary]) {
    let by_ino: HashMap<Ino, &InodeSummary> = inodes.iter().map(|i| (i.ino, i)).collect();
    let mut names: HashMap<Ino, Vec<&EntrySummary>> = HashMap::new();
    let mut subdirs: HashMap<Ino, u32> = HashMap::new();
    for e in entries {
        let inode = by_ino.get(&e.ino).unwrap_or_else(|| panic!("{:#x}/{} names inode {:#x}, which does not exist", e.dir, e.name, e.ino));
        assert_eq!(inode.kind, e.kind, "{:#x}/{} names a {:?} as a {:?}", e.dir, e.name, inode.kind, e.kind);
        assert!(!e.locked, "no rename holds {:#x}/{}", e.dir, e.name);
        names.entry(e.ino).or_default().push(e);
        if e.kind == FileKind::Dir {
            *subdirs.entry(e.dir).or_default() += 1;
        }
    }
    let root = by_ino.get(&ROOT_INO).expect("the root exists");
    assert_eq!(root.dir.as_ref().map(|d| d.parent), Some(ROOT_INO), "the root is its own parent");
    for inode in inodes {
        let named = names.get(&inode.ino).map_or(&[][..], Vec::as_slice);
        match &inode.dir {
            Some(dir) => {
                assert!(!dir.retired, "directory {:#x} retired", inode.ino);
                let subdirs = subdirs.get(&inode.ino).copied().unwrap_or(0);
                assert_eq!(inode.nlink, 2 + subdirs, "directory {:#x} with {subdirs} subdirectories", inode.ino);
                if inode.ino != ROOT_INO {
                    assert_eq!(named.len(), 1, "directory {:#x} named once: {named:?}", inode.ino);
                    assert_eq!(named[0].dir, dir.parent, "directory {:#x}'s .. is what names it", inode.ino);
                }
            }
            None => {
                assert_eq!(
                    inode.nlink as usize,
                    named.len(),
                    "{:?} {:#x} has {} links and {} names",
                    inode.kind,
                    inode.ino,
                    inode.nlink,
                    named.len()
                );
                assert!(inode.nlink > 0 || inode.opens > 0, "{:#x}: no name and nobody has it open, yet it exists", inode.ino);
            }
        }
    }
}
