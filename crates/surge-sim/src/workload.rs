//! Workloads: jobs with node placements, each replaying a trace (converted from a Darshan log
//! by `python -m surge.darshan_trace`) or a synthetic pattern (IOR N-N / N-1, periodic
//! checkpoint), optionally transformed (weak/strong scaling, repeat, coalesce, barriers).

use crate::topology::Rng;
use crate::units::{Bytes, Seconds};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpKind {
    Write,
    Read,
    /// Wait until every rank of the communicator (ranks `r / group` share one; 0 = whole job) arrives.
    Barrier {
        group: u32,
    },
}

/// One I/O operation of one rank as recorded: `start` and `end` are relative to the job start.
/// How they are used depends on the job's [`Timing`]: under `Simulated` only the compute gap
/// before an operation (its `start` minus the previous operation's recorded `end`) is kept,
/// under `Recorded` the operation is issued at `start` or when the rank's previous operation
/// finishes, whichever is later. Synthetic operations have `end == start` (no recorded I/O time).
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub kind: OpKind,
    pub file: u32,
    pub offset: u64,
    pub size: u64,
    pub start: f64,
    pub end: f64,
    pub phase: u32,
}

/// Per-rank operation lists of one job.
#[derive(Debug, Clone)]
pub struct Trace {
    pub ranks: Vec<Vec<Op>>,
    /// False for traces that carry only start times (surge-trace version 1): the time an
    /// operation took on the recorded system is unknown, so compute gaps cannot be told apart
    /// from I/O time and only `Timing::Recorded` can replay them.
    pub recorded_ends: bool,
}

impl Default for Trace {
    fn default() -> Self {
        Trace { ranks: Vec::new(), recorded_ends: true }
    }
}

/// Where the time between a rank's operations comes from.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// I/O durations come from the simulated system; only the compute gap before each
    /// operation (recorded start minus the previous operation's recorded end) comes from the
    /// trace. A faster system finishes the job's I/O phases sooner.
    #[default]
    Simulated,
    /// Operations are issued at their recorded start times (or when the previous one ends, if
    /// later): the recorded timeline bounds every phase from below, so a system faster than the
    /// recorded one cannot shorten it.
    Recorded,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    #[default]
    Bb,
    Pfs,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    #[serde(default)]
    pub name: String,
    #[serde(default = "six")]
    pub ranks_per_node: usize,
    #[serde(default = "seed")]
    pub seed: u64,
    #[serde(rename = "job")]
    pub jobs: Vec<JobConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    pub name: String,
    /// Required for synthetic jobs; for traces, defaults to the trace's rank count.
    pub ranks: Option<usize>,
    pub ranks_per_node: Option<usize>,
    #[serde(default)]
    pub placement: PlacementSpec,
    #[serde(default)]
    pub start: Seconds,
    #[serde(default)]
    pub target: Target,
    #[serde(default)]
    pub timing: Timing,
    pub trace: Option<PathBuf>,
    pub synthetic: Option<Synthetic>,
    #[serde(default)]
    pub transforms: Vec<Transform>,
}

