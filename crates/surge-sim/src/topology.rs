//! Network model: the resources (links, devices) a flow can cross, where compute nodes, BB
//! servers and PFS gateways attach, and routing between them.
//!
//! Links are modelled as directional capacities. Parallel links between two switch layers of a
//! fat-tree are merged into one trunk per switch and direction (flow-level: ECMP is assumed to
//! spread flows evenly), which keeps the resource count linear in the number of switches.
//! Dragonfly links are kept individually (router-to-router local links, numbered global
//! channels) because which channel a flow takes is what adaptive routing is about.

use crate::system::{parse_ratio, Placement, Routing, SystemConfig};
use anyhow::Result;

/// What a resource is; `a`, `b`, `c` are kind-specific coordinates used for naming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResKind {
    /// Terminal to switch (injection) link of a compute node, BB server or PFS gateway.
    TerminalUp,
    TerminalDown,
    EdgeUp,
    EdgeDown,
    PodUp,
    PodDown,
    LocalLink,
    GlobalLink,
    TorusLink,
    /// Devices inside a compute node (node-local BB); capacity counted in devices.
    NodeDevice,
    /// Devices inside a BB server.
    ServerDevice,
    /// The storage behind the PFS gateways.
    PfsStorage,
}

impl ResKind {
    pub fn name(self) -> &'static str {
        match self {
            ResKind::TerminalUp => "terminal-up",
            ResKind::TerminalDown => "terminal-down",
            ResKind::EdgeUp => "edge-up",
            ResKind::EdgeDown => "edge-down",
            ResKind::PodUp => "pod-up",
            ResKind::PodDown => "pod-down",
            ResKind::LocalLink => "local-link",
            ResKind::GlobalLink => "global-link",
            ResKind::TorusLink => "torus-link",
            ResKind::NodeDevice => "node-device",
            ResKind::ServerDevice => "bb-server-device",
            ResKind::PfsStorage => "pfs-storage",
        }
    }
    /// Devices are counted in device-seconds per second, links in bytes per second.
    pub fn is_device(self) -> bool {
        matches!(self, ResKind::NodeDevice | ResKind::ServerDevice | ResKind::PfsStorage)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Resource {
    pub kind: ResKind,
    pub capacity: f64,
    pub a: u32,
    pub b: u32,
    pub c: u32,
}

impl Resource {
    pub fn label(&self) -> String {
        match self.kind {
            ResKind::LocalLink => format!("{} g{} r{}->r{}", self.kind.name(), self.a, self.b, self.c),
            ResKind::GlobalLink => format!("{} g{}->g{} #{}", self.kind.name(), self.a, self.b, self.c),
            ResKind::TorusLink => format!("{} r{} {}", self.kind.name(), self.a, ["+x", "-x", "+y", "-y", "+z", "-z"][self.b as usize]),
            ResKind::PfsStorage => self.kind.name().to_string(),
            _ => format!("{} {}", self.kind.name(), self.a),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Compute,
    BbServer,
    PfsGateway,
}

#[derive(Debug, Clone, Copy)]
pub struct Terminal {
    pub role: Role,
    /// Edge switch (fat-tree) or router (dragonfly, torus) index.
    pub switch: u32,
    pub up: u32,
    pub down: u32,
}

#[derive(Debug, Clone)]
enum Fabric {
    FatTree { switches_per_pod: u32, edge_up: u32, edge_down: u32, pod_up: u32, pod_down: u32 },
    Dragonfly { groups: u32, routers: u32, global_per_router: u32, channels: u32, local_base: u32, global_base: u32, routing: Routing },
    Torus { dims: [u32; 3], base: u32 },
}

/// A set of BB servers or PFS gateways that operations stripe over.
#[derive(Debug, Clone)]
pub struct StorageTier {
    pub terminals: Vec<u32>,
    /// Device resource of each server (same order as `terminals`).
    pub devices: Vec<u32>,
    /// Index into `terminals` of each compute node's first stripe target.
    pub home: Vec<u32>,
    pub stripe_count: usize,
    pub stripe_size: f64,
    /// Device seconds per byte for writes and reads, and device seconds per operation.
    pub write_cost: f64,
    pub read_cost: f64,
    pub op_overhead: f64,
    /// Shared backend resource every operation also crosses (the PFS storage), with its cost per byte.
    pub backend: Option<(u32, f64)>,
    /// Bandwidth share of a file several ranks write (N-1), and read, relative to a file per rank.
    pub shared_efficiency: (f64, f64),
}

#[derive(Debug, Clone)]
pub struct Network {
    pub resources: Vec<Resource>,
    pub terminals: Vec<Terminal>,
    pub compute_nodes: usize,
    pub link_latency: f64,
    pub placement: Placement,
    /// Node-local devices: resource per compute node, device seconds per byte (write, read), per op.
    pub node_devices: Vec<u32>,
    pub node_cost: (f64, f64, f64),
    pub bb: Option<StorageTier>,
    pub pfs: Option<StorageTier>,
    fabric: Fabric,
}

/// A route: resources crossed (terminal links included), links traversed, whether non-minimal.
#[derive(Debug, Clone, Default)]
pub struct Route {
    pub links: Vec<u32>,
    pub hops: u32,
    pub nonminimal: bool,
}

/// What adaptive routing sees of the network when it routes one stripe of a flow: the fluid
/// counterpart of a router's queues. `backlog` holds, per resource, the bytes routed over it
/// and not yet carried; `bytes` is what the stripe adds to each link of its path and `alone`
/// how long the stripe takes at the rate its end points (node link, server link, devices)
/// allow it.
pub struct LinkLoad<'a> {
    pub backlog: &'a [f64],
    pub bytes: f64,
    pub alone: f64,
}

impl LinkLoad<'_> {
    /// Expected time for the stripe on a path: its own time, or the time the path's most
    /// backlogged link needs to carry what it already holds plus the stripe, whichever is
    /// longer. On an idle or lightly used path this is the stripe's own time, as a router
    /// sees empty queues however many flows cross it.
    fn of_path(&self, resources: &[Resource], links: &[u32]) -> f64 {
        links.iter().map(|&l| (self.backlog[l as usize].max(0.0) + self.bytes) / resources[l as usize].capacity).fold(self.alone, f64::max)
    }

    /// Hop penalty of a path: each link's backlog (beyond the stripe's own time) is a queue
    /// the stripe meets at that hop, so the delays add up along the path.
    fn delay(&self, resources: &[Resource], links: &[u32]) -> f64 {
        self.alone
            + links
                .iter()
                .map(|&l| ((self.backlog[l as usize].max(0.0) + self.bytes) / resources[l as usize].capacity - self.alone).max(0.0))
                .sum::<f64>()
    }
}

/// Small deterministic generator (splitmix64), enough for placement and routing choices.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Builder {
    resources: Vec<Resource>,
    terminals: Vec<Terminal>,
}

