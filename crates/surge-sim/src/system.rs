//! System description: network topology, burst-buffer placement, PFS, simulation knobs,
//! optional calibration from measurements of a real Surge instance.
//!
//! One file describes all three burst-buffer placements of a machine (sections
//! `[burst_buffer.node_local]`, `[burst_buffer.grouped]`, `[burst_buffer.global]`); `placement`
//! picks the default and `surge sim run --placement` overrides it, so a sweep over placements
//! needs one file per machine, not one per combination.

use crate::units::{Bytes, Rate, Seconds};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub network: NetworkConfig,
    pub burst_buffer: BurstBufferConfig,
    pub pfs: Option<PfsConfig>,
    #[serde(default)]
    pub sim: SimParams,
    pub calibration: Option<CalibrationRef>,
    /// Price list (path relative to this file) used for the CAPEX/OPEX table.
    pub prices: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Bandwidth of a compute node's link into its switch/router (each direction).
    pub injection_bw: Rate,
    /// Latency per link traversed (switch + wire), added once per operation.
    #[serde(default)]
    pub link_latency: Seconds,
    pub fat_tree: Option<FatTreeConfig>,
    pub dragonfly: Option<DragonflyConfig>,
    pub torus: Option<TorusConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FatTreeConfig {
    /// Edge switches that hold compute nodes.
    pub compute_switches: usize,
    pub nodes_per_switch: usize,
    /// Edge switches per pod (sharing one aggregation layer).
    pub switches_per_pod: usize,
    pub link_bw: Rate,
    /// Edge-level taper "down:up", e.g. "2:1" = half as much uplink as downlink bandwidth.
    #[serde(default = "default_ratio")]
    pub taper: String,
    /// Taper between the aggregation and core layers.
    #[serde(default = "default_ratio")]
    pub core_taper: String,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    Minimal,
    /// UGAL-style, per flow stripe: the least backlogged minimal channel, or the best of a few
    /// Valiant paths through random intermediate groups when its summed per-hop delay (bytes
    /// waiting on each link over its capacity) is lower than the minimal path's.
    Adaptive,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DragonflyConfig {
    /// Groups holding compute nodes (BB/PFS groups are added on top).
    pub groups: usize,
    pub routers_per_group: usize,
    pub nodes_per_router: usize,
    /// Global channels between every pair of groups (Edison: 12). The endpoints are spread
    /// over the routers of each group.
    pub channels_per_group_pair: usize,
    pub local_bw: Rate,
    pub global_bw: Rate,
    #[serde(default = "default_routing")]
    pub routing: Routing,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorusConfig {
    pub dims: [usize; 3],
    pub nodes_per_router: usize,
    pub link_bw: Rate,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    NodeLocal,
    Grouped,
    Global,
}

impl Placement {
    pub fn parse(text: &str) -> Result<Self> {
        Ok(match text.replace('-', "_").as_str() {
            "node_local" | "local" => Placement::NodeLocal,
            "grouped" => Placement::Grouped,
            "global" => Placement::Global,
            other => bail!("unknown placement '{other}' (use node_local, grouped or global)"),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Placement::NodeLocal => "node_local",
            Placement::Grouped => "grouped",
            Placement::Global => "global",
        }
    }
    pub const ALL: [Placement; 3] = [Placement::NodeLocal, Placement::Grouped, Placement::Global];
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    pub write_bw: Rate,
    pub read_bw: Rate,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstBufferConfig {
    pub placement: Placement,
    /// Device time per operation (seek, FTL, software stack), charged on the device.
    #[serde(default)]
    pub op_overhead: Seconds,
    /// Remote placements stripe every file over this many consecutive BB servers.
    #[serde(default = "default_stripe_count")]
    pub stripe_count: usize,
    #[serde(default = "default_stripe_size")]
    pub stripe_size: Bytes,
    /// Share of the bandwidth a file written by several ranks (N-1) gets at the grouped or
    /// global servers, relative to a file per rank (N-N) over the same servers: 1 = none lost.
    /// Measured on Surge by `surge sim calibrate`.
    #[serde(default = "one_f64")]
    pub shared_write_efficiency: f64,
    /// The same for reads of a file several ranks read.
    #[serde(default = "one_f64")]
    pub shared_read_efficiency: f64,
    pub node_local: Option<NodeLocalConfig>,
    pub grouped: Option<GroupedConfig>,
    pub global: Option<GlobalConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLocalConfig {
    #[serde(default = "one")]
    pub devices_per_node: usize,
    pub device: Device,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupedConfig {
    /// One BB server per this many edge switches (fat-tree) or routers (dragonfly, torus).
    #[serde(default = "one")]
    pub every: usize,
    pub devices_per_server: usize,
    pub device: Device,
    /// Server NIC bandwidth; defaults to the node injection bandwidth.
    pub nic_bw: Option<Rate>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalConfig {
    pub servers: usize,
    /// Servers per dedicated edge switch (fat-tree) or router (dragonfly, torus).
    pub servers_per_switch: usize,
    pub devices_per_server: usize,
    pub device: Device,
    pub nic_bw: Option<Rate>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PfsConfig {
    /// I/O gateway (LNET router) nodes on dedicated switches/routers.
    pub gateways: usize,
    pub gateways_per_switch: usize,
    /// Aggregate bandwidth of the storage behind the gateways.
    pub bandwidth: Rate,
    pub nic_bw: Option<Rate>,
    #[serde(default = "default_stripe_count")]
    pub stripe_count: usize,
    #[serde(default = "default_pfs_stripe")]
    pub stripe_size: Bytes,
    #[serde(default)]
    pub op_overhead: Seconds,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimParams {
    /// Flows whose projected end lies within this fraction of their own duration of the next
    /// completion are completed together (one rate recomputation instead of many).
    #[serde(default = "default_tolerance")]
    pub completion_tolerance: f64,
    /// Issue a rank's consecutive operations that are already due as one flow (per-op latency
    /// and device overhead are kept). Cuts events by the number of ops per burst.
    #[serde(default = "yes")]
    pub merge_due_ops: bool,
    /// 0 = exact: rates are recomputed after every event batch. Otherwise full recomputations
    /// happen at most once per this much simulated time; in between, new flows get an
    /// equal-share estimate and freed capacity waits for the next recomputation. Bounds the
    /// cost of traces with many small, unmergeable operations.
    #[serde(default)]
    pub rate_quantum: crate::units::Seconds,
    #[serde(default = "one_u64")]
    pub seed: u64,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams { completion_tolerance: default_tolerance(), merge_due_ops: true, rate_quantum: Default::default(), seed: 1 }
    }
}

/// Points at figures measured on a real Surge instance (a JSON file, see docs/simulator.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationRef {
    pub from: PathBuf,
    /// Which placement's device figures the measurement replaces (default: all configured).
    pub placement: Option<Placement>,
}

/// Measured figures; every field is optional so a partial benchmark still calibrates what it can.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Calibration {
    pub source: Option<String>,
    pub device_write_bw: Option<Rate>,
    pub device_read_bw: Option<Rate>,
    pub op_overhead: Option<Seconds>,
    pub injection_bw: Option<Rate>,
    pub link_latency: Option<Seconds>,
    /// Share of a BB server's link rate Surge's data moves at, writing to it (TCP/IP framing,
    /// protocol headers, acknowledgements, round trips the write-behind window does not hide):
    /// measured by `surge sim calibrate` on servers whose links are the bottleneck. Caps each
    /// grouped or global server at this share of its NIC bandwidth (on top of its devices).
    pub write_efficiency: Option<f64>,
    /// The same for reads (data from the server).
    pub read_efficiency: Option<f64>,
    /// N-1 over N-N bandwidth measured on the same servers, writing and reading (see
    /// `burst_buffer.shared_write_efficiency`).
    pub shared_write_efficiency: Option<f64>,
    pub shared_read_efficiency: Option<f64>,
}

fn default_ratio() -> String {
    "1:1".into()
}
fn default_routing() -> Routing {
    Routing::Adaptive
}
fn default_stripe_count() -> usize {
    4
}
fn default_stripe_size() -> Bytes {
    Bytes(128.0 * 1024.0)
}
fn default_pfs_stripe() -> Bytes {
    Bytes(1024.0 * 1024.0)
}
fn default_tolerance() -> f64 {
    1e-3
}
fn one() -> usize {
    1
}
fn one_u64() -> u64 {
    1
}
fn one_f64() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

/// Parses "2:1" into 2.0 (the factor by which upward bandwidth is divided).
pub fn parse_ratio(text: &str) -> Result<f64> {
    let (a, b) = text.split_once(':').with_context(|| format!("ratio '{text}' must look like '2:1'"))?;
    let a: f64 = a.trim().parse().with_context(|| format!("bad ratio '{text}'"))?;
    let b: f64 = b.trim().parse().with_context(|| format!("bad ratio '{text}'"))?;
    if a <= 0.0 || b <= 0.0 {
        bail!("ratio '{text}' must have positive parts");
    }
    Ok(a / b)
}

impl SystemConfig {
    /// Reads a TOML system file; relative paths inside it are resolved against its directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read system file {}", path.display()))?;
        let mut sys = Self::parse(&text).with_context(|| format!("invalid system file {}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        if let Some(prices) = &mut sys.prices {
            *prices = dir.join(&*prices);
        }
        if let Some(cal) = sys.calibration.clone() {
            let file = dir.join(&cal.from);
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read calibration file {}", file.display()))?;
            let measured: Calibration =
                serde_json::from_str(&text).with_context(|| format!("invalid calibration file {}", file.display()))?;
            sys.apply_calibration(&measured, cal.placement);
        }
        Ok(sys)
    }

    pub fn parse(text: &str) -> Result<Self> {
        let sys: SystemConfig = toml::from_str(text)?;
        sys.check()?;
        Ok(sys)
    }

    fn check(&self) -> Result<()> {
        let n = &self.network;
        let topologies = n.fat_tree.is_some() as u8 + n.dragonfly.is_some() as u8 + n.torus.is_some() as u8;
        if topologies != 1 {
            bail!("[network] needs exactly one of [network.fat_tree], [network.dragonfly], [network.torus]");
        }
        if n.injection_bw.0 <= 0.0 {
            bail!("network.injection_bw must be positive");
        }
        if let Some(ft) = &n.fat_tree {
            if ft.compute_switches == 0 || ft.nodes_per_switch == 0 || ft.switches_per_pod == 0 {
                bail!("fat_tree: compute_switches, nodes_per_switch and switches_per_pod must be positive");
            }
            parse_ratio(&ft.taper)?;
            parse_ratio(&ft.core_taper)?;
        }
        if let Some(df) = &n.dragonfly {
            if df.groups == 0 || df.routers_per_group == 0 || df.nodes_per_router == 0 || df.channels_per_group_pair == 0 {
                bail!("dragonfly: groups, routers_per_group, nodes_per_router, channels_per_group_pair must be positive");
            }
        }
        if let Some(t) = &n.torus {
            if t.dims.contains(&0) || t.nodes_per_router == 0 {
                bail!("torus: dims and nodes_per_router must be positive");
            }
        }
        let bb = &self.burst_buffer;
        if bb.stripe_count == 0 || bb.stripe_size.0 < 1.0 {
            bail!("burst_buffer: stripe_count and stripe_size must be positive");
        }
        for e in [bb.shared_write_efficiency, bb.shared_read_efficiency] {
            if !(e > 0.0 && e <= 2.0) {
                bail!("burst_buffer: shared_write_efficiency and shared_read_efficiency must be in (0, 2]");
            }
        }
        for p in Placement::ALL {
            if p == bb.placement && self.device(p).is_none() {
                bail!("burst_buffer.placement = '{}' but [burst_buffer.{}] is missing", p.name(), p.name());
            }
        }
        let devices = [
            bb.node_local.as_ref().map(|c| (c.device, c.devices_per_node)),
            bb.grouped.as_ref().map(|c| (c.device, c.devices_per_server)),
            bb.global.as_ref().map(|c| (c.device, c.devices_per_server)),
        ];
        for (dev, count) in devices.into_iter().flatten() {
            if dev.write_bw.0 <= 0.0 || dev.read_bw.0 <= 0.0 || count == 0 {
                bail!("burst_buffer devices need positive read/write bandwidth and count");
            }
        }
        if let Some(g) = &bb.grouped {
            if g.every == 0 {
                bail!("burst_buffer.grouped.every must be positive");
            }
        }
        if let Some(g) = &bb.global {
            if g.servers == 0 || g.servers_per_switch == 0 {
                bail!("burst_buffer.global: servers and servers_per_switch must be positive");
            }
        }
        if let Some(p) = &self.pfs {
            if p.gateways == 0 || p.gateways_per_switch == 0 || p.bandwidth.0 <= 0.0 || p.stripe_count == 0 {
                bail!("pfs: gateways, gateways_per_switch, bandwidth and stripe_count must be positive");
            }
        }
        if !(0.0..0.5).contains(&self.sim.completion_tolerance) {
            bail!("sim.completion_tolerance must be in [0, 0.5)");
        }
        Ok(())
    }

    /// The device model of a placement, if configured.
    pub fn device(&self, p: Placement) -> Option<Device> {
        let bb = &self.burst_buffer;
        match p {
            Placement::NodeLocal => bb.node_local.as_ref().map(|c| c.device),
            Placement::Grouped => bb.grouped.as_ref().map(|c| c.device),
            Placement::Global => bb.global.as_ref().map(|c| c.device),
        }
    }

    pub fn placements(&self) -> Vec<Placement> {
        Placement::ALL.into_iter().filter(|p| self.device(*p).is_some()).collect()
    }

    /// Replaces model figures by measured ones (the calibration hook).
    pub fn apply_calibration(&mut self, m: &Calibration, only: Option<Placement>) {
        let bb = &mut self.burst_buffer;
        let mut devices: Vec<(Placement, &mut Device)> = Vec::new();
        if let Some(c) = bb.node_local.as_mut() {
            devices.push((Placement::NodeLocal, &mut c.device));
        }
        if let Some(c) = bb.grouped.as_mut() {
            devices.push((Placement::Grouped, &mut c.device));
        }
        if let Some(c) = bb.global.as_mut() {
            devices.push((Placement::Global, &mut c.device));
        }
        for (p, dev) in devices {
            if only.is_some_and(|o| o != p) {
                continue;
            }
            if let Some(w) = m.device_write_bw {
                dev.write_bw = w;
            }
            if let Some(r) = m.device_read_bw {
                dev.read_bw = r;
            }
        }
        if let Some(o) = m.op_overhead {
            bb.op_overhead = o;
        }
        if let Some(e) = m.shared_write_efficiency {
            bb.shared_write_efficiency = e;
        }
        if let Some(e) = m.shared_read_efficiency {
            bb.shared_read_efficiency = e;
        }
        if let Some(i) = m.injection_bw {
            self.network.injection_bw = i;
        }
        if let Some(l) = m.link_latency {
            self.network.link_latency = l;
        }
        // A server moves data at no more than the measured share of its link: its device
        // model becomes the lower of the device and that share of the NIC.
        let inj = self.network.injection_bw;
        let bb = &mut self.burst_buffer;
        let servers = [
            bb.grouped.as_mut().map(|c| (Placement::Grouped, &mut c.device, c.devices_per_server, c.nic_bw.unwrap_or(inj))),
            bb.global.as_mut().map(|c| (Placement::Global, &mut c.device, c.devices_per_server, c.nic_bw.unwrap_or(inj))),
        ];
        for (p, dev, count, nic) in servers.into_iter().flatten() {
            if only.is_some_and(|o| o != p) {
                continue;
            }
            // The figures are per device; a server's devices share its link.
            let cap = |eff: f64| Rate(eff * nic.0 / count as f64);
            if let Some(e) = m.write_efficiency {
                dev.write_bw = Rate(dev.write_bw.0.min(cap(e).0));
            }
            if let Some(e) = m.read_efficiency {
                dev.read_bw = Rate(dev.read_bw.0.min(cap(e).0));
            }
        }
    }

    pub fn topology_name(&self) -> &'static str {
        if self.network.fat_tree.is_some() {
            "fat_tree"
        } else if self.network.dragonfly.is_some() {
            "dragonfly"
        } else {
            "torus"
        }
    }

    pub fn compute_nodes(&self) -> usize {
        let n = &self.network;
        if let Some(ft) = &n.fat_tree {
            ft.compute_switches * ft.nodes_per_switch
        } else if let Some(df) = &n.dragonfly {
            df.groups * df.routers_per_group * df.nodes_per_router
        } else {
            let t = n.torus.as_ref().expect("checked: one topology");
            t.dims.iter().product::<usize>() * t.nodes_per_router
        }
    }
}
