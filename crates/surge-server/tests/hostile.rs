//! A server against requests no well-behaved client sends: lengths and offsets at the edges of
//! their types, orders that would loop for ever, answers too large for a frame, garbage. Each
//! is refused with an error, and the connection (and the server) goes on answering. The
//! server runs in this process; the client speaks raw frames.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use surge_proto::admin::Batch;
use surge_proto::auth;
use surge_proto::data::{Read as ReadData, ReserveLocal, TruncateData, Write as WriteData};
use surge_proto::frame::{decode_message, encode_frame, FrameHeader};
use surge_proto::handshake::{Challenge, Hello};
use surge_proto::namespace::{GetAttr, Lookup};
use surge_proto::stage::{CopyItem, CopyOrder, CopyOutcome, StageDirection};
use surge_proto::{Attr, ErrorCode, FrameKind, Request, FRAME_HEADER_LEN, ROOT_INO};
use surge_server::in_process::InProcessInstance;

struct Raw {
    stream: TcpStream,
    next: u64,
}

impl Raw {
    fn connect(addr: std::net::SocketAddr, secret: &auth::Secret) -> Raw {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut raw = Raw { stream, next: 1 };
        let (_, challenge) = raw.frame();
        let challenge: Challenge = decode_message(&challenge).unwrap();
        let hello = Hello { session: 1, proof: auth::answer(secret, &challenge.challenge), identity: None, share: None };
        raw.stream.write_all(&encode_frame(FrameKind::Request, 1, &hello, 0)).unwrap();
        assert_eq!(raw.frame().0.kind, FrameKind::Reply, "welcomed");
        raw
    }

    fn frame(&mut self) -> (FrameHeader, Vec<u8>) {
        let mut head = [0u8; FRAME_HEADER_LEN];
        self.stream.read_exact(&mut head).expect("an answer, in time");
        let header = FrameHeader::decode(&head).unwrap();
        let mut body = vec![0u8; header.message_len as usize + header.payload_len as usize];
        self.stream.read_exact(&mut body).unwrap();
        body.truncate(header.message_len as usize);
        (header, body)
    }

    /// Sends `request` with `payload`; the answer's kind and message.
    fn ask(&mut self, request: Request, payload: &[u8]) -> (FrameKind, Vec<u8>) {
        self.next += 1;
        self.stream.write_all(&encode_frame(FrameKind::Request, self.next, &request, payload.len())).unwrap();
        self.stream.write_all(payload).unwrap();
        let (header, message) = self.frame();
        assert_eq!(header.request_id, self.next);
        (header.kind, message)
    }

    /// The code of the failure `request` must be answered with.
    fn refused(&mut self, request: Request, payload: &[u8]) -> surge_proto::Error {
        let (kind, message) = self.ask(request, payload);
        assert_eq!(kind, FrameKind::Failure, "accepted");
        decode_message(&message).unwrap()
    }

    /// Creates and opens the file `name` in the root; its inode.
    fn create(&mut self, name: &str) -> u64 {
        use surge_proto::namespace::Create;
        let create = Create {
            parent: ROOT_INO,
            name: name.into(),
            mode: 0o644,
            umask: 0,
            uid: 0,
            gid: 0,
            exclusive: true,
            open: true,
            place_on: None,
        };
        let (kind, entry) = self.ask(create.into(), &[]);
        assert_eq!(kind, FrameKind::Reply, "'{name}' created");
        decode_message::<surge_proto::DirEntry>(&entry).unwrap().ino
    }