impl Builder {
    fn add(&mut self, kind: ResKind, capacity: f64, a: usize, b: usize, c: usize) -> u32 {
        self.resources.push(Resource { kind, capacity, a: a as u32, b: b as u32, c: c as u32 });
        (self.resources.len() - 1) as u32
    }
    /// Adds `count` resources of one kind numbered 0..count; returns the first id.
    fn add_range(&mut self, kind: ResKind, capacity: f64, count: usize) -> u32 {
        let first = self.resources.len() as u32;
        for i in 0..count {
            self.add(kind, capacity, i, 0, 0);
        }
        first
    }
    fn terminal(&mut self, role: Role, switch: usize, bw: f64) -> u32 {
        let id = self.terminals.len();
        let up = self.add(ResKind::TerminalUp, bw, id, 0, 0);
        let down = self.add(ResKind::TerminalDown, bw, id, 0, 0);
        self.terminals.push(Terminal { role, switch: switch as u32, up, down });
        id as u32
    }
}

/// Where the extra (BB, PFS) terminals go: a function from server index to switch index,
/// plus the number of switches the fabric must have in total.
struct Layout {
    compute_switches: usize,
    nodes_per_switch: usize,
    /// Switches appended after the compute switches (fat-tree edges, dragonfly routers).
    extra_switch_base: usize,
}

