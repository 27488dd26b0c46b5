//! `surge fsck` against a real 4-server instance: every state a client (or its node) dying
//! between the steps of an operation that spans servers can leave, made by sending the steps
//! that would have run before the death and not the rest, is found, repaired without losing
//! data, and gone after a restart of every server.

use std::path::PathBuf;

use surge_client::surge_proto::namespace::{AddLink, InsertEntry, MakeDirInode, RemoveEntry, RetireDir, Unlink};
use surge_client::surge_proto::{ino, ErrorCode, FileKind, ROOT_INO};
use surge_tests::{pattern, text, Instance};

fn data_file(inst: &Instance, server: usize, ino: u64) -> PathBuf {
    let root = inst.descriptor()["servers"][server]["root"].as_str().unwrap().to_string();
    PathBuf::from(root).join("data").join(format!("{ino:016x}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_finds_and_repairs_what_a_client_dying_between_steps_leaves() {
    let inst = Instance::up_on("fsck", "127.0.3", 11, 4, &["--capacity", "1G", "--chunk-size", "1M"]);
    let c = inst.client("127.0.3.20");
    let clean = inst.surge(&["fsck", &inst.name]);
    assert!(clean.status.success(), "a fresh instance: {}", text(&clean));
    assert!(text(&clean).contains("clean"), "{}", text(&clean));

    // Directories on every server, so the steps below cross servers.
    for i in 0..8 {
        c.mkdir(&format!("/d{i}"), 0o755).await.unwrap();
    }
    let dirs: Vec<u64> = dir_inos(&c, 8).await;
    let (a, b) = pair_on_two_servers(&dirs);

    // 1. mkdir stopped after its first step: an empty directory inode nothing names.
    let lonely = c
        .call(ino::home(b), MakeDirInode { parent: a, mode: 0o755, umask: 0, uid: 0, gid: 0, inherited: Default::default() })
        .await
        .unwrap()
        .ino;

    // 2. A rename between servers stopped after linking the target: a file with two names.
    let body = pattern(1, 3 << 20);
    let f = c.create(&format!("/d{}/twice", idx(&dirs, a)), 0o644).await.unwrap();
    f.pwrite(0, &body).await.unwrap();
    f.close().await.unwrap();
    let twice = c.stat(&format!("/d{}/twice", idx(&dirs, a))).await.unwrap().ino;
    let insert = InsertEntry {
        parent: b,
        name: "twice".into(),
        ino: twice,
        kind: FileKind::File,
        replace: false,
        retired_target: None,
        new_dir: None,
    };
    c.call(ino::home(b), insert).await.unwrap();

    // 3. rmdir of a directory homed elsewhere stopped after retiring it: named, but refused.
    c.mkdir(&format!("/d{}/half", idx(&dirs, a)), 0o755).await.unwrap();
    let half = c.stat(&format!("/d{}/half", idx(&dirs, a))).await.unwrap().ino;
    c.call(ino::home(half), RetireDir { ino: half }).await.unwrap();

    // 4. An unlink whose name went but whose inode (homed elsewhere) was not dropped: an
    //    orphaned file, with data. Made by moving a file to another server's directory first.
    let kept = pattern(2, 2 << 20);
    let g = c.create(&format!("/d{}/kept", idx(&dirs, a)), 0o644).await.unwrap();
    g.pwrite(0, &kept).await.unwrap();
    let kept_ino = g.ino();
    g.close().await.unwrap();
    c.rename(&format!("/d{}/kept", idx(&dirs, a)), &format!("/d{}/kept", idx(&dirs, b))).await.unwrap();
    c.call(ino::home(b), RemoveEntry { parent: b, name: "kept".into(), ino: kept_ino }).await.unwrap();

    // 5. An unlink answered whose data was never purged: orphaned data files.
    let doomed = c.create("/doomed", 0o644).await.unwrap();
    doomed.pwrite(0, &pattern(3, 4 << 20)).await.unwrap();
    let doomed_ino = doomed.ino();
    doomed.close().await.unwrap();
    let used_before = total_used(&c).await;
    c.call(ino::home(ROOT_INO), Unlink { parent: ROOT_INO, name: "doomed".into() }).await.unwrap();

    // 6. A name for an inode that does not exist.
    let ghost = ino::make(2, 999_999);
    c.call(
        0,
        InsertEntry {
            parent: ROOT_INO,
            name: "ghost".into(),
            ino: ghost,
            kind: FileKind::File,
            replace: false,
            retired_target: None,
            new_dir: None,
        },
    )
    .await
    .unwrap();

    // 7. A writer that died before publishing its size: data past it on a server.
    let short = c.create("/short", 0o644).await.unwrap();
    short.pwrite(0, b"published").await.unwrap();
    let short_ino = short.ino();
    short.close().await.unwrap();
    let chunk0 = c.layout().chunk_server(short_ino, 0);
    std::fs::OpenOptions::new().write(true).open(data_file(&inst, chunk0, short_ino)).unwrap().set_len(64 << 10).unwrap();

    // 8. A file whose new names were not known to be in (its count kept raised for them) and
    //    whose one name went since: nameless, with a link count of 2.
    let raised = c.create(&format!("/d{}/raised", idx(&dirs, a)), 0o644).await.unwrap();
    let raised_ino = raised.ino();
    raised.close().await.unwrap();
    for _ in 0..2 {
        c.call(ino::home(raised_ino), AddLink { ino: raised_ino }).await.unwrap();
    }
    c.unlink(&format!("/d{}/raised", idx(&dirs, a))).await.unwrap();

    // The check finds each, exits non-zero, and changes nothing.
    let found = inst.surge(&["fsck", &inst.name]);
    let report = text(&found);
    assert!(!found.status.success(), "{report}");
    for class in [
        "orphaned empty directory",
        "link count",
        "retired directory named",
        "orphaned inode",
        "orphaned data file",
        "dangling entry",
        "data past size",
    ] {
        assert!(report.contains(class), "{class} not found: {report}");
    }
    assert!(report.contains("--repair"), "{report}");
    let refused = c.create(&format!("/d{}/half/new", idx(&dirs, a)), 0o644).await.err().expect("a check repaired");
    assert_eq!(refused.code, ErrorCode::NotFound);

    let repaired = inst.surge(&["fsck", &inst.name, "--repair", "--json"]);
    assert!(repaired.status.success(), "{}", text(&repaired));
    let doc: serde_json::Value = serde_json::from_slice(&repaired.stdout).unwrap();
    let repairs = doc[0]["report"]["repairs"].as_array().unwrap();
    assert!(repairs.len() >= 7 && repairs.iter().all(|r| r.is_null()), "{doc:#}");

    // What each repair promised.
    assert_eq!(c.getattr(lonely).await.unwrap_err().code, ErrorCode::NotFound, "the orphaned empty directory stayed");
    for name in [format!("/d{}/twice", idx(&dirs, a)), format!("/d{}/twice", idx(&dirs, b))] {
        assert_eq!(read_all(&c, &name).await, body, "{name}");
    }
    assert_eq!(c.stat(&format!("/d{}/twice", idx(&dirs, a))).await.unwrap().nlink, 2);
    c.unlink(&format!("/d{}/twice", idx(&dirs, a))).await.unwrap();
    assert_eq!(read_all(&c, &format!("/d{}/twice", idx(&dirs, b))).await, body, "removing one name of two lost the data");
    c.create(&format!("/d{}/half/new", idx(&dirs, a)), 0o644).await.unwrap().close().await.unwrap();
    assert_eq!(read_all(&c, &format!("/lost+found/#{kept_ino:x}")).await, kept, "the orphan's data");
    assert_eq!(c.stat(&format!("/lost+found/#{raised_ino:x}")).await.unwrap().nlink, 1, "an orphan's count, its one name now");
    assert!(!data_file(&inst, c.layout().chunk_server(doomed_ino, 0), doomed_ino).exists());
    assert!(total_used(&c).await < used_before - (3 << 20), "the orphaned data's room was not given back");
    assert_eq!(c.stat("/ghost").await.unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(std::fs::metadata(data_file(&inst, chunk0, short_ino)).unwrap().len(), 9);
    assert_eq!(read_all(&c, "/short").await, b"published");

    // The repairs are durable as soon as the check returns: every server killed at once and
    // restarted, the check is clean.
    drop(c);
    let mut restarted = Vec::new();
    for index in 0..4 {
        inst.kill_server(index);
    }
    for index in 0..4 {
        restarted.push(inst.restart_server(index));
    }
    let after = inst.surge(&["fsck", &inst.name]);
    assert!(after.status.success() && text(&after).contains("clean"), "{}", text(&after));
    drop(inst);
    for mut child in restarted {
        let _ = child.wait();
    }
}

/// A check of an instance that is busy creating, renaming and removing judges only what it
/// finds twice: it reports nothing on a consistent instance however busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_of_a_busy_instance_reports_nothing_false() {
    let inst = Instance::up_on("fsckbusy", "127.0.3", 31, 4, &["--capacity", "1G"]);
    let c = inst.client("127.0.3.40");
    for i in 0..7 {
        c.mkdir(&format!("/w{i}"), 0o755).await.unwrap();
    }
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (stop, rounds) = (std::sync::Arc::new(AtomicBool::new(false)), std::sync::Arc::new(AtomicU64::new(0)));
    let busy = {
        let (c, stop, rounds) = (c.clone(), stop.clone(), rounds.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let dir = format!("/w{}", i % 7);
                c.mkdir(&format!("{dir}/sub{i}"), 0o755).await.unwrap();
                c.rename(&format!("{dir}/sub{i}"), &format!("/w{}/sub{i}", (i + 1) % 7)).await.unwrap();
                let f = c.create(&format!("{dir}/f{i}"), 0o644).await.unwrap();
                f.pwrite(0, &pattern(i, 1 << 20 | 17)).await.unwrap();
                f.close().await.unwrap();
                c.rename(&format!("{dir}/f{i}"), &format!("/w{}/g{i}", (i + 3) % 7)).await.unwrap();
                if i.is_multiple_of(2) {
                    c.unlink(&format!("/w{}/g{i}", (i + 3) % 7)).await.unwrap();
                }
                i += 1;
                rounds.store(i, Ordering::Relaxed);
            }
        })
    };
    // Checks while the workload runs, until it has gone through 20 rounds (however loaded the
    // machine), at least 3 of them.
    let mut checks = 0;
    while checks < 3 || rounds.load(Ordering::Relaxed) < 20 {
        let out = inst.surge(&["fsck", &inst.name]);
        assert!(out.status.success(), "check {checks} during {} rounds: {}", rounds.load(Ordering::Relaxed), text(&out));
        checks += 1;
        assert!(checks < 500, "the workload is stuck at {} rounds", rounds.load(Ordering::Relaxed));
    }
    stop.store(true, Ordering::Relaxed);
    busy.await.unwrap();
}

async fn dir_inos(c: &surge_client::Client, n: usize) -> Vec<u64> {
    let mut inos = Vec::new();
    for i in 0..n {
        inos.push(c.stat(&format!("/d{i}")).await.unwrap().ino);
    }
    inos
}

/// Two of the directories homed on different servers.
fn pair_on_two_servers(dirs: &[u64]) -> (u64, u64) {
    for &a in dirs {
        for &b in dirs {
            if ino::home(a) != ino::home(b) {
                return (a, b);
            }
        }
    }
    panic!("all directories on one server")
}

fn idx(dirs: &[u64], ino: u64) -> usize {
    dirs.iter().position(|&d| d == ino).unwrap()
}

async fn total_used(c: &surge_client::Client) -> u64 {
    c.statfs().await.into_iter().map(|s| s.unwrap().used).sum()
}

async fn read_all(c: &surge_client::Client, path: &str) -> Vec<u8> {
    let f = c.open(path, false).await.unwrap();
    let size = f.size();
    let data = f.pread(0, size as usize).await.unwrap();
    f.close().await.unwrap();
    data
}
