//! `surge bb ...`: the workload manager's side of Surge's control plane. Each subcommand is one
//! hook (Slurm's burst_buffer/lua names them; slurm/burst_buffer.lua calls them), a node's
//! prolog or epilog, or the cluster-wide status — a short-lived client of `surge-manager`,
//! which does the work. Nothing here outlives the command (hooks must leave no process behind),
//! except the mount daemons a prolog starts, which are detached on purpose.

use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use surge_control::host::{owned_dir, owned_file};
use surge_control::manager::{Attachment, Direction, PoolView, Progress, Reply, Request, Status};
use surge_control::wire;

use crate::output::outln;
use crate::table::{human_bytes, Table};

/// Where the manager listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/surge/manager.sock";
/// How long a hook keeps trying to reach a manager that is restarting.
const REACH_TIMEOUT: Duration = Duration::from_secs(60);
/// One request's answer time (a Progress waits up to its own time first).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Subcommand)]
pub enum BbCommand {
    /// At submit: check a job script's #DW lines against the pools and reservations.
    JobProcess {
        /// The job script.
        script: PathBuf,
        /// The submitting user, when the workload manager says (Slurm 23.02+).
        #[arg(long)]
        uid: Option<u32>,
    },
    /// The pools as Slurm's burst_buffer/lua wants them (JSON).
    Pools,
    /// The job was chosen to run: charge its capacity, start its servers.
    Setup {
        /// The job id.
        #[arg(long)]
        job: u64,
        /// The job owner's uid.
        #[arg(long)]
        uid: u32,
        /// The job owner's gid.
        #[arg(long)]
        gid: u32,
        /// The job script.
        script: PathBuf,
    },
    /// Stage the job's files in, and wait until they are (or one failed).
    DataIn {
        /// The job id.
        #[arg(long)]
        job: u64,
    },
    /// Is the job's stage-in done? Prints BUSY while it runs (Slurm 24.05+ polls this).
    TestDataIn {
        /// The job id.
        #[arg(long)]
        job: u64,
    },
    /// Write the job's variables (DW_JOB_STRIPED ...) as KEY=VALUE lines.
    Paths {
        /// The job id.
        #[arg(long)]
        job: u64,
        /// File to write (Slurm's path file).
        #[arg(long)]
        path_file: PathBuf,
    },
    /// The job's nodes are allocated: start buffers on them, run deferred stage-ins, wait.
    PreRun {
        /// The job id.
        #[arg(long)]
        job: u64,
        /// Its nodes, comma-separated (default: asked of squeue).
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
    },
    /// The job's script ended.
    PostRun {
        /// The job id.
        #[arg(long)]
        job: u64,
    },
    /// Stage the job's results out, and wait until they are (or one failed).
    DataOut {
        /// The job id.
        #[arg(long)]
        job: u64,
    },
    /// Is the job's stage-out done? Prints BUSY while it runs.
    TestDataOut {
        /// The job id.
        #[arg(long)]
        job: u64,
    },
    /// Release the job's buffers (with --hurry: cancel its stages first).
    Teardown {
        /// The job id.
        #[arg(long)]
        job: u64,
        /// Cancel running stages and release at once.
        #[arg(long)]
        hurry: bool,
    },
    /// On a compute node, as root, before the job: mount its buffers for its user (Slurm's
    /// Prolog; reads SLURM_JOB_ID, SLURMD_NODENAME, SLURM_JOB_NODELIST).
    Prolog,
    /// On a compute node, as root, after the job: unmount its buffers, remove its directory.
    Epilog,
}

fn manager_address() -> wire::ManagerAddress {
    wire::ManagerAddress::from_env(Path::new(DEFAULT_SOCKET))
}

/// How long the hooks Slurm runs inside slurmctld, under its locks (job_process, pools,
/// paths), wait for the manager: the controller must not stall on a manager that is down or
/// restarting; the hook fails with a message instead.
pub const INSIDE_CONTROLLER: Duration = Duration::from_secs(3);

