//! `surge sim calibrate`: from bandwidths measured on a Surge instance (servers behind links of
//! a known rate, see bench/sim/calibrate.sh) to the [`Calibration`] a system file points to,
//! and predictions of other configurations of the same instance to check it against.
//!
//! Each efficiency is measured bandwidth over what the simulator predicts for the same
//! configuration at full link rate (a one-switch model of the measured instance): first the
//! links' per direction from the file-per-process (N-N) runs, then, with those applied, the
//! shared-file (N-1) share. They are single numbers, so a loss that changes with the
//! configuration is predicted at the calibrated configuration's value. The model and its
//! limits: docs/simulator.md, "Calibration hook".

use crate::system::{Calibration, Placement, SystemConfig};
use crate::workload::WorkloadConfig;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;

/// Pass/fail threshold of a prediction: |predicted - measured| / measured.
pub const TOLERANCE: f64 = 0.15;

const MIB: f64 = 1024.0 * 1024.0;

/// One configuration of a measured instance and its figures (bench/sim/calibrate.sh).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    pub source: Option<String>,
    /// Short name of the configuration ("A", "B4").
    pub config: String,
    pub servers: usize,
    /// Rate every server's link is shaped to, each direction, in Mbit/s (10^6 bits).
    pub link_mbit_s: f64,
    pub chunk_size: u64,
    /// Client processes, started together.
    pub procs: usize,
    pub bytes_per_proc: u64,
    /// Request size.
    pub block: u64,
    pub results: Vec<Sample>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// File per process.
    Nn,
    /// One shared file, process p on its own contiguous segment.
    N1,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Write,
    Read,
}

/// Aggregate bandwidth of one pattern and phase in one round (all bytes / slowest process).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    #[serde(default)]
    pub round: u32,
    pub pattern: Pattern,
    pub phase: Phase,
    pub mib_s: f64,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Nn => "N-N",
            Pattern::N1 => "N-1",
        }
    }
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Write => "write",
            Phase::Read => "read",
        }
    }
}

/// Measured spread of one pattern and phase over the rounds, MiB/s.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
}

impl Measurement {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read measurement file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid measurement file {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self> {
        let m: Measurement = serde_json::from_str(text)?;
        if m.servers == 0 || m.procs == 0 || m.link_mbit_s <= 0.0 || m.bytes_per_proc == 0 || m.block == 0 || m.chunk_size == 0 {
            bail!("servers, procs, link_mbit_s, bytes_per_proc, block and chunk_size must be positive");
        }
        if let Some(s) = m.results.iter().find(|s| !(s.mib_s.is_finite() && s.mib_s > 0.0)) {
            bail!("{} {} round {}: bandwidth {} is not a positive number", s.pattern.name(), s.phase.name(), s.round, s.mib_s);
        }
        Ok(m)
    }

    /// Link rate in bytes per second.
    pub fn link_bytes_s(&self) -> f64 {
        self.link_mbit_s * 1e6 / 8.0
    }

    /// The patterns and phases measured, in a fixed order.
    pub fn cases(&self) -> Vec<(Pattern, Phase)> {
        let mut cases: Vec<(Pattern, Phase)> = self.results.iter().map(|s| (s.pattern, s.phase)).collect();
        cases.sort();
        cases.dedup();
        cases
    }

    pub fn spread(&self, pattern: Pattern, phase: Phase) -> Option<Spread> {
        let v: Vec<f64> = self.results.iter().filter(|s| s.pattern == pattern && s.phase == phase).map(|s| s.mib_s).collect();
        if v.is_empty() {
            return None;
        }
        Some(Spread {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(0.0, f64::max),
            rounds: v.len(),
        })
    }

