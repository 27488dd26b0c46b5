//! The manager's configuration file (TOML): where its state and socket are, where jobs'
//! buffers appear on the nodes, and the pools with their nodes.
//!
//! ```toml
//! socket = "/run/surge/manager.sock"
//! listen = "0.0.0.0:6820"               # optional: TCP for the other nodes, MUNGE-authenticated
//! trusted_uids = [64030]                # besides root, may do what root may (SlurmUser)
//! user_reservations = false             # users make and destroy their own reservations
//!                                       # outside a job (default: root and trusted_uids only)
//! state_dir = "/var/lib/surge"          # surge.db (0700, root's)
//! job_root = "/var/spool/surge/jobs"    # on every compute node: <job_root>/<job id>/...
//! key_file = "/etc/surge/cluster.key"   # shared with the node agents, 0600
//! default_pool = "bb"
//!
//! [[pool]]
//! name = "bb"
//! kind = "standing"                     # dedicated burst-buffer nodes with agents
//! granularity = "1GiB"
//! nodes = [ { name = "bb1", agent = "10.0.0.21:7300", capacity = "1TiB" } ]
//!
//! [[pool]]
//! name = "local"
//! kind = "on-demand"                    # the job's own compute nodes
//! granularity = "256MiB"
//! nodes = [ { name = "n1", agent = "10.0.0.11:7300", capacity = "200GiB" } ]
//!
//! [[pool]]
//! name = "safe"
//! kind = "standing"
//! granularity = "1GiB"
//! replicas = 2                          # two copies of each share, on different nodes
//! failover_after = 10                   # seconds; a lost server's mirror serves in its place
//! nodes = [ { name = "bb2", agent = "10.0.0.22:7300", capacity = "1TiB" },
//!           { name = "bb3", agent = "10.0.0.23:7300", capacity = "1TiB" } ]
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use surge_control::manager::PoolKind;

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub socket: PathBuf,
    /// `host:port` to take requests from other nodes on (TCP), each inside a MUNGE
    /// credential; none: the local socket alone.
    pub listen: Option<String>,
    /// Callers besides root who may do what root may: the workload manager's user (Slurm runs
    /// its burst-buffer hooks as SlurmUser).
    #[serde(default)]
    pub trusted_uids: Vec<u32>,
    /// Whether a user may make a persistent reservation of their own outside a job (`surge
    /// reservation create`, shared only with a group they are in) and destroy their own. Off
    /// by default: outside a job no workload manager limits or accounts for it, so root and
    /// the trusted uids make them for users. In a job (`#DW create_persistent`), the workload
    /// manager's rules apply, whatever this says.
    #[serde(default)]
    pub user_reservations: bool,
    pub state_dir: PathBuf,
    pub job_root: PathBuf,
    pub key_file: PathBuf,
    pub default_pool: Option<String>,
    /// Stripe chunk size of the instances made (default 1 MiB).
    #[serde(default, deserialize_with = "optional_size")]
    pub chunk_size: Option<u64>,
    /// Prints a job's state, nothing once the workload manager no longer has it (`{job}` is
    /// replaced by the id): jobs it forgot (a teardown hook killed by the workload manager,
    /// a job purged while this manager was down) are torn down. Slurm: `squeue -h -o %T -j {job}`.
    pub job_state_command: Option<String>,
    /// Seconds between such sweeps (default 60).
    #[serde(default)]
    pub job_sweep_secs: Option<u64>,
    #[serde(rename = "pool")]
    pub pools: Vec<PoolConfig>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    pub name: String,
    pub kind: PoolKindConfig,
    #[serde(deserialize_with = "size")]
    pub granularity: u64,
    pub nodes: Vec<NodeConfig>,
    /// Copies of each share its instances keep, 1 or 2. With 2 every server mirrors its share
    /// on the next server, on another node: one node's loss loses nothing, and every instance
    /// takes twice its capacity from the pool.
    #[serde(default = "surge_control::one_copy")]
    pub replicas: u8,
    /// With 2 copies, seconds after which a server nobody reaches is replaced by its mirror
    /// without being asked (instances of three servers or more); without it, `surge failover`
    /// does it.
    pub failover_after: Option<f64>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PoolKindConfig {
    Standing,
    OnDemand,
}

impl From<PoolKindConfig> for PoolKind {
    fn from(kind: PoolKindConfig) -> PoolKind {
        match kind {
            PoolKindConfig::Standing => PoolKind::Standing,
            PoolKindConfig::OnDemand => PoolKind::OnDemand,
        }
    }
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's name as the workload manager knows it (`SLURMD_NODENAME`).
    pub name: String,
    /// Its agent's address, `host:port`.
    pub agent: String,
    /// Bytes of its storage the pool may use.
    #[serde(deserialize_with = "size")]
    pub capacity: u64,
}

fn size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(bytes) => Ok(bytes),
        Size::Text(text) => surge_units::parse_size(&text).map_err(serde::de::Error::custom),
    }
}

