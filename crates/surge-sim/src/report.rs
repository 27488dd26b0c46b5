//! Turning a simulation into what people read: per-job tables, CSV/JSON files for plots
//! (`python -m surge.sim_plots`) and a summary.

use crate::cost::{CostTable, Inventory, PriceList};
use crate::topology::ResKind;
use crate::units::fmt_bytes;
use crate::Outcome;
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One I/O phase of one job (all its ranks).
#[derive(Debug, Clone, Serialize)]
pub struct JobPhase {
    pub job: String,
    pub phase: u32,
    pub ranks: usize,
    pub start: f64,
    pub end: f64,
    /// Last rank's end minus first rank's start.
    pub length: f64,
    pub mean_rank_time: f64,
    pub max_rank_time: f64,
    /// Mean time a rank spent inside its operations (its phase without the compute gaps).
    pub mean_rank_busy: f64,
    pub bytes: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    pub job: String,
    pub ranks: usize,
    pub nodes: usize,
    pub bytes: f64,
    /// Sum of the job's I/O phase lengths.
    pub io_time: f64,
    pub mean_rank_time: f64,
    /// Mean over ranks of the time spent inside operations, summed over phases.
    pub mean_rank_busy: f64,
    /// Bytes-weighted mean number of network links crossed (0 for node-local).
    pub avg_hops: f64,
    pub nonminimal_fraction: f64,
    pub phases: Vec<JobPhase>,
}

#[derive(Debug, Clone, Serialize)]
pub struct KindUtilisation {
    pub kind: String,
    pub resources: usize,
    pub used: usize,
    pub mean: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub system: String,
    pub topology: String,
    pub placement: String,
    pub makespan: f64,
    pub events: u64,
    pub flows: u64,
    pub recomputations: u64,
    pub flow_updates: u64,
    pub wall_seconds: f64,
    pub events_per_second: f64,
    pub jobs: Vec<JobSummary>,
    pub utilisation: Vec<KindUtilisation>,
    pub inventory: Inventory,
    pub cost: Option<CostTable>,
}

pub fn summarize(o: &Outcome) -> Result<Summary> {
    let r = &o.result;
    let mut jobs = Vec::new();
    for (j, job) in o.jobs.iter().enumerate() {
        let mut by_phase: BTreeMap<u32, Vec<&crate::engine::PhaseRecord>> = BTreeMap::new();
        for p in r.phases.iter().filter(|p| p.job as usize == j) {
            by_phase.entry(p.phase).or_default().push(p);
        }
        let phases: Vec<JobPhase> = by_phase
            .into_iter()
            .map(|(phase, recs)| {
                let start = recs.iter().map(|p| p.start).fold(f64::INFINITY, f64::min);
                let end = recs.iter().map(|p| p.end).fold(0.0, f64::max);
                let times: Vec<f64> = recs.iter().map(|p| p.end - p.start).collect();
                JobPhase {
                    job: job.name.clone(),
                    phase,
                    ranks: recs.len(),
                    start,
                    end,
                    length: end - start,
                    mean_rank_time: times.iter().sum::<f64>() / times.len() as f64,
                    max_rank_time: times.iter().copied().fold(0.0, f64::max),
                    mean_rank_busy: recs.iter().map(|p| p.busy).sum::<f64>() / recs.len() as f64,
                    bytes: recs.iter().map(|p| p.bytes).sum(),
                }
            })
            .collect();
        let t = &r.traffic[j];
        let mut nodes = job.rank_nodes.clone();
        nodes.dedup();
        let rank_count = job.trace.ranks.len();
        jobs.push(JobSummary {
            job: job.name.clone(),
            ranks: rank_count,
            nodes: nodes.len(),
            bytes: t.bytes,
            io_time: phases.iter().map(|p| p.length).sum(),
            mean_rank_time: phases.iter().map(|p| p.mean_rank_time * p.ranks as f64).sum::<f64>() / rank_count.max(1) as f64,
            mean_rank_busy: phases.iter().map(|p| p.mean_rank_busy * p.ranks as f64).sum::<f64>() / rank_count.max(1) as f64,
            avg_hops: if t.bytes > 0.0 { t.hop_bytes / t.bytes } else { 0.0 },
            nonminimal_fraction: if t.bytes > 0.0 { t.nonminimal_bytes / t.bytes } else { 0.0 },
            phases,
        });
    }
    let mut kinds: BTreeMap<ResKind, (usize, usize, f64, f64)> = BTreeMap::new();
    for (res, &carried) in o.network.resources.iter().zip(&r.carried) {
        let e = kinds.entry(res.kind).or_insert((0, 0, 0.0, 0.0));
        let u = utilisation(carried, res.capacity, r.makespan);
        e.0 += 1;
        if carried > 0.0 {
            e.1 += 1;
            e.2 += u;
            e.3 = e.3.max(u);
        }
    }
    let utilisation = kinds
        .into_iter()
        .map(|(k, (n, used, sum, max))| KindUtilisation {
            kind: k.name().into(),
            resources: n,
            used,
            mean: if used > 0 { sum / used as f64 } else { 0.0 },
            max,
        })
        .collect();
    let inventory = Inventory::of(&o.system, o.network.placement);
    let cost = match &o.system.prices {
        Some(path) => Some(PriceList::load(path)?.cost(inventory)),
        None => None,
    };
    let s = &r.stats;
    Ok(Summary {
        system: o.system.name.clone(),
        topology: o.system.topology_name().into(),
        placement: o.network.placement.name().into(),
        makespan: r.makespan,
        events: s.events,
        flows: s.flows,
        recomputations: s.recomputations,
        flow_updates: s.flow_updates,
        wall_seconds: s.wall_seconds,
        events_per_second: s.events as f64 / s.wall_seconds.max(1e-9),
        jobs,
        utilisation,
        inventory,
        cost,
    })
}

