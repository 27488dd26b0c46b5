//! Administration and change notices: statistics, shutdown, batches of requests, the watch a
//! caching client (the FUSE mount) asks for, and the scans `surge fsck` reads a server's whole
//! share with.

use serde::{Deserialize, Serialize};

use crate::call::service;
use crate::error::Error;
use crate::ino::Ino;
use crate::namespace::NamespaceRequest;
use crate::types::{FileKind, ServerStats};

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

/// A delegation's holder writes back (docs/delegation.md): the steps it answered in directory
/// `dir` under the delegation named `token` (see [`crate::namespace::Delegated`]), numbered
/// from `first_seq` on in the holder's log, each answered as in a [`Batch`]. Only creates
/// (`CreateAs`), mkdirs (`MakeDir` with a number), unlinks, rmdirs, renames and commits in
/// the directory and of the files made under it. Each step is journaled with its number, so that after a restart of the home the
/// holder learns where to go on from ([`crate::namespace::Reclaim`]); answered once durable.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WriteBack {
    pub dir: crate::Ino,
    pub token: crate::Ino,
    pub first_seq: u64,
    pub steps: Vec<NamespaceRequest>,
}

/// From now on, tell this connection (with [`Notice`] frames) when something it was told
/// about changes through another connection: what a client that caches metadata needs to
/// drop stale entries at once instead of after a timeout. How it keeps what it is told
/// decides what it is told and what waits for it ([`Keeps`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub keeps: Keeps,
}

/// What a watching connection keeps of what it is told.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeps {
    /// Nothing: it watches only to hold directory delegations, and is sent only their
    /// recalls. It holds no names or attributes: nobody's change waits for it, and it never
    /// stands in the way of another client's delegation.
    Nothing,
    /// Names and attributes, as a kernel's caches keep them (the FUSE mount): a name's change
    /// is answered only once it acknowledged the notice; an attribute's change is told without
    /// waiting (a `stat` may lag it by the notice's flight), except to a keeper of the file
    /// (`Open { keep }`) or when the changer asked (`AwaitWatchers`). Its names in a directory
    /// stand in the way of another client's delegation of it.
    Everything,
    /// Names and attributes, answered from as they are told (the interception library's
    /// cache of `stat`s): every change to either is answered only once it acknowledged the
    /// notice, except a directory's times and link count moving as names change in it, which
    /// it is not told of (it never keeps a directory's times). Its names in a directory never
    /// stand in the way of a delegation: before another connection is granted one, it is told
    /// to forget them ([`Notice::Names`]) and the grant is answered once it did.
    Exactly,
}

/// A watcher has acted on the notice whose frame carried request id `ack`. One-way: the
/// server sends no reply.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct NoticeSeen {
    pub ack: u64,
}

/// Answered once every change this server made to its namespace share before it is durable
/// (the metadata's `syncfs`; `surge fsck` sends it after repairing).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SyncMetadata;

/// What a page of a scan may take encoded: half a frame, whatever the lengths of names.
pub const SCAN_PAGE_BYTES: usize = crate::frame::MAX_MESSAGE_LEN / 2;

/// The inodes homed on this server, in inode order, from the first above `after`: a page.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ListInodes {
    pub after: Option<Ino>,
}

/// What a consistency check needs of one inode.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct InodeSummary {
    pub ino: Ino,
    pub kind: FileKind,
    pub nlink: u32,
    pub size: u64,
    /// Open handles clients hold on it now (an open file may be nameless, and past its size).
    pub opens: u32,
    /// For a directory: its `..` and whether it is retired (being removed).
    pub dir: Option<DirSummary>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DirSummary {
    pub parent: Ino,
    pub retired: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct InodePage {
    pub inodes: Vec<InodeSummary>,
    pub more: bool,
}

/// The entries of every directory homed on this server, ordered by (directory, name), from
/// the first after `after`: a page.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ListEntries {
    pub after: Option<(Ino, String)>,
}

/// `dir/name` names `ino`; `locked`: a rename between servers holds it now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct EntrySummary {
    pub dir: Ino,
    pub name: String,
    pub ino: Ino,
    pub kind: FileKind,
    pub locked: bool,
}

