//! Built-in validation cases (`surge sim validate`): the seed study's measurements (Table IV,
//! Table V), analytic checks of the flow model, and the seed's qualitative findings as
//! assertions on ratios of simulated I/O phase lengths.
//!
//! The systems and workloads are the shipped example files, so what is validated is exactly
//! what users start from.

use crate::cost::{Inventory, PriceList};
use crate::report::{summarize, table};
use crate::system::{Placement, SystemConfig};
use crate::workload::WorkloadConfig;
use anyhow::{Context, Result};

macro_rules! example {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/sim/", $file))
    };
}

const SUMMIT: &str = example!("summit-fat-tree.toml");
const SUMMIT_TAPERED: &str = example!("summit-fat-tree-tapered.toml");
const EDISON: &str = example!("edison-dragonfly.toml");
const TABLE4_SYSTEM: &str = example!("table4-summit-16nodes.toml");
const TABLE4_IOR: &str = example!("ior-96ranks.toml");
const PRICES: &str = example!("prices-seed004.toml");
const GTC: &str = example!("gtc-like.toml");
const HACC: &str = example!("hacc-like.toml");

/// How a case compares: relative error against a reference value, or a bound on a ratio.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// |simulated - reference| / reference <= tolerance.
    Relative { reference: f64, tolerance: f64 },
    /// simulated < bound.
    Below(f64),
    /// simulated > bound.
    Above(f64),
}

#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: &'static str,
    pub what: &'static str,
    pub check: Check,
    pub simulated: f64,
    pub unit: &'static str,
}