/// Average utilisation of a resource over the run.
fn utilisation(carried: f64, capacity: f64, makespan: f64) -> f64 {
    if makespan > 0.0 && capacity > 0.0 {
        carried / (capacity * makespan)
    } else {
        0.0
    }
}

/// Formats rows as an aligned text table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cells.iter().enumerate().map(|(i, c)| format!("{:<w$}", c, w = width[i])).collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(headers.to_vec(), &mut out);
    line(width.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().iter().map(|s| s.as_str()).collect(), &mut out);
    for row in rows {
        line(row.iter().map(|s| s.as_str()).collect(), &mut out);
    }
    out
}

pub fn render(s: &Summary) -> String {
    let mut out = format!(
        "{} | {} | placement {} | simulated {:.3} s | {} events, {} flows, {} rate recomputations in {:.2} s wall ({:.0} events/s)\n\n",
        s.system, s.topology, s.placement, s.makespan, s.events, s.flows, s.recomputations, s.wall_seconds, s.events_per_second
    );
    let rows: Vec<Vec<String>> = s
        .jobs
        .iter()
        .map(|j| {
            vec![
                j.job.clone(),
                j.ranks.to_string(),
                j.nodes.to_string(),
                fmt_bytes(j.bytes),
                j.phases.len().to_string(),
                format!("{:.3}", j.io_time),
                format!("{:.3}", j.mean_rank_time),
                format!("{:.3}", j.mean_rank_busy),
                format!("{:.2}", j.avg_hops),
                format!("{:.0}%", 100.0 * j.nonminimal_fraction),
                format!("{:.1}", if j.io_time > 0.0 { j.bytes / j.io_time / 1e9 } else { 0.0 }),
            ]
        })
        .collect();
    out += &table(
        &["job", "ranks", "nodes", "bytes", "phases", "io phase s", "mean rank s", "rank in I/O s", "avg hops", "non-min", "GB/s"],
        &rows,
    );
    out += "\n";
    let rows: Vec<Vec<String>> = s
        .utilisation
        .iter()
        .filter(|u| u.used > 0)
        .map(|u| {
            vec![
                u.kind.clone(),
                u.resources.to_string(),
                u.used.to_string(),
                format!("{:.1}%", 100.0 * u.mean),
                format!("{:.1}%", 100.0 * u.max),
            ]
        })
        .collect();
    out += &table(&["resource kind", "count", "used", "mean util", "max util"], &rows);
    if let Some(c) = &s.cost {
        out += "\n";
        out += &render_cost(c);
    }
    out
}

