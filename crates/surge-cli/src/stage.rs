//! `surge stage ...`: stage files between the PFS and an instance, watch, wait, cancel.
//!
//! Burst-buffer paths may be given as paths on a Surge mount (`/mnt/bb/run/out.h5`, the
//! instance is then the mounted one) or as paths inside an instance (`/run/out.h5` with
//! `--instance`). PFS paths are made absolute here: the servers resolve them on their nodes.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use surge_client::target::{self, BbPath, Unnamed};

use surge_client::surge_proto::stage::{StageDirection, StageKind, StageState, StageSummary, StageWhen};
use surge_client::surge_proto::ErrorCode;
use surge_client::{Client, ClientOptions, InstanceDescriptor, Mode};

use crate::table::{human_bytes, Table};

use crate::output::{out, outln};

#[derive(Clone, Copy, ValueEnum)]
pub enum KindArg {
    File,
    Directory,
    List,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum WhenArg {
    Immediate,
    JobEnd,
}

#[derive(clap::Args, Clone)]
pub struct InstanceArg {
    /// Instance (default: the one mounted at the burst-buffer path, or the only one there is).
    #[arg(long, short = 'i', env = "SURGE_INSTANCE")]
    instance: Option<String>,
    /// This node's address (connection source).
    #[arg(long, env = "SURGE_NODE")]
    node: Option<std::net::IpAddr>,
}

#[derive(clap::Args)]
pub struct CopyArgs {
    /// Source: a PFS path for `in`, a burst-buffer path for `out`.
    src: String,
    /// Destination: a burst-buffer path for `in`, a PFS path for `out`.
    dst: String,
    /// What the source is (default: a directory if it is one, else a file). A list is a PFS
    /// text file of `SOURCE DESTINATION` lines.
    #[arg(long = "type", value_enum)]
    kind: Option<KindArg>,
    /// immediate: copy now; job-end: copy when the job ends (`surge stage job-end`, or
    /// `surge down`), unless revoked before.
    #[arg(long, value_enum, default_value = "immediate")]
    when: WhenArg,
    /// Compare size and per-chunk checksums of every copy.
    #[arg(long)]
    verify: bool,
    /// Wait for the stage to finish, with a progress bar.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    target: InstanceArg,
}

#[derive(Subcommand)]
pub enum StageCommand {
    /// PFS -> burst buffer.
    In(CopyArgs),
    /// Burst buffer -> PFS.
    Out(CopyArgs),
    /// Stages and their progress; with an ID, that stage file by file.
    Status {
        /// A stage's id (from its submission): that stage, file by file.
        id: Option<u64>,
        /// One JSON document instead of tables.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: InstanceArg,
    },
    /// Wait for a stage to finish (progress bar); fails if the stage failed.
    Wait {
        /// The stage's id.
        id: u64,
        #[command(flatten)]
        target: InstanceArg,
    },
    /// Stop a stage; nothing unfinished is published.
    Cancel {
        /// The stage's id.
        id: u64,
        #[command(flatten)]
        target: InstanceArg,
    },
    /// Drop the job-end stages of a burst-buffer path.
    Revoke {
        /// The burst-buffer path the job-end stages were submitted for.
        bb_path: String,
        #[command(flatten)]
        target: InstanceArg,
    },
    /// The job is ending: start every job-end stage (and with --wait, wait for all stages).
    JobEnd {
        /// Wait for every stage to finish, with a progress bar.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: InstanceArg,
    },
}

impl InstanceArg {
    /// The instance and, for a burst-buffer path, the path inside it.
    fn resolve(&self, bb_path: Option<&str>) -> Result<(String, Option<String>)> {
        Ok(match bb_path {
            Some(path) => {
                let BbPath { instance, inner } = target::resolve_bb_path(path, self.instance.as_deref(), Unnamed::OnlyInstance)?;
                (instance, Some(inner))
            }
            None => (target::default_instance(self.instance.as_deref())?, None),
        })
    }