    /// The measured instance as a system file (TOML), optionally pointing at a calibration.
    /// Devices and the fabric are far faster than the links: the servers' links bound the
    /// transfers, as the measurement intends.
    pub fn system_toml(&self, calibration: Option<&str>) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "name = \"Surge instance {}: {} servers, {} Mbit/s links\"", self.config, self.servers, self.link_mbit_s);
        let _ = writeln!(t, "[network]\ninjection_bw = \"100 GB/s\"");
        let _ = writeln!(t, "[network.fat_tree]\ncompute_switches = 1\nnodes_per_switch = {}\nswitches_per_pod = 1", self.procs);
        let _ = writeln!(t, "link_bw = \"100 GB/s\"");
        let _ = writeln!(t, "[burst_buffer]\nplacement = \"global\"\nstripe_count = {}\nstripe_size = {}", self.servers, self.chunk_size);
        let _ = writeln!(t, "[burst_buffer.global]\nservers = {0}\nservers_per_switch = {0}\ndevices_per_server = 1", self.servers);
        let _ = writeln!(t, "device = {{ write_bw = \"100 GB/s\", read_bw = \"100 GB/s\" }}");
        let _ = writeln!(t, "nic_bw = {}", self.link_bytes_s());
        if let Some(from) = calibration {
            let _ = writeln!(t, "[calibration]\nfrom = {from:?}");
        }
        t
    }

    /// One job of `procs` ranks, one per node, running `pattern`'s `phase` (TOML).
    pub fn workload_toml(&self, pattern: Pattern, phase: Phase) -> String {
        let ior = match pattern {
            Pattern::Nn => "ior_nn",
            Pattern::N1 => "ior_n1",
        };
        format!(
            "name = \"{} {}\"\nranks_per_node = 1\n[[job]]\nname = \"bench\"\nranks = {}\nplacement = \"contiguous\"\n\
             [job.synthetic]\npattern = \"{ior}\"\nbytes_per_rank = {}\ntransfer_size = {}\nread = {}\n",
            pattern.name(),
            phase.name(),
            self.procs,
            self.bytes_per_proc,
            self.block,
            phase == Phase::Read
        )
    }

    /// Simulated aggregate bandwidth (MiB/s) of `pattern`'s `phase` on this configuration
    /// with the given calibration applied: all bytes over the span from the first rank's
    /// start to the last rank's end, as the benchmark measures.
    pub fn simulate(&self, calibration: &Calibration, pattern: Pattern, phase: Phase) -> Result<f64> {
        let mut sys = SystemConfig::parse(&self.system_toml(None))?;
        sys.apply_calibration(calibration, None);
        let work = WorkloadConfig::parse(&self.workload_toml(pattern, phase))?;
        let outcome = crate::simulate(&sys, Placement::Global, &work)?;
        let phases = &outcome.result.phases;
        let start = phases.iter().map(|p| p.start).fold(f64::INFINITY, f64::min);
        let end = phases.iter().map(|p| p.end).fold(0.0, f64::max);
        let bytes: f64 = phases.iter().map(|p| p.bytes).sum();
        if phases.is_empty() || end <= start {
            bail!("the simulation of {} {} moved no data", pattern.name(), phase.name());
        }
        Ok(bytes / (end - start) / MIB)
    }
}

