//! What the operations layer's tests share: an instance whose servers run in this process,
//! the mount's operations over it, another node's client, and the adapter's calls that
//! answer through callbacks (reads and writes) as futures. No root, no kernel mount.

use std::sync::Arc;
use std::time::{Duration, Instant};

use surge_client::surge_proto::DirEntry;
use surge_client::{Client, ClientOptions, Result};
use surge_fuse::ops::{Answer, Caller, HowWritten, Opened, Ops};
use surge_server::in_process::InProcessInstance;

pub const TTL: Duration = Duration::from_secs(600);

pub struct Fixture {
    instance: Option<InProcessInstance>,
    pub root: std::path::PathBuf,
    /// The mount's operations, watching the servers.
    pub ops: Arc<Ops>,
    /// Another node's client, changing things behind the mount's back.
    pub other: Client,
}

impl Fixture {
    /// `test`: a name for the servers' directory, unique among the tests of one file.
    pub async fn new(test: &str, servers: usize) -> Fixture {
        let root = std::env::temp_dir().join(format!("surge-ops-test-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let instance = InProcessInstance::start(&root, servers, 1 << 30).await.expect("start the servers");
        // Local I/O off: both clients are in this process, as if on one node; every byte
        // should cross the servers.
        let opts = ClientOptions { local_io: false, ..Default::default() };
        let mount = Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts.clone()).unwrap();
        let ops = Ops::new(mount, tokio::runtime::Handle::current(), TTL);
        let other = Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts).unwrap();
        Fixture { instance: Some(instance), root, ops, other }
    }

    pub async fn stop(mut self) {
        if let Some(instance) = self.instance.take() {
            instance.stop().await;
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The caller: this process, as whoever runs the tests.
pub fn me() -> Caller {
    // SAFETY: geteuid/getegid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    Caller { uid, gid, pid: std::process::id() }
}

/// What an operation answered without a round trip; None when its answer comes later (its
/// work, not started, is dropped).
pub fn now<T>(answer: Answer<T>) -> Option<Result<T>> {
    match answer {
        Answer::Now(result) => Some(result),
        Answer::Later(_) => None,
    }
}

pub async fn write(ops: &Arc<Ops>, fh: u64, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
    write_killing_set_id(ops, fh, ino, offset, data, None).await
}

/// A write the kernel marked FUSE_WRITE_KILL_SUIDGID, for `caller` (when Some).
pub async fn write_killing_set_id(ops: &Arc<Ops>, fh: u64, ino: u64, offset: u64, data: &[u8], caller: Option<Caller>) -> Result<usize> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let how = HowWritten { append: false, kill_set_id_of: caller };
    ops.write(fh, ino, offset, bytes::Bytes::copy_from_slice(data), how, move |r| {
        let _ = tx.send(r);
    });
    rx.await.expect("the write is answered")
}

/// A write through handle `fh` of a descriptor opened with O_APPEND: at the end of the file
/// as its home has it, whatever `offset` the kernel passes.
pub async fn append(ops: &Arc<Ops>, fh: u64, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let how = HowWritten { append: true, kill_set_id_of: None };
    ops.write(fh, ino, offset, bytes::Bytes::copy_from_slice(data), how, move |r| {
        let _ = tx.send(r);
    });
    rx.await.expect("the write is answered")
}

pub async fn read(ops: &Arc<Ops>, fh: u64, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    ops.read(fh, ino, offset, size, move |r| {
        let _ = tx.send(r.map(|b| b.to_vec()));
    });
    rx.await.expect("the read is answered")
}

/// Everything handle `fh` reads from the start, 64 KiB at a time, as `cat` would.
pub async fn read_all(ops: &Arc<Ops>, fh: u64, ino: u64) -> Result<Vec<u8>> {
    let mut all = Vec::new();
    loop {
        let piece = read(ops, fh, ino, all.len() as u64, 64 << 10).await?;
        if piece.is_empty() {
            return Ok(all);
        }
        all.extend(piece);
    }
}

/// The names in directory `dir` as the mount lists them (opendir, readdir, releasedir), sorted.
pub async fn names(ops: &Arc<Ops>, dir: u64) -> Result<Vec<String>> {
    let fh = ops.opendir(dir).await?;
    let entries = ops.dir_entries(fh);
    ops.releasedir(fh);
    Ok(sorted(&entries?))
}

/// The names among `entries`, sorted.
pub fn sorted(entries: &[DirEntry]) -> Vec<String> {
    let mut names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    names.sort();
    names
}

/// The errno a failed operation answers.
pub fn errno<T>(result: Result<T>) -> i32 {
    match result {
        Ok(_) => panic!("the operation succeeded"),
        Err(e) => e.errno(),
    }
}

/// Creates `parent/name` (as open(2) with O_CREAT), writes `data`, closes it.
pub async fn put(ops: &Arc<Ops>, parent: u64, name: &str, data: &[u8]) -> u64 {
    let (attr, Opened { fh, .. }) = ops.create(parent, name.into(), 0o644, 0, 0, me()).await.unwrap();
    assert_eq!(write(ops, fh, attr.ino, 0, data).await.unwrap(), data.len());
    close(ops, attr.ino, fh).await;
    attr.ino
}

/// close(2) of the last descriptor of handle `fh`: its flush, then its release.
pub async fn close(ops: &Arc<Ops>, ino: u64, fh: u64) {
    ops.flush(ino, fh, 0).await.unwrap();
    ops.release(ino, fh).await.unwrap();
}

/// What `parent/name` holds, read through a handle of the mount.
pub async fn contents(ops: &Arc<Ops>, parent: u64, name: &str) -> Vec<u8> {
    let attr = ops.lookup(parent, name.into(), me()).await.unwrap();
    let Opened { fh, .. } = ops.open(attr.ino, libc::O_RDONLY, me()).await.unwrap();
    let data = read_all(ops, fh, attr.ino).await.unwrap();
    close(ops, attr.ino, fh).await;
    data
}

/// What `parent/name` holds, as another node reads it.
pub async fn contents_elsewhere(fx: &Fixture, parent: u64, name: &str) -> Vec<u8> {
    let attr = fx.other.lookup(parent, name).await.unwrap();
    let f = fx.other.open_ino(attr.ino).await.unwrap();
    let data = f.pread(0, attr.size as usize + 1).await.unwrap();
    f.close().await.unwrap();
    data
}

/// Makes files warm00, warm01, ... in `dir` (a directory the mount made) until the mount
/// holds it under a delegation, which a create answered at once shows. Answers their names.
pub async fn warm_until_held(ops: &Arc<Ops>, dir: u64) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut warm = Vec::new();
    loop {
        let name = format!("warm{:02}", warm.len());
        let (created, held) = match ops.create(dir, name.clone(), 0o644, 0, 0, me()) {
            Answer::Now(created) => (created, true),
            later => (later.await, false),
        };
        let (attr, Opened { fh, .. }) = created.unwrap();
        close(ops, attr.ino, fh).await;
        warm.push(name);
        if held {
            return warm;
        }
        assert!(Instant::now() < deadline, "no delegation granted");
        if warm.len() > 16 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
