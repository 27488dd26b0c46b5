//! Administration and change notices: statistics, shutdown, batches of requests, and the
//! watch a caching client (the FUSE mount) asks for.

use serde::{Deserialize, Serialize};

use crate::call::service;
use crate::error::Error;
use crate::ino::Ino;
use crate::namespace::NamespaceRequest;
use crate::types::ServerStats;

/// Capacity, usage and counts of this server.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StatFs;

/// Stops the server (after answering).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Shutdown;

/// Several namespace steps for this server in one frame, answered in order, each on its own
/// (see [`BatchOutcome`]): staging creates, commits and renames a few hundred small files per
/// round trip so.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Batch {
    pub requests: Vec<NamespaceRequest>,
}

/// One request of a batch: its encoded reply, or why it failed.
pub type BatchOutcome = Result<Vec<u8>, Error>;

/// From now on, tell this connection (with [`Notice`] frames) when something it was told
/// about changes through another connection: what a client that caches metadata needs to
/// drop stale entries at once instead of after a timeout.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Watch;

/// A watcher has acted on the notice whose frame carried request id `ack`. One-way: the
/// server sends no reply.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct NoticeSeen {
    pub ack: u64,
}

service! {
    /// An administration or watch request.
    AdminRequest => Admin {
        StatFs -> ServerStats, "statfs";
        Shutdown -> (), "shutdown";
        Batch -> Vec<BatchOutcome>, "batch";
        Watch -> (), "watch";
        NoticeSeen -> (), "notice-seen";
    }
}

/// A change made through another connection to something this (watching) connection was told
/// about, sent by the server before it answers the change. Frame kind `Notice`; a non-zero
/// request id asks for a `NoticeSeen` quoting it once the notice has been acted on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The inode's attributes (size, times, mode, owner, links) changed.
    Attr { ino: Ino },
    /// `parent/name` now names something else, or nothing, or something new.
    Entry { parent: Ino, name: String },
}
