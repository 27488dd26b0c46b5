//! `surge` — the command users, scripts and the scheduler integration call.
//!
//! Instance lifecycle (`up`, `down`, `status`, `list`), file transfer and namespace commands
//! through the native client (`put`, `get`, `ls`, `mv`, `rm`, `mkdir`, `stat`), staging
//! between the PFS and an instance (`stage`), benchmarks
//! (`bench`), the embedded demonstration (`demo`). Any other subcommand `surge X ...` runs
//! the program `surge-X` (found beside this binary, in the project's .venv, or on PATH), the
//! way git and cargo grow: `surge sim` and `surge predict` are separate components.

mod bb;
mod bench;
mod datawarp;
mod demo;
mod files;
mod fsck;

mod instance;
mod mount;
mod output;
mod reservation;
mod run;
mod stage;
mod table;
mod workflow;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use surge_client::surge_proto::placement::DirLayout;
use surge_client::surge_proto::workflow::RetentionPolicy;
use surge_client::{Client, ClientOptions, InstanceDescriptor, Mode};

use crate::output::{out, outln};

/// Commands of other components, run as `surge NAME ...` (the program `surge-NAME`; listed in
/// the help's "Other components").
const EXTERNAL_COMMANDS: &[&str] = &["sim", "predict"];

#[derive(Parser)]
#[command(
    name = "surge",
    version,
    about = "Surge: a job-scoped burst buffer for HPC",
    propagate_version = true,
    after_help = "Other components:\n  sim      Burst-buffer provisioning simulator (surge sim --help)\n  predict  Walltime and node-allocation predictor (surge predict --help)\n\nSizes: bytes, or a number with a unit: K, M, G, T (or KiB, MiB, GiB, TiB) are powers of 1024, KB, MB, GB, TB powers of 1000."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Target {
    /// Instance to use (default: the only one this machine knows).
    #[arg(long, short = 'i', env = "SURGE_INSTANCE")]
    instance: Option<String>,
    /// This node's address (source of connections; picks the namespace in private mode).
    #[arg(long, env = "SURGE_NODE")]
    node: Option<std::net::IpAddr>,
}

impl Target {
    fn client(&self) -> Result<Client> {
        let name = surge_client::target::default_instance(self.instance.as_deref())?;
        let opts = ClientOptions { node: self.node, ..Default::default() };
        Client::for_instance(&name, opts).with_context(|| format!("instance '{name}'"))
    }

    /// A client of the instance `path` is in (a path on a Surge mount, else a path inside the
    /// named or only instance), and the path inside it.
    fn client_at(&self, path: &str) -> Result<(Client, String)> {
        let at = surge_client::target::resolve_bb_path(path, self.instance.as_deref(), surge_client::target::Unnamed::OnlyInstance)?;
        let opts = ClientOptions { node: self.node, ..Default::default() };
        let client = Client::for_instance(&at.instance, opts).with_context(|| format!("instance '{}'", at.instance))?;
        Ok((client, at.inner))
    }
}