    fn client(&self, name: &str) -> Result<Client> {
        let opts = ClientOptions { node: self.node, ..Default::default() };
        Client::for_instance(name, opts).with_context(|| format!("instance '{name}'"))
    }
}

pub async fn run(command: StageCommand) -> Result<()> {
    match command {
        StageCommand::In(args) => copy(StageDirection::In, args).await,
        StageCommand::Out(args) => copy(StageDirection::Out, args).await,
        StageCommand::Status { id, json, target } => {
            let (name, _) = target.resolve(None)?;
            status(&target.client(&name)?, id, json, &BbView::of(&name)).await
        }
        StageCommand::Wait { id, target } => {
            let (name, _) = target.resolve(None)?;
            wait(&target.client(&name)?, id, &BbView::of(&name)).await.map(|_| ())
        }
        StageCommand::Cancel { id, target } => {
            let (name, _) = target.resolve(None)?;
            target.client(&name)?.stage_cancel(id).await?;
            outln!("stage {id} cancelled");
            Ok(())
        }
        StageCommand::Revoke { bb_path, target } => {
            let (name, inner) = target.resolve(Some(&bb_path))?;
            target.client(&name)?.stage_revoke(&inner.expect("resolved")).await?;
            outln!("job-end stages of {bb_path} revoked");
            Ok(())
        }
        StageCommand::JobEnd { wait, target } => {
            let (name, _) = target.resolve(None)?;
            let client = target.client(&name)?;
            if wait {
                job_end(&client).await
            } else {
                client.stage_job_end().await.map_err(Into::into)
            }
        }
    }
}

async fn copy(direction: StageDirection, args: CopyArgs) -> Result<()> {
    let (bb_arg, pfs_arg) = match direction {
        StageDirection::In => (&args.dst, &args.src),
        StageDirection::Out => (&args.src, &args.dst),
    };
    if let Some((instance, _)) = surge_client::descriptor::resolve_mount_path(Path::new(pfs_arg)) {
        let (verb, other) = match direction {
            StageDirection::In => ("copies from the PFS into the burst buffer", "out"),
            StageDirection::Out => ("copies from the burst buffer to the PFS", "in"),
        };
        bail!(
            "{pfs_arg} is on a mount of instance '{instance}', but `surge stage {}` {verb}: the other way is `surge stage {other} {} {}`",
            if direction == StageDirection::In { "in" } else { "out" },
            args.src,
            args.dst
        );
    }
    let (name, bb_path) = args.target.resolve(Some(bb_arg))?;
    let bb_path = bb_path.expect("resolved");
    let pfs_path = target::absolute_pfs_path(pfs_arg)?;
    let client = args.target.client(&name)?;
    let kind = match args.kind {
        Some(KindArg::File) => StageKind::File,
        Some(KindArg::Directory) => StageKind::Directory,
        Some(KindArg::List) => StageKind::List,
        None => {
            let source_is_dir = match direction {
                StageDirection::In => Path::new(&pfs_path).is_dir(),
                StageDirection::Out => client.stat(&bb_path).await.is_ok_and(|a| a.kind == surge_client::surge_proto::FileKind::Dir),
            };
            if source_is_dir {
                StageKind::Directory
            } else {
                StageKind::File
            }
        }
    };
    let when = match args.when {
        WhenArg::Immediate => StageWhen::Immediate,
        WhenArg::JobEnd => StageWhen::JobEnd,
    };
    let view = BbView::of(&name);
    let spec = client.stage_spec(direction, kind, when, &bb_path, &pfs_path, args.verify);
    let stage = client.stage_submit_checked(spec).await.with_context(|| format!("{} {bb_arg}", direction.label()))?;
    let id = stage.id;
    if args.wait && when == StageWhen::Immediate {
        wait(&client, id, &view).await?;
    } else {
        let files = if stage.state == StageState::Deferred {
            "at job end".to_string()
        } else {
            format!("{} files, {}", stage.files_total, human_bytes(stage.bytes_total))
        };
        let (from, to) = view.ends(direction, &stage.bb_path, &stage.pfs_path);
        outln!("stage {id} submitted: {} {from} -> {to} ({files}); `surge stage status {id}` shows progress", direction.label());
    }
    Ok(())
}

/// Burst-buffer paths as the user wrote them: on this machine's mount of the instance when
/// there is one (`/mnt/bb/run/out.h5`), else inside the instance (`/run/out.h5`).
struct BbView {
    mount: Option<std::path::PathBuf>,
}

impl BbView {
    fn of(instance: &str) -> BbView {
        BbView { mount: surge_client::descriptor::recorded_mounts(instance).into_iter().next() }
    }

