//! `surge-fsstress` (tests/fsstress.rs) on two mounts of a 4-server instance at once, one on a
//! server's node and one on a node of its own, both in one tree: what is left must be
//! consistent (`surge fsck` clean, the same tree seen from both nodes), and once the tree is
//! removed every byte must be free again on every server, with no data file left behind.
//! SURGE_FSSTRESS_OPS sets the operations per process (the suite's 10,000; docs/testing.md
//! has the long form), SURGE_FSSTRESS_SEED the first process's seed (the second's is the next).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use surge_tests::{env_number, text, Instance};

const FSSTRESS: &str = env!("CARGO_BIN_EXE_surge-fsstress");

/// Every name under `root` with its kind, size (files), link target (symlinks) and link
/// count, as one node sees it.
fn tree(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let what = if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else if meta.file_type().is_symlink() {
                format!("symlink -> {}", std::fs::read_link(&path).unwrap().display())
            } else {
                format!("file {} bytes, {} links, mode {:o}", meta.len(), meta.nlink(), meta.mode())
            };
            seen.push(format!("{name}: {what}"));
        }
    }
    seen.sort();
    seen
}

/// What differs between two nodes' trees, with the inode each node and the servers (through
/// the native client, which caches nothing) give the first few directories that differ.
fn differences(inst: &Instance, a: &Path, b: &Path, seen_a: &[String], seen_b: &[String]) -> String {
    use std::os::unix::fs::MetadataExt;
    let only = |x: &[String], y: &[String]| x.iter().filter(|e| !y.contains(e)).cloned().collect::<Vec<_>>();
    let (only_a, only_b) = (only(seen_a, seen_b), only(seen_b, seen_a));
    let mut report = format!("only on a: {only_a:?}\nonly on b: {only_b:?}\n");
    let mut parents: Vec<&str> =
        only_a.iter().chain(&only_b).filter_map(|e| e.split_once(':').map(|(p, _)| p.rsplit_once('/').map_or("", |(d, _)| d))).collect();
    parents.sort_unstable();
    parents.dedup();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let client = inst.client("127.0.7.20");
    for dir in parents.into_iter().take(3) {
        let ino =
            |root: &Path| std::fs::symlink_metadata(root.join(dir)).map(|m| format!("{:#x}", m.ino())).unwrap_or_else(|e| e.to_string());
        let truth = runtime.block_on(client.readdir(&format!("/tree/{dir}")));
        let names = truth.map(|entries| entries.iter().map(|e| format!("{} {:#x}", e.name, e.ino)).collect::<Vec<_>>());
        let at = runtime.block_on(client.stat(&format!("/tree/{dir}"))).map(|attr| format!("{:#x}", attr.ino));
        report += &format!("{dir}: inode {} through a, {} through b, {at:?} at the servers, which list {names:?}\n", ino(a), ino(b));
    }
    // Entries both nodes list but see differently: what the servers say of each, and what
    // the mounts and servers logged of its inode.
    let logs = inst.mount_log() + &inst.server_logs();
    for entry in only_a.iter().filter(|e| only_b.iter().any(|f| f.split_once(':').map(|x| x.0) == e.split_once(':').map(|x| x.0))).take(2) {
        let name = entry.split_once(':').unwrap().0;
        let Ok(meta) = std::fs::symlink_metadata(a.join(name)) else { continue };
        let truth = runtime.block_on(client.stat(&format!("/tree/{name}")));
        let truth = truth.map(|attr| format!("inode {:#x}, {} bytes, {} links", attr.ino, attr.size, attr.nlink));
        report += &format!("{name}: inode {:#x} through a; the servers: {truth:?}; logged of it:\n", meta.ino());
        for line in about(&logs, meta.ino()).take(60) {
            report += &format!("    {line}\n");
        }
    }
    report
}