impl CaseResult {
    pub fn pass(&self) -> bool {
        match self.check {
            Check::Relative { reference, tolerance } => ((self.simulated - reference) / reference).abs() <= tolerance + 1e-12,
            Check::Below(b) => self.simulated < b,
            Check::Above(b) => self.simulated > b,
        }
    }
    fn row(&self) -> Vec<String> {
        let (reference, error, tolerance) = match self.check {
            Check::Relative { reference, tolerance } => (
                format!("{} {}", fmt_num(reference), self.unit),
                format!("{:+.2}%", 100.0 * (self.simulated - reference) / reference),
                format!("{:.1}%", 100.0 * tolerance),
            ),
            Check::Below(b) => (format!("< {}", fmt_num(b)), "-".into(), "bound".into()),
            Check::Above(b) => (format!("> {}", fmt_num(b)), "-".into(), "bound".into()),
        };
        vec![
            self.name.to_string(),
            reference,
            format!("{} {}", fmt_num(self.simulated), self.unit).trim().to_string(),
            error,
            tolerance,
            if self.pass() { "ok".into() } else { "FAIL".into() },
        ]
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 1e4 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

pub fn render(results: &[CaseResult]) -> String {
    let rows: Vec<Vec<String>> = results.iter().map(|r| r.row()).collect();
    let mut out = table(&["case", "reference", "simulated", "error", "tolerance", "status"], &rows);
    out += "\n";
    for r in results {
        out += &format!("  {:<34} {}\n", r.name, r.what);
    }
    out
}

/// I/O time (sum of phase lengths) of job `job` for one system text, placement and workload text.
pub fn io_time(system: &str, placement: Placement, workload: &str, job: usize) -> Result<f64> {
    let mut sys = SystemConfig::parse(system)?;
    sys.prices = None; // embedded text: no directory to resolve the price list against
    let w = WorkloadConfig::parse(workload)?;
    let out = crate::simulate(&sys, placement, &w)?;
    let s = summarize(&out)?;
    Ok(s.jobs.get(job).context("no such job")?.io_time)
}

pub const CASE_NAMES: [&str; 11] = [
    "table4-write-time",
    "table4-bandwidth",
    "taper-halves-uplink",
    "table5-capex-node-local",
    "table5-capex-distributed",
    "table5-opex-node-local",
    "table5-opex-distributed",
    "obs4-gtc-node-local-fastest",
    "obs2-dragonfly-grouped-vs-global",
    "obs3-taper-hurts-global-more",
    "obs4-hacc-placement-insensitive",
];

/// Runs the named cases (all when `only` is empty).
pub fn run(only: &[String]) -> Result<Vec<CaseResult>> {
    for name in only {
        if !CASE_NAMES.contains(&name.as_str()) {
            anyhow::bail!("unknown case '{name}'; cases: {}", CASE_NAMES.join(", "));
        }
    }
    let want = |n: &str| only.is_empty() || only.iter().any(|o| o == n);
    let mut out = Vec::new();

    if want("table4-write-time") || want("table4-bandwidth") {
        let t = io_time(TABLE4_SYSTEM, Placement::NodeLocal, TABLE4_IOR, 0)?;
        if want("table4-write-time") {
            out.push(CaseResult {
                name: "table4-write-time",
                what: "seed Table IV: IOR 96 ranks x 1 GiB on 16 nodes, node-local NVMe 2,100 MiB/s; measured 3.01 s",
                check: Check::Relative { reference: 3.01, tolerance: 0.03 },
                simulated: t,
                unit: "s",
            });
        }
        if want("table4-bandwidth") {
            out.push(CaseResult {
                name: "table4-bandwidth",
                what: "seed Table IV aggregate bandwidth 32,600.56 MiB/s (the seed's own simulator was 3.1% off)",
                check: Check::Relative { reference: 32600.56, tolerance: 0.04 },
                simulated: 96.0 * 1024.0 / t,
                unit: "MiB/s",
            });
        }
    }

    if want("taper-halves-uplink") {
        out.push(taper_case()?);
    }

    let prices: PriceList = toml::from_str(PRICES)?;
    let node_local = prices.cost(Inventory { node_local_devices: 4608, ..Default::default() });
    let distributed = prices.cost(Inventory { bb_servers: 302, server_devices: 4832, ..Default::default() });
    let table5 = [
        ("table5-capex-node-local", "seed Table V: 4,608 node-local x8 NVMe at $1,000", node_local.capex, 4_608_000.0, 0.0),
        (
            "table5-capex-distributed",
            "seed Table V: 4,832 x4 NVMe at $800 + 302 EPYC servers at $25,000",
            distributed.capex,
            11_415_600.0,
            0.0,
        ),
        ("table5-opex-node-local", "seed Table V: 115 kW for 5 years (sets the energy price)", node_local.opex, 1_000_000.0, 0.01),
        ("table5-opex-distributed", "seed Table V: 302 kW for 5 years", distributed.opex, 2_600_000.0, 0.02),
    ];
    for (name, what, simulated, reference, tolerance) in table5 {
        if want(name) {
            out.push(CaseResult { name, what, check: Check::Relative { reference, tolerance }, simulated, unit: "$" });
        }
    }

    if want("obs4-gtc-node-local-fastest") {
        let local = io_time(SUMMIT, Placement::NodeLocal, GTC, 0)?;
        let grouped = io_time(SUMMIT, Placement::Grouped, GTC, 0)?;
        let global = io_time(SUMMIT, Placement::Global, GTC, 0)?;
        out.push(CaseResult {
            name: "obs4-gtc-node-local-fastest",
            what: "seed Obs. 4: GTC-like bursty file-per-process on the fat-tree; node-local / best remote phase length",
            check: Check::Below(1.0),
            simulated: local / grouped.min(global),
            unit: "",
        });
    }
    if want("obs2-dragonfly-grouped-vs-global") {
        let grouped = io_time(EDISON, Placement::Grouped, GTC, 0)?;
        let global = io_time(EDISON, Placement::Global, GTC, 0)?;
        out.push(CaseResult {
            name: "obs2-dragonfly-grouped-vs-global",
            what: "seed Obs. 2: GTC-like on the dragonfly; grouped / global phase length (significantly faster: < 0.8)",
            check: Check::Below(0.8),
            simulated: grouped / global,
            unit: "",
        });
    }
    if want("obs3-taper-hurts-global-more") {
        let slowdown = |p| -> Result<f64> { Ok(io_time(SUMMIT_TAPERED, p, GTC, 0)? / io_time(SUMMIT, p, GTC, 0)?) };
        let global = slowdown(Placement::Global)?;
        let grouped = slowdown(Placement::Grouped)?;
        out.push(CaseResult {
            name: "obs3-taper-hurts-global-more",
            what: "seed Obs. 3: 2:1 taper slowdown of global minus that of grouped (GTC-like)",
            check: Check::Above(0.0),
            simulated: global - grouped,
            unit: "",
        });
    }
    if want("obs4-hacc-placement-insensitive") {
        let times: Vec<f64> = Placement::ALL.iter().map(|&p| io_time(SUMMIT, p, HACC, 0)).collect::<Result<_>>()?;
        let max = times.iter().copied().fold(0.0, f64::max);
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        out.push(CaseResult {
            name: "obs4-hacc-placement-insensitive",
            what: "seed Obs. 4: HACC-like scattered I/O; (longest / shortest phase length over placements) - 1",
            check: Check::Below(0.10),
            simulated: max / min - 1.0,
            unit: "",
        });
    }
    Ok(out)
}

/// Analytic check: 8 nodes on two edge switches write to BB servers on a third switch; the
/// servers' edge downlink (4 links, divided by the taper) is the bottleneck, so the write time
/// is bytes / (4 x link / taper) exactly.
fn taper_case() -> Result<CaseResult> {
    let system = |taper: &str| {
        format!(
            r#"name = "taper check"
[network]
injection_bw = "10 GB/s"
[network.fat_tree]
compute_switches = 2
nodes_per_switch = 4
switches_per_pod = 1
link_bw = "10 GB/s"
taper = "{taper}"
[burst_buffer]
placement = "global"
stripe_count = 1
[burst_buffer.global]
servers = 4
servers_per_switch = 4
devices_per_server = 1
device = {{ write_bw = "1 TB/s", read_bw = "1 TB/s" }}
"#
        )
    };
    let workload = r#"ranks_per_node = 1
[[job]]
name = "writers"
ranks = 8
[job.synthetic]
pattern = "ior_nn"
bytes_per_rank = "1 GB"
transfer_size = "1 GB"
"#;
    // 8 GB leave through the servers' edge downlink: 4 x 10 GB/s halved by the taper = 20 GB/s.
    let simulated = io_time(&system("2:1"), Placement::Global, workload, 0)?;
    let expected = 8e9 / 20e9;
    Ok(CaseResult {
        name: "taper-halves-uplink",
        what: "flow model vs analytic: 8 x 1 GB through a 2:1 tapered edge downlink of 4 x 10 GB/s",
        check: Check::Relative { reference: expected, tolerance: 0.005 },
        simulated,
        unit: "s",
    })
}
