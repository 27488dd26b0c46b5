//! Staging tests with real processes: `surge stage` against a 4-server instance on loopback
//! addresses, a "PFS" that is a local directory (or a small tmpfs, to fill it), servers that
//! die or restart mid-stage, an instance run by an unprivileged user, and a shared instance
//! staging for users who reach the PFS through their supplementary groups.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;
use surge_tests::{pattern, scratch, sh, shm_scratch, text, user, write_local, Instance, TempGroup};

fn instance(name: &str, base: u8, capacity: &str) -> Instance {
    Instance::up_on(name, "127.0.2", base, 4, &["--capacity", capacity, "--chunk-size", "1M"])
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The id in "stage N submitted ..." / "stage N done ...".
fn stage_id(stdout: &str) -> u64 {
    stdout.split_whitespace().nth(1).and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("no stage id in {stdout:?}"))
}

fn status(inst: &Instance, id: u64) -> Value {
    serde_json::from_str(&ok(inst.surge(&["stage", "status", &id.to_string(), "--json"]))).expect("status json")
}

/// Polls a stage until it is final; panics after `limit`.
fn wait_final(inst: &Instance, id: u64, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = status(inst, id);
        if ["Done", "Failed", "Cancelled"].contains(&s["stage"]["state"].as_str().unwrap()) {
            return s;
        }
        assert!(Instant::now() < deadline, "stage {id} not final after {limit:?}: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Files under `dir` whose name marks them as a stage's temporary.
fn temporaries(dir: &Path) -> String {
    sh(&format!("find {} -name '.surge-stage-*' 2>/dev/null || true", dir.display()))
}

/// A PFS tree: nested directories, many small files, an empty one, and one spanning chunks.
fn make_tree(root: &Path, small: usize) -> u64 {
    let mut bytes = 0;
    for i in 0..small {
        let data = pattern(i as u64, 100 + (i * 97) % 9000);
        bytes += data.len() as u64;
        write_local(&root.join(format!("d{}/e{}", i % 7, i % 3)), &format!("f{i}.dat"), &data);
    }
    write_local(root, "empty", b"");
    let big = pattern(999, (5 << 20) + 12345);
    bytes += big.len() as u64;
    write_local(&root.join("d0"), "big.bin", &big);
    bytes
}

#[test]
fn tree_round_trip_in_and_out_with_verify() {
    let inst = instance("stree", 11, "2G");
    let dir = scratch("stree");
    let src = dir.join("pfs/src");
    let bytes = make_tree(&src, 600);
    let out = ok(inst.surge(&["stage", "in", src.to_str().unwrap(), "/run/input", "--verify", "--wait"]));
    assert!(out.contains("done: 602 files"), "{out}");
    let id_in = stage_id(&out);
    let s = status(&inst, id_in);
    assert_eq!(s["stage"]["bytes_done"].as_u64().unwrap(), bytes);
    assert!(s["files"].as_array().unwrap().iter().all(|f| f["state"] == "Done" && f["bytes_done"] == f["bytes_total"]), "{s}");
    // The files' first chunks spread over every server.
    let instance_status: Value = serde_json::from_str(&ok(inst.surge(&["status", "stree", "--json"]))).unwrap();
    for server in instance_status["servers"].as_array().unwrap() {
        assert!(server["used"].as_u64().unwrap() > 200_000, "server {} holds too little of the tree: {server}", server["index"]);
    }
    // One file read back through the client, byte for byte.
    let back = dir.join("back.bin");
    ok(inst.surge(&["get", "/run/input/d0/big.bin", back.to_str().unwrap()]));
    assert!(std::fs::read(&back).unwrap() == pattern(999, (5 << 20) + 12345));

    let out_dir = dir.join("pfs/out");
    let out = ok(inst.surge(&["stage", "out", "/run/input", out_dir.to_str().unwrap(), "--type", "directory", "--verify", "--wait"]));
    assert!(out.contains("done: 602 files"), "{out}");
    sh(&format!("diff -r {} {}", src.display(), out_dir.display()));
    assert_eq!(temporaries(&dir), "", "temporaries left on the PFS");
    assert!(!ok(inst.surge(&["ls", "/run/input"])).contains(".surge-stage"), "temporaries left in the instance");
}

#[test]
fn list_stage_in_and_single_file_out_through_a_mount_path() {
    let inst = instance("slist", 21, "1G");
    let dir = scratch("slist");
    let a = write_local(&dir.join("pfs"), "a.dat", &pattern(1, 3 << 20));
    let b = write_local(&dir.join("pfs"), "b.dat", &pattern(2, 1000));
    let list = write_local(
        &dir.join("pfs"),
        "list.txt",
        format!("# source destination\n{} /in/a.dat\n\n{} sub/b.dat\n", a.display(), b.display()).as_bytes(),
    );
    let out = ok(inst.surge(&["stage", "in", list.to_str().unwrap(), "/base", "--type", "list", "--wait"]));
    assert!(out.contains("done: 2 files"), "{out}");
    assert!(ok(inst.surge(&["stat", "/base/sub/b.dat"])).contains("1000"));
    // A burst-buffer path given as a path on a mount names the mounted instance.
    let mount = inst.mount("slist", "127.0.2.29");
    let out_path = dir.join("pfs/out/a.copy");
    let done = ok(inst.surge(&["stage", "out", mount.path("in/a.dat").to_str().unwrap(), out_path.to_str().unwrap(), "--wait"]));
    assert!(std::fs::read(&out_path).unwrap() == pattern(1, 3 << 20));
    // What the user sees names the burst-buffer side as they wrote it, on the mount.
    assert!(done.contains(mount.path("in/a.dat").to_str().unwrap()), "{done}");
    let table = ok(inst.surge(&["stage", "status"]));
    assert!(table.contains(mount.path("base").to_str().unwrap()), "the list stage's /base, on the mount: {table}");
    // The two ends swapped: said so, with the command the user meant.
    let swapped = inst.surge(&["stage", "in", mount.path("in/a.dat").to_str().unwrap(), out_path.to_str().unwrap()]);
    assert!(!swapped.status.success() && text(&swapped).contains("surge stage out"), "{}", text(&swapped));
    // A malformed list fails the stage with the line that is wrong.
    let bad = write_local(&dir.join("pfs"), "bad.txt", b"/only-one-field\n");
    let out = inst.surge(&["stage", "in", bad.to_str().unwrap(), "/x", "--type", "list"]);
    assert!(!out.status.success() && text(&out).contains("bad.txt:1"), "{}", text(&out));
    drop(mount);
}

#[test]
fn missing_source_and_full_buffer_and_full_pfs_fail_without_partial_files() {
    let inst = instance("sfull", 31, "8M"); // 2 MiB per server
    let dir = scratch("sfull");
    // Missing source: the stage is recorded failed, with the path and the reason.
    let out = inst.surge(&["stage", "in", "/nonexistent/input.h5", "/input.h5"]);
    assert!(!out.status.success() && text(&out).contains("/nonexistent/input.h5: No such file"), "{}", text(&out));
    let stages: Value = serde_json::from_str(&ok(inst.surge(&["stage", "status", "--json"]))).unwrap();
    assert_eq!(stages[0]["state"], "Failed");

    // Buffer full: 20 MiB into 8 MiB fails with ENOSPC's message; nothing under the final name.
    let big = write_local(&dir.join("pfs"), "big.bin", &pattern(3, 20 << 20));
    let out = inst.surge(&["stage", "in", big.to_str().unwrap(), "/big.bin", "--wait"]);
    assert!(!out.status.success() && text(&out).contains("no space left on the burst buffer"), "{}", text(&out));
    assert!(!inst.surge(&["stat", "/big.bin"]).status.success(), "a partial file sits under its final name");
    let ls = ok(inst.surge(&["ls", "/"]));
    assert!(!ls.contains(".surge-stage"), "temporary left in the instance: {ls}");

    // PFS full: a 1 MiB tmpfs as the destination.
    let small_pfs = dir.join("small-pfs");
    std::fs::create_dir_all(&small_pfs).unwrap();
    sh(&format!("mount -t tmpfs -o size=1m surge-test-pfs {}", small_pfs.display()));
    let local = write_local(&dir, "three-mib.bin", &pattern(4, 3 << 20));
    ok(inst.surge(&["put", local.to_str().unwrap(), "/three.bin"]));
    let target = small_pfs.join("three.bin");
    let out = inst.surge(&["stage", "out", "/three.bin", target.to_str().unwrap(), "--wait"]);
    let failed = text(&out);
    let leftovers = sh(&format!("ls -A {}", small_pfs.display()));
    sh(&format!("umount {}", small_pfs.display()));
    assert!(!out.status.success() && failed.contains("PFS full"), "{failed}");
    assert_eq!(leftovers, "", "partial or temporary files left on the full PFS");
}

#[test]
fn permission_denied_on_the_pfs_is_reported_for_an_unprivileged_instance() {
    // The servers run as the instance's owner; here that is uid 65534, who may not read a
    // root-only file nor write into a root-owned directory.
    let dir = scratch("sperm");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    sh(&format!("chown 65534:65534 {}", home.display()));
    let secret = write_local(&dir, "secret.dat", b"root only");
    sh(&format!("chmod 600 {}; chmod 755 {}", secret.display(), dir.display()));
    let root = format!("/dev/shm/surge-test-sperm-{}", std::process::id());
    let surge = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
            .arg(surge_tests::binary("surge"))
            .args(args)
            .env("SURGE_HOME", &home)
            .env("SURGE_INSTANCE", "sperm")
            .output()
            .unwrap()
    };
    ok(surge(&["up", "--name", "sperm", "--servers", "2", "--capacity", "64M", "--root", &root, "--hosts", "127.0.2.41,127.0.2.42"]));
    let denied_in = surge(&["stage", "in", secret.to_str().unwrap(), "/s.dat", "--wait"]);
    let written = write_local(&dir, "mine.dat", b"data");
    sh(&format!("chmod 644 {}", written.display()));
    ok(surge(&["stage", "in", written.to_str().unwrap(), "/mine.dat", "--wait"]));
    let denied_out = surge(&["stage", "out", "/mine.dat", dir.join("root-owned/mine.dat").to_str().unwrap(), "--wait"]);
    ok(surge(&["down", "sperm", "--force"]));
    let _ = std::fs::remove_dir_all(&root);
    assert!(!denied_in.status.success() && text(&denied_in).contains("Permission denied"), "{}", text(&denied_in));
    assert!(!denied_out.status.success() && text(&denied_out).contains("Permission denied"), "{}", text(&denied_out));
}

/// `surge ARGS` as `who` (uid and gid; no supplementary group at all: what a stage may reach
/// through one comes from the servers' own lookup), with the SURGE_HOME `home`.
fn surge_as(home: &Path, instance: &str, who: (u32, u32), args: &[&str]) -> Output {
    std::process::Command::new("setpriv")
        .args([format!("--reuid={}", who.0), format!("--regid={}", who.1), "--clear-groups".into(), "--".into()])
        .arg(surge_tests::binary("surge"))
        .args(args)
        .env("SURGE_HOME", home)
        .env("SURGE_INSTANCE", instance)
        .output()
        .unwrap()
}

/// A directory `path` of root's and `group`'s, with `mode`.
fn group_dir(path: &Path, group: &TempGroup, mode: u32) {
    std::fs::create_dir_all(path).unwrap();
    std::os::unix::fs::chown(path, Some(0), Some(group.gid)).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

/// A file `path` of root's and `group`'s, mode 0640, holding `data`.
fn group_file(path: &Path, group: &TempGroup, data: &[u8]) {
    std::fs::write(path, data).unwrap();
    std::os::unix::fs::chown(path, Some(0), Some(group.gid)).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
}

/// A shared instance (servers run as root) stages for a user with that user's supplementary
/// groups as the servers' node knows them, not their uid and gid alone: out into project
/// directories the user may write only through a group (mode 0770; and 2770, whose new files
/// get the group), in from one the user may only read through it (0750). A user outside the
/// group is still refused, and so is a uid the user database does not know.
#[test]
fn a_shared_instance_stages_with_the_users_supplementary_groups() {
    let member = user("games");
    let stranger = user("nobody");
    let group = TempGroup::new("stg", &[&member.name]);
    let inst = Instance::up_on("sgroups", "127.0.2", 141, 2, &["--capacity", "256M", "--chunk-size", "1M"]);
    let dir = scratch("sgroups");
    let pfs = dir.join("pfs");
    let (project, shared, input) = (pfs.join("project"), pfs.join("shared"), pfs.join("input"));
    group_dir(&project, &group, 0o770);
    group_dir(&shared, &group, 0o2770);
    group_dir(&input, &group, 0o750);
    group_dir(&input.join("tree"), &group, 0o750);
    // Larger than a chunk: its chunks are on both servers, its temporary made by the coordinator.
    let (big, small) = (pattern(141, (3 << 20) + 5), pattern(142, 1000));
    group_file(&input.join("in.bin"), &group, &big);
    group_file(&input.join("tree/small.dat"), &group, &small);
    ok(inst.surge(&["mkdir", "/out"]));
    ok(inst.surge(&["put", write_local(&dir, "big.bin", &big).to_str().unwrap(), "/out/big.bin"]));
    ok(inst.surge(&["put", write_local(&dir, "small.dat", &small).to_str().unwrap(), "/out/small.dat"]));
    let member_home = inst.home_for(&dir, member.uid, member.gid);
    let as_member = |args: &[&str]| surge_as(&member_home, "sgroups", (member.uid, member.gid), args);
    let p = |path: &Path| path.to_str().unwrap().to_string();

    // Out: a large file into the 0770 directory, a tree into the 2770 one.
    ok(as_member(&["stage", "out", "/out/big.bin", &p(&project.join("big.bin")), "--verify", "--wait"]));
    assert!(std::fs::read(project.join("big.bin")).unwrap() == big, "staged-out bytes differ");
    let meta = std::fs::metadata(project.join("big.bin")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (member.uid, member.gid), "what the user stages out is theirs");
    let run = shared.join("run");
    ok(as_member(&["stage", "out", "/out", &p(&run), "--type", "directory", "--wait"]));
    assert!(std::fs::read(run.join("big.bin")).unwrap() == big && std::fs::read(run.join("small.dat")).unwrap() == small);
    for path in [run.clone(), run.join("big.bin"), run.join("small.dat")] {
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (member.uid, group.gid), "{} does not have the directory's group", path.display());
    }
    // In: a file and a tree the user may read only through the group.
    ok(as_member(&["stage", "in", &p(&input.join("in.bin")), "/in/in.bin", "--verify", "--wait"]));
    ok(as_member(&["stage", "in", &p(&input), "/in/tree", "--type", "directory", "--wait"]));
    let back = dir.join("back.bin");
    ok(inst.surge(&["get", "/in/in.bin", back.to_str().unwrap()]));
    assert!(std::fs::read(&back).unwrap() == big, "staged-in bytes differ");
    ok(inst.surge(&["get", "/in/tree/tree/small.dat", back.to_str().unwrap()]));
    assert!(std::fs::read(&back).unwrap() == small, "staged-in tree differs");
    assert_eq!(temporaries(&pfs), "", "temporaries left on the PFS");

    // Outside the group: refused, in and out, and nothing lands.
    let home = inst.home_for(&dir, stranger.uid, stranger.gid);
    let denied_out =
        surge_as(&home, "sgroups", (stranger.uid, stranger.gid), &["stage", "out", "/out/small.dat", &p(&project.join("x.dat")), "--wait"]);
    assert!(!denied_out.status.success() && text(&denied_out).contains("Permission denied"), "{}", text(&denied_out));
    assert!(!project.join("x.dat").exists());
    let denied_in =
        surge_as(&home, "sgroups", (stranger.uid, stranger.gid), &["stage", "in", &p(&input.join("in.bin")), "/in/x.bin", "--wait"]);
    assert!(!denied_in.status.success() && text(&denied_in).contains("Permission denied"), "{}", text(&denied_in));
    // A uid without a passwd entry has its own gid alone.
    let nameless = (3_999_999, 3_999_999);
    let home = inst.home_for(&dir, nameless.0, nameless.1);
    let denied = surge_as(&home, "sgroups", nameless, &["stage", "in", &p(&input.join("in.bin")), "/in/y.bin", "--wait"]);
    assert!(!denied.status.success() && text(&denied).contains("Permission denied"), "{}", text(&denied));
    assert_eq!(temporaries(&pfs), "", "temporaries left on the PFS");
}

/// Starts staging a 1 GiB file in as /big.bin, long enough to interrupt; returns the scratch
/// directory holding the source (keep it alive) and the stage's id.
fn start_big_stage_in(inst: &Instance, test: &str, seed: u64) -> (surge_tests::Scratch, u64) {
    let dir = shm_scratch(test);
    let big = write_local(&dir, "big.bin", &pattern(seed, 1 << 30));
    let id = stage_id(&ok(inst.surge(&["stage", "in", big.to_str().unwrap(), "/big.bin"])));
    (dir, id)
}

#[test]
fn a_server_dying_mid_stage_fails_the_stage_with_its_reason() {
    let inst = instance("sdie", 51, "4G");
    let (_source, id) = start_big_stage_in(&inst, "sdie", 5);
    inst.kill_server(2);
    let s = wait_final(&inst, id, Duration::from_secs(60));
    assert_eq!(s["stage"]["state"], "Failed", "{s}");
    let error = s["stage"]["error"].as_str().unwrap();
    assert!(error.contains("server 2"), "the reason does not name the dead server: {error}");
    assert!(!inst.surge(&["stat", "/big.bin"]).status.success(), "a partial file sits under its final name");
}

#[test]
fn stage_state_survives_a_restart_of_the_coordinator() {
    let inst = instance("srestart", 61, "4G");
    let dir = shm_scratch("srestart");
    let small = write_local(&dir, "small.dat", b"small and done");
    let done = stage_id(&ok(inst.surge(&["stage", "in", small.to_str().unwrap(), "/small.dat", "--wait"])));
    let local = write_local(&dir, "big.bin", &pattern(6, 1 << 30));
    ok(inst.surge(&["put", local.to_str().unwrap(), "/big.bin"]));
    let out_dir = dir.join("out");
    let running = stage_id(&ok(inst.surge(&["stage", "out", "/big.bin", out_dir.join("big.bin").to_str().unwrap()])));
    inst.kill_server(0);
    let mut restarted = inst.restart_server(0);
    let s = status(&inst, running);
    assert_eq!(s["stage"]["state"], "Failed", "{s}");
    assert!(s["stage"]["error"].as_str().unwrap().contains("interrupted"), "{s}");
    assert_eq!(status(&inst, done)["stage"]["state"], "Done", "a finished stage forgot it was done");
    // Workers finish the order they were on; then nothing may remain on the PFS.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!out_dir.join("big.bin").exists(), "an interrupted stage published its file");
    assert_eq!(temporaries(&out_dir), "", "temporaries left after the restart");
    drop(inst);
    restarted.wait().unwrap();
}

#[test]
fn job_end_stages_run_at_down_and_revoked_ones_do_not() {
    let dir = scratch("sjobend");
    let src = write_local(&dir, "result.dat", &pattern(7, 2 << 20));
    {
        let inst = instance("sjobend", 71, "1G");
        ok(inst.surge(&["put", src.to_str().unwrap(), "/result.dat"]));
        ok(inst.surge(&["put", src.to_str().unwrap(), "/scratch.dat"]));
        let kept = dir.join("pfs/result.dat");
        let revoked = dir.join("pfs/scratch.dat");
        ok(inst.surge(&["stage", "out", "/result.dat", kept.to_str().unwrap(), "--when", "job-end"]));
        ok(inst.surge(&["stage", "out", "/scratch.dat", revoked.to_str().unwrap(), "--when", "job-end"]));
        ok(inst.surge(&["stage", "revoke", "/scratch.dat"]));
        assert!(!kept.exists(), "a job-end stage ran before job end");
        ok(inst.surge(&["down", "sjobend"]));
        assert!(std::fs::read(&kept).unwrap() == pattern(7, 2 << 20), "job-end stage-out missing after down");
        assert!(!revoked.exists(), "a revoked stage ran");
    }
}

#[test]
fn cancel_stops_a_stage_without_publishing() {
    let inst = instance("scancel", 81, "4G");
    let (_source, id) = start_big_stage_in(&inst, "scancel", 8);
    ok(inst.surge(&["stage", "cancel", &id.to_string()]));
    let s = wait_final(&inst, id, Duration::from_secs(60));
    assert_eq!(s["stage"]["state"], "Cancelled", "{s}");
    assert!(!inst.surge(&["stat", "/big.bin"]).status.success(), "a cancelled stage published its file");
    assert!(!ok(inst.surge(&["ls", "/"])).contains(".surge-stage"), "temporary left after cancel");
    let out = inst.surge(&["stage", "wait", &id.to_string()]);
    assert!(!out.status.success() && text(&out).contains("cancelled"), "{}", text(&out));
}

#[test]
fn private_mode_stages_into_the_nodes_own_namespace() {
    let inst = Instance::up_on("sprivate", "127.0.2", 91, 2, &["--capacity", "256M", "--mode", "private"]);
    let dir = scratch("sprivate");
    let src = write_local(&dir, "in.dat", &pattern(9, 3 << 20));
    ok(inst.surge_on("127.0.2.92", &["stage", "in", src.to_str().unwrap(), "/in.dat", "--wait"]));
    assert!(inst.surge_on("127.0.2.92", &["stat", "/in.dat"]).status.success());
    assert!(!inst.surge_on("127.0.2.91", &["stat", "/in.dat"]).status.success(), "another node's namespace got the file");
    let back = dir.join("out.dat");
    ok(inst.surge_on("127.0.2.92", &["stage", "out", "/in.dat", back.to_str().unwrap(), "--wait", "--verify"]));
    assert!(std::fs::read(&back).unwrap() == pattern(9, 3 << 20));
}
