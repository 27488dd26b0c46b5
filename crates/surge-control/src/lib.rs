//! # surge-control — what the control plane's parts say to each other
//!
//! Surge under a workload manager has three kinds of parts besides the data plane: one
//! **manager** per cluster (pools, instances, reservations, jobs' stages; its state in SQLite),
//! a resident **node agent** on every node that can run servers (it starts and stops instance
//! servers when the manager asks), and short-lived **clients** of the manager: the `surge`
//! command, the Slurm hooks, the nodes' prolog and epilog. This crate is the language they
//! share, and nothing else:
//!
//! * [`manager`]: requests to the manager and its replies (the views `surge status` prints);
//! * [`agent`]: requests to a node agent and its replies;
//! * [`wire`]: one JSON document per line over a stream, with a size limit; the manager's
//!   local socket (callers known by their kernel credentials) and the agents' TCP connections
//!   (authenticated with the cluster key: a challenge answered with a keyed hash, as instances do);
//!   the manager's TCP service for the other nodes, each request inside a MUNGE credential;
//! * [`munge`]: MUNGE credentials, the cluster's own proof of a caller's uid and gid;
//! * [`host`]: the little its root-side parts do on a node alike: files and directories made
//!   for a job's user, that user's groups, the signal that stops a daemon, users and groups
//!   looked up.
//!
//! JSON rather than the data plane's binary frames: these messages are few, small and worth
//! reading in a log or with `socat` when something goes wrong.

pub mod agent;
pub mod host;
pub mod manager;
pub mod munge;
pub mod wire;

/// Copies of each share where a message or a configuration says none (it predates
/// replication): one.
pub fn one_copy() -> u8 {
    1
}