impl Network {
    pub fn build(sys: &SystemConfig, placement: Placement) -> Result<Network> {
        let net = &sys.network;
        let bb = &sys.burst_buffer;
        let inj = net.injection_bw.0;
        let mut b = Builder { resources: Vec::new(), terminals: Vec::new() };

        let layout = if let Some(ft) = &net.fat_tree {
            Layout { compute_switches: ft.compute_switches, nodes_per_switch: ft.nodes_per_switch, extra_switch_base: ft.compute_switches }
        } else if let Some(df) = &net.dragonfly {
            let routers = df.groups * df.routers_per_group;
            Layout { compute_switches: routers, nodes_per_switch: df.nodes_per_router, extra_switch_base: routers }
        } else {
            let t = net.torus.as_ref().expect("one topology");
            let routers: usize = t.dims.iter().product();
            Layout { compute_switches: routers, nodes_per_switch: t.nodes_per_router, extra_switch_base: routers }
        };
        let is_torus = net.torus.is_some();
        let compute_nodes = layout.compute_switches * layout.nodes_per_switch;
        for node in 0..compute_nodes {
            b.terminal(Role::Compute, node / layout.nodes_per_switch, inj);
        }

        // Extra switches are appended for global BB servers and PFS gateways, except on a torus,
        // whose size is fixed. There, global BB servers take a block of consecutive routers at
        // the end of the machine (its last planes, as I/O nodes sit on one side of a real
        // torus), so their traffic converges as it does on dedicated switches; PFS gateways
        // attach to routers spread evenly over the machine. (Spreading the BB servers too
        // would put them on the very routers grouped placement uses, and with the same
        // nearest-server mapping the two placements would be the same system.)
        let mut next_switch = layout.extra_switch_base;
        //
        // Consecutive servers go to different dedicated switches (round-robin). A job's nodes
        // map to a block of consecutive servers in proportion to its size (`spread_home`: a
        // job gets its share of the pool, as on a machine full of jobs), and round-robin
        // spreads that share over all the dedicated switches instead of filling a few of them:
        // on the dragonfly, over every BB group and its global channels.
        let mut place_dedicated = |count: usize, per_switch: usize, spread: Option<f64>| -> Vec<usize> {
            let switches = count.div_ceil(per_switch);
            let routers = layout.compute_switches;
            let out = (0..count)
                .map(|i| match (is_torus, spread) {
                    (true, Some(phase)) => ((((i / per_switch) as f64 + phase) * routers as f64 / switches as f64) as usize) % routers,
                    (true, None) => (routers - switches.min(routers) + i % switches) % routers,
                    (false, _) => next_switch + i % switches,
                })
                .collect();
            if !is_torus {
                next_switch += switches;
            }
            out
        };

        let mut node_devices = Vec::new();
        let mut node_cost = (0.0, 0.0, bb.op_overhead.0);
        let mut bb_tier = None;
        match placement {
            Placement::NodeLocal => {
                let c = bb.node_local.as_ref().ok_or_else(|| anyhow::anyhow!("system has no [burst_buffer.node_local]"))?;
                for node in 0..compute_nodes {
                    node_devices.push(b.add(ResKind::NodeDevice, c.devices_per_node as f64, node, 0, 0));
                }
                node_cost = (1.0 / c.device.write_bw.0, 1.0 / c.device.read_bw.0, bb.op_overhead.0);
            }
            Placement::Grouped | Placement::Global => {
                let (switches, devices, device, nic) = if placement == Placement::Grouped {
                    let c = bb.grouped.as_ref().ok_or_else(|| anyhow::anyhow!("system has no [burst_buffer.grouped]"))?;
                    let sw: Vec<usize> = (0..layout.compute_switches).step_by(c.every).collect();
                    (sw, c.devices_per_server, c.device, c.nic_bw.map_or(inj, |r| r.0))
                } else {
                    let c = bb.global.as_ref().ok_or_else(|| anyhow::anyhow!("system has no [burst_buffer.global]"))?;
                    (place_dedicated(c.servers, c.servers_per_switch, None), c.devices_per_server, c.device, c.nic_bw.map_or(inj, |r| r.0))
                };
                let mut terminals = Vec::new();
                let mut devs = Vec::new();
                for (i, &sw) in switches.iter().enumerate() {
                    terminals.push(b.terminal(Role::BbServer, sw, nic));
                    devs.push(b.add(ResKind::ServerDevice, devices as f64, i, 0, 0));
                }
                let home = if placement == Placement::Grouped {
                    let every = bb.grouped.as_ref().map_or(1, |c| c.every);
                    (0..compute_nodes).map(|n| ((n / layout.nodes_per_switch) / every) as u32).collect()
                } else {
                    spread_home(compute_nodes, terminals.len())
                };
                bb_tier = Some(StorageTier {
                    terminals,
                    devices: devs,
                    home,
                    stripe_count: bb.stripe_count,
                    stripe_size: bb.stripe_size.0,
                    write_cost: 1.0 / device.write_bw.0,
                    read_cost: 1.0 / device.read_bw.0,
                    op_overhead: bb.op_overhead.0,
                    backend: None,
                    shared_efficiency: (bb.shared_write_efficiency, bb.shared_read_efficiency),
                });
            }
        }

        let pfs_tier = match &sys.pfs {
            None => None,
            Some(p) => {
                let switches = place_dedicated(p.gateways, p.gateways_per_switch, Some(0.5));
                let nic = p.nic_bw.map_or(inj, |r| r.0);
                let terminals: Vec<u32> = switches.iter().map(|&sw| b.terminal(Role::PfsGateway, sw, nic)).collect();
                let storage = b.add(ResKind::PfsStorage, 1.0, 0, 0, 0);
                Some(StorageTier {
                    home: spread_home(compute_nodes, terminals.len()),
                    devices: Vec::new(),
                    terminals,
                    stripe_count: p.stripe_count,
                    stripe_size: p.stripe_size.0,
                    write_cost: 0.0,
                    read_cost: 0.0,
                    op_overhead: p.op_overhead.0,
                    backend: Some((storage, 1.0 / p.bandwidth.0)),
                    shared_efficiency: (1.0, 1.0),
                })
            }
        };
        let total_switches = next_switch;

        let fabric = if let Some(ft) = &net.fat_tree {
            let taper = parse_ratio(&ft.taper)?;
            let core_taper = parse_ratio(&ft.core_taper)?;
            let trunk = ft.nodes_per_switch as f64 * ft.link_bw.0 / taper;
            let pod_trunk = ft.switches_per_pod as f64 * trunk / core_taper;
            let pods = total_switches.div_ceil(ft.switches_per_pod);
            let edge_up = b.add_range(ResKind::EdgeUp, trunk, total_switches);
            let edge_down = b.add_range(ResKind::EdgeDown, trunk, total_switches);
            let pod_up = b.add_range(ResKind::PodUp, pod_trunk, pods);
            let pod_down = b.add_range(ResKind::PodDown, pod_trunk, pods);
            Fabric::FatTree { switches_per_pod: ft.switches_per_pod as u32, edge_up, edge_down, pod_up, pod_down }
        } else if let Some(df) = &net.dragonfly {
            let a = df.routers_per_group;
            let groups = total_switches.div_ceil(a);
            let channels = df.channels_per_group_pair;
            // Global ports needed per router so that every group pair gets its channels.
            let global_per_router = (channels * (groups.max(2) - 1)).div_ceil(a);
            let local_base = b.resources.len() as u32;
            for g in 0..groups {
                for r1 in 0..a {
                    for r2 in 0..a {
                        b.add(ResKind::LocalLink, df.local_bw.0, g, r1, r2);
                    }
                }
            }
            let global_base = b.resources.len() as u32;
            for g1 in 0..groups {
                for g2 in 0..groups {
                    for m in 0..channels {
                        b.add(ResKind::GlobalLink, df.global_bw.0, g1, g2, m);
                    }
                }
            }
            Fabric::Dragonfly {
                groups: groups as u32,
                routers: a as u32,
                global_per_router: global_per_router as u32,
                channels: channels as u32,
                local_base,
                global_base,
                routing: df.routing,
            }
        } else {
            let t = net.torus.as_ref().expect("one topology");
            let base = b.resources.len() as u32;
            let routers: usize = t.dims.iter().product();
            for r in 0..routers {
                for dir in 0..6 {
                    b.add(ResKind::TorusLink, t.link_bw.0, r, dir, 0);
                }
            }
            Fabric::Torus { dims: t.dims.map(|d| d as u32), base }
        };

        Ok(Network {
            resources: b.resources,
            terminals: b.terminals,
            compute_nodes,
            link_latency: net.link_latency.0,
            placement,
            node_devices,
            node_cost,
            bb: bb_tier,
            pfs: pfs_tier,
            fabric,
        })
    }

