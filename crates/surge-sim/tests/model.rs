//! End-to-end checks of the simulator: validation cases, max-min sharing, barriers, routing,
//! and clear errors for bad input.

use surge_sim::report::summarize;
use surge_sim::system::{Placement, SystemConfig};
use surge_sim::validate::{self, io_time};
use surge_sim::workload::WorkloadConfig;

fn examples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim")
}

/// Validation reads the shipped example files and covers the seed's Table IV and all seven
/// observations; a case the model fails says why, and the observations the model reproduces
/// stay reproduced.
#[test]
fn validation_covers_every_observation_and_explains_failures() {
    let results = validate::run(&examples(), &[]).unwrap();
    assert_eq!(results.len(), validate::CASE_NAMES.len());
    for obs in 1..=7 {
        assert!(results.iter().any(|r| r.name.starts_with(&format!("obs{obs}-"))), "observation {obs} has no case");
    }
    for r in &results {
        assert!(r.status == validate::Status::Pass || !r.note.is_empty(), "{} fails without a reason", r.name);
    }
    let passing: Vec<&str> = results.iter().filter(|r| r.status == validate::Status::Pass).map(|r| r.name).collect();
    for name in [
        "taper-halves-uplink",
        "obs1-dragonfly-global-nonminimal",
        "obs2-dragonfly-grouped-faster",
        "obs4-gtc-node-local-fastest",
        "obs4-hacc-scattered",
        "obs5-gtc-co-scheduled",
        "obs6-hacc-co-scheduled",
    ] {
        assert!(passing.contains(&name), "{name} no longer within tolerance:\n{}", validate::render(&results));
    }
    let err = validate::find_examples(Some(std::path::Path::new("/nonexistent"))).unwrap_err();
    assert!(format!("{err:#}").contains("summit-fat-tree.toml is missing"), "{err:#}");
}

/// Adaptive routing weighs load: the 21,600-rank LAMMPS-like burst to global BBs on the
/// dragonfly spreads over the global channels into the BB groups and stays within 5x of
/// grouped BBs (with flow counts as the load it was 10x).
#[test]
fn lammps_on_dragonfly_global_is_within_five_times_grouped() {
    let sys = SystemConfig::load(&examples().join("edison-dragonfly.toml")).unwrap();
    let w = WorkloadConfig::load(&examples().join("lammps-like.toml")).unwrap();
    let time = |p| summarize(&surge_sim::simulate(&sys, p, &w).unwrap()).unwrap().jobs[0].clone();
    let (grouped, global) = (time(Placement::Grouped), time(Placement::Global));
    assert!(global.io_time < 5.0 * grouped.io_time, "global {} s vs grouped {} s", global.io_time, grouped.io_time);
    assert!(grouped.nonminimal_fraction < 0.05, "grouped traffic stays local: {}", grouped.nonminimal_fraction);
}

const TWO_SERVERS: &str = r#"
name = "two servers"
[network]
injection_bw = "10 GB/s"
[network.fat_tree]
compute_switches = 1
nodes_per_switch = 4
switches_per_pod = 1
link_bw = "10 GB/s"
[burst_buffer]
placement = "global"
stripe_count = 1
[burst_buffer.global]
servers = 2
servers_per_switch = 2
devices_per_server = 1
device = { write_bw = "4 GB/s", read_bw = "8 GB/s" }
[burst_buffer.node_local]
device = { write_bw = "1 GB/s", read_bw = "2 GB/s" }
"#;

fn workload(body: &str) -> String {
    format!("ranks_per_node = 1\n{body}")
}