    fn show(&self, inner: &str) -> String {
        match &self.mount {
            Some(mount) => mount.join(inner.trim_start_matches('/')).display().to_string(),
            None => inner.to_string(),
        }
    }

    /// (source, destination) of a copy of `bb_path` and `pfs_path` in `direction`.
    fn ends(&self, direction: StageDirection, bb_path: &str, pfs_path: &str) -> (String, String) {
        match direction {
            StageDirection::In => (pfs_path.to_string(), self.show(bb_path)),
            StageDirection::Out => (self.show(bb_path), pfs_path.to_string()),
        }
    }
}

fn rate(bytes: u64, seconds: f64) -> String {
    if seconds <= 0.0 || bytes == 0 {
        "-".into()
    } else {
        format!("{}/s", human_bytes((bytes as f64 / seconds) as u64))
    }
}

fn bar(total: u64, what: &str) -> ProgressBar {
    // indicatif draws on stderr and hides itself when that is not a terminal.
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(&format!("{what} {{bar:30}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} ETA {{eta}} {{msg}}"))
            .expect("valid template"),
    );
    bar
}

/// Stages the burst-buffer file `bb_path` out to `pfs_path` now and waits for it (what
/// `surge queue done --stage-out` does before acknowledging the file).
pub async fn stage_out_file(client: &Client, instance: &str, bb_path: &str, pfs_path: &str) -> Result<()> {
    let pfs_path = target::absolute_pfs_path(pfs_path)?;
    let spec = client.stage_spec(StageDirection::Out, StageKind::File, StageWhen::Immediate, bb_path, &pfs_path, false);
    let stage = client.stage_submit_checked(spec).await.with_context(|| format!("stage out {bb_path}"))?;
    wait(client, stage.id, &BbView::of(instance)).await.map(|_| ())
}

/// Waits for one stage with a progress bar; fails unless it ends done.
async fn wait(client: &Client, id: u64, view: &BbView) -> Result<StageSummary> {
    let mut progress: Option<ProgressBar> = None;
    let stages = client
        .wait_stages(
            None,
            |s| s.id == id,
            |stages| {
                if let Some(s) = stages.first() {
                    let bar = progress.get_or_insert_with(|| bar(s.bytes_total, &format!("stage {id}")));
                    bar.set_length(s.bytes_total);
                    bar.set_position(s.bytes_done);
                    bar.set_message(format!("{}/{} files", s.files_done, s.files_total));
                }
            },
        )
        .await?;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let Some(stage) = stages.into_iter().next() else { bail!("no stage {id}") };
    match stage.state {
        StageState::Done => {
            let (from, to) = view.ends(stage.direction, &stage.bb_path, &stage.pfs_path);
            outln!(
                "stage {id} done: {} files, {} in {:.2} s ({}) {from} -> {to}",
                stage.files_done,
                human_bytes(stage.bytes_done),
                stage.elapsed,
                rate(stage.bytes_done, stage.elapsed)
            );
            Ok(stage)
        }
        StageState::Deferred => {
            outln!("stage {id} is deferred to job end");
            Ok(stage)
        }
        state => bail!(
            "stage {id} {}: {} ({} of {} files failed)",
            state.label(),
            stage.error.unwrap_or_default(),
            stage.files_failed,
            stage.files_total
        ),
    }
}

/// Starts the job-end stages and waits for them and for every stage still running, with
/// one bar; fails if any of those fails (stages that failed earlier were reported then).
pub async fn job_end(client: &Client) -> Result<()> {
    let open: std::collections::HashSet<u64> =
        client.stage_list(None).await?.into_iter().filter(|s| !s.state.is_final()).map(|s| s.id).collect();
    client.stage_job_end().await?;
    let mut progress: Option<ProgressBar> = None;
    let stages = client
        .wait_stages(
            None,
            |s| open.contains(&s.id),
            |stages| {
                let active: Vec<&StageSummary> = stages.iter().filter(|s| !s.state.is_final()).collect();
                if active.is_empty() {
                    return;
                }
                let total = active.iter().map(|s| s.bytes_total).sum();
                let bar = progress.get_or_insert_with(|| bar(total, "staging"));
                bar.set_length(total);
                bar.set_position(active.iter().map(|s| s.bytes_done).sum());
                bar.set_message(format!("{} stages", active.len()));
            },
        )
        .await?;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let failed: Vec<&StageSummary> = stages.iter().filter(|s| s.state == StageState::Failed).collect();
    if let Some(first) = failed.first() {
        let (from, to) = BbView { mount: None }.ends(first.direction, &first.bb_path, &first.pfs_path);
        bail!("{} stage(s) failed, e.g. stage {} ({from} -> {to}): {}", failed.len(), first.id, first.error.as_deref().unwrap_or(""));
    }
    Ok(())
}

