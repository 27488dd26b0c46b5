//! `surge-manager --config FILE`: the control plane daemon (one per cluster, as root, on the
//! host where the workload manager's controller runs its burst-buffer hooks). The work is the
//! library's ([`surge_manager::run`]); this reads the configuration and starts it.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use surge_manager::config::Config;

#[derive(Parser)]
#[command(version, about = "Surge control plane: pools, instances, reservations and stages for the workload manager")]
struct Args {
    /// The configuration file (TOML; see slurm/README.md).
    #[arg(long)]
    config: PathBuf,
}

fn main() -> Result<()> {
    surge_manager::init_logging();
    let args = Args::parse();
    surge_manager::run(Config::load(&args.config)?, None)
}
