//! Requests to a node agent and its replies.
//!
//! An agent runs as root on a node that holds burst-buffer storage. It starts instance
//! servers as the instance owner's user (so the servers' files, their data and the stage
//! copies they make carry that user's rights), keeps a record of what it started (so that a
//! restarted manager can ask what runs), and stops them.

use serde::{Deserialize, Serialize};

/// One server to start on the agent's node.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerPlan {
    pub instance: String,
    /// Index of this server in its namespace and the namespace's server count (private
    /// mode: every server is server 0 of 1).
    pub index: usize,
    pub count: usize,
    /// Bytes this server may hold.
    pub capacity: u64,
    pub chunk_size: u64,
    pub uid: u32,
    pub gid: u32,
    /// The instance's secret, 64 hex digits (written 0600 for the owner beside the data).
    pub secret: String,
    /// Copies of each share: with 2 the server keeps its predecessor's mirror beside its own
    /// share (a plan from a manager older than replication has none: one copy).
    #[serde(default = "crate::one_copy")]
    pub replicas: u8,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AgentRequest {
    /// Start a server of an instance (its directory is made, empty, under the node's storage).
    Start(ServerPlan),
    /// The instance's descriptor, once all its servers are up: the stage coordinator beside
    /// each server finds the others in it.
    Describe { instance: String, descriptor: String },
    /// Stop the instance's server here and remove its directory.
    Stop { instance: String },
    /// The servers this agent started that still run.
    List,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RunningServer {
    pub instance: String,
    pub index: usize,
    pub addr: String,
    pub pid: u32,
    pub root: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AgentReply {
    Started(RunningServer),
    Done,
    Servers(Vec<RunningServer>),
    Failed(String),
}