/// How a job's nodes are chosen among the nodes still free (jobs are placed in file order).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(untagged)]
pub enum PlacementSpec {
    /// "contiguous" (lowest free nodes) or "random" (uniformly among free nodes).
    #[default]
    Contiguous,
    Named(String),
    /// Random runs of `chunks` contiguous nodes, like a fragmented batch system.
    Chunks {
        chunks: usize,
    },
    /// Contiguous starting at a node.
    From {
        first_node: usize,
    },
    /// Explicit node list.
    Nodes {
        nodes: Vec<usize>,
    },
    /// Allocation file: node ids or ranges ("0-15,32,40-47"), separated by commas or lines.
    File {
        allocation: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// IOR file-per-process.
    #[serde(rename = "ior_nn")]
    IorNN,
    /// IOR single shared file, rank r writing the r-th block.
    #[serde(rename = "ior_n1")]
    IorN1,
    /// Periodic checkpoint, `files_per_rank` files per rank per phase.
    Checkpoint,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Synthetic {
    pub pattern: Pattern,
    pub bytes_per_rank: Bytes,
    #[serde(default = "default_transfer")]
    pub transfer_size: Bytes,
    #[serde(default = "one")]
    pub files_per_rank: usize,
    #[serde(default = "one")]
    pub phases: usize,
    /// Time from one phase's start to the next.
    #[serde(default)]
    pub interval: Seconds,
    /// Per rank and phase, a uniformly random delay in [jitter_min, jitter_max] (scattered I/O).
    #[serde(default)]
    pub jitter_min: Seconds,
    #[serde(default)]
    pub jitter_max: Seconds,
    /// Staggered I/O: ranks start in waves of this size (0 = all at once) ...
    #[serde(default)]
    pub wave_size: usize,
    /// ... separated by this much time.
    #[serde(default)]
    pub wave_gap: Seconds,
    #[serde(default)]
    pub read: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repeat {
    pub count: usize,
    pub interval: Seconds,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Barriers {
    /// Communicator size (0 = all ranks of the job).
    #[serde(default)]
    pub group: u32,
}

/// Trace transforms, applied in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Transform {
    /// Multiply the rank count; new ranks copy existing ones (private files are duplicated,
    /// shared files grow with the copies placed after the original extent).
    WeakScale(usize),
    /// Multiply every operation's size (and offset).
    StrongScale(f64),
    /// Replay the trace `count` times, `interval` after the previous copy's last op start.
    Repeat(Repeat),
    /// Merge consecutive contiguous operations of a rank on one file, up to this size.
    Coalesce(Bytes),
    /// Insert a barrier before every I/O phase.
    Barriers(Barriers),
}

fn six() -> usize {
    6
}
fn seed() -> u64 {
    1
}
fn one() -> usize {
    1
}
fn default_transfer() -> Bytes {
    Bytes(1024.0 * 1024.0)
}

/// A job ready to simulate.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub start: f64,
    pub target: Target,
    pub timing: Timing,
    pub ranks_per_node: usize,
    /// Compute node of each rank.
    pub rank_nodes: Vec<u32>,
    pub trace: Trace,
}

impl WorkloadConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read workload file {}", path.display()))?;
        let mut w: WorkloadConfig = toml::from_str(&text).with_context(|| format!("invalid workload file {}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for job in &mut w.jobs {
            if let Some(t) = &mut job.trace {
                *t = dir.join(&*t);
            }
            if let PlacementSpec::File { allocation } = &mut job.placement {
                *allocation = dir.join(&*allocation);
            }
        }
        Ok(w)
    }

    pub fn parse(text: &str) -> Result<Self> {
        Ok(toml::from_str(text)?)
    }

    /// Builds every job's trace and places it on the machine's `nodes` compute nodes.
    pub fn instantiate(&self, nodes: usize) -> Result<Vec<Job>> {
        if self.jobs.is_empty() {
            bail!("workload has no [[job]]");
        }
        let mut rng = Rng::new(self.seed);
        let mut free = vec![true; nodes];
        let mut jobs = Vec::new();
        for cfg in &self.jobs {
            let job = cfg.instantiate(self.ranks_per_node, &mut free, &mut rng).with_context(|| format!("job '{}'", cfg.name))?;
            jobs.push(job);
        }
        Ok(jobs)
    }
}

impl JobConfig {
    fn instantiate(&self, default_rpn: usize, free: &mut [bool], rng: &mut Rng) -> Result<Job> {
        let mut trace = match (&self.trace, &self.synthetic) {
            (Some(path), None) => load_trace(path)?,
            (None, Some(s)) => {
                let ranks = self.ranks.context("a synthetic job needs `ranks`")?;
                s.generate(ranks, rng)?
            }
            _ => bail!("give exactly one of `trace` or `[job.synthetic]`"),
        };
        for t in &self.transforms {
            trace = t.apply(trace)?;
        }
        if let (Some(want), Some(_)) = (self.ranks, &self.trace) {
            if want != trace.ranks.len() {
                bail!("ranks = {want} but the (transformed) trace has {} ranks; use a weak_scale transform", trace.ranks.len());
            }
        }
        if self.timing == Timing::Simulated && !trace.recorded_ends {
            bail!(
                "the trace has no recorded end times (surge-trace version 1), so compute gaps cannot be told from I/O time: \
                 convert the Darshan log again with `python -m surge.darshan_trace` or set `timing = \"recorded\"`"
            );
        }
        let rpn = self.ranks_per_node.unwrap_or(default_rpn).max(1);
        let needed = trace.ranks.len().div_ceil(rpn);
        let nodes = self.placement.allocate(needed, free, rng)?;
        let rank_nodes = (0..trace.ranks.len()).map(|r| nodes[r / rpn] as u32).collect();
        Ok(Job {
            name: self.name.clone(),
            start: self.start.0,
            target: self.target,
            timing: self.timing,
            ranks_per_node: rpn,
            rank_nodes,
            trace,
        })
    }
}

impl PlacementSpec {
    fn allocate(&self, needed: usize, free: &mut [bool], rng: &mut Rng) -> Result<Vec<usize>> {
        let available = free.iter().filter(|f| **f).count();
        if needed > available {
            bail!("needs {needed} nodes but only {available} of {} are free", free.len());
        }
        let take_from =
            |start: usize, free: &[bool]| -> Vec<usize> { (start..free.len()).chain(0..start).filter(|&n| free[n]).take(needed).collect() };
        let nodes: Vec<usize> = match self {
            PlacementSpec::Contiguous => take_from(0, free),
            PlacementSpec::From { first_node } => take_from(*first_node % free.len(), free),
            PlacementSpec::Named(name) => match name.as_str() {
                "contiguous" => take_from(0, free),
                "random" => {
                    let mut pool: Vec<usize> = (0..free.len()).filter(|&n| free[n]).collect();
                    for i in 0..needed {
                        let j = i + rng.below(pool.len() - i);
                        pool.swap(i, j);
                    }
                    pool.truncate(needed);
                    pool.sort_unstable();
                    pool
                }
                other => bail!("unknown placement '{other}' (contiguous, random, {{chunks = N}}, {{first_node = N}}, {{nodes = [...]}}, {{allocation = FILE}})"),
            },
            PlacementSpec::Chunks { chunks } => {
                let chunk = (*chunks).max(1);
                let mut out = Vec::new();
                let mut tries = 0;
                while out.len() < needed {
                    tries += 1;
                    let start = if tries < 100 * needed { rng.below(free.len() / chunk + 1) * chunk } else { 0 };
                    for n in (start..free.len()).take(chunk) {
                        if free[n] && out.len() < needed && !out.contains(&n) {
                            out.push(n);
                        }
                    }
                }
                out
            }
            PlacementSpec::Nodes { nodes } => nodes.clone(),
            PlacementSpec::File { allocation } => parse_allocation(allocation)?,
        };
        if nodes.len() < needed {
            bail!("placement gives {} nodes, job needs {needed}", nodes.len());
        }
        let nodes = &nodes[..needed];
        for &n in nodes {
            if n >= free.len() {
                bail!("node {n} does not exist (machine has {})", free.len());
            }
            if !free[n] {
                bail!("node {n} is already used by another job");
            }
        }
        for &n in nodes {
            free[n] = false;
        }
        Ok(nodes.to_vec())
    }
}

fn parse_allocation(path: &Path) -> Result<Vec<usize>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read allocation file {}", path.display()))?;
    let mut nodes = Vec::new();
    for item in text.split(|c: char| c == ',' || c.is_whitespace()).filter(|s| !s.is_empty() && !s.starts_with('#')) {
        let bad = || format!("bad node '{item}' in {} (expected N or N-M)", path.display());
        if let Some((a, b)) = item.split_once('-') {
            let (a, b): (usize, usize) = (a.parse().with_context(bad)?, b.parse().with_context(bad)?);
            nodes.extend(a..=b);
        } else {
            nodes.push(item.parse().with_context(bad)?);
        }
    }
    Ok(nodes)
}

