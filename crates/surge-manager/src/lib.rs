//! # surge-manager — Surge's control plane
//!
//! One manager per cluster owns the burst buffer's capacity: the pools of its configuration
//! (dedicated burst-buffer nodes, or the jobs' own compute nodes), the instances cut from them
//! for jobs and persistent reservations, and the jobs' stage-in and stage-out. The workload
//! manager's hooks (Slurm's burst_buffer/lua script, through `surge bb ...`) and the nodes'
//! prolog and epilog are its short-lived clients; node agents (`surge-agent`) start the
//! servers it asks for; the stage coordinators beside the servers do the copies, which it
//! submits and follows.
//!
//! * [`config`]: the configuration file;
//! * [`store`]: the durable state, in SQLite;
//! * [`pools`]: rounding to a pool's unit and placing servers (pure);
//! * [`manager`]: each request's work, and reconciliation with what runs after a restart;
//! * [`service`]: the local socket, where callers are known by their kernel credentials, and
//!   TCP for the other nodes, where munged vouches for them.

pub mod config;
pub mod manager;
pub mod pools;
pub mod service;
pub mod store;

use anyhow::{Context, Result};
use config::Config;
use manager::{Manager, StepObserver};

/// The daemon's life: opens the state, binds the socket (and TCP), serves until SIGINT or
/// SIGTERM, answering requests once it has reconciled with what runs. `steps` observes the manager's steps (tests of recovery; the
/// daemon passes none).
pub fn run(config: Config, steps: Option<StepObserver>) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?.block_on(async move {
        let socket = config.socket.clone();
        let config_listen = config.listen.clone();
        let manager = Manager::open_with_steps(config, steps)?;
        let listener = service::bind(&socket)?;
        let tcp = match &config_listen {
            Some(address) => Some(tokio::net::TcpListener::bind(address).await.with_context(|| format!("listen on {address}"))?),
            None => None,
        };
        // Callers are taken at once, and each request waits until the reconciliation is
        // done: a caller sees a manager that is slow to answer, not one that is not there.
        let serving = tokio::spawn(service::serve(manager.clone(), listener, tcp, surge_control::host::stop_signal()));
        tracing::info!(socket = %socket.display(), tcp = ?config_listen, "manager listening; reconciling with the nodes");
        manager.reconcile().await?;
        manager.sweep_forgotten_jobs();
        manager.stop_orphans();
        tracing::info!("manager ready");
        serving.await.context("the manager's service")??;
        let _ = std::fs::remove_file(&socket);
        tracing::info!("manager stopped");
        Ok(())
    })
}

/// Logs to stderr, filtered by `SURGE_LOG` (default `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
