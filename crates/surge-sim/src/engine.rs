//! The discrete-event, flow-level engine.
//!
//! Every I/O operation (or run of already-due operations of one rank, see
//! `SimParams::merge_due_ops`) becomes one *flow*: a byte count that crosses a set of resources
//! with a weight per resource. Striping over K servers is one flow whose bytes split over K
//! paths: each link carries the fraction of the bytes that goes its way, each device charges
//! device-seconds per byte (1/bandwidth) plus its per-operation overhead spread over the bytes.
//! Rates are the weighted max-min fair allocation (progressive filling), recomputed only over
//! the connected component of flows whose resources changed, so node-local traffic on one node
//! never triggers work for another node. Events are flow completions and rank timers; flows
//! finishing within `completion_tolerance` of their own duration of the earliest one complete
//! together, which turns thousands of near-simultaneous completions into one recomputation.

use crate::system::{Placement, SimParams};
use crate::topology::{LinkLoad, Network, Rng, Route, StorageTier};
use crate::workload::{Job, Op, OpKind, Target, Timing};
use anyhow::{bail, Result};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::Instant;

/// I/O phase of one rank: from its first operation's issue to its last operation's end.
#[derive(Debug, Clone)]
pub struct PhaseRecord {
    pub job: u32,
    pub rank: u32,
    pub node: u32,
    pub phase: u32,
    pub start: f64,
    pub end: f64,
    pub bytes: f64,
    /// Time the rank spent inside its operations (issue to end, latency included), without
    /// the compute gaps between them: what the placement and network change.
    pub busy: f64,
}

#[derive(Debug, Clone, Default)]
pub struct JobTraffic {
    pub bytes: f64,
    /// Sum over bytes of network links crossed (for the bytes-weighted average hop count).
    pub hop_bytes: f64,
    pub nonminimal_bytes: f64,
    pub flows: u64,
    pub ops: u64,
}

#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    pub events: u64,
    pub flows: u64,
    pub recomputations: u64,
    /// Flows whose rate was recomputed, summed over recomputations (the engine's main cost).
    pub flow_updates: u64,
    pub wall_seconds: f64,
}

#[derive(Debug, Clone)]
pub struct SimResult {
    pub phases: Vec<PhaseRecord>,
    pub traffic: Vec<JobTraffic>,
    /// Per resource: bytes carried (links) or device-seconds used (devices).
    pub carried: Vec<f64>,
    pub makespan: f64,
    pub stats: EngineStats,
}

#[derive(Clone, Copy, PartialEq)]
struct Time(f64);
impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    /// Issue the rank's next operation(s).
    Wake,
    /// Latency elapsed: start the prepared transfer.
    Transfer,
    /// A rate quantum has passed: recompute all rates (only with `rate_quantum` > 0).
    Recompute,
}

struct Flow {
    rank: u32,
    remaining: f64,
    rate: f64,
    last: f64,
    start: f64,
    version: u32,
    uses: Vec<(u32, f64)>,
    /// Position of this flow in `res_flows[uses[i].0]`.
    pos: Vec<u32>,
}

struct Prepared {
    bytes: f64,
    uses: Vec<(u32, f64)>,
}

/// The phase a rank is in: id, issue time of its first operation, bytes, busy time so far.
struct OpenPhase {
    id: u32,
    start: f64,
    bytes: f64,
    busy: f64,
}

struct RankState {
    job: u32,
    local: u32,
    node: u32,
    next: usize,
    phase: Option<OpenPhase>,
    /// End of the rank's last operation (phase ends are taken from it).
    last_end: f64,
    /// When the rank last became free: its last operation ended or a barrier released it.
    free_at: f64,
    /// Recorded end of the operation (or barrier) before `next`, for the compute gap.
    prev_recorded_end: Option<f64>,
    /// Issue time of the operations in flight.
    issued: f64,
    pending: Option<Prepared>,
}

