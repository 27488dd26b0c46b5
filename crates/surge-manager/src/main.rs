//! `surge-manager --config FILE`: the control plane daemon (one per cluster, as root, on the
//! host where the workload manager's controller runs its burst-buffer hooks).

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use surge_manager::config::Config;
use surge_manager::manager::Manager;
use surge_manager::service;

#[derive(Parser)]
#[command(version, about = "Surge control plane: pools, instances, reservations and stages for the workload manager")]
struct Args {
    /// The configuration file (TOML; see slurm/README.md).
    #[arg(long)]
    config: PathBuf,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let config = Config::load(&args.config)?;
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?.block_on(async move {
        let socket = config.socket.clone();
        let manager = Manager::open(config)?;
        let listener = service::bind(&socket)?;
        manager.reconcile().await?;
        manager.sweep_forgotten_jobs();
        tracing::info!(socket = %socket.display(), "manager ready");
        service::serve(manager, listener, surge_control::host::stop_signal()).await?;
        let _ = std::fs::remove_file(&socket);
        tracing::info!("manager stopped");
        Ok(())
    })
}
