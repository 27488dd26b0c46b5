//! Validation (`surge sim validate`): every case is a simulation of the shipped example files
//! (`examples/sim`, or the directory given) compared with a figure or a statement of the seed
//! study, Khetawat et al., *Evaluating Burst Buffer Placement in HPC Systems*, at the seed's own
//! tolerance where it gives one. All seven of its observations on placement and co-scheduling
//! are here; where the model disagrees the case is reported as failing, with the reason.
//! Table V's cost figures are arithmetic on the seed's equipment counts and prices, not a
//! property of the model: they are printed by [`cost_arithmetic`], apart from the cases.

use crate::cost::{Inventory, PriceList};
use crate::report::{summarize, table, JobSummary, Summary};
use crate::system::{Placement, SystemConfig};
use crate::workload::{PlacementSpec, WorkloadConfig};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Example files the cases read; all must be present in the examples directory.
pub const EXAMPLE_FILES: [&str; 13] = [
    "summit-fat-tree.toml",
    "summit-fat-tree-tapered.toml",
    "edison-dragonfly.toml",
    "table4-summit-16nodes.toml",
    "ior-96ranks.toml",
    "prices-seed004.toml",
    "gtc-like.toml",
    "lammps-like.toml",
    "s3d-like.toml",
    "hacc-like.toml",
    "lammps-ior.toml",
    "gtc-s3d-hacc.toml",
    "torus-small.toml",
];

/// Finds the shipped examples: `explicit` if given, else `examples/sim` in an ancestor of the
/// running binary (a build under `target/`) or of the current directory.
pub fn find_examples(explicit: Option<&Path>) -> Result<PathBuf> {
    let complete = |dir: &Path| EXAMPLE_FILES.iter().all(|f| dir.join(f).is_file());
    if let Some(dir) = explicit {
        if let Some(missing) = EXAMPLE_FILES.iter().find(|f| !dir.join(f).is_file()) {
            bail!("{} does not hold the example files validation reads ({missing} is missing)", dir.display());
        }
        return Ok(dir.to_path_buf());
    }
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    for start in &starts {
        for dir in start.ancestors() {
            let candidate = dir.join("examples").join("sim");
            if complete(&candidate) {
                return Ok(candidate);
            }
        }
    }
    bail!(
        "cannot find the example files validation reads (examples/sim/{} ...) above the binary or the current directory; \
         pass --examples DIR",
        EXAMPLE_FILES[0]
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    /// The seed gives no figure to compare with: nothing is claimed.
    NoReference,
}

#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: &'static str,
    /// What the seed reports.
    pub seed: &'static str,
    /// The test applied to the simulation.
    pub criterion: String,
    /// What the simulation gave.
    pub simulated: String,
    pub status: Status,
    /// Why the model disagrees (shown for failing cases) or why there is nothing to compare.
    pub note: &'static str,
}

impl CaseResult {
    pub fn failed(&self) -> bool {
        self.status == Status::Fail
    }
}

pub const CASE_NAMES: [&str; 13] = [
    "table4-node-local-ior",
    "fig5-distributed-ior",
    "taper-halves-uplink",
    "obs1-dragonfly-global-nonminimal",
    "obs2-dragonfly-grouped-faster",
    "obs3-fat-tree-comparable",
    "obs3-s3d-remote-faster",
    "obs3-taper-hurts-global-more",
    "obs4-gtc-node-local-fastest",
    "obs4-hacc-scattered",
    "obs5-gtc-co-scheduled",
    "obs6-hacc-co-scheduled",
    "obs7-lammps-adversarial",
];

pub fn render(results: &[CaseResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let status = match r.status {
                Status::Pass => "ok",
                Status::Fail => "FAILING",
                Status::NoReference => "no reference",
            };
            vec![r.name.to_string(), r.criterion.clone(), r.simulated.clone(), status.to_string()]
        })
        .collect();
    let mut out = table(&["case", "criterion (seed's tolerance)", "simulated", "status"], &rows);
    out += "\n";
    for r in results {
        out += &format!("  {}: seed: {}\n", r.name, r.seed);
        if r.status != Status::Pass && !r.note.is_empty() {
            out += &format!("  {:width$}  {}: {}\n", "", if r.failed() { "why" } else { "note" }, r.note, width = r.name.len());
        }
    }
    out
}