#[test]
fn max_min_fair_sharing_gives_leftover_to_unconstrained_flows() {
    // Nodes 0 and 1 map to server 0, nodes 2 and 3 to server 1 (4 GB/s each). One job of two
    // ranks writes 4 GB each to server 0; a second, single-rank job writes 2 GB to server 1.
    // Server 0 is shared: 2 GB/s each -> 2 s. Server 1's flow is alone: 4 GB/s -> 0.5 s.
    let w = workload(
        r#"
[[job]]
name = "pair"
ranks = 2
[job.synthetic]
pattern = "ior_nn"
bytes_per_rank = "4 GB"
transfer_size = "4 GB"
[[job]]
name = "single"
ranks = 1
[job.synthetic]
pattern = "ior_nn"
bytes_per_rank = "2 GB"
transfer_size = "2 GB"
"#,
    );
    let pair = io_time(TWO_SERVERS, Placement::Global, &w, 0).unwrap();
    let single = io_time(TWO_SERVERS, Placement::Global, &w, 1).unwrap();
    assert!((pair - 2.0).abs() < 1e-6, "pair took {pair}");
    assert!((single - 0.5).abs() < 1e-6, "single took {single}");
}

#[test]
fn reads_use_read_bandwidth_and_node_local_has_no_hops() {
    let w = workload(
        r#"
[[job]]
name = "reader"
ranks = 4
[job.synthetic]
pattern = "ior_nn"
bytes_per_rank = "2 GB"
transfer_size = "1 GB"
read = true
"#,
    );
    let sys = SystemConfig::parse(TWO_SERVERS).unwrap();
    let out = surge_sim::simulate(&sys, Placement::NodeLocal, &WorkloadConfig::parse(&w).unwrap()).unwrap();
    let s = summarize(&out).unwrap();
    assert!((s.jobs[0].io_time - 1.0).abs() < 1e-6, "2 GB at 2 GB/s: {}", s.jobs[0].io_time);
    assert_eq!(s.jobs[0].avg_hops, 0.0);
    let out = surge_sim::simulate(&sys, Placement::Global, &WorkloadConfig::parse(&w).unwrap()).unwrap();
    let s = summarize(&out).unwrap();
    // 8 GB from two servers at 8 GB/s each, but each server feeds two nodes through one 10 GB/s NIC.
    assert!((s.jobs[0].io_time - 8e9 / 16e9).abs() < 1e-6, "{}", s.jobs[0].io_time);
    assert_eq!(s.jobs[0].avg_hops, 6.0, "servers on their own switch in another pod: 6 links");
}

#[test]
fn barriers_hold_fast_ranks_until_the_slowest_arrives() {
    // Rank 1 starts its first phase 5 s late; with barriers, rank 0's second phase cannot start
    // before rank 1 has finished its first.
    let job = r#"
[[job]]
name = "sync"
ranks = 2
placement = { nodes = [0, 2] }
"#;
    let synthetic = r#"
[job.synthetic]
pattern = "checkpoint"
bytes_per_rank = "1 GB"
transfer_size = "1 GB"
phases = 2
interval = "1 s"
wave_size = 1
wave_gap = "5 s"
"#;
    let plain = workload(&format!("{job}{synthetic}"));
    let recorded = workload(&format!("{job}timing = \"recorded\"\n{synthetic}"));
    let synced = workload(&format!("{job}transforms = [{{ barriers = {{ group = 0 }} }}]\n{synthetic}"));
    let sys = SystemConfig::parse(TWO_SERVERS).unwrap();
    let run = |w: &str| {
        let out = surge_sim::simulate(&sys, Placement::NodeLocal, &WorkloadConfig::parse(w).unwrap()).unwrap();
        out.result.phases.iter().find(|p| p.rank == 0 && p.phase == 1).unwrap().start
    };
    assert!((run(&plain) - 2.0).abs() < 1e-6, "1 s write at 1 GB/s, then 1 s of compute");
    assert!((run(&recorded) - 1.0).abs() < 1e-6, "recorded timeline: the second phase starts at its recorded 1 s");
    assert!((run(&synced) - 6.0).abs() < 1e-6, "second phase starts after rank 1's first write (5 s + 1 s)");
}

