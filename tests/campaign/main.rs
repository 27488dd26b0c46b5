//! `surge-campaign`: a randomized fault campaign. Worker processes (each a node's
//! application, through the native client) run creates, writes, appends of versions,
//! renames, links, unlinks, O_EXCL races and locked increments on one instance, recording
//! every operation's invocation and end, while servers are killed and restarted, stopped,
//! and cut off, slowed or silenced behind a veth link, and workers are killed. Afterwards a
//! checker holds the histories and the tree against docs/consistency.md's guarantees, and
//! `surge fsck` must find nothing. Needs root (network namespaces) and a release build.
//!
//!   surge-campaign run [--secs 120] [--seed 1] [--workers 3] [--mounts 0] [--pause-ms 20] --out DIR
//!       prints the operations and faults as Markdown, every violation, and exits 1 on any
//!   surge-campaign worker ...   (started by `run`)
//!
//! The suite runs a short form (`campaign::`); `bench/campaign.sh SECS SEED` the long one.

mod check;
mod history;
mod layout;
mod posix;
mod run;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "A randomized fault campaign against a Surge instance, checked against its consistency guarantees")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Starts an instance and workers, injects faults until the deadline, checks.
    Run {
        #[arg(long, default_value_t = 120)]
        secs: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 3)]
        workers: u64,
        /// Each worker pauses up to this long between operations (leaves the CPUs some room).
        #[arg(long, default_value_t = 20)]
        pause_ms: u64,
        /// Where the histories, the faults and the workers' logs go.
        #[arg(long)]
        out: PathBuf,
        /// Server 3's node is 10.77.SUBNET.2 behind the veth `sghSUBNET` (two campaigns at
        /// once need two).
        #[arg(long, default_value_t = 75)]
        subnet: u8,
        /// The last MOUNTS workers work through FUSE mounts of their own (POSIX calls), the
        /// others through the native client.
        #[arg(long, default_value_t = 0)]
        mounts: u64,
    },
    /// One worker (the instance from SURGE_HOME and SURGE_INSTANCE).
    Worker {
        #[arg(long)]
        slot: u64,
        #[arg(long)]
        incarnation: u64,
        #[arg(long)]
        workers: u64,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        until_us: u64,
        #[arg(long)]
        pause_ms: u64,
        #[arg(long)]
        history: PathBuf,
        /// Work through the mount at this directory.
        #[arg(long)]
        through: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match Args::parse().command {
        Command::Run { secs, seed, workers, pause_ms, out, subnet, mounts } => {
            let campaign = run::Campaign { secs, seed, workers, pause_ms, out, subnet, mounts: mounts.min(workers) };
            match campaign.run() {
                Ok(report) => {
                    println!("{}", report.summary);
                    for violation in &report.violations {
                        println!("VIOLATION: {violation}");
                    }
                    println!("{} violations", report.violations.len());
                    if report.violations.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("surge-campaign: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Worker { slot, incarnation, workers, seed, until_us, pause_ms, history, through } => {
            let worker = worker::Worker { slot, incarnation, workers, seed, until_us, pause_ms, history, through };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            match runtime.block_on(worker.run()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("surge-campaign worker {incarnation}: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
