//! The interception library (`libsurge_preload.so`) under unmodified programs (Python, the
//! coreutils, tar): what they do through it is checked through the mount of the same node
//! and of another node, the library's own report says it served the calls (and did not leave
//! them to the mount), and a user other than a file's owner gets from it exactly what the
//! kernel gives.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use surge_tests::{binary, scratch, text, Instance};

/// What the library reported for process `pid` (its line in the report file).
fn report_of(report: &Path, pid: &str) -> HashMap<String, u64> {
    let lines = std::fs::read_to_string(report).unwrap_or_default();
    let line = lines
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&format!("pid={pid}")))
        .unwrap_or_else(|| panic!("no report of process {pid} in:\n{lines}"));
    line.split_whitespace().skip(2).filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.parse().unwrap())).collect()
}

/// The sum of the counts of every process in the report (a shell and its commands).
fn report_total(report: &Path) -> HashMap<String, u64> {
    let mut total = HashMap::new();
    for line in std::fs::read_to_string(report).unwrap_or_default().lines() {
        for (k, v) in line.split_whitespace().skip(2).filter_map(|kv| kv.split_once('=')) {
            *total.entry(k.to_string()).or_insert(0) += v.parse::<u64>().unwrap();
        }
    }
    total
}

fn preloaded(mut cmd: Command, report: &Path) -> Command {
    cmd.env("LD_PRELOAD", binary("libsurge_preload.so")).env("SURGE_PRELOAD_REPORT", report);
    cmd
}

/// `python3 tests/preload/PROGRAM` on node `node` of `inst` (its arguments to be added).
fn python_program(inst: &Instance, node: &str, program: &str) -> Command {
    let mut python = inst.shell_on(node, "exec python3 \"$@\"");
    python.arg("python3").arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("preload").join(program));
    python
}

fn succeeded(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what} failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Python's os, shutil, pathlib, mmap, fork, subprocess and threads through the library
/// (tests/preload/posix_calls.py checks each answer as POSIX gives it); then every file it
/// wrote reads the same through the mount of its node and through another node's.
#[test]
fn posix_calls_served_in_process_are_what_the_mounts_of_two_nodes_see() {
    let inst = Instance::up_on("preload", "127.0.9", 1, 2, &["--capacity", "1G"]);
    let (a, b) = (inst.mount("a", "127.0.9.1"), inst.mount("b", "127.0.9.5"));
    let off = scratch("preload-calls");
    std::fs::create_dir_all(&off).unwrap();
    std::fs::create_dir(a.path("t")).unwrap();
    let report = off.join("report");
    let mut python = python_program(&inst, "127.0.9.1", "posix_calls.py");
    python.arg(a.path("t")).arg(&*off);
    let pid = succeeded(preloaded(python, &report).output().unwrap(), "posix_calls.py");

    let served = report_of(&report, pid.trim());
    for call in
        ["open", "read", "write", "stat", "seek", "truncate", "sync", "dup", "close", "mkdir", "unlink", "rmdir", "setattr", "flock"]
    {
        assert!(served[call] > 0, "the library served no {call}: {served:?}");
    }
    assert!(served["open"] >= 10, "{served:?}");
    // mmap, fork and exec hand descriptors to the kernel.
    assert!(served["handed-to-kernel"] >= 3, "{served:?}");

    let big = std::fs::read(off.join("big")).unwrap();
    for m in [&a, &b] {
        let read = |name: &str| std::fs::read(m.path(&format!("t/{name}"))).unwrap();
        assert_eq!(read("f"), b"hello\0\0\0", "through {}", m.dir.display());
        assert_eq!(read("log"), b"x");
        assert_eq!(read("forked"), b"parent1 child parent2");
        assert_eq!(read("inherited"), b"before from-child after");
        assert_eq!(read("threads").len(), 80_000);
        assert!(read("big") == big && read("big.copy") == big, "the 5 MiB file through {}", m.dir.display());
        assert_eq!(std::fs::metadata(m.path("t/big")).unwrap().len(), big.len() as u64);
    }
}

