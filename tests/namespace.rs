//! Namespace semantics through the client library against real servers: the POSIX rules a
//! file system must keep, including across servers (directories are homed all over).

use surge_client::surge_proto::{ErrorCode, FileKind, Timestamp};
use surge_tests::Instance;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_namespace_rules_hold_across_servers() {
    let inst = Instance::up("ns", &["--servers", "4", "--capacity", "1G", "--hosts", "127.0.0.171,127.0.0.172,127.0.0.173,127.0.0.174"]);
    let c = inst.client("127.0.0.175");
    // Many directories, so some pairs live on different servers.
    for i in 0..16 {
        c.mkdir(&format!("/d{i}"), 0o755).await.unwrap();
        let f = c.create(&format!("/d{i}/f"), 0o644).await.unwrap();
        f.pwrite(0, format!("file in d{i}").as_bytes()).await.unwrap();
        f.close().await.unwrap();
    }
    assert_eq!(c.mkdir("/d0", 0o755).await.unwrap_err().code, ErrorCode::Exists);
    assert_eq!(c.create("/d0/f", 0o644).await.err().unwrap().code, ErrorCode::Exists);
    assert_eq!(c.rmdir("/d0").await.unwrap_err().code, ErrorCode::NotEmpty);
    assert_eq!(c.unlink("/d0").await.unwrap_err().code, ErrorCode::IsDir);
    assert_eq!(c.rmdir("/d0/f").await.unwrap_err().code, ErrorCode::NotDir);
    assert_eq!(c.stat("/nope").await.unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(c.create(&format!("/{}", "x".repeat(256)), 0o644).await.err().unwrap().code, ErrorCode::NameTooLong);

    // File renames between every pair of directories, over existing targets.
    for i in 0..15 {
        c.rename(&format!("/d{i}/f"), &format!("/d{}/f", i + 1)).await.unwrap();
        assert_eq!(c.stat(&format!("/d{i}/f")).await.unwrap_err().code, ErrorCode::NotFound);
    }
    let f = c.open("/d15/f", false).await.unwrap();
    assert_eq!(f.pread(0, 100).await.unwrap(), b"file in d0");
    f.close().await.unwrap();

    // Directory renames across servers, into a subtree, and the cycle check.
    c.mkdir_all("/a/b/c", 0o755).await.unwrap();
    c.rename("/a/b", "/d3/b").await.unwrap();
    assert_eq!(c.stat("/d3/b/c").await.unwrap().kind, FileKind::Dir);
    assert_eq!(c.rename("/d3", "/d3/b/c/d3").await.unwrap_err().code, ErrorCode::Invalid);
    // Rename over an empty directory works, over a non-empty one fails.
    c.mkdir("/empty", 0o755).await.unwrap();
    c.rename("/d3/b", "/empty").await.unwrap();
    assert_eq!(c.stat("/empty/c").await.unwrap().kind, FileKind::Dir);
    assert_eq!(c.rename("/d2", "/d15").await.unwrap_err().code, ErrorCode::NotEmpty);
    c.rmdir("/empty/c").await.unwrap();
    c.rmdir("/empty").await.unwrap();
    for i in 0..15 {
        c.rmdir(&format!("/d{i}")).await.unwrap();
    }

    // Symlinks, attributes, truncate, holes.
    c.symlink("/d15/f", "/link").await.unwrap();
    assert_eq!(c.readlink("/link").await.unwrap(), "/d15/f");
    assert_eq!(c.stat("/link").await.unwrap().kind, FileKind::Symlink);
    let a = c.chmod("/d15/f", 0o600).await.unwrap();
    assert_eq!(a.mode, 0o600);
    let a = c.chown("/d15/f", Some(1234), Some(5678)).await.unwrap();
    assert_eq!((a.uid, a.gid), (1234, 5678));
    let when = Timestamp { secs: 1_000_000_000, nanos: 5 };
    let a = c.utimens("/d15/f", Some(when), Some(when)).await.unwrap();
    assert_eq!((a.atime, a.mtime), (when, when));
    let f = c.create("/holes", 0o644).await.unwrap();
    f.pwrite(5 << 20, b"end").await.unwrap();
    f.close().await.unwrap();
    let f = c.open("/holes", false).await.unwrap();
    assert_eq!(f.size(), (5 << 20) + 3);
    let data = f.pread(0, 6 << 20).await.unwrap();
    assert!(data[..5 << 20].iter().all(|&b| b == 0) && &data[5 << 20..] == b"end");
    f.close().await.unwrap();
    c.truncate("/holes", 10).await.unwrap();
    c.truncate("/holes", 6 << 20).await.unwrap();
    let f = c.open("/holes", false).await.unwrap();
    assert!(f.pread(0, 7 << 20).await.unwrap().iter().all(|&b| b == 0), "truncated bytes came back");
    f.close().await.unwrap();

    // An unlinked file stays readable through a handle opened before.
    let f = c.open("/d15/f", false).await.unwrap();
    c.unlink("/d15/f").await.unwrap();
    assert_eq!(f.pread(0, 100).await.unwrap(), b"file in d0");
    f.close().await.unwrap();

    let names: Vec<String> = c.readdir("/").await.unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["a", "d15", "holes", "link"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_behind_and_read_ahead_keep_bytes_and_report_errors() {
    let inst = Instance::up(
        "stream",
        &["--servers", "3", "--capacity", "24M", "--chunk-size", "64K", "--hosts", "127.0.0.181,127.0.0.182,127.0.0.183"],
    );
    let c = inst.client("127.0.0.184");
    let data = surge_tests::pattern(77, 3_000_001);
    let f = c.create("/stream", 0o644).await.unwrap();
    f.set_write_behind(512 << 10).await.unwrap();
    // Odd request sizes: pieces straddle chunk boundaries.
    let mut at = 0;
    for (i, piece) in data.chunks(70_001).enumerate() {
        assert_eq!(f.pwrite(at, piece).await.unwrap(), piece.len(), "write {i}");
        at += piece.len() as u64;
    }
    f.close().await.unwrap();

    let f = c.open("/stream", false).await.unwrap();
    f.set_read_ahead(1 << 20).await;
    let mut back = Vec::new();
    loop {
        let got = f.pread(back.len() as u64, 50_000).await.unwrap();
        if got.is_empty() {
            break;
        }
        back.extend(got);
    }
    assert!(back == data, "sequential read-ahead returned different bytes");
    // A jump backwards and a read across the end still come out right.
    assert_eq!(f.pread(100_000, 10).await.unwrap(), &data[100_000..100_010]);
    assert_eq!(f.pread(2_999_990, 100).await.unwrap(), &data[2_999_990..]);
    f.close().await.unwrap();

    // Past capacity with write-behind: the failure surfaces by close at the latest.
    let f = c.create("/too-big", 0o644).await.unwrap();
    f.set_write_behind(4 << 20).await.unwrap();
    let mut failed = false;
    for i in 0..64u64 {
        if f.pwrite(i << 20, &vec![1u8; 1 << 20]).await.is_err() {
            failed = true;
            break;
        }
    }
    let closed = f.close().await;
    assert!(failed || closed.as_ref().is_err_and(|e| e.errno() == libc::ENOSPC), "64 MiB into 24 MiB reported no ENOSPC: {closed:?}");
    let f = c.open("/stream", false).await.unwrap();
    assert!(f.pread(0, 4 << 20).await.unwrap() == data, "earlier file damaged");
    f.close().await.unwrap();
}