/// Surge's efficiency on this configuration's links, per direction, from its N-N runs: the
/// mean measured bandwidth over the simulated one at full link rate (no calibration).
pub fn calibrate(m: &Measurement) -> Result<Calibration> {
    let mut cal = Calibration {
        source: Some(format!(
            "surge sim calibrate: configuration {} ({} servers, {} Mbit/s links, {} processes){}",
            m.config,
            m.servers,
            m.link_mbit_s,
            m.procs,
            m.source.as_ref().map(|s| format!("; measured by {s}")).unwrap_or_default()
        )),
        ..Default::default()
    };
    for phase in [Phase::Write, Phase::Read] {
        let Some(measured) = m.spread(Pattern::Nn, phase) else { continue };
        let ideal = m.simulate(&Calibration::default(), Pattern::Nn, phase)?;
        let efficiency = measured.mean / ideal;
        if !(0.0..=1.5).contains(&efficiency) {
            bail!(
                "{} N-N measured {:.1} MiB/s, {:.0}% of the links' rate: the links were not the bottleneck",
                phase.name(),
                measured.mean,
                efficiency * 100.0
            );
        }
        match phase {
            Phase::Write => cal.write_efficiency = Some(efficiency),
            Phase::Read => cal.read_efficiency = Some(efficiency),
        }
    }
    if cal.write_efficiency.is_none() && cal.read_efficiency.is_none() {
        bail!("configuration {}: no N-N write or read result to calibrate from", m.config);
    }
    // With the links calibrated, what a shared file loses against a file per process.
    for phase in [Phase::Write, Phase::Read] {
        let Some(measured) = m.spread(Pattern::N1, phase) else { continue };
        let simulated = m.simulate(&cal, Pattern::N1, phase)?;
        let efficiency = measured.mean / simulated;
        if !(efficiency > 0.0 && efficiency <= 2.0) {
            bail!(
                "{} N-1 measured {:.1} MiB/s against {simulated:.1} simulated: no plausible shared-file share",
                phase.name(),
                measured.mean
            );
        }
        match phase {
            Phase::Write => cal.shared_write_efficiency = Some(efficiency),
            Phase::Read => cal.shared_read_efficiency = Some(efficiency),
        }
    }
    Ok(cal)
}

/// The calibration as JSON, in the form a system file's `[calibration] from` reads.
pub fn calibration_json(cal: &Calibration) -> String {
    let mut doc = serde_json::Map::new();
    if let Some(s) = &cal.source {
        doc.insert("source".into(), s.clone().into());
    }
    let rates = [("device_write_bw", cal.device_write_bw), ("device_read_bw", cal.device_read_bw), ("injection_bw", cal.injection_bw)];
    for (key, rate) in rates {
        if let Some(r) = rate {
            doc.insert(key.into(), r.0.into());
        }
    }
    for (key, time) in [("op_overhead", cal.op_overhead), ("link_latency", cal.link_latency)] {
        if let Some(t) = time {
            doc.insert(key.into(), t.0.into());
        }
    }
    let efficiencies = [
        ("write_efficiency", cal.write_efficiency),
        ("read_efficiency", cal.read_efficiency),
        ("shared_write_efficiency", cal.shared_write_efficiency),
        ("shared_read_efficiency", cal.shared_read_efficiency),
    ];
    for (key, eff) in efficiencies {
        if let Some(e) = eff {
            doc.insert(key.into(), ((e * 1e4).round() / 1e4).into());
        }
    }
    serde_json::to_string_pretty(&serde_json::Value::Object(doc)).expect("a JSON map serialises") + "\n"
}

/// `target` as a system file in `system`'s directory refers to it: relative when both are in
/// the same directory, absolute otherwise.
pub fn relative_to(target: &Path, system: &Path) -> String {
    let dir = |p: &Path| std::path::absolute(p.parent().unwrap_or(Path::new("."))).ok();
    match (dir(target), dir(system), target.file_name()) {
        (Some(a), Some(b), Some(name)) if a == b => name.to_string_lossy().into_owned(),
        _ => std::path::absolute(target).unwrap_or_else(|_| target.to_path_buf()).display().to_string(),
    }
}

/// One row of the comparison table.
#[derive(Debug, Clone)]
pub struct Row {
    pub config: String,
    pub pattern: Pattern,
    pub phase: Phase,
    pub measured: Spread,
    pub predicted: f64,
    /// True for the configuration the calibration came from (it matches by construction).
    pub calibrated_on: bool,
}

impl Row {
    pub fn error(&self) -> f64 {
        (self.predicted - self.measured.mean) / self.measured.mean
    }
    pub fn passes(&self) -> bool {
        self.error().abs() <= TOLERANCE
    }
}