impl EntrySummary {
    /// An upper bound of its encoded size.
    pub fn encoded_bound(&self) -> usize {
        self.name.len() + 40
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct EntryPage {
    pub entries: Vec<EntrySummary>,
    pub more: bool,
}

/// The data files this server holds, in inode order, from the first above `after`: a page.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ListDataFiles {
    pub after: Option<Ino>,
}

/// One data file: its length (chunks sit at their file offsets, so data past a file's size
/// shows as a length beyond it) and the bytes it occupies on the device.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DataFileSummary {
    pub ino: Ino,
    pub len: u64,
    pub allocated: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DataFilePage {
    pub files: Vec<DataFileSummary>,
    pub more: bool,
}

/// Replication: mirror this server's share on the server at `to` (its successor; None: stop
/// mirroring). The server keeps trying to reach it and fills the mirror whenever it comes
/// back (see [`crate::mirror`]). With `failover_after_ms`, failover is automatic: `peers`
/// (every server's address, by index) vote on whether a server is lost (see
/// [`crate::mirror`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorTo {
    pub to: Option<std::net::SocketAddr>,
    pub peers: Vec<std::net::SocketAddr>,
    pub failover_after_ms: Option<u64>,
}

/// Whether this server can open a connection to `addr` now (a vote on whether the server
/// there is lost).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CanReach {
    pub addr: std::net::SocketAddr,
}

/// Files this server ended whose data may still be on the servers, listed for at least
/// `grace_ms` (the client that ended each purges at once; the keeper beside this server
/// purges what is left), at most `limit` of them. Asked by that keeper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PurgesDue {
    pub grace_ms: u64,
    pub limit: u32,
}

/// One ended file whose data to purge: on the servers that hold its chunks below `reach`
/// bytes (or, for a file held whole by one server, on that one), with the ticket the purge
/// needs where servers check identities.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PurgeDue {
    pub ino: Ino,
    pub reach: u64,
    pub ticket: Option<crate::ticket::Ticket>,
}

/// The keeper purged these files' data on every server that can hold some.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Purged {
    pub inos: Vec<Ino>,
}

/// Replication: server `index`, this server's predecessor, is lost: serve its share from the
/// mirror held here. Refused while the predecessor still mirrors here, or when the mirror is
/// incomplete. Clients reach the share through this server's address, naming it in their
/// hello.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TakeOver {
    pub index: u32,
}

/// From now on, a change this connection makes to attributes is answered only once every
/// watcher that may hold them acknowledged its notice, as a change of names always is. For a
/// client beside a mount of the same node (the interception library): once its close or
/// truncate returns, the kernel's cache there no longer holds the old attributes, so a
/// process asking the kernel sees the change at once.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AwaitWatchers;

service! {
    /// An administration or watch request.
    AdminRequest => Admin {
        StatFs -> ServerStats, "statfs";
        Shutdown -> (), "shutdown";
        Batch -> Vec<BatchOutcome>, "batch";
        WriteBack -> Vec<BatchOutcome>, "write-back";
        Watch -> (), "watch";
        NoticeSeen -> (), "notice-seen";
        SyncMetadata -> (), "sync-metadata";
        ListInodes -> InodePage, "list-inodes";
        ListEntries -> EntryPage, "list-entries";
        ListDataFiles -> DataFilePage, "list-data-files";
        MirrorTo -> (), "mirror-to";
        TakeOver -> (), "take-over";
        CanReach -> bool, "can-reach";
        PurgesDue -> Vec<PurgeDue>, "purges-due";
        Purged -> (), "purged";
        AwaitWatchers -> (), "await-watchers";
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
    /// Another client needs directory `dir`, delegated to this connection: write its steps
    /// back and give it up ([`crate::namespace::GiveBack`]).
    Recall { dir: Ino },
    /// Every name of directory `dir` this connection was told may change from now on without
    /// a notice: forget them all (sent to a watcher that keeps [`Keeps::Exactly`] before
    /// another client is granted the directory's delegation).
    Names { dir: Ino },
}