pub fn render_cost(c: &CostTable) -> String {
    let mut rows: Vec<Vec<String>> = c
        .lines
        .iter()
        .map(|l| {
            vec![
                l.item.clone(),
                l.count.to_string(),
                format!("${:.0}", l.unit_price),
                format!("{:.0} W", l.watts),
                format!("${:.0}", l.count as f64 * l.unit_price),
            ]
        })
        .collect();
    rows.push(vec!["CAPEX".into(), String::new(), String::new(), format!("{:.1} kW", c.power_kw), format!("${:.0}", c.capex)]);
    rows.push(vec![format!("OPEX ({} yr energy)", c.years), String::new(), String::new(), String::new(), format!("${:.0}", c.opex)]);
    table(&["item", "count", "unit price", "power", "total"], &rows)
}

/// Writes ranks.csv, jobs.csv, resources.csv, utilisation.csv, summary.json (and cost.csv).
pub fn write_outputs(o: &Outcome, s: &Summary, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let write = |name: &str, text: String| {
        std::fs::write(dir.join(name), text).with_context(|| format!("cannot write {}", dir.join(name).display()))
    };
    let mut csv = String::from("job,rank,node,phase,start,end,duration,busy,bytes\n");
    let mut phases: Vec<_> = o.result.phases.iter().collect();
    phases.sort_by_key(|p| (p.job, p.rank, p.phase));
    for p in phases {
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.9},{:.9},{:.9},{:.9},{}",
            o.jobs[p.job as usize].name,
            p.rank,
            p.node,
            p.phase,
            p.start,
            p.end,
            p.end - p.start,
            p.busy,
            p.bytes
        );
    }
    write("ranks.csv", csv)?;
    let mut csv =
        String::from("job,phase,ranks,start,end,length,mean_rank_time,max_rank_time,mean_rank_busy,bytes,avg_hops,nonminimal_fraction\n");
    for j in &s.jobs {
        for p in &j.phases {
            let _ = writeln!(
                csv,
                "{},{},{},{:.9},{:.9},{:.9},{:.9},{:.9},{:.9},{},{:.4},{:.4}",
                j.job,
                p.phase,
                p.ranks,
                p.start,
                p.end,
                p.length,
                p.mean_rank_time,
                p.max_rank_time,
                p.mean_rank_busy,
                p.bytes,
                j.avg_hops,
                j.nonminimal_fraction
            );
        }
    }
    write("jobs.csv", csv)?;
    let mut csv = String::from("resource,kind,capacity,carried,utilisation\n");
    for (res, &carried) in o.network.resources.iter().zip(&o.result.carried) {
        if carried > 0.0 {
            let _ = writeln!(
                csv,
                "{},{},{},{},{:.6}",
                res.label(),
                res.kind.name(),
                res.capacity,
                carried,
                utilisation(carried, res.capacity, o.result.makespan)
            );
        }
    }
    write("resources.csv", csv)?;
    let mut csv = String::from("kind,resources,used,mean,max\n");
    for u in &s.utilisation {
        let _ = writeln!(csv, "{},{},{},{:.6},{:.6}", u.kind, u.resources, u.used, u.mean, u.max);
    }
    write("utilisation.csv", csv)?;
    if let Some(c) = &s.cost {
        let mut csv = String::from("item,count,unit_price,watts,total\n");
        for l in &c.lines {
            let _ = writeln!(csv, "{},{},{},{},{}", l.item, l.count, l.unit_price, l.watts, l.count as f64 * l.unit_price);
        }
        let _ = writeln!(csv, "CAPEX,,,{},{}", c.power_kw * 1000.0, c.capex);
        let _ = writeln!(csv, "OPEX,,,,{}", c.opex);
        write("cost.csv", csv)?;
    }
    write("summary.json", serde_json::to_string_pretty(s)?)?;
    Ok(())
}
