//! The manager's work: each request of the workload manager's hooks and the nodes' prologs,
//! the capacity it charges, the servers it asks the agents for, the stages it drives.
//!
//! Instances a job gets: `job-<id>` (striped), `job-<id>-private` (a namespace per node),
//! and persistent reservations `ps-<name>`. Where they appear on a compute node:
//! `<job_root>/<id>/striped`, `.../private`, `.../persistent/<name>`, with the clients'
//! descriptors under `.../home` (the job's `SURGE_HOME`).
//!
//! Every decision that charges or frees capacity holds one lock (`placement`), and every
//! change is committed to the store before it acts on the world (records first, then servers),
//! so that a manager restarted at any point finds in its store everything that might run, and
//! [`Manager::reconcile`] puts the two in agreement.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use surge_client::descriptor::ServerInfo;
use surge_client::surge_proto::acl::{Acl, AclKind, Entry, Tag};
use surge_client::surge_proto::auth::{self, Secret};
use surge_client::surge_proto::error::ErrorCode;
use surge_client::surge_proto::stage::{StageDirection, StageKind, StageState, StageSummary, StageWhen};
use surge_client::surge_proto::XattrSetMode;
use surge_client::{Client, ClientOptions, InstanceDescriptor, Mode};
use surge_control::agent::{AgentReply, AgentRequest, ServerPlan};
use surge_control::manager::{
    Attachment, Direction, InstanceView, Mount, PoolView, Progress, Reply, Request, ServerView, SessionView, StageView, Status, Viewer,
};
use surge_control::wire::AgentConnection;
use surge_directives::{parse_script, resolve_bb_path, AccessMode, Buffer, JobRequest};

use crate::config::{Config, PoolConfig, PoolKindConfig};
use crate::pools;
use crate::store::{self, InstanceRecord, JobRecord, ServerRecord, StageRecord, Store};

/// How long an agent has to answer a request (starting a server takes its time).
const AGENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an agent has to accept a connection and prove the key: a node that does not
/// within this is taken as unreachable.
const AGENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After a node's agent could not be reached, it counts as unreachable for this long; where
/// reaching it took the whole [`AGENT_CONNECT_TIMEOUT`], calls to it fail at once meanwhile
/// (with that failure's reason) rather than each waiting out its own timeout: a dead node
/// costs one timeout, not one per instance or job. A refused connection costs nothing to try
/// again (an agent starting with its node, or restarted): the next call does.
const UNREACHABLE_FOR: Duration = Duration::from_secs(10);

/// A node whose agent the last call could not reach.
struct Unreachable {
    since: Instant,
    why: String,
    /// The attempt waited out the whole connect timeout (a dead or cut-off node).
    timed_out: bool,
}
/// How long a prolog waits for the job's buffers to come up.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(120);
const STAGE_POLL: Duration = Duration::from_millis(100);

pub struct Manager {
    config: Config,
    key: Secret,
    store: Mutex<Store>,
    /// Wakes those waiting for a stage or an instance to change.
    changed: tokio::sync::Notify,
    /// Held by every decision that charges, places or frees capacity.
    placement: tokio::sync::Mutex<()>,
    /// (job, direction) whose stages a task is driving.
    driving: Mutex<HashSet<(u64, Direction)>>,
    /// Told of each step passed (tests of recovery); none in the daemon.
    steps: Option<StepObserver>,
    /// Set once [`Manager::reconcile`] has run: requests wait for it.
    reconciled: tokio::sync::watch::Sender<bool>,
    /// Nodes whose agent could not be reached: when, and why.
    unreachable: Mutex<HashMap<String, Unreachable>>,
}

/// The instance's secret, as its record keeps it.
fn recorded_secret(instance: &InstanceRecord) -> Result<Secret> {
    auth::parse_secret(&instance.secret).ok_or_else(|| anyhow!("bad secret recorded for {}", instance.name))
}

/// A client of `instance` that reaches `addrs` as the instance's owner, through the servers
/// only (the manager runs on no server's node: no local I/O).
fn owner_client(instance: &InstanceRecord, secret: Secret, addrs: Vec<SocketAddr>) -> surge_client::Result<Client> {
    let opts = ClientOptions { uid: instance.uid, gid: instance.gid, local_io: false, node: None, ..Default::default() };
    Client::from_parts(addrs, instance.chunk_size, secret, opts)
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// The instances a `#DW jobdw` line makes: each one's mode and capacity (with both access
/// modes, half the capacity each: the job asked for one capacity).
fn jobdw_instances(jobdw: &surge_directives::JobDw) -> Vec<(&'static str, u64)> {
    match jobdw.access {
        AccessMode::Striped => vec![("striped", jobdw.capacity)],
        AccessMode::Private => vec![("private", jobdw.capacity)],
        AccessMode::StripedAndPrivate => vec![("striped", jobdw.capacity.div_ceil(2)), ("private", jobdw.capacity / 2)],
    }
}

fn striped_name(job: u64) -> String {
    format!("job-{job}")
}

fn private_name(job: u64) -> String {
    format!("job-{job}-private")
}

fn persistent_name(name: &str) -> String {
    format!("ps-{name}")
}

fn new_secret() -> Result<String> {
    let mut secret = [0u8; auth::SECRET_LEN];
    getrandom::getrandom(&mut secret).map_err(|e| anyhow!("no randomness: {e}"))?;
    Ok(auth::format_secret(&secret))
}

/// Every problem of a script as one message, one line each.
fn directive_errors(errors: &[surge_directives::DirectiveError]) -> String {
    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    format!("{} problem(s) with #DW directives:\n{}", errors.len(), lines.join("\n"))
}

/// Whose an instance is: a job's (or a reservation's when `job` is `None`), and which user's.
struct Owner {
    job: Option<u64>,
    uid: u32,
    gid: u32,
}

/// Requests only the workload manager and the nodes (root) may make.
/// The points of a manager's work where a crash leaves the most to recover, named so that a
/// test can stop a manager at exactly one of them ([`Manager::open_with_steps`]) and check a
/// restart from there. The shipped daemon passes no observer; nothing here reads the
/// environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A job's servers run; the manager has not recorded where.
    SetupServersStarted,
    /// A job's servers are stopped and their records gone; the job's record not yet.
    TeardownInstancesStopped,
}

impl Step {
    pub const ALL: [Step; 2] = [Step::SetupServersStarted, Step::TeardownInstancesStopped];

    pub fn name(self) -> &'static str {
        match self {
            Step::SetupServersStarted => "setup-servers-started",
            Step::TeardownInstancesStopped => "teardown-instances-stopped",
        }
    }
}

/// Told of each [`Step`] as the manager passes it.
pub type StepObserver = Box<dyn Fn(Step) + Send + Sync>;

/// When a job's directives are checked: at submission everything they name must exist;
/// at setup (which may be an attempt again) what they destroy may be gone already.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    AtSubmit,
    AtSetup,
}

/// Whom a status asked for `asked` by a caller with this uid is answered as: a trusted caller
/// gets what it asks (a trusted uid named as the viewer sees what an administrator sees);
/// anyone else their own uid's view, or no one's if that is what they ask — never more, whom
/// ever they name.
fn answered_viewer(trusted: impl Fn(u32) -> bool, caller_uid: u32, asked: Viewer) -> Viewer {
    let asked = match asked {
        Viewer::User(uid) if trusted(uid) => Viewer::Admin,
        other => other,
    };
    match asked {
        _ if trusted(caller_uid) => asked,
        Viewer::Unknown => Viewer::Unknown,
        Viewer::Admin | Viewer::User(_) => Viewer::User(caller_uid),
    }
}

/// Requests only root and the trusted uids may make (reservations made and destroyed outside a
/// job have rules of their own: [`Manager::may_make_reservation`],
/// [`Manager::may_destroy_reservation`]).
fn is_privileged(request: &Request) -> bool {
    !matches!(
        request,
        Request::Pools
            | Request::Status
            | Request::StatusFor { .. }
            | Request::CheckJob { .. }
            | Request::CreatePersistent { .. }
            | Request::DestroyPersistent { .. }
    )
}

/// Whom a reservation is shared with, besides its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Share {
    gid: Option<u32>,
    uids: Vec<u32>,
}

impl Share {
    fn of(instance: &InstanceRecord) -> Share {
        Share { gid: instance.share_gid, uids: instance.share_uids.clone() }
    }

    fn is_none(&self) -> bool {
        self.gid.is_none() && self.uids.is_empty()
    }
}

/// Whether a job of `uid` (primary group `gid`, when known) may use `reservation`: its owner's,
/// root's, a listed user's, or one of its group's members' (the job's group, or one the
/// user is in as `groups_of` says: the node's group database).
fn may_use(reservation: &InstanceRecord, uid: u32, gid: Option<u32>, groups_of: impl Fn(u32) -> Vec<u32>) -> bool {
    uid == reservation.uid
        || uid == 0
        || reservation.share_uids.contains(&uid)
        || reservation.share_gid.is_some_and(|group| gid == Some(group) || groups_of(uid).contains(&group))
}

/// Whether `caller` may make a reservation owned by `uid`:`gid`, shared as `share`, outside a
/// job (see [`Manager::may_make_reservation`]); `groups_of` says a user's groups.
fn may_make_reservation(
    trusted: bool,
    user_reservations: bool,
    caller: u32,
    uid: u32,
    gid: u32,
    share: &Share,
    groups_of: impl Fn(u32) -> Vec<u32>,
) -> Result<()> {
    if trusted {
        return Ok(());
    }
    if !user_reservations {
        anyhow::bail!(
            "permission denied: reservations are made outside a job by root and the trusted uids only (you are uid {caller}; \
             this manager's user_reservations is off): ask an administrator (`surge reservation create NAME --capacity SIZE \
             --owner YOU`), or make one in a job (`#DW create_persistent name=NAME capacity=SIZE access_mode=striped type=scratch`)"
        );
    }
    if uid != caller {
        anyhow::bail!("permission denied: uid {caller} may make a reservation for itself, not for uid {uid}");
    }
    let groups = groups_of(caller);
    if groups.is_empty() {
        anyhow::bail!("permission denied: uid {caller} is not known on the manager's node, which cannot tell its groups");
    }
    if !groups.contains(&gid) {
        anyhow::bail!("permission denied: uid {caller} is not in group {gid}, which was asked to own the reservation");
    }
    if let Some(group) = share.gid.filter(|g| !groups.contains(g)) {
        anyhow::bail!("permission denied: a reservation is shared with a group its owner is in; uid {caller} is not in group {group}");
    }
    Ok(())
}

