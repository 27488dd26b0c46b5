//! `surge-fuse NAME MOUNTPOINT`: serves a FUSE mount of instance NAME until it is unmounted.
//! Normally started by `surge mount` (which waits for the mount to appear), not by hand.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fuser::MountOption;
use surge_client::{Client, ClientOptions};

#[derive(Parser)]
#[command(version, about = "Surge FUSE mount daemon")]
struct Args {
    instance: String,
    mountpoint: PathBuf,
    /// This node's address (connection source; picks the namespace in private mode).
    #[arg(long, env = "SURGE_NODE")]
    node: Option<std::net::IpAddr>,
    /// Tokio worker threads answering FUSE requests.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()?;
    let client = Client::for_instance(&args.instance, ClientOptions { node: args.node, ..Default::default() })
        .with_context(|| format!("instance '{}'", args.instance))?;
    // Fail before mounting when the instance does not answer.
    runtime.block_on(client.getattr(surge_client::surge_proto::ROOT_INO)).context("instance root not reachable")?;
    let fs = surge_fuse::SurgeFs::new(client, runtime.handle().clone());
    let options = [
        MountOption::FSName(format!("surge:{}", args.instance)),
        MountOption::Subtype("surge".into()),
        MountOption::AllowOther,
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    fuser::mount2(fs, &args.mountpoint, &options).with_context(|| format!("mount {}", args.mountpoint.display()))?;
    Ok(())
}