/// Simulations of example files, each run once however many cases use it.
struct Runs {
    dir: PathBuf,
    cache: HashMap<(String, Placement, String), Summary>,
}

impl Runs {
    fn system(&self, file: &str) -> Result<SystemConfig> {
        let mut sys = SystemConfig::load(&self.dir.join(file))?;
        sys.prices = None; // validation reports phases, not costs
        Ok(sys)
    }

    fn workload(&self, file: &str) -> Result<WorkloadConfig> {
        WorkloadConfig::load(&self.dir.join(file))
    }

    /// Summary of `workload` on `system` with `placement`; `only` keeps one job of the workload,
    /// on the nodes it has in the full workload, so that it runs alone on the same nodes.
    fn run(&mut self, system: &str, placement: Placement, workload: &str, only: Option<&str>) -> Result<&Summary> {
        let key = (system.to_string(), placement, format!("{workload}#{}", only.unwrap_or("")));
        if !self.cache.contains_key(&key) {
            let sys = self.system(system)?;
            let mut w = self.workload(workload)?;
            if let Some(job) = only {
                let full = crate::simulate(&sys, placement, &w)?;
                let placed = full.jobs.iter().find(|j| j.name == job).with_context(|| format!("{workload} has no job '{job}'"))?;
                let mut nodes: Vec<usize> = placed.rank_nodes.iter().map(|&n| n as usize).collect();
                nodes.dedup();
                w.jobs.retain(|j| j.name == job);
                w.jobs[0].placement = PlacementSpec::Nodes { nodes };
            }
            let out = crate::simulate(&sys, placement, &w)
                .with_context(|| format!("simulating {workload} on {system} ({})", placement.name()))?;
            self.cache.insert(key.clone(), summarize(&out)?);
        }
        Ok(&self.cache[&key])
    }

    fn job(&mut self, system: &str, placement: Placement, workload: &str, job: &str) -> Result<JobSummary> {
        let s = self.run(system, placement, workload, None)?;
        s.jobs.iter().find(|j| j.job == job).cloned().with_context(|| format!("{workload} has no job '{job}'"))
    }

    fn alone(&mut self, system: &str, placement: Placement, workload: &str, job: &str) -> Result<JobSummary> {
        Ok(self.run(system, placement, workload, Some(job))?.jobs[0].clone())
    }

    fn phase(&mut self, system: &str, placement: Placement, workload: &str) -> Result<f64> {
        Ok(self.run(system, placement, workload, None)?.jobs[0].io_time)
    }
}

const SUMMIT: &str = "summit-fat-tree.toml";
const SUMMIT_TAPERED: &str = "summit-fat-tree-tapered.toml";
const EDISON: &str = "edison-dragonfly.toml";
const REMOTE: [Placement; 2] = [Placement::Grouped, Placement::Global];

fn status(pass: bool) -> Status {
    if pass {
        Status::Pass
    } else {
        Status::Fail
    }
}

/// Relative difference of `a` from `b`.
fn rel(a: f64, b: f64) -> f64 {
    a / b - 1.0
}