impl Synthetic {
    pub fn generate(&self, ranks: usize, rng: &mut Rng) -> Result<Trace> {
        if ranks == 0 || self.phases == 0 || self.files_per_rank == 0 {
            bail!("ranks, phases and files_per_rank must be positive");
        }
        if self.transfer_size.0 < 1.0 {
            bail!("transfer_size must be at least one byte");
        }
        if self.jitter_max.0 < self.jitter_min.0 {
            bail!("jitter_max must not be below jitter_min");
        }
        let per_rank = self.bytes_per_rank.0.round() as u64;
        let xfer = self.transfer_size.0.round() as u64;
        let kind = if self.read { OpKind::Read } else { OpKind::Write };
        let files = match self.pattern {
            Pattern::IorN1 => 1,
            Pattern::IorNN => 1,
            Pattern::Checkpoint => self.files_per_rank,
        };
        let mut out = Trace { ranks: Vec::with_capacity(ranks), recorded_ends: true };
        for r in 0..ranks {
            let mut ops = Vec::new();
            let wave_delay = r.checked_div(self.wave_size).map_or(0.0, |wave| wave as f64 * self.wave_gap.0);
            for phase in 0..self.phases {
                let jitter = self.jitter_min.0 + rng.unit() * (self.jitter_max.0 - self.jitter_min.0);
                let t = phase as f64 * self.interval.0 + wave_delay + jitter;
                for f in 0..files {
                    let bytes = per_rank / files as u64 + if (f as u64) < per_rank % files as u64 { 1 } else { 0 };
                    let (file, base) = match self.pattern {
                        Pattern::IorN1 => (phase as u32, r as u64 * per_rank),
                        _ => (((r * self.phases + phase) * files + f) as u32, 0),
                    };
                    let mut done = 0;
                    while done < bytes {
                        let size = xfer.min(bytes - done);
                        ops.push(Op { kind, file, offset: base + done, size, start: t, end: t, phase: phase as u32 });
                        done += size;
                    }
                }
            }
            out.ranks.push(ops);
        }
        Ok(out)
    }
}