async fn status(client: &Client, id: Option<u64>, json: bool, view: &BbView) -> Result<()> {
    let stages = client.stage_list(None).await?;
    let stages: Vec<StageSummary> = stages.into_iter().filter(|s| id.is_none_or(|id| s.id == id)).collect();
    if let Some(id) = id {
        let Some(stage) = stages.first() else { bail!("no stage {id}") };
        let files = client.stage_files(id).await?;
        if json {
            outln!("{}", serde_json::to_string_pretty(&serde_json::json!({"stage": stage, "files": files}))?);
            return Ok(());
        }
        out!("{}", stages_table(&stages, view));
        let mut table = Table::new(&["STATE", "BYTES", "RATE", "SECONDS", "SOURCE", "DESTINATION", "ERROR"]);
        for f in &files {
            let (from, to) = view.ends(stage.direction, &f.bb_path, &f.pfs_path);
            table.row(vec![
                f.state.label().into(),
                format!("{}/{}", human_bytes(f.bytes_done), human_bytes(f.bytes_total)),
                rate(f.bytes_done, f.elapsed),
                format!("{:.3}", f.elapsed),
                from,
                to,
                f.error.clone().unwrap_or_default(),
            ]);
        }
        out!("{}", table.render());
        return Ok(());
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&stages)?);
    } else if stages.is_empty() {
        outln!("no stages");
    } else {
        out!("{}", stages_table(&stages, view));
    }
    Ok(())
}

fn stages_table(stages: &[StageSummary], view: &BbView) -> String {
    let mut table =
        Table::new(&["ID", "DIRECTION", "WHEN", "STATE", "FILES", "FAILED", "BYTES", "RATE", "SECONDS", "SOURCE", "DESTINATION", "ERROR"]);
    for s in stages {
        let (from, to) = view.ends(s.direction, &s.bb_path, &s.pfs_path);
        table.row(vec![
            s.id.to_string(),
            s.direction.label().into(),
            match s.when {
                StageWhen::Immediate => "now".into(),
                StageWhen::JobEnd => "job end".into(),
            },
            s.state.label().into(),
            format!("{}/{}", s.files_done, s.files_total),
            s.files_failed.to_string(),
            format!("{}/{}", human_bytes(s.bytes_done), human_bytes(s.bytes_total)),
            rate(s.bytes_done, s.elapsed),
            format!("{:.2}", s.elapsed),
            from,
            to,
            s.error.clone().unwrap_or_default(),
        ]);
    }
    table.render()
}

/// `surge down`: run the job-end stages and wait for all stages first (on every server in
/// private mode, where each server coordinates its own node's stages). A failed stage keeps
/// the instance, whose data may be the only copy, unless forced; a coordinator that cannot
/// be reached any more has nothing left to stage and is skipped with a warning.
pub async fn before_down(desc: &InstanceDescriptor, force: bool) -> Result<()> {
    let opts = ClientOptions { timeout: Duration::from_secs(10), node: None, ..Default::default() };
    let coordinators: Vec<Client> = match desc.mode {
        Mode::Striped => vec![Client::new(desc, opts)?],
        Mode::Private => desc.servers.iter().filter_map(|s| crate::instance::single_server_client(desc, s, &opts).ok()).collect(),
    };
    for client in coordinators {
        if let Err(e) = client.stage_list(None).await {
            if matches!(e.code, ErrorCode::ServerDown | ErrorCode::TimedOut) {
                eprintln!("warning: job-end stages not run: {e}");
                continue;
            }
            return Err(e.into());
        }
        match job_end(&client).await {
            Ok(()) => {}
            Err(e) if force => eprintln!("warning: {e:#}; removing the instance anyway (--force)"),
            Err(e) => bail!("{e:#}\nthe instance is kept so that no data is lost: fix the cause and stage again, or remove it with `surge down {} --force`", desc.name),
        }
    }
    Ok(())
}
