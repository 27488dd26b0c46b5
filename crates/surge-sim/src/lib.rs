//! # surge-sim: burst-buffer provisioning simulator
//!
//! Answers "node-local, grouped or global burst buffers, on which network, for our workload?"
//! before the hardware is bought. A system file describes the network (fat-tree with taper,
//! dragonfly with minimal or adaptive routing, 3-D torus), the burst-buffer placement and
//! devices, and the PFS; a workload file lists jobs (Darshan-derived traces or synthetic IOR /
//! checkpoint patterns) with node placements. The simulator replays the jobs' blocking I/O and
//! reports per-rank I/O phases, per-job phase lengths, hops, link and device utilisation and a
//! CAPEX/OPEX table.
//!
//! The model is flow-level (see [`engine`]): bandwidth is shared max-min fairly over the links
//! and devices a transfer crosses, and operations pay latency and per-operation device
//! overhead. It trades packet-level detail (queueing inside switches, head-of-line blocking,
//! incast, credit stalls) for speed: the seed study's largest job runs in seconds on a laptop
//! instead of hours on a cluster. `validate` checks it against the seed's measurements and
//! qualitative findings.

pub mod calibrate;
pub mod cost;
pub mod engine;
pub mod report;
pub mod system;
pub mod topology;
pub mod units;
pub mod validate;
pub mod workload;

use anyhow::Result;

/// Everything a simulation produced, with the inputs needed to report it.
pub struct Outcome {
    pub system: system::SystemConfig,
    pub network: topology::Network,
    pub jobs: Vec<workload::Job>,
    pub result: engine::SimResult,
}

/// Builds the network for `placement`, places the workload, runs it.
pub fn simulate(system: &system::SystemConfig, placement: system::Placement, workload: &workload::WorkloadConfig) -> Result<Outcome> {
    let network = topology::Network::build(system, placement)?;
    let jobs = workload.instantiate(network.compute_nodes)?;
    let result = engine::Engine::new(&network, &jobs, system.sim.clone())?.run();
    Ok(Outcome { system: system.clone(), network, jobs, result })
}