    /// Routes from terminal `src` to terminal `dst`, appending resources to `route.links`.
    /// `load` is what adaptive routing compares paths on.
    pub fn route(&self, src: u32, dst: u32, load: &LinkLoad, rng: &mut Rng, route: &mut Route) {
        let s = self.terminals[src as usize];
        let d = self.terminals[dst as usize];
        route.links.push(s.up);
        let mut hops = 2;
        match &self.fabric {
            Fabric::FatTree { switches_per_pod, edge_up, edge_down, pod_up, pod_down } => {
                if s.switch != d.switch {
                    route.links.push(edge_up + s.switch);
                    hops += 2;
                    let (ps, pd) = (s.switch / switches_per_pod, d.switch / switches_per_pod);
                    if ps != pd {
                        route.links.push(pod_up + ps);
                        route.links.push(pod_down + pd);
                        hops += 2;
                    }
                    route.links.push(edge_down + d.switch);
                }
            }
            Fabric::Dragonfly { .. } => hops += self.route_dragonfly(s.switch, d.switch, load, rng, route),
            Fabric::Torus { dims, base } => hops += route_torus(*dims, *base, s.switch, d.switch, &mut route.links),
        }
        route.links.push(d.down);
        route.hops = hops;
    }

    fn route_dragonfly(&self, src_router: u32, dst_router: u32, load: &LinkLoad, rng: &mut Rng, route: &mut Route) -> u32 {
        let Fabric::Dragonfly { groups, routers, global_per_router, channels, local_base, global_base, routing } = self.fabric else {
            unreachable!()
        };
        let (g1, r1) = (src_router / routers, src_router % routers);
        let (g2, r2) = (dst_router / routers, dst_router % routers);
        let local = |g: u32, a: u32, b: u32| local_base + (g * routers + a) * routers + b;
        // Port numbering: port q of a group sits on router q / h and leads to the group at
        // offset (q mod (G-1)) + 1; channel m of a group pair uses port m*(G-1) + offset - 1.
        let endpoint = |from: u32, to: u32, m: u32| {
            let d = (to + groups - from) % groups;
            (m * (groups - 1) + d - 1) / global_per_router
        };
        let global = |from: u32, to: u32, m: u32| global_base + (from * groups + to) * channels + m;
        // Appends the path from (ga, ra) to (gb, rb) through one global channel; returns router hops.
        let segment = |ga: u32, ra: u32, gb: u32, rb: u32, m: u32, out: &mut Vec<u32>| -> u32 {
            let mut h = 0;
            if ga == gb {
                if ra != rb {
                    out.push(local(ga, ra, rb));
                    h += 1;
                }
                return h;
            }
            let exit = endpoint(ga, gb, m);
            if ra != exit {
                out.push(local(ga, ra, exit));
                h += 1;
            }
            out.push(global(ga, gb, m));
            let entry = endpoint(gb, ga, m);
            if entry != rb {
                out.push(local(gb, entry, rb));
                h += 1;
            }
            h + 1
        };
        // The least loaded path from (ga, ra) to (gb, rb) over one global channel, trying the
        // channels from a random one on, so that ties (an idle network) spread at random.
        let best_segment = |ga: u32, ra: u32, gb: u32, rb: u32, rng: &mut Rng, out: &mut Vec<u32>| -> (f64, u32) {
            let first = rng.below(channels as usize) as u32;
            let mut best: Option<(f64, u32, u32)> = None;
            for i in 0..channels {
                let m = (first + i) % channels;
                out.clear();
                let h = segment(ga, ra, gb, rb, m, out);
                let l = load.of_path(&self.resources, out);
                if best.is_none_or(|b| l < b.0) {
                    best = Some((l, h, m));
                }
                if ga == gb {
                    break;
                }
            }
            let (l, h, m) = best.expect("at least one channel");
            out.clear();
            segment(ga, ra, gb, rb, m, out);
            (l, h)
        };
        let start = route.links.len();
        if routing == Routing::Minimal || g1 == g2 || groups < 3 {
            // Oblivious minimal routing: a random one of the global channels between the groups.
            let m = rng.below(channels as usize) as u32;
            return segment(g1, r1, g2, r2, m, &mut route.links);
        }
        // Adaptive: the least loaded of the minimal paths (one per global channel of the group
        // pair; routers choose among their minimal ports by load too) ...
        let mut path = Vec::with_capacity(8);
        let (_, hops_min) = best_segment(g1, r1, g2, r2, rng, &mut path);
        route.links.extend_from_slice(&path);
        // ... against the best of a few Valiant paths through random intermediate groups, each
        // leg on its least loaded channel, taken when its delay is lower than the minimal
        // path's. This is UGAL with load in place of queues: UGAL weighs the first hop's queue
        // times the hop count, an estimate of the queueing along the whole path; here every
        // hop's backlog is known, so the penalty of a longer path is the sum of the delays at
        // each of its hops (`LinkLoad::delay`). The load is bytes waiting, not a count of
        // flows: flows held back elsewhere (by a server or its devices) leave a crowded link
        // idle, and a path without backlog costs only the stripe's own time, so the minimal
        // path wins whenever it is not backed up.
        let mut best_nm: Option<(f64, u32, Vec<u32>)> = None;
        let mut leg = Vec::with_capacity(4);
        for _ in 0..VALIANT_CANDIDATES {
            let mut gi = rng.below(groups as usize - 2) as u32;
            for g in [g1.min(g2), g1.max(g2)] {
                if gi >= g {
                    gi += 1;
                }
            }
            path.clear();
            // First leg: to whichever router of the intermediate group the chosen channel
            // reaches, so each channel is tried with its own entry router.
            let mut best_first: Option<(f64, u32, u32, Vec<u32>)> = None;
            for m in 0..channels {
                leg.clear();
                let entry = endpoint(gi, g1, m);
                let h = segment(g1, r1, gi, entry, m, &mut leg);
                let l = load.of_path(&self.resources, &leg);
                if best_first.as_ref().is_none_or(|b| l < b.0) {
                    best_first = Some((l, h, entry, leg.clone()));
                }
            }
            let (_, h1, entry, first_leg) = best_first.expect("at least one channel");
            let (_, h2) = best_segment(gi, entry, g2, r2, rng, &mut leg);
            path.extend_from_slice(&first_leg);
            path.extend_from_slice(&leg);
            let hops = h1 + h2;
            let cost = load.delay(&self.resources, &path);
            if best_nm.as_ref().is_none_or(|b| cost < b.0) {
                best_nm = Some((cost, hops, path.clone()));
            }
        }
        let (cost_nm, hops_nm, alt) = best_nm.expect("at least one candidate");
        if cost_nm < load.delay(&self.resources, &route.links[start..]) {
            route.links.truncate(start);
            route.links.extend_from_slice(&alt);
            route.nonminimal = true;
            hops_nm
        } else {
            hops_min
        }
    }

