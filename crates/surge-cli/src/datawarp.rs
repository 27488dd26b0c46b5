//! DataWarp compatibility for sites that run Slurm's burst_buffer/datawarp plugin: the same
//! manager behind Cray's two programs. `surge dw-wlm-cli --function F ...` (or `surge`
//! installed as `dw_wlm_cli`) answers the functions and JSON shapes the plugin calls
//! (`GetSysState=`); `surge dwstat` (or as `dwstat`, `GetSysStatus=`) shows pools, sessions,
//! instances, configurations, fragments and nodes as dwstat does, with the manager's own
//! numbers as their ids and their states in dwstat's flags (the Surge word beside them). Thin:
//! every function is one manager request.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use surge_control::manager::{InstanceView, Reply, Request, Status};

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

/// DataWarp's sessions: a job's use of the burst buffer, or a persistent reservation.
struct SessionRow {
    id: u64,
    /// The job id, or the reservation's name.
    token: String,
    owner: u32,
    created: u64,
    /// Surge's state: the job's, or the reservation's instance's.
    state: String,
    flags: &'static str,
}

/// DataWarp's numbered objects, from the manager's numbers: a session is a job or a
/// persistent reservation, an instance (and its one configuration) a Surge instance, a
/// fragment one of its servers. The numbers are the manager's own, kept in its store, so they
/// stay the same from one call to the next for as long as the object exists. A manager that
/// predates them sends 0: those are numbered by their place in the lists instead.
struct Numbered<'a> {
    sessions: Vec<SessionRow>,
    /// (instance id, its session's id, the instance)
    instances: Vec<(u64, u64, &'a InstanceView)>,
}

/// The object's own number, or for a manager that sends none, its place in its list.
fn number(id: u64, position: usize) -> u64 {
    if id != 0 {
        id
    } else {
        position as u64 + 1
    }
}

/// A job session's or a reservation's token.
fn token(instance: &InstanceView) -> String {
    match (&instance.persistent, instance.job) {
        (Some(name), _) => name.clone(),
        (None, Some(job)) => job.to_string(),
        (None, None) => instance.name.clone(),
    }
}

fn numbered(status: &Status) -> Numbered<'_> {
    let mut sessions: Vec<SessionRow> = status
        .sessions
        .iter()
        .map(|s| SessionRow {
            id: s.id,
            token: s.job.to_string(),
            owner: s.uid,
            created: s.created,
            state: s.state.clone(),
            flags: session_flags(&s.state),
        })
        .collect();
    // A persistent reservation is a session of its own, numbered as its instance.
    for i in status.instances.iter().filter(|i| i.persistent.is_some()) {
        sessions.push(SessionRow {
            id: i.session,
            token: token(i),
            owner: i.owner_uid,
            created: i.created,
            state: i.state.clone(),
            flags: instance_flags(&i.state),
        });
    }
    for (position, session) in sessions.iter_mut().enumerate() {
        session.id = number(session.id, position);
    }
    let instances = status
        .instances
        .iter()
        .enumerate()
        .map(|(position, i)| {
            let session = match i.session {
                0 => sessions.iter().find(|s| s.token == token(i)).map_or(0, |s| s.id),
                id => id,
            };
            (number(i.id, position), session, i)
        })
        .collect();
    Numbered { sessions, instances }
}

/// A state in dwstat's vocabulary: five positions, each a letter or `-`: `C` (the object is
/// wanted) or `D` (it is being destroyed), `A` (active: it is as wanted), `F` (failed: it
/// will not become so without help; DataWarp's "blown fuse"), `T` (in transition), and a
/// fifth Surge never sets. An instance's Surge states map so: `planned` C----, `starting`
/// C--T-, `ready` CA---, `degraded` (a server missing) CAF--, `stopping` (its stop has not
/// reached every node) D--T-, `failed` C-F--. The Surge word is shown beside it ("status").
fn instance_flags(state: &str) -> &'static str {
    match state {
        "planned" => "C----",
        "starting" => "C--T-",
        "ready" => "CA---",
        "degraded" => "CAF--",
        "stopping" => "D--T-",
        "failed" => "C-F--",
        _ => "-----",
    }
}

