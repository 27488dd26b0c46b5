//! Workflow coupling across real processes: files published in a directory — closed after
//! writing through a mount on either node, by the native library, or staged in; renamed
//! into place — reach `surge watch` readers on two nodes at once, in publication order,
//! never before they are whole, resumable from a cursor, and still there after the
//! directory's home server is killed and restarted.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use surge_client::surge_proto::ino;
use surge_tests::{text, Instance};

fn instance(name: &str, base: u8) -> Instance {
    let hosts: Vec<String> = (0..4).map(|i| format!("127.0.0.{}", base + i)).collect();
    Instance::up(name, &["--capacity", "2G", "--hosts", &hosts.join(",")])
}

/// Four servers on `prefix.base` onwards with 16 MiB shares, whose writers into drained
/// directories wait past half full (8 MiB) for up to `wait` seconds.
fn under_pressure(name: &str, prefix: &str, base: u8, wait: &str) -> Instance {
    let hosts: Vec<String> = (0..4).map(|i| format!("{prefix}.{}", base + i)).collect();
    Instance::up(
        name,
        &["--capacity", "64M", "--hosts", &hosts.join(","), "--high-water", "0.5", "--low-water", "0.25", "--pressure-wait", wait],
    )
}

/// A retention policy that lets nothing go by itself: `dir` is drained, its writers held past
/// the high-water mark.
fn hold_writers_of(inst: &Instance, dir: &str) {
    let set = inst.surge(&["retention", dir, "--keep-last", "1000"]);
    assert!(set.status.success(), "{}", text(&set));
}

/// `surge watch DIR --json ARGS...` from node `node`, its output read line by line.
struct Watcher {
    child: Child,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
}