/// The ACL a shared reservation's root gets, as its access and default ACL: read, write and
/// search for the owner (also named: what a member makes has the member as its user), each
/// listed user and the group shared with (named, so that what a
/// member makes, owned by the member's own group, inherits it), the root's own group only when
/// that is the group shared with, nobody else. `None` for a reservation shared with nobody.
fn shared_root_acl(instance: &InstanceRecord) -> Option<Acl> {
    let share = Share::of(instance);
    if share.is_none() {
        return None;
    }
    // The owner named too: in the default ACL, the file's own user is its maker (a member),
    // and the owner must still reach what members make.
    let mut users: Vec<u32> = share.uids.iter().copied().chain([instance.uid]).collect();
    users.sort_unstable();
    users.dedup();
    let entry = |tag, perm| Entry { tag, perm };
    let mut entries = vec![entry(Tag::UserObj, 7)];
    entries.extend(users.into_iter().map(|uid| entry(Tag::User(uid), 7)));
    entries.push(entry(Tag::GroupObj, if share.gid.is_some() { 7 } else { 0 }));
    entries.extend(share.gid.map(|gid| entry(Tag::Group(gid), 7)));
    entries.push(entry(Tag::Mask, 7));
    entries.push(entry(Tag::Other, 0));
    Some(Acl::new(entries).expect("entries in canonical order"))
}

impl Manager {
    pub fn open(config: Config) -> Result<Arc<Manager>> {
        Self::open_with_steps(config, None)
    }