/// A job session's state in dwstat's vocabulary (see [`instance_flags`]): it exists and is
/// active from setup to teardown (`setup`, `staging-in`, `running`, `ended`, `staging-out`:
/// CA---), failed once a stage has (`stage-in-failed`, `stage-out-failed`: CAF--, until the
/// stage is run again or the job torn down).
fn session_flags(state: &str) -> &'static str {
    match state {
        "stage-in-failed" | "stage-out-failed" => "CAF--",
        _ => "CA---",
    }
}

/// DataWarp's access type for a Surge mode.
fn access_type(mode: &str) -> &str {
    match mode {
        "striped" => "stripe",
        other => other,
    }
}

/// A size as dwstat prints it, without a space (`745.21GiB`): each row splits on whitespace.
fn dw_bytes(bytes: u64) -> String {
    human_bytes(bytes).replace(' ', "")
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
            let status = status().await?;
            let n = numbered(&status);
            let list: Vec<serde_json::Value> = n
                .instances
                .iter()
                .map(|(id, session, i)| serde_json::json!({"id": id, "capacity": {"bytes": i.capacity}, "links": {"session": session}}))
                .collect();
            outln!("{}", serde_json::json!({ "instances": list }));
        }
        "show_sessions" => {
            let status = status().await?;
            let n = numbered(&status);
            // The sessions that hold an instance, as the plugin has always been told (a job
            // that only uses a reservation has none of its own).
            let list: Vec<serde_json::Value> = n
                .sessions
                .iter()
                .filter(|s| n.instances.iter().any(|(_, session, _)| *session == s.id))
                .map(|s| serde_json::json!({"id": s.id, "token": s.token, "owner": s.owner, "created": s.created}))
                .collect();
            outln!("{}", serde_json::json!({ "sessions": list }));
        }
        "show_configurations" => {
            let status = status().await?;
            let n = numbered(&status);
            let list: Vec<serde_json::Value> =
                n.instances.iter().map(|(id, _, _)| serde_json::json!({"id": id, "links": {"instance": id}})).collect();
            outln!("{}", serde_json::json!({ "configurations": list }));
        }
        // Not `surge bb job-process`: the plugin reads the `#BB` lines itself.
        "job_process" => {
            let path = script(&a.job)?;
            let text = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
            crate::bb::check_job(String::from_utf8_lossy(&text).into_owned(), None, None).await?
        }
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
            let request = Request::CreatePersistent {
                name: name.clone(),
                uid,
                gid,
                pool: Some(pool.into()),
                capacity,
                group: None,
                users: Vec::new(),
            };
            ask(&request).await?;
            outln!("created persistent reservation {name}");
        }
        other => bail!("unknown function '{other}'"),
    }
    Ok(())
}

/// dwstat's views, in the order `all` shows them.
const VIEWS: [&str; 6] = ["pools", "sessions", "instances", "configurations", "fragments", "nodes"];

/// `dwstat [VIEW...]`: DataWarp's status views (all without a view, or with `all`).
pub async fn dwstat(views: &[String]) -> Result<()> {
    if let Some(unknown) = views.iter().find(|v| *v != "all" && !VIEWS.contains(&v.as_str())) {
        bail!("dwstat: no view '{unknown}' (views: {}, all)", VIEWS.join(", "));
    }
    outln!("{}", dwstat_tables(&status().await?, views));
    Ok(())
}