    /// The connection still answers an ordinary request.
    fn still_answers(&mut self) {
        let (kind, message) = self.ask(GetAttr { ino: ROOT_INO }.into(), &[]);
        assert_eq!(kind, FrameKind::Reply);
        assert_eq!(decode_message::<Attr>(&message).unwrap().ino, ROOT_INO);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_values_and_runaway_orders_are_refused_and_the_connection_goes_on() {
    let root = std::env::temp_dir().join(format!("surge-hostile-{}", std::process::id()));
    let instance = InProcessInstance::start(&root, 1, 64 << 20).await.unwrap();
    let result = tokio::task::spawn_blocking({
        let (addr, secret) = (instance.addrs[0], instance.secret);
        move || {
            let mut raw = Raw::connect(addr, &secret);
            let ino = 1 << 48 | 7;
            // A read longer than any answer can carry: refused before anything is allocated.
            assert_eq!(raw.refused(ReadData { ino, offset: 0, len: u32::MAX, ticket: None }.into(), &[]).code, ErrorCode::Invalid);
            // Offsets whose sum with the length overflows, or lies beyond a file's largest offset.
            assert_eq!(
                raw.refused(WriteData { ino, offset: u64::MAX - 10, ticket: None, may_wait: true }.into(), &[1; 100]).code,
                ErrorCode::Invalid
            );
            assert_eq!(
                raw.refused(WriteData { ino, offset: i64::MAX as u64, ticket: None, may_wait: true }.into(), &[1; 100]).code,
                ErrorCode::Invalid
            );
            assert_eq!(raw.refused(ReadData { ino, offset: u64::MAX, len: 4096, ticket: None }.into(), &[]).code, ErrorCode::Invalid);
            assert_eq!(raw.refused(TruncateData { ino, size: u64::MAX, ticket: None }.into(), &[]).code, ErrorCode::Invalid);
            // Room that no sum can hold.
            assert_eq!(raw.refused(ReserveLocal { ino, bytes: u64::MAX, ticket: None }.into(), &[]).code, ErrorCode::NoSpace);
            raw.still_answers();
            // Copy orders that would divide by zero, or walk 2^64 chunks.
            let item = |first_chunk, end_chunk, file_size| CopyItem {
                ino,
                pfs_path: "/nonexistent".into(),
                file_size,
                first_chunk,
                end_chunk,
                publish: None,
                mode: 0o644,
            };
            for order in [
                CopyOrder { direction: StageDirection::In, chunk_size: 0, verify: false, items: vec![item(0, 1, 10)], uid: 0, gid: 0 },
                CopyOrder {
                    direction: StageDirection::Out,
                    chunk_size: 1 << 20,
                    verify: false,
                    items: vec![item(0, u64::MAX, u64::MAX)],
                    uid: 0,
                    gid: 0,
                },
                CopyOrder {
                    direction: StageDirection::Out,
                    chunk_size: 1 << 20,
                    verify: false,
                    items: vec![item(5, 2, 10 << 20)],
                    uid: 0,
                    gid: 0,
                },
                // Every chunk of the largest file in the smallest chunks: its plan alone once took
                // the server's memory until the process died.
                CopyOrder {
                    direction: StageDirection::In,
                    chunk_size: 4096,
                    verify: false,
                    items: vec![item(0, (i64::MAX as u64).div_ceil(4096), i64::MAX as u64)],
                    uid: 0,
                    gid: 0,
                },
            ] {
                let (kind, message) = raw.ask(order.into(), &[]);
                assert_eq!(kind, FrameKind::Reply);
                let outcomes: Vec<CopyOutcome> = decode_message(&message).unwrap();
                assert!(matches!(&outcomes[..], [Err(e)] if e.code == ErrorCode::Invalid), "{outcomes:?}");
            }
            // A batch whose answers would not fit a frame: one failure, not a panic.
            let lookups = (0..60_000).map(|i| Lookup { parent: ROOT_INO, name: format!("n{i}") }.into()).collect();
            let failure = raw.refused(Batch { requests: lookups }.into(), &[]);
            assert!(failure.detail.contains("frame limits"), "{failure:?}");
            // Garbage where a request should be.
            raw.stream.write_all(&surge_proto::frame::encode_frame(FrameKind::Request, 99, &[0xffu8; 16], 0)).unwrap();
            let (header, message) = raw.frame();
            assert_eq!((header.request_id, header.kind), (99, FrameKind::Failure));
            assert_eq!(decode_message::<surge_proto::Error>(&message).unwrap().code, ErrorCode::Protocol);
            raw.still_answers();
        }
    })
    .await;
    instance.stop().await;
    let _ = std::fs::remove_dir_all(&root);
    result.unwrap();
}

/// A client that goes away without closing anything (its process killed): the server gives
/// back what its connection held. The open handle of a file unlinked meanwhile was the last
/// thing keeping its data, which goes; the room set aside for its local writes returns to the
/// share; its watch registration ends (the server's notice task with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_connection_gives_back_what_it_held() {
    use surge_proto::admin::{StatFs, Watch};
    use surge_proto::namespace::Unlink;
    use surge_proto::ServerStats;
    let root = std::env::temp_dir().join(format!("surge-vanished-{}", std::process::id()));
    let share = 64 << 20;
    let instance = InProcessInstance::start(&root, 1, share).await.unwrap();
    let (addr, secret) = (instance.addrs[0], instance.secret);
    let result = tokio::task::spawn_blocking(move || {
        let stats = |raw: &mut Raw| -> ServerStats { decode_message(&raw.ask(StatFs.into(), &[]).1).unwrap() };
        let mut gone = Raw::connect(addr, &secret);
        assert_eq!(gone.ask(Watch { keeps: surge_proto::admin::Keeps::Everything }.into(), &[]).0, FrameKind::Reply);
        let ino = gone.create("scratch");
        assert_eq!(gone.ask(WriteData { ino, offset: 0, ticket: None, may_wait: true }.into(), &vec![7u8; 4 << 20]).0, FrameKind::Reply);
        assert_eq!(gone.ask(ReserveLocal { ino, bytes: 32 << 20, ticket: None }.into(), &[]).0, FrameKind::Reply);
        assert_eq!(gone.ask(Unlink { parent: ROOT_INO, name: "scratch".into() }.into(), &[]).0, FrameKind::Reply);
        let mut other = Raw::connect(addr, &secret);
        assert!(stats(&mut other).used >= 4 << 20, "the unlinked file's data stays while it is open");
        drop(gone); // The connection ends without a word.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while stats(&mut other).used != 0 {
            assert!(std::time::Instant::now() < deadline, "the vanished client's unlinked file kept its data");
            std::thread::sleep(Duration::from_millis(10));
        }
        // All the room is free again: the reservation was given back.
        assert_eq!(other.ask(ReserveLocal { ino, bytes: share, ticket: None }.into(), &[]).0, FrameKind::Reply);
    })
    .await;
    instance.stop().await;
    let _ = std::fs::remove_dir_all(&root);
    result.unwrap();
}