    /// [`Manager::open`], with an observer told of each [`Step`] as it is passed.
    pub fn open_with_steps(config: Config, steps: Option<StepObserver>) -> Result<Arc<Manager>> {
        let key = surge_control::wire::read_key(&config.key_file).with_context(|| format!("cluster key {}", config.key_file.display()))?;
        std::fs::create_dir_all(&config.state_dir).with_context(|| format!("create {}", config.state_dir.display()))?;
        std::fs::set_permissions(&config.state_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let store = Store::open(&config.state_dir.join("surge.db"))?;
        Ok(Arc::new(Manager {
            config,
            key,
            store: Mutex::new(store),
            changed: tokio::sync::Notify::new(),
            placement: tokio::sync::Mutex::new(()),
            driving: Mutex::new(HashSet::new()),
            steps,
            reconciled: tokio::sync::watch::Sender::new(false),
            unreachable: Mutex::new(HashMap::new()),
        }))
    }

    fn passed(&self, step: Step) {
        if let Some(observer) = &self.steps {
            observer(step);
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().expect("store lock")
    }

    /// Whether a caller with this uid may do what root may: root, and the configuration's
    /// trusted uids (the workload manager's user).
    pub fn is_trusted(&self, uid: u32) -> bool {
        uid == 0 || self.config.trusted_uids.contains(&uid)
    }

    /// Answers one request from a caller with this uid (as the kernel or munged vouches),
    /// once the manager has reconciled its store with what runs (until then, a request waits:
    /// its caller bounds the wait, and a hook inside slurmctld gives up after a few seconds
    /// with a message).
    pub async fn handle(self: &Arc<Self>, request: Request, caller_uid: u32) -> Reply {
        let mut reconciled = self.reconciled.subscribe();
        if reconciled.wait_for(|done| *done).await.is_err() {
            return Reply::Failed("the manager is stopping".into());
        }
        if is_privileged(&request) && !self.is_trusted(caller_uid) && !self.is_own_stage_request(&request, caller_uid) {
            return Reply::Failed(format!(
                "permission denied: only root and the workload manager's user (the nodes, Slurm's hooks) may ask this (you are uid {caller_uid})"
            ));
        }
        let outcome = match request {
            Request::Pools => self.pools().map(Reply::Pools),
            Request::Status => self.status(self.viewer(caller_uid, Viewer::Admin)).map(Reply::Status),
            Request::StatusFor { viewer } => self.status(self.viewer(caller_uid, viewer)).map(Reply::Status),
            Request::CheckJob { script, uid, gid } => self.check_job(&script, uid, gid, Check::AtSubmit).map(|_| Reply::Done),
            Request::Setup { job, uid, gid, script } => self.setup(job, uid, gid, &script).await.map(|()| Reply::Done),
            Request::DataIn { job } => self.data_in(job).map(|()| Reply::Done),
            Request::Progress { job, direction, wait_secs } => self.progress(job, direction, wait_secs).await.map(Reply::Progress),
            Request::Paths { job } => self.paths(job).map(Reply::Paths),
            Request::PreRun { job, nodes } => self.pre_run(job, &nodes).await.map(|()| Reply::Done),
            Request::Attach { job, node, nodes } => self.attach(job, &node, &nodes).await.map(Reply::Attach),
            Request::Detach { job, node } => {
                tracing::info!(job, node, "node detached");
                Ok(Reply::Done)
            }
            Request::PostRun { job } => self.set_job_state(job, "ended", None).map(|()| Reply::Done),
            Request::DataOut { job } => self.data_out(job).await.map(|()| Reply::Done),
            Request::Teardown { job, hurry } => self.teardown(job, hurry).await.map(|()| Reply::Done),
            Request::CreatePersistent { name, uid, gid, pool, capacity, group, users } => {
                let share = Share { gid: group, uids: users };
                match self.may_make_reservation(caller_uid, uid, gid, &share) {
                    Ok(()) => self.create_persistent(&name, uid, gid, pool.as_deref(), capacity, share).await.map(|()| Reply::Done),
                    Err(e) => Err(e),
                }
            }
            Request::DestroyPersistent { name, hurry } => {
                let _placing = self.placement.lock().await;
                match self.may_destroy_reservation(caller_uid, &name) {
                    Ok(()) => self.destroy_persistent(&name, hurry).await.map(|()| Reply::Done),
                    Err(e) => Err(e),
                }
            }
        };
        outcome.unwrap_or_else(|e| Reply::Failed(format!("{e:#}")))
    }

    /// Whom a status asked for `asked` by a caller with this uid is answered as
    /// ([`answered_viewer`]).
    pub fn viewer(&self, caller_uid: u32, asked: Viewer) -> Viewer {
        answered_viewer(|uid| self.is_trusted(uid), caller_uid, asked)
    }

    /// Who may make a reservation outside a job: root and the trusted uids, for anyone; with
    /// `user_reservations`, a user for themselves, in one of their groups, shared only with a
    /// group they are in (any users may be listed, as the owner of a file names anyone in its
    /// ACL).
    fn may_make_reservation(&self, caller: u32, uid: u32, gid: u32, share: &Share) -> Result<()> {
        let trusted = self.is_trusted(caller);
        may_make_reservation(trusted, self.config.user_reservations, caller, uid, gid, share, surge_control::host::groups_of)
    }

    /// Who may destroy a reservation outside a job: root and the trusted uids; with
    /// `user_reservations`, its owner (never a user it is shared with). One that does not exist
    /// is anyone's to destroy: there is nothing to do.
    fn may_destroy_reservation(&self, caller: u32, name: &str) -> Result<()> {
        if self.is_trusted(caller) {
            return Ok(());
        }
        let Some(found) = self.store().persistent(name)? else { return Ok(()) };
        if found.uid != caller {
            anyhow::bail!(
                "permission denied: reservation {name} belongs to uid {}: only its owner and the administrators destroy it (you are uid {caller})",
                found.uid
            );
        }
        if !self.config.user_reservations {
            anyhow::bail!(
                "permission denied: reservations are destroyed outside a job by root and the trusted uids only (this manager's \
                 user_reservations is off): destroy it in a job (`#DW destroy_persistent name={name}`), or ask an administrator"
            );
        }
        Ok(())
    }

    /// Whether a job of `uid` (in group `gid`, when known) may use `reservation` ([`may_use`],
    /// with the groups this node knows).
    fn may_use(&self, reservation: &InstanceRecord, uid: u32, gid: Option<u32>) -> bool {
        may_use(reservation, uid, gid, surge_control::host::groups_of)
    }

    /// A job's owner may follow its stages and run its stage-out again (after a failure,
    /// once the missing file is there), as with `surge bb data-out --job N`.
    fn is_own_stage_request(&self, request: &Request, uid: u32) -> bool {
        let job = match request {
            Request::DataOut { job } | Request::Progress { job, .. } => *job,
            _ => return false,
        };
        self.store().job(job).ok().flatten().is_some_and(|j| j.uid == uid)
    }

    // ----- views -----

    /// The pools, the default first (DataWarp lists it first; job_submit.lua takes it).
    fn pools(&self) -> Result<Vec<PoolView>> {
        let store = self.store();
        let used = store.node_use()?;
        // Instances planned and not placed yet (on-demand ones before their job's nodes are
        // known) hold nothing on a node, but will: they are charged what they will hold.
        let mut unplaced: HashMap<&str, u64> = HashMap::new();
        let instances = store.instances()?;
        for i in &instances {
            let Some(pool) = self.config.pool(&i.pool) else { continue };
            if store.servers(&i.name)?.is_empty() {
                *unplaced.entry(i.pool.as_str()).or_default() += pools::least_held(pool, i.capacity, i.replicas);
            }
        }
        let default = self.config.pool_for(None).ok().map(|p| p.name.clone());
        let mut ordered: Vec<&PoolConfig> = self.config.pools.iter().collect();
        ordered.sort_by_key(|p| Some(&p.name) != default.as_ref());
        Ok(ordered
            .into_iter()
            .map(|pool| PoolView {
                name: pool.name.clone(),
                kind: pool.kind.into(),
                granularity: pool.granularity,
                quantity: pool.quantity(),
                free: pools::free_units(pool, &used, unplaced.get(pool.name.as_str()).copied().unwrap_or(0)),
                nodes: pool.nodes.iter().map(|n| n.name.clone()).collect(),
                capacities: pool.nodes.iter().map(|n| n.capacity).collect(),
            })
            .collect())
    }

    /// Everything, with the sessions and stages `viewer` may see (see [`Viewer`]).
    fn status(&self, viewer: Viewer) -> Result<Status> {
        let shown = |uid: u32| match viewer {
            Viewer::Admin => true,
            Viewer::User(own) => uid == own,
            Viewer::Unknown => false,
        };
        let store = self.store();
        let jobs = store.jobs()?;
        let mut instances = Vec::new();
        for i in store.instances()? {
            let servers = store
                .servers(&i.name)?
                .into_iter()
                .map(|s| ServerView { id: s.id, node: s.node, addr: s.addr.unwrap_or_default(), share: s.share })
                .collect();
            // A persistent reservation is a session of its own; a job's instance is its job's.
            let session = match i.job {
                Some(job) if i.persistent.is_none() => jobs.iter().find(|j| j.job == job).map_or(0, |j| j.id),
                _ => i.id,
            };
            instances.push(InstanceView {
                id: i.id,
                session,
                name: i.name,
                job: i.job,
                persistent: i.persistent,
                pool: i.pool,
                mode: i.mode,
                capacity: i.capacity,
                owner_uid: i.uid,
                group: i.share_gid,
                users: i.share_uids,
                state: i.state,
                created: i.created,
                servers,
                replicas: i.replicas,
            });
        }
        let mut sessions = Vec::new();
        for j in jobs.iter().filter(|j| shown(j.uid)) {
            let mut used: Vec<String> = store.job_instances(j.job)?.into_iter().map(|i| i.name).collect();
            if let Ok(request) = parse_script(&j.script) {
                used.extend(request.persistent.iter().chain(request.create_persistent.iter().map(|p| &p.name)).map(|n| persistent_name(n)));
            }
            sessions.push(SessionView {
                id: j.id,
                job: j.job,
                uid: j.uid,
                state: j.state.clone(),
                created: j.created,
                instances: used,
                message: j.message.clone(),
            });
        }
        let stages = store
            .stages(None, None)?
            .into_iter()
            .filter(|s| jobs.iter().any(|j| j.job == s.job && shown(j.uid)))
            .map(|s| StageView {
                job: s.job,
                direction: s.direction,
                kind: s.kind,
                source: s.source,
                destination: s.destination,
                state: s.state,
                files_done: s.files_done,
                files_total: s.files_total,
                bytes_done: s.bytes_done,
                bytes_total: s.bytes_total,
                error: s.error,
            })
            .collect();
        drop(store);
        Ok(Status { pools: self.pools()?, instances, sessions, stages, viewer })
    }

    // ----- submit -----

    /// What can be known at submit: the directives, the pools they name and their sizes, the
    /// reservations they use (and, given the submitter and maybe their group, whether they may).
    fn check_job(&self, script: &str, uid: Option<u32>, gid: Option<u32>, when: Check) -> Result<JobRequest> {
        let request = parse_script(script).map_err(|errors| anyhow!(directive_errors(&errors)))?;
        let mut problems = Vec::new();
        if let Some(jobdw) = &request.jobdw {
            match self.config.pool_for(jobdw.pool.as_deref()) {
                Err(e) => problems.push(format!("jobdw: {e}")),
                Ok(pool) => {
                    let held = jobdw_instances(jobdw)
                        .into_iter()
                        .map(|(mode, capacity)| pools::least_held(pool, capacity, pools::copies(pool, mode)))
                        .sum();
                    problems.extend(self.fits_pool(pool, jobdw.capacity, held, "jobdw"));
                }
            }
        }
        let store = self.store();
        for p in &request.create_persistent {
            match self.config.pool_for(p.pool.as_deref()) {
                Err(e) => problems.push(format!("create_persistent {}: {e}", p.name)),
                Ok(pool) if pool.kind != PoolKindConfig::Standing => problems.push(format!(
                    "create_persistent {}: pool '{}' is on the jobs' own nodes, which a reservation cannot outlive: use a standing pool",
                    p.name, pool.name
                )),
                Ok(pool) => {
                    let held = pools::least_held(pool, p.capacity, pools::copies(pool, "striped"));
                    problems.extend(self.fits_pool(pool, p.capacity, held, &format!("create_persistent {}", p.name)))
                }
            }
            if p.access != AccessMode::Striped {
                problems.push(format!("create_persistent {}: a persistent reservation is striped (access_mode=striped)", p.name));
            }
            if store.persistent(&p.name)?.is_some() {
                problems.push(format!("create_persistent {}: a reservation of that name exists", p.name));
            }
        }
        for name in &request.persistent {
            let created_here = request.create_persistent.iter().any(|p| &p.name == name);
            match store.persistent(name)? {
                None if !created_here => problems.push(format!("persistentdw {name}: no persistent reservation of that name")),
                Some(found) if uid.is_some_and(|u| !self.may_use(&found, u, gid)) => problems
                    .push(format!("persistentdw {name}: the reservation belongs to uid {}, who has not shared it with you", found.uid)),
                _ => {}
            }
        }
        for (name, _) in &request.destroy_persistent {
            match store.persistent(name)? {
                // At setup it may be gone already, destroyed by an attempt of this same setup
                // that failed later (or by its owner since): what the line asks for holds.
                None if when == Check::AtSetup => {}
                None => problems.push(format!("destroy_persistent {name}: no persistent reservation of that name")),
                Some(found) if uid.is_some_and(|u| u != found.uid && u != 0) => problems.push(format!(
                    "destroy_persistent {name}: the reservation belongs to uid {}, not to you (only its owner destroys it, \
                     also when it is shared with you)",
                    found.uid
                )),
                _ => {}
            }
        }
        for stage in request.stage_in.iter().chain(&request.stage_out) {
            let bb = if request.stage_in.contains(stage) { &stage.destination } else { &stage.source };
            match resolve_bb_path(bb) {
                Some((Buffer::JobPrivate, _)) => {
                    problems.push(format!("line {}: {bb}: staging into or out of $DW_JOB_PRIVATE is not offered (each node has its own namespace): stage through $DW_JOB_STRIPED", stage.line));
                }
                // A reservation's stages run as its owner (its servers' user) on the parallel
                // file system: a user it is shared with would read and write there with the
                // owner's rights.
                Some((Buffer::Persistent(name), _)) => {
                    let owner = store.persistent(&name)?.map(|found| found.uid);
                    if let (Some(owner), Some(u)) = (owner, uid.filter(|u| *u != 0)) {
                        if owner != u {
                            problems.push(format!(
                                "line {}: {bb}: stages into and out of reservation {name} run as its owner (uid {owner}) on the \
                                 parallel file system: only the owner's jobs stage with it (copy from the mount in the job instead)",
                                stage.line
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        if problems.is_empty() {
            Ok(request)
        } else {
            Err(anyhow!("{} problem(s):\n  {}", problems.len(), problems.join("\n  ")))
        }
    }

    /// Why a request of `capacity` bytes, which will hold at least `held` bytes on the pool's
    /// nodes (both copies, whole units), can never be placed in `pool`, if it cannot.
    fn fits_pool(&self, pool: &PoolConfig, capacity: u64, held: u64, what: &str) -> Option<String> {
        let total = pool.quantity() * pool.granularity;
        let format = surge_units::format_size;
        (held > total).then(|| {
            if held > pools::charged(capacity, pool.granularity) {
                format!(
                    "{what}: capacity {} takes {} in pool '{}' (it keeps two copies), more than the pool holds in all ({})",
                    format(capacity),
                    format(held),
                    pool.name,
                    format(total)
                )
            } else {
                format!("{what}: capacity {} is more than pool '{}' holds in all ({})", format(capacity), pool.name, format(total))
            }
        })
    }

    // ----- setup -----

    async fn setup(self: &Arc<Self>, job: u64, uid: u32, gid: u32, script: &str) -> Result<()> {
        let _placing = self.placement.lock().await;
        let existing = self.store().job(job)?;
        if let Some(existing) = existing {
            // Setup again (after `scontrol release`): what the first one made stays.
            tracing::info!(job, state = %existing.state, "setup again: keeping what exists");
            return self.start_pending(job).await;
        }
        let request = self.check_job(script, Some(uid), Some(gid), Check::AtSetup)?;
        for (name, hurry) in &request.destroy_persistent {
            self.destroy_persistent(name, *hurry).await?;
        }
        let mut planned: Vec<(InstanceRecord, Vec<ServerRecord>)> = Vec::new();
        let mut used_now = self.store().node_use()?;
        let mut plan = |name: String, persistent: Option<String>, pool: &PoolConfig, mode: &str, capacity: u64| -> Result<()> {
            let owner = Owner { job: persistent.is_none().then_some(job), uid, gid };
            planned.push(self.plan_instance(&mut used_now, name, persistent, owner, pool, mode, capacity)?);
            Ok(())
        };
        for p in &request.create_persistent {
            let pool = self.config.pool_for(p.pool.as_deref()).map_err(|e| anyhow!(e))?;
            plan(persistent_name(&p.name), Some(p.name.clone()), pool, "striped", p.capacity)?;
        }
        if let Some(jobdw) = &request.jobdw {
            let pool = self.config.pool_for(jobdw.pool.as_deref()).map_err(|e| anyhow!(e))?;
            for (mode, capacity) in jobdw_instances(jobdw) {
                let name = if mode == "private" { private_name(job) } else { striped_name(job) };
                plan(name, None, pool, mode, capacity)?;
            }
        }
        let stages = self.resolve_stages(job, &request);
        let record = JobRecord {
            id: 0,
            job,
            uid,
            gid,
            script: script.into(),
            state: "setup".into(),
            nodes: Vec::new(),
            message: None,
            created: now(),
        };
        self.store().transaction(|tx| {
            for (instance, servers) in &planned {
                store::insert_instance(tx, instance, servers)?;
            }
            store::insert_job(tx, &record)?;
            for stage in &stages {
                store::insert_stage(tx, stage)?;
            }
            Ok(())
        })?;
        tracing::info!(job, uid, instances = planned.len(), stages = stages.len(), "job set up");
        self.start_pending(job).await
    }

    /// An instance's record and, in a standing pool, its servers' places, counted in `used`.
    #[allow(clippy::too_many_arguments)]
    fn plan_instance(
        &self,
        used: &mut HashMap<String, u64>,
        name: String,
        persistent: Option<String>,
        owner: Owner,
        pool: &PoolConfig,
        mode: &str,
        capacity: u64,
    ) -> Result<(InstanceRecord, Vec<ServerRecord>)> {
        let charged = pools::charged(capacity, pool.granularity);
        let replicas = pools::copies(pool, mode);
        let servers = match pool.kind {
            PoolKindConfig::Standing if replicas > 1 => pools::place_standing_mirrored(pool, used, capacity).map_err(|e| anyhow!(e))?,
            PoolKindConfig::Standing => pools::place_standing(pool, used, capacity).map_err(|e| anyhow!(e))?,
            // On the job's nodes, once they are known.
            PoolKindConfig::OnDemand => Vec::new(),
        };
        for (node, share) in &servers {
            *used.entry(node.clone()).or_default() += share;
        }
        let record = InstanceRecord {
            id: 0,
            name: name.clone(),
            job: owner.job,
            persistent,
            pool: pool.name.clone(),
            mode: mode.into(),
            capacity: charged,
            uid: owner.uid,
            gid: owner.gid,
            state: "planned".into(),
            created: now(),
            secret: new_secret()?,
            chunk_size: self.config.chunk_size(),
            replicas,
            share_gid: None,
            share_uids: Vec::new(),
        };
        let servers = servers
            .into_iter()
            .enumerate()
            .map(|(index, (node, share))| ServerRecord { id: 0, instance: name.clone(), index, node, share, addr: None })
            .collect();
        Ok((record, servers))
    }

    /// A persistent reservation made outside a job (DataWarp's `create_persistent` function,
    /// `surge reservation create`), checked as the directive would be, shared as asked. Asked
    /// again for the same reservation (a caller that timed out and retries), it answers as the
    /// first time: created.
    async fn create_persistent(
        self: &Arc<Self>,
        name: &str,
        uid: u32,
        gid: u32,
        pool: Option<&str>,
        capacity: u64,
        share: Share,
    ) -> Result<()> {
        let _placing = self.placement.lock().await;
        let existing = self.store().persistent(name)?;
        if let Some(existing) = existing {
            let asked = self.config.pool_for(pool).ok().filter(|p| p.name == existing.pool);
            let same_size = asked.is_some_and(|p| pools::charged(capacity, p.granularity) == existing.capacity);
            if existing.uid == uid && same_size && Share::of(&existing) == share {
                tracing::info!(name, "create_persistent again: the reservation exists as asked");
                return if existing.state == "ready" { Ok(()) } else { self.start_instance(&existing.name).await };
            }
        }
        let pool_word = pool.map(|p| format!(" pool={p}")).unwrap_or_default();
        let line = format!("#DW create_persistent name={name} capacity={capacity} access_mode=striped type=scratch{pool_word}\n");
        let request = self.check_job(&line, Some(uid), Some(gid), Check::AtSubmit)?;
        let wanted = request.create_persistent.first().ok_or_else(|| anyhow!("nothing to create"))?;
        let pool = self.config.pool_for(wanted.pool.as_deref()).map_err(|e| anyhow!(e))?;
        let mut used = self.store().node_use()?;
        let owner = Owner { job: None, uid, gid };
        let (mut record, servers) =
            self.plan_instance(&mut used, persistent_name(name), Some(name.into()), owner, pool, "striped", capacity)?;
        record.share_gid = share.gid;
        record.share_uids = share.uids;
        self.store().transaction(|tx| store::insert_instance(tx, &record, &servers))?;
        self.start_instance(&record.name).await
    }

    /// Each stage of the script with its instance and path inside it.
    fn resolve_stages(&self, job: u64, request: &JobRequest) -> Vec<StageRecord> {
        let mut out = Vec::new();
        for (direction, list) in [(Direction::In, &request.stage_in), (Direction::Out, &request.stage_out)] {
            for (seq, stage) in list.iter().enumerate() {
                let kind = match stage.kind {
                    surge_directives::StageKind::File => "file",
                    surge_directives::StageKind::Directory => "directory",
                    surge_directives::StageKind::List => "list",
                };
                let (bb, pfs) = match (stage.kind, direction) {
                    // A list's lines name both sides, inside the job's striped buffer.
                    (surge_directives::StageKind::List, _) => ("$DW_JOB_STRIPED", stage.source.as_str()),
                    (_, Direction::In) => (stage.destination.as_str(), stage.source.as_str()),
                    (_, Direction::Out) => (stage.source.as_str(), stage.destination.as_str()),
                };
                let (buffer, inner) = resolve_bb_path(bb).unwrap_or((Buffer::JobStriped, "/".into()));
                let instance = match buffer {
                    Buffer::JobStriped => striped_name(job),
                    Buffer::JobPrivate => private_name(job),
                    Buffer::Persistent(name) => persistent_name(&name),
                };
                out.push(StageRecord {
                    job,
                    direction,
                    seq,
                    kind: kind.into(),
                    source: stage.source.clone(),
                    destination: stage.destination.clone(),
                    instance,
                    bb_path: inner,
                    pfs_path: pfs.into(),
                    stage_id: None,
                    state: "waiting".into(),
                    files_done: 0,
                    files_total: 0,
                    bytes_done: 0,
                    bytes_total: 0,
                    error: None,
                    server: None,
                });
            }
        }
        out
    }

    /// Starts the servers of the job's standing-pool instances (and the reservations it
    /// creates) that are not up yet, but for private ones, which wait for the job's nodes.
    async fn start_pending(self: &Arc<Self>, job: u64) -> Result<()> {
        for instance in self.instances_of_job(job)? {
            let standing = self.config.pool(&instance.pool).is_some_and(|p| p.kind == PoolKindConfig::Standing);
            // A private one waits for the job's nodes, one namespace each (start_on_nodes).
            if standing && instance.state != "ready" && !self.is_private_standing(&instance) {
                self.start_instance(&instance.name).await?;
            }
        }
        Ok(())
    }

    /// The job's own instances and the persistent ones its script uses or creates.
    fn instances_of_job(&self, job: u64) -> Result<Vec<InstanceRecord>> {
        let store = self.store();
        let mut instances = store.job_instances(job)?;
        if let Some(record) = store.job(job)? {
            if let Ok(request) = parse_script(&record.script) {
                for name in request.create_persistent.iter().map(|p| &p.name).chain(&request.persistent) {
                    if let Some(found) = store.persistent(name)? {
                        if !instances.iter().any(|i| i.name == found.name) {
                            instances.push(found);
                        }
                    }
                }
            }
        }
        Ok(instances)
    }

    /// Whether `instance` is private in a standing pool: one namespace per compute node of its
    /// job, each a server on a burst-buffer node, placed once the job's nodes are known
    /// (several may share a burst-buffer node).
    fn is_private_standing(&self, instance: &InstanceRecord) -> bool {
        instance.mode == "private" && self.config.pool(&instance.pool).is_some_and(|p| p.kind == PoolKindConfig::Standing)
    }

    /// The name a node's agent knows a server of `instance` by: the instance's, or for a
    /// private instance of a standing pool, whose servers may share a node, the instance's
    /// with the server's index (`job-7-private.2`).
    fn agent_name(&self, instance: &InstanceRecord, server: &ServerRecord) -> String {
        if self.is_private_standing(instance) {
            format!("{}.{}", instance.name, server.index)
        } else {
            instance.name.clone()
        }
    }

    /// Whether the node's agent failed to answer within the last [`UNREACHABLE_FOR`].
    fn is_unreachable(&self, node: &str) -> bool {
        self.unreachable.lock().expect("unreachable").get(node).is_some_and(|u| u.since.elapsed() < UNREACHABLE_FOR)
    }

    fn agent_of(&self, node: &str) -> Result<&str> {
        self.config.pools.iter().find_map(|p| p.node(node)).map(|n| n.agent.as_str()).ok_or_else(|| anyhow!("node {node} is in no pool"))
    }

    async fn agent_call(&self, node: &str, request: &AgentRequest) -> Result<AgentReply> {
        let addr = self.agent_of(node)?;
        if let Some(u) =
            self.unreachable.lock().expect("unreachable").get(node).filter(|u| u.timed_out && u.since.elapsed() < UNREACHABLE_FOR)
        {
            anyhow::bail!("agent of node {node} ({addr}) unreachable {:.0} s ago: {}", u.since.elapsed().as_secs_f64(), u.why);
        }
        let started = Instant::now();
        let connected = AgentConnection::connect(addr, &self.key, AGENT_CONNECT_TIMEOUT).await;
        let mut connection = match connected {
            Ok(connection) => {
                self.unreachable.lock().expect("unreachable").remove(node);
                connection
            }
            Err(e) => {
                let timed_out = started.elapsed() >= AGENT_CONNECT_TIMEOUT;
                let u = Unreachable { since: Instant::now(), why: e.to_string(), timed_out };
                self.unreachable.lock().expect("unreachable").insert(node.to_string(), u);
                return Err(anyhow!(e).context(format!("agent of node {node} ({addr}) unreachable")));
            }
        };
        let reply = tokio::time::timeout(AGENT_TIMEOUT, connection.call(request))
            .await
            .map_err(|_| anyhow!("agent of node {node} did not answer"))?
            .with_context(|| format!("agent of node {node}"))?;
        match reply {
            AgentReply::Failed(why) => Err(anyhow!("node {node}: {why}")),
            other => Ok(other),
        }
    }

    /// Asks the agents for the instance's servers (all at once), then gives each the
    /// descriptor naming them all. On failure what started is stopped again.
    async fn start_instance(self: &Arc<Self>, name: &str) -> Result<()> {
        let (instance, servers) = {
            let store = self.store();
            let instance = store.instance(name)?.ok_or_else(|| anyhow!("no instance {name}"))?;
            (instance, store.servers(name)?)
        };
        self.store().set_instance_state(name, "starting")?;
        let started = Instant::now();
        let private = instance.mode == "private";
        let mut tasks = Vec::new();
        for server in &servers {
            let plan = ServerPlan {
                instance: self.agent_name(&instance, server),
                index: if private { 0 } else { server.index },
                count: if private { 1 } else { servers.len() },
                // The node holds the server's share and, with two copies, its predecessor's.
                capacity: server.share / instance.replicas as u64,
                replicas: instance.replicas,
                chunk_size: instance.chunk_size,
                uid: instance.uid,
                gid: instance.gid,
                secret: instance.secret.clone(),
            };
            let manager = self.clone();
            let node = server.node.clone();
            tasks.push(tokio::spawn(async move { manager.agent_call(&node, &AgentRequest::Start(plan)).await }));
        }
        let mut failure = None;
        let mut running = Vec::new();
        for (server, task) in servers.iter().zip(tasks) {
            match task.await.map_err(|e| anyhow!("{e}")).and_then(|r| r) {
                Ok(AgentReply::Started(s)) => running.push((server.clone(), s)),
                Ok(other) => failure = Some(anyhow!("node {}: unexpected answer {other:?}", server.node)),
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            for (server, _) in &running {
                let _ = self.agent_call(&server.node, &AgentRequest::Stop { instance: self.agent_name(&instance, server) }).await;
            }
            self.store().set_instance_state(name, "failed")?;
            return Err(e.context(format!("start instance {name}")));
        }
        self.passed(Step::SetupServersStarted);
        {
            let store = self.store();
            for (server, s) in &running {
                store.set_server_addr(name, server.index, &s.addr)?;
            }
        }
        // Each server's copy names its own token file, beside its directory.
        let descriptor = self.descriptor(&instance, PathBuf::new())?;
        for (server, s) in &running {
            // The coordinator beside each server reads it from its directory.
            let mut local = descriptor.clone();
            local.token_path = PathBuf::from(&s.root).with_file_name("token");
            let text = serde_json::to_string_pretty(&local)?;
            self.agent_call(&server.node, &AgentRequest::Describe { instance: self.agent_name(&instance, server), descriptor: text })
                .await?;
        }
        // Each server mirrors its share on the next before the instance counts as ready.
        let secret = recorded_secret(&instance)?;
        let client_for = |server: &ServerInfo| owner_client(&instance, secret, vec![server.addr]);
        surge_client::servers::link_mirrors_with(&descriptor, None, client_for)
            .await
            .with_context(|| format!("link the mirrors of {name}"))?;
        self.restrict_roots(&instance, &running.iter().map(|(_, s)| s.addr.clone()).collect::<Vec<_>>()).await?;
        self.store().set_instance_state(name, "ready")?;
        self.changed.notify_waiters();
        tracing::info!(instance = name, servers = running.len(), seconds = started.elapsed().as_secs_f64(), "instance up");
        Ok(())
    }

    /// The buffer's root is its owner's alone (mode 0700), on every namespace of it (a
    /// private instance has one per server). A shared reservation's root is its owner's and
    /// the group's it is shared with (mode 0770), with an access and a default ACL granting the
    /// listed users and that group read, write and search ([`shared_root_acl`]): what members
    /// make inherits the default ACL, so the others can reach it too. The mount's kernel
    /// enforces them (`default_permissions` with POSIX ACLs, against the calling process's
    /// uid and groups).
    async fn restrict_roots(&self, instance: &InstanceRecord, addrs: &[String]) -> Result<()> {
        let secret = recorded_secret(instance)?;
        let namespaces: Vec<Vec<SocketAddr>> = if instance.mode == "private" {
            addrs.iter().map(|a| a.parse().map(|a| vec![a])).collect::<Result<_, _>>()?
        } else {
            vec![addrs.iter().map(|a| a.parse()).collect::<Result<_, _>>()?]
        };
        let acl = shared_root_acl(instance);
        for addrs in namespaces {
            let client = owner_client(instance, secret, addrs)?;
            let what = || format!("restrict the root of {}", instance.name);
            client.chmod("/", if acl.is_some() { 0o770 } else { 0o700 }).await.with_context(what)?;
            if let Some(gid) = instance.share_gid {
                client.chown("/", None, Some(gid)).await.with_context(what)?;
            }
            if let Some(acl) = &acl {
                for kind in AclKind::ALL {
                    client.setxattr("/", kind.xattr_name(), &acl.encode(), XattrSetMode::Either).await.with_context(what)?;
                }
            }
        }
        Ok(())
    }

    /// The instance as its clients see it: `surge_client`'s descriptor.
    fn descriptor(&self, instance: &InstanceRecord, token_path: PathBuf) -> Result<InstanceDescriptor> {
        let servers = self.store().servers(&instance.name)?;
        let mut infos = Vec::new();
        for s in servers {
            let addr: SocketAddr =
                s.addr.as_deref().ok_or_else(|| anyhow!("server {} of {} not started", s.index, instance.name))?.parse()?;
            infos.push(ServerInfo { index: s.index, host: addr.ip().to_string(), addr, pid: None, root: PathBuf::from(&s.node) });
        }
        Ok(InstanceDescriptor {
            name: instance.name.clone(),
            mode: if instance.mode == "private" { Mode::Private } else { Mode::Striped },
            chunk_size: instance.chunk_size,
            capacity: instance.capacity,
            owner_uid: instance.uid,
            token_path,
            root: PathBuf::from("/"),
            created: instance.created,
            servers: infos,
            // A job's or a reservation's servers run as its owner, for its owner alone.
            ticket_key_path: None,
            // Its servers start with their default (striped); `surge layout` changes it.
            layout: Default::default(),
            watermarks: None,
            replicas: instance.replicas,
            failover_after: self.config.pool(&instance.pool).and_then(|pool| pool.failover_after),
        })
    }

    /// Stops the instance's servers and removes it. A server on a node that cannot be reached
    /// (dead, cut off) does not hold the rest up: it is recorded as an orphan, which its
    /// node's agent is asked to stop (and whose storage it removes) once the node answers
    /// again ([`Manager::stop_orphans`]). Any other failure keeps the instance, `stopping`.
    async fn stop_instance(&self, name: &str) -> Result<()> {
        let (instance, servers) = {
            let store = self.store();
            (store.instance(name)?, store.servers(name)?)
        };
        let mut failures = Vec::new();
        let mut orphans = Vec::new();
        for server in servers {
            let agent_name = instance.as_ref().map_or_else(|| name.to_string(), |i| self.agent_name(i, &server));
            if let Err(e) = self.agent_call(&server.node, &AgentRequest::Stop { instance: agent_name.clone() }).await {
                if self.is_unreachable(&server.node) {
                    tracing::warn!(instance = name, node = %server.node, "node unreachable: its server will be stopped when it answers ({e:#})");
                    orphans.push((agent_name, server.node));
                } else {
                    failures.push(format!("{e:#}"));
                }
            }
        }
        if !failures.is_empty() {
            self.store().set_instance_state(name, "stopping")?;
            anyhow::bail!("instance {name} not stopped everywhere: {}", failures.join("; "));
        }
        self.store().transaction(|tx| {
            for (agent_name, node) in &orphans {
                store::insert_orphan(tx, agent_name, node, now())?;
            }
            store::delete_instance(tx, name)
        })?;
        tracing::info!(instance = name, orphans = orphans.len(), "instance stopped and removed");
        Ok(())
    }

    /// Every few seconds, asks the agents of nodes owed a stop ([`Manager::stop_instance`]'s
    /// orphans) to stop those servers and remove their storage; a node still unreachable is
    /// asked again later.
    pub fn stop_orphans(self: &Arc<Self>) {
        let every = Duration::from_secs(self.config.job_sweep_secs.unwrap_or(60).clamp(1, 30));
        self.every(every, "orphans", |manager| async move {
            let orphans = manager.store().orphans()?;
            for (instance, node) in orphans {
                if manager.is_unreachable(&node) {
                    continue;
                }
                match manager.agent_call(&node, &AgentRequest::Stop { instance: instance.clone() }).await {
                    Ok(_) => {
                        tracing::info!(instance, node, "orphaned server stopped, its storage removed");
                        if let Err(e) = manager.store().remove_orphan(&instance, &node) {
                            tracing::warn!("orphans: {e:#}");
                        }
                    }
                    Err(e) => tracing::debug!(instance, node, "orphan not stopped yet: {e:#}"),
                }
            }
            Ok(())
        });
    }

    /// Runs `round` every `period` for the manager's life, on a task of its own; a round that
    /// fails is said in the log (as `what`'s) and the next comes all the same.
    fn every<F, Round>(self: &Arc<Self>, period: Duration, what: &'static str, round: F)
    where
        F: Fn(Arc<Manager>) -> Round + Send + 'static,
        Round: std::future::Future<Output = Result<()>> + Send,
    {
        let manager = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                if let Err(e) = round(manager.clone()).await {
                    tracing::warn!("{what}: {e:#}");
                }
            }
        });
    }

    /// Destroys a reservation no job uses (or, with `hurry`, whatever uses it). One that is
    /// gone already counts as destroyed: the workload manager repeats a teardown until it
    /// succeeds, and a setup that destroyed it may be asked again.
    async fn destroy_persistent(&self, name: &str, hurry: bool) -> Result<()> {
        let found = self.store().persistent(name)?;
        let Some(instance) = found else {
            tracing::info!(name, "destroy_persistent: no reservation of that name (destroyed already)");
            return Ok(());
        };
        let users = self.jobs_using(name, &instance.name)?;
        if !users.is_empty() && !hurry {
            anyhow::bail!("destroy_persistent {name}: in use by job(s) {users:?} (add 'hurry' to destroy it anyway)");
        }
        self.stop_instance(&instance.name).await
    }

    /// The jobs that still need a reservation: those that name it (`persistentdw`) and
    /// have not ended, and those whose stages from or into it are not all done (a failed
    /// stage-out keeps its data wanted until it is run again or the job is torn down).
    fn jobs_using(&self, name: &str, instance: &str) -> Result<Vec<u64>> {
        let store = self.store();
        let mut users = Vec::new();
        for job in store.jobs()? {
            if !parse_script(&job.script).is_ok_and(|r| r.persistent.iter().any(|p| p == name)) {
                continue;
            }
            let ended = matches!(job.state.as_str(), "ended" | "staging-out" | "stage-out-failed");
            let stages_pending = store.stages(Some(job.job), None)?.iter().any(|s| s.instance == instance && s.state != "done");
            if !ended || stages_pending {
                users.push(job.job);
            }
        }
        Ok(users)
    }

    // ----- stages -----

    fn data_in(self: &Arc<Self>, job: u64) -> Result<()> {
        self.require_job(job)?;
        self.release_stages(job, Direction::In)?;
        self.set_job_state(job, "staging-in", None)
    }

    /// The job's stage-out: the script's stages, and every stage-out its application asked
    /// the job's instances for that is not done (see [`Manager::adopt_application_stages`]).
    async fn data_out(self: &Arc<Self>, job: u64) -> Result<()> {
        self.require_job(job)?;
        let lost = match self.adopt_application_stages(job).await {
            Ok(lost) => lost,
            Err(e) => {
                self.set_job_state(job, "stage-out-failed", Some(&format!("{e:#}")))?;
                return Err(e);
            }
        };
        self.release_stages(job, Direction::Out)?;
        let note = lost.join("; ");
        self.set_job_state(job, "staging-out", (!note.is_empty()).then_some(note.as_str()))
    }

    /// DataWarp's job end: the job's own instances start the stages deferred to it
    /// (`--when job-end`, `DW_STAGE_AT_JOB_END`), and every stage-out their coordinators hold
    /// that is not done becomes one of the job's stage-outs: the deferred ones just started,
    /// immediate ones still running, and failed ones nothing later of the same path made good.
    /// Progress then waits for them, a failure keeps the instance as a failed stage-out of
    /// the script does, and teardown refuses (without hurry) while one runs. Stage-ins the
    /// application left running are not waited for: they fill a buffer about to go.
    ///
    /// Asked again (data-out retried), the stages adopted before are not adopted twice.
    ///
    /// A coordinator that cannot be reached (its server died) has taken its stages with it:
    /// what is lost so is answered, one line per instance, for the job's record.
    async fn adopt_application_stages(self: &Arc<Self>, job: u64) -> Result<Vec<String>> {
        let instances = self.store().job_instances(job)?;
        let mut lost = Vec::new();
        for instance in instances.iter().filter(|i| i.state == "ready") {
            let coordinators: Vec<Option<usize>> = if instance.mode == "private" {
                self.store().servers(&instance.name)?.iter().map(|s| Some(s.index)).collect()
            } else {
                vec![None]
            };
            for server in coordinators {
                let client = self.stage_client(&instance.name, server)?;
                let started = client.stage_job_end().await;
                if let Err(e) = &started {
                    if matches!(e.code, ErrorCode::ServerDown | ErrorCode::TimedOut) {
                        // The coordinator's server is gone, and with it the stages it kept
                        // and the data they would have copied: nothing is left to wait for.
                        // Said in the job's record and the log, not silently.
                        let why = format!("the job-end stages of {} were not run: its stage coordinator is lost ({e})", instance.name);
                        tracing::warn!(job, "{why}");
                        lost.push(why);
                        continue;
                    }
                }
                started.with_context(|| format!("start the job-end stages of {}", instance.name))?;
                let listed = client.stage_list(None).await.with_context(|| format!("list the stages of {}", instance.name))?;
                let wanted = stages_still_wanted(&listed);
                let mut store = self.store();
                let known = store.stages(Some(job), Some(Direction::Out))?;
                let mut seq = known.iter().map(|s| s.seq + 1).max().unwrap_or(0);
                let buffer = if instance.mode == "private" { "$DW_JOB_PRIVATE" } else { "$DW_JOB_STRIPED" };
                let mut adopted = Vec::new();
                for summary in wanted {
                    let seen = known.iter().any(|s| s.instance == instance.name && s.server == server && s.stage_id == Some(summary.id));
                    if seen {
                        continue;
                    }
                    let mut record = StageRecord {
                        job,
                        direction: Direction::Out,
                        seq,
                        kind: stage_kind_word(summary.kind).into(),
                        source: format!("{buffer}{}", summary.bb_path),
                        destination: summary.pfs_path.clone(),
                        instance: instance.name.clone(),
                        bb_path: summary.bb_path.clone(),
                        pfs_path: summary.pfs_path.clone(),
                        stage_id: Some(summary.id),
                        state: String::new(),
                        files_done: 0,
                        files_total: 0,
                        bytes_done: 0,
                        bytes_total: 0,
                        error: None,
                        server,
                    };
                    copy_summary(&mut record, summary);
                    seq += 1;
                    adopted.push(record);
                }
                if !adopted.is_empty() {
                    tracing::info!(job, instance = %instance.name, stages = adopted.len(), "stage-outs the application asked for, followed to the job's end");
                    store.transaction(|tx| adopted.iter().try_for_each(|stage| store::insert_stage(tx, stage)))?;
                }
            }
        }
        Ok(lost)
    }

    fn require_job(&self, job: u64) -> Result<JobRecord> {
        self.store().job(job)?.ok_or_else(|| anyhow!("job {job} has no burst buffer set up"))
    }

    /// Marks the waiting stages whose instance is up as pending and drives them; the others
    /// wait for the job's nodes (pre-run releases them).
    fn release_stages(self: &Arc<Self>, job: u64, direction: Direction) -> Result<()> {
        {
            let store = self.store();
            for mut stage in store.stages(Some(job), Some(direction))? {
                let ready = store.instance(&stage.instance)?.is_some_and(|i| i.state == "ready");
                // Waiting ones start; failed ones start again (asked again: a retry).
                let again = matches!(stage.state.as_str(), "failed" | "cancelled");
                if (stage.state == "waiting" || again) && ready {
                    stage.state = "pending".into();
                    stage.stage_id = None;
                    stage.error = None;
                    store.update_stage(&stage)?;
                }
            }
        }
        self.drive(job, direction);
        Ok(())
    }

    /// Drives a job's pending and running stages in one direction until they end, in a task
    /// of its own (one per job and direction), recording every change.
    pub fn drive(self: &Arc<Self>, job: u64, direction: Direction) {
        if !self.driving.lock().expect("driving").insert((job, direction)) {
            return;
        }
        let manager = self.clone();
        tokio::spawn(async move {
            if let Err(e) = manager.drive_until_done(job, direction).await {
                tracing::warn!(job, %direction, "stages: {e:#}");
            }
            manager.driving.lock().expect("driving").remove(&(job, direction));
            manager.changed.notify_waiters();
        });
    }

    async fn drive_until_done(&self, job: u64, direction: Direction) -> Result<()> {
        let mut clients: HashMap<String, Client> = HashMap::new();
        loop {
            let stages = self.store().stages(Some(job), Some(direction))?;
            let active: Vec<StageRecord> = stages.into_iter().filter(|s| s.state != "waiting" && !s.is_final()).collect();
            if active.is_empty() {
                return Ok(());
            }
            for mut stage in active {
                let client = match clients.get(&stage.instance) {
                    Some(c) => c.clone(),
                    None => {
                        let c = self.stage_client(&stage.instance, stage.server)?;
                        clients.insert(stage.instance.clone(), c.clone());
                        c
                    }
                };
                let before = stage.clone();
                match stage.stage_id {
                    None => {
                        let dir = match direction {
                            Direction::In => StageDirection::In,
                            Direction::Out => StageDirection::Out,
                        };
                        let kind = match stage.kind.as_str() {
                            "directory" => StageKind::Directory,
                            "list" => StageKind::List,
                            _ => StageKind::File,
                        };
                        let spec = client.stage_spec(dir, kind, StageWhen::Immediate, &stage.bb_path, &stage.pfs_path, false);
                        match client.stage_submit_checked(spec).await {
                            Ok(summary) => {
                                stage.stage_id = Some(summary.id);
                                copy_summary(&mut stage, &summary);
                            }
                            Err(e) => {
                                stage.state = "failed".into();
                                stage.error = Some(e.to_string());
                            }
                        }
                    }
                    Some(id) => match client.stage(id).await {
                        Ok(summary) => copy_summary(&mut stage, &summary),
                        Err(e) => tracing::debug!(job, id, "stage status: {e}"),
                    },
                }
                if stage != before {
                    self.store().update_stage(&stage)?;
                    self.changed.notify_waiters();
                }
            }
            tokio::time::sleep(STAGE_POLL).await;
        }
    }

    /// A client of the instance for a stage coordinator, with the owner's identity: the
    /// instance's (server 0's), or `server`'s of a private instance (one namespace each).
    fn stage_client(&self, name: &str, server: Option<usize>) -> Result<Client> {
        let instance = self.store().instance(name)?.ok_or_else(|| anyhow!("instance {name} is gone"))?;
        let descriptor = self.descriptor(&instance, PathBuf::new())?;
        let secret = recorded_secret(&instance)?;
        let addrs = match (descriptor.mode, server) {
            (Mode::Striped, _) => descriptor.servers.iter().map(|s| s.addr).collect(),
            (Mode::Private, server) => {
                let index = server.unwrap_or(0);
                let found = descriptor.servers.iter().find(|s| s.index == index);
                vec![found.ok_or_else(|| anyhow!("{name} has no server {index}"))?.addr]
            }
        };
        Ok(owner_client(&instance, secret, addrs)?)
    }

    async fn progress(&self, job: u64, direction: Direction, wait_secs: u32) -> Result<Progress> {
        let deadline = Instant::now() + Duration::from_secs(wait_secs.min(60) as u64);
        loop {
            // Registered before looking, so a change between the look and the wait is not missed.
            let changed = self.changed.notified();
            let stages = self.store().stages(Some(job), Some(direction))?;
            if self.store().job(job)?.is_none() {
                anyhow::bail!("job {job} has no burst buffer set up");
            }
            if let Some(failed) = stages.iter().find(|s| s.state == "failed" || s.state == "cancelled") {
                // As the script wrote them: a stage-in's source is on the PFS, a stage-out's in the buffer.
                let verb = if direction == Direction::In { "stage_in" } else { "stage_out" };
                let why =
                    format!("{verb} {} -> {}: {}", failed.source, failed.destination, failed.error.as_deref().unwrap_or(&failed.state));
                self.set_job_state(job, &format!("{verb}-failed").replace('_', "-"), Some(&why))?;
                return Ok(Progress::Failed(why));
            }
            let done = stages.iter().filter(|s| s.state == "done").count();
            if done == stages.len() {
                return Ok(Progress::Done { total: stages.len(), bytes: stages.iter().map(|s| s.bytes_done).sum() });
            }
            if stages.iter().all(|s| s.state == "done" || s.state == "waiting") {
                return Ok(Progress::Deferred { done, total: stages.len() });
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Progress::Busy { done, total: stages.len() });
            }
            let _ = tokio::time::timeout(deadline - now, changed).await;
        }
    }

    // ----- nodes -----

    fn paths(&self, job: u64) -> Result<Vec<(String, String)>> {
        let Some(record) = self.store().job(job)? else { return Ok(Vec::new()) };
        let dir = self.config.job_root.join(job.to_string());
        let mut vars = vec![("SURGE_HOME".to_string(), dir.join("home").display().to_string())];
        let instances = self.store().job_instances(job)?;
        for instance in &instances {
            let (variable, subdir) = if instance.mode == "private" { ("DW_JOB_PRIVATE", "private") } else { ("DW_JOB_STRIPED", "striped") };
            vars.push((variable.into(), dir.join(subdir).display().to_string()));
        }
        if let Some(striped) = instances.iter().find(|i| i.mode == "striped") {
            vars.push(("SURGE_INSTANCE".into(), striped.name.clone()));
        }
        if let Ok(request) = parse_script(&record.script) {
            for name in request.persistent.iter().chain(request.create_persistent.iter().map(|p| &p.name)) {
                vars.push((format!("DW_PERSISTENT_STRIPED_{name}"), dir.join("persistent").join(name).display().to_string()));
            }
        }
        vars.dedup();
        Ok(vars)
    }

    /// Starts the job's on-demand instances on its nodes (once), and its private instances of
    /// standing pools (one server per compute node, on the pool's nodes, in place of the room
    /// setup held for them).
    async fn start_on_nodes(self: &Arc<Self>, job: u64, nodes: &[String]) -> Result<()> {
        let _placing = self.placement.lock().await;
        let Some(record) = self.store().job(job)? else { return Ok(()) };
        if record.nodes.is_empty() && !nodes.is_empty() {
            self.store().set_job_nodes(job, nodes)?;
        }
        let nodes = if record.nodes.is_empty() { nodes.to_vec() } else { record.nodes };
        let listed = self.store().job_instances(job)?;
        for instance in listed {
            let Some(pool) = self.config.pool(&instance.pool) else { continue };
            let private_standing = self.is_private_standing(&instance);
            if (pool.kind != PoolKindConfig::OnDemand && !private_standing) || instance.state == "ready" {
                continue;
            }
            let mut used = self.store().node_use()?;
            let listed = self.store().servers(&instance.name)?;
            for s in listed {
                // Its own planned servers are being replaced.
                if let Some(u) = used.get_mut(&s.node) {
                    *u = u.saturating_sub(s.share);
                }
            }
            let placed = if private_standing {
                pools::place_private_standing(pool, &used, nodes.len(), instance.capacity)
            } else {
                pools::place_on_demand(pool, &used, &nodes, instance.capacity, instance.replicas)
            };
            let placed = placed.map_err(|e| anyhow!(e))?;
            let servers: Vec<ServerRecord> = placed
                .into_iter()
                .enumerate()
                .map(|(index, (node, share))| ServerRecord { id: 0, instance: instance.name.clone(), index, node, share, addr: None })
                .collect();
            self.store().transaction(|tx| store::replace_servers(tx, &instance.name, &servers))?;
            self.start_instance(&instance.name).await?;
        }
        Ok(())
    }

    async fn pre_run(self: &Arc<Self>, job: u64, nodes: &[String]) -> Result<()> {
        if self.store().job(job)?.is_none() {
            return Ok(());
        }
        self.start_on_nodes(job, nodes).await?;
        self.release_stages(job, Direction::In)?;
        self.set_job_state(job, "running", None)
    }

    async fn attach(self: &Arc<Self>, job: u64, node: &str, nodes: &[String]) -> Result<Attachment> {
        let Some(record) = self.store().job(job)? else {
            return Ok(Attachment { uid: 0, gid: 0, job_dir: String::new(), mounts: Vec::new() });
        };
        self.start_on_nodes(job, nodes).await?;
        // The nodes recorded (by this call or an earlier one) say which namespace is whose.
        let job_nodes = self.store().job(job)?.map(|r| r.nodes).unwrap_or_default();
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        let instances = loop {
            let changed = self.changed.notified();
            let instances = self.instances_of_job(job)?;
            if let Some(failed) = instances.iter().find(|i| i.state == "failed") {
                anyhow::bail!("instance {} of job {job} failed to start", failed.name);
            }
            if instances.iter().all(|i| i.state == "ready") {
                break instances;
            }
            let now = Instant::now();
            if now >= deadline {
                anyhow::bail!("job {job}'s buffers not up after {ATTACH_TIMEOUT:?}");
            }
            let _ = tokio::time::timeout(deadline - now, changed).await;
        };
        let job_dir = self.config.job_root.join(job.to_string());
        let mut mounts = Vec::new();
        for instance in instances {
            let subdir = match (&instance.persistent, instance.mode.as_str()) {
                (Some(name), _) => format!("persistent/{name}"),
                (None, "private") => "private".to_string(),
                (None, _) => "striped".to_string(),
            };
            let token = job_dir.join("home").join("instances").join(format!("{}.token", instance.name));
            let mut descriptor = self.descriptor(&instance, token)?;
            let node_addr = if self.is_private_standing(&instance) {
                // Its namespace is server k, on a burst-buffer node that may hold others of
                // the instance: the node's descriptor names that server alone.
                let k = job_nodes.iter().position(|n| n == node).ok_or_else(|| anyhow!("node {node} is not one of job {job}'s nodes"))?;
                let mut mine = descriptor
                    .servers
                    .into_iter()
                    .find(|s| s.index == k)
                    .ok_or_else(|| anyhow!("no server of {} for node {node}", instance.name))?;
                mine.index = 0;
                descriptor.servers = vec![mine];
                None
            } else if instance.mode == "private" {
                let servers = self.store().servers(&instance.name)?;
                let mine = servers.iter().find(|s| s.node == node).and_then(|s| s.addr.clone());
                Some(mine.ok_or_else(|| anyhow!("no server of {} on node {node}", instance.name))?)
            } else {
                None
            };
            mounts.push(Mount {
                instance: instance.name.clone(),
                subdir,
                descriptor: serde_json::to_string_pretty(&descriptor)?,
                secret: instance.secret.clone(),
                node_addr,
            });
        }
        tracing::info!(job, node, mounts = mounts.len(), "node attached");
        Ok(Attachment { uid: record.uid, gid: record.gid, job_dir: job_dir.display().to_string(), mounts })
    }

    fn set_job_state(&self, job: u64, state: &str, message: Option<&str>) -> Result<()> {
        self.store().set_job_state(job, state, message)
    }

    // ----- teardown -----

    async fn teardown(self: &Arc<Self>, job: u64, hurry: bool) -> Result<()> {
        let _placing = self.placement.lock().await;
        if self.store().job(job)?.is_none() {
            return Ok(());
        }
        let stages = self.store().stages(Some(job), None)?;
        let running: Vec<&StageRecord> = stages.iter().filter(|s| !s.is_final() && s.stage_id.is_some()).collect();
        if !running.is_empty() && !hurry {
            anyhow::bail!("job {job}: {} stage(s) still running; teardown with hurry cancels them", running.len());
        }
        for stage in running {
            if let (Ok(client), Some(id)) = (self.stage_client(&stage.instance, stage.server), stage.stage_id) {
                let _ = client.stage_cancel(id).await;
            }
        }
        let listed = self.store().job_instances(job)?;
        for instance in listed {
            self.stop_instance(&instance.name).await?;
        }
        self.passed(Step::TeardownInstancesStopped);
        self.store().transaction(|tx| store::delete_job(tx, job))?;
        self.changed.notify_waiters();
        tracing::info!(job, hurry, "job torn down");
        Ok(())
    }

    // ----- jobs the workload manager forgot -----

    /// Every `job_sweep_secs`, asks the workload manager about each job this manager has
    /// buffers for, and tears down (with hurry) those it no longer has.
    pub fn sweep_forgotten_jobs(self: &Arc<Self>) {
        let Some(command) = self.config.job_state_command.clone() else { return };
        let every = Duration::from_secs(self.config.job_sweep_secs.unwrap_or(60).max(1));
        self.every(every, "sweep", move |manager| {
            let command = command.clone();
            async move {
                let jobs = manager.store().jobs()?;
                for job in jobs {
                    if manager.job_is_gone(&command, job.job).await {
                        tracing::warn!(job = job.job, state = %job.state, "the workload manager no longer has this job: tearing it down");
                        if let Err(e) = manager.teardown(job.job, true).await {
                            tracing::warn!(job = job.job, "teardown of a forgotten job: {e:#}");
                        }
                    }
                }
                Ok(())
            }
        });
    }

    /// Gone: the command answered and printed nothing, or said the id is unknown. A command
    /// that cannot answer (the controller down) says nothing is gone.
    async fn job_is_gone(&self, command: &str, job: u64) -> bool {
        let line = command.replace("{job}", &job.to_string());
        let output = tokio::process::Command::new("sh").arg("-c").arg(&line).stdin(std::process::Stdio::null()).output().await;
        match output {
            Ok(out) if out.status.success() => out.stdout.iter().all(u8::is_ascii_whitespace),
            Ok(out) => String::from_utf8_lossy(&out.stderr).contains("Invalid job id"),
            Err(e) => {
                tracing::warn!("job state command '{line}': {e}");
                false
            }
        }
    }

    // ----- restart -----

    /// After a start: asks every agent what runs and brings the world in line with the
    /// store. Servers of instances the store does not know are stopped (nothing orphaned);
    /// instances that were being started are started again; ready instances missing a server
    /// are marked `degraded`; stages that were running are driven again (the coordinators
    /// journal them, so they are found by id). Unreachable agents are reported and skipped.
    pub async fn reconcile(self: &Arc<Self>) -> Result<()> {
        let outcome = self.reconcile_with_nodes().await;
        // Requests are answered from here on, reconciled or not: a store that cannot be read
        // fails each of them with its reason rather than leaving them waiting.
        tracing::info!(ok = outcome.is_ok(), "reconciled with the nodes; answering requests");
        self.reconciled.send_replace(true);
        outcome
    }

    async fn reconcile_with_nodes(self: &Arc<Self>) -> Result<()> {
        let known: HashMap<String, InstanceRecord> = self.store().instances()?.into_iter().map(|i| (i.name.clone(), i)).collect();
        let mut servers_of: HashMap<String, Vec<ServerRecord>> = HashMap::new();
        for name in known.keys() {
            servers_of.insert(name.clone(), self.store().servers(name)?);
        }
        // The names the agents know the known instances' servers by.
        let mut agent_names: HashSet<String> = known.keys().cloned().collect();
        for instance in known.values() {
            agent_names.extend(servers_of[&instance.name].iter().map(|server| self.agent_name(instance, server)));
        }
        let mut running: HashMap<(String, String), String> = HashMap::new();
        let mut nodes: Vec<String> = self.config.pools.iter().flat_map(|p| p.nodes.iter().map(|n| n.name.clone())).collect();
        nodes.sort();
        nodes.dedup();
        // All nodes at once: a dead one costs one timeout in all.
        let listings = nodes.iter().map(|node| {
            let manager = self.clone();
            let node = node.clone();
            tokio::spawn(async move { manager.agent_call(&node, &AgentRequest::List).await })
        });
        let listings: Vec<_> = futures_join_all(listings.collect()).await;
        for (node, listed) in nodes.iter().zip(listings) {
            match listed {
                Ok(AgentReply::Servers(servers)) => {
                    for s in servers {
                        if !agent_names.contains(&s.instance) {
                            tracing::warn!(node, instance = %s.instance, "server of an unknown instance: stopped");
                            let _ = self.agent_call(node, &AgentRequest::Stop { instance: s.instance.clone() }).await;
                        } else {
                            running.insert((s.instance.clone(), node.clone()), s.addr);
                        }
                    }
                }
                Ok(other) => tracing::warn!(node, "agent answered {other:?}"),
                Err(e) => tracing::warn!(node, "reconcile: {e:#}"),
            }
        }
        for instance in known.values() {
            let servers = &servers_of[&instance.name];
            let unreachable: Vec<&str> = servers.iter().filter(|s| self.is_unreachable(&s.node)).map(|s| s.node.as_str()).collect();
            let up = servers.iter().filter(|s| running.get(&(self.agent_name(instance, s), s.node.clone())) == s.addr.as_ref()).count();
            match instance.state.as_str() {
                "starting" if !unreachable.is_empty() => {
                    tracing::warn!(instance = %instance.name, ?unreachable, "was starting; nodes unreachable: left planned");
                    self.store().set_instance_state(&instance.name, "planned")?;
                }
                "starting" => {
                    tracing::info!(instance = %instance.name, "was starting: starting again");
                    for s in servers {
                        let _ = self.agent_call(&s.node, &AgentRequest::Stop { instance: self.agent_name(instance, s) }).await;
                    }
                    self.store().set_instance_state(&instance.name, "planned")?;
                    if self.config.pool(&instance.pool).is_some_and(|p| p.kind == PoolKindConfig::Standing) {
                        if let Err(e) = self.start_instance(&instance.name).await {
                            tracing::warn!(instance = %instance.name, "{e:#}");
                        }
                    }
                }
                "ready" | "degraded" if up < servers.len() => {
                    tracing::warn!(instance = %instance.name, up, servers = servers.len(), "servers missing");
                    self.store().set_instance_state(&instance.name, "degraded")?;
                }
                "degraded" => self.store().set_instance_state(&instance.name, "ready")?,
                _ => {}
            }
        }
        let listed = self.store().jobs()?;
        for job in listed {
            for direction in [Direction::In, Direction::Out] {
                self.drive(job.job, direction);
            }
        }
        Ok(())
    }
}

/// Every task's outcome, in order (a task that panicked counts as a failure).
async fn futures_join_all<T>(tasks: Vec<tokio::task::JoinHandle<Result<T>>>) -> Vec<Result<T>> {
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.map_err(|e| anyhow!("{e}")).and_then(|outcome| outcome));
    }
    outcomes
}

/// The stage-outs of a coordinator's list a job's end waits for: those not final, and those
/// that failed with no later stage of the same path done or under way.
fn stages_still_wanted(listed: &[StageSummary]) -> Vec<&StageSummary> {
    let made_good = |failed: &StageSummary| {
        listed.iter().any(|later| {
            later.id > failed.id
                && later.bb_path == failed.bb_path
                && later.pfs_path == failed.pfs_path
                && later.state != StageState::Failed
        })
    };
    listed
        .iter()
        .filter(|s| s.direction == StageDirection::Out)
        .filter(|s| match s.state {
            StageState::Done | StageState::Cancelled => false,
            StageState::Failed => !made_good(s),
            StageState::Deferred | StageState::Queued | StageState::Running => true,
        })
        .collect()
}

fn stage_kind_word(kind: StageKind) -> &'static str {
    match kind {
        StageKind::File => "file",
        StageKind::Directory => "directory",
        StageKind::List => "list",
    }
}

fn copy_summary(stage: &mut StageRecord, summary: &surge_client::surge_proto::stage::StageSummary) {
    stage.state = summary.state.label().into();
    stage.files_done = summary.files_done;
    stage.files_total = summary.files_total;
    stage.bytes_done = summary.bytes_done;
    stage.bytes_total = summary.bytes_total;
    stage.error = summary.error.clone();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(uid: u32, share_gid: Option<u32>, share_uids: &[u32]) -> InstanceRecord {
        InstanceRecord {
            id: 1,
            name: "ps-team".into(),
            job: None,
            persistent: Some("team".into()),
            pool: "bb".into(),
            mode: "striped".into(),
            capacity: 1 << 30,
            uid,
            gid: uid,
            state: "ready".into(),
            created: 1,
            secret: "00".repeat(32),
            chunk_size: 1 << 20,
            replicas: 1,
            share_gid,
            share_uids: share_uids.to_vec(),
        }
    }

    #[test]
    fn a_reservation_is_for_its_owner_its_group_and_its_users() {
        // uid 1003 is in group 4000 as the node's group database says; 1004 is in none.
        let groups_of = |uid: u32| if uid == 1003 { vec![1003, 4000] } else { vec![uid] };
        let alone = reservation(1001, None, &[]);
        assert!(may_use(&alone, 1001, None, groups_of) && may_use(&alone, 0, None, groups_of));
        assert!(!may_use(&alone, 1002, Some(1001), groups_of), "the owner's group is not a share");
        let team = reservation(1001, Some(4000), &[1005]);
        assert!(may_use(&team, 1002, Some(4000), groups_of), "the job's own group");
        assert!(may_use(&team, 1003, Some(1003), groups_of), "a group the user is in");
        assert!(may_use(&team, 1005, None, groups_of), "a listed user");
        assert!(!may_use(&team, 1004, Some(1004), groups_of));
        assert!(!may_use(&team, 1004, None, groups_of));
    }

    #[test]
    fn outside_a_job_users_make_only_their_own_reservations_and_only_if_allowed() {
        let groups_of = |uid: u32| if uid == 1003 { vec![1003, 4000] } else { Vec::new() };
        let alone = Share::default();
        let team = Share { gid: Some(4000), uids: vec![1005] };
        let denied = |outcome: Result<()>| outcome.unwrap_err().to_string();
        // Root and the trusted uids: anyone's, shared with anyone.
        may_make_reservation(true, false, 64030, 1001, 1001, &team, groups_of).unwrap();
        // Users: not at all by default.
        let off = denied(may_make_reservation(false, false, 1003, 1003, 1003, &alone, groups_of));
        assert!(off.contains("user_reservations is off") && off.contains("surge reservation create"), "{off}");
        // Allowed: their own, in their group, shared with a group they are in and anyone listed.
        may_make_reservation(false, true, 1003, 1003, 1003, &team, groups_of).unwrap();
        assert!(denied(may_make_reservation(false, true, 1003, 1001, 1001, &alone, groups_of)).contains("not for uid 1001"));
        assert!(denied(may_make_reservation(false, true, 1003, 1003, 0, &alone, groups_of)).contains("not in group 0"));
        let other = Share { gid: Some(5000), uids: Vec::new() };
        assert!(denied(may_make_reservation(false, true, 1003, 1003, 1003, &other, groups_of)).contains("not in group 5000"));
        assert!(denied(may_make_reservation(false, true, 1004, 1004, 1004, &alone, groups_of)).contains("not known on the manager's node"));
    }

    #[test]
    fn a_shared_roots_acl_names_the_users_and_the_group() {
        assert_eq!(shared_root_acl(&reservation(1001, None, &[])), None, "the owner's alone: mode 0700, no ACL");
        let team = shared_root_acl(&reservation(1001, Some(4000), &[1007, 1005, 1001, 1005])).unwrap();
        let tags: Vec<(Tag, u32)> = team.entries().iter().map(|e| (e.tag, e.perm)).collect();
        assert_eq!(
            tags,
            [
                (Tag::UserObj, 7),
                (Tag::User(1001), 7),
                (Tag::User(1005), 7),
                (Tag::User(1007), 7),
                (Tag::GroupObj, 7),
                (Tag::Group(4000), 7),
                (Tag::Mask, 7),
                (Tag::Other, 0)
            ]
        );
        // Shared with users only: the root's own group (the owner's) gets nothing.
        let users = shared_root_acl(&reservation(1001, None, &[1005])).unwrap();
        assert_eq!(users.perm(Tag::GroupObj), Some(0));
        assert_eq!(users.perm(Tag::User(1005)), Some(7));
    }

    #[test]
    fn only_the_trusted_choose_whose_sessions_and_stages_they_see() {
        let slurm = 64030;
        let trusted = |uid: u32| uid == 0 || uid == slurm;
        // Root and SlurmUser get what they ask for: everything, a user's view, or no one's.
        for caller in [0, slurm] {
            assert_eq!(answered_viewer(trusted, caller, Viewer::Admin), Viewer::Admin);
            assert_eq!(answered_viewer(trusted, caller, Viewer::User(1000)), Viewer::User(1000));
            assert_eq!(answered_viewer(trusted, caller, Viewer::Unknown), Viewer::Unknown);
            // Slurm asking on root's (or its own user's) behalf: what they would see.
            assert_eq!(answered_viewer(trusted, caller, Viewer::User(0)), Viewer::Admin);
        }
        // Anyone else sees their own, whatever they ask for, or nothing if they ask for that.
        for asked in [Viewer::Admin, Viewer::User(1000), Viewer::User(2000), Viewer::User(0), Viewer::User(slurm)] {
            assert_eq!(answered_viewer(trusted, 1000, asked), Viewer::User(1000), "{asked:?}");
        }
        assert_eq!(answered_viewer(trusted, 1000, Viewer::Unknown), Viewer::Unknown);
    }
}
