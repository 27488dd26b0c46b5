//! Fault injection with real processes: a server killed (-9), stopped (SIGSTOP), restarted,
//! its node's link cut or slowed (the server moved into a network namespace of its own, the
//! link a veth pair taken down or shaped with `tc`), its disk filled — each while an application
//! writes, renames between servers, or stages out.
//!
//! Every scenario asserts what the issue asks of Surge: the application gets an error within
//! a bound (never a hang), nothing closed before the fault is lost on the servers that
//! survive it or after a restart, and a stage never reports done for a file that is not
//! complete on its target. Each writes its row of the fault table to
//! `$CARGO_TARGET_TMPDIR/faults/`; `bench/faults.sh` runs the suite and prints the table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use surge_client::surge_proto::admin::MirrorTo;
use surge_client::surge_proto::namespace::Unlink;
use surge_client::surge_proto::{ino, Error, ErrorCode, ROOT_INO};
use surge_client::{Client, ClientOptions};
use surge_tests::netns::NetNode;
use surge_tests::{binary, pattern, sh, text, Instance};

/// The client timeout in these tests: a request to an unresponsive server fails after it.
const TIMEOUT: Duration = Duration::from_secs(3);
/// An application that sees nothing for this long is hung: the test fails.
const HANG: Duration = Duration::from_secs(60);
/// A client gives up on a stopped server or a cut link by then if it keeps to `TIMEOUT`; one
/// that fell back to the default timeout (20 s) or waited for ever would not.
const GIVES_UP_BY: Duration = Duration::from_secs(15);
const MIB: usize = 1 << 20;

fn client(inst: &Instance) -> Client {
    // No source address: some servers may sit behind a veth, out of loopback's reach.
    inst.client_with(ClientOptions { timeout: TIMEOUT, node: None, local_io: false, ..Default::default() })
}

/// One row of the fault table.
struct Row {
    fault: &'static str,
    during: &'static str,
    app_sees: String,
    seconds: f64,
    lost_bytes: u64,
    after: String,
}

impl Row {
    fn record(&self, scenario: &str) {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults");
        std::fs::create_dir_all(&dir).unwrap();
        let line = format!(
            "| {} | {} | {} | {:.2} | {} | {} |\n",
            self.fault, self.during, self.app_sees, self.seconds, self.lost_bytes, self.after
        );
        std::fs::write(dir.join(format!("{scenario}.row")), line).unwrap();
    }
}

fn describe(e: &Error) -> String {
    format!("{:?} (errno {})", e.code, e.errno())
}

/// Files closed before a fault, in the root directory (homed on server 0): names, inodes
/// and contents.
struct Closed(Vec<(String, u64, Vec<u8>)>);

impl Closed {
    /// 12 files from 100 bytes to 3 MiB, closed.
    async fn write(c: &Client) -> Closed {
        let mut files = Vec::new();
        for i in 0..12u64 {
            let body = pattern(100 + i, [100, 4096, 700_000, 3 * MIB][i as usize % 4] + i as usize);
            let path = format!("/closed{i}");
            let f = c.create(&path, 0o644).await.unwrap();
            f.pwrite(0, &body).await.unwrap();
            let ino = f.ino();
            f.close().await.unwrap();
            files.push((path, ino, body));
        }
        Closed(files)
    }

    /// Bytes of the files that cannot be read back whole, and how many were checked: all, or
    /// (given a dead server, not server 0) those with no chunk on it.
    async fn lost(&self, c: &Client, dead: Option<usize>) -> (u64, usize) {
        let (mut lost, mut checked) = (0, 0);
        for (path, ino, body) in &self.0 {
            if dead.is_some_and(|dead| has_chunk_on(c, *ino, body.len(), dead)) {
                continue;
            }
            checked += 1;
            if read_all(c, path).await.as_deref().ok() != Some(body.as_slice()) {
                lost += body.len() as u64;
            }
        }
        (lost, checked)
    }
}

impl Closed {
    /// [`Closed::lost`] through a mount at `dir`, for the files with no chunk on `dead`.
    fn lost_through_mount(&self, c: &Client, dir: &Path, dead: usize) -> u64 {
        let mut checked = 0;
        let lost = self
            .0
            .iter()
            .filter(|(_, ino, body)| !has_chunk_on(c, *ino, body.len(), dead))
            .inspect(|_| checked += 1)
            .filter(|(path, _, body)| std::fs::read(dir.join(&path[1..])).ok().as_ref() != Some(body))
            .map(|(_, _, body)| body.len() as u64)
            .sum();
        assert!(checked > 0, "no closed file avoided server {dead}");
        lost
    }
}

/// Whether a file of `len` bytes has a chunk on server `server`.
fn has_chunk_on(c: &Client, ino: u64, len: usize, server: usize) -> bool {
    let chunks = (len as u64).div_ceil(c.chunk_size()).max(1);
    (0..chunks).any(|k| c.layout().chunk_server(ino, k) == server)
}

async fn read_all(c: &Client, path: &str) -> surge_client::Result<Vec<u8>> {
    let f = c.open(path, false).await?;
    let data = f.pread(0, f.size() as usize).await?;
    f.close().await?;
    Ok(data)
}

/// An application writing `total` bytes to `path` in 1 MiB writes, then closing: how far it
/// got, and its first error with when it came.
struct Writer {
    progress: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Result<(), (Error, Instant)>>,
}

impl Writer {
    fn start(c: &Client, path: &str, total: usize) -> Writer {
        let progress = Arc::new(AtomicU64::new(0));
        let (c, path, seen) = (c.clone(), path.to_string(), progress.clone());
        let task = tokio::spawn(async move {
            let failed = |e: Error| (e, Instant::now());
            let f = c.create(&path, 0o644).await.map_err(failed)?;
            let block = pattern(7, MIB);
            for i in 0..total / MIB {
                f.pwrite((i * MIB) as u64, &block).await.map_err(failed)?;
                seen.store(i as u64 + 1, Ordering::Relaxed);
            }
            f.close().await.map_err(failed)
        });
        Writer { progress, task }
    }