/// cp -a, tar and cat through the library copy a tree into the buffer and back out exactly;
/// what another node's mount wrote is what the library (under `surge run`) reads.
#[test]
fn coreutils_and_tar_copy_a_tree_in_and_out_exactly() {
    let inst = Instance::up_on("preload-tree", "127.0.9", 11, 2, &["--capacity", "1G"]);
    let (a, b) = (inst.mount("a", "127.0.9.11"), inst.mount("b", "127.0.9.15"));
    let work = scratch("preload-tree");
    let source = work.join("src");
    for (i, dir) in ["", "d1", "d1/d2", "d3"].iter().enumerate() {
        std::fs::create_dir_all(source.join(dir)).unwrap();
        for (j, len) in [0usize, 1, 4095, 70_000, 2 << 20].iter().enumerate() {
            std::fs::write(source.join(dir).join(format!("file{j}")), surge_tests::pattern((i * 10 + j) as u64, *len)).unwrap();
        }
    }
    std::os::unix::fs::symlink("d1/file2", source.join("link")).unwrap();
    let report = work.join("report");
    let script = r#"set -e
        LD_PRELOAD=$PRELOAD cp -a "$SRC/." "$MNT/tree"
        LD_PRELOAD=$PRELOAD tar -C "$MNT/tree" -cf "$WORK/tree.tar" .
        mkdir "$WORK/untarred" && tar -C "$WORK/untarred" -xf "$WORK/tree.tar"
        LD_PRELOAD=$PRELOAD cp -a "$MNT/tree" "$WORK/back"
        LD_PRELOAD=$PRELOAD cat "$MNT/tree/d1/d2/file3" > "$WORK/cat.out"
        LD_PRELOAD=$PRELOAD dd if="$SRC/d3/file4" of="$MNT/dd.out" bs=64k status=none
        LD_PRELOAD=$PRELOAD ls -laR --time-style=+%s "$MNT/tree" > "$WORK/ls.library"
        ls -laR --time-style=+%s "$MNT/tree" > "$WORK/ls.mount""#;
    let mut shell = inst.shell_on("127.0.9.11", script);
    shell.env("PRELOAD", binary("libsurge_preload.so")).env("SURGE_PRELOAD_REPORT", &report);
    shell.env("SRC", &source).env("MNT", &a.dir).env("WORK", &*work);
    succeeded(shell.output().unwrap(), "copies through the library");
    let total = report_total(&report);
    // 58 opens, 16 writes (of 16 files not empty) and hundreds of reads when written.
    assert!(total["open"] >= 40 && total["write"] >= 16 && total["read"] >= 20, "{total:?}");
    // ls listed every directory of the tree itself (opendir, readdir), and saw what the mount
    // shows.
    assert!(total["opendir"] >= 4 && total["readdir"] >= 30, "{total:?}");
    let listed = |name: &str| std::fs::read_to_string(work.join(name)).unwrap().replace(&*a.dir.to_string_lossy(), "MNT");
    assert_eq!(listed("ls.library"), listed("ls.mount"), "ls -laR through the library and through the mount");

    let diff = |x: &Path, y: &Path| {
        let out = Command::new("diff").arg("-r").arg("--no-dereference").arg(x).arg(y).output().unwrap();
        assert!(out.status.success(), "{} and {} differ: {}", x.display(), y.display(), text(&out));
    };
    diff(&source, &work.join("untarred"));
    diff(&source, &work.join("back"));
    diff(&source, &b.path("tree"));
    assert_eq!(std::fs::read(work.join("cat.out")).unwrap(), std::fs::read(source.join("d1/d2/file3")).unwrap());
    assert_eq!(std::fs::read(b.path("dd.out")).unwrap(), std::fs::read(source.join("d3/file4")).unwrap());
    // cp -a kept modes and times (set through the mount after the library's writes).
    use std::os::unix::fs::MetadataExt;
    for name in ["file1", "d1/file4", "d1/d2/file0"] {
        let (src, copy) = (std::fs::metadata(source.join(name)).unwrap(), std::fs::metadata(b.path(&format!("tree/{name}"))).unwrap());
        assert_eq!((src.mode(), src.mtime(), src.mtime_nsec()), (copy.mode(), copy.mtime(), copy.mtime_nsec()), "{name}");
    }

    // Written on node b through its mount, closed: the library on node a reads it all.
    for round in 0..5u64 {
        let bytes = surge_tests::pattern(round, 100_000 * round as usize + 7);
        std::fs::write(b.path("shared"), &bytes).unwrap();
        let _ = std::fs::remove_file(&report);
        let mut cat = inst.shell_on("127.0.9.11", "$SURGE run --report \"$REPORT\" -- cat \"$MNT/shared\"");
        cat.env("MNT", &a.dir).env("REPORT", &report);
        let out = cat.output().unwrap();
        assert!(out.status.success() && out.stdout == bytes, "round {round}: the library read another node's file wrong");
        assert_eq!(report_total(&report)["open"], 1, "`surge run` loaded the library");
    }
}