struct Barrier {
    arrived: u32,
    waiting: Vec<u32>,
}

const EPS_T: f64 = 1e-12;

pub struct Engine<'a> {
    net: &'a Network,
    jobs: &'a [Job],
    /// Per job, the files more than one of its ranks does I/O on (N-1).
    shared_files: Vec<HashSet<u32>>,
    params: SimParams,
    now: f64,
    rng: Rng,
    cap: Vec<f64>,
    /// Sum of weights of routed (started or latency-pending) flows, for equal-share estimates.
    load: Vec<f64>,
    /// Bytes routed over each resource and not yet carried (updated when flows are settled):
    /// what adaptive routing compares paths on. Counted from the moment a flow is routed, so
    /// the ranks of one burst, routed at the same instant, see each other's choices.
    backlog: Vec<f64>,
    /// Capacity allocated to current rates per resource.
    alloc: Vec<f64>,
    carried: Vec<f64>,
    res_flows: Vec<Vec<(u32, f64)>>,
    flows: Vec<Option<Flow>>,
    free_flows: Vec<u32>,
    finish: BinaryHeap<Reverse<(Time, u32, u32)>>,
    timers: BinaryHeap<Reverse<(Time, u64, u32, TimerKind)>>,
    timer_seq: u64,
    ranks: Vec<RankState>,
    barriers: HashMap<(u32, u32), Barrier>,
    dirty: Vec<u32>,
    // Scratch state of the progressive filling, indexed by resource / flow.
    res_stamp: Vec<u64>,
    flow_stamp: Vec<u64>,
    frozen: Vec<u64>,
    used: Vec<f64>,
    wsum: Vec<f64>,
    unfrozen: Vec<u32>,
    epoch: u64,
    phases: Vec<PhaseRecord>,
    traffic: Vec<JobTraffic>,
    stats: EngineStats,
    route: Route,
    scratch: Vec<(u32, f64)>,
    /// Flows started since the last full recomputation (rate quantum mode).
    fresh: Vec<u32>,
    last_recompute: f64,
    recompute_scheduled: bool,
}