    async fn wait_for(&self, mib: u64) {
        let deadline = Instant::now() + HANG;
        while self.progress.load(Ordering::Relaxed) < mib {
            assert!(Instant::now() < deadline, "the writer made no progress");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Its outcome; fails the test if it does not end within [`HANG`].
    async fn outcome(self) -> Result<(), (Error, Instant)> {
        tokio::time::timeout(HANG, self.task).await.expect("the application hung").unwrap()
    }
}

/// A client that closed its [`Closed`] files and is now 16 MiB into writing 1 GiB.
async fn mid_write(inst: &Instance) -> (Client, Closed, Writer) {
    let c = client(inst);
    let closed = Closed::write(&c).await;
    let writer = Writer::start(&c, "/stream", 1024 * MIB);
    writer.wait_for(16).await;
    (c, closed, writer)
}

/// Writes and closes a new file: the instance serves writes again.
async fn write_again(c: &Client, mib: usize) {
    let again = c.create("/after", 0o644).await.unwrap();
    again.pwrite(0, &pattern(5, mib * MIB)).await.unwrap();
    again.close().await.unwrap();
}

fn instance(name: &str, base: u8, args: &[&str]) -> Instance {
    let mut all = vec!["--chunk-size", "1M"];
    all.extend_from_slice(args);
    Instance::up_on(name, "127.0.3", base, 4, &all)
}

/// An unlink while one of the file's data servers is stopped succeeds (the name is gone at
/// its home), and the data on that server is freed once it continues: the client purges it
/// again in the background, so `surge fsck` finds no orphaned data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_files_data_on_a_stopped_server_is_freed_once_it_continues() {
    let inst = instance("fpurge", 221, &["--capacity", "1G"]);
    let c = client(&inst);
    let f = c.create("/striped", 0o644).await.unwrap();
    f.pwrite(0, &pattern(9, 8 * MIB)).await.unwrap();
    let ino = f.ino();
    f.close().await.unwrap();
    let stopped = (0..4).find(|server| *server != 0 && has_chunk_on(&c, ino, 8 * MIB, *server)).expect("a chunk off the home");
    inst.signal_server(stopped, libc::SIGSTOP);
    let unlinked = c.unlink("/striped").await;
    inst.signal_server(stopped, libc::SIGCONT);
    unlinked.expect("the unlink succeeds: the name is gone");
    assert_eq!(c.stat("/striped").await.unwrap_err().code, ErrorCode::NotFound);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let check = inst.surge(&["fsck", &inst.name]);
        if check.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the data on server {stopped} was not freed: {}", text(&check));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A hard link and a rename into a directory homed on a server that is stopped while they
/// put their names in: each is sent again until the server continues and answers, and ends
/// whole. Undone on a guess instead, the name the server put in once it continued would be
/// one the file does not count (a link count of 1 for two names), the first step to a name
/// of nothing once the other goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_and_a_rename_into_a_stopped_servers_directory_end_whole_once_it_continues() {
    let inst = instance("fname", 231, &["--capacity", "1G"]);
    let c = client(&inst);
    let dir = dir_off_the_roots_server(&c).await;
    for name in ["linked", "renamed"] {
        let f = c.create(&format!("/{name}"), 0o644).await.unwrap();
        f.pwrite(0, name.as_bytes()).await.unwrap();
        f.close().await.unwrap();
    }
    let stopped = dir_home(&c, dir).await;
    inst.signal_server(stopped, libc::SIGSTOP);
    let link = tokio::spawn({
        let c = c.clone();
        async move { c.link("/linked", &format!("/r{dir}/linked")).await }
    });
    let rename = tokio::spawn({
        let c = c.clone();
        async move { c.rename("/renamed", &format!("/r{dir}/renamed")).await }
    });
    // Past the client's timeout: the first attempts' answers are lost.
    tokio::time::sleep(TIMEOUT + Duration::from_millis(1500)).await;
    inst.signal_server(stopped, libc::SIGCONT);
    let linked = tokio::time::timeout(HANG, link).await.expect("the link hung").unwrap();
    let renamed = tokio::time::timeout(HANG, rename).await.expect("the rename hung").unwrap();
    linked.expect("the link succeeds once the server continues");
    renamed.expect("the rename succeeds once the server continues");
    let (old, new) = (c.stat("/linked").await.unwrap(), c.stat(&format!("/r{dir}/linked")).await.unwrap());
    assert_eq!((old.ino, old.nlink), (new.ino, 2), "both names, counted");
    assert_eq!(c.stat("/renamed").await.unwrap_err().code, ErrorCode::NotFound, "the source name stayed");
    assert_eq!(read_all(&c, &format!("/r{dir}/renamed")).await.unwrap(), b"renamed");
    assert_eq!(c.stat(&format!("/r{dir}/renamed")).await.unwrap().nlink, 1);
    let check = inst.surge(&["fsck", &inst.name]);
    assert!(check.status.success(), "{}", text(&check));
}

/// Unlinks a server answered just before it was killed (-9) are not taken back by its
/// restart where another server already built on them: names whose file lived on another
/// server (whose link was dropped there) and files whose data was purged on other servers.
/// Taken back, they would be names of nothing, or files of zeros.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlinks_another_server_built_on_survive_a_kill_9_right_after() {
    let inst = instance("funlink", 241, &["--capacity", "1G"]);
    let c = client(&inst);
    let dir = dir_off_the_roots_server(&c).await;
    let mut names = Vec::new();
    for i in 0..8 {
        // Homed on the root's server, named only in the directory on another.
        let f = c.create(&format!("/elsewhere{i}"), 0o644).await.unwrap();
        f.pwrite(0, &pattern(i, 1000)).await.unwrap();
        f.close().await.unwrap();
        c.link(&format!("/elsewhere{i}"), &format!("/r{dir}/elsewhere{i}")).await.unwrap();
        c.unlink(&format!("/elsewhere{i}")).await.unwrap();
        // Striped over every server: its data is purged on the others.
        let f = c.create(&format!("/r{dir}/striped{i}"), 0o644).await.unwrap();
        f.pwrite(0, &pattern(i, 4 * MIB)).await.unwrap();
        f.close().await.unwrap();
        names.extend([format!("/r{dir}/elsewhere{i}"), format!("/r{dir}/striped{i}")]);
    }
    for name in &names {
        c.unlink(name).await.unwrap();
    }
    let home = dir_home(&c, dir).await;
    inst.kill_server(home);
    let mut restarted = inst.restart_server(home);
    let c = client(&inst);
    let left: Vec<String> = c.readdir(&format!("/r{dir}")).await.unwrap().into_iter().map(|e| e.name).collect();
    assert!(left.is_empty(), "unlinked names back after the restart: {left:?}");
    let check = inst.surge(&["fsck", &inst.name]);
    assert!(check.status.success(), "{}", text(&check));
    drop(inst);
    restarted.wait().unwrap();
}