/// For a user who does not own a file or directory, the library decides nothing: the
/// kernel's checks (through the mount) answer, so a read of another's private file, a
/// create in another's directory and a write to one's own read-only file are refused as
/// without the library; what the owner's bits allow is served in-process.
#[test]
fn permissions_are_the_kernels_for_anyone_but_the_owner() {
    use std::os::unix::fs::PermissionsExt;
    let inst = Instance::up_on("preload-perm", "127.0.9", 21, 2, &["--capacity", "256M"]);
    let m = inst.mount("a", "127.0.9.21");
    let work = scratch("preload-perm");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&*work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let home = inst.home_for(&work, 65534, 65534);
    std::fs::set_permissions(&m.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(m.path("private"), b"root's").unwrap();
    std::fs::set_permissions(m.path("private"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(m.path("theirs")).unwrap();
    std::os::unix::fs::chown(m.path("theirs"), Some(65534), Some(65534)).unwrap();
    let report = work.join("report");
    let as_nobody = |script: &str| {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", script])
            .env("LD_PRELOAD", binary("libsurge_preload.so"))
            .env("SURGE_PRELOAD_REPORT", &report)
            .env("SURGE_HOME", &home)
            .env("SURGE_NODE", "127.0.9.21")
            .env("MNT", &m.dir)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&report);
        out
    };
    let refused = |script: &str| {
        let out = as_nobody(script);
        assert!(!out.status.success() && text(&out).contains("Permission denied"), "`{script}` as nobody: {}", text(&out));
    };
    refused("cat \"$MNT/private\"");
    refused("echo x > \"$MNT/new\"");
    refused("echo x > \"$MNT/private\"");
    refused("rm -f \"$MNT/private\"");
    refused("mkdir \"$MNT/newdir\"");
    refused("rmdir \"$MNT/theirs\"");
    let out = as_nobody("echo mine > \"$MNT/theirs/mine\" && chmod 400 \"$MNT/theirs/mine\" && cat \"$MNT/theirs/mine\"");
    assert_eq!(succeeded(out, "nobody's own file"), "mine\n");
    refused("echo more >> \"$MNT/theirs/mine\"");
    assert_eq!(std::fs::read(m.path("theirs/mine")).unwrap(), b"mine\n");
    assert!(!m.path("new").exists() && !m.path("newdir").exists());
    assert!(m.path("private").exists() && m.path("theirs").exists());

    // What nobody may do as owner went through the library. (Not by a shell's redirection:
    // a description duplicated onto standard output is the kernel's, see docs/preload.md.)
    std::fs::write(work.join("source"), b"served\n").unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cp"])
        .arg(work.join("source"))
        .arg(m.path("theirs/served"))
        .env("LD_PRELOAD", binary("libsurge_preload.so"))
        .env("SURGE_PRELOAD_REPORT", &report)
        .env("SURGE_HOME", &home)
        .env("SURGE_NODE", "127.0.9.21")
        .output()
        .unwrap();
    succeeded(out, "a copy into nobody's own directory");
    let total = report_total(&report);
    assert!(total["open"] >= 1 && total["write"] >= 1, "{total:?}");
    assert_eq!(std::fs::read(m.path("theirs/served")).unwrap(), b"served\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(m.path("theirs/served")).unwrap().uid(), 65534);
}

/// `surge-fsx` with its first mount served by the library (node a) and its second by the
/// kernel through another node's mount: generic/127's six mixes (mmap, fallocate, punch hole
/// and copy_file_range among their operations, handed to the kernel or copied in-process),
/// each close checked through the other side. SURGE_FSX_OPS sets the operations per mix.
#[test]
fn fsx_mixes_agree_between_the_library_on_one_node_and_the_mount_of_another() {
    const MIXES: [&str; 6] = ["lite-nommap", "lite-mmap", "std-nommap", "std-mmap", "std-nommap-flush", "std-mmap-flush"];
    let ops = surge_tests::env_number("SURGE_FSX_OPS", 400).to_string();
    let inst = Instance::up_on("preload-fsx", "127.0.9", 31, 4, &["--capacity", "1G"]);
    let (a, b) = (inst.mount("a", "127.0.9.31"), inst.mount("b", "127.0.9.35"));
    let work = scratch("preload-fsx");
    std::fs::create_dir_all(&work).unwrap();
    let report = work.join("report");
    for mix in MIXES {
        let mut fsx = inst.shell_on("127.0.9.31", "exec \"$@\"");
        fsx.arg("fsx").arg(env!("CARGO_BIN_EXE_surge-fsx"));
        fsx.arg("--a").arg(&a.dir).arg("--b").arg(&b.dir).args(["--mix", mix, "--ops", &ops, "--name", mix, "--save-dir"]).arg(&*work);
        fsx.env("SURGE_PRELOAD_MOUNTS", &a.dir);
        succeeded(preloaded(fsx, &report).output().unwrap(), &format!("surge-fsx --mix {mix} --ops {ops}"));
    }
    let total = report_total(&report);
    assert!(total["read"] > 0 && total["write"] > 0 && total["open"] >= 6, "the library served none of fsx's calls: {total:?}");
    assert!(total["handed-to-kernel"] > 0, "mmap and fallocate go to the kernel: {total:?}");
}

/// Every file under a directory (its path there) with its bytes.
type Files = Vec<(String, Vec<u8>)>;

/// What `dir` holds, read through a mount: every file, and the access and modification times
/// of `f5` as `stat` gives them.
fn tree_of(dir: &Path) -> (Files, Option<(i64, i64)>) {
    use std::os::unix::fs::MetadataExt;
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if entry.file_type().unwrap().is_dir() {
            names.extend(tree_of(&entry.path()).0.into_iter().map(|(n, bytes)| (format!("{name}/{n}"), bytes)));
        } else {
            names.push((name, std::fs::read(entry.path()).unwrap()));
        }
    }
    names.sort();
    let times = std::fs::metadata(dir.join("f5")).ok().map(|m| (m.atime(), m.mtime()));
    (names, times)
}

/// What tests/preload/delegated.py leaves in a directory after making files `0..count`.
fn expected_tree(count: usize) -> Files {
    let content = |name: &str| {
        let all = name.repeat(40).into_bytes();
        all[..all.len().min(100 + name.len() * 7)].to_vec()
    };
    // Every third file is removed again.
    let mut names: Files = (0..count)
        .filter(|i| i % 3 != 0)
        .map(|i| {
            let name = format!("f{i}");
            (name.clone(), content(&name))
        })
        .collect();
    names.push(("sub/inner".into(), b"inner".to_vec()));
    names.sort();
    names
}

/// `stat`s the library answers from what it keeps (no request each) show every change made
/// on another node at once: sizes published, modes, links made and lost, names removed,
/// remade and renamed (tests/preload/kept_stats.py).
#[test]
fn stats_answered_from_what_the_library_keeps_show_changes_made_elsewhere_at_once() {
    let inst = Instance::up_on("preload-kept", "127.0.9", 51, 2, &["--capacity", "512M"]);
    let (a, b) = (inst.mount("a", "127.0.9.51"), inst.mount("b", "127.0.9.55"));
    std::fs::create_dir(a.path("d")).unwrap();
    let report = scratch("preload-kept").join("report");
    std::fs::create_dir_all(report.parent().unwrap()).unwrap();
    let mut python = python_program(&inst, "127.0.9.51", "kept_stats.py");
    python.arg(a.path("d")).arg(b.path("d")).env("SURGE_PRELOAD_MOUNTS", &a.dir);
    let said = succeeded(preloaded(python, &report).output().unwrap(), "kept_stats.py");
    assert_eq!(said.trim(), "ok");
    let served = report_total(&report);
    // 600 stats before the changes; the last 400 at least after the directory was listed.
    assert!(served["stat-kept"] >= 200, "too few stats answered from what the library keeps: {served:?}");
}

/// Creates and unlinks the library answers under a directory delegation (no request each)
/// are what both nodes' mounts see: while the process runs (the mount's first look recalls
/// the directory, and the library writes its steps back before the mount is answered), when
/// it ends at once after them, and when it becomes another program.
#[test]
fn creates_and_unlinks_answered_under_a_delegation_reach_both_nodes() {
    use std::io::{BufRead, BufReader, Write};
    let inst = Instance::up_on("preload-deleg", "127.0.9", 41, 2, &["--capacity", "512M"]);
    let (a, b) = (inst.mount("a", "127.0.9.41"), inst.mount("b", "127.0.9.45"));
    let work = scratch("preload-deleg");
    std::fs::create_dir_all(&work).unwrap();
    let run = |mode: &str, report: &Path| {
        let mut python = python_program(&inst, "127.0.9.41", "delegated.py");
        python.arg(&a.dir).arg(mode);
        preloaded(python, report)
    };

    let report = work.join("recalled");
    let mut held = run("recalled", &report).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut said = BufReader::new(held.stdout.take().unwrap());
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "delegated.py stopped early");
    let (made, times) = (expected_tree(300), Some((1, 2)));
    assert_eq!(tree_of(&b.path("held")), (made.clone(), times), "another node, while the process holds the directory");
    assert_eq!(tree_of(&a.path("held")), (made, times), "the same node's mount");
    writeln!(held.stdin.as_mut().unwrap()).unwrap();
    line.clear();
    said.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done");
    assert!(held.wait().unwrap().success());
    assert_eq!(tree_of(&b.path("held")).0, expected_tree(400), "after more steps, once the process ended");
    let served = report_total(&report);
    // 300 creates and 100 unlinks at least answered before the recall.
    assert!(served["answered-here"] >= 300, "the library answered too few steps itself: {served:?}");

    for (mode, dir) in [("exit", "at-exit"), ("exec", "at-exec")] {
        let report = work.join(mode);
        succeeded(run(mode, &report).output().unwrap(), mode);
        assert_eq!(tree_of(&b.path(dir)), (expected_tree(300), Some((1, 2))), "what the process answered before its {mode}");
    }
    // (An exec replaces the process before it reports.)
    let served = report_total(&work.join("exit"));
    assert!(served["answered-here"] >= 300, "{served:?}");
}

/// A directory made through the mount (a job script's `mkdir`) is delegated to a process
/// that then fills it under the library, as one it made itself: the mount, which made it and
/// was told no name in it since, is let go at the first change another client makes there.
/// Every file reaches both nodes' mounts with its bytes.
#[test]
fn a_directory_made_through_the_mount_is_delegated_to_the_process_that_fills_it() {
    let inst = Instance::up_on("preload-made", "127.0.9", 81, 2, &["--capacity", "512M"]);
    let (a, b) = (inst.mount("a", "127.0.9.81"), inst.mount("b", "127.0.9.85"));
    std::fs::create_dir(a.path("out")).unwrap();
    let program = r#"
import os, sys
out = sys.argv[1]
for i in range(2000):
    with open(f"{out}/f{i}", "wb") as f:
        f.write(b"%d " % i * 100)
"#;
    let work = scratch("preload-made");
    std::fs::create_dir_all(&work).unwrap();
    let report = work.join("report");
    let mut python = inst.shell_on("127.0.9.81", "exec python3 -c \"$1\" \"$2\"");
    python.arg("sh").arg(program).arg(a.path("out"));
    succeeded(preloaded(python, &report).output().unwrap(), "the filling program");
    let served = report_total(&report);
    assert!(served["answered-here"] >= 1000, "2,000 creates, too few answered under a delegation: {served:?}");
    for (node, mount) in [("a", &a), ("b", &b)] {
        let mut names: Vec<String> =
            std::fs::read_dir(mount.path("out")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), 2000, "node {node} lists {} files", names.len());
        names.sort();
        for name in names.iter().step_by(97) {
            let i: usize = name[1..].parse().unwrap();
            let bytes = std::fs::read(mount.path("out").join(name)).unwrap();
            assert_eq!(bytes, format!("{i} ").repeat(100).into_bytes(), "node {node}: out/{name}");
        }
    }
}

