//! Data-plane tests with real processes: servers on four loopback addresses started by
//! `surge up`, and clients in separate processes with their own source addresses ("nodes").

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use surge_tests::{pattern, scratch, text, write_local, Instance};

fn four_servers(name: &str, base: u8, capacity: &str) -> Instance {
    Instance::up_on(name, "127.0.0", base, 4, &["--capacity", capacity, "--chunk-size", "1M"])
}

#[test]
fn bytes_written_on_one_node_read_back_exactly_on_another() {
    let inst = four_servers("xnode", 31, "1G");
    let dir = scratch("xnode");
    let data = pattern(1, (9 << 20) + 12345); // not chunk-aligned, spans every server
    let src = write_local(&dir, "in.bin", &data);
    let out = inst.surge_on("127.0.0.41", &["put", src.to_str().unwrap(), "/in.bin"]);
    assert!(out.status.success(), "{}", text(&out));
    let back = dir.join("back.bin");
    let out = inst.surge_on("127.0.0.42", &["get", "/in.bin", back.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read(&back).unwrap() == data, "bytes differ after crossing nodes");
    // Every server holds part of it (striping), seen through status --json.
    let status: serde_json::Value = serde_json::from_slice(&inst.surge(&["status", "xnode", "--json"]).stdout).unwrap();
    for s in status["servers"].as_array().unwrap() {
        assert!(s["used"].as_u64().unwrap() >= 2 << 20, "server {} holds too little: {s}", s["index"]);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn concurrent_writers_to_disjoint_ranges_of_one_shared_file() {
    let inst = four_servers("n1", 51, "1G");
    let (ranks, block, count) = (4u64, 300_000u64, 40u64); // blocks straddle chunk boundaries
    let mut writers = Vec::new();
    for rank in 0..ranks {
        let node = format!("127.0.0.{}", 61 + rank);
        let mut cmd = inst.test_client(&node);
        cmd.args(["write-blocks", "/shared.dat", &rank.to_string(), &ranks.to_string(), &block.to_string(), &count.to_string()]);
        writers.push(cmd.spawn().unwrap());
    }
    for mut w in writers {
        assert!(w.wait().unwrap().success(), "a writer failed");
    }
    let c = inst.client("127.0.0.65");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let f = c.open("/shared.dat", false).await.unwrap();
        assert_eq!(f.size(), block * count, "size is the max of all writers' ends");
        let data = f.pread(0, (block * count) as usize).await.unwrap();
        for b in 0..count {
            let got = &data[(b * block) as usize..((b + 1) * block) as usize];
            assert!(got == pattern(b, block as usize).as_slice(), "block {b} is wrong");
        }
        f.close().await.unwrap();
    });
}

#[test]
fn rename_publishes_atomically() {
    let inst = four_servers("publish", 71, "2G");
    let mut writer = inst.test_client("127.0.0.81");
    writer.args(["publish", "/out/plot.h5", "150"]);
    let out = inst.surge(&["mkdir", "/out"]);
    assert!(out.status.success(), "{}", text(&out));
    let mut writer = writer.spawn().unwrap();
    let mut reader = inst.test_client("127.0.0.82");
    let reader = reader.args(["watch", "/out/plot.h5", "150"]).output().unwrap();
    assert!(writer.wait().unwrap().success(), "publisher failed");
    assert!(reader.status.success(), "reader saw a partial file: {}", text(&reader));
    let versions: usize = String::from_utf8_lossy(&reader.stdout).trim().parse().unwrap();
    assert!(versions >= 2, "the reader should have seen several versions, saw {versions}");
}

#[test]
fn write_past_capacity_fails_with_enospc_and_keeps_earlier_data() {
    let inst = four_servers("full", 91, "16M");
    let dir = scratch("full");
    let first = pattern(2, 8 << 20);
    let src = write_local(&dir, "first.bin", &first);
    let out = inst.surge(&["put", src.to_str().unwrap(), "/first.bin"]);
    assert!(out.status.success(), "{}", text(&out));
    let big = write_local(&dir, "big.bin", &pattern(3, 32 << 20));
    let out = inst.surge(&["put", big.to_str().unwrap(), "/big.bin"]);
    assert!(!out.status.success(), "a 32 MiB write into a 16 MiB instance succeeded");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no space left"), "{}", text(&out));
    let back = dir.join("back.bin");
    let out = inst.surge(&["get", "/first.bin", back.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read(&back).unwrap() == first, "earlier data damaged by the failed write");
    let c = inst.client("127.0.0.95");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(async {
        let f = c.create("/one-more", 0o644).await.unwrap();
        let err = f.pwrite(0, &vec![1u8; 16 << 20]).await.unwrap_err();
        f.close().await.unwrap();
        err
    });
    assert_eq!(err.errno(), libc::ENOSPC);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn killed_server_fails_fast_and_others_stay_readable() {
    let inst = four_servers("kill", 101, "1G");
    let dir = scratch("kill");
    let big = write_local(&dir, "big.bin", &pattern(4, 8 << 20));
    assert!(inst.surge(&["put", big.to_str().unwrap(), "/big.bin"]).status.success());
    let mut small = Vec::new();
    for i in 0..12 {
        let p = write_local(&dir, &format!("s{i}"), &pattern(100 + i, 5000));
        assert!(inst.surge(&["put", p.to_str().unwrap(), &format!("/s{i}")]).status.success());
        let out = inst.test_client("127.0.0.110").args(["chunk-server", &format!("/s{i}")]).output().unwrap();
        small.push((i, String::from_utf8_lossy(&out.stdout).trim().parse::<u64>().unwrap()));
    }
    let victim = 2u64; // not server 0, which homes the root directory
    assert!(
        small.iter().any(|(_, s)| *s == victim) && small.iter().any(|(_, s)| *s != victim),
        "placement too uneven for the test: {small:?}"
    );
    let pid = inst.descriptor()["servers"][victim as usize]["pid"].as_u64().unwrap();
    // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(100));

    let start = Instant::now();
    let out = inst.surge(&["get", "/big.bin", dir.join("x").to_str().unwrap()]);
    assert!(!out.status.success(), "read of a file striped over a dead server succeeded");
    assert!(start.elapsed() < Duration::from_secs(10), "failure took {:?}", start.elapsed());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server"), "error does not say a server is the problem: {err}");
    for (i, server) in small {
        let out = inst.surge(&["get", &format!("/s{i}"), dir.join(format!("b{i}")).to_str().unwrap()]);
        if server == victim {
            assert!(!out.status.success(), "s{i} lives on the dead server but was read");
        } else {
            assert!(out.status.success(), "s{i} on a live server unreadable: {}", text(&out));
            assert_eq!(std::fs::read(dir.join(format!("b{i}"))).unwrap(), pattern(100 + i, 5000));
        }
    }
    let status = inst.surge(&["status", "kill"]);
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stdout).contains("DOWN"), "{}", text(&status));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn clients_without_the_token_are_refused() {
    let inst = four_servers("auth", 121, "1G");
    let token = inst.home.join("instances/auth.token");
    let good = std::fs::read_to_string(&token).unwrap();
    // Wrong secret: refused by the servers.
    std::fs::write(&token, "ab".repeat(32)).unwrap();
    let out = inst.surge(&["ls", "/"]);
    assert!(!out.status.success(), "a wrong token was accepted");
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused this client"), "{}", text(&out));
    // Readable by others: refused by the client before anything is sent.
    std::fs::write(&token, &good).unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = inst.surge(&["ls", "/"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be 0600"), "{}", text(&out));
    // Missing.
    std::fs::remove_file(&token).unwrap();
    assert!(!inst.surge(&["ls", "/"]).status.success());
    // Restored: works.
    std::fs::write(&token, &good).unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = inst.surge(&["ls", "/"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn malformed_frames_close_the_connection_and_the_server_lives_on() {
    let inst = four_servers("garbage", 131, "1G");
    let addr = inst.descriptor()["servers"][0]["addr"].as_str().unwrap().to_string();
    let attacks: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        // Valid magic and version, 4 GiB payload announced before authentication.
        [b"SG".as_slice(), &[1, 1], &16u32.to_le_bytes(), &u32::MAX.to_le_bytes(), &7u64.to_le_bytes()].concat(),
        // A header, then the stream ends mid-message.
        [b"SG".as_slice(), &[1, 1], &100u32.to_le_bytes(), &0u32.to_le_bytes(), &1u64.to_le_bytes(), &[0u8; 10]].concat(),
        pattern(9, 100_000),
    ];
    for attack in attacks {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let _ = s.write_all(&attack);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        // The server answers the challenge, maybe an error, then closes: no hang.
        let _ = s.read_to_end(&mut sink);
    }
    let out = inst.surge(&["mkdir", "/still-alive"]);
    assert!(out.status.success(), "server stopped serving after bad input: {}", text(&out));
}

#[test]
fn private_mode_gives_each_node_its_own_namespace() {
    let inst = Instance::up("private", &["--servers", "2", "--capacity", "1G", "--hosts", "127.0.0.141,127.0.0.142", "--mode", "private"]);
    let dir = scratch("private");
    let src = write_local(&dir, "a", &pattern(5, 3 << 20));
    assert!(inst.surge_on("127.0.0.141", &["put", src.to_str().unwrap(), "/a"]).status.success());
    let mine = inst.surge_on("127.0.0.141", &["ls", "/"]);
    assert!(String::from_utf8_lossy(&mine.stdout).contains(" a\n"), "{}", text(&mine));
    let theirs = inst.surge_on("127.0.0.142", &["ls", "/"]);
    assert!(theirs.status.success() && !String::from_utf8_lossy(&theirs.stdout).contains(" a\n"), "{}", text(&theirs));
    let status: serde_json::Value = serde_json::from_slice(&inst.surge(&["status", "private", "--json"]).stdout).unwrap();
    assert!(status["servers"][0]["used"].as_u64().unwrap() >= 3 << 20, "data not on the writer's own server");
    assert!(status["servers"][1]["used"].as_u64().unwrap() == 0, "data leaked to another node's server");
    let out = inst.surge_on("127.0.0.143", &["ls", "/"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no server"), "{}", text(&out));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn eight_servers_start_and_stop() {
    let hosts: Vec<String> = (0..8).map(|i| format!("127.0.0.{}", 151 + i)).collect();
    let start = Instant::now();
    let inst = Instance::up("eight", &["--capacity", "1G", "--hosts", &hosts.join(",")]);
    let took = start.elapsed();
    eprintln!("8-server instance up in {took:?} (including the surge process start)");
    let status: serde_json::Value = serde_json::from_slice(&inst.surge(&["status", "eight", "--json"]).stdout).unwrap();
    assert_eq!(status["servers"].as_array().unwrap().len(), 8);
    assert!(status["servers"].as_array().unwrap().iter().all(|s| s["up"] == true));
    let pids: Vec<u64> = inst.descriptor()["servers"].as_array().unwrap().iter().map(|s| s["pid"].as_u64().unwrap()).collect();
    drop(inst);
    for pid in pids {
        // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
        assert!(unsafe { libc::kill(pid as i32, 0) } != 0, "server {pid} still running after down");
    }
}

/// A server that stops answering (SIGSTOP: connected, silent) must not hang a reader: both the
/// awaited read and the callback read (the FUSE mount's path for small reads) fail with
/// TimedOut after the client's timeout, and work again once the server continues. (The
/// client is made a remote one: a local read would find the stopped server's data intact.)
#[test]
fn a_silent_server_times_reads_out_on_both_paths() {
    let inst = four_servers("silent", 71, "1G");
    let opts = surge_client::ClientOptions {
        node: Some("127.0.0.81".parse().unwrap()),
        timeout: Duration::from_secs(1),
        local_io: false,
        ..Default::default()
    };
    let c = inst.client_with(opts);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let f = rt.block_on(async {
        let f = c.create("/f", 0o644).await.unwrap();
        f.pwrite(0, &pattern(3, 4 << 20)).await.unwrap();
        f.flush().await.unwrap();
        f
    });
    // Chunk 0 lives on some server; stop that one.
    let server = c.layout().pieces(f.ino(), 0, 1).next().unwrap().server;
    let pid = inst.descriptor()["servers"][server]["pid"].as_u64().unwrap() as i32;
    let read_back = |f: &surge_client::File| {
        let (tx, rx) = std::sync::mpsc::channel();
        let sent = f.read_then(0, 4096, move |r| tx.send(r.map(|d| d.len())).unwrap());
        assert!(sent.is_ok(), "the connection is open: the read goes out from this thread");
        rx
    };
    // The callback path works while the server answers (the awaited path has a test of its own).
    assert_eq!(read_back(&f).recv_timeout(Duration::from_secs(5)).unwrap().unwrap(), 4096);
    // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // SIGSTOP is delivered asynchronously: wait until every thread shows as stopped.
    let stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().all(|t| {
            std::fs::read_to_string(t.unwrap().path().join("stat")).is_ok_and(|stat| stat.contains(") T ") || stat.contains(") t "))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stopped() {
        assert!(Instant::now() < deadline, "server {pid} did not stop");
        std::thread::sleep(Duration::from_millis(2));
    }
    let started = Instant::now();
    let err = read_back(&f).recv_timeout(Duration::from_secs(5)).expect("the callback ran").unwrap_err();
    assert_eq!(err.code, surge_client::surge_proto::ErrorCode::TimedOut, "{err}");
    let err = rt.block_on(f.pread(0, 4096)).unwrap_err();
    assert_eq!(err.code, surge_client::surge_proto::ErrorCode::TimedOut, "{err}");
    // On its own 1 s timeout, not the 20 s default.
    assert!(started.elapsed() < Duration::from_secs(10), "timed out late: {:?}", started.elapsed());
    // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(rt.block_on(f.pread(0, 4096)).unwrap(), pattern(3, 4 << 20)[..4096]);
    rt.block_on(f.close()).unwrap();
}

/// A client on a servers' node reads their chunks from their data directories. It must read
/// exactly what a client elsewhere reads over the network (holes, a partial last chunk, reads
/// across chunk boundaries, a file truncated and regrown, a file unlinked while open) while no
/// read request reaches a server; and a server that died is not read behind its back.
#[test]
fn local_reads_match_network_reads_and_ask_no_server() {
    let inst = four_servers("local", 191, "1G");
    let (writer, local, remote) = (inst.client("127.0.0.201"), inst.client("127.0.0.191"), inst.client("127.0.0.202"));
    assert!(local.options().local_io && !remote.options().local_io);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let served = |c: &surge_client::Client| rt.block_on(c.statfs()).into_iter().map(|s| s.unwrap().read_bytes).sum::<u64>();
    let mib = 1u64 << 20;
    // (offset, length) pairs: whole file and past its end, a chunk boundary, the hole, the tail.
    let reads = [(0, 5 * mib), (mib - 100, 200), (2 * mib + 4096, 4096), (3 * mib + mib / 2, 4096), (0, 4096)];
    let read_both = |path: &str| -> Vec<Vec<u8>> {
        rt.block_on(async {
            let (l, r) = (local.open(path, false).await.unwrap(), remote.open(path, false).await.unwrap());
            let mut out = Vec::new();
            for (offset, len) in reads {
                let (a, b) = (l.pread(offset, len as usize).await.unwrap(), r.pread(offset, len as usize).await.unwrap());
                assert!(a == b, "{path}: local and network reads of {len} at {offset} differ");
                out.push(a);
            }
            l.close().await.unwrap();
            r.close().await.unwrap();
            out
        })
    };
    let first = pattern(1, 2 << 20);
    let tail = pattern(2, (1 << 19) + 7);
    rt.block_on(async {
        let f = writer.create("/f", 0o644).await.unwrap();
        f.pwrite(0, &first).await.unwrap();
        f.pwrite(3 * mib, &tail).await.unwrap(); // chunk 2 stays a hole
        f.close().await.unwrap();
    });
    served(&local); // the local client's connections to every server are up from here on
    let before = served(&writer);
    let got = read_both("/f");
    let network = served(&writer) - before;
    assert_eq!(got[0].len() as u64, 3 * mib + tail.len() as u64);
    assert!(
        got[0][..first.len()] == first[..]
            && got[0][2 * mib as usize..3 * mib as usize].iter().all(|&b| b == 0)
            && got[0][3 * mib as usize..] == tail[..]
    );
    // Only the network client's bytes were served: every one of them, and none for the local one.
    let expected: u64 = reads.iter().map(|&(o, l)| (o + l).min(got[0].len() as u64) - o).sum();
    assert!(network <= expected, "servers sent {network} bytes, the network client alone reads {expected}");
    assert!(network >= expected - 2 * mib, "servers sent {network} bytes; the network client's reads were not served?");

    // Truncated into chunk 1, then regrown past its old end: the local reader sees the zeros.
    rt.block_on(async {
        writer.truncate("/f", mib + 5).await.unwrap();
        let f = writer.open("/f", false).await.unwrap();
        f.pwrite(4 * mib, b"end").await.unwrap();
        f.close().await.unwrap();
    });
    let got = read_both("/f");
    assert_eq!(got[0].len() as u64, 4 * mib + 3);
    assert!(got[0][mib as usize + 5..4 * mib as usize].iter().all(|&b| b == 0), "truncated bytes came back");

    // Unlinked elsewhere while open here: the open handle still reads the whole file.
    let held = rt.block_on(local.open("/f", false)).unwrap();
    rt.block_on(writer.unlink("/f")).unwrap();
    assert_eq!(rt.block_on(held.pread(0, 5 << 20)).unwrap(), got[0]);
    rt.block_on(held.close()).unwrap();

    // A server killed: once its connection is known lost, its chunks are not read locally.
    let f = rt.block_on(async {
        let f = writer.create("/g", 0o644).await.unwrap();
        f.pwrite(0, &pattern(3, 4 << 20)).await.unwrap();
        f.close().await.unwrap();
        local.open("/g", false).await.unwrap()
    });
    let victim = local.layout().pieces(f.ino(), mib, 1).next().unwrap().server;
    assert_eq!(rt.block_on(f.pread(mib, 4096)).unwrap(), pattern(3, 4 << 20)[mib as usize..][..4096]);
    inst.kill_server(victim);
    let deadline = Instant::now() + Duration::from_secs(5);
    let err = loop {
        match rt.block_on(f.pread(mib, 4096)) {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "chunks of a dead server still read after 5 s"),
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(err.code, surge_client::surge_proto::ErrorCode::ServerDown, "{err}");
}

/// Replies to a burst of requests go out together, flushed when the server has nothing more
/// to read. A one-way request ending a burst (a watcher's acknowledgement) must not leave
/// the replies before it in the server's buffer: the client would wait for them until its
/// timeout (a FUSE read once failed with ETIMEDOUT that way).
#[test]
fn a_reply_followed_by_a_one_way_request_is_not_held_back() {
    use surge_client::surge_proto::admin::NoticeSeen;
    use surge_client::surge_proto::frame::{decode_message, encode_frame, FrameHeader};
    use surge_client::surge_proto::handshake::{Challenge, Hello, Welcome};
    use surge_client::surge_proto::namespace::GetAttr;
    use surge_client::surge_proto::{auth, Attr, FrameKind, Request, FRAME_HEADER_LEN, ROOT_INO};
    let inst = four_servers("oneway", 211, "1G");
    let desc = surge_client::InstanceDescriptor::load_from(&inst.home.join("instances/oneway.json")).unwrap();
    let mut s = TcpStream::connect(desc.servers[0].addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let read_reply = |s: &mut TcpStream| -> (FrameHeader, Vec<u8>) {
        let mut head = [0u8; FRAME_HEADER_LEN];
        s.read_exact(&mut head).expect("a reply within 5 s");
        let header = FrameHeader::decode(&head).unwrap();
        let mut body = vec![0u8; header.message_len as usize + header.payload_len as usize];
        s.read_exact(&mut body).unwrap();
        body.truncate(header.message_len as usize);
        (header, body)
    };
    let challenge: Challenge = decode_message(&read_reply(&mut s).1).expect("a challenge");
    let hello = Hello { session: 1, proof: auth::answer(&desc.read_secret().unwrap(), &challenge.challenge), identity: None, share: None };
    s.write_all(&encode_frame(FrameKind::Request, 1, &hello, 0)).unwrap();
    let (header, welcome) = read_reply(&mut s);
    assert_eq!(header.kind, FrameKind::Reply);
    decode_message::<Welcome>(&welcome).expect("a welcome");
    // A request and a one-way acknowledgement in one write: the server reads both at once.
    let burst = [
        encode_frame(FrameKind::Request, 2, &Request::from(GetAttr { ino: ROOT_INO }), 0),
        encode_frame(FrameKind::Request, 3, &Request::from(NoticeSeen { ack: 0 }), 0),
    ]
    .concat();
    s.write_all(&burst).unwrap();
    let (header, reply) = read_reply(&mut s);
    assert_eq!((header.request_id, header.kind), (2, FrameKind::Reply));
    let attr: Attr = decode_message(&reply).expect("the root's attributes");
    assert_eq!(attr.ino, ROOT_INO);
}

/// A client on the servers' node writes their chunks into their data files itself once a
/// handle has written its first MiB: almost no write request carries data, yet a client
/// elsewhere reads every byte after the close. The capacity limit holds for local writes as
/// for any (ENOSPC, nothing written earlier lost), and room set aside comes back at close.
#[test]
fn local_writes_publish_at_close_and_respect_capacity() {
    let inst = four_servers("localw", 221, "64M");
    let (local, remote) = (inst.client("127.0.0.221"), inst.client("127.0.0.231"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stats = |c: &surge_client::Client| rt.block_on(c.statfs()).into_iter().map(|s| s.unwrap()).collect::<Vec<_>>();
    let received = |c: &surge_client::Client| stats(c).iter().map(|s| s.written_bytes).sum::<u64>();
    let mib = 1usize << 20;
    // Written in 1 MiB steps, as a streaming writer does; returns the first failure.
    let write_steps = |path: &str, data: &[u8]| -> (surge_client::File, Option<surge_client::Error>) {
        rt.block_on(async {
            let f = local.create(path, 0o644).await.unwrap();
            for (i, step) in data.chunks(mib).enumerate() {
                if let Err(e) = f.pwrite((i * mib) as u64, step).await {
                    return (f, Some(e));
                }
            }
            (f, None)
        })
    };
    let data = pattern(7, 24 * mib + 4321);
    let before = received(&remote);
    let (f, failed) = write_steps("/big", &data);
    assert!(failed.is_none(), "{failed:?}");
    rt.block_on(f.close()).unwrap();
    let over_network = received(&remote) - before;
    assert!(over_network <= 2 * mib as u64, "{over_network} bytes of 24 MiB crossed the network");
    let read_back = |path: &str| rt.block_on(async { remote.open(path, false).await.unwrap().pread(0, 64 * mib).await.unwrap() });
    assert!(read_back("/big") == data, "a node elsewhere reads other bytes after the close");
    let used: u64 = stats(&remote).iter().map(|s| s.used).sum();
    assert!(used >= data.len() as u64 && used < data.len() as u64 + 2 * mib as u64, "accounted {used} bytes for {}", data.len());

    // 48 MiB more do not fit in the 40 left: the write fails with ENOSPC before any server's
    // share is exceeded, and the first file is intact.
    let (g, failed) = write_steps("/over", &pattern(8, 48 * mib));
    let err = failed.expect("a write past the capacity succeeded");
    assert_eq!(err.code, surge_client::surge_proto::ErrorCode::NoSpace, "{err}");
    let _ = rt.block_on(g.close());
    for s in stats(&remote) {
        assert!(s.used <= s.capacity, "server {} holds {} of {}", s.server_index, s.used, s.capacity);
    }
    assert!(read_back("/big") == data);
    // Once that file is gone, its room and every reservation made for it are back.
    rt.block_on(local.unlink("/over")).unwrap();
    let (h, failed) = write_steps("/again", &pattern(9, 30 * mib));
    assert!(failed.is_none(), "room was not given back: {failed:?}");
    rt.block_on(h.close()).unwrap();
    assert!(read_back("/again") == pattern(9, 30 * mib));
}

/// Every server of an instance killed with SIGKILL and started again on its directory comes
/// back with its namespace share, sizes and data: what was closed before the crash is there,
/// renames and removals included.
#[test]
fn servers_killed_and_restarted_come_back_with_namespace_and_data() {
    let inst = four_servers("durable", 141, "1G");
    let dir = scratch("durable");
    let files: Vec<(String, Vec<u8>)> = (0..6).map(|i| (format!("/run/step{i}.h5"), pattern(i as u64, (i * 700_000) + 10))).collect();
    assert!(inst.surge(&["mkdir", "-p", "/run/sub"]).status.success());
    for (path, body) in &files {
        let local = write_local(&dir, "src.bin", body);
        let out = inst.surge(&["put", local.to_str().unwrap(), path]);
        assert!(out.status.success(), "{}", text(&out));
    }
    assert!(inst.surge(&["mv", "/run/step1.h5", "/run/sub/renamed.h5"]).status.success());
    assert!(inst.surge(&["rm", "/run/step2.h5"]).status.success());
    // A close publishing a size is durable once answered, and with it every change before it
    // on its server (the removal, here); a rename is durable by itself.
    let last = write_local(&dir, "last.bin", b"last");
    assert!(inst.surge(&["put", last.to_str().unwrap(), "/run/last"]).status.success());
    let mut restarted = Vec::new();
    for index in 0..4 {
        inst.kill_server(index);
    }
    for index in 0..4 {
        restarted.push(inst.restart_server(index));
    }
    let expected = [
        ("/run/step0.h5", &files[0].1),
        ("/run/sub/renamed.h5", &files[1].1),
        ("/run/step3.h5", &files[3].1),
        ("/run/step4.h5", &files[4].1),
        ("/run/step5.h5", &files[5].1),
    ];
    for (path, body) in expected {
        let back = dir.join("back.bin");
        let out = inst.surge(&["get", path, back.to_str().unwrap()]);
        assert!(out.status.success(), "{path} after the restart: {}", text(&out));
        assert!(std::fs::read(&back).unwrap() == *body, "{path}: other bytes after the restart");
    }
    assert!(!inst.surge(&["stat", "/run/step2.h5"]).status.success(), "a removed file came back");
    assert!(!inst.surge(&["stat", "/run/step1.h5"]).status.success(), "a renamed file came back under its old name");
    // New files get new inode numbers (the counter survived): nothing is overwritten.
    let fresh = write_local(&dir, "fresh.bin", b"fresh");
    assert!(inst.surge(&["put", fresh.to_str().unwrap(), "/run/fresh"]).status.success());
    let back = dir.join("back.bin");
    assert!(inst.surge(&["get", "/run/step0.h5", back.to_str().unwrap()]).status.success());
    assert!(std::fs::read(&back).unwrap() == files[0].1);
    drop(inst);
    for mut child in restarted {
        let _ = child.wait();
    }
}

/// Kernel passthrough hands a handle the server's data file, and the handle later tells the
/// server what the kernel wrote there. The kernel sends a close's release after close has
/// returned, so a handle can be released after another handle truncated and rewrote the file
/// and its times were set: that late release must not take those changes for its own writes,
/// growing the file back to what it had written or publishing its own time over the set one.
/// (Here the client stands in for the kernel and writes the data files it is handed.)
#[test]
fn a_passthrough_handle_released_late_publishes_nothing_it_did_not_write() {
    use std::os::unix::fs::FileExt;
    use surge_client::surge_proto::{AttrChanges, Timestamp};
    let inst = Instance::up("ptlate", &["--capacity", "256M", "--hosts", "127.0.0.247"]);
    let (here, elsewhere) = (inst.client("127.0.0.247"), inst.client("127.0.0.248"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let set_time = Timestamp { secs: 981173106, nanos: 0 };
    let attr = rt.block_on(async {
        let first = here.create("/f", 0o644).await.unwrap();
        let backing = first.begin_passthrough(true).await.expect("a file of this node's only server is passed through");
        backing.write_all_at(&pattern(3, 3 << 20), 0).unwrap();
        first.flush().await.unwrap(); // close(2); its release comes later

        let reader = here.open("/f", false).await.unwrap();
        assert!(reader.begin_passthrough(false).await.is_some());
        let second = here.open("/f", false).await.unwrap();
        let backing = second.begin_passthrough(true).await.unwrap();
        second.set_len(1 << 20).await.unwrap();
        backing.write_all_at(b"rewritten", 4096).unwrap();
        second.flush().await.unwrap();
        second.release().await.unwrap();
        here.setattr(second.ino(), AttrChanges { mtime: Some(set_time), ..Default::default() }).await.unwrap();

        reader.release().await.unwrap();
        first.release().await.unwrap();
        elsewhere.getattr(first.ino()).await.unwrap()
    });
    assert_eq!(attr.size, 1 << 20, "a late release grew the file back");
    assert_eq!(attr.mtime, set_time, "a late release published its own time over the one set");
    let read = rt.block_on(async { elsewhere.open("/f", false).await.unwrap().pread(0, 2 << 20).await.unwrap() });
    assert_eq!(read.len(), 1 << 20);
    assert_eq!(&read[4096..4105], b"rewritten");
}