impl Transform {
    pub fn apply(&self, trace: Trace) -> Result<Trace> {
        Ok(match self {
            Transform::WeakScale(factor) => weak_scale(trace, *factor)?,
            Transform::StrongScale(factor) => {
                if !(*factor > 0.0 && factor.is_finite()) {
                    bail!("strong_scale factor must be positive");
                }
                let mut t = trace;
                for op in t.ranks.iter_mut().flatten() {
                    op.size = (op.size as f64 * factor).round() as u64;
                    op.offset = (op.offset as f64 * factor).round() as u64;
                }
                // Recorded times stay: the compute between operations does not scale with the data.
                t
            }
            Transform::Repeat(rep) => repeat(trace, rep)?,
            Transform::Coalesce(limit) => coalesce(trace, limit.0 as u64),
            Transform::Barriers(b) => add_barriers(trace, b.group),
        })
    }
}

fn weak_scale(trace: Trace, factor: usize) -> Result<Trace> {
    if factor == 0 {
        bail!("weak_scale factor must be positive");
    }
    // A file touched by one rank is private and is duplicated per copy; a file touched by
    // several ranks is shared and the copies write after its original extent.
    let mut owners: HashMap<u32, (usize, bool)> = HashMap::new();
    let mut extent: HashMap<u32, u64> = HashMap::new();
    let mut max_file = 0;
    for (r, ops) in trace.ranks.iter().enumerate() {
        for op in ops {
            if matches!(op.kind, OpKind::Barrier { .. }) {
                continue;
            }
            let e = owners.entry(op.file).or_insert((r, false));
            if e.0 != r {
                e.1 = true;
            }
            let x = extent.entry(op.file).or_insert(0);
            *x = (*x).max(op.offset + op.size);
            max_file = max_file.max(op.file + 1);
        }
    }
    let n = trace.ranks.len();
    let recorded_ends = trace.recorded_ends;
    let mut ranks = Vec::with_capacity(n * factor);
    for copy in 0..factor {
        for ops in &trace.ranks {
            ranks.push(
                ops.iter()
                    .map(|op| {
                        let mut op = *op;
                        if copy > 0 && !matches!(op.kind, OpKind::Barrier { .. }) {
                            if owners[&op.file].1 {
                                op.offset += copy as u64 * extent[&op.file];
                            } else {
                                op.file += copy as u32 * max_file;
                            }
                        }
                        op
                    })
                    .collect(),
            );
        }
    }
    Ok(Trace { ranks, recorded_ends })
}