/// A two-rank trace with recorded I/O times: rank 0 computes 1 s, writes 1 GB (recorded: 2 s),
/// computes 3 s, writes 1 GB (recorded: 2 s). Under simulated timing only the 1 s and 3 s of
/// compute come from the trace; under recorded timing the slow recorded system sets the pace.
#[test]
fn simulated_timing_keeps_compute_gaps_and_takes_io_time_from_the_system() {
    let dir = std::env::temp_dir().join(format!("surge-sim-timing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("trace.json"),
        r#"{"format":"surge-trace","version":2,"nprocs":1,"ops":{"rank":[0,0],"kind":["w","w"],"file":[0,0],
            "offset":[0,1000000000],"size":[1000000000,1000000000],"start":[1,6],"end":[3,8],"phase":[0,1]}}"#,
    )
    .unwrap();
    let sys = SystemConfig::parse(TWO_SERVERS).unwrap();
    let end_of = |timing: &str, placement| {
        let text = format!("ranks_per_node = 1\n[[job]]\nname = 't'\ntrace = 'trace.json'\ntiming = '{timing}'\n");
        std::fs::write(dir.join("w.toml"), text).unwrap();
        let w = WorkloadConfig::load(&dir.join("w.toml")).unwrap();
        let out = surge_sim::simulate(&sys, placement, &w).unwrap();
        let last = out.result.phases.iter().find(|p| p.phase == 1).unwrap();
        (last.end, last.busy)
    };
    // Node-local 1 GB/s: 1 + 1 (write) + 3 + 1 (write) = 6 s. Global 4 GB/s: 1 + 0.25 + 3 + 0.25.
    let (local, local_busy) = end_of("simulated", Placement::NodeLocal);
    let (global, _) = end_of("simulated", Placement::Global);
    assert!((local - 6.0).abs() < 1e-6 && (local_busy - 1.0).abs() < 1e-6, "{local} {local_busy}");
    assert!((global - 4.5).abs() < 1e-5, "{global}");
    // Recorded: the second write is issued at 6 s whatever the system, so both end at 7 s / 6.25 s.
    let (local, _) = end_of("recorded", Placement::NodeLocal);
    let (global, _) = end_of("recorded", Placement::Global);
    assert!((local - 7.0).abs() < 1e-6 && (global - 6.25).abs() < 1e-5, "{local} {global}");
    // A version 1 trace has no recorded ends: simulated timing refuses it, saying why.
    std::fs::write(
        dir.join("trace.json"),
        r#"{"format":"surge-trace","version":1,"nprocs":1,"ops":{"rank":[0],"kind":["w"],"file":[0],"offset":[0],"size":[1],"start":[0],"phase":[0]}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("w.toml"), "[[job]]\nname = 't'\ntrace = 'trace.json'\n").unwrap();
    let err = surge_sim::simulate(&sys, Placement::NodeLocal, &WorkloadConfig::load(&dir.join("w.toml")).unwrap()).err().expect("refused");
    assert!(format!("{err:#}").contains("no recorded end times"), "{err:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Where a trace is expected, a raw Darshan log is named as such, with the command to convert it.
#[test]
fn raw_darshan_log_is_refused_with_the_conversion_command() {
    let dir = std::env::temp_dir().join(format!("surge-sim-darshan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The header of a real log: version string "3.21", then the magic number 6567223.
    let mut header = b"3.21\0\0\0\0".to_vec();
    header.extend_from_slice(&6_567_223u64.to_le_bytes());
    header.extend_from_slice(&[0x97, 0x03, 0, 0, 0, 0, 0, 0, 0xff, 0xfe]);
    std::fs::write(dir.join("app.darshan"), header).unwrap();
    std::fs::write(dir.join("w.toml"), "[[job]]\nname = 'app'\ntrace = 'app.darshan'\n").unwrap();
    let sys = SystemConfig::parse(TWO_SERVERS).unwrap();
    let err = surge_sim::simulate(&sys, Placement::NodeLocal, &WorkloadConfig::load(&dir.join("w.toml")).unwrap()).err().expect("refused");
    let msg = format!("{err:#}");
    assert!(msg.contains("raw Darshan log") && msg.contains("python -m surge.darshan_trace"), "{msg}");
    std::fs::write(dir.join("app.darshan"), [0xffu8, 0xfe, 0x00, 0x01]).unwrap();
    let err = surge_sim::simulate(&sys, Placement::NodeLocal, &WorkloadConfig::load(&dir.join("w.toml")).unwrap()).err().expect("refused");
    assert!(format!("{err:#}").contains("not a surge trace"), "{err:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn adaptive_dragonfly_routing_takes_longer_paths_under_load() {
    let system = include_str!("../../../examples/sim/edison-dragonfly.toml");
    let minimal = system.replace(r#"routing = "adaptive""#, r#"routing = "minimal""#);
    let gtc = include_str!("../../../examples/sim/gtc-like.toml").replace("ranks = 7680", "ranks = 1536");
    let hops = |sys: &str| {
        let mut s = SystemConfig::parse(sys).unwrap();
        s.prices = None;
        let out = surge_sim::simulate(&s, Placement::Global, &WorkloadConfig::parse(&gtc).unwrap()).unwrap();
        let sum = summarize(&out).unwrap();
        (sum.jobs[0].avg_hops, sum.jobs[0].nonminimal_fraction, sum.jobs[0].io_time)
    };
    let (h_min, nm_min, t_min) = hops(&minimal);
    let (h_ad, nm_ad, t_ad) = hops(system);
    assert_eq!(nm_min, 0.0);
    assert!(nm_ad > 0.2 && h_ad > h_min, "adaptive: {nm_ad} non-minimal, {h_ad} vs {h_min} hops");
    assert!(t_ad < t_min, "adaptive routing relieves the global channels: {t_ad} vs {t_min}");
}

#[test]
fn malformed_inputs_give_clear_errors() {
    let err = SystemConfig::parse("name = 'x'\n[network]\ninjection_bw = '10 GB/s'\n").unwrap_err();
    assert!(format!("{err:#}").contains("burst_buffer"), "{err:#}");
    let err = SystemConfig::parse(&TWO_SERVERS.replace("10 GB/s", "10 parsecs")).unwrap_err();
    assert!(format!("{err:#}").contains("must end in /s"), "{err:#}");
    let err = SystemConfig::parse(&TWO_SERVERS.replace("placement = \"global\"", "placement = \"grouped\"")).unwrap_err();
    assert!(format!("{err:#}").contains("[burst_buffer.grouped] is missing"), "{err:#}");
    let too_big = workload("[[job]]\nname = 'big'\nranks = 9\n[job.synthetic]\npattern = 'ior_nn'\nbytes_per_rank = '1 MB'\n");
    let err = io_time(TWO_SERVERS, Placement::Global, &too_big, 0).unwrap_err();
    assert!(format!("{err:#}").contains("needs 9 nodes but only 4"), "{err:#}");
    let missing = std::path::Path::new("/nonexistent/system.toml");
    assert!(format!("{:#}", SystemConfig::load(missing).unwrap_err()).contains("cannot read system file"));
}

#[test]
fn calibration_file_replaces_device_and_network_figures() {
    let dir = std::env::temp_dir().join(format!("surge-sim-cal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("measured.json"),
        r#"{"source": "surge bench", "device_write_bw": "500 MB/s", "op_overhead": "20 us", "link_latency": "2 us"}"#,
    )
    .unwrap();
    let system = format!("{TWO_SERVERS}\n[calibration]\nfrom = \"measured.json\"\nplacement = \"node_local\"\n");
    std::fs::write(dir.join("system.toml"), system).unwrap();
    let sys = SystemConfig::load(&dir.join("system.toml")).unwrap();
    assert_eq!(sys.device(Placement::NodeLocal).unwrap().write_bw.0, 500e6);
    assert_eq!(sys.device(Placement::Global).unwrap().write_bw.0, 4e9, "restricted to node_local");
    assert!((sys.burst_buffer.op_overhead.0 - 20e-6).abs() < 1e-12);
    assert!((sys.network.link_latency.0 - 2e-6).abs() < 1e-12);
    std::fs::write(dir.join("measured.json"), "{ broken").unwrap();
    let err = SystemConfig::load(&dir.join("system.toml")).unwrap_err();
    assert!(format!("{err:#}").contains("invalid calibration file"), "{err:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}