fn dwstat_tables(status: &Status, views: &[String]) -> String {
    let n = numbered(status);
    let all = views.is_empty() || views.iter().any(|v| v == "all");
    let wants = |view: &str| all || views.iter().any(|v| v == view);
    let granularity = |pool: &str| status.pools.iter().find(|p| p.name == pool).map(|p| p.granularity);
    let mut out = Vec::new();
    if wants("pools") {
        let mut t = Table::new(&["pool", "units", "quantity", "free", "gran"]);
        for p in &status.pools {
            t.row(vec![
                p.name.clone(),
                "bytes".into(),
                dw_bytes(p.quantity * p.granularity),
                dw_bytes(p.free * p.granularity),
                dw_bytes(p.granularity),
            ]);
        }
        out.push(t.render());
    }
    if wants("sessions") {
        let mut t = Table::new(&["sess", "state", "token", "creator", "owner", "created", "status"]);
        for s in &n.sessions {
            t.row(vec![
                s.id.to_string(),
                s.flags.into(),
                s.token.clone(),
                "SLURM".into(),
                s.owner.to_string(),
                s.created.to_string(),
                s.state.clone(),
            ]);
        }
        out.push(t.render());
    }
    if wants("instances") {
        let mut t = Table::new(&["inst", "state", "sess", "bytes", "nodes", "label", "status"]);
        for (id, session, i) in &n.instances {
            t.row(vec![
                id.to_string(),
                instance_flags(&i.state).into(),
                session.to_string(),
                dw_bytes(i.capacity),
                i.servers.len().to_string(),
                i.name.clone(),
                i.state.clone(),
            ]);
        }
        out.push(t.render());
    }
    if wants("configurations") {
        // One configuration per instance, numbered as its instance.
        let mut t = Table::new(&["conf", "state", "inst", "type", "access_type", "activs", "status"]);
        for (id, _, i) in &n.instances {
            t.row(vec![
                id.to_string(),
                instance_flags(&i.state).into(),
                id.to_string(),
                "scratch".into(),
                access_type(&i.mode).into(),
                "0".into(),
                i.state.clone(),
            ]);
        }
        out.push(t.render());
    }
    if wants("fragments") {
        // A fragment is an instance's server on one node; its capacity what it holds there
        // (with two copies, its share and its predecessor's mirror).
        let mut t = Table::new(&["frag", "state", "inst", "capacity", "gran", "node", "status"]);
        let mut position = 0;
        for (id, _, i) in &n.instances {
            for server in &i.servers {
                t.row(vec![
                    number(server.id, position).to_string(),
                    instance_flags(&i.state).into(),
                    id.to_string(),
                    if server.share == 0 { "-".into() } else { dw_bytes(server.share) },
                    granularity(&i.pool).map_or("-".into(), dw_bytes),
                    server.node.clone(),
                    i.state.clone(),
                ]);
                position += 1;
            }
        }
        out.push(t.render());
    }
    if wants("nodes") {
        // Each node of each pool: what the pool may use of it, what the servers of any
        // instance hold there (a node in two pools is charged by both), what is left, and how
        // many instances have a server there. Whether a node is up is not known here: the
        // manager asks the agents only when it starts or stops servers.
        let mut t = Table::new(&["node", "pool", "gran", "capacity", "alloc", "free", "insts"]);
        for p in &status.pools {
            for (k, node) in p.nodes.iter().enumerate() {
                let servers = || status.instances.iter().flat_map(|i| &i.servers).filter(|s| &s.node == node);
                let alloc: u64 = servers().map(|s| s.share).sum();
                let insts = status.instances.iter().filter(|i| i.servers.iter().any(|s| &s.node == node)).count();
                let capacity = p.capacities.get(k).copied();
                t.row(vec![
                    node.clone(),
                    p.name.clone(),
                    dw_bytes(p.granularity),
                    capacity.map_or("-".into(), dw_bytes),
                    dw_bytes(alloc),
                    capacity.map_or("-".into(), |c| dw_bytes(c.saturating_sub(alloc))),
                    insts.to_string(),
                ]);
            }
        }
        out.push(t.render());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use surge_control::manager::{PoolKind, PoolView, ServerView, SessionView, Viewer};

    use super::*;

    const MIB: u64 = 1 << 20;

    fn instance(id: u64, session: u64, name: &str, job: Option<u64>, state: &str, servers: &[(u64, &str, u64)]) -> InstanceView {
        InstanceView {
            id,
            session,
            name: name.into(),
            job,
            persistent: job.is_none().then(|| name.trim_start_matches("ps-").to_string()),
            pool: "bb".into(),
            mode: "striped".into(),
            capacity: servers.iter().map(|s| s.2).sum(),
            owner_uid: 1000,
            group: None,
            users: Vec::new(),
            state: state.into(),
            created: 100,
            servers: servers.iter().map(|&(id, node, share)| ServerView { id, node: node.into(), addr: String::new(), share }).collect(),
            replicas: 1,
        }
    }

    fn status() -> Status {
        Status {
            pools: vec![PoolView {
                name: "bb".into(),
                kind: PoolKind::Standing,
                granularity: 64 * MIB,
                quantity: 8,
                free: 3,
                nodes: vec!["bb1".into(), "bb2".into()],
                capacities: vec![256 * MIB, 256 * MIB],
            }],
            instances: vec![
                instance(12, 11, "job-7", Some(7), "ready", &[(13, "bb1", 128 * MIB), (14, "bb2", 64 * MIB)]),
                instance(20, 20, "ps-ckpt", None, "starting", &[(21, "bb2", 128 * MIB)]),
            ],
            sessions: vec![SessionView {
                id: 11,
                job: 7,
                uid: 1000,
                state: "stage-out-failed".into(),
                created: 100,
                instances: vec!["job-7".into()],
                message: None,
            }],
            stages: Vec::new(),
            viewer: Viewer::Admin,
        }
    }

    /// The table's rows (after the header and its rule), each split on whitespace.
    fn rows(table: &str) -> Vec<Vec<String>> {
        table.lines().skip(2).map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
    }

    #[test]
    fn fragments_and_nodes_say_what_each_node_holds() {
        let status = status();
        let fragments = dwstat_tables(&status, &["fragments".into()]);
        assert!(fragments.starts_with("frag  state  inst  capacity  gran     node  status"), "{fragments}");
        assert_eq!(
            rows(&fragments),
            [
                ["13", "CA---", "12", "128.0MiB", "64.0MiB", "bb1", "ready"],
                ["14", "CA---", "12", "64.0MiB", "64.0MiB", "bb2", "ready"],
                ["21", "C--T-", "20", "128.0MiB", "64.0MiB", "bb2", "starting"],
            ]
        );
        let nodes = dwstat_tables(&status, &["nodes".into()]);
        assert_eq!(
            rows(&nodes),
            [
                ["bb1", "bb", "64.0MiB", "256.0MiB", "128.0MiB", "128.0MiB", "1"],
                ["bb2", "bb", "64.0MiB", "256.0MiB", "192.0MiB", "64.0MiB", "2"]
            ],
            "{nodes}"
        );
    }

    #[test]
    fn ids_are_the_managers_and_states_the_recorded_ones() {
        let status = status();
        let sessions = rows(&dwstat_tables(&status, &["sessions".into()]));
        assert_eq!(sessions[0], ["11", "CAF--", "7", "SLURM", "1000", "100", "stage-out-failed"]);
        assert_eq!(sessions[1], ["20", "C--T-", "ckpt", "SLURM", "1000", "100", "starting"]);
        let instances = rows(&dwstat_tables(&status, &["instances".into()]));
        assert_eq!(instances[0], ["12", "CA---", "11", "192.0MiB", "2", "job-7", "ready"]);
        assert_eq!(instances[1], ["20", "C--T-", "20", "128.0MiB", "1", "ps-ckpt", "starting"]);
        let configurations = rows(&dwstat_tables(&status, &["configurations".into()]));
        assert_eq!(configurations[0], ["12", "CA---", "12", "scratch", "stripe", "0", "ready"]);

        // Another instance before these in the list changes none of their numbers.
        let mut more = status.clone();
        more.instances.insert(0, instance(30, 30, "ps-new", None, "ready", &[(31, "bb1", 64 * MIB)]));
        let again = rows(&dwstat_tables(&more, &["instances".into()]));
        assert_eq!(&again[1..], &instances[..]);

        // Every instance state has its flags.
        for (state, flags) in [
            ("planned", "C----"),
            ("starting", "C--T-"),
            ("ready", "CA---"),
            ("degraded", "CAF--"),
            ("stopping", "D--T-"),
            ("failed", "C-F--"),
        ] {
            assert_eq!(instance_flags(state), flags, "{state}");
        }
    }

    #[test]
    fn an_older_manager_without_numbers_is_numbered_by_place() {
        let mut old = status();
        for i in &mut old.instances {
            (i.id, i.session) = (0, 0);
            i.servers.iter_mut().for_each(|s| (s.id, s.share) = (0, 0));
        }
        old.sessions[0].id = 0;
        old.pools[0].capacities.clear();
        let n = numbered(&old);
        let sessions: Vec<(u64, &str)> = n.sessions.iter().map(|s| (s.id, s.token.as_str())).collect();
        assert_eq!(sessions, [(1, "7"), (2, "ckpt")]);
        let instances: Vec<(u64, u64)> = n.instances.iter().map(|(id, session, _)| (*id, *session)).collect();
        assert_eq!(instances, [(1, 1), (2, 2)]);
        assert_eq!(rows(&dwstat_tables(&old, &["nodes".into()]))[0], ["bb1", "bb", "64.0MiB", "-", "0B", "-", "1"]);
    }
}