fn optional_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    size(d).map(Some)
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let config: Config = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        config.check().with_context(|| format!("{}", path.display()))?;
        Ok(config)
    }

    fn check(&self) -> Result<()> {
        if self.pools.is_empty() {
            bail!("no [[pool]]: the manager has nothing to give");
        }
        let mut names = BTreeSet::new();
        for pool in &self.pools {
            if !names.insert(pool.name.as_str()) {
                bail!("pool '{}' defined twice", pool.name);
            }
            if !pool.name.starts_with(|c: char| c.is_ascii_alphabetic())
                || !pool.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                bail!("pool name '{}': a letter, then letters, digits, '-' and '_'", pool.name);
            }
            if pool.granularity == 0 {
                bail!("pool '{}': granularity 0", pool.name);
            }
            if pool.nodes.is_empty() {
                bail!("pool '{}' has no nodes", pool.name);
            }
            match pool.replicas {
                1 if pool.failover_after.is_some() => bail!("pool '{}': failover_after needs replicas = 2", pool.name),
                1 => {}
                2 if pool.nodes.len() < 2 => bail!("pool '{}': two copies need two nodes or more", pool.name),
                2 => {}
                n => bail!("pool '{}': replicas = {n} (1 or 2)", pool.name),
            }
            // The servers' shortest delay: a cut-off server must fence itself well before its
            // share is taken over.
            if let Some(secs) = pool.failover_after.filter(|&secs| !(5.0..=86_400.0).contains(&secs)) {
                bail!("pool '{}': failover_after = {secs}: 5 seconds to a day", pool.name);
            }
            let mut node_names = BTreeSet::new();
            for node in &pool.nodes {
                if !node_names.insert(node.name.as_str()) {
                    bail!("pool '{}': node '{}' listed twice", pool.name, node.name);
                }
                if node.capacity < pool.granularity {
                    bail!("pool '{}': node '{}' has less capacity than one unit of the pool", pool.name, node.name);
                }
            }
        }
        if let Some(default) = &self.default_pool {
            if !names.contains(default.as_str()) {
                bail!("default_pool '{default}' is not a pool");
            }
        }
        for (what, path) in [("job_root", &self.job_root), ("state_dir", &self.state_dir), ("socket", &self.socket)] {
            if !path.is_absolute() {
                bail!("{what} {} must be an absolute path", path.display());
            }
        }
        Ok(())
    }

    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// The pool a request names, else the default (else the only one).
    pub fn pool_for(&self, requested: Option<&str>) -> Result<&PoolConfig, String> {
        let name = match (requested, &self.default_pool) {
            (Some(name), _) => name,
            (None, Some(default)) => default.as_str(),
            (None, None) if self.pools.len() == 1 => self.pools[0].name.as_str(),
            (None, None) => return Err("no pool= given and no default pool configured".into()),
        };
        self.pool(name).ok_or_else(|| {
            let known: Vec<&str> = self.pools.iter().map(|p| p.name.as_str()).collect();
            format!("pool '{name}' does not exist (pools: {})", known.join(", "))
        })
    }

    pub fn chunk_size(&self) -> u64 {
        self.chunk_size.unwrap_or(1 << 20)
    }
}

impl PoolConfig {
    /// Units of the pool: each node's capacity in whole units.
    pub fn quantity(&self) -> u64 {
        self.nodes.iter().map(|n| n.capacity / self.granularity).sum()
    }

    pub fn node(&self, name: &str) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
socket = "/run/surge.sock"
state_dir = "/var/lib/surge"
job_root = "/var/spool/surge/jobs"
key_file = "/etc/surge/cluster.key"
default_pool = "bb"
[[pool]]
name = "bb"
kind = "standing"
granularity = "1GiB"
nodes = [ { name = "bb1", agent = "10.0.0.21:7300", capacity = "4GiB" }, { name = "bb2", agent = "10.0.0.22:7300", capacity = "2560MiB" } ]
"#;

    #[test]
    fn the_shipped_example_configuration_is_valid() {
        let config: Config = toml::from_str(include_str!("../../../slurm/examples/surge-manager.toml")).unwrap();
        config.check().unwrap();
        assert_eq!(config.pool_for(None).unwrap().kind, PoolKindConfig::Standing);
    }

    #[test]
    fn a_pool_counts_whole_units_and_mistakes_are_named() {
        let config: Config = toml::from_str(EXAMPLE).unwrap();
        config.check().unwrap();
        assert_eq!(config.pools[0].quantity(), 6, "4 + 2 whole GiB");
        assert_eq!(config.pool_for(None).unwrap().name, "bb");
        assert!(config.pool_for(Some("ssd")).unwrap_err().contains("pools: bb"));

        let twice = EXAMPLE.replace("bb2", "bb1");
        let config: Config = toml::from_str(&twice).unwrap();
        assert!(config.check().unwrap_err().to_string().contains("listed twice"));
        let typo = EXAMPLE.replace("granularity", "granularty");
        assert!(toml::from_str::<Config>(&typo).is_err());
    }

    #[test]
    fn two_copies_need_two_nodes_and_a_sane_failover_delay() {
        let check = |pool_lines: &str| {
            let text = EXAMPLE.replace("granularity = \"1GiB\"", &format!("granularity = \"1GiB\"\n{pool_lines}"));
            toml::from_str::<Config>(&text).unwrap().check().map_err(|e| e.to_string())
        };
        assert_eq!(toml::from_str::<Config>(EXAMPLE).unwrap().pools[0].replicas, 1, "one copy unless asked");
        check("replicas = 2\nfailover_after = 10").unwrap();
        assert!(check("replicas = 3").unwrap_err().contains("1 or 2"));
        assert!(check("failover_after = 10").unwrap_err().contains("needs replicas = 2"));
        assert!(check("replicas = 2\nfailover_after = 1").unwrap_err().contains("5 seconds to a day"));
        let one_node = EXAMPLE.replace(", { name = \"bb2\", agent = \"10.0.0.22:7300\", capacity = \"2560MiB\" }", "");
        let text = one_node.replace("granularity = \"1GiB\"", "granularity = \"1GiB\"\nreplicas = 2");
        assert!(toml::from_str::<Config>(&text).unwrap().check().unwrap_err().to_string().contains("two nodes"));
    }
}