/// One request to the manager; a manager that is restarting is waited for, a refusal is an
/// error with the manager's words.
pub async fn ask(request: &Request) -> Result<Reply> {
    ask_within(request, REACH_TIMEOUT, ANSWER_TIMEOUT).await
}

/// [`ask`] for a hook that runs inside the controller: everything within [`INSIDE_CONTROLLER`].
async fn ask_inside_controller(request: &Request) -> Result<Reply> {
    let asked = ask_within(request, INSIDE_CONTROLLER, INSIDE_CONTROLLER);
    match tokio::time::timeout(INSIDE_CONTROLLER, asked).await {
        Ok(answer) => answer,
        Err(_) => bail!(
            "Surge's manager on {} did not answer within {} s (down or restarting?); try again shortly",
            manager_address(),
            INSIDE_CONTROLLER.as_secs()
        ),
    }
}

/// [`ask`], trying to reach the manager for `reach` and waiting `answer` for one answer.
async fn ask_within(request: &Request, reach: Duration, answer: Duration) -> Result<Reply> {
    let socket = manager_address();
    let started = Instant::now();
    loop {
        match wire::call_manager(&socket, request, answer).await {
            Ok(Reply::Failed(why)) => bail!("{why}"),
            Ok(reply) => return Ok(reply),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
                if started.elapsed() > reach {
                    bail!("Surge's manager does not answer on {socket} ({e}): is surge-manager running?");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) if went_away(e.kind()) && started.elapsed() < reach => {
                // The manager went away mid-request (a restart): ask again. The hooks' requests
                // are safe to repeat (what was done is found done).
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => bail!("Surge's manager on {socket}: {e}"),
        }
    }
}

/// The connection broke under a request: the manager stopped or was killed while answering.
fn went_away(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::*;
    matches!(kind, UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionAborted)
}

fn read_script(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub async fn run(command: BbCommand) -> Result<()> {
    match command {
        BbCommand::JobProcess { script, uid } => {
            ask_inside_controller(&Request::CheckJob { script: read_script(&script)?, uid }).await?;
        }
        BbCommand::Pools => {
            let Reply::Pools(pools) = ask_inside_controller(&Request::Pools).await? else { bail!("unexpected answer") };
            outln!("{}", slurm_pools_json(&pools));
        }
        BbCommand::Setup { job, uid, gid, script } => {
            ask(&Request::Setup { job, uid, gid, script: read_script(&script)? }).await?;
        }
        BbCommand::DataIn { job } => {
            ask(&Request::DataIn { job }).await?;
            wait_stages(job, Direction::In).await?;
        }
        BbCommand::TestDataIn { job } => test_stages(job, Direction::In).await?,
        BbCommand::Paths { job, path_file } => {
            let Reply::Paths(vars) = ask_inside_controller(&Request::Paths { job }).await? else { bail!("unexpected answer") };
            let text: String = vars.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            std::fs::write(&path_file, text).with_context(|| format!("write {}", path_file.display()))?;
        }
        BbCommand::PreRun { job, nodes } => {
            let nodes = if nodes.is_empty() { job_nodes(job)? } else { nodes };
            ask(&Request::PreRun { job, nodes }).await?;
            wait_stages(job, Direction::In).await?;
        }
        BbCommand::PostRun { job } => {
            ask(&Request::PostRun { job }).await?;
        }
        BbCommand::DataOut { job } => {
            ask(&Request::DataOut { job }).await?;
            wait_stages(job, Direction::Out).await?;
        }
        BbCommand::TestDataOut { job } => test_stages(job, Direction::Out).await?,
        BbCommand::Teardown { job, hurry } => {
            ask(&Request::Teardown { job, hurry }).await?;
        }
        BbCommand::Prolog => prolog().await?,
        BbCommand::Epilog => epilog().await?,
    }
    Ok(())
}

/// What Slurm's `slurm_bb_pools` returns: quantities and free space in units of granularity.
fn slurm_pools_json(pools: &[PoolView]) -> String {
    let list: Vec<serde_json::Value> = pools
        .iter()
        .map(|p| serde_json::json!({"id": p.name, "quantity": p.quantity, "granularity": p.granularity, "free": p.free}))
        .collect();
    serde_json::json!({ "pools": list }).to_string()
}

/// Waits until the job's stages in one direction are done, or wait for the job's nodes (a
/// stage-in into a buffer on them runs at pre-run); a failure names the file and why.
async fn wait_stages(job: u64, direction: Direction) -> Result<()> {
    loop {
        let Reply::Progress(progress) = ask(&Request::Progress { job, direction, wait_secs: 30 }).await? else {
            bail!("unexpected answer")
        };
        match progress {
            Progress::Busy { .. } => continue,
            Progress::Done { .. } | Progress::Deferred { .. } => return Ok(()),
            Progress::Failed(why) => bail!("{why}"),
        }
    }
}

async fn test_stages(job: u64, direction: Direction) -> Result<()> {
    let Reply::Progress(progress) = ask(&Request::Progress { job, direction, wait_secs: 0 }).await? else { bail!("unexpected answer") };
    match progress {
        Progress::Busy { .. } => outln!("BUSY"),
        Progress::Done { .. } | Progress::Deferred { .. } => {}
        Progress::Failed(why) => bail!("{why}"),
    }
    Ok(())
}

/// The job's nodes, as Slurm lists them (`n[1-3]` expanded by scontrol).
fn job_nodes(job: u64) -> Result<Vec<String>> {
    let list = Command::new("squeue").args(["-h", "-o", "%N", "-j", &job.to_string()]).output().context("run squeue")?;
    let list = String::from_utf8_lossy(&list.stdout).trim().to_string();
    expand_hostlist(&list)
}

fn expand_hostlist(list: &str) -> Result<Vec<String>> {
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let out = Command::new("scontrol").args(["show", "hostnames", list]).output().context("run scontrol show hostnames")?;
    if !out.status.success() {
        bail!("scontrol show hostnames {list}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect())
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set (run as Slurm's Prolog/Epilog)"))
}

/// The node's part before the job: ask the manager what to mount (it waits for the buffers),
/// write the clients' descriptors and tokens for the job's user, and mount each buffer as that
/// user, visible to that user only.
async fn prolog() -> Result<()> {
    let job: u64 = env("SLURM_JOB_ID")?.parse().context("SLURM_JOB_ID")?;
    let node = env("SLURMD_NODENAME")?;
    let nodes = expand_hostlist(&std::env::var("SLURM_JOB_NODELIST").unwrap_or_default())?;
    let Reply::Attach(attachment) = ask(&Request::Attach { job, node: node.clone(), nodes }).await? else { bail!("unexpected answer") };
    if attachment.mounts.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    // Written before anything is mounted: the Epilog cleans up from it alone, manager or not.
    note_job_dir(job, Path::new(&attachment.job_dir))?;
    mount_all(&attachment).await.with_context(|| format!("job {job} on {node}"))?;
    tracing::info!(job, node, seconds = started.elapsed().as_secs_f64(), "buffers mounted");
    Ok(())
}

async fn mount_all(a: &Attachment) -> Result<()> {
    let job_dir = PathBuf::from(&a.job_dir);
    if let Some(parent) = job_dir.parent() {
        std::fs::create_dir_all(parent)?;
        // Users must reach their own job directory; they cannot list the others.
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711))?;
    }
    owned_dir(&job_dir, a.uid, a.gid)?;
    let home = job_dir.join("home");
    owned_dir(&home, a.uid, a.gid)?;
    owned_dir(&home.join("instances"), a.uid, a.gid)?;
    for mount in &a.mounts {
        let instances = home.join("instances");
        owned_file(&instances.join(format!("{}.json", mount.instance)), &mount.descriptor, a.uid, a.gid)?;
        owned_file(&instances.join(format!("{}.token", mount.instance)), &mount.secret, a.uid, a.gid)?;
        let dir = job_dir.join(&mount.subdir);
        if let Some(parent) = dir.parent().filter(|p| *p != job_dir) {
            owned_dir(parent, a.uid, a.gid)?;
        }
        owned_dir(&dir, a.uid, a.gid)?;
        let mut cmd = Command::new(crate::instance::sibling_binary("surge-fuse"));
        cmd.arg(&mount.instance).arg(&dir).env("SURGE_HOME", &home);
        if let Some(addr) = &mount.node_addr {
            let ip = addr.parse::<std::net::SocketAddr>().map(|a| a.ip().to_string()).unwrap_or_else(|_| addr.clone());
            cmd.arg("--node").arg(ip);
        }
        let log = home.join(format!("{}.fuse.log", mount.instance));
        owned_file(&log, "", a.uid, a.gid)?;
        crate::mount::mount_for_user(cmd, &mount.instance, &dir, (a.uid, a.gid), &log).await?;
        // So that the job's programs name burst-buffer files by their paths on the mount
        // (`surge stage out $DW_JOB_STRIPED/result ...`, libsurge's calls).
        let recorded = surge_client::descriptor::mounts_file_in(&instances, &mount.instance);
        owned_file(&recorded, &format!("{}\n", dir.display()), a.uid, a.gid)?;
    }
    Ok(())
}

/// Mounts under `dir`, deepest first, each with its FUSE connection's number when it is a
/// FUSE mount (its device's minor: `/sys/fs/fuse/connections/N`).
fn mounts_under(dir: &Path) -> Vec<(PathBuf, Option<u32>)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<(PathBuf, Option<u32>)> = info
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = PathBuf::from(fields.get(4)?);
            let fuse = line.split(" - ").nth(1).is_some_and(|rest| rest.starts_with("fuse"));
            let minor = fields.get(2).and_then(|device| device.split_once(':')).and_then(|(_, minor)| minor.parse().ok());
            Some((point, minor.filter(|_| fuse)))
        })
        .filter(|(point, _)| point.starts_with(dir))
        .collect();
    found.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    found
}