/// The data a client leaves when it dies between ending a file and purging it is purged by
/// the keeper beside the file's home, also across a kill -9 and restart of that home (which
/// journals the file as ended): `surge fsck` is clean again with no repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_a_dead_client_left_is_purged_by_the_files_home() {
    let inst = instance("fleft", 251, &["--capacity", "1G"]);
    let c = client(&inst);
    let f = c.create("/left", 0o644).await.unwrap();
    f.pwrite(0, &pattern(5, 8 * MIB)).await.unwrap();
    f.close().await.unwrap();
    // The unlink's step alone: the name and the file go at the home, and the client that
    // would purge the data on the servers is gone.
    c.call(0, Unlink { parent: ROOT_INO, name: "left".into() }).await.unwrap();
    let left = inst.surge(&["fsck", &inst.name]);
    assert!(!left.status.success() && text(&left).contains("orphaned data"), "{}", text(&left));
    inst.kill_server(0);
    let mut restarted = inst.restart_server(0);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let check = inst.surge(&["fsck", &inst.name]);
        if check.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the data was not purged by the keeper: {}", text(&check));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    drop(inst);
    restarted.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_write() {
    let inst = instance("fkill", 101, &["--capacity", "2G"]);
    let (c, closed, writer) = mid_write(&inst).await;
    let fault = Instant::now();
    inst.kill_server(2);
    let (error, at) = writer.outcome().await.expect_err("a write to a dead server succeeded");
    let seconds = at.duration_since(fault).as_secs_f64();
    assert!(seconds < 2.0, "{seconds:.2} s to see a dead server");
    let (lost_alive, checked) = closed.lost(&c, Some(2)).await;
    assert_eq!(lost_alive, 0, "closed files on the surviving servers were lost");
    assert!(checked > 0, "no closed file avoided server 2");
    let mut restarted = inst.restart_server(2);
    let c = client(&inst);
    let (lost, _) = closed.lost(&c, None).await;
    assert_eq!(lost, 0, "closed files lost across the restart");
    let stream = c.stat("/stream").await.map(|a| a.size);
    Row {
        fault: "kill -9 server 2",
        during: "1 GiB write",
        app_sees: describe(&error),
        seconds,
        lost_bytes: lost,
        after: format!("restart: all 12 closed files whole; unclosed stream size {}", stream.map_or("absent".into(), |s| s.to_string())),
    }
    .record("kill_9_mid_write");
    drop(inst);
    restarted.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_mid_write() {
    let inst = instance("fstop", 111, &["--capacity", "2G"]);
    let (c, closed, writer) = mid_write(&inst).await;
    let fault = Instant::now();
    inst.signal_server(1, libc::SIGSTOP);
    let outcome = writer.outcome().await;
    inst.signal_server(1, libc::SIGCONT);
    let (error, at) = outcome.expect_err("a write to a stopped server succeeded");
    let seconds = at.duration_since(fault).as_secs_f64();
    assert_eq!(error.code, ErrorCode::TimedOut, "{error}");
    assert!(seconds < GIVES_UP_BY.as_secs_f64(), "{seconds:.2} s to give up on a stopped server");
    // Continued, the server serves again without a restart.
    let (lost, checked) = closed.lost(&c, None).await;
    assert_eq!((lost, checked), (0, 12));
    write_again(&c, 8).await;
    Row {
        fault: "SIGSTOP server 1",
        during: "1 GiB write",
        app_sees: describe(&error),
        seconds,
        lost_bytes: lost,
        after: "SIGCONT: serves again, no restart; all closed files whole".into(),
    }
    .record("sigstop_mid_write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_cut_and_delayed_mid_write() {
    let inst = instance("flink", 121, &["--capacity", "2G"]);
    let node = NetNode::new("flink", 71);
    // Server 3 moves to a node of its own, with its namespace share and data (its journal).
    inst.kill_server(3);
    let mut moved = inst.restart_server_with(3, &format!("{}:7431", node.addr), &["ip", "netns", "exec", &node.name]);
    let c = client(&inst);
    let closed = Closed::write(&c).await;

    // Shaped to 200 Mbit/s: writes go on, slower.
    let timed_write = |c: Client, path: &'static str| async move {
        let start = Instant::now();
        let f = c.create(path, 0o644).await.unwrap();
        f.pwrite(0, &pattern(3, 64 * MIB)).await.unwrap();
        f.close().await.unwrap();
        64.0 / start.elapsed().as_secs_f64()
    };
    let fast = timed_write(c.clone(), "/before-delay").await;
    node.shape("200mbit");
    let slow = timed_write(c.clone(), "/shaped").await;
    node.unshape();
    Row {
        fault: "link of server 3 slowed to 200 Mbit/s (tc tbf)",
        during: "64 MiB write",
        app_sees: "no error".into(),
        seconds: 0.0,
        lost_bytes: 0,
        after: format!("{fast:.0} MiB/s before, {slow:.0} MiB/s delayed"),
    }
    .record("link_slow_mid_write");

    // Cut: the link down mid-write.
    let writer = Writer::start(&c, "/stream", 1024 * MIB);
    writer.wait_for(16).await;
    let fault = Instant::now();
    node.cut();
    let outcome = writer.outcome().await;
    node.mend();
    let (error, at) = outcome.expect_err("a write over a cut link succeeded");
    let seconds = at.duration_since(fault).as_secs_f64();
    assert!(seconds < GIVES_UP_BY.as_secs_f64(), "{seconds:.2} s to give up on a cut link");
    let (lost, checked) = closed.lost(&c, None).await;
    assert_eq!((lost, checked), (0, 12), "closed files lost once the link was back");
    Row {
        fault: "link of server 3 cut (veth down)",
        during: "1 GiB write",
        app_sees: describe(&error),
        seconds,
        lost_bytes: lost,
        after: "link back: same connections resume or reconnect; all closed files whole".into(),
    }
    .record("link_cut_mid_write");
    drop(inst);
    let _ = moved.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_mid_write() {
    // The instance's directory on a 192 MiB tmpfs; once up, a filler takes most of it, so the
    // servers' writes meet the device's own ENOSPC well before their capacity shares.
    let root = PathBuf::from(format!("/dev/shm/surge-test-ffull-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    sh(&format!("mount -t tmpfs -o size=192m surge-ffull {}", root.display()));
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).output();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _unmount = Unmount(root.clone());
    let inst = instance("ffull", 131, &["--capacity", "160M"]);
    let c = client(&inst);
    let closed = Closed::write(&c).await;
    let filler = root.join("filler");
    sh(&format!("dd if=/dev/zero of={} bs=1M count=120 status=none", filler.display()));
    let fault = Instant::now();
    let writer = Writer::start(&c, "/stream", 128 * MIB);
    let (error, at) = writer.outcome().await.expect_err("128 MiB fit a full device");
    let seconds = at.duration_since(fault).as_secs_f64();
    assert_eq!(error.code, ErrorCode::NoSpace, "{error}");
    let (lost, checked) = closed.lost(&c, None).await;
    assert_eq!((lost, checked), (0, 12));
    std::fs::remove_file(&filler).unwrap();
    c.unlink("/stream").await.unwrap();
    write_again(&c, 32).await;
    Row {
        fault: "server disks filled (device ENOSPC)",
        during: "128 MiB write",
        app_sees: describe(&error),
        seconds,
        lost_bytes: lost,
        after: "room freed: writes go on, no restart; all closed files whole".into(),
    }
    .record("disk_full_mid_write");
    drop(inst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_write() {
    let inst = instance("frestart", 141, &["--capacity", "2G"]);
    let (c, closed, writer) = mid_write(&inst).await;
    let fault = Instant::now();
    inst.kill_server(1);
    let mut restarted = inst.restart_server(1);
    let restart_seconds = fault.elapsed().as_secs_f64();
    let outcome = writer.outcome().await;
    let (app_sees, seconds) = match &outcome {
        Ok(()) => ("no error".to_string(), 0.0),
        Err((e, at)) => (describe(e), at.duration_since(fault).as_secs_f64()),
    };
    // The same client goes on after the restart, without being told.
    let (lost, checked) = closed.lost(&c, None).await;
    assert_eq!((lost, checked), (0, 12));
    write_again(&c, 8).await;
    Row {
        fault: "server 1 killed and restarted",
        during: "1 GiB write",
        app_sees,
        seconds,
        lost_bytes: lost,
        after: format!("back in {restart_seconds:.2} s; the same client goes on; all closed files whole"),
    }
    .record("restart_mid_write");
    drop(inst);
    restarted.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_rename() {
    let inst = instance("frename", 151, &["--capacity", "1G"]);
    let c = client(&inst);
    for i in 0..8 {
        c.mkdir(&format!("/r{i}"), 0o755).await.unwrap();
    }
    // 200 files, each renamed back and forth between two directories on different servers.
    let mut homes = Vec::new();
    for i in 0..8 {
        homes.push(dir_home(&c, i).await);
    }
    let other = (1..8).find(|&i| homes[i] != homes[0]).expect("all directories on one server");
    let mut files = Vec::new();
    for i in 0..200u64 {
        let body = pattern(i, 5000 + i as usize);
        let f = c.create(&format!("/r0/f{i}"), 0o644).await.unwrap();
        f.pwrite(0, &body).await.unwrap();
        f.close().await.unwrap();
        files.push(body);
    }
    // Renames until the first error, or until told to stop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renamer = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            for round in 0.. {
                let (from, to) = if round % 2 == 0 { (0, other) } else { (other, 0) };
                for i in 0..200 {
                    if stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    if let Err(e) = c.rename(&format!("/r{from}/f{i}"), &format!("/r{to}/f{i}")).await {
                        return Some((e, Instant::now()));
                    }
                }
            }
            unreachable!()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fault = Instant::now();
    let victim = homes[other];
    inst.kill_server(victim);
    // Back a second later: a rename that had a step in flight to it when it died waits for it
    // (whether that step was applied decides the next); the others fail at once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut restarted = inst.restart_server(victim);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let ended = tokio::time::timeout(HANG, renamer).await.expect("rename hung").unwrap();
    let repair = inst.surge(&["fsck", &inst.name, "--repair", "--json"]);
    assert!(repair.status.success(), "{}", text(&repair));
    let report: serde_json::Value = serde_json::from_slice(&repair.stdout).unwrap();
    let repaired: Vec<String> =
        report[0]["report"]["findings"].as_array().unwrap().iter().map(|f| f["finding"].as_str().unwrap().to_string()).collect();
    assert!(!repaired.iter().any(|f| f == "dangling-entry"), "a name of nothing: {repaired:?}");
    let c = client(&inst);
    let mut lost = 0;
    for (i, body) in files.iter().enumerate() {
        let names = [format!("/r0/f{i}"), format!("/r{other}/f{i}")];
        let mut found = 0;
        for name in &names {
            if let Ok(data) = read_all(&c, name).await {
                assert_eq!(&data, body, "{name}: other bytes");
                found += 1;
            }
        }
        if found == 0 {
            lost += body.len() as u64;
        }
    }
    assert_eq!(lost, 0, "files lost by a rename cut short");
    let check = inst.surge(&["fsck", &inst.name]);
    assert!(check.status.success(), "{}", text(&check));
    Row {
        fault: "kill -9 of the target directory's server, restarted 1 s later",
        during: "renames between servers",
        app_sees: ended.as_ref().map_or("nothing: the rename in flight waited for the restart".into(), |(e, _)| describe(e)),
        seconds: ended.as_ref().map_or(0.0, |(_, at)| at.duration_since(fault).as_secs_f64()),
        lost_bytes: lost,
        after: format!(
            "restart + fsck --repair ({}): every file under one name or both, bytes intact",
            if repaired.is_empty() { "nothing to repair".to_string() } else { repaired.join(", ") }
        ),
    }
    .record("kill_9_mid_rename");
    drop(inst);
    restarted.wait().unwrap();
}

async fn dir_home(c: &Client, dir: usize) -> usize {
    ino::home(c.stat(&format!("/r{dir}")).await.unwrap().ino)
}

/// `/r<i>` made for i = 0, 1, ... until one is homed elsewhere than the root (server 0): its i.
async fn dir_off_the_roots_server(c: &Client) -> usize {
    for i in 0..8 {
        c.mkdir(&format!("/r{i}"), 0o755).await.unwrap();
        if dir_home(c, i).await != 0 {
            return i;
        }
    }
    panic!("eight directories, all on the root's server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stage_out() {
    let inst = instance("fstage", 161, &["--capacity", "2G"]);
    let c = client(&inst);
    let body = pattern(11, 512 * MIB);
    let f = c.create("/out.bin", 0o644).await.unwrap();
    f.pwrite(0, &body).await.unwrap();
    f.close().await.unwrap();
    let pfs = PathBuf::from(format!("/dev/shm/surge-test-fstage-pfs-{}", std::process::id()));
    let target = pfs.join("out.bin");
    let submit = inst.surge(&["stage", "out", "/out.bin", target.to_str().unwrap()]);
    assert!(submit.status.success(), "{}", text(&submit));
    let id: u64 = String::from_utf8_lossy(&submit.stdout).split_whitespace().nth(1).unwrap().parse().unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fault = Instant::now();
    inst.kill_server(2);
    let state = |inst: &Instance| {
        let out = inst.surge(&["stage", "status", &id.to_string(), "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["stage"].clone()
    };
    let (stage, seconds) = loop {
        let s = state(&inst);
        if ["Done", "Failed", "Cancelled"].contains(&s["state"].as_str().unwrap()) {
            break (s, fault.elapsed().as_secs_f64());
        }
        assert!(fault.elapsed() < HANG, "stage never ended: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let complete = std::fs::read(&target).is_ok_and(|d| d == body);
    // Never done for a file that is not complete on its target.
    assert!(stage["state"] != "Done" || complete, "stage done, target incomplete: {stage}");
    assert!(stage["state"] == "Done" || !target.exists(), "a failed stage left its target: {stage}");
    let mut restarted = inst.restart_server(2);
    let again = inst.surge(&["stage", "out", "/out.bin", target.to_str().unwrap(), "--wait"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(std::fs::read(&target).unwrap() == body, "the stage after the restart is not whole");
    Row {
        fault: "kill -9 server 2",
        during: "512 MiB stage-out",
        app_sees: format!("stage {}: {}", stage["state"].as_str().unwrap(), stage["error"].as_str().unwrap_or("")),
        seconds,
        lost_bytes: 0,
        after: "restart: the stage run again is Done, target identical".into(),
    }
    .record("kill_9_mid_stage_out");
    let _ = std::fs::remove_dir_all(&pfs);
    drop(inst);
    restarted.wait().unwrap();
}

/// What a program sees through the mount: `dd` writing 1 GiB (and syncing) while a server is
/// killed, then `ls -l` and `stat` while another is stopped. The mount gives up after its
/// request timeout (3 s here, `SURGE_TIMEOUT_SECS`).
/// A node that falls silent while holding a lock (its link cut: no FIN or RST reaches the
/// server) loses it once the file's home gives up on its connection (TCP keepalive: 10 s
/// idle, then 3 probes 5 s apart): a waiter on another node gets the lock then, not before.
#[test]
fn a_silent_nodes_lock_goes_when_keepalive_ends_its_connection() {
    use std::io::BufRead;
    use std::process::Stdio;
    let node = NetNode::new("flock", 73);
    // One server, on the host's end of the node's link, which both nodes reach.
    let host = "10.77.73.1";
    let inst = Instance::up("flock", &["--capacity", "1G", "--hosts", host]);
    let put = inst.surge(&["put", "/etc/hostname", "/locked"]);
    assert!(put.status.success(), "{}", text(&put));
    let client = binary("surge-test-client");
    let mut holder = inst
        .shell_on(&node.addr, &format!("exec ip netns exec {} {} lock /locked try 600", node.name, client.display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap()).read_line(&mut said).unwrap();
    assert!(said.starts_with("locked"), "the holder on the silent-to-be node: {said:?}");
    let mut waiter = inst.test_client(host).args(["lock", "/locked", "wait", "0"]).stdout(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(waiter.try_wait().unwrap().is_none(), "the waiter got a lock the live holder has");

    let fault = Instant::now();
    node.silence();
    let deadline = fault + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = waiter.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the waiter still waits 60 s after the holder's node fell silent");
        std::thread::sleep(Duration::from_millis(100));
    };
    let seconds = fault.elapsed().as_secs_f64();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut waiter.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success() && out.starts_with("locked"), "the waiter: {status} {out:?}");
    // Not before the keepalive could have given up (10 s idle + 3 x 5 s probes).
    assert!(seconds > 20.0, "the lock went after {seconds:.1} s, before TCP keepalive could end the connection");
    let _ = holder.kill();
    let _ = holder.wait();
    Row {
        fault: "node holding a lock falls silent (its link down)",
        during: "a waiter on another node",
        app_sees: "the waiter gets the lock".into(),
        seconds,
        lost_bytes: 0,
        after: "the home ended the silent connection (keepalive) and gave its locks back".into(),
    }
    .record("lock_holder_silent");
}

#[test]
fn faults_through_the_mount() {
    let inst = instance("fmount", 171, &["--capacity", "2G"]);
    let mount = inst.mount_with("faults", "127.0.3.180", &[("SURGE_TIMEOUT_SECS", "3")]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client(&inst);
    let closed = rt.block_on(Closed::write(&c));
    assert_eq!(closed.lost_through_mount(&c, &mount.dir, usize::MAX), 0);

    let stream = mount.path("stream");
    let mut dd = Command::new("dd")
        .args(["if=/dev/zero", &format!("of={}", stream.display()), "bs=1M", "count=1024", "conv=fsync", "status=none"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + HANG;
    while std::fs::metadata(&stream).map_or(0, |m| m.len()) < 16 << 20 {
        assert!(Instant::now() < deadline, "dd made no progress");
        std::thread::sleep(Duration::from_millis(2));
    }
    let fault = Instant::now();
    inst.kill_server(2);
    let status = wait_child(&mut dd);
    let seconds = fault.elapsed().as_secs_f64();
    let stderr = std::io::read_to_string(dd.stderr.take().unwrap()).unwrap();
    assert!(!status.success(), "dd wrote 1 GiB with a server dead");
    assert!(seconds < 5.0, "{seconds:.2} s for dd to fail");
    let lost = closed.lost_through_mount(&c, &mount.dir, 2);
    assert_eq!(lost, 0, "closed files on the surviving servers unreadable through the mount");
    Row {
        fault: "kill -9 server 2",
        during: "dd 1 GiB (conv=fsync) through the mount",
        app_sees: format!("dd: {}", stderr.trim().rsplit(": ").next().unwrap_or("")),
        seconds,
        lost_bytes: lost,
        after: "the other servers' closed files read whole through the mount at once".into(),
    }
    .record("mount_kill_mid_write");

    // A stopped server: listing and stat fail after the timeout, never hang.
    let stopped = (0..4).find(|&i| i != 2 && i != 0).unwrap();
    let dir_on_stopped = (0..64)
        .map(|i| format!("/d{i}"))
        .find(|d| {
            rt.block_on(c.mkdir(d, 0o755)).ok();
            rt.block_on(c.stat(d)).is_ok_and(|a| ino::home(a.ino) == stopped)
        })
        .expect("a directory homed on the server to stop");
    rt.block_on(async { c.create(&format!("{dir_on_stopped}/f"), 0o644).await.unwrap().close().await.unwrap() });
    let stopped_pid = inst.signal_server(stopped, libc::SIGSTOP);
    let fault = Instant::now();
    let mut ls = Command::new("ls")
        .arg("-l")
        .arg(mount.path(&dir_on_stopped[1..]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_child(&mut ls);
    let seconds = fault.elapsed().as_secs_f64();
    // The server's state as ls ended ('T': stopped), for a failure to say.
    let state = std::fs::read_to_string(format!("/proc/{stopped_pid}/stat")).unwrap_or_default();
    inst.signal_server(stopped, libc::SIGCONT);
    let stderr = std::io::read_to_string(ls.stderr.take().unwrap()).unwrap();
    let stdout = std::io::read_to_string(ls.stdout.take().unwrap()).unwrap();
    assert!(
        !status.success(),
        "ls of server {stopped}'s directory {dir_on_stopped} succeeded in {seconds:.2} s while it was stopped \
         (its /proc stat: {state}); ls printed: {stdout}"
    );
    assert!(seconds < 3.0 + 3.0, "{seconds:.2} s for ls to fail");
    let listed_after = Command::new("ls").arg(mount.path(&dir_on_stopped[1..])).output().unwrap();
    assert!(listed_after.status.success() && String::from_utf8_lossy(&listed_after.stdout).contains('f'));
    Row {
        fault: "SIGSTOP of a directory's server",
        during: "ls -l through the mount",
        app_sees: format!("ls: {}", stderr.trim().rsplit(": ").next().unwrap_or("")),
        seconds,
        lost_bytes: 0,
        after: "SIGCONT: the same mount lists it again".into(),
    }
    .record("mount_stop_mid_listing");
    drop(mount);
}

/// Waits for a child program; fails the test if it runs past [`HANG`].
fn wait_child(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + HANG;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the program hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Replication: with `--replicas 2` a node lost for good (its server killed, its directory
/// gone) loses nothing. Closed files, whichever servers held their chunks or homed their
/// directories, read back whole through a library client and a mount once `surge failover`
/// has the next server serve the lost share from its mirror; writes, creates and mkdirs go
/// on, in directories the lost server homed too; the lost server cannot be restarted over
/// its share.
#[test]
fn a_lost_node_loses_nothing_with_two_replicas() {
    let inst = instance("freplica", 181, &["--capacity", "2G", "--replicas", "2"]);
    let mount = inst.mount_with("replica", "127.0.3.185", &[("SURGE_TIMEOUT_SECS", "3")]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client(&inst);
    let lost = 2;
    let status = text(&inst.surge(&["status", "freplica"]));
    assert_eq!(status.matches("mirror in step").count(), 4, "every server's mirror is filled at start:\n{status}");
    let (closed, in_lost_dirs, writer) = rt.block_on(async {
        let closed = Closed::write(&c).await;
        assert!(
            closed.0.iter().any(|(_, ino, body)| has_chunk_on(&c, *ino, body.len(), lost)),
            "no closed file has a chunk on server {lost}"
        );
        // Files in directories the lost server homes (their names and attributes are there).
        let mut in_lost_dirs = Vec::new();
        for i in 0..64 {
            let dir = format!("/d{i}");
            let made = c.mkdir(&dir, 0o755).await.unwrap();
            if ino::home(made.ino) == lost {
                let body = pattern(300 + i as u64, 2 * MIB + i);
                let f = c.create(&format!("{dir}/f"), 0o644).await.unwrap();
                f.pwrite(0, &body).await.unwrap();
                f.close().await.unwrap();
                in_lost_dirs.push((format!("{dir}/f"), body));
            }
        }
        assert!(!in_lost_dirs.is_empty(), "no directory homed on server {lost}");
        let writer = Writer::start(&c, "/stream", 1024 * MIB);
        writer.wait_for(16).await;
        (closed, in_lost_dirs, writer)
    });

    // The node is lost for good: its server killed, its directory gone with its disk.
    let fault = Instant::now();
    inst.kill_server(lost);
    let server_dir = inst.root.join("freplica").join(format!("server-{lost}"));
    std::fs::remove_dir_all(&server_dir).unwrap();
    let (error, at) = rt.block_on(writer.outcome()).expect_err("a write to a lost server succeeded before the failover");
    let seconds = at.duration_since(fault).as_secs_f64();
    assert!(seconds < 5.0, "{seconds:.2} s to see a lost server");

    let failover = inst.surge(&["failover", "freplica", "--server", &lost.to_string()]);
    assert!(failover.status.success(), "surge failover: {}", text(&failover));
    let took = fault.elapsed().as_secs_f64();
    let status = text(&inst.surge(&["status", "freplica"]));
    assert!(status.contains(&format!("LOST, served by {}", lost + 1)), "{status}");

    // Nothing closed is lost: through the client that saw the fault, a new one, the mount.
    let fresh = client(&inst);
    for c in [&c, &fresh] {
        let (lost_bytes, checked) = rt.block_on(closed.lost(c, None));
        assert_eq!((lost_bytes, checked), (0, 12), "closed files lost with server {lost}'s node");
        for (path, body) in &in_lost_dirs {
            assert_eq!(rt.block_on(read_all(c, path)).as_ref().ok(), Some(body), "{path} in a directory the lost server homed");
        }
    }
    assert_eq!(closed.lost_through_mount(&c, &mount.dir, usize::MAX), 0, "closed files unreadable through the mount");
    for (path, body) in &in_lost_dirs {
        assert_eq!(std::fs::read(mount.path(&path[1..])).ok().as_ref(), Some(body), "{path} through the mount");
    }

    // Writes go on: the client that failed writes again, creates and mkdirs where the lost
    // server homed names, the mount too.
    rt.block_on(async {
        write_again(&c, 8).await;
        assert_eq!(read_all(&fresh, "/after").await.unwrap(), pattern(5, 8 * MIB));
        let (dir, _) = &in_lost_dirs[0];
        let dir = dir.rsplit_once('/').unwrap().0;
        let f = c.create(&format!("{dir}/new"), 0o644).await.unwrap();
        f.pwrite(0, &pattern(9, 3 * MIB)).await.unwrap();
        f.close().await.unwrap();
        c.mkdir(&format!("{dir}/sub"), 0o755).await.unwrap();
        assert_eq!(read_all(&fresh, &format!("{dir}/new")).await.unwrap(), pattern(9, 3 * MIB));
    });
    std::fs::write(mount.path("through-mount"), pattern(11, 5 * MIB)).unwrap();
    assert_eq!(rt.block_on(read_all(&fresh, "/through-mount")).unwrap(), pattern(11, 5 * MIB));

    // The lost server does not come back over the share its successor now serves.
    let restart = inst.surge(&["restart", "freplica", "--server", &lost.to_string()]);
    assert!(!restart.status.success(), "a lost server was restarted over its taken-over share");
    assert!(text(&restart).contains("taken over"), "{}", text(&restart));

    // The successor, killed and restarted, serves the share it took over again.
    drop(mount);
    inst.kill_server(lost + 1);
    let restart = inst.surge(&["restart", "freplica", "--server", &(lost + 1).to_string()]);
    assert!(restart.status.success(), "{}", text(&restart));
    let again = client(&inst);
    assert_eq!(rt.block_on(closed.lost(&again, None)), (0, 12), "closed files lost with the stand-in's restart");
    for (path, body) in &in_lost_dirs {
        assert_eq!(rt.block_on(read_all(&again, path)).as_ref().ok(), Some(body), "{path} after the stand-in's restart");
    }
    assert_eq!(rt.block_on(read_all(&again, "/through-mount")).unwrap(), pattern(11, 5 * MIB));
    Row {
        fault: "node of server 2 lost (kill -9, its directory removed), --replicas 2",
        during: "1 GiB write",
        app_sees: describe(&error),
        seconds,
        lost_bytes: 0,
        after: format!(
            "surge failover done {took:.2} s after the fault: 12/12 closed files and {} files in directories server 2 homed whole \
             (library, mount); writes, creates, mkdir go on; restart of server 2 refused; server 3 killed and restarted serves \
             the share again",
            in_lost_dirs.len()
        ),
    }
    .record("replica_node_lost_mid_write");
}

/// Replication: a server whose mirror is lost goes on alone (its writes succeed, `surge
/// status` says the mirror is unreached), and once the lost server is restarted every mirror is
/// filled again: each server's data files and metadata journal are byte for byte on the next.
#[test]
fn a_lost_mirror_is_filled_again_when_its_server_comes_back() {
    let inst = Instance::up_on("fmirror", "127.0.3", 186, 3, &["--capacity", "1G", "--chunk-size", "1M", "--replicas", "2"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client(&inst);
    rt.block_on(async {
        for i in 0..9u64 {
            let f = c.create(&format!("/before{i}"), 0o644).await.unwrap();
            f.pwrite(0, &pattern(i, 3 * MIB + i as usize)).await.unwrap();
            f.close().await.unwrap();
        }
    });
    inst.kill_server(2);
    // Server 1 mirrors on server 2: it goes on alone. A file striped over servers 0 and 1
    // only (chunk size 1 MiB, 3 servers) is written whole.
    rt.block_on(async {
        let f = c.create("/alone", 0o644).await.unwrap();
        let on_live = (0..).find(|&k| c.layout().chunk_server(f.ino(), k) != 2).unwrap() * MIB as u64;
        f.pwrite(on_live, &pattern(40, MIB)).await.expect("a write to a server whose mirror is lost");
        f.close().await.unwrap();
    });
    let status = text(&inst.surge(&["status", "fmirror"]));
    assert!(status.contains("mirror unreached"), "{status}");

    let restart = inst.surge(&["restart", "fmirror", "--server", "2"]);
    assert!(restart.status.success(), "{}", text(&restart));
    let restarted = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = text(&inst.surge(&["status", "fmirror"]));
        if status.matches("mirror in step").count() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "mirrors not in step 20 s after the restart:\n{status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let in_step = restarted.elapsed().as_secs_f64();
    rt.block_on(async {
        let f = c.create("/after", 0o644).await.unwrap();
        f.pwrite(0, &pattern(41, 5 * MIB)).await.unwrap();
        f.close().await.unwrap();
        c.unlink("/before0").await.unwrap();
    });
    // Byte for byte: each server's share on the next one (the journal once written: it is
    // written every 50 ms).
    let share = |i: usize| inst.root.join("fmirror").join(format!("server-{i}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..3 {
        let (primary, mirror) = (share(i), share((i + 1) % 3).join("mirror"));
        loop {
            let differs = differences(&primary, &mirror);
            if differs.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "server {i}'s mirror differs: {differs:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(mirror.join("complete").exists());
    }
    Row {
        fault: "kill -9 server 2 (server 1's mirror), then restart, --replicas 2",
        during: "writes to servers 0 and 1",
        app_sees: "no error: server 1 goes on alone".into(),
        seconds: 0.0,
        lost_bytes: 0,
        after: format!("every mirror in step {in_step:.1} s after the restart; each share byte for byte on the next server"),
    }
    .record("replica_mirror_lost");
}

/// The files of `primary`'s share (data files, metadata snapshot and journal) that `mirror`
/// does not hold byte for byte.
fn differences(primary: &Path, mirror: &Path) -> Vec<String> {
    let mut names: Vec<PathBuf> = ["meta/snapshot", "meta/journal"].iter().map(PathBuf::from).collect();
    for dir in [primary, mirror] {
        for entry in std::fs::read_dir(dir.join("data")).unwrap() {
            names.push(Path::new("data").join(entry.unwrap().file_name()));
        }
    }
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| std::fs::read(primary.join(name)).ok() != std::fs::read(mirror.join(name)).ok())
        .map(|n| n.display().to_string())
        .collect()
}

/// Automatic failover (`--replicas 2 --failover-after 6`): a server whose node is cut off is
/// fenced by itself (a client on its node is refused) and its share is taken over by the next
/// server once a majority cannot reach it, without anyone asking; clients elsewhere read every
/// closed file; when the link comes back the old server learns its share was taken over and
/// stops.
#[test]
fn a_cut_off_server_is_fenced_and_its_share_taken_over_by_itself() {
    let node = NetNode::new("ffail", 74);
    let host = "10.77.74.1";
    let hosts = [host; 4].join(",");
    let args = ["--servers", "4", "--hosts", &hosts, "--capacity", "1G", "--chunk-size", "1M", "--replicas", "2", "--failover-after", "6"];
    let inst = Instance::up("ffail", &args);
    // Server 1 moves to the node (its share with it), and every server is told the new map.
    inst.kill_server(1);
    let mut moved = inst.restart_server_with(1, &format!("{}:7441", node.addr), &["ip", "netns", "exec", &node.name]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client(&inst);
    let addrs: Vec<std::net::SocketAddr> = c.server_addrs();
    rt.block_on(async {
        for i in 0..4 {
            let told = MirrorTo { to: Some(addrs[(i + 1) % 4]), peers: addrs.clone(), failover_after_ms: Some(6000) };
            c.call(i, told).await.unwrap();
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while text(&inst.surge(&["status", "ffail"])).matches("mirror in step").count() < 4 {
        assert!(Instant::now() < deadline, "mirrors not in step:\n{}", text(&inst.surge(&["status", "ffail"])));
        std::thread::sleep(Duration::from_millis(100));
    }
    let (closed, on_lost) = rt.block_on(async {
        let closed = Closed::write(&c).await;
        let mut on_lost = None;
        for i in 0..64 {
            let attr = c.mkdir(&format!("/d{i}"), 0o755).await.unwrap();
            if ino::home(attr.ino) == 1 {
                on_lost = Some((format!("/d{i}"), attr.ino));
                break;
            }
        }
        (closed, on_lost.expect("a directory homed on server 1"))
    });
    let in_node = |what: &str| -> String {
        let out = inst
            .shell_on(&node.addr, &format!("exec ip netns exec {} {} {what} 2>&1", node.name, binary("surge-test-client").display()))
            .env("SURGE_TIMEOUT_SECS", "2")
            .output()
            .unwrap();
        text(&out)
    };
    assert!(in_node(&format!("getattr-ino {:x}", on_lost.1)).contains("size"), "server 1 answers its node before the cut");

    // The node's end of its link down: nobody reaches it, it reaches nobody (the host's end,
    // where the other servers listen, stays up).
    let fault = Instant::now();
    node.silence();
    // A client that starts reading now, on the host, waits through the take-over instead of
    // failing.
    let waiting = {
        let (c, closed) = (client(&inst), Closed(closed.0.clone()));
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let outcome = rt.block_on(closed.lost(&c, None));
            (outcome, fault.elapsed().as_secs_f64())
        })
    };
    // Fenced by itself after half the delay (and a few seconds' checks): its own node is
    // refused, before anyone takes its share over.
    let fenced_at = loop {
        let answer = in_node(&format!("getattr-ino {:x}", on_lost.1));
        if answer.contains("cut off from most of its instance") {
            break fault.elapsed().as_secs_f64();
        }
        assert!(fault.elapsed() < Duration::from_secs(12), "server 1 still answers its node 12 s after the cut: {answer}");
        std::thread::sleep(Duration::from_millis(250));
    };
    // Taken over without anyone asking, once a majority cannot reach it.
    let took = loop {
        let status = text(&inst.surge(&["status", "ffail"]));
        if status.contains("LOST, served by 2") {
            break fault.elapsed().as_secs_f64();
        }
        assert!(fault.elapsed() < Duration::from_secs(40), "no take-over 40 s after the cut:\n{status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(took >= 6.0, "taken over {took:.1} s after the cut, before the delay");
    assert!(fenced_at < took, "fenced {fenced_at:.1} s after the cut, taken over at {took:.1} s");
    let fresh = client(&inst);
    let (lost, checked) = rt.block_on(closed.lost(&fresh, None));
    assert_eq!((lost, checked), (0, 12), "closed files lost with the cut-off server");
    let (waited, read_at) = waiting.join().unwrap();
    assert_eq!(waited, (0, 12), "a reader during the cut did not wait through the take-over");
    assert!(read_at > 6.0, "the waiting reader read everything {read_at:.1} s after the cut, before a take-over could be");
    assert!(rt.block_on(fresh.stat(&on_lost.0)).is_ok(), "a directory the cut-off server homed, through its successor");

    // The link back: the old server's mirror link is refused (taken over), and it stops.
    node.unsilence();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = moved.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the old server still runs 30 s after its link came back");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "the old server stopped with {status}");
    assert_eq!(rt.block_on(closed.lost(&fresh, None)), (0, 12));
    Row {
        fault: "node of server 1 cut off (its link down), --replicas 2 --failover-after 6",
        during: "idle, then reads",
        app_sees: format!("its own node refused {fenced_at:.1} s after the cut (fenced); elsewhere, a new request waits for the take-over"),
        seconds: took,
        lost_bytes: 0,
        after: format!(
            "taken over by server 2 with no command; a reader started at the cut waited and read 12/12 closed files whole \
             {read_at:.1} s after it; link back: the old server stops"
        ),
    }
    .record("replica_node_cut_failover");
}

/// Replication and staging: a stage-in into a mirrored instance is on both nodes when it says
/// done, so the loss of a node right after it loses none of the staged bytes.
#[test]
fn a_stage_in_is_on_the_mirror_when_it_says_done() {
    let inst = Instance::up_on("fstagerep", "127.0.3", 191, 3, &["--capacity", "1G", "--chunk-size", "1M", "--replicas", "2"]);
    let dir = surge_tests::scratch("fstagerep");
    let body = pattern(77, (24 << 20) + 4321);
    let src = surge_tests::write_local(&dir.join("pfs"), "input.bin", &body);
    let out = inst.surge(&["stage", "in", src.to_str().unwrap(), "/input.bin", "--wait"]);
    assert!(out.status.success(), "{}", text(&out));
    // At once: the node of server 1 lost for good (server 0 runs the stage coordinator).
    inst.kill_server(1);
    std::fs::remove_dir_all(inst.root.join("fstagerep").join("server-1")).unwrap();
    let failover = inst.surge(&["failover", "fstagerep", "--server", "1"]);
    assert!(failover.status.success(), "{}", text(&failover));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client(&inst);
    assert!(rt.block_on(read_all(&c, "/input.bin")).unwrap() == body, "the staged file differs after the failover");
}
