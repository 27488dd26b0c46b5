//! Requests to the manager and its replies.
//!
//! The hooks a workload manager runs around a job map one to one onto requests (Slurm's names:
//! job_process, setup, data_in, paths, pre_run, post_run, data_out, teardown); the nodes'
//! prolog and epilog attach and detach a node; `surge status` asks for [`Status`].
//! Who may ask what is decided by the caller's uid, which the manager takes from the kernel
//! (the local socket's peer credentials), never from the request.

use serde::{Deserialize, Serialize};

/// Which stages of a job a request is about.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    In,
    Out,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::In => "in",
            Direction::Out => "out",
        })
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// The pools with their capacity and what is free (Slurm asks every 30 s).
    Pools,
    /// Pools, instances, sessions and stages (`surge status`, `dwstat`), as the caller may
    /// see them (see [`Viewer`]).
    Status,
    /// [`Request::Status`] as `viewer` may see it: the workload manager, which asks on a
    /// user's behalf (`scontrol show bbstat`), names the user. Only root and the trusted uids
    /// may name another user; anyone else sees at most their own, whatever they name.
    StatusFor { viewer: Viewer },
    /// At submit: the script's directives checked against the pools and reservations that
    /// exist (and, when the workload manager says who submits, what that user, in that group,
    /// may use).
    CheckJob {
        script: String,
        uid: Option<u32>,
        #[serde(default)]
        gid: Option<u32>,
    },
    /// The job was chosen to run: charge its capacity, create and destroy what it asks, start
    /// its standing-pool servers.
    Setup { job: u64, uid: u32, gid: u32, script: String },
    /// Start the job's stage-in (deferred to pre-run for buffers on the job's own nodes).
    DataIn { job: u64 },
    /// How the job's stages in one direction stand; waits up to `wait_secs` for them to end.
    Progress { job: u64, direction: Direction, wait_secs: u32 },
    /// The variables the job's batch script and steps get.
    Paths { job: u64 },
    /// The job's nodes are known: start its on-demand servers, run deferred stage-ins.
    PreRun { job: u64, nodes: Vec<String> },
    /// A node's prolog: what to mount for the job there (waits until the buffers are up).
    Attach { job: u64, node: String, nodes: Vec<String> },
    /// A node's epilog: its mounts are gone.
    Detach { job: u64, node: String },
    /// The job's script ended.
    PostRun { job: u64 },
    /// Start the job's stage-out.
    DataOut { job: u64 },
    /// Release the job's buffers; with `hurry`, without waiting for (or after failed) stages.
    Teardown { job: u64, hurry: bool },
    /// A persistent reservation made outside a job (DataWarp's `create_persistent`, `surge
    /// reservation create`), owned by `uid`:`gid`. Root and the trusted uids may make one for
    /// anyone; another caller only its own, where the manager's configuration allows it
    /// (`user_reservations`), shared only with a group the caller is in.
    CreatePersistent {
        name: String,
        uid: u32,
        gid: u32,
        pool: Option<String>,
        capacity: u64,
        /// A group whose members' jobs may use it too (`#DW persistentdw`); none: the owner's
        /// alone (a request from before sharing has none).
        #[serde(default)]
        group: Option<u32>,
        /// Users whose jobs may use it too.
        #[serde(default)]
        users: Vec<u32>,
    },
    /// A persistent reservation removed outside a job; `hurry` even while jobs use it. Root and
    /// the trusted uids may remove any; its owner, where the configuration allows it.
    DestroyPersistent { name: String, hurry: bool },
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Done,
    Pools(Vec<PoolView>),
    Status(Status),
    Progress(Progress),
    Paths(Vec<(String, String)>),
    Attach(Attachment),
    /// The request was refused or failed; the words are for the user.
    Failed(String),
}

/// Where a pool's servers run.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PoolKind {
    /// Dedicated burst-buffer nodes with resident agents (DataWarp's model).
    Standing,
    /// The job's own compute nodes, pooled for the job (BeeOND's model).
    OnDemand,
}

impl std::fmt::Display for PoolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PoolKind::Standing => "standing",
            PoolKind::OnDemand => "on-demand",
        })
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PoolView {
    pub name: String,
    pub kind: PoolKind,
    /// Bytes per unit of allocation.
    pub granularity: u64,
    /// Units in the pool.
    pub quantity: u64,
    /// Units not charged to any instance.
    pub free: u64,
    pub nodes: Vec<String>,
    /// Bytes of each node of `nodes`, in the same order, that the pool may use (empty from a
    /// manager that predates it).
    #[serde(default)]
    pub capacities: Vec<u64>,
}

/// One server of an instance: DataWarp's "fragment" of an instance on a node.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerView {
    /// The manager's number for it, the same for as long as it exists (0 from a manager that
    /// predates it).
    #[serde(default)]
    pub id: u64,
    pub node: String,
    pub addr: String,
    /// Bytes of the node's storage it holds: its share of the instance and, with two copies,
    /// its predecessor's mirror (0 from a manager that predates it).
    #[serde(default)]
    pub share: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct InstanceView {
    /// The manager's number for it, the same for as long as it exists (0 from a manager that
    /// predates it).
    #[serde(default)]
    pub id: u64,
    /// Its session's number: its job's ([`SessionView::id`]), or for a persistent reservation,
    /// which is a session of its own, its own `id`.
    #[serde(default)]
    pub session: u64,
    pub name: String,
    /// The job it belongs to; `None` for a persistent reservation.
    pub job: Option<u64>,
    /// The reservation's name for a persistent instance.
    pub persistent: Option<String>,
    pub pool: String,
    pub mode: String,
    /// Bytes charged (the request rounded up to the pool's granularity).
    pub capacity: u64,
    pub owner_uid: u32,
    /// For a reservation shared with a group: its gid (its members' jobs may use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
    /// For a reservation shared with users: their uids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<u32>,
    /// `planned` (charged, no servers yet), `starting`, `ready`, `degraded` (a server
    /// missing), `stopping` (a stop that has not reached every node yet), `failed`.
    pub state: String,
    pub created: u64,
    pub servers: Vec<ServerView>,
    /// Copies of each share (2: each server mirrors its share on the next).
    #[serde(default = "crate::one_copy")]
    pub replicas: u8,
}

