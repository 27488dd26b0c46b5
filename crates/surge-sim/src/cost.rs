//! CAPEX/OPEX of a burst-buffer design from a price list (the seed's Table V is the example in
//! `examples/sim/prices-seed004.toml`).
//!
//! Arithmetic on the system file's equipment counts, not a result of a simulation: what a
//! placement needs to buy (devices, BB servers) times its price, and its power over the
//! price list's years at its energy price. A price list with an unknown field is refused.

use crate::system::{Placement, SystemConfig};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceList {
    pub energy_price_per_kwh: f64,
    pub years: f64,
    pub node_local_device: Item,
    pub server_device: Item,
    pub bb_server: Item,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub price: f64,
    pub watts: f64,
}

/// What a design needs to buy.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Inventory {
    pub node_local_devices: u64,
    pub bb_servers: u64,
    pub server_devices: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CostLine {
    pub item: String,
    pub count: u64,
    pub unit_price: f64,
    pub watts: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CostTable {
    pub lines: Vec<CostLine>,
    pub capex: f64,
    pub power_kw: f64,
    pub opex: f64,
    pub years: f64,
}

impl PriceList {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read price list {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("invalid price list {}", path.display()))
    }

    pub fn cost(&self, inv: Inventory) -> CostTable {
        let lines: Vec<CostLine> = [
            ("node-local device", inv.node_local_devices, self.node_local_device),
            ("BB server device", inv.server_devices, self.server_device),
            ("BB server", inv.bb_servers, self.bb_server),
        ]
        .into_iter()
        .filter(|(_, n, _)| *n > 0)
        .map(|(name, count, item)| CostLine { item: name.into(), count, unit_price: item.price, watts: item.watts })
        .collect();
        let capex = lines.iter().map(|l| l.count as f64 * l.unit_price).sum();
        let power_kw = lines.iter().map(|l| l.count as f64 * l.watts).sum::<f64>() / 1000.0;
        let opex = power_kw * 24.0 * 365.0 * self.years * self.energy_price_per_kwh;
        CostTable { lines, capex, power_kw, opex, years: self.years }
    }
}

impl Inventory {
    pub fn of(sys: &SystemConfig, placement: Placement) -> Inventory {
        let bb = &sys.burst_buffer;
        match placement {
            Placement::NodeLocal => Inventory {
                node_local_devices: (sys.compute_nodes() * bb.node_local.as_ref().map_or(0, |c| c.devices_per_node)) as u64,
                ..Default::default()
            },
            Placement::Grouped => {
                let c = bb.grouped.as_ref();
                let switches = if let Some(ft) = &sys.network.fat_tree {
                    ft.compute_switches
                } else if let Some(df) = &sys.network.dragonfly {
                    df.groups * df.routers_per_group
                } else {
                    sys.network.torus.as_ref().map_or(0, |t| t.dims.iter().product())
                };
                let servers = c.map_or(0, |c| switches.div_ceil(c.every)) as u64;
                Inventory {
                    bb_servers: servers,
                    server_devices: servers * c.map_or(0, |c| c.devices_per_server) as u64,
                    ..Default::default()
                }
            }
            Placement::Global => {
                let c = bb.global.as_ref();
                let servers = c.map_or(0, |c| c.servers) as u64;
                Inventory {
                    bb_servers: servers,
                    server_devices: servers * c.map_or(0, |c| c.devices_per_server) as u64,
                    ..Default::default()
                }
            }
        }
    }
}