/// A connection cannot release a handle another connection holds: the file an application
/// has open stays readable after its name is removed, whatever a third party sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_is_released_only_by_the_connection_that_opened_it() {
    use surge_proto::namespace::{Commit, Unlink};
    let root = std::env::temp_dir().join(format!("surge-hostile-release-{}", std::process::id()));
    let instance = InProcessInstance::start(&root, 1, 64 << 20).await.unwrap();
    let result = tokio::task::spawn_blocking({
        let (addr, secret) = (instance.addrs[0], instance.secret);
        move || {
            let mut owner = Raw::connect(addr, &secret);
            let mut other = Raw::connect(addr, &secret);
            let ino = owner.create("held");
            let (kind, _) = owner.ask(WriteData { ino, offset: 0, ticket: None, may_wait: true }.into(), b"still here");
            assert_eq!(kind, FrameKind::Reply);
            // Another connection "closes" it and removes its name.
            let (kind, _) = other.ask(Commit { ino, size: Some(10), mtime: None, release: true, wrote: true }.into(), &[]);
            assert_eq!(kind, FrameKind::Reply, "publishing a size is allowed");
            let (kind, _) = other.ask(Unlink { parent: ROOT_INO, name: "held".into() }.into(), &[]);
            assert_eq!(kind, FrameKind::Reply);
            // The owner's handle holds the inode: its attributes and data are still there.
            let (kind, message) = owner.ask(GetAttr { ino }.into(), &[]);
            assert_eq!(kind, FrameKind::Reply, "the open file's inode went with another connection's release");
            assert_eq!(decode_message::<Attr>(&message).unwrap().size, 10);
        }
    })
    .await;
    instance.stop().await;
    let _ = std::fs::remove_dir_all(&root);
    result.unwrap();
}

/// A one-server instance with two replicas mirrors its share on itself. Taking that copy
/// over is refused (it once stopped the mirror link and, through it, the server). And a
/// server that stops leaves nothing its clients still send waiting for ever (fuzz finding 9:
/// a `SwapEntry` never answered): a step that must be durable fails, since the journal is
/// closed, and a write does not wait for a mirror link that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_leaves_nothing_waiting() {
    use surge_proto::admin::{MirrorTo, Shutdown, StatFs, TakeOver};
    use surge_proto::namespace::SwapEntry;
    use surge_proto::{FileKind, MirrorState, ServerStats};
    let root = std::env::temp_dir().join(format!("surge-stopped-{}", std::process::id()));
    let instance = InProcessInstance::start_replicated(&root, 1, 64 << 20).await.unwrap();
    let (addr, secret) = (instance.addrs[0], instance.secret);
    let result = tokio::task::spawn_blocking(move || {
        let mut client = Raw::connect(addr, &secret);
        let mirror_here = MirrorTo { to: Some(addr), peers: vec![addr], failover_after_ms: None };
        assert_eq!(client.ask(mirror_here.into(), &[]).0, FrameKind::Reply);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stats: ServerStats = decode_message(&client.ask(StatFs.into(), &[]).1).unwrap();
            if stats.mirror == Some(MirrorState::InStep) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the mirror never came in step: {:?}", stats.mirror);
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(client.refused(TakeOver { index: 0 }.into(), &[]).code, ErrorCode::Invalid);
        let (ino, other) = (client.create("kept"), client.create("other"));

        let mut admin = Raw::connect(addr, &secret);
        assert_eq!(admin.ask(Shutdown.into(), &[]).0, FrameKind::Reply);
        (client, ino, other)
    })
    .await;
    // Shutdown is answered before the server gives its delegations back and closes its
    // share; what follows is asked of a closed one.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while result.is_ok() && !instance.has_stopped(0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopped = instance.has_stopped(0);
    let result = tokio::task::spawn_blocking(move || {
        let (mut client, ino, other) = result.unwrap();
        assert!(stopped, "the server did not stop within 10 s of Shutdown");
        // Each answered within the connection's 10 s read timeout.
        let swap = SwapEntry { parent: ROOT_INO, name: "kept".into(), expected: ino, ino: other, kind: FileKind::File };
        assert_eq!(client.refused(swap.into(), &[]).code, ErrorCode::ServerDown, "a durable step after the stop");
        let write = WriteData { ino, offset: 0, ticket: None, may_wait: false };
        assert_eq!(client.ask(write.into(), b"after the stop").0, FrameKind::Reply, "a write waits for no mirror");
    })
    .await;
    instance.stop().await;
    let _ = std::fs::remove_dir_all(&root);
    result.unwrap();
}
