//! The randomized fault campaign's short form (`surge-campaign`, tests/campaign/): three
//! worker processes on one instance (two through the native client, one through a FUSE
//! mount with POSIX calls), servers killed, stopped and cut off and workers killed at random
//! for a minute, then every worker's history and the tree checked against
//! docs/consistency.md's guarantees and `surge fsck`. The long form is
//! `bench/campaign.sh SECS SEED` (results in docs/faults.md);
//! `SURGE_CAMPAIGN_SECS=600 SURGE_CAMPAIGN_SEED=7 cargo test --release -p surge-tests --test suite campaign::`
//! runs this one longer or on another seed.

use std::process::Command;

use surge_tests::{binary, env_number, scratch, text};

#[test]
fn a_fault_campaign_breaks_no_promise() {
    let (secs, seed) = (env_number("SURGE_CAMPAIGN_SECS", 60), env_number("SURGE_CAMPAIGN_SEED", 1));
    let out = scratch("campaign");
    let run = Command::new(binary("surge-campaign"))
        .args(["run", "--secs", &secs.to_string(), "--seed", &seed.to_string(), "--mounts", "1", "--out"])
        .arg(&*out)
        .output()
        .expect("run surge-campaign");
    let report = String::from_utf8_lossy(&run.stdout);
    println!("{report}");
    assert!(run.status.success() && report.contains("\n0 violations"), "seed {seed}, {secs} s:\n{}", text(&run));
}