/// Runs the named cases (all when `only` is empty) on the example files in `dir`.
pub fn run(dir: &Path, only: &[String]) -> Result<Vec<CaseResult>> {
    for name in only {
        if !CASE_NAMES.contains(&name.as_str()) {
            bail!("unknown case '{name}'; cases: {}", CASE_NAMES.join(", "));
        }
    }
    let want = |n: &str| only.is_empty() || only.iter().any(|o| o == n);
    let mut runs = Runs { dir: dir.to_path_buf(), cache: HashMap::new() };
    let mut out = Vec::new();

    if want("table4-node-local-ior") {
        let t = runs.phase("table4-summit-16nodes.toml", Placement::NodeLocal, "ior-96ranks.toml")?;
        let bw = 96.0 * 1024.0 / t;
        let (et, eb) = (rel(t, 3.01), rel(bw, 32600.56));
        out.push(CaseResult {
            name: "table4-node-local-ior",
            seed: "Table IV: IOR, 96 ranks x 1 GB on 16 nodes, node-local SSD 2,100 MB/s: 3.01 s, 32,600.56 MB/s measured; simulation 'less than 3%' off",
            criterion: "write time and bandwidth each within 3% of 3.01 s / 32,600.56 MiB/s".into(),
            simulated: format!("{t:.3} s ({:+.2}%), {bw:.0} MiB/s ({:+.2}%)", 100.0 * et, 100.0 * eb),
            status: status(et.abs() <= 0.03 && eb.abs() <= 0.03),
            note: "the model writes 6 GiB per node at the device's 2,100 MiB/s, 2.926 s; the seed's two figures are not one \
                   measurement at 3.01 s (96 GiB / 3.01 s = 32,659 MiB/s), so a time 2.8% short is 3.07% over the bandwidth. \
                   The seed's own simulation (2.92 s, 33,616.48) is 3.1% off the bandwidth too.",
        });
    }
    if want("fig5-distributed-ior") {
        out.push(CaseResult {
            name: "fig5-distributed-ior",
            seed: "Fig. 5: IOR 6-192 ranks on Konrad's distributed BBs (1,900 MB/s, 15 us per write), simulation within 11%",
            criterion: "within 11% of each Fig. 5 point".into(),
            simulated: "not run".into(),
            status: Status::NoReference,
            note: "the measured points exist only as bars in the figure; the text gives no number to compare with, so no \
                   distributed-BB figure is validated (a case against read-off values would be a guess)",
        });
    }
    if want("taper-halves-uplink") {
        out.push(taper_case()?);
    }

    if want("obs1-dragonfly-global-nonminimal") {
        let grouped = runs.job(EDISON, Placement::Grouped, "gtc-like.toml", "gtc")?;
        let global = runs.job(EDISON, Placement::Global, "gtc-like.toml", "gtc")?;
        out.push(CaseResult {
            name: "obs1-dragonfly-global-nonminimal",
            seed: "Obs. 1: bursty traffic to global BBs on a dragonfly is routed non-minimally to a high degree, with significantly more hops",
            criterion: "GTC-like, global: >= 50% of bytes non-minimal, hops >= 1.5 x grouped's; grouped <= 10% non-minimal".into(),
            simulated: format!(
                "global {:.0}% non-minimal, {:.2} hops; grouped {:.0}%, {:.2} hops",
                100.0 * global.nonminimal_fraction,
                global.avg_hops,
                100.0 * grouped.nonminimal_fraction,
                grouped.avg_hops
            ),
            status: status(global.nonminimal_fraction >= 0.5 && global.avg_hops >= 1.5 * grouped.avg_hops && grouped.nonminimal_fraction <= 0.1),
            note: "",
        });
    }
    if want("obs2-dragonfly-grouped-faster") {
        let grouped = runs.phase(EDISON, Placement::Grouped, "gtc-like.toml")?;
        let global = runs.phase(EDISON, Placement::Global, "gtc-like.toml")?;
        out.push(CaseResult {
            name: "obs2-dragonfly-grouped-faster",
            seed: "Obs. 2: grouped BBs on a dragonfly finish bursty I/O phases significantly faster than global ones",
            criterion: "GTC-like: grouped / global phase length < 0.8".into(),
            simulated: format!("{grouped:.2} s / {global:.2} s = {:.3}", grouped / global),
            status: status(grouped / global < 0.8),
            note: "",
        });
    }
    if want("obs3-fat-tree-comparable") {
        let mut spreads = Vec::new();
        for (label, file) in [("GTC", "gtc-like.toml"), ("LAMMPS", "lammps-like.toml"), ("HACC", "hacc-like.toml")] {
            let t: Vec<f64> = Placement::ALL.iter().map(|&p| runs.phase(SUMMIT, p, file)).collect::<Result<_>>()?;
            let spread = t.iter().copied().fold(0.0, f64::max) / t.iter().copied().fold(f64::INFINITY, f64::min) - 1.0;
            spreads.push((label, spread));
        }
        out.push(CaseResult {
            name: "obs3-fat-tree-comparable",
            seed: "Obs. 3: on a fat-tree, node-local, grouped and global perform comparably, except for staggered I/O (S3D)",
            criterion: "GTC, LAMMPS, HACC-like: longest / shortest phase over the placements - 1 <= 10%".into(),
            simulated: spreads.iter().map(|(l, s)| format!("{l} {:.1}%", 100.0 * s)).collect::<Vec<_>>().join(", "),
            status: status(spreads.iter().all(|(_, s)| *s <= 0.10)),
            note: "GTC runs with the seed's 45 us per-operation device overhead, with which the seed itself finds node-local \
                   'significantly' faster for bursty jobs (its Obs. 4 and VII-C): 128 KiB stripes cost remote servers a third of \
                   their bandwidth. Obs. 3 and Obs. 4 ask opposite things of GTC; the model sides with Obs. 4.",
        });
    }
    if want("obs3-s3d-remote-faster") {
        let local = runs.phase(SUMMIT, Placement::NodeLocal, "s3d-like.toml")?;
        let remote: Vec<f64> = REMOTE.iter().map(|&p| runs.phase(SUMMIT, p, "s3d-like.toml")).collect::<Result<_>>()?;
        let best = remote.iter().copied().fold(f64::INFINITY, f64::min);
        let worst = remote.iter().copied().fold(0.0, f64::max);
        out.push(CaseResult {
            name: "obs3-s3d-remote-faster",
            seed: "Obs. 3: for S3D (400 ranks writing at a time), grouped and global outperform node-local on the fat-tree",
            criterion: "S3D-like: node-local phase >= 1.1 x the slower of grouped and global".into(),
            simulated: format!("node-local {local:.2} s, grouped/global {best:.2}-{worst:.2} s"),
            status: status(local >= 1.1 * worst),
            note: "with 6 ranks per node and waves of 400 consecutive ranks, about one rank per node writes at a time, so each \
                   node's SSD is not shared and node-local is as fast as remote servers; the seed notes that with a 45 us \
                   per-operation overhead (used here) node-local 'significantly outperforms' for S3D as well.",
        });
    }
    if want("obs3-taper-hurts-global-more") {
        let mut slowdown = HashMap::new();
        for p in REMOTE {
            slowdown.insert(p, runs.phase(SUMMIT_TAPERED, p, "gtc-like.toml")? / runs.phase(SUMMIT, p, "gtc-like.toml")?);
        }
        let (g, gl) = (slowdown[&Placement::Grouped], slowdown[&Placement::Global]);
        out.push(CaseResult {
            name: "obs3-taper-hurts-global-more",
            seed: "Obs. 3: a 2:1 taper slows grouped and global, global 'significantly' more (edge-aggregation contention)",
            criterion: "GTC-like: global's tapered / full phase length exceeds grouped's by >= 0.10".into(),
            simulated: format!("global x{gl:.3}, grouped x{g:.3}"),
            status: status(gl - g >= 0.10),
            note: "a job's share of the global servers is spread over all 15 dedicated BB switches, so each switch's tapered \
                   edge links (18 x 25 GB/s / 2) carry less than its servers' devices can absorb: the taper is not the \
                   bottleneck at GTC's size. A flow model has no packet-level contention at the edge-aggregation links.",
        });
    }
    if want("obs4-gtc-node-local-fastest") {
        let local = runs.phase(SUMMIT, Placement::NodeLocal, "gtc-like.toml")?;
        let remote: Vec<f64> = REMOTE.iter().map(|&p| runs.phase(SUMMIT, p, "gtc-like.toml")).collect::<Result<_>>()?;
        let best = remote.iter().copied().fold(f64::INFINITY, f64::min);
        out.push(CaseResult {
            name: "obs4-gtc-node-local-fastest",
            seed: "Obs. 4: node-local BBs outperform the other placements for bursty applications (GTC)",
            criterion: "GTC-like on the fat-tree: node-local phase <= 0.9 x the best remote one".into(),
            simulated: format!("{local:.2} s vs {best:.2} s = {:.3}", local / best),
            status: status(local <= 0.9 * best),
            note: "",
        });
    }
    if want("obs4-hacc-scattered") {
        let phases: Vec<f64> = Placement::ALL.iter().map(|&p| runs.phase(SUMMIT, p, "hacc-like.toml")).collect::<Result<_>>()?;
        let spread = phases.iter().copied().fold(0.0, f64::max) / phases.iter().copied().fold(f64::INFINITY, f64::min) - 1.0;
        let local = runs.job(SUMMIT, Placement::NodeLocal, "hacc-like.toml", "hacc")?.mean_rank_busy;
        let remote =
            REMOTE.iter().map(|&p| Ok(runs.job(SUMMIT, p, "hacc-like.toml", "hacc")?.mean_rank_busy)).collect::<Result<Vec<f64>>>()?;
        let remote_max = remote.iter().copied().fold(0.0, f64::max);
        out.push(CaseResult {
            name: "obs4-hacc-scattered",
            seed: "Obs. 4: for scattered I/O (HACC) phase lengths are almost identical, but node-local ranks spend more time in I/O",
            criterion: "HACC-like: phases within 10% over placements; node-local mean rank I/O time > every remote one".into(),
            simulated: format!("spread {:.1}%; rank I/O node-local {local:.2} s, remote <= {remote_max:.2} s", 100.0 * spread),
            status: status(spread <= 0.10 && local > remote_max),
            note: "",
        });
    }
    if want("obs5-gtc-co-scheduled") {
        let co = runs.job(SUMMIT, Placement::Global, "gtc-s3d-hacc.toml", "gtc")?.io_time;
        let alone = runs.alone(SUMMIT, Placement::Global, "gtc-s3d-hacc.toml", "gtc")?.io_time;
        out.push(CaseResult {
            name: "obs5-gtc-co-scheduled",
            seed: "Obs. 5: when I/O phases do not overlap much, co-scheduled jobs have little to no effect, even on bursty jobs",
            criterion: "GTC in GTC+S3D+HACC (global, fat-tree) vs alone on the same nodes: phase length within 10%".into(),
            simulated: format!("{co:.2} s vs {alone:.2} s ({:+.1}%)", 100.0 * rel(co, alone)),
            status: status(rel(co, alone).abs() <= 0.10),
            note: "",
        });
    }
    if want("obs6-hacc-co-scheduled") {
        let co = runs.job(SUMMIT, Placement::Global, "gtc-s3d-hacc.toml", "hacc")?;
        let alone = runs.alone(SUMMIT, Placement::Global, "gtc-s3d-hacc.toml", "hacc")?;
        out.push(CaseResult {
            name: "obs6-hacc-co-scheduled",
            seed: "Obs. 6: scattered jobs' phase lengths are not significantly affected by co-scheduled jobs, though ranks spend longer in I/O",
            criterion: "HACC in GTC+S3D+HACC vs alone: phase within 10%, mean rank I/O time not lower".into(),
            simulated: format!(
                "phase {:.2} s vs {:.2} s ({:+.1}%); rank I/O {:.3} s vs {:.3} s",
                co.io_time,
                alone.io_time,
                100.0 * rel(co.io_time, alone.io_time),
                co.mean_rank_busy,
                alone.mean_rank_busy
            ),
            status: status(rel(co.io_time, alone.io_time).abs() <= 0.10 && co.mean_rank_busy >= alone.mean_rank_busy * (1.0 - 1e-9)),
            note: "",
        });
    }
    if want("obs7-lammps-adversarial") {
        let co = runs.job(SUMMIT, Placement::Global, "lammps-ior.toml", "lammps")?.io_time;
        let alone = runs.alone(SUMMIT, Placement::Global, "lammps-ior.toml", "lammps")?.io_time;
        out.push(CaseResult {
            name: "obs7-lammps-adversarial",
            seed: "Obs. 7: bursty jobs on (tapered) fat-trees are significantly slowed by a co-scheduled adversarial IOR job",
            criterion: "LAMMPS next to IOR (global, fat-tree) vs alone on the same nodes: >= 1.2 x slower".into(),
            simulated: format!("{co:.3} s vs {alone:.3} s = x{:.3}", co / alone),
            status: status(co >= 1.2 * alone),
            note: "LAMMPS's and IOR's nodes map to different BB servers (each job gets its share of the pool) and the full \
                   fat-tree has no shared bottleneck between them; the seed attributes the slowdown to packet-level network \
                   contention (queues, head-of-line blocking), which a flow model does not have.",
        });
    }
    Ok(out)
}