impl Watcher {
    fn start(inst: &Instance, node: &str, dir: &str, args: &[&str]) -> Watcher {
        let mut child =
            inst.surge_command(node).args(["watch", dir, "--json"]).args(args).stdout(Stdio::piped()).spawn().expect("run surge watch");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str(&line).unwrap_or_else(|e| panic!("watch printed '{line}': {e}")));
            }
        });
        Watcher { child, lines }
    }

    /// The next publication printed, within `wait`.
    fn next(&self, wait: Duration) -> Option<serde_json::Value> {
        self.lines.recv_timeout(wait).ok()
    }

    fn expect(&self, name: &str) -> serde_json::Value {
        let got = self.next(Duration::from_secs(20)).unwrap_or_else(|| panic!("no publication of '{name}' within 20 s"));
        assert_eq!(got["name"], name, "publications out of order: {got}");
        got
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn watchers_on_two_nodes_see_each_publication_once_in_order_and_only_whole() {
    let inst = instance("watch", 62);
    let (a, b) = (inst.mount("a", "127.0.0.62"), inst.mount("b", "127.0.0.66"));
    std::fs::create_dir(a.path("out")).unwrap();
    let on_a = Watcher::start(&inst, "127.0.0.62", "/out", &[]);
    let on_b = Watcher::start(&inst, "127.0.0.66", a.path("out").to_str().unwrap(), &["--pattern", "*.h5"]);
    std::thread::sleep(Duration::from_millis(300));

    // Each step below starts once the publication before it is seen where that one is
    // published by a release: the kernel sends a release after close(2) returned, so a
    // publication made elsewhere meanwhile may come first (docs/workflow.md).
    // Closed after writing, through the mount on node a.
    std::fs::write(a.path("out/plt1.h5"), vec![1u8; 3 << 20]).unwrap();
    let p1 = on_a.expect("plt1.h5");
    assert_eq!(p1["size"], 3 << 20);
    assert_eq!(p1["path"], "/out/plt1.h5");
    // Written under a temporary name, then renamed into place, through node b.
    std::fs::write(b.path("out/.plt2.h5.tmp"), vec![2u8; 100_000]).unwrap();
    std::fs::rename(b.path("out/.plt2.h5.tmp"), b.path("out/plt2.h5")).unwrap();
    // A file still being written is not published; those closed after it are.
    let mut open = std::fs::File::create(a.path("out/plt3.h5")).unwrap();
    open.write_all(&[3u8; 65536]).unwrap();
    open.flush().unwrap();
    std::fs::write(b.path("out/notes.txt"), b"made through b").unwrap();
    assert_eq!(on_a.expect("plt2.h5")["size"], 100_000);
    on_a.expect("notes.txt");
    // By the native library.
    let client = inst.client("127.0.0.63");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let f = client.create("/out/plt4.h5", 0o644).await.unwrap();
        f.pwrite(0, &[4u8; 5000]).await.unwrap();
        f.close().await.unwrap();
    });
    // An empty file closed after an open for writing (a done marker) counts too.
    std::fs::File::create(a.path("out/done")).unwrap();
    on_a.expect("plt4.h5");
    on_a.expect("done");
    // Node b's watcher reads the same log, filtered: the half-written file is in neither.
    for name in ["plt1.h5", "plt2.h5", "plt4.h5"] {
        assert_eq!(on_b.expect(name)["path"], format!("{}/{name}", a.path("out").display()));
    }
    assert!(on_a.next(Duration::from_millis(500)).is_none() && on_b.next(Duration::from_millis(10)).is_none());

    // Now the writer finishes: published whole, after the files closed before it.
    open.write_all(&[3u8; 65536]).unwrap();
    drop(open);
    let p3 = on_a.expect("plt3.h5");
    assert_eq!(p3["size"], 131072, "published with its final size: {p3}");
    assert_eq!(on_b.expect("plt3.h5")["cursor"], p3["cursor"]);

    // Staged in from the PFS: published under its final name.
    let pfs = std::env::temp_dir().join(format!("surge-test-watch-pfs-{}", std::process::id()));
    std::fs::create_dir_all(&pfs).unwrap();
    std::fs::write(pfs.join("input.h5"), vec![7u8; 200_000]).unwrap();
    let staged = inst.surge(&["stage", "in", pfs.join("input.h5").to_str().unwrap(), "/out/input.h5", "--wait"]);
    assert!(staged.status.success(), "{}", text(&staged));
    assert_eq!(on_a.expect("input.h5")["size"], 200_000);
    std::fs::remove_dir_all(&pfs).unwrap();

    // A reader that restarts resumes after the last cursor it handled.
    let cursor = p1["cursor"].as_u64().unwrap().to_string();
    let resumed = inst.surge(&["watch", "/out", "--from", &cursor, "--count", "2", "--timeout", "5"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(String::from_utf8_lossy(&resumed.stdout), "/out/plt2.h5\n/out/notes.txt\n");

    // A file removed before it is read is not handed out.
    std::fs::remove_file(a.path("out/notes.txt")).unwrap();
    let now = inst.surge(&["watch", "/out", "--timeout", "1"]);
    assert!(!String::from_utf8_lossy(&now.stdout).contains("notes.txt"), "{}", text(&now));
    // (An unlink is on disk within 50 ms; what the crash below loses must be older.)
    std::thread::sleep(Duration::from_millis(300));
    // The log survives its server's crash (kill -9) and restart.
    let home = rt.block_on(client.stat("/out")).unwrap().ino;
    drop(client);
    inst.kill_server(ino::home(home));
    let mut restarted = inst.restart_server(ino::home(home));
    let deadline = Instant::now() + Duration::from_secs(20);
    let all = loop {
        let out = inst.surge(&["watch", "/out", "--timeout", "1"]);
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(all.status.success(), "{}", text(&all));
    let names: Vec<String> = String::from_utf8_lossy(&all.stdout).lines().map(|l| l.trim_start_matches("/out/").to_string()).collect();
    assert_eq!(names, ["plt1.h5", "plt2.h5", "plt4.h5", "done", "plt3.h5", "input.h5"]);

    let bad = inst.surge(&["watch", "/out", "--pattern", "[", "--timeout", "1"]);
    assert!(!bad.status.success() && text(&bad).contains("bad pattern"), "{}", text(&bad));
    let missing = inst.surge(&["watch", "/nowhere", "--timeout", "1"]);
    assert!(!missing.status.success() && text(&missing).contains("nowhere"), "{}", text(&missing));
    drop((on_a, on_b, a, b));
    drop(inst);
    restarted.wait().unwrap();
}

/// A consumer group hands each published file to exactly one consumer: three consumer
/// loops on two nodes take 30 files between them, and the file a fourth consumer held when
/// it was killed (kill -9) goes back to the group once its lease runs out and is done once.
#[test]
fn a_group_hands_each_file_out_once_even_when_a_consumer_is_killed() {
    let inst = instance("queue", 86);
    let a = inst.mount("a", "127.0.0.86");
    std::fs::create_dir(a.path("plots")).unwrap();
    let dir = a.path("plots");
    let dir = dir.to_str().unwrap();
    let names: Vec<String> = (0..30).map(|i| format!("plt{i:03}.h5")).collect();
    for name in &names[..10] {
        std::fs::write(a.path(&format!("plots/{name}")), name.as_bytes()).unwrap();
    }
    std::fs::write(a.path("plots/chk000.h5"), b"not the group's").unwrap();

    // The victim takes a file and never says it is done.
    let victim = inst.surge(&["queue", "claim", "/plots", "--group", "vis", "--pattern", "plt*.h5", "--lease", "2", "--json"]);
    assert!(victim.status.success(), "{}", text(&victim));
    let held: serde_json::Value = serde_json::from_slice(&victim.stdout).unwrap();
    // One of the ten: each close is published by its release, which the kernel sends after
    // close(2) returned, so ten quick closes may reach the log in another order.
    let held_name = held["name"].as_str().unwrap().to_string();
    assert!(names[..10].contains(&held_name), "{held}");
    let mut stalled =
        inst.shell_on("127.0.0.86", &format!("$SURGE queue claim {dir} --group vis --lease 2 >/dev/null && sleep 100")).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on a child of this test.
    unsafe { libc::kill(stalled.id() as i32, libc::SIGKILL) };
    stalled.wait().unwrap();

    let results = std::env::temp_dir().join(format!("surge-test-queue-{}", std::process::id()));
    let _ = std::fs::remove_file(&results);
    let consumer = format!(
        "while f=$($SURGE queue claim {dir} --group vis --lease 2 --timeout 4); do \
           echo \"$(basename $f) $$\" >> {r}; $SURGE queue done \"$f\" || exit 1; done",
        r = results.display()
    );
    let consumers: Vec<Child> =
        ["127.0.0.86", "127.0.0.87", "127.0.0.90"].iter().map(|node| inst.shell_on(node, &consumer).spawn().expect("consumer")).collect();
    for name in &names[10..] {
        std::fs::write(a.path(&format!("plots/{name}")), name.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    for mut c in consumers {
        assert!(c.wait().unwrap().success(), "a consumer loop ends (0) when claims time out, not on a failed done");
    }
    let text_of = std::fs::read_to_string(&results).unwrap();
    let mut done: Vec<&str> = text_of.lines().map(|l| l.split(' ').next().unwrap()).collect();
    done.sort();
    assert_eq!(done, names, "each file exactly once, the killed consumers' too");
    let workers: std::collections::BTreeSet<&str> = text_of.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert!(workers.len() >= 2, "the work was shared: {workers:?}");

    let status = inst.surge(&["queue", "status", "/plots", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let vis = &status[0];
    assert_eq!((vis["done"].as_u64(), vis["backlog"].as_u64(), vis["claimed"].as_u64()), (Some(30), Some(0), Some(0)), "{status}");
    assert!(vis["expired"].as_u64().unwrap() >= 2, "both abandoned claims ran out: {status}");
    // The first claim's holder comes back too late: its token no longer holds the file.
    let late = inst.surge(&["queue", "done", &format!("/plots/{held_name}"), "--token", &held["token"].to_string()]);
    assert!(!late.status.success() && text(&late).contains("lease ran out"), "{}", text(&late));
    let wrong = inst.surge(&["queue", "claim", "/plots", "--group", "vis", "--pattern", "chk*"]);
    assert!(!wrong.status.success() && text(&wrong).contains("takes 'plt*.h5'"), "{}", text(&wrong));
    let _ = std::fs::remove_file(&results);
}

/// Back-pressure: past the high-water mark a writer into a drained directory (one with a
/// retention policy) waits (no error) and goes on once a file is removed, while a writer
/// elsewhere (a consumer's output) is not held; with nothing freed, the held writer fails
/// with ENOSPC after the time limit, and the server logs why.
#[test]
fn a_writer_held_at_the_high_water_mark_resumes_when_room_frees_and_fails_after_the_limit() {
    let inst = under_pressure("pressure", "127.0.0", 96, "3");
    let m = inst.mount("a", "127.0.0.100");
    for dir in ["run", "frames"] {
        std::fs::create_dir(m.path(dir)).unwrap();
    }
    hold_writers_of(&inst, "/run");
    // 6 MiB of each 16 MiB share: under the 8 MiB high-water mark.
    std::fs::write(m.path("run/old"), surge_tests::pattern(1, 24 << 20)).unwrap();
    let new_path = m.path("run/new");
    let body = surge_tests::pattern(2, 16 << 20);
    let expected = body.clone();
    let writer = std::thread::spawn(move || {
        let start = Instant::now();
        std::fs::write(&new_path, &body).map(|()| start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!writer.is_finished(), "the writer should be held at the high-water mark");
    let status = text(&inst.surge(&["status", "pressure"]));
    assert!(status.contains("writers wait"), "`surge status` shows the servers holding writers: {status}");
    // A consumer's output, outside any drained directory, is written while there is room: a
    // held write would end in ENOSPC after the 3 s limit, and fail here.
    std::fs::write(m.path("frames/f1"), surge_tests::pattern(4, 2 << 20)).expect("not held");
    assert!(!writer.is_finished(), "the drained directory's writer is still held");
    std::fs::remove_file(m.path("run/old")).unwrap();
    // Not woken by the room freed, it would fail with ENOSPC at the limit instead.
    let waited = writer.join().unwrap().expect("the held write goes on, without an error");
    assert!(waited >= Duration::from_millis(1400), "it waited: {waited:?}");
    assert!(std::fs::read(m.path("run/new")).unwrap() == expected, "the held writes landed whole");
    assert!(std::fs::read(m.path("frames/f1")).unwrap() == surge_tests::pattern(4, 2 << 20), "the unheld write landed whole");

    // Nothing frees room: the writer gets ENOSPC after the limit.
    let start = Instant::now();
    let err = std::fs::write(m.path("run/big"), surge_tests::pattern(3, 40 << 20)).expect_err("past the limit");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(2800) && took < Duration::from_secs(15), "ENOSPC after the 3 s limit, not {took:?}");
    let logs = inst.server_logs();
    assert!(logs.contains("past its high-water mark") && logs.contains("refused"), "the reason is logged");
}

/// A write already answered (write-behind) that the servers then refuse is reported to every
/// later write, fsync and close of the file description — not to the first close alone,
/// which may be another process's: a child's exec closes the descriptors it inherited, and
/// took the failure with it, so that the writer went on and closed without an error over a
/// file with a hole in it.
#[test]
fn a_refused_write_behind_fails_every_later_call_of_the_description_not_one() {
    use std::os::fd::AsRawFd;
    let inst = under_pressure("refused", "127.0.5", 11, "1");
    let m = inst.mount("a", "127.0.5.20");
    std::fs::create_dir(m.path("run")).unwrap();
    hold_writers_of(&inst, "/run");
    // 7 MiB of each 16 MiB share; 2 MiB more each passes the 8 MiB high-water mark.
    std::fs::write(m.path("run/old"), surge_tests::pattern(1, 28 << 20)).unwrap();
    let mut file = std::fs::File::create(m.path("run/new")).unwrap();
    let body = surge_tests::pattern(2, 8 << 20);
    // Within the mount's write-behind window: each write is answered before the servers
    // decide, so none of them can report the refusal.
    let wrote = body.chunks(1 << 20).map(|piece| file.write_all(piece)).collect::<Result<Vec<()>, _>>();
    // Past the 1 s limit the held writes are refused.
    std::thread::sleep(Duration::from_millis(2500));
    // Another descriptor of the same description is closed first (as an exec'd child does).
    // SAFETY: dup(2) of a descriptor this function owns; the copy is closed right below.
    let copy = unsafe { libc::dup(file.as_raw_fd()) };
    assert!(copy >= 0);
    // SAFETY: `copy` was just made by dup and is closed once.
    let copy_closed = unsafe { libc::close(copy) };
    assert_eq!(copy_closed, -1, "the refusal reaches the first close");
    let again = file.write_all(b"more");
    let synced = file.sync_all();
    // SAFETY: the descriptor is closed once, here; `file` forgets it.
    let closed = unsafe { libc::close(std::os::fd::IntoRawFd::into_raw_fd(file)) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    assert!(wrote.is_ok(), "answered before the refusal: {wrote:?}");
    assert_eq!(again.map_err(|e| e.raw_os_error()), Err(Some(libc::ENOSPC)), "a later write fails too");
    assert_eq!(synced.map_err(|e| e.raw_os_error()), Err(Some(libc::ENOSPC)), "and fsync");
    assert_eq!((closed, errno), (-1, Some(libc::ENOSPC)), "and the writer's own close");
}

/// The drain manager beside a simulation: every third checkpoint staged out as soon as it is
/// published, all but the newest two removed (a staged one only after its stage-out; one
/// being read only once closed), across a kill -9 and restart of the server it runs beside,
/// without staging anything twice.
#[test]
fn the_drain_keeps_exactly_the_checkpoints_its_policy_names() {
    let inst = instance("drain", 176);
    let m = inst.mount("a", "127.0.0.176");
    std::fs::create_dir(m.path("run")).unwrap();
    let pfs = std::env::temp_dir().join(format!("surge-test-drain-pfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&pfs);
    std::fs::create_dir_all(&pfs).unwrap();
    let run = m.path("run");
    let set =
        inst.surge(&["drain", run.to_str().unwrap(), "--pattern", "chk*", "--every", "3", "--to", pfs.to_str().unwrap(), "--keep", "2"]);
    assert!(set.status.success(), "{}", text(&set));
    let checkpoint = |i: usize| surge_tests::pattern(i as u64, 1 << 20);
    let write = |i: usize| {
        std::fs::write(m.path(&format!("run/.chk{i:03}.tmp")), checkpoint(i)).unwrap();
        std::fs::rename(m.path(&format!("run/.chk{i:03}.tmp")), m.path(&format!("run/chk{i:03}.h5"))).unwrap();
        std::fs::write(m.path(&format!("run/plt{i:03}.h5")), b"plot").unwrap();
    };
    for i in 1..=4 {
        write(i);
    }
    // A reader holds chk001 open: it stays while read.
    let reader = std::fs::File::open(m.path("run/chk001.h5")).unwrap();
    let status = |inst: &Instance| {
        let out = inst.surge(&["retention", "/run", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let wait_for = |what: &str, ok: &dyn Fn(&serde_json::Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = status(&inst);
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: {s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for("chk003 staged, chk002 removed", &|s| s["staged"] == 1 && s["removed"] == 1);
    assert!(m.path("run/chk001.h5").exists(), "a checkpoint being read is not removed");
    drop(reader);
    wait_for("chk001 removed once closed", &|s| s["removed"] == 2);

    // The keeper's server (0) dies and comes back: the drain goes on from the journal.
    inst.kill_server(0);
    let mut restarted = inst.restart_server(0);
    for i in 5..=10 {
        write(i);
    }
    wait_for("caught up", &|s| s["staged"] == 3 && s["removed"] == 8 && s["to_stage"] == 0);
    std::thread::sleep(Duration::from_millis(600));
    let mut left: Vec<String> = std::fs::read_dir(&run).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    let plots: Vec<String> = (1..=10).map(|i| format!("plt{i:03}.h5")).collect();
    let mut expected: Vec<String> = vec!["chk009.h5".into(), "chk010.h5".into()];
    expected.extend(plots);
    expected.sort();
    assert_eq!(left, expected, "the newest two checkpoints stay, plot files are not the drain's");
    let mut staged: Vec<String> = std::fs::read_dir(&pfs).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    staged.sort();
    assert_eq!(staged, ["chk003.h5", "chk006.h5", "chk009.h5"], "every third, each once, nothing temporary left");
    for i in [3, 6, 9] {
        assert!(std::fs::read(pfs.join(format!("chk{i:03}.h5"))).unwrap() == checkpoint(i), "chk{i:03} staged whole");
    }
    let s = status(&inst);
    assert_eq!((s["published"].as_u64(), s["staged"].as_u64()), (Some(10), Some(3)), "nothing staged twice: {s}");
    let stop = inst.surge(&["drain", "/run", "--stop"]);
    assert!(stop.status.success(), "{}", text(&stop));
    assert_eq!(status(&inst), serde_json::Value::Null);
    std::fs::remove_dir_all(&pfs).unwrap();
    drop(m);
    drop(inst);
    restarted.wait().unwrap();
}