/// The room a process freed is free once it has ended: its unlinks and last closes do not wait
/// for the purges of the data (docs/consistency.md, "Freed room"), so the library waits for
/// them before the process ends, even by `_exit` right after the last unlink.
#[test]
fn room_a_process_freed_is_free_once_it_has_ended() {
    let inst = Instance::up_on("preload-freed", "127.0.9", 61, 2, &["--capacity", "512M"]);
    let (a, b) = (inst.mount("a", "127.0.9.61"), inst.mount("b", "127.0.9.65"));
    std::fs::create_dir(a.path("shared")).unwrap();
    let used = || {
        let out = Command::new("df").args(["--output=used", "-B1"]).arg(&b.dir).output().unwrap();
        succeeded(out, "df").lines().nth(1).and_then(|l| l.trim().parse::<u64>().ok()).expect("df's used bytes")
    };
    let before = used();
    // Files of 4 MiB over both servers: removed by name (in a directory the process made, and
    // in one the mount made), and one removed while open, freed by its last (read-only) close.
    let program = r#"
import os, sys
top = sys.argv[1]
os.mkdir(f"{top}/own")
block = os.urandom(4 << 20)
paths = [f"{top}/{d}/f{i}" for d in ("own", "shared") for i in range(8)]
for p in paths:
    with open(p, "wb") as f:
        f.write(block)
held = os.open(paths[0], os.O_RDONLY)
for p in paths:
    os.unlink(p)
assert len(os.read(held, 4096)) == 4096
os.close(held)
os._exit(0)
"#;
    let work = scratch("preload-freed");
    std::fs::create_dir_all(&work).unwrap();
    let report = work.join("report");
    let mut python = inst.shell_on("127.0.9.61", "exec python3 -c \"$1\" \"$2\"");
    python.arg("sh").arg(program).arg(&a.dir);
    succeeded(preloaded(python, &report).output().unwrap(), "the removing program");
    let after = used();
    assert!(after <= before + (1 << 20), "64 MiB written and removed, yet {} bytes more in use after the process ended", after - before);
    let served = report_total(&report);
    assert!(served["unlink"] >= 16 && served["handed-to-kernel"] == 0, "not served by the library: {served:?}");
}