fn used_per_server(inst: &Instance) -> Vec<u64> {
    let out = inst.surge(&["status", &inst.name, "--json"]);
    assert!(out.status.success(), "surge status: {}", text(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status["servers"].as_array().unwrap().iter().map(|s| s["used"].as_u64().unwrap()).collect()
}

/// Data files left in the servers' data directories.
fn data_files(inst: &Instance) -> Vec<String> {
    let mut left = Vec::new();
    for server in inst.descriptor()["servers"].as_array().unwrap() {
        let data = Path::new(server["root"].as_str().unwrap()).join("data");
        for entry in std::fs::read_dir(&data).unwrap_or_else(|e| panic!("list {}: {e}", data.display())) {
            left.push(entry.unwrap().path().display().to_string());
        }
    }
    left
}

/// What the servers and the logs say of the inodes whose data files were left (the first few).
fn leaked(inst: &Instance, left: &[String]) -> String {
    let mut inos: Vec<u64> = left.iter().filter_map(|f| u64::from_str_radix(f.rsplit('/').next()?, 16).ok()).collect();
    inos.sort_unstable();
    inos.dedup();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let client = inst.client("127.0.7.20");
    let logs = inst.mount_log() + &inst.server_logs();
    let mut report = format!("{} inodes: {:x?}\n", inos.len(), &inos[..inos.len().min(40)]);
    let scan = runtime.block_on(client.fsck_scan()).expect("scan the servers");
    let named = |ino: u64| scan.entries.iter().filter(|e| e.ino == ino).map(|e| format!("{:#x}/{}", e.dir, e.name)).collect::<Vec<_>>();
    // The directories still naming them, up to the root.
    let mut dirs: Vec<u64> = scan.entries.iter().filter(|e| inos.contains(&e.ino)).map(|e| e.dir).collect();
    let mut seen = std::collections::HashSet::new();
    while let Some(dir) = dirs.pop() {
        if seen.insert(dir) && seen.len() < 12 {
            report += &format!("directory {dir:#x}: {:?}, named {:?}\n", scan.inodes.get(&dir), named(dir));
            let lines: Vec<&str> = about(&logs, dir).collect();
            for line in &lines[lines.len().saturating_sub(30)..] {
                report += &format!("    {line}\n");
            }
            dirs.extend(scan.entries.iter().filter(|e| e.ino == dir).map(|e| e.dir));
        }
    }
    for line in warnings(&logs) {
        report += &format!("  logged: {line}\n");
    }
    for &ino in inos.iter().take(5) {
        report += &format!("{ino:#x} at its home: {:?}, named {:?}\n", scan.inodes.get(&ino), named(ino));
        for line in about(&logs, ino).take(40) {
            report += &format!("    {line}\n");
        }
    }
    report
}

/// The first warnings and errors logged, and what was logged of delegations.
fn warnings(logs: &str) -> impl Iterator<Item = &str> {
    logs.lines().filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("delegation")).take(30)
}

/// The log lines that name inode `ino`: in hex (the warnings) or, bounded by non-digits, in
/// decimal (the servers' step trace, SURGE_LOG=surge_server::steps=trace in the test's
/// environment: docs/testing.md).
fn about(logs: &str, ino: u64) -> impl Iterator<Item = &str> {
    let (hex, decimal) = (format!("{ino:#x}"), ino.to_string());
    logs.lines().filter(move |line| {
        line.contains(&hex)
            || line.match_indices(&decimal).any(|(at, _)| {
                let bytes = line.as_bytes();
                let before = at.checked_sub(1).map(|i| bytes[i]);
                let after = bytes.get(at + decimal.len()).copied();
                !before.is_some_and(|b| b.is_ascii_alphanumeric()) && !after.is_some_and(|b| b.is_ascii_digit())
            })
    })
}

fn fsck_is_clean(inst: &Instance, after: &str) {
    let out = inst.surge(&["fsck", &inst.name]);
    let report = text(&out);
    if !(out.status.success() && report.contains("clean")) {
        // What the mounts and servers logged of the inodes found wrong.
        let logs = inst.mount_log() + &inst.server_logs();
        let mut named = String::new();
        for word in report.split_whitespace().filter(|w| w.starts_with("0x")).take(5) {
            let ino = u64::from_str_radix(word.trim_start_matches("0x").trim_end_matches(':'), 16).unwrap_or(0);
            for line in about(&logs, ino).take(40) {
                named += &format!("    {line}\n");
            }
        }
        for line in warnings(&logs) {
            named += &format!("  logged: {line}\n");
        }
        panic!("surge fsck after {after}: {report}\nlogged of those inodes, and warnings:\n{named}");
    }
}

#[test]
fn two_nodes_stressing_one_tree_leave_it_consistent_and_every_byte_freed_once_it_is_removed() {
    let ops = env_number("SURGE_FSSTRESS_OPS", 10_000).to_string();
    let seed = env_number("SURGE_FSSTRESS_SEED", 1);
    let inst = Instance::up_on("fsstress", "127.0.7", 11, 4, &["--capacity", "4G"]);
    let empty = used_per_server(&inst);
    // Every error a mount answers is logged (info), for the report of a failed run.
    let logged = [("SURGE_LOG", "info")];
    let mounts = [inst.mount_with("a", "127.0.7.11", &logged), inst.mount_with("b", "127.0.7.15", &logged)];
    std::fs::create_dir(mounts[0].path("tree")).unwrap();

    let started = Instant::now();
    let runs: Vec<_> = mounts
        .iter()
        .zip([seed, seed + 1])
        .map(|(m, seed)| {
            Command::new("timeout")
                .args(["300", FSSTRESS, "--dir", m.path("tree").to_str().unwrap(), "--ops", &ops, "--seed", &seed.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run surge-fsstress")
        })
        .collect();
    for (run, label) in runs.into_iter().zip(["a", "b"]) {
        let out = run.wait_with_output().unwrap();
        if !out.status.success() {
            // The tool sees errnos only; the mounts log each error they answered with its detail.
            let log = inst.mount_log();
            let answered: Vec<&str> = log.lines().filter(|l| l.contains("answered an error")).collect();
            let last = &answered[answered.len().saturating_sub(20)..];
            panic!(
                "surge-fsstress on mount {label} (status {:?}): {}\nthe mounts' last errors answered:\n{}",
                out.status.code(),
                text(&out),
                last.join("\n")
            );
        }
        eprintln!("{:.1} s, mount {label}: {}", started.elapsed().as_secs_f64(), String::from_utf8_lossy(&out.stdout).trim());
    }

    fsck_is_clean(&inst, "the stress runs");
    let (seen_a, seen_b) = (tree(&mounts[0].path("tree")), tree(&mounts[1].path("tree")));
    assert!(!seen_a.is_empty(), "the runs left nothing to compare");
    if seen_a != seen_b {
        panic!(
            "the two nodes see different trees:\n{}",
            differences(&inst, &mounts[0].path("tree"), &mounts[1].path("tree"), &seen_a, &seen_b)
        );
    }

    std::fs::remove_dir_all(mounts[1].path("tree")).unwrap();
    fsck_is_clean(&inst, "removing the tree");
    // Purges reach the servers after the unlinks are answered: give them a moment.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (used, left) = (used_per_server(&inst), data_files(&inst));
        if used == empty && left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            panic!(
                "after removing the tree ({} names), used {used:?} (empty: {empty:?}), {} data files left:\n{}",
                seen_b.len(),
                left.len(),
                leaked(&inst, &left)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