/// Table V's cost lines: the seed's equipment counts times the shipped price list. Arithmetic,
/// printed for reference; the seed's OPEX rows imply an energy price that the price list takes
/// from the node-local row, so they are not an independent check either.
pub fn cost_arithmetic(dir: &Path) -> Result<String> {
    let prices = PriceList::load(&dir.join("prices-seed004.toml"))?;
    let rows = [
        ("node-local: 4,608 x8 NVMe", Inventory { node_local_devices: 4608, ..Default::default() }, 4_608_000.0, 1_000_000.0),
        (
            "distributed: 302 servers, 4,832 x4 NVMe",
            Inventory { bb_servers: 302, server_devices: 4832, ..Default::default() },
            11_415_600.0,
            2_600_000.0,
        ),
    ];
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(what, inv, capex, opex)| {
            let c = prices.cost(inv);
            vec![what.into(), format!("${:.0}", c.capex), format!("${capex:.0}"), format!("${:.0}", c.opex), format!("${opex:.0}")]
        })
        .collect();
    Ok(format!(
        "Table V arithmetic (the seed's counts x {}; not a validation of the model)\n{}",
        "prices-seed004.toml",
        table(&["design", "CAPEX", "seed", "OPEX 5 yr", "seed"], &rows)
    ))
}

