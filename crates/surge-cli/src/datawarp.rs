//! DataWarp compatibility for sites that run Slurm's burst_buffer/datawarp plugin: the same
//! manager behind Cray's two programs. `surge dw-wlm-cli --function F ...` (or `surge`
//! installed as `dw_wlm_cli`) answers the functions and JSON shapes the plugin calls
//! (`GetSysState=`); `surge dwstat` (or as `dwstat`, `GetSysStatus=`) shows pools, instances,
//! sessions and configurations as dwstat does. Thin: every function is one manager request.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use surge_control::manager::{Reply, Request, Status};

use crate::bb::{ask, BbCommand};
use crate::output::outln;
use crate::table::{human_bytes, Table};

/// `dw_wlm_cli`'s options: `--function` says which of the others matter.
#[derive(clap::Args)]
pub struct DwWlmCli {
    /// pools, show_instances, show_sessions, show_configurations, job_process, setup, data_in,
    /// real_size, paths, pre_run, post_run, data_out, teardown, create_persistent.
    #[arg(long)]
    function: String,
    /// The job id (or, for teardown, a persistent reservation's name).
    #[arg(long)]
    token: Option<String>,
    /// The job script.
    #[arg(long)]
    job: Option<PathBuf>,
    /// Who calls (SLURM): recorded by DataWarp, ignored here.
    #[arg(long)]
    caller: Option<String>,
    /// The job owner's uid.
    #[arg(long)]
    user: Option<u32>,
    /// The job owner's gid (create_persistent: the reservation owner's).
    #[arg(long)]
    groupid: Option<u32>,
    /// POOL:SIZE; the script's own `capacity=` is what Surge charges.
    #[arg(long)]
    capacity: Option<String>,
    /// A file of the job's node names, one per line.
    #[arg(long)]
    nodehostnamefile: Option<PathBuf>,
    /// Where `paths` writes KEY=VALUE lines.
    #[arg(long)]
    pathfile: Option<PathBuf>,
    /// teardown: cancel stages and release at once.
    #[arg(long)]
    hurry: bool,
    /// create_persistent: the caller (ignored).
    #[arg(short = 'c')]
    create_caller: Option<String>,
    /// create_persistent: the reservation's name.
    #[arg(short = 't')]
    name: Option<String>,
    /// create_persistent: its owner.
    #[arg(short = 'u')]
    uid: Option<u32>,
    /// create_persistent: POOL:BYTES.
    #[arg(short = 'C')]
    pool_capacity: Option<String>,
    /// create_persistent: access mode (striped only).
    #[arg(short = 'a')]
    access: Option<String>,
    /// create_persistent: type (scratch only).
    #[arg(short = 'T')]
    kind: Option<String>,
}

fn token_job(token: &Option<String>) -> Result<u64> {
    token.as_deref().context("--token JOBID is needed")?.parse().context("--token must be a job id")
}

fn script(job: &Option<PathBuf>) -> Result<PathBuf> {
    job.clone().context("--job SCRIPT is needed")
}

async fn status() -> Result<Status> {
    let Reply::Status(status) = ask(&Request::Status).await? else { bail!("unexpected answer") };
    Ok(status)
}

/// DataWarp numbers sessions, instances and configurations; here a session is a job or a
/// persistent reservation, with one instance (and one configuration) per Surge instance.
struct Numbered {
    /// (session id, token, owner, created)
    sessions: Vec<(usize, String, u32, u64)>,
    /// (instance id, session id, bytes)
    instances: Vec<(usize, usize, u64)>,
}

fn numbered(status: &Status) -> Numbered {
    let mut sessions: Vec<(usize, String, u32, u64)> = Vec::new();
    let mut instances = Vec::new();
    for (index, instance) in status.instances.iter().enumerate() {
        let token = match (&instance.persistent, instance.job) {
            (Some(name), _) => name.clone(),
            (None, Some(job)) => job.to_string(),
            (None, None) => instance.name.clone(),
        };
        let session = match sessions.iter().find(|s| s.1 == token) {
            Some(s) => s.0,
            None => {
                sessions.push((sessions.len() + 1, token, instance.owner_uid, instance.created));
                sessions.len()
            }
        };
        instances.push((index + 1, session, instance.capacity));
    }
    Numbered { sessions, instances }
}

