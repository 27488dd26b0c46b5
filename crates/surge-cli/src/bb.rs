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
use surge_control::manager::{Attachment, Direction, PoolView, Progress, Reply, Request, Status, Viewer};
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
    /// At submit, before the burst-buffer plugin reads the job (job_submit.lua): Slurm's
    /// `#BB create_persistent`/`destroy_persistent` lines become `#DW` lines, a `--bb` option in
    /// DataWarp's short form a `#DW jobdw` line, and lines naming no pool get the default one.
    /// Writes the text to --out; prints warnings; refuses a job without nodes that asks for a
    /// burst buffer (the lua plugin refuses it without a word).
    JobSubmit {
        /// The job's script (or, with --bb-option, its --bb text).
        text: PathBuf,
        /// Where the rewritten text goes.
        #[arg(long)]
        out: PathBuf,
        /// The text is the job's --bb option (sbatch, salloc, srun), not its script.
        #[arg(long)]
        bb_option: bool,
        /// The job asks for no nodes (-N0).
        #[arg(long)]
        zero_nodes: bool,
    },
    /// At submit: check a job script's #DW lines against the pools and reservations.
    JobProcess {
        /// The job script.
        script: PathBuf,
        /// The submitting user, when the workload manager says (Slurm 23.02+).
        #[arg(long)]
        uid: Option<u32>,
        /// The submitting user's group, when the workload manager says (Slurm 23.02+).
        #[arg(long)]
        gid: Option<u32>,
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
    /// Surge's status as `scontrol show bbstat [WORDS...]` shows it (slurm_bb_get_status):
    /// WORDS are views (pools, nodes, instances, servers, sessions, stages, all) and job ids,
    /// which keep only those jobs' instances, sessions and stages. Without a view: pools,
    /// instances, sessions and stages (with a job id: its instances, sessions and stages).
    Status {
        /// Show what this user may see: their own jobs' sessions and stages only (root and the
        /// trusted uids see everyone's). Only root and the trusted uids may name another user.
        #[arg(long, conflicts_with = "unknown_caller")]
        uid: Option<u32>,
        /// Whoever asks is not known (Slurm 22.05 does not tell the hook): show no one's
        /// sessions and stages.
        #[arg(long)]
        unknown_caller: bool,
        /// One JSON document (the views not asked for left empty).
        #[arg(long)]
        json: bool,
        /// Views and job ids.
        words: Vec<String>,
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
        BbCommand::JobSubmit { text, out, bb_option, zero_nodes } => job_submit(&text, &out, bb_option, zero_nodes).await?,
        BbCommand::JobProcess { script, uid, gid } => {
            let script = read_script(&script)?;
            // Under burst_buffer/lua a `#BB` line here was not rewritten at submit: refused
            // rather than ignored (the datawarp plugin's hook, dw_wlm_cli, leaves them to Slurm).
            let untranslated = surge_directives::submit::untranslated_bb_lines(&script);
            if !untranslated.is_empty() {
                let lines: Vec<String> = untranslated.iter().map(|e| format!("  {e}")).collect();
                bail!("{} problem(s) with #BB directives:\n{}", untranslated.len(), lines.join("\n"));
            }
            check_job(script, uid, gid).await?;
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
        BbCommand::Status { uid, unknown_caller, json, words } => {
            let viewer = match (uid, unknown_caller) {
                (Some(uid), _) => Some(Viewer::User(uid)),
                (None, true) => Some(Viewer::Unknown),
                (None, false) => None,
            };
            status(viewer, &words, json).await?
        }
        BbCommand::Prolog => prolog().await?,
        BbCommand::Epilog => epilog().await?,
    }
    Ok(())
}

/// The manager's check of a job script at submit, within the time a hook inside the
/// controller has. `#BB` lines are not looked at: under the datawarp plugin they are Slurm's.
pub async fn check_job(script: String, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
    ask_inside_controller(&Request::CheckJob { script, uid, gid }).await?;
    Ok(())
}

/// `surge bb job-submit`: `text` rewritten for the lua plugin into `out` (see
/// [`surge_directives::submit`]), the manager asked for the default pool only when a line
/// needs it; warnings of the result printed, one a line.
async fn job_submit(text: &Path, out: &Path, bb_option: bool, zero_nodes: bool) -> Result<()> {
    use surge_directives::submit::{self, Text};
    let form = if bb_option { Text::BbOption } else { Text::Script };
    let bytes = std::fs::read(text).with_context(|| format!("read {}", text.display()))?;
    let original = String::from_utf8_lossy(&bytes);
    let write = |content: &[u8]| std::fs::write(out, content).with_context(|| format!("write {}", out.display()));
    if !submit::has_directives(&original, form) {
        return write(&bytes);
    }
    if zero_nodes {
        bail!("{}", submit::ZERO_NODES_REFUSED);
    }
    let default_pool = if submit::needs_pool(&original, form) {
        let Reply::Pools(pools) = ask_inside_controller(&Request::Pools).await? else { bail!("unexpected answer") };
        // The first the manager lists is its default, as DataWarp lists its default first.
        pools.first().map(|p| p.name.clone())
    } else {
        None
    };
    // Line by line (the rewrite is), so that a line that is not UTF-8 (a comment in another
    // encoding) passes byte for byte: only directive lines change.
    let mut rewritten = Vec::with_capacity(bytes.len() + 64);
    let mut problems = Vec::new();
    for (index, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        if index > 0 {
            rewritten.push(b'\n');
        }
        match std::str::from_utf8(raw).map(|line| submit::rewrite(line, form, default_pool.as_deref())) {
            Ok(Ok((line, _))) => rewritten.extend_from_slice(line.as_bytes()),
            Ok(Err(found)) => problems.extend(found.into_iter().map(|p| surge_directives::DirectiveError { line: index + 1, ..p })),
            Err(_) => rewritten.extend_from_slice(raw),
        }
    }
    if !problems.is_empty() {
        let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        bail!("{} problem(s) with the burst-buffer request:\n{}", problems.len(), lines.join("\n"));
    }
    write(&rewritten)?;
    // Problems are job_process's to report (with the pools and reservations); warnings of a
    // request that parses are shown here, where the user still sees them.
    if let Ok(request) = surge_directives::parse_script(&String::from_utf8_lossy(&rewritten)) {
        for warning in &request.warnings {
            outln!("Surge: warning: {warning}");
        }
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
    // Only daemons of this node's mount namespace: the job's directory has the same path in
    // every node's, and processes of another namespace (a container, another node of a
    // test cluster sharing this kernel) serve other mounts.
    let own_namespace = std::fs::read_link("/proc/self/ns/mnt").ok();
    let serving = || -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| own_namespace.is_some() && std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok() == own_namespace)
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

/// `surge status` without an instance, and `surge bb status`: the cluster's pools, nodes,
/// instances, servers, sessions and stages, as `viewer` may see them (without one, as the
/// caller may: see [`Viewer`]), the views and jobs `words` choose ([`selection`]).
pub async fn status(viewer: Option<Viewer>, words: &[String], json: bool) -> Result<()> {
    let (views, jobs) = selection(words)?;
    let request = match viewer {
        Some(viewer) => Request::StatusFor { viewer },
        None => Request::Status,
    };
    let Reply::Status(status) = ask(&request).await? else { bail!("unexpected answer") };
    let shown = selected(status.clone(), &views, &jobs);
    if json {
        outln!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(());
    }
    outln!("{}", status_tables(&status, &shown, &views));
    Ok(())
}

/// The views of `surge bb status`, in the order they are shown.
const STATUS_VIEWS: [&str; 6] = ["pools", "nodes", "instances", "servers", "sessions", "stages"];

/// What `surge bb status WORDS...` shows: the views named (`all`: every one) and the jobs
/// whose ids are given. Without a view: pools, instances, sessions and stages, or with job
/// ids, those jobs' instances, sessions and stages.
fn selection(words: &[String]) -> Result<(Vec<&'static str>, Vec<u64>)> {
    let mut views = Vec::new();
    let mut jobs = Vec::new();
    for word in words {
        if word == "all" {
            views.extend(STATUS_VIEWS);
        } else if let Some(view) = STATUS_VIEWS.iter().find(|v| **v == word) {
            views.push(*view);
        } else if let Ok(job) = word.parse::<u64>() {
            jobs.push(job);
        } else {
            bail!("no view '{word}': views are {}, all; or a job id", STATUS_VIEWS.join(", "));
        }
    }
    if views.is_empty() {
        views = if jobs.is_empty() { vec!["pools", "instances", "sessions", "stages"] } else { vec!["instances", "sessions", "stages"] };
    }
    views.sort_by_key(|v| STATUS_VIEWS.iter().position(|s| s == v));
    views.dedup();
    Ok((views, jobs))
}

/// `status` with only the views asked for, and with job ids, only those jobs' instances (and
/// the reservations they use), sessions and stages.
fn selected(mut status: Status, views: &[&str], jobs: &[u64]) -> Status {
    if !jobs.is_empty() {
        status.sessions.retain(|s| jobs.contains(&s.job));
        let used: Vec<&String> = status.sessions.iter().flat_map(|s| &s.instances).collect();
        status.instances.retain(|i| i.job.is_some_and(|j| jobs.contains(&j)) || used.contains(&&i.name));
        status.stages.retain(|s| jobs.contains(&s.job));
    }
    if !views.contains(&"pools") && !views.contains(&"nodes") {
        status.pools.clear();
    }
    if !views.contains(&"instances") && !views.contains(&"servers") && !views.contains(&"nodes") {
        status.instances.clear();
    }
    if !views.contains(&"sessions") {
        status.sessions.clear();
    }
    if !views.contains(&"stages") {
        status.stages.clear();
    }
    status
}

/// The views of `shown` as tables; nodes from `all`, for what a node holds is everyone's.
fn status_tables(all: &Status, shown: &Status, views: &[&str]) -> String {
    let s = shown;
    let mut out = Vec::new();
    match s.viewer {
        Viewer::Admin => {}
        Viewer::User(uid) => out.push(format!("Sessions and stages of uid {uid}'s jobs only.\n")),
        Viewer::Unknown => {
            out.push("Sessions and stages not shown: this Slurm does not say who asks (run `surge status` to see your own).\n".to_string())
        }
    }
    for view in views {
        let (title, table) = match *view {
            "pools" => ("POOLS", pools_table(s)),
            "nodes" => ("NODES", nodes_table(all)),
            "instances" => ("INSTANCES", instances_table(s)),
            "servers" => ("SERVERS", servers_table(s)),
            "sessions" => ("SESSIONS", sessions_table(s)),
            _ => ("STAGES", stages_table(s)),
        };
        out.push(format!("{title}\n{}", table.render()));
    }
    out.join("\n")
}

fn pools_table(s: &Status) -> Table {
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
    pools
}

/// Each node of each pool: what the pool may use of it, what the servers of any instance hold
/// there (a node in two pools is charged by both), what is left, how many servers it runs.
fn nodes_table(s: &Status) -> Table {
    let mut nodes = Table::new(&["node", "pool", "capacity", "held", "free", "servers"]);
    for p in &s.pools {
        for (k, node) in p.nodes.iter().enumerate() {
            let on_node: Vec<u64> = s.instances.iter().flat_map(|i| &i.servers).filter(|sv| &sv.node == node).map(|sv| sv.share).collect();
            let held: u64 = on_node.iter().sum();
            let capacity = p.capacities.get(k).copied();
            nodes.row(vec![
                node.clone(),
                p.name.clone(),
                capacity.map_or("-".into(), human_bytes),
                human_bytes(held),
                capacity.map_or("-".into(), |c| human_bytes(c.saturating_sub(held))),
                on_node.len().to_string(),
            ]);
        }
    }
    nodes
}

fn instances_table(s: &Status) -> Table {
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
    instances
}

/// Each server of each instance: where it runs and what it holds there (with two copies, its
/// share and its predecessor's mirror).
fn servers_table(s: &Status) -> Table {
    let mut servers = Table::new(&["instance", "index", "node", "address", "holds", "state"]);
    for i in &s.instances {
        for (index, server) in i.servers.iter().enumerate() {
            servers.row(vec![
                i.name.clone(),
                index.to_string(),
                server.node.clone(),
                if server.addr.is_empty() { "-".into() } else { server.addr.clone() },
                human_bytes(server.share),
                i.state.clone(),
            ]);
        }
    }
    servers
}

fn sessions_table(s: &Status) -> Table {
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
    sessions
}

fn stages_table(s: &Status) -> Table {
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
    stages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn bbstat_words_choose_views_and_jobs() {
        assert_eq!(selection(&[]).unwrap(), (vec!["pools", "instances", "sessions", "stages"], vec![]));
        assert_eq!(selection(&words("42")).unwrap(), (vec!["instances", "sessions", "stages"], vec![42]));
        assert_eq!(selection(&words("stages 42 7")).unwrap(), (vec!["stages"], vec![42, 7]));
        assert_eq!(selection(&words("stages nodes pools stages")).unwrap().0, ["pools", "nodes", "stages"], "in order, once");
        assert_eq!(selection(&words("all")).unwrap().0, STATUS_VIEWS);
        let unknown = selection(&words("pools frags")).unwrap_err().to_string();
        assert!(unknown.contains("no view 'frags'") && unknown.contains("servers"), "{unknown}");
    }

    #[test]
    fn a_job_id_keeps_that_jobs_rows_and_the_reservations_it_uses() {
        let status: Status = serde_json::from_value(serde_json::json!({
            "pools": [{"name": "bb", "kind": "standing", "granularity": 1024, "quantity": 8, "free": 4,
                       "nodes": ["bb1"], "capacities": [8192]}],
            "instances": [
                {"name": "job-7", "job": 7, "persistent": null, "pool": "bb", "mode": "striped", "capacity": 2048, "owner_uid": 1,
                 "state": "ready", "created": 1, "servers": [{"node": "bb1", "addr": "a", "share": 2048}]},
                {"name": "job-8", "job": 8, "persistent": null, "pool": "bb", "mode": "striped", "capacity": 1024, "owner_uid": 2,
                 "state": "ready", "created": 1, "servers": [{"node": "bb1", "addr": "b", "share": 1024}]},
                {"name": "ps-ckpt", "job": null, "persistent": "ckpt", "pool": "bb", "mode": "striped", "capacity": 1024, "owner_uid": 1,
                 "state": "ready", "created": 1, "servers": [{"node": "bb1", "addr": "c", "share": 1024}]}],
            "sessions": [
                {"job": 7, "uid": 1, "state": "running", "created": 1, "instances": ["job-7", "ps-ckpt"], "message": null},
                {"job": 8, "uid": 2, "state": "staging-in", "created": 1, "instances": ["job-8"], "message": null}],
            "stages": [{"job": 8, "direction": "in", "kind": "file", "source": "/pfs/x", "destination": "$DW_JOB_STRIPED/x",
                        "state": "running", "files_done": 0, "files_total": 1, "bytes_done": 0, "bytes_total": 1, "error": null}],
            "viewer": {"user": 1}
        }))
        .unwrap();
        let (views, jobs) = selection(&words("7 nodes instances sessions stages")).unwrap();
        let shown = selected(status.clone(), &views, &jobs);
        let names: Vec<&str> = shown.instances.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["job-7", "ps-ckpt"]);
        assert_eq!(shown.sessions.len(), 1);
        assert!(shown.stages.is_empty());
        let text = status_tables(&status, &shown, &views);
        assert!(text.starts_with("Sessions and stages of uid 1's jobs only."), "{text}");
        // A node's use is everyone's, whichever job is asked about: 4 KiB held by 3 servers.
        assert!(text.contains("bb1   bb     8.0 KiB  4.0 KiB  4.0 KiB        3"), "{text}");
        assert!(!text.contains("job-8") && !text.contains("POOLS"), "{text}");
    }
}