fn repeat(trace: Trace, rep: &Repeat) -> Result<Trace> {
    if rep.count == 0 {
        bail!("repeat count must be positive");
    }
    let ops = || trace.ranks.iter().flatten();
    let first = ops().map(|o| o.start).fold(f64::INFINITY, f64::min);
    let last = ops().map(|o| o.start).fold(f64::NEG_INFINITY, f64::max);
    let span = if first.is_finite() { last - first } else { 0.0 };
    let phases = ops().map(|o| o.phase + 1).max().unwrap_or(1);
    let ranks = trace
        .ranks
        .iter()
        .map(|rank_ops| {
            (0..rep.count)
                .flat_map(|i| {
                    rank_ops.iter().map(move |op| {
                        let mut op = *op;
                        let shift = i as f64 * (span + rep.interval.0);
                        op.start += shift;
                        op.end += shift;
                        op.phase += i as u32 * phases;
                        op
                    })
                })
                .collect()
        })
        .collect();
    Ok(Trace { ranks, recorded_ends: trace.recorded_ends })
}

fn coalesce(trace: Trace, limit: u64) -> Trace {
    let recorded_ends = trace.recorded_ends;
    let ranks = trace
        .ranks
        .into_iter()
        .map(|ops| {
            let mut out: Vec<Op> = Vec::with_capacity(ops.len());
            for op in ops {
                if let Some(prev) = out.last_mut() {
                    let data = !matches!(op.kind, OpKind::Barrier { .. });
                    if data
                        && prev.kind == op.kind
                        && prev.file == op.file
                        && prev.phase == op.phase
                        && prev.offset + prev.size == op.offset
                        && prev.size + op.size <= limit
                    {
                        // The merged operation ends when its last part did: the compute gaps
                        // between the parts are dropped with the parts.
                        prev.size += op.size;
                        prev.end = prev.end.max(op.end);
                        continue;
                    }
                }
                out.push(op);
            }
            out
        })
        .collect();
    Trace { ranks, recorded_ends }
}

fn add_barriers(trace: Trace, group: u32) -> Trace {
    // Every rank gets a barrier before each phase that any rank has, so the barrier counts match.
    let mut phase_start: std::collections::BTreeMap<u32, f64> = Default::default();
    for op in trace.ranks.iter().flatten() {
        let s = phase_start.entry(op.phase).or_insert(op.start);
        *s = s.min(op.start);
    }
    let recorded_ends = trace.recorded_ends;
    let ranks = trace
        .ranks
        .into_iter()
        .map(|ops| {
            let mut out = Vec::with_capacity(ops.len() + phase_start.len());
            let mut it = ops.into_iter().peekable();
            for (&phase, &start) in &phase_start {
                while let Some(op) = it.next_if(|o| o.phase < phase) {
                    out.push(op);
                }
                out.push(Op { kind: OpKind::Barrier { group }, file: 0, offset: 0, size: 0, start, end: start, phase });
            }
            out.extend(it);
            out
        })
        .collect();
    Trace { ranks, recorded_ends }
}