/// Large writes and reads served on this node's data files (tests/preload/large_io.py):
/// straight from and into the program's buffers, they give back what was written, across
/// chunk boundaries, holes and overwrites, and another node reads the same bytes.
#[test]
fn large_reads_and_writes_on_this_nodes_data_files_are_exact_on_every_node() {
    let inst = Instance::up_on("preload-large", "127.0.9", 71, 2, &["--capacity", "512M"]);
    let (a, b) = (inst.mount("a", "127.0.9.71"), inst.mount("b", "127.0.9.75"));
    let work = scratch("preload-large");
    std::fs::create_dir_all(&work).unwrap();
    let (report, expected) = (work.join("report"), work.join("expected"));
    let mut python = python_program(&inst, "127.0.9.71", "large_io.py");
    python.arg(a.path("big")).arg(&expected);
    succeeded(preloaded(python, &report).output().unwrap(), "large_io.py");
    let written = std::fs::read(&expected).unwrap();
    assert!(std::fs::read(b.path("big")).unwrap() == written, "another node reads other bytes");
    assert!(std::fs::read(a.path("big")).unwrap() == written, "this node's mount reads other bytes");
    let served = report_total(&report);
    assert!(served["write"] >= 8 && served["handed-to-kernel"] == 0, "not served by the library: {served:?}");
}