pub async fn dw_wlm_cli(a: DwWlmCli) -> Result<()> {
    // Accepted as the plugin passes them; Surge needs none of them (the script says the size).
    let _ = (&a.caller, &a.capacity, &a.create_caller);
    match a.function.as_str() {
        "pools" => {
            let Reply::Pools(pools) = ask(&Request::Pools).await? else { bail!("unexpected answer") };
            let list: Vec<serde_json::Value> = pools
                .iter()
                .map(|p| serde_json::json!({"id": p.name, "units": "bytes", "granularity": p.granularity, "quantity": p.quantity, "free": p.free}))
                .collect();
            outln!("{}", serde_json::json!({ "pools": list }));
        }
        "show_instances" => {
            let n = numbered(&status().await?);
            let list: Vec<serde_json::Value> = n
                .instances
                .iter()
                .map(|(id, session, bytes)| serde_json::json!({"id": id, "capacity": {"bytes": bytes}, "links": {"session": session}}))
                .collect();
            outln!("{}", serde_json::json!({ "instances": list }));
        }
        "show_sessions" => {
            let n = numbered(&status().await?);
            let list: Vec<serde_json::Value> = n
                .sessions
                .iter()
                .map(|(id, token, owner, created)| serde_json::json!({"id": id, "token": token, "owner": owner, "created": created}))
                .collect();
            outln!("{}", serde_json::json!({ "sessions": list }));
        }
        "show_configurations" => {
            let n = numbered(&status().await?);
            let list: Vec<serde_json::Value> =
                n.instances.iter().map(|(id, _, _)| serde_json::json!({"id": id, "links": {"instance": id}})).collect();
            outln!("{}", serde_json::json!({ "configurations": list }));
        }
        "job_process" => crate::bb::run(BbCommand::JobProcess { script: script(&a.job)?, uid: None }).await?,
        "setup" => {
            let (uid, gid) = (a.user.context("--user UID is needed")?, a.groupid.context("--groupid GID is needed")?);
            crate::bb::run(BbCommand::Setup { job: token_job(&a.token)?, uid, gid, script: script(&a.job)? }).await?
        }
        "data_in" => crate::bb::run(BbCommand::DataIn { job: token_job(&a.token)? }).await?,
        "real_size" => {
            let job = token_job(&a.token)?;
            let bytes: u64 = status().await?.instances.iter().filter(|i| i.job == Some(job)).map(|i| i.capacity).sum();
            outln!("{}", serde_json::json!({"units": "bytes", "capacity": bytes}));
        }
        "paths" => {
            let path_file = a.pathfile.context("--pathfile FILE is needed")?;
            crate::bb::run(BbCommand::Paths { job: token_job(&a.token)?, path_file }).await?
        }
        "pre_run" => {
            let nodes = match &a.nodehostnamefile {
                Some(file) => std::fs::read_to_string(file)
                    .with_context(|| format!("read {}", file.display()))?
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect(),
                None => Vec::new(),
            };
            crate::bb::run(BbCommand::PreRun { job: token_job(&a.token)?, nodes }).await?
        }
        "post_run" => crate::bb::run(BbCommand::PostRun { job: token_job(&a.token)? }).await?,
        "data_out" => crate::bb::run(BbCommand::DataOut { job: token_job(&a.token)? }).await?,
        "teardown" => {
            let token = a.token.as_deref().context("--token JOBID or NAME is needed")?;
            match token.parse::<u64>() {
                Ok(job) => crate::bb::run(BbCommand::Teardown { job, hurry: a.hurry }).await?,
                Err(_) => {
                    ask(&Request::DestroyPersistent { name: token.into(), hurry: a.hurry }).await?;
                }
            }
        }
        "create_persistent" => {
            let name = a.name.context("-t NAME is needed")?;
            let uid = a.uid.context("-u UID is needed")?;
            let (pool, size) =
                a.pool_capacity.as_deref().context("-C POOL:BYTES is needed")?.split_once(':').context("-C takes POOL:BYTES")?;
            let capacity = surge_units::parse_size(size).map_err(anyhow::Error::msg)?;
            if a.access.as_deref().is_some_and(|m| m != "striped") || a.kind.as_deref().is_some_and(|t| t != "scratch") {
                bail!("create_persistent {name}: Surge's reservations are striped scratch");
            }
            let gid = a.groupid.unwrap_or(uid);
            ask(&Request::CreatePersistent { name: name.clone(), uid, gid, pool: Some(pool.into()), capacity }).await?;
            outln!("created persistent reservation {name}");
        }
        other => bail!("unknown function '{other}'"),
    }
    Ok(())
}

/// `dwstat [pools|instances|sessions|configurations|all]`: DataWarp's status views.
pub async fn dwstat(views: &[String]) -> Result<()> {
    let status = status().await?;
    let n = numbered(&status);
    let all = views.is_empty() || views.iter().any(|v| v == "all");
    let wants = |view: &str| all || views.iter().any(|v| v == view);
    let mut out = Vec::new();
    if all || wants("pools") {
        let mut t = Table::new(&["pool", "units", "quantity", "free", "gran"]);
        for p in &status.pools {
            t.row(vec![
                p.name.clone(),
                "bytes".into(),
                human_bytes(p.quantity * p.granularity),
                human_bytes(p.free * p.granularity),
                human_bytes(p.granularity),
            ]);
        }
        out.push(t.render());
    }
    if wants("sessions") {
        let mut t = Table::new(&["sess", "state", "token", "creator", "owner", "created"]);
        for (id, token, owner, created) in &n.sessions {
            t.row(vec![id.to_string(), "CA---".into(), token.clone(), "SLURM".into(), owner.to_string(), created.to_string()]);
        }
        out.push(t.render());
    }
    if wants("instances") {
        let mut t = Table::new(&["inst", "state", "sess", "bytes", "nodes", "label"]);
        for ((id, session, bytes), instance) in n.instances.iter().zip(&status.instances) {
            t.row(vec![
                id.to_string(),
                instance.state.clone(),
                session.to_string(),
                human_bytes(*bytes),
                instance.servers.len().to_string(),
                instance.name.clone(),
            ]);
        }
        out.push(t.render());
    }
    if wants("configurations") {
        let mut t = Table::new(&["conf", "state", "inst", "type", "access_type", "activs"]);
        for ((id, _, _), instance) in n.instances.iter().zip(&status.instances) {
            t.row(vec![id.to_string(), instance.state.clone(), id.to_string(), "scratch".into(), instance.mode.clone(), "0".into()]);
        }
        out.push(t.render());
    }
    outln!("{}", out.join("\n"));
    Ok(())
}