#[derive(Subcommand)]
enum Command {
    /// Start an instance: N servers pooling node-local storage.
    Up {
        /// Name of the new instance (letters, digits, '-', '_', '.'): other commands use it.
        #[arg(long)]
        name: String,
        /// Number of servers (default: one per --hosts entry, else 4).
        #[arg(long)]
        servers: Option<usize>,
        /// Total capacity (split equally over the servers; each share must fit the free space
        /// of --root on its node), in bytes or with a unit: K, M, G, T (or KiB ...) are powers
        /// of 1024, KB, MB, GB, TB powers of 1000.
        #[arg(long, value_parser = surge_units::parse_size)]
        capacity: u64,
        /// Node-local directory under which each server keeps its data (made absolute here).
        #[arg(long)]
        root: PathBuf,
        /// Comma-separated server hosts (addresses); default 127.0.0.11, .12, ...
        #[arg(long, value_delimiter = ',')]
        hosts: Vec<String>,
        /// striped: one namespace, each file's data striped over all servers; private: a
        /// namespace per node, whose data stays on that node's server.
        #[arg(long, default_value = "striped", value_parser = ["striped", "private"])]
        mode: String,
        /// Stripe chunk size, 4K to 64M (units as for --capacity).
        #[arg(long, default_value = "1M", value_parser = surge_units::parse_size)]
        chunk_size: u64,
        /// Print the descriptor as JSON instead of a summary.
        #[arg(long)]
        json: bool,
        /// Also mount the instance here (FUSE).
        #[arg(long)]
        mount: Option<PathBuf>,
        /// For an instance several users share: the servers check every request's
        /// permissions against the uid and gid MUNGE proves for its client (munged must run
        /// on every node; `SURGE_MUNGE_SOCKET` names its socket if not the default).
        #[arg(long)]
        check_identity: bool,
        /// Where the files of the root directory go, inherited by the directories made in it
        /// (`surge layout` changes it per directory): striped over all servers, or
        /// node-local: all of a file's chunks on the server of the node that creates it.
        #[arg(long, default_value_t = DirLayout::Striped)]
        layout: DirLayout,
        /// Back-pressure: once a server's share is filled past this fraction (e.g. 0.9),
        /// writes into drained directories (a retention policy or consumer group) wait for
        /// room instead of failing with ENOSPC, and go on once it is back down to
        /// --low-water (retention policies and consumers free it).
        #[arg(long, requires = "low_water")]
        high_water: Option<f64>,
        /// Writes held at the high-water mark go on once a server's share is back down to this
        /// fraction.
        #[arg(long, requires = "high_water")]
        low_water: Option<f64>,
        /// Seconds a write waits at the high-water mark before it fails with ENOSPC (the
        /// server logs why).
        #[arg(long, default_value_t = 60.0)]
        pressure_wait: f64,
        /// Copies of each server's share: with 2, each server mirrors its share (metadata and
        /// data) on the next one before answering, and `surge failover` has the next one
        /// serve it when a server is lost. Each server then holds two shares' worth of data.
        #[arg(long, default_value_t = 1)]
        replicas: u8,
        /// With --replicas 2 and three servers or more: a server whose mirror connection has
        /// been gone this many seconds, and which most servers cannot reach, has its share
        /// taken over by the next server without `surge failover` (a server cut off from most
        /// of the instance for half this long stops answering, so a share is never served twice).
        #[arg(long)]
        failover_after: Option<f64>,
    },
    /// Mount an instance as a directory (FUSE), in the background.
    Mount {
        /// Instance to mount.
        name: String,
        /// Mount point: an empty directory (made if only its last component is missing).
        dir: PathBuf,
        /// This node's address (connection source; picks the namespace in private mode).
        #[arg(long, env = "SURGE_NODE")]
        node: Option<std::net::IpAddr>,
        /// Mount read-only (EROFS for every change; `mount -o remount,rw DIR` lifts it).
        #[arg(long)]
        read_only: bool,
        /// Execute no program from the mount.
        #[arg(long)]
        no_exec: bool,
    },
    /// mount(8)'s helper for `mount -t fuse.surge surge:NAME DIR -o OPTIONS` and /etc/fstab
    /// (also run as `mount.fuse.surge`, a link to `surge` in /sbin).
    #[command(hide = true)]
    MountHelper(mount::MountHelper),
    /// Unmount a Surge mount. A busy one is refused, naming the processes holding it, unless
    /// --force.
    Umount {
        /// The mount point.
        dir: PathBuf,
        /// Detach a busy mount lazily: it goes once the processes holding it let go.
        #[arg(long)]
        force: bool,
    },
    /// Run the job-end stages, wait for all stages, then stop the instance and remove its data.
    Down {
        /// Instance to stop.
        name: String,
        /// Remove it even if a stage failed or cannot run (its data is lost), and detach busy
        /// mounts lazily.
        #[arg(long)]
        force: bool,
    },
    /// Start again the servers of an instance that stopped or died (or the one given), on
    /// their directories and addresses: they come back with their namespace and data, and
    /// clients and mounts reconnect by themselves.
    Restart {
        /// The instance.
        name: String,
        /// Only this server (its index, as `surge status` shows it).
        #[arg(long)]
        server: Option<usize>,
    },
    /// Server SERVER of an instance with two replicas is lost (its node died): the next
    /// server serves its share from the mirror it holds, and clients and mounts find it there
    /// by themselves. Refused while the server answers or its process runs.
    Failover {
        /// The instance.
        name: String,
        /// The lost server (its index, as `surge status` shows it).
        #[arg(long)]
        server: usize,
    },
    /// Check an instance's consistency across its servers (names without inodes, inodes
    /// without names, link counts, data files without files or past their size), and with
    /// --repair repair it; orphans with content go to /lost+found. Judges only what two scans
    /// a second apart both find, so it can run on a live instance.
    Fsck {
        /// The instance.
        name: String,
        /// Repair what is found (each repair a conditional step: what changed meanwhile is
        /// left alone).
        #[arg(long)]
        repair: bool,
        /// One JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Check a batch script's #DW directives as the Slurm submit hook does: prints what the job
    /// asks for, or every problem with its line (and exits 1).
    CheckScript {
        /// The batch script.
        script: PathBuf,
        /// The request (or the problems) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// An instance's servers, health, capacity used and free, file counts; without a name, the
    /// cluster's pools, instances, sessions and stages from Surge's manager (as dwstat shows).
    Status {
        /// Instance to show (default: the whole cluster, from the manager).
        name: Option<String>,
        /// One JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Instances known on this machine.
    List {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Copy a local file into the instance.
    Put {
        /// The local file.
        local: PathBuf,
        /// Where it goes in the instance (an absolute path inside it).
        path: String,
        #[command(flatten)]
        target: Target,
    },
    /// Copy a file out of the instance.
    Get {
        /// The file in the instance (an absolute path inside it).
        path: String,
        /// The local file to write.
        local: PathBuf,
        #[command(flatten)]
        target: Target,
    },
    /// List a directory.
    Ls {
        /// A path inside the instance.
        #[arg(default_value = "/")]
        path: String,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Rename (atomic; replaces an existing target).
    Mv {
        /// The path to rename.
        from: String,
        /// Its new name (replaced if it exists).
        to: String,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a file, or a directory tree with -r.
    Rm {
        /// The path to remove.
        path: String,
        /// Remove a directory and everything under it.
        #[arg(short, long)]
        recursive: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Create a directory (-p: with parents).
    Mkdir {
        /// The directory to create.
        path: String,
        /// Create missing parents too, and accept an existing directory.
        #[arg(short, long)]
        parents: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Show a directory's layout, or set it for the files made in it from now on (and the
    /// directories made in it, which inherit it): striped over all servers, or node-local.
    Layout {
        /// The directory: on a Surge mount, or a path inside the instance.
        dir: String,
        /// The layout to set (default: only show it).
        layout: Option<DirLayout>,
        #[command(flatten)]
        target: Target,
    },
    /// Print the files published in a directory as they are published — closed after
    /// writing, or renamed or linked into it; never one still being written —, one path per
    /// line, in publication order. Waits for the next one without polling.
    Watch {
        /// The directory: on a Surge mount, or a path inside the instance.
        dir: String,
        /// Only names matching this glob (default '*': every name not starting with '.', so
        /// temporary names such as '.plt00001.h5.tmp' stay hidden).
        #[arg(long)]
        pattern: Option<String>,
        /// Resume after this cursor (as --json prints it; default 0: from the oldest
        /// publication the directory's log holds).
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// One JSON object per line: path, name, size, mtime, cursor.
        #[arg(long)]
        json: bool,
        /// Stop after this many.
        #[arg(long)]
        count: Option<u64>,
        /// Stop once no publication came for this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        #[command(flatten)]
        target: Target,
    },
    /// Show or set what leaves a directory of the burst buffer, and when: the instance
    /// removes the files published there that the policy lets go (keeping the last N,
    /// once every consumer group acknowledged them, after staging them out) — never one
    /// open anywhere. Without options, shows the policy and what it did.
    Retention {
        /// The directory: on a Surge mount, or a path inside the instance.
        dir: String,
        /// Keep the newest N files.
        #[arg(long)]
        keep_last: Option<u32>,
        /// Remove a file only once every consumer group that takes it acknowledged it.
        #[arg(long)]
        after_groups: bool,
        /// Stage files out to this PFS directory before removing them.
        #[arg(long)]
        stage_out: Option<String>,
        /// With --stage-out: stage only every Nth file (the others are removed unstaged).
        #[arg(long, default_value_t = 1)]
        stage_every: u32,
        /// The files the policy governs (a glob; default '*').
        #[arg(long, default_value = "*")]
        pattern: String,
        /// Drop the directory's policy: files stay until removed.
        #[arg(long, conflicts_with_all = ["keep_last", "after_groups", "stage_out"])]
        off: bool,
        /// The policy and its counts as JSON (null: no policy).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Drain checkpoints beside an unmodified simulation: every Nth file matching --pattern
    /// is staged out to --to as soon as it is published, and all but the newest --keep are
    /// removed from the burst buffer (after their stage-out when they are staged). The
    /// instance does it (a retention policy on DIR): this command sets it and returns;
    /// --wait follows it until every file to stage is staged, --stop ends it.
    Drain {
        /// The directory the simulation writes its checkpoints to.
        dir: String,
        /// The checkpoints' names (a glob).
        #[arg(long, default_value = "*")]
        pattern: String,
        /// Stage every Nth checkpoint.
        #[arg(long, default_value_t = 1)]
        every: u32,
        /// The PFS directory checkpoints are staged to.
        #[arg(long, required_unless_present_any = ["stop", "wait"])]
        to: Option<String>,
        /// Checkpoints kept in the burst buffer (the newest).
        #[arg(long, default_value_t = 2)]
        keep: u32,
        /// Only wait until every checkpoint to stage is staged (and print the counts).
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        /// End the drain (files stay where they are).
        #[arg(long, conflicts_with = "wait")]
        stop: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Consumer groups: hand each file published in a directory to one consumer of a group.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Run an unmodified program with Surge's interception library loaded (LD_PRELOAD): its
    /// file calls on Surge mounts are served inside the process by the native client instead
    /// of through the kernel's FUSE mount; everything else (and what the library cannot
    /// serve) goes to the kernel as usual. See docs/preload.md
    Run {
        /// Append one line per process to this file at exit: what the library served and
        /// what it handed to the kernel
        #[arg(long)]
        report: Option<PathBuf>,
        /// The program and its arguments (after `--`)
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Show a path's attributes.
    Stat {
        /// A path inside the instance.
        path: String,
        /// JSON instead of a line of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Stage files between the PFS and an instance (in, out, status, wait, cancel, ...).
    #[command(subcommand)]
    Stage(stage::StageCommand),
    /// The workload manager's hooks and the nodes' prolog and epilog, as clients of Surge's
    /// manager (slurm/burst_buffer.lua calls these).
    #[command(subcommand)]
    Bb(bb::BbCommand),
    /// Persistent reservations without a job: create (for a user, shared with a group or
    /// users), destroy, list. Through Surge's manager.
    #[command(subcommand)]
    Reservation(reservation::ReservationCommand),
    /// DataWarp's `dw_wlm_cli` for Slurm's burst_buffer/datawarp plugin (also run as
    /// `dw_wlm_cli`): the functions it calls, answered by Surge's manager.
    DwWlmCli(datawarp::DwWlmCli),
    /// DataWarp's `dwstat` (also run as `dwstat`): pools, sessions, instances, configurations,
    /// fragments, nodes.
    Dwstat {
        /// Views: pools, sessions, instances, configurations, fragments, nodes, all (default: all).
        views: Vec<String>,
    },
    /// Benchmarks of an instance or of a local directory (for baselines).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Start a local 4-server instance, run a write/read/publish round trip, print a summary, tear down.
    Demo {
        /// Where the servers keep data (default: /dev/shm if present, else the temp dir).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    #[command(external_subcommand)]
    External(Vec<String>),
}

/// Installed as `dw_wlm_cli`, `dwstat` or `mount.fuse.surge` (a link to `surge`), the
/// command is that one.
fn called_as(args: std::env::ArgsOs) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = args.collect();
    let called = args.first().and_then(|a| PathBuf::from(a).file_name().map(|n| n.to_owned()));
    let command = match called.as_ref().and_then(|n| n.to_str()) {
        Some("dw_wlm_cli") => Some("dw-wlm-cli"),
        Some("dwstat") => Some("dwstat"),
        Some("mount.fuse.surge") => Some("mount-helper"),
        _ => None,
    };
    if let Some(command) = command {
        args.insert(1, command.into());
    }
    args
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: logs go to files and test output too.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse_from(called_as(std::env::args_os()));
    if let Command::External(args) = &cli.command {
        return run_external(args);
    }
    if let Command::MountHelper(helper) = &cli.command {
        // mount(8) runs the helper without the user's environment: home= says where the
        // instance's descriptor is. Set before any thread exists.
        match helper.parsed() {
            Ok(options) => {
                if let Some(home) = options.home {
                    std::env::set_var("SURGE_HOME", home);
                }
            }
            Err(e) => {
                eprintln!("mount.fuse.surge: {e:#}");
                return ExitCode::from(32);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("surge: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Up {
            name,
            servers,
            capacity,
            root,
            hosts,
            mode,
            chunk_size,
            json,
            mount,
            check_identity,
            layout,
            high_water,
            low_water,
            pressure_wait,
            replicas,
            failover_after,
        } => {
            let servers = servers.unwrap_or(if hosts.is_empty() { 4 } else { hosts.len() });
            let mode: Mode = mode.parse().map_err(anyhow::Error::msg)?;
            let watermarks =
                surge_client::surge_proto::workflow::Watermarks::given(high_water, low_water, pressure_wait).map_err(anyhow::Error::msg)?;
            let params = instance::UpParams {
                name,
                servers,
                capacity,
                root,
                hosts,
                mode,
                chunk_size,
                check_identity,
                layout,
                watermarks,
                replicas,
                failover_after,
            };
            let (desc, took) = instance::up(&params).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&desc)?);
            } else {
                outln!(
                    "instance '{}' up in {:.3} s: {} servers, {} mode, {} layout, {} chunks, {} capacity",
                    desc.name,
                    took.as_secs_f64(),
                    desc.servers.len(),
                    desc.mode,
                    desc.layout,
                    table::human_bytes(desc.chunk_size),
                    table::human_bytes(desc.capacity)
                );
                outln!("descriptor: {}", surge_client::descriptor::descriptor_path(&desc.name).display());
                out!("{}", instance::servers_table(&desc, &instance::probe(&desc).await));
            }
            if let Some(dir) = mount {
                let dir = mount::mount(&desc.name, &dir, &mount::MountChoices::default()).await?;
                if !json {
                    outln!("mounted on {}", dir.display());
                }
            }
        }
        Command::Mount { name, dir, node, read_only, no_exec } => {
            let dir = mount::mount(&name, &dir, &mount::MountChoices { node, read_only, no_exec }).await?;
            outln!("instance '{name}' mounted on {}", dir.display());
        }
        Command::MountHelper(helper) => mount::helper(&helper).await?,
        Command::Umount { dir, force } => {
            mount::umount(&dir, force)?;
            outln!("unmounted {}", dir.display());
        }
        Command::Down { name, force } => {
            let desc = InstanceDescriptor::load(&name)?;
            // A busy mount stops `down` before anything is torn down.
            mount::umount_all(&name, force)?;
            stage::before_down(&desc, force).await?;
            instance::down(&desc, force).await?;
            outln!("instance '{name}' stopped and removed");
        }
        Command::Restart { name, server } => {
            let mut desc = InstanceDescriptor::load(&name)?;
            let restarted = instance::restart(&mut desc, server).await?;
            if restarted.is_empty() {
                outln!("every server of '{name}' is up and answering");
            } else {
                let list: Vec<String> = restarted.iter().map(usize::to_string).collect();
                outln!("restarted server(s) {} of '{name}'", list.join(", "));
            }
        }
        Command::Failover { name, server } => {
            let desc = InstanceDescriptor::load(&name)?;
            let (by, took) = instance::failover(&desc, server).await?;
            outln!("server {server}'s share of '{name}' is served by server {by} (taken over in {:.3} s)", took.as_secs_f64());
        }
        Command::CheckScript { script, json } => {
            let text = std::fs::read(&script).with_context(|| format!("read {}", script.display()))?;
            match surge_directives::parse_script(&String::from_utf8_lossy(&text)) {
                Ok(request) if json => outln!("{}", serde_json::to_string_pretty(&request)?),
                Ok(request) => outln!("{}", describe_request(&request)),
                Err(problems) => {
                    if json {
                        outln!("{}", serde_json::to_string_pretty(&serde_json::json!({ "problems": problems }))?);
                    }
                    let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
                    anyhow::bail!("{}: {} problem(s) with #DW directives:\n{}", script.display(), problems.len(), lines.join("\n"));
                }
            }
        }
        Command::Fsck { name, repair, json } => fsck::fsck(&InstanceDescriptor::load(&name)?, repair, json).await?,
        Command::Status { name: None, json } => bb::status(None, &[], json).await?,
        Command::Status { name: Some(name), json } => {
            let desc = InstanceDescriptor::load(&name)?;
            let stats = instance::probe(&desc).await;
            if json {
                let servers: Vec<serde_json::Value> = desc
                    .servers
                    .iter()
                    .zip(&stats)
                    .map(|(s, st)| match st {
                        Ok(st) => serde_json::json!({"index": s.index, "host": s.host, "addr": s.addr, "up": true,
                            "used": st.used, "capacity": st.capacity, "files": st.files, "dirs": st.dirs}),
                        Err(e) => {
                            serde_json::json!({"index": s.index, "host": s.host, "addr": s.addr, "up": false, "error": e.to_string()})
                        }
                    })
                    .collect();
                let doc = serde_json::json!({"name": desc.name, "mode": desc.mode, "chunk_size": desc.chunk_size,
                    "capacity": desc.capacity, "servers": servers});
                outln!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                outln!(
                    "instance '{}': {} mode, {} chunks, {} servers",
                    desc.name,
                    desc.mode,
                    table::human_bytes(desc.chunk_size),
                    desc.servers.len()
                );
                out!("{}", instance::servers_table(&desc, &stats));
                if stats.iter().any(|s| s.is_err()) {
                    anyhow::bail!("some servers of '{}' are down", desc.name);
                }
            }
        }
        Command::List { json } => files::list_instances(json)?,
        Command::Put { local, path, target } => files::put(&target.client()?, &local, &path).await?,
        Command::Get { path, local, target } => files::get(&target.client()?, &path, &local).await?,
        Command::Ls { path, json, target } => files::ls(&target.client()?, &path, json).await?,
        Command::Mv { from, to, target } => {
            target.client()?.rename(&from, &to).await?;
            outln!("renamed {from} -> {to}");
        }
        Command::Rm { path, recursive, target } => files::rm(&target.client()?, &path, recursive).await?,
        Command::Mkdir { path, parents, target } => {
            let client = target.client()?;
            if parents {
                client.mkdir_all(&path, 0o755).await?;
            } else {
                client.mkdir(&path, 0o755).await?;
            }
        }
        Command::Layout { dir, layout, target } => {
            let (client, inner) = target.client_at(&dir)?;
            files::layout(&client, &dir, &inner, layout).await?
        }
        Command::Watch { dir, pattern, from, json, count, timeout, target } => {
            let (client, inner) = target.client_at(&dir)?;
            let timeout = timeout.map(std::time::Duration::try_from_secs_f64).transpose().context("--timeout")?;
            let args = workflow::WatchArgs { shown: &dir, inner: &inner, pattern: pattern.as_deref(), from, json, count, timeout };
            workflow::watch(&client, args).await?
        }
        Command::Run { report, command } => run::run(&command, report.as_deref())?,
        Command::Stat { path, json, target } => files::stat(&target.client()?, &path, json).await?,
        Command::Bb(command) => bb::run(command).await?,
        Command::Reservation(command) => reservation::run(command).await?,
        Command::DwWlmCli(args) => datawarp::dw_wlm_cli(args).await?,
        Command::Dwstat { views } => datawarp::dwstat(&views).await?,
        Command::Stage(cmd) => stage::run(cmd).await?,
        Command::Queue(cmd) => return queue(cmd).await,
        Command::Retention { dir, keep_last, after_groups, stage_out, stage_every, pattern, off, json, target } => {
            let (client, inner) = target.client_at(&dir)?;
            let policy = if keep_last.is_some() || after_groups || stage_out.is_some() {
                let stage_out = stage_out.map(|to| surge_client::target::absolute_pfs_path(&to)).transpose()?;
                Some(RetentionPolicy { pattern, keep_last, after_groups, stage_out, stage_every })
            } else {
                None
            };
            if policy.is_some() || off {
                client.set_retention(&inner, policy).await?;
            }
            workflow::print_retention(&dir, client.retention(&inner).await?.as_ref(), json)?;
        }
        Command::Drain { dir, pattern, every, to, keep, wait, timeout, stop, target } => {
            let (client, inner) = target.client_at(&dir)?;
            if stop {
                client.set_retention(&inner, None).await?;
                outln!("{dir}: drain stopped (files stay where they are)");
            } else if wait {
                workflow::wait_drained(&client, &inner, timeout.map(|t| seconds_arg(t, "--timeout")).transpose()?).await?;
            } else {
                let to = surge_client::target::absolute_pfs_path(&to.expect("required by clap"))?;
                let policy =
                    RetentionPolicy { pattern, keep_last: Some(keep), after_groups: false, stage_out: Some(to), stage_every: every };
                client.set_retention(&inner, Some(policy)).await?;
                workflow::print_retention(&dir, client.retention(&inner).await?.as_ref(), false)?;
            }
        }
        Command::Bench(cmd) => bench::run(cmd).await?,
        Command::Demo { root } => demo::run(root).await?,
        Command::External(_) => unreachable!("handled before the runtime starts"),
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
enum QueueCommand {
    /// Take the next file published in DIR that the group has not had, print its path and
    /// hold it for --lease seconds (waits until there is one; after --timeout exits 1 with
    /// nothing printed). The group is made by its first claim, with --pattern.
    Claim {
        /// The directory: on a Surge mount, or a path inside the instance.
        dir: String,
        /// The consumer group (made by its first claim).
        #[arg(long)]
        group: String,
        /// The files the group takes (a glob; default '*': names not starting with '.').
        #[arg(long)]
        pattern: Option<String>,
        /// Seconds the file is this consumer's; not acknowledged by then, it goes back to
        /// the group.
        #[arg(long, default_value_t = 300.0)]
        lease: f64,
        /// Give up after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        /// The consumer's name in `surge queue status` (default: node:pid of the caller).
        #[arg(long)]
        consumer: Option<String>,
        /// JSON with the claim's token (for `surge queue done --token`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Acknowledge a claimed file: the group is done with it.
    Done {
        /// The file, as `surge queue claim` printed it.
        file: String,
        /// The group that handed it out (default: the one group holding a claim on it).
        #[arg(long)]
        group: Option<String>,
        /// Only if the claim is still this one (its lease did not run out and go to another).
        #[arg(long)]
        token: Option<u64>,
        /// Then remove the file from the burst buffer.
        #[arg(long, conflicts_with = "stage_out")]
        delete: bool,
        /// Stage the file out to this PFS path first (waits for it), then acknowledge.
        #[arg(long)]
        stage_out: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Every consumer group of DIR: files produced, claimed, done, waiting, expired claims,
    /// production and consumption rates (last minute) and kappa (their ratio).
    Status {
        /// The directory: on a Surge mount, or a path inside the instance.
        dir: String,
        /// One JSON object per group (kappa null while nothing was consumed lately).
        #[arg(long)]
        json: bool,
        /// Print again every this many seconds.
        #[arg(long)]
        watch: Option<f64>,
        #[command(flatten)]
        target: Target,
    },
}

/// Seconds given on the command line as a duration.
fn seconds_arg(seconds: f64, what: &str) -> Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds).with_context(|| format!("{what}: {seconds} is not a number of seconds"))
}

async fn queue(command: QueueCommand) -> Result<ExitCode> {
    match command {
        QueueCommand::Claim { dir, group, pattern, lease, timeout, consumer, json, target } => {
            let (client, inner) = target.client_at(&dir)?;
            let args = workflow::ClaimArgs {
                shown: &dir,
                inner: &inner,
                group: &group,
                pattern: pattern.as_deref(),
                consumer: consumer.unwrap_or_else(workflow::default_consumer),
                lease: seconds_arg(lease, "--lease")?,
                timeout: timeout.map(|t| seconds_arg(t, "--timeout")).transpose()?,
                json,
            };
            let claimed = workflow::claim(&client, args).await?;
            return Ok(if claimed { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        QueueCommand::Done { file, group, token, delete, stage_out, target } => {
            let (client, inner) = target.client_at(&file)?;
            if let Some(dest) = stage_out {
                let at =
                    surge_client::target::resolve_bb_path(&file, target.instance.as_deref(), surge_client::target::Unnamed::OnlyInstance)?;
                stage::stage_out_file(&client, &at.instance, &inner, &dest).await?;
            }
            let group = client.claim_done(&inner, group.as_deref(), token).await?;
            if delete {
                client.unlink(&inner).await.with_context(|| format!("acknowledged in group '{group}', but not removed"))?;
            }
        }
        QueueCommand::Status { dir, json, watch, target } => {
            let (client, inner) = target.client_at(&dir)?;
            let every = watch.map(|w| seconds_arg(w, "--watch")).transpose()?;
            loop {
                workflow::queue_status(&client, &inner, json).await?;
                let Some(every) = every else { break };
                tokio::time::sleep(every).await;
                outln!();
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `, did you mean 'stage'?` for a mistyped command, or nothing.
/// What a job asks of the burst buffer, in a few lines.
fn describe_request(r: &surge_directives::JobRequest) -> String {
    let mut out = Vec::new();
    if let Some(dw) = &r.jobdw {
        let pool = dw.pool.as_deref().map(|p| format!(" from pool {p}")).unwrap_or_default();
        out.push(format!("job buffer: {} {:?}{pool}", table::human_bytes(dw.capacity), dw.access));
    }
    for p in &r.create_persistent {
        out.push(format!("create persistent '{}': {} {:?}", p.name, table::human_bytes(p.capacity), p.access));
    }
    for name in &r.persistent {
        out.push(format!("uses persistent '{name}'"));
    }
    for (name, hurry) in &r.destroy_persistent {
        out.push(format!("destroy persistent '{name}'{}", if *hurry { " (hurry)" } else { "" }));
    }
    for (verb, stages) in [("stage in", &r.stage_in), ("stage out", &r.stage_out)] {
        for s in stages {
            out.push(format!("{verb} ({:?}): {} -> {}", s.kind, s.source, s.destination));
        }
    }
    if out.is_empty() {
        out.push("no #DW directives: the job uses no burst buffer".into());
    }
    out.extend(r.warnings.iter().map(|w| format!("warning: {w}")));
    out.join("\n")
}

fn did_you_mean(typed: &str) -> String {
    use clap::CommandFactory;
    let command = Cli::command();
    let names = command.get_subcommands().map(|c| c.get_name().to_string()).chain(EXTERNAL_COMMANDS.iter().map(|n| n.to_string()));
    names
        .map(|name| (strsim::jaro_winkler(typed, &name), name))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| format!("; did you mean '{name}'?"))
        .unwrap_or_default()
}

/// `surge X args...` -> `surge-X args...`.
fn run_external(args: &[String]) -> ExitCode {
    let name = format!("surge-{}", args[0]);
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        candidates.push(exe.with_file_name(&name));
        // target/release/surge -> <repo>/.venv/bin/surge-X
        if let Some(repo) = exe.ancestors().nth(3) {
            candidates.push(repo.join(".venv/bin").join(&name));
        }
    }
    let program = candidates.into_iter().find(|p| p.exists()).unwrap_or_else(|| PathBuf::from(&name));
    match std::process::Command::new(&program).args(&args[1..]).status() {
        Ok(status) => ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !EXTERNAL_COMMANDS.contains(&args[0].as_str()) => {
            eprintln!("surge: '{}' is not a surge command{} (`surge --help` lists them)", args[0], did_you_mean(&args[0]));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "surge: {} could not be run: {e} (is it installed? `make install`, or `make venv` for surge-predict)",
                program.display()
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument of every command says what it is for (`surge X --help`).
    #[test]
    fn every_argument_has_help() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.get_help().is_none() && id != "help" && id != "version" {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "surge", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }
}