/// Trace file written by `surge.darshan_trace` (format "surge-trace"): columns of equal length,
/// one entry per operation. Version 2 adds `end`, the time each operation finished on the
/// recorded system; version 1 traces have start times only.
#[derive(Debug, Deserialize)]
struct TraceFile {
    format: String,
    version: u32,
    nprocs: usize,
    ops: TraceColumns,
}

#[derive(Debug, Deserialize)]
struct TraceColumns {
    rank: Vec<i64>,
    /// "w" write, "r" read, "b" barrier (then `file` holds the communicator size, 0 = all).
    kind: Vec<String>,
    file: Vec<u32>,
    offset: Vec<u64>,
    size: Vec<u64>,
    start: Vec<f64>,
    end: Option<Vec<f64>>,
    phase: Vec<u32>,
}

/// Darshan's log header: an 8-byte version string, then the magic number 6567223 as a 64-bit
/// integer (in the writing machine's byte order).
const DARSHAN_MAGIC: u64 = 6_567_223;

fn is_darshan_log(bytes: &[u8]) -> bool {
    let Some(magic) = bytes.get(8..16) else { return false };
    let magic: [u8; 8] = magic.try_into().expect("eight bytes");
    u64::from_le_bytes(magic) == DARSHAN_MAGIC || u64::from_be_bytes(magic) == DARSHAN_MAGIC
}

pub fn load_trace(path: &Path) -> Result<Trace> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read trace {}", path.display()))?;
    if is_darshan_log(&bytes) {
        bail!(
            "{} is a raw Darshan log, not a surge trace: convert it first with \
             `python -m surge.darshan_trace {} -o TRACE.json` (needs the 'sim' extra: pip install 'surge[sim]') \
             and point `trace` at TRACE.json",
            path.display(),
            path.display()
        );
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!("{} is not a surge trace (binary data; traces are JSON written by `python -m surge.darshan_trace`)", path.display())
    })?;
    parse_trace(&text).with_context(|| format!("invalid trace {}", path.display()))
}