/// Analytic check of the flow model: 8 nodes on two edge switches write to BB servers on a
/// third switch; the servers' edge downlink (4 links, divided by the taper) is the bottleneck,
/// so the write time is bytes / (4 x link / taper) exactly.
fn taper_case() -> Result<CaseResult> {
    let system = r#"name = "taper check"
[network]
injection_bw = "10 GB/s"
[network.fat_tree]
compute_switches = 2
nodes_per_switch = 4
switches_per_pod = 1
link_bw = "10 GB/s"
taper = "2:1"
[burst_buffer]
placement = "global"
stripe_count = 1
[burst_buffer.global]
servers = 4
servers_per_switch = 4
devices_per_server = 1
device = { write_bw = "1 TB/s", read_bw = "1 TB/s" }
"#;
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
    let simulated = io_time(system, Placement::Global, workload, 0)?;
    let expected = 8e9 / 20e9;
    Ok(CaseResult {
        name: "taper-halves-uplink",
        seed: "(model check, not a seed figure) a 2:1 taper halves an edge switch's uplinks",
        criterion: "8 x 1 GB through a 2:1 tapered edge downlink of 4 x 10 GB/s: 0.4 s within 0.5%".into(),
        simulated: format!("{simulated:.4} s"),
        status: status((simulated / expected - 1.0).abs() <= 0.005),
        note: "",
    })
}

/// I/O time (sum of phase lengths) of job `job` for one system text, placement and workload
/// text (inline descriptions, for tests and analytic checks).
pub fn io_time(system: &str, placement: Placement, workload: &str, job: usize) -> Result<f64> {
    let mut sys = SystemConfig::parse(system)?;
    sys.prices = None; // inline text: no directory to resolve a price list against
    let w = WorkloadConfig::parse(workload)?;
    let out = crate::simulate(&sys, placement, &w)?;
    let s = summarize(&out)?;
    Ok(s.jobs.get(job).context("no such job")?.io_time)
}