/// A job's use of the burst buffer (DataWarp's "session").
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    /// The manager's number for it, the same for as long as it exists (0 from a manager that
    /// predates it).
    #[serde(default)]
    pub id: u64,
    pub job: u64,
    pub uid: u32,
    /// `setup`, `staging-in`, `running`, `ended`, `staging-out`, `stage-in-failed`,
    /// `stage-out-failed`.
    pub state: String,
    pub created: u64,
    /// Instances it uses: its own and persistent ones.
    pub instances: Vec<String>,
    /// Why it is where it is, when something went wrong.
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageView {
    pub job: u64,
    pub direction: Direction,
    pub kind: String,
    pub source: String,
    pub destination: String,
    /// `waiting` (for its turn, or for the job's nodes), `pending` (released, not yet taken by
    /// the coordinator), then the coordinator's: `queued`, `running`, `done`, `failed`,
    /// `cancelled`.
    pub state: String,
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub error: Option<String>,
}

/// Whom a status is shown to, which decides whose sessions and stages it holds. Pools,
/// instances and where their servers run are everyone's to see (as Slurm shows every job's
/// allocation); sessions and stages say which files a job stages and how that went, and are
/// for the job's owner and the administrators only.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Viewer {
    /// Root or a trusted uid: everyone's.
    #[default]
    Admin,
    /// This user: their own jobs' only.
    User(u32),
    /// Someone the workload manager did not name (Slurm 22.05's `scontrol show bbstat` does
    /// not say who asks): no one's.
    Unknown,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub pools: Vec<PoolView>,
    pub instances: Vec<InstanceView>,
    pub sessions: Vec<SessionView>,
    pub stages: Vec<StageView>,
    /// Whom the manager answered for: `sessions` and `stages` hold what that viewer may see
    /// (a manager that predates it answered everything).
    #[serde(default)]
    pub viewer: Viewer,
}

/// Where a job's stages in one direction are.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// Some still run.
    Busy { done: usize, total: usize },
    /// Those not done wait for the job's nodes (a buffer on them starts at pre-run).
    Deferred { done: usize, total: usize },
    /// All done (also when there were none).
    Done { total: usize, bytes: u64 },
    /// One failed: which file and why.
    Failed(String),
}

/// What a node mounts for a job, and as whom.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub uid: u32,
    pub gid: u32,
    /// The job's directory on every node: mounts and the clients' descriptors live under it.
    pub job_dir: String,
    pub mounts: Vec<Mount>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Instance name (its descriptor is written as `<job_dir>/home/instances/<name>.json`).
    pub instance: String,
    /// Mount point below the job directory (`striped`, `private`, `persistent/<name>`).
    pub subdir: String,
    /// The instance descriptor (JSON, as `surge up` writes it), token path left to the node.
    pub descriptor: String,
    /// The instance's secret, 64 hex digits: written 0600 for the job's user only.
    pub secret: String,
    /// For a private namespace: this node's server address, which selects it.
    pub node_addr: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_managers_status_still_decodes() {
        // As a manager before ids, shares, node capacities and viewers answered.
        let old = r#"{"status":{"pools":[{"name":"bb","kind":"standing","granularity":1,"quantity":4,"free":3,"nodes":["bb1"]}],
            "instances":[{"name":"job-7","job":7,"persistent":null,"pool":"bb","mode":"striped","capacity":1,"owner_uid":1000,
            "state":"ready","created":5,"servers":[{"node":"bb1","addr":"10.0.0.1:7000"}]}],
            "sessions":[{"job":7,"uid":1000,"state":"running","created":5,"instances":["job-7"],"message":null}],"stages":[]}}"#;
        let Reply::Status(status) = serde_json::from_str::<Reply>(old).unwrap() else { panic!("not a status") };
        assert_eq!(status.viewer, Viewer::Admin, "an older manager answered everything");
        assert_eq!((status.instances[0].id, status.instances[0].servers[0].share, status.sessions[0].id), (0, 0, 0));
        assert!(status.pools[0].capacities.is_empty());
        assert_eq!((status.instances[0].group, status.instances[0].users.len()), (None, 0), "not shared");
    }

    #[test]
    fn a_create_persistent_from_before_sharing_still_decodes() {
        let old = r#"{"create_persistent":{"name":"ckpt","uid":1000,"gid":1000,"pool":"bb","capacity":1024}}"#;
        let Request::CreatePersistent { group, users, .. } = serde_json::from_str(old).unwrap() else { panic!("not a create") };
        assert_eq!((group, users), (None, vec![]));
    }

    #[test]
    fn a_status_for_a_viewer_is_one_line_of_json_each_way() {
        for viewer in [Viewer::Admin, Viewer::User(1000), Viewer::Unknown] {
            let request = Request::StatusFor { viewer };
            let line = serde_json::to_string(&request).unwrap();
            assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), request, "{line}");
        }
        // The plain request is what it always was.
        assert_eq!(serde_json::to_string(&Request::Status).unwrap(), r#""status""#);
    }
}