pub fn parse_trace(text: &str) -> Result<Trace> {
    let tf: TraceFile = serde_json::from_str(text)?;
    if tf.format != "surge-trace" || !(1..=2).contains(&tf.version) {
        bail!("not a surge-trace version 1 or 2 file (format '{}', version {})", tf.format, tf.version);
    }
    let c = &tf.ops;
    let n = c.rank.len();
    if tf.version >= 2 && c.end.is_none() {
        bail!("surge-trace version 2 needs the `end` column");
    }
    let ends = c.end.as_ref().map_or(n, Vec::len);
    if [c.kind.len(), c.file.len(), c.offset.len(), c.size.len(), c.start.len(), ends, c.phase.len()].iter().any(|&l| l != n) {
        bail!("trace columns have different lengths");
    }
    let mut ranks = vec![Vec::new(); tf.nprocs];
    for i in 0..n {
        let r = c.rank[i];
        if r < 0 || r as usize >= tf.nprocs {
            bail!("operation {i}: rank {r} outside 0..{} (shared records must be expanded per rank)", tf.nprocs);
        }
        let start = c.start[i];
        if !(start.is_finite() && start >= 0.0) {
            bail!("operation {i}: bad start time {start}");
        }
        let end = c.end.as_ref().map_or(start, |e| e[i]);
        if !(end.is_finite() && end >= start) {
            bail!("operation {i}: end time {end} before its start {start}");
        }
        let kind = match c.kind[i].as_str() {
            "w" => OpKind::Write,
            "r" => OpKind::Read,
            "b" => OpKind::Barrier { group: c.file[i] },
            k => bail!("operation {i}: unknown kind '{k}'"),
        };
        ranks[r as usize].push(Op { kind, file: c.file[i], offset: c.offset[i], size: c.size[i], start, end, phase: c.phase[i] });
    }
    for ops in &mut ranks {
        ops.sort_by(|a, b| a.start.total_cmp(&b.start));
    }
    Ok(Trace { ranks, recorded_ends: c.end.is_some() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ior(ranks: usize, pattern: Pattern) -> Trace {
        let s = Synthetic {
            pattern,
            bytes_per_rank: Bytes(4096.0),
            transfer_size: Bytes(1024.0),
            files_per_rank: 1,
            phases: 1,
            interval: Seconds(0.0),
            jitter_min: Seconds(0.0),
            jitter_max: Seconds(0.0),
            wave_size: 0,
            wave_gap: Seconds(0.0),
            read: false,
        };
        s.generate(ranks, &mut Rng::new(1)).unwrap()
    }

    #[test]
    fn weak_scaling_keeps_shared_files_shared() {
        let t = weak_scale(ior(2, Pattern::IorN1), 3).unwrap();
        assert_eq!(t.ranks.len(), 6);
        assert!(t.ranks.iter().flatten().all(|o| o.file == 0));
        let mut offsets: Vec<u64> = t.ranks.iter().map(|r| r[0].offset).collect();
        offsets.sort();
        offsets.dedup();
        assert_eq!(offsets.len(), 6, "every copy writes its own region of the shared file");
        let t = weak_scale(ior(2, Pattern::IorNN), 2).unwrap();
        let files: std::collections::HashSet<u32> = t.ranks.iter().flatten().map(|o| o.file).collect();
        assert_eq!(files.len(), 4, "private files are duplicated");
    }

    #[test]
    fn coalesce_merges_contiguous_writes_up_to_limit() {
        let t = coalesce(ior(1, Pattern::IorNN), 2048);
        assert_eq!(t.ranks[0].len(), 2);
        assert!(t.ranks[0].iter().all(|o| o.size == 2048));
    }

    #[test]
    fn repeat_and_barriers() {
        let t = repeat(ior(2, Pattern::IorNN), &Repeat { count: 3, interval: Seconds(10.0) }).unwrap();
        assert_eq!(t.ranks[0].len(), 12);
        assert_eq!(t.ranks[0].last().unwrap().phase, 2);
        assert_eq!(t.ranks[0].last().unwrap().start, 20.0);
        let t = add_barriers(t, 0);
        let barriers = t.ranks[1].iter().filter(|o| matches!(o.kind, OpKind::Barrier { .. })).count();
        assert_eq!(barriers, 3);
    }

    #[test]
    fn bad_trace_is_rejected_clearly() {
        let err = parse_trace(r#"{"format":"surge-trace","version":1,"nprocs":1,"ops":{"rank":[-1],"kind":["w"],"file":[0],"offset":[0],"size":[1],"start":[0],"phase":[0]}}"#)
            .unwrap_err();
        assert!(err.to_string().contains("shared records"), "{err}");
        assert!(parse_trace("{not json").is_err());
    }

    #[test]
    fn placement_rejects_overcommit_and_bad_nodes() {
        let mut free = vec![true; 4];
        let mut rng = Rng::new(1);
        assert!(PlacementSpec::Nodes { nodes: vec![1, 7] }.allocate(2, &mut free, &mut rng).is_err());
        let got = PlacementSpec::Named("random".into()).allocate(3, &mut free, &mut rng).unwrap();
        assert_eq!(got.len(), 3);
        assert!(PlacementSpec::Contiguous.allocate(2, &mut free, &mut rng).unwrap_err().to_string().contains("only 1"));
    }
}