/// Where the Prolog notes, per job, the directory it made on this node (root's, node-local):
/// `SURGE_NODE_STATE`, default `/run/surge/jobs`.
fn node_state_dir() -> PathBuf {
    std::env::var_os("SURGE_NODE_STATE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/surge/jobs"))
}

fn note_job_dir(job: u64, job_dir: &Path) -> Result<()> {
    let state = node_state_dir();
    std::fs::create_dir_all(&state).with_context(|| format!("create {}", state.display()))?;
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700))?;
    std::fs::write(state.join(job.to_string()), job_dir.as_os_str().as_encoded_bytes())
        .with_context(|| format!("write {}", state.display()))
}

/// How long the Epilog waits for the manager to hear that a node is done with a job: the
/// node is clean by then, and the manager learns of the job's end from the workload manager.
const DETACH_WAIT: Duration = Duration::from_secs(5);

/// The node's part after the job, from what the Prolog noted on this node (the manager may be
/// down or may have forgotten the job): the FUSE connections of the job's mounts are aborted
/// (a process that outlived the job, or a server that is gone, cannot hold the node) and the
/// mounts detached, the mount daemons left are stopped, then the job's directory is removed —
/// only once nothing is mounted under it, so the removal never reaches into a buffer.
async fn epilog() -> Result<()> {
    let job: u64 = env("SLURM_JOB_ID")?.parse().context("SLURM_JOB_ID")?;
    let node = env("SLURMD_NODENAME")?;
    let note = node_state_dir().join(job.to_string());
    let job_dir = match std::fs::read(&note) {
        Ok(bytes) => PathBuf::from(std::ffi::OsString::from_vec(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()), // nothing made here
        Err(e) => return Err(e).with_context(|| format!("read {}", note.display())),
    };
    for (point, connection) in mounts_under(&job_dir) {
        if let Some(connection) = connection {
            // Fails harmlessly for a connection already gone.
            let _ = std::fs::write(format!("/sys/fs/fuse/connections/{connection}/abort"), "1");
        }
        let status = Command::new("umount").arg("-l").arg(&point).status().context("run umount")?;
        if !status.success() {
            bail!("cannot unmount {}", point.display());
        }
    }
    stop_mount_daemons(&job_dir);
    if !mounts_under(&job_dir).is_empty() {
        bail!("{} still has mounts: left in place", job_dir.display());
    }
    if job_dir.exists() {
        std::fs::remove_dir_all(&job_dir).with_context(|| format!("remove {}", job_dir.display()))?;
    }
    std::fs::remove_file(&note).with_context(|| format!("remove {}", note.display()))?;
    let socket = manager_address();
    match wire::call_manager(&socket, &Request::Detach { job, node }, DETACH_WAIT).await {
        Ok(Reply::Failed(why)) => tracing::warn!(job, "the manager on {socket} refused the detach: {why}"),
        Ok(_) => {}
        Err(e) => tracing::warn!(job, "the manager on {socket} did not hear of the detach ({e}); the node is clean"),
    }
    Ok(())
}

/// Stops the mount daemons serving under `job_dir` that are still there once their mounts
/// are detached (TERM, then KILL).
fn stop_mount_daemons(job_dir: &Path) {
    let serving = || -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
                let mut args = cmdline.split(|&b| b == 0).map(|a| Path::new(std::ffi::OsStr::from_bytes(a)));
                let is_mount = args.next().is_some_and(|program| program.file_name().is_some_and(|n| n == "surge-fuse"));
                is_mount && args.any(|arg| arg.starts_with(job_dir))
            })
            .collect()
    };
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let pids = serving();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) on a pid read from /proc; at worst it is gone already.
            unsafe { libc::kill(pid, signal) };
        }
        for _ in 0..50 {
            if serving().is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `surge status` without an instance: the cluster's pools, instances, sessions and stages,
/// as `dwstat` shows DataWarp's.
pub async fn status(json: bool) -> Result<()> {
    let Reply::Status(status) = ask(&Request::Status).await? else { bail!("unexpected answer") };
    if json {
        outln!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    outln!("{}", status_tables(&status));
    Ok(())
}

fn status_tables(s: &Status) -> String {
    let mut pools = Table::new(&["pool", "kind", "units", "quantity", "free", "gran", "nodes"]);
    for p in &s.pools {
        pools.row(vec![
            p.name.clone(),
            p.kind.to_string(),
            "bytes".into(),
            human_bytes(p.quantity * p.granularity),
            human_bytes(p.free * p.granularity),
            human_bytes(p.granularity),
            p.nodes.join(","),
        ]);
    }
    let mut instances = Table::new(&["instance", "job", "persistent", "pool", "mode", "capacity", "copies", "owner", "state", "servers"]);
    for i in &s.instances {
        instances.row(vec![
            i.name.clone(),
            i.job.map(|j| j.to_string()).unwrap_or_else(|| "-".into()),
            i.persistent.clone().unwrap_or_else(|| "-".into()),
            i.pool.clone(),
            i.mode.clone(),
            human_bytes(i.capacity),
            i.replicas.to_string(),
            i.owner_uid.to_string(),
            i.state.clone(),
            i.servers.iter().map(|s| s.node.as_str()).collect::<Vec<_>>().join(","),
        ]);
    }
    let mut sessions = Table::new(&["session", "owner", "state", "instances", "message"]);
    for j in &s.sessions {
        sessions.row(vec![
            j.job.to_string(),
            j.uid.to_string(),
            j.state.clone(),
            j.instances.join(","),
            j.message.clone().unwrap_or_default(),
        ]);
    }
    let mut stages = Table::new(&["job", "dir", "kind", "source", "destination", "state", "files", "bytes", "error"]);
    for st in &s.stages {
        stages.row(vec![
            st.job.to_string(),
            st.direction.to_string(),
            st.kind.clone(),
            st.source.clone(),
            st.destination.clone(),
            st.state.clone(),
            format!("{}/{}", st.files_done, st.files_total),
            format!("{}/{}", human_bytes(st.bytes_done), human_bytes(st.bytes_total)),
            st.error.clone().unwrap_or_default(),
        ]);
    }
    format!("POOLS\n{}\nINSTANCES\n{}\nSESSIONS\n{}\nSTAGES\n{}", pools.render(), instances.render(), sessions.render(), stages.render())
}