    pub fn switch_count_label(&self) -> String {
        match &self.fabric {
            Fabric::FatTree { .. } => "edge switches".into(),
            Fabric::Dragonfly { groups, .. } => format!("{groups} dragonfly groups"),
            Fabric::Torus { dims, .. } => format!("{}x{}x{} torus", dims[0], dims[1], dims[2]),
        }
    }
}

/// Valiant paths adaptive dragonfly routing compares with the best minimal one (Aries
/// routers likewise weigh a few random non-minimal candidates per packet).
const VALIANT_CANDIDATES: usize = 4;

/// Maps compute nodes evenly onto `servers` targets (node i -> server i*S/N).
fn spread_home(nodes: usize, servers: usize) -> Vec<u32> {
    (0..nodes).map(|n| (n * servers / nodes.max(1)) as u32).collect()
}

/// Dimension-order routing on a 3-D torus, shortest way round each ring.
fn route_torus(dims: [u32; 3], base: u32, src: u32, dst: u32, out: &mut Vec<u32>) -> u32 {
    let coords = |r: u32| [r % dims[0], (r / dims[0]) % dims[1], r / (dims[0] * dims[1])];
    let index = |c: [u32; 3]| c[0] + dims[0] * (c[1] + dims[1] * c[2]);
    let mut cur = coords(src);
    let target = coords(dst);
    let mut hops = 0;
    for dim in 0..3 {
        let n = dims[dim];
        let forward = (target[dim] + n - cur[dim]) % n;
        let (steps, dir) = if forward <= n - forward { (forward, 0) } else { (n - forward, 1) };
        for _ in 0..steps {
            out.push(base + index(cur) * 6 + (dim as u32) * 2 + dir);
            cur[dim] = if dir == 0 { (cur[dim] + 1) % n } else { (cur[dim] + n - 1) % n };
            hops += 1;
        }
    }
    hops
}