impl<'a> Engine<'a> {
    pub fn new(net: &'a Network, jobs: &'a [Job], params: SimParams) -> Result<Self> {
        for job in jobs {
            if job.target == Target::Pfs && net.pfs.is_none() {
                bail!("job '{}' targets the PFS but the system has no [pfs]", job.name);
            }
            if let Some(&n) = job.rank_nodes.iter().find(|&&n| n as usize >= net.compute_nodes) {
                bail!("job '{}' uses node {n} but the system has {} compute nodes", job.name, net.compute_nodes);
            }
        }
        let nres = net.resources.len();
        let mut ranks = Vec::new();
        for (j, job) in jobs.iter().enumerate() {
            for (r, &node) in job.rank_nodes.iter().enumerate() {
                ranks.push(RankState {
                    job: j as u32,
                    local: r as u32,
                    node,
                    next: 0,
                    phase: None,
                    last_end: job.start,
                    free_at: job.start,
                    prev_recorded_end: None,
                    issued: job.start,
                    pending: None,
                });
            }
        }
        let shared_files = jobs
            .iter()
            .map(|job| {
                let mut first_rank: HashMap<u32, usize> = HashMap::new();
                let mut shared = HashSet::new();
                for (r, ops) in job.trace.ranks.iter().enumerate() {
                    for op in ops.iter().filter(|o| matches!(o.kind, OpKind::Read | OpKind::Write)) {
                        if *first_rank.entry(op.file).or_insert(r) != r {
                            shared.insert(op.file);
                        }
                    }
                }
                shared
            })
            .collect();
        Ok(Engine {
            net,
            jobs,
            shared_files,
            rng: Rng::new(params.seed),
            params,
            now: 0.0,
            cap: net.resources.iter().map(|r| r.capacity).collect(),
            load: vec![0.0; nres],
            backlog: vec![0.0; nres],
            alloc: vec![0.0; nres],
            carried: vec![0.0; nres],
            res_flows: vec![Vec::new(); nres],
            flows: Vec::new(),
            free_flows: Vec::new(),
            finish: BinaryHeap::new(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            ranks,
            barriers: HashMap::new(),
            dirty: Vec::new(),
            res_stamp: vec![0; nres],
            flow_stamp: Vec::new(),
            frozen: Vec::new(),
            used: vec![0.0; nres],
            wsum: vec![0.0; nres],
            unfrozen: vec![0; nres],
            epoch: 0,
            phases: Vec::new(),
            traffic: vec![JobTraffic::default(); jobs.len()],
            stats: EngineStats::default(),
            route: Route::default(),
            scratch: Vec::new(),
            fresh: Vec::new(),
            last_recompute: f64::NEG_INFINITY,
            recompute_scheduled: false,
        })
    }

    pub fn run(mut self) -> SimResult {
        let wall = Instant::now();
        for r in 0..self.ranks.len() {
            let start = self.jobs[self.ranks[r].job as usize].start;
            self.push_timer(start, r as u32, TimerKind::Wake);
        }
        loop {
            let next_finish = self.peek_finish();
            let next_timer = self.timers.peek().map(|Reverse((t, ..))| t.0);
            let t = match (next_finish, next_timer) {
                (None, None) => break,
                (a, b) => a.unwrap_or(f64::INFINITY).min(b.unwrap_or(f64::INFINITY)),
            };
            self.now = t;
            if next_finish.is_some_and(|f| f <= t) {
                self.complete_due_flows();
            }
            while let Some(Reverse((tt, _, rank, kind))) = self.timers.peek().copied() {
                if tt.0 > self.now + EPS_T {
                    break;
                }
                self.timers.pop();
                self.stats.events += 1;
                match kind {
                    TimerKind::Wake => self.advance(rank),
                    TimerKind::Transfer => {
                        let prepared = self.ranks[rank as usize].pending.take().expect("transfer without prepared flow");
                        self.start_flow(rank, prepared);
                    }
                    TimerKind::Recompute => self.recompute_scheduled = false,
                }
            }
            let quantum = self.params.rate_quantum.0;
            if quantum <= 0.0 || self.now >= self.last_recompute + quantum * (1.0 - 1e-9) {
                self.recompute();
                self.last_recompute = self.now;
                self.fresh.clear();
            } else {
                self.estimate_fresh_rates();
                if !self.dirty.is_empty() && !self.recompute_scheduled {
                    self.recompute_scheduled = true;
                    self.push_timer(self.last_recompute + quantum, u32::MAX, TimerKind::Recompute);
                }
            }
        }
        let makespan = self.ranks.iter().map(|r| r.last_end).fold(0.0, f64::max);
        self.stats.wall_seconds = wall.elapsed().as_secs_f64();
        SimResult { phases: self.phases, traffic: self.traffic, carried: self.carried, makespan, stats: self.stats }
    }

    /// Between quantum recomputations: give each new flow what is left on its tightest
    /// resource (capacity freed by completed flows included), never more, so resources are not
    /// oversubscribed; a flow that finds nothing left waits for the next recomputation.
    fn estimate_fresh_rates(&mut self) {
        for f in std::mem::take(&mut self.fresh) {
            let Some(flow) = self.flows[f as usize].as_mut() else { continue };
            let rate =
                flow.uses.iter().map(|&(r, w)| (self.cap[r as usize] - self.alloc[r as usize]).max(0.0) / w).fold(f64::INFINITY, f64::min);
            if rate <= 0.0 || !rate.is_finite() {
                continue;
            }
            flow.rate = rate;
            for &(r, w) in &flow.uses {
                self.alloc[r as usize] += w * rate;
            }
            flow.version = flow.version.wrapping_add(1);
            self.finish.push(Reverse((Time(self.now + flow.remaining / rate), f, flow.version)));
        }
        self.drop_stale_finishes();
    }

    fn push_timer(&mut self, t: f64, rank: u32, kind: TimerKind) {
        self.timer_seq += 1;
        self.timers.push(Reverse((Time(t), self.timer_seq, rank, kind)));
    }

    /// Earliest valid projected flow end, discarding entries made stale by rate changes.
    fn peek_finish(&mut self) -> Option<f64> {
        while let Some(Reverse((t, f, version))) = self.finish.peek().copied() {
            match &self.flows[f as usize] {
                Some(flow) if flow.version == version => return Some(t.0),
                _ => {
                    self.finish.pop();
                }
            }
        }
        None
    }

    fn complete_due_flows(&mut self) {
        let tol = self.params.completion_tolerance;
        while let Some(Reverse((t, f, version))) = self.finish.peek().copied() {
            let Some(flow) = &self.flows[f as usize] else {
                self.finish.pop();
                continue;
            };
            if flow.version != version {
                self.finish.pop();
                continue;
            }
            if t.0 > self.now + EPS_T + tol * (self.now - flow.start) {
                break;
            }
            self.finish.pop();
            self.stats.events += 1;
            let rank = flow.rank;
            self.settle(f);
            self.remove_flow(f);
            self.op_done(rank);
            self.advance(rank);
        }
    }

    fn settle(&mut self, f: u32) {
        let now = self.now;
        let flow = self.flows[f as usize].as_mut().expect("live flow");
        let dt = now - flow.last;
        if dt > 0.0 {
            let moved = (flow.rate * dt).min(flow.remaining);
            flow.remaining -= moved;
            for &(r, w) in &flow.uses {
                self.carried[r as usize] += w * moved;
                self.backlog[r as usize] -= w * moved;
            }
        }
        flow.last = now;
    }

    fn remove_flow(&mut self, f: u32) {
        let flow = self.flows[f as usize].take().expect("live flow");
        for (i, &(r, w)) in flow.uses.iter().enumerate() {
            let list = &mut self.res_flows[r as usize];
            let pos = flow.pos[i] as usize;
            list.swap_remove(pos);
            if pos < list.len() {
                let moved = list[pos].0;
                let other = self.flows[moved as usize].as_mut().expect("listed flow is live");
                let k = other.uses.iter().position(|u| u.0 == r).expect("flow lists its resources");
                other.pos[k] = pos as u32;
            }
            self.load[r as usize] -= w;
            // A flow completed within the completion tolerance leaves a few bytes uncarried.
            self.backlog[r as usize] -= w * flow.remaining;
            self.alloc[r as usize] = (self.alloc[r as usize] - w * flow.rate).max(0.0);
            self.dirty.push(r);
        }
        self.free_flows.push(f);
    }

    /// The rank's operations in flight have ended now.
    fn op_done(&mut self, rank: u32) {
        let now = self.now;
        let rs = &mut self.ranks[rank as usize];
        rs.last_end = now;
        rs.free_at = now;
        if let Some(p) = &mut rs.phase {
            p.busy += now - rs.issued;
        }
    }

    fn start_flow(&mut self, rank: u32, p: Prepared) {
        if p.bytes <= 0.0 || p.uses.is_empty() {
            self.op_done(rank);
            self.advance(rank);
            return;
        }
        let id = self.free_flows.pop().unwrap_or_else(|| {
            self.flows.push(None);
            self.flow_stamp.push(0);
            self.frozen.push(0);
            (self.flows.len() - 1) as u32
        });
        let mut pos = Vec::with_capacity(p.uses.len());
        for &(r, w) in &p.uses {
            let list = &mut self.res_flows[r as usize];
            pos.push(list.len() as u32);
            list.push((id, w));
            self.dirty.push(r);
        }
        self.stats.flows += 1;
        self.fresh.push(id);
        self.flows[id as usize] =
            Some(Flow { rank, remaining: p.bytes, rate: 0.0, last: self.now, start: self.now, version: 0, uses: p.uses, pos });
    }

    /// Moves a rank forward: barriers, waiting for the next op's trace time, or issuing ops.
    fn advance(&mut self, rank: u32) {
        let jobs = self.jobs;
        let mut work = vec![rank];
        while let Some(rank) = work.pop() {
            let rs = &self.ranks[rank as usize];
            let (job_idx, local, next, node) = (rs.job, rs.local, rs.next, rs.node);
            let job = &jobs[job_idx as usize];
            let ops = &job.trace.ranks[local as usize];
            if next >= ops.len() {
                self.close_phase(rank);
                continue;
            }
            let op = ops[next];
            if let OpKind::Barrier { group } = op.kind {
                let n = job.trace.ranks.len() as u32;
                let (comm, size) = match local.checked_div(group) {
                    None => (0, n),
                    Some(comm) => (comm, group.min(n - comm * group)),
                };
                let key = (job_idx, comm);
                let b = self.barriers.entry(key).or_insert(Barrier { arrived: 0, waiting: Vec::new() });
                b.arrived += 1;
                b.waiting.push(rank);
                if b.arrived == size {
                    let b = self.barriers.remove(&key).expect("barrier present");
                    for r in b.waiting {
                        let rs = &mut self.ranks[r as usize];
                        rs.next += 1;
                        rs.free_at = self.now;
                        rs.prev_recorded_end = Some(op.end);
                        work.push(r);
                    }
                }
                continue;
            }
            let due = match (job.timing, self.ranks[rank as usize].prev_recorded_end) {
                (Timing::Simulated, Some(prev_end)) => self.ranks[rank as usize].free_at + (op.start - prev_end).max(0.0),
                // Recorded timing, or the rank's first operation: the time before it is compute.
                _ => job.start + op.start,
            };
            if due > self.now + EPS_T {
                self.push_timer(due, rank, TimerKind::Wake);
                continue;
            }
            // Gather the run of already-due ops to issue as one flow: under simulated timing
            // those that followed the previous one without a compute gap, under recorded timing
            // those whose recorded start has passed.
            let mut end = next + 1;
            if self.params.merge_due_ops {
                while end < ops.len() {
                    let (prev, o) = (&ops[end - 1], &ops[end]);
                    let due = match job.timing {
                        Timing::Simulated => o.start - prev.end <= EPS_T,
                        Timing::Recorded => job.start + o.start <= self.now + EPS_T,
                    };
                    if o.kind != op.kind || o.phase != op.phase || !due {
                        break;
                    }
                    end += 1;
                }
            }
            let batch: &[Op] = &ops[next..end];
            let bytes: f64 = batch.iter().map(|o| o.size as f64).sum();
            self.open_phase(rank, op.phase, bytes);
            let (prepared, latency) = self.prepare(job_idx, node, job.target, batch);
            let rs = &mut self.ranks[rank as usize];
            rs.next = end;
            rs.issued = self.now;
            rs.prev_recorded_end = Some(ops[end - 1].end);
            if latency > 0.0 {
                self.ranks[rank as usize].pending = Some(prepared);
                self.push_timer(self.now + latency, rank, TimerKind::Transfer);
            } else if prepared.bytes <= 0.0 || prepared.uses.is_empty() {
                self.op_done(rank);
                work.push(rank);
            } else {
                self.start_flow(rank, prepared);
            }
        }
    }

    fn open_phase(&mut self, rank: u32, phase: u32, bytes: f64) {
        let rs = &mut self.ranks[rank as usize];
        match &mut rs.phase {
            Some(p) if p.id == phase => p.bytes += bytes,
            _ => {
                self.close_phase(rank);
                self.ranks[rank as usize].phase = Some(OpenPhase { id: phase, start: self.now, bytes, busy: 0.0 });
            }
        }
    }

    fn close_phase(&mut self, rank: u32) {
        let rs = &mut self.ranks[rank as usize];
        if let Some(p) = rs.phase.take() {
            self.phases.push(PhaseRecord {
                job: rs.job,
                rank: rs.local,
                node: rs.node,
                phase: p.id,
                start: p.start,
                end: rs.last_end.max(p.start),
                bytes: p.bytes,
                busy: p.busy,
            });
        }
    }

    /// Resources and weights for a run of ops of one rank; returns the flow and its latency.
    fn prepare(&mut self, job: u32, node: u32, target: Target, ops: &[Op]) -> (Prepared, f64) {
        let bytes: f64 = ops.iter().map(|o| o.size as f64).sum();
        let write = ops[0].kind == OpKind::Write;
        let traffic = &mut self.traffic[job as usize];
        traffic.bytes += bytes;
        traffic.flows += 1;
        traffic.ops += ops.len() as u64;
        if bytes <= 0.0 {
            return (Prepared { bytes: 0.0, uses: Vec::new() }, 0.0);
        }
        if target == Target::Bb && self.net.placement == Placement::NodeLocal {
            let (wc, rc, overhead) = self.net.node_cost;
            let per_byte = if write { wc } else { rc } + ops.len() as f64 * overhead / bytes;
            return (Prepared { bytes, uses: vec![(self.net.node_devices[node as usize], per_byte)] }, 0.0);
        }
        let net = self.net;
        let tier: &StorageTier = match target {
            Target::Bb => net.bb.as_ref().expect("remote placement has BB servers"),
            Target::Pfs => net.pfs.as_ref().expect("checked in Engine::new"),
        };
        let k = tier.stripe_count.min(tier.terminals.len());
        let mut slot_bytes = vec![0.0f64; k];
        let mut slot_ops = vec![0.0f64; k];
        for o in ops {
            split_stripes(o.offset, o.size, tier.stripe_size as u64, o.file as u64, &mut slot_bytes, &mut slot_ops);
        }
        let home = tier.home[node as usize] as usize;
        let src = node;
        self.scratch.clear();
        let mut max_hops = 0;
        for s in 0..k {
            if slot_bytes[s] <= 0.0 {
                continue;
            }
            let frac = slot_bytes[s] / bytes;
            let server = (home + s) % tier.terminals.len();
            let dst = tier.terminals[server];
            self.route.links.clear();
            self.route.nonminimal = false;
            let (a, b) = if write { (src, dst) } else { (dst, src) };
            // How long the flow would take if the path between its end points were idle: an
            // equal share of the node link, the server link and the server's devices, which
            // the path does not change. Adaptive routing weighs path backlogs against it.
            let device = tier.devices.get(server).map(|&d| (d, frac * if write { tier.write_cost } else { tier.read_cost }));
            let ends = [
                (net.terminals[a as usize].up, if write { 1.0 } else { frac }),
                (net.terminals[b as usize].down, if write { frac } else { 1.0 }),
            ];
            let rate = ends
                .into_iter()
                .chain(device)
                .map(|(r, w)| self.cap[r as usize] / (self.load[r as usize] + w))
                .fold(f64::INFINITY, f64::min);
            let load = LinkLoad { backlog: &self.backlog, bytes: slot_bytes[s], alone: bytes / rate };
            net.route(a, b, &load, &mut self.rng, &mut self.route);
            for &l in &self.route.links {
                self.scratch.push((l, frac));
            }
            let traffic = &mut self.traffic[job as usize];
            traffic.hop_bytes += slot_bytes[s] * self.route.hops as f64;
            if self.route.nonminimal {
                traffic.nonminimal_bytes += slot_bytes[s];
            }
            max_hops = max_hops.max(self.route.hops);
            if let Some(&dev) = tier.devices.get(server) {
                let cost = if write { tier.write_cost } else { tier.read_cost };
                self.scratch.push((dev, frac * cost + slot_ops[s] * tier.op_overhead / bytes));
            }
            if let Some((backend, cost)) = tier.backend {
                self.scratch.push((backend, frac * cost + slot_ops[s] * tier.op_overhead / bytes));
            }
        }
        // Bytes of files other ranks also use move at the tier's shared-file share of the rate
        // (every resource of the flow is held proportionally longer).
        let efficiency = if write { tier.shared_efficiency.0 } else { tier.shared_efficiency.1 };
        if efficiency != 1.0 {
            let shared = &self.shared_files[job as usize];
            let shared_bytes: f64 = ops.iter().filter(|o| shared.contains(&o.file)).map(|o| o.size as f64).sum();
            let factor = 1.0 + shared_bytes / bytes * (1.0 / efficiency - 1.0);
            for u in self.scratch.iter_mut() {
                u.1 *= factor;
            }
        }
        self.scratch.sort_unstable_by_key(|u| u.0);
        let mut uses: Vec<(u32, f64)> = Vec::with_capacity(self.scratch.len());
        for &(r, w) in &self.scratch {
            match uses.last_mut() {
                Some(last) if last.0 == r => last.1 += w,
                _ => uses.push((r, w)),
            }
        }
        // Routing sees a flow from the moment it is routed (not after its latency), so that
        // ranks deciding in the same burst see each other's choices.
        for &(r, w) in &uses {
            self.load[r as usize] += w;
        }
        for &(r, w) in &uses {
            self.backlog[r as usize] += w * bytes;
        }
        // Each op pays a request/acknowledgement round trip over the longest stripe path.
        let latency = ops.len() as f64 * 2.0 * max_hops as f64 * self.net.link_latency;
        (Prepared { bytes, uses }, latency)
    }

    /// Weighted max-min fair rates (progressive filling) over the component of flows connected
    /// to the resources touched since the last call.
    fn recompute(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        self.epoch += 1;
        let epoch = self.epoch;
        let mut queue: Vec<u32> = Vec::new();
        for &r in &self.dirty {
            if self.res_stamp[r as usize] != epoch {
                self.res_stamp[r as usize] = epoch;
                queue.push(r);
            }
        }
        self.dirty.clear();
        let mut comp: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < queue.len() {
            let r = queue[i] as usize;
            i += 1;
            for &(f, _) in &self.res_flows[r] {
                if self.flow_stamp[f as usize] == epoch {
                    continue;
                }
                self.flow_stamp[f as usize] = epoch;
                comp.push(f);
                for &(r2, _) in &self.flows[f as usize].as_ref().expect("live").uses {
                    if self.res_stamp[r2 as usize] != epoch {
                        self.res_stamp[r2 as usize] = epoch;
                        queue.push(r2);
                    }
                }
            }
        }
        if comp.is_empty() {
            return;
        }
        self.stats.recomputations += 1;
        self.stats.flow_updates += comp.len() as u64;
        for &f in &comp {
            self.settle(f);
        }
        let mut heap: BinaryHeap<Reverse<(Time, u32, u8)>> = BinaryHeap::with_capacity(queue.len());
        for &r in &queue {
            let r = r as usize;
            let list = &self.res_flows[r];
            self.used[r] = 0.0;
            self.wsum[r] = list.iter().map(|u| u.1).sum();
            self.unfrozen[r] = list.len() as u32;
            if !list.is_empty() {
                heap.push(Reverse((Time(self.cap[r] / self.wsum[r]), r as u32, 0)));
            }
        }
        // Freezing a flow at the current level never lowers another resource's fair share, so
        // heap keys are lower bounds: re-check the popped resource and re-queue it if stale
        // instead of pushing an update for every resource a frozen flow crosses.
        while let Some(Reverse((key, r, _))) = heap.pop() {
            let r = r as usize;
            if self.unfrozen[r] == 0 {
                continue;
            }
            let level = (self.cap[r] - self.used[r]).max(0.0) / self.wsum[r].max(f64::MIN_POSITIVE);
            if level > key.0 * (1.0 + 1e-12) {
                if let Some(Reverse((next, ..))) = heap.peek() {
                    if level > next.0 {
                        heap.push(Reverse((Time(level), r as u32, 0)));
                        continue;
                    }
                }
            }
            for idx in 0..self.res_flows[r].len() {
                let f = self.res_flows[r][idx].0 as usize;
                if self.frozen[f] == epoch {
                    continue;
                }
                self.frozen[f] = epoch;
                let flow = self.flows[f].as_mut().expect("live");
                flow.rate = level;
                for &(r2, w2) in &flow.uses {
                    let r2 = r2 as usize;
                    self.used[r2] += w2 * level;
                    self.wsum[r2] -= w2;
                    self.unfrozen[r2] -= 1;
                }
            }
        }
        for &r in &queue {
            self.alloc[r as usize] = self.used[r as usize];
        }
        for &f in &comp {
            let flow = self.flows[f as usize].as_mut().expect("live");
            flow.version = flow.version.wrapping_add(1);
            let end = if flow.rate > 0.0 { self.now + flow.remaining / flow.rate } else { f64::INFINITY };
            self.finish.push(Reverse((Time(end), f, flow.version)));
        }
        self.drop_stale_finishes();
    }

    /// Every change of a flow's rate leaves its projected end behind in `finish`, discarded
    /// only when it comes to the top; with many flows re-rated at every recomputation they
    /// outnumber the live ones by orders of magnitude and every pop pays for them. Past
    /// [`STALE_FINISHES`] entries per live flow, they are dropped in one pass (amortized: the
    /// heap at least doubles between passes).
    fn drop_stale_finishes(&mut self) {
        let live = self.flows.len() - self.free_flows.len();
        if self.finish.len() <= STALE_FINISHES * live + 1024 {
            return;
        }
        let flows = &self.flows;
        self.finish.retain(|Reverse((_, f, version))| flows[*f as usize].as_ref().is_some_and(|flow| flow.version == *version));
    }
}

/// See [`Engine::drop_stale_finishes`].
const STALE_FINISHES: usize = 4;

/// Adds the bytes and operation counts of [offset, offset+size) of a file striped round-robin
/// (stripe `ss`, first stripe on slot `file mod K`) to the K slots.
fn split_stripes(offset: u64, size: u64, ss: u64, file: u64, bytes: &mut [f64], ops: &mut [f64]) {
    if size == 0 {
        return;
    }
    let k = bytes.len() as u64;
    let slot = |stripe: u64| ((stripe + file) % k) as usize;
    let first = offset / ss;
    let last = (offset + size - 1) / ss;
    if first == last {
        bytes[slot(first)] += size as f64;
        ops[slot(first)] += 1.0;
        return;
    }
    bytes[slot(first)] += (ss - offset % ss) as f64;
    ops[slot(first)] += 1.0;
    bytes[slot(last)] += (offset + size - last * ss) as f64;
    ops[slot(last)] += 1.0;
    let full = last - first - 1;
    let rounds = full / k;
    for s in 0..k as usize {
        bytes[s] += (rounds * ss) as f64;
        ops[s] += rounds as f64;
    }
    for i in 0..full % k {
        bytes[slot(first + 1 + i)] += ss as f64;
        ops[slot(first + 1 + i)] += 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::split_stripes;

    #[test]
    fn stripes_split_exactly() {
        let mut b = vec![0.0; 4];
        let mut o = vec![0.0; 4];
        split_stripes(100, 1000, 128, 0, &mut b, &mut o);
        assert_eq!(b.iter().sum::<f64>(), 1000.0);
        // stripes 0..=8: slot 0 gets stripes 0,4,8
        assert_eq!(o, vec![3.0, 2.0, 2.0, 2.0]);
        assert_eq!(b[0], 28.0 + 128.0 + (1100 - 1024) as f64);
    }
}
