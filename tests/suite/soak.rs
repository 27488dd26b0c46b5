//! Soak: 16 small-file clients (8 through the native library from nodes of their own, 8
//! through a FUSE mount with POSIX calls) and 8 large streams against a 4-server instance, every
//! operation checked, while the servers' and the mount's memory is sampled once a second.
//! Passes when no client saw an error and memory stayed flat (no leak: every cache and ledger
//! bounded). The suite runs a short form (2,000 operations per client, 20 s); the long form
//! is `bench/soak.sh` (100,000 operations per client, 10 minutes):
//! `SURGE_SOAK_OPS=100000 SURGE_SOAK_SECS=600 cargo test --release -p surge-tests --test suite soak::`.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use surge_tests::{env_number, text, Instance};

/// Resident memory of a process, in KiB. A process that is gone (or a status without the
/// line) fails the test: a dead server must not read as a flat memory curve.
fn rss_kib(name: &str, pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("{name} (pid {pid}) is gone mid-soak: /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} (pid {pid}): no VmRSS in its status (a zombie?):\n{status}"))
}

/// The pid of the surge-fuse process serving `dir`.
fn mount_pid(dir: &str) -> u32 {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).to_string()).collect();
        if args.first().is_some_and(|a| a.ends_with("surge-fuse")) && args.iter().any(|a| a == dir) {
            return pid;
        }
    }
    panic!("no surge-fuse process for {dir}")
}

/// Growth of the highest sample of the last quarter over the highest of the second (the
/// first is warm-up), in KiB.
fn growth(samples: &[u64]) -> i64 {
    let q = samples.len() / 4;
    let peak = |s: &[u64]| s.iter().copied().max().unwrap_or(0) as i64;
    peak(&samples[3 * q..]) - peak(&samples[q..2 * q])
}

#[test]
fn soak_small_files_and_streams_without_error_or_leak() {
    let (ops, secs) = (env_number("SURGE_SOAK_OPS", 2_000), env_number("SURGE_SOAK_SECS", 20));
    let stream_mib = env_number("SURGE_SOAK_STREAM_MIB", 64);
    let inst = Instance::up_on("soak", "127.0.3", 201, 4, &["--capacity", "8G", "--chunk-size", "1M"]);
    let mount = inst.mount("soak", "127.0.3.201");
    let mount_dir = mount.dir.to_str().unwrap().to_string();
    let desc = inst.descriptor();
    let mut watched: Vec<(String, u32)> =
        (0..4).map(|i| (format!("server {i}"), desc["servers"][i]["pid"].as_u64().unwrap() as u32)).collect();
    watched.push(("mount".into(), mount_pid(&mount_dir)));

    let start = Instant::now();
    let spawn = |mut cmd: std::process::Command| -> Child { cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap() };
    let mut clients: Vec<(String, Child)> = Vec::new();
    for i in 0..8 {
        let node = format!("127.0.3.{}", 211 + i);
        let mut cmd = inst.test_client(&node);
        cmd.args(["small-files", &format!("/lib{i}"), &ops.to_string(), &secs.to_string(), &(i + 1).to_string()]);
        clients.push((format!("library client {i}"), spawn(cmd)));
        let mut cmd = inst.test_client("127.0.3.201");
        let dir = format!("{mount_dir}/posix{i}");
        cmd.args(["posix-small-files", &dir, &ops.to_string(), &secs.to_string(), &(100 + i).to_string()]);
        clients.push((format!("mount client {i}"), spawn(cmd)));
        let mut cmd = inst.test_client(&format!("127.0.3.{}", 221 + i));
        cmd.args(["stream", &format!("/stream{i}"), &stream_mib.to_string(), &secs.to_string()]);
        clients.push((format!("stream {i}"), spawn(cmd)));
    }

    let mut samples: Vec<Vec<u64>> = vec![Vec::new(); watched.len()];
    // Generous: a loaded 2-core machine runs 100,000 operations per client slower than 10 minutes.
    let limit = Duration::from_secs(secs * 4 + 600);
    let mut outcomes = Vec::new();
    while outcomes.len() < clients.len() {
        for (sample, (name, pid)) in samples.iter_mut().zip(&watched) {
            sample.push(rss_kib(name, *pid));
        }
        for (name, child) in clients.iter_mut() {
            if !outcomes.iter().any(|(n, _)| n == name) && child.try_wait().unwrap().is_some() {
                outcomes.push((name.clone(), child.stdout.take().map(std::io::read_to_string).unwrap().unwrap_or_default()));
                let status = child.wait().unwrap();
                let stderr = child.stderr.take().map(std::io::read_to_string).unwrap().unwrap_or_default();
                assert!(status.success(), "{name} failed: {stderr}");
            }
        }
        assert!(start.elapsed() < limit, "clients still running after {limit:?}: a hang");
        std::thread::sleep(Duration::from_secs(1));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let count = |prefix: &str| -> u64 {
        outcomes.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, out)| out.trim().parse::<u64>().unwrap()).sum()
    };
    let (library_ops, mount_ops, stream_rounds) = (count("library"), count("mount"), count("stream"));
    assert!(library_ops >= 8 * ops && mount_ops >= 8 * ops, "fewer operations than asked: {library_ops} + {mount_ops}");

    let mut report = format!(
        "soak: {elapsed:.0} s, {library_ops} library + {mount_ops} mount small-file operations, {stream_rounds} stream rounds of {stream_mib} MiB, 0 errors\n"
    );
    for ((name, _), sample) in watched.iter().zip(&samples) {
        assert!(sample.len() >= 8, "{name}: {} memory samples, too few to see a trend", sample.len());
        let grew = growth(sample);
        report.push_str(&format!(
            "  {name}: RSS {} -> {} MiB (peak {} MiB), last quarter vs second {:+} MiB\n",
            sample.first().unwrap() / 1024,
            sample.last().unwrap() / 1024,
            sample.iter().max().unwrap() / 1024,
            grew / 1024
        ));
        let allowed = (32 * 1024).max(sample.iter().max().copied().unwrap_or(0) as i64 / 4);
        assert!(grew <= allowed, "{name} memory grows: {report}");
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("soak.txt"), &report).unwrap();
    println!("{report}");
    drop(mount);
    let fsck = inst.surge(&["fsck", &inst.name]);
    assert!(fsck.status.success(), "after the soak: {}", text(&fsck));
}
