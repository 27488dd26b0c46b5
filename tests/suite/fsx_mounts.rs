//! `surge-fsx` (tests/fsx.rs) on two mounts of a 4-server instance, one on a server's node and
//! one on a node of its own: xfstests generic/127's six mixes, each close checked through the
//! other mount. The suite runs 10,000 operations in all; `bench/fsx-two-mounts.sh` runs the
//! long form (100,000 per mix). SURGE_FSX_OPS sets the operations per mix, SURGE_FSX_SEED the
//! seed.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use surge_tests::{env_number, scratch, text, Instance};

const FSX: &str = env!("CARGO_BIN_EXE_surge-fsx");

const MIXES: [&str; 6] = ["lite-nommap", "lite-mmap", "std-nommap", "std-mmap", "std-nommap-flush", "std-mmap-flush"];

/// generic/127's seed.
const SEED: u64 = 191_110_531;

fn fsx(a: &Path, b: &Path, args: &[&str]) -> Output {
    Command::new(FSX).arg("--a").arg(a).arg("--b").arg(b).args(args).output().expect("run surge-fsx")
}

#[test]
fn the_six_generic_127_mixes_read_the_same_through_the_other_mount() {
    let ops = env_number("SURGE_FSX_OPS", 10_000u64.div_ceil(MIXES.len() as u64)).to_string();
    let seed = env_number("SURGE_FSX_SEED", SEED).to_string();
    let inst = Instance::up_on("fsx", "127.0.1", 11, 4, &["--capacity", "4G"]);
    let (a, b) = (inst.mount("a", "127.0.1.11"), inst.mount("b", "127.0.1.15"));
    // A failure's saved contents outlive the instance (and its mounts) for a look afterwards.
    let saved = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fsx-mounts-saved");
    std::fs::create_dir_all(&saved).unwrap();
    let saved = saved.to_str().unwrap();
    for mix in MIXES {
        let started = Instant::now();
        let out = fsx(&a.dir, &b.dir, &["--mix", mix, "--ops", &ops, "--seed", &seed, "--name", mix, "--save-dir", saved]);
        if !out.status.success() {
            let log = inst.mount_log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!("surge-fsx --mix {mix} --seed {seed} --ops {ops}: {}\nthe mounts' log, its end:\n{}", text(&out), tail.join("\n"));
        }
        eprintln!("{:.1} s: {}", started.elapsed().as_secs_f64(), String::from_utf8_lossy(&out.stdout).trim());
    }
}

/// The checker itself: a byte changed through the other mount behind the model's back must
/// fail the run, with the report and the saved contents. On a plain directory (both "mounts"
/// the same), so that what is checked is the tool, not a file system.
#[test]
fn surge_fsx_fails_on_a_byte_changed_behind_its_back() {
    let dir = scratch("fsx-corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    let out = fsx(&dir, &dir, &["--mix", "std-mmap", "--ops", "400", "--corrupt-after", "150", "--name", "f"]);
    let report = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a corrupted file passed: {}", text(&out));
    for part in ["MISMATCH at operation 150", "first differing offset", "CORRUPT", "replay:"] {
        assert!(report.contains(part), "the report lacks '{part}': {report}");
    }
    let (good, bad) = (std::fs::read(dir.join("f.fsxgood")).unwrap(), std::fs::read(dir.join("f.fsxbad")).unwrap());
    assert_eq!(good.len(), bad.len());
    assert_eq!(good.iter().zip(&bad).filter(|(g, b)| g != b).count(), 1, "one byte was changed");
    assert!(std::fs::metadata(dir.join("f.fsxlog")).unwrap().len() > 0);
}