/// Predicts every pattern and phase measured in `m` with `cal`.
pub fn compare(m: &Measurement, cal: &Calibration, calibrated_on: bool) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (pattern, phase) in m.cases() {
        let measured = m.spread(pattern, phase).expect("a measured case");
        let predicted = m.simulate(cal, pattern, phase)?;
        rows.push(Row { config: m.config.clone(), pattern, phase, measured, predicted, calibrated_on });
    }
    Ok(rows)
}

pub fn render(rows: &[Row], described: &[&Measurement]) -> String {
    let mut out = String::new();
    for m in described {
        let _ = writeln!(
            out,
            "{}: {} servers, {} Mbit/s links, {} processes x {} MiB, {} KiB requests, {} KiB chunks",
            m.config,
            m.servers,
            m.link_mbit_s,
            m.procs,
            m.bytes_per_proc as f64 / MIB,
            m.block / 1024,
            m.chunk_size / 1024
        );
    }
    let _ = writeln!(out, "\n| config | pattern | phase | measured MiB/s (min-max, rounds) | predicted MiB/s | error | within 15% |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for r in rows {
        let verdict = match (r.calibrated_on, r.passes()) {
            (true, _) => "(calibrated on)",
            (false, true) => "yes",
            (false, false) => "NO",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} ({:.1}-{:.1}, {}) | {:.1} | {:+.1}% | {} |",
            r.config,
            r.pattern.name(),
            r.phase.name(),
            r.measured.mean,
            r.measured.min,
            r.measured.max,
            r.measured.rounds,
            r.predicted,
            r.error() * 100.0,
            verdict
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two servers at 200 Mbit/s (25 MB/s each, 50 MB/s together), four processes of 32 MiB.
    const HAND_MADE: &str = r#"{
        "source": "hand-made",
        "config": "A", "servers": 2, "link_mbit_s": 200, "chunk_size": 1048576,
        "procs": 4, "bytes_per_proc": 33554432, "block": 1048576,
        "results": [
            {"round": 1, "pattern": "nn", "phase": "write", "mib_s": 42.0},
            {"round": 2, "pattern": "nn", "phase": "write", "mib_s": 44.0},
            {"round": 1, "pattern": "nn", "phase": "read", "mib_s": 45.0},
            {"round": 2, "pattern": "nn", "phase": "read", "mib_s": 45.0},
            {"round": 1, "pattern": "n1", "phase": "write", "mib_s": 40.0}
        ]}"#;

    fn link_mib_s(m: &Measurement) -> f64 {
        m.servers as f64 * m.link_bytes_s() / MIB
    }

    #[test]
    fn efficiency_is_measured_over_link_rate() {
        let m = Measurement::parse(HAND_MADE).unwrap();
        let full = link_mib_s(&m);
        assert!((full - 47.6837).abs() < 1e-3, "{full}");
        // Uncalibrated, the simulator moves data at the links' full rate.
        let ideal = m.simulate(&Calibration::default(), Pattern::Nn, Phase::Write).unwrap();
        assert!((ideal - full).abs() / full < 1e-3, "ideal {ideal} vs links {full}");
        let cal = calibrate(&m).unwrap();
        // Mean of 42 and 44 MiB/s over 47.68 MiB/s; 45 over 47.68.
        assert!((cal.write_efficiency.unwrap() - 43.0 / full).abs() < 1e-3, "{cal:?}");
        assert!((cal.read_efficiency.unwrap() - 45.0 / full).abs() < 1e-3, "{cal:?}");
        // Calibrated, the configuration it came from is predicted as measured.
        let w = m.simulate(&cal, Pattern::Nn, Phase::Write).unwrap();
        assert!((w - 43.0).abs() < 0.05, "{w}");
        // N-1 write: 40 MiB/s where a file per process gets 43; no N-1 read measured.
        assert!((cal.shared_write_efficiency.unwrap() - 40.0 / 43.0).abs() < 1e-3, "{cal:?}");
        assert!(cal.shared_read_efficiency.is_none());
        let n1 = m.simulate(&cal, Pattern::N1, Phase::Write).unwrap();
        assert!((n1 - 40.0).abs() < 0.05, "{n1}");
        // The shared-file share applies to shared files only.
        let nn = m.simulate(&cal, Pattern::Nn, Phase::Write).unwrap();
        assert!((nn - 43.0).abs() < 0.05, "{nn}");
    }

    #[test]
    fn calibration_carries_over_to_more_servers_and_faster_links() {
        let a = Measurement::parse(HAND_MADE).unwrap();
        let cal = calibrate(&a).unwrap();
        let b = Measurement { servers: 4, link_mbit_s: 400.0, config: "B".into(), ..a.clone() };
        let predicted = b.simulate(&cal, Pattern::Nn, Phase::Read).unwrap();
        // Four times the link capacity at the efficiency measured on A.
        assert!((predicted - 4.0 * 45.0).abs() < 0.2, "{predicted}");
    }

    #[test]
    fn spread_and_errors() {
        let m = Measurement::parse(HAND_MADE).unwrap();
        let s = m.spread(Pattern::Nn, Phase::Write).unwrap();
        assert_eq!((s.mean, s.min, s.max, s.rounds), (43.0, 42.0, 44.0, 2));
        assert!(m.spread(Pattern::N1, Phase::Read).is_none());
        assert_eq!(m.cases().len(), 3);
        let row = Row { config: "B".into(), pattern: Pattern::N1, phase: Phase::Write, measured: s, predicted: 49.0, calibrated_on: false };
        assert!((row.error() - 6.0 / 43.0).abs() < 1e-12);
        assert!(row.passes());
        let off = Row { predicted: 50.0, ..row };
        assert!(!off.passes(), "{}", off.error());
    }

    #[test]
    fn calibration_file_round_trips() {
        let cal = calibrate(&Measurement::parse(HAND_MADE).unwrap()).unwrap();
        let back: Calibration = serde_json::from_str(&calibration_json(&cal)).unwrap();
        assert!((back.write_efficiency.unwrap() - cal.write_efficiency.unwrap()).abs() < 1e-4);
        assert!((back.shared_write_efficiency.unwrap() - cal.shared_write_efficiency.unwrap()).abs() < 1e-4);
        assert!(back.device_write_bw.is_none());
    }

    #[test]
    fn system_file_points_at_the_calibration() {
        let m = Measurement::parse(HAND_MADE).unwrap();
        let cal = calibrate(&m).unwrap();
        let dir = std::env::temp_dir().join(format!("surge-sim-calibrate-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cal_path, sys_path) = (dir.join("calibration.json"), dir.join("system.toml"));
        std::fs::write(&cal_path, calibration_json(&cal)).unwrap();
        let from = relative_to(&cal_path, &sys_path);
        assert_eq!(from, "calibration.json");
        std::fs::write(&sys_path, m.system_toml(Some(&from))).unwrap();
        let sys = SystemConfig::load(&sys_path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        // 43 of 47.68 MiB/s of a 25 MB/s link, per server (one device each); the file keeps
        // four decimals.
        let dev = sys.device(Placement::Global).unwrap();
        assert!((dev.write_bw.0 / 25e6 - cal.write_efficiency.unwrap()).abs() < 1e-4, "{dev:?}");
        assert!((sys.burst_buffer.shared_write_efficiency - cal.shared_write_efficiency.unwrap()).abs() < 1e-4);
        assert_eq!(sys.burst_buffer.shared_read_efficiency, 1.0);
    }

    #[test]
    fn refuses_bad_measurements() {
        assert!(Measurement::parse(&HAND_MADE.replace("\"servers\": 2", "\"servers\": 0")).is_err());
        assert!(Measurement::parse(&HAND_MADE.replace("42.0", "-1")).is_err());
        // Faster than the links allow: the links were not what the run measured.
        let too_fast = Measurement::parse(&HAND_MADE.replace("\"link_mbit_s\": 200", "\"link_mbit_s\": 20")).unwrap();
        assert!(calibrate(&too_fast).is_err());
    }
}
