//! The workflow service: what couples a producer's files to their consumers, kept with the
//! instance rather than in any client. Each directory's home server keeps the directory's
//! publication log: a file is *published* when a handle that wrote it is closed, or when it
//! is renamed (or linked) into the directory — never while it is being written — and each
//! publication gets the next number of the directory's log, its cursor. Watching a directory
//! is reading its log from a cursor; the read waits on the server for the next publication
//! instead of polling.

use serde::{Deserialize, Serialize};

use crate::call::service;
use crate::ino::Ino;
use crate::types::Timestamp;

/// Longest a [`Publications`] read waits on the server for a publication (the client asks
/// again): below every client's request timeout.
pub const MAX_WAIT_MS: u32 = 10_000;
/// Most publications one [`Publications`] read answers.
pub const MAX_PUBLICATIONS_PAGE: u32 = 1024;
/// Longest glob pattern a read may filter with.
pub const MAX_PATTERN_LEN: usize = 1024;

/// One publication of a file in a directory's log.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// Its number in the directory's log (cursors count these; the first is 1).
    pub cursor: u64,
    pub name: String,
    pub ino: Ino,
    /// The file's size and mtime when it was published; None for a file homed on another
    /// server than the directory (moved here from a directory homed there).
    pub size: Option<u64>,
    pub mtime: Option<Timestamp>,
    /// When it was published (the home server's clock).
    pub at: Timestamp,
}

/// Reads directory `dir`'s publications after cursor `after` whose file still has the name
/// it was published under, and whose name matches the glob `pattern` (None: `*`; a leading
/// `.` must be matched by a literal `.`, so temporary names such as `.x.tmp` stay hidden). At
/// most `limit` of them; with none there, waits up to `wait_ms` for one.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Publications {
    pub dir: Ino,
    pub after: u64,
    pub limit: u32,
    pub pattern: Option<String>,
    pub wait_ms: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct PublicationPage {
    pub publications: Vec<Publication>,
    /// The cursor to read on from: past everything this read looked at, matched or not.
    pub next: u64,
    /// The oldest cursor the log still holds (older ones were trimmed): a reader whose
    /// cursor is below it has missed publications.
    pub oldest: u64,
}

/// Hands the next publication of `dir` that consumer group `group` has not had (whose name
/// matches the group's pattern and is still the file's) to `consumer`, until `lease_ms` from
/// now: the same file goes to nobody else of the group meanwhile, and back to the group if
/// the consumer is not [`Done`] in time. The group is made by its first claim, with
/// `pattern` (None: `*`); a later claim naming another pattern is refused. With nothing to
/// hand out, waits up to `wait_ms` (None answered: nothing came).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub dir: Ino,
    pub group: String,
    pub pattern: Option<String>,
    pub consumer: String,
    pub lease_ms: u64,
    pub wait_ms: u32,
}

/// A file handed to a consumer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub cursor: u64,
    pub name: String,
    pub ino: Ino,
    pub size: Option<u64>,
    /// Names this hand-out (see [`Done::token`]).
    pub token: u64,
}

/// The consumer is done with `dir/name`, claimed in `group` (None: the one group holding a
/// claim on it). With `token`, only that hand-out: a consumer whose lease ran out and whose
/// file went to another consumer is told so (NotFound). Answers the group's name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub dir: Ino,
    pub group: Option<String>,
    pub name: String,
    pub token: Option<u64>,
}

/// Every consumer group of `dir`, as [`GroupStatus`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    pub dir: Ino,
}

/// A consumer group: what it was given, what it finished, what waits, and how fast files come
/// and go (over the last minute).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupStatus {
    pub group: String,
    pub pattern: String,
    /// Files of the group's so far: done + claimed + backlog.
    pub produced: u64,
    /// Held by a consumer now.
    pub claimed: u64,
    pub done: u64,
    /// Published and waiting for a consumer.
    pub backlog: u64,
    /// Claims whose lease ran out (their files went back to the group).
    pub expired: u64,
    pub production_per_s: f64,
    pub consumption_per_s: f64,
    /// Consumers holding claims now.
    pub consumers: Vec<String>,
}

impl GroupStatus {
    /// kappa, the production rate over the consumption rate (seed 001's R_sim / R_vis): above
    /// 1 the backlog grows. None while nothing was consumed lately.
    pub fn kappa(&self) -> Option<f64> {
        (self.consumption_per_s > 0.0).then(|| self.production_per_s / self.consumption_per_s)
    }
}

/// Longest a claim's lease may be (a day).
pub const MAX_LEASE_MS: u64 = 24 * 3600 * 1000;

/// What leaves a directory of the burst buffer, and when: the files published in it whose
/// names match `pattern` are removed once they are no longer among the newest `keep_last`
/// (None: however many), once every consumer group that takes them acknowledged them
/// (`after_groups`), and once staged out to the PFS directory `stage_out` when they are to be
/// staged — every `stage_every`th of them (1: all). A file open anywhere (being written, read
/// or staged) is never removed; a file to stage is removed only after its stage-out is done.
/// The instance applies the policy (a keeper beside server 0), not any client.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub pattern: String,
    pub keep_last: Option<u32>,
    pub after_groups: bool,
    pub stage_out: Option<String>,
    pub stage_every: u32,
}

/// Sets (None: drops) directory `dir`'s retention policy; `path` is the directory's path in
/// the instance, which stage-outs name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SetRetention {
    pub dir: Ino,
    pub path: String,
    pub policy: Option<RetentionPolicy>,
}

/// A directory's policy and what it did so far.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RetentionStatus {
    pub policy: RetentionPolicy,
    pub path: String,
    /// Files published under the policy, staged out, removed, and waiting to be staged.
    pub published: u64,
    pub staged: u64,
    pub removed: u64,
    pub to_stage: u64,
}

/// `dir`'s policy and its counts (None: it has none).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GetRetention {
    pub dir: Ino,
}

/// What the policies of the directories homed on this server want done now (the keeper asks).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RetentionDue {}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DueAction {
    pub dir: Ino,
    /// The publication the action is for, its file's name and inode.
    pub cursor: u64,
    pub name: String,
    pub ino: Ino,
    pub action: Due,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Stage instance path `from` out to PFS path `to`, then report it ([`Retained`]).
    StageOut { from: String, to: String },
    /// Remove the file (if `name` still names `ino`), then report it.
    Remove,
}

/// The keeper did `DueAction` `cursor` of `dir` (`staged`: its stage-out; else its removal).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Retained {
    pub dir: Ino,
    pub cursor: u64,
    pub staged: bool,
}

/// Whether writes to file `ino` wait at its servers' high-water marks (asked of its home):
/// they do when its directory is drained — a retention policy or a consumer group lets its
/// files go — or is not known here. Writes to other files (a consumer's own output) are not
/// held: holding them could hold the consumer whose progress frees the room.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct WaitsForRoom {
    pub ino: Ino,
}

service! {
    /// Publish / watch and what builds on it.
    WorkflowRequest => Workflow {
        Publications -> PublicationPage, "publications";
        Claim -> Option<Claimed>, "claim";
        Done -> String, "done";
        QueueStatus -> Vec<GroupStatus>, "queue-status";
        SetRetention -> (), "set-retention";
        GetRetention -> Option<RetentionStatus>, "get-retention";
        RetentionDue -> Vec<DueAction>, "retention-due";
        Retained -> (), "retained";
        WaitsForRoom -> bool, "waits-for-room";
    }
}

/// Back-pressure on a server's share: once the share is filled past `high` (a fraction of its
/// capacity), writes that need more room (to files in drained directories, see
/// [`WaitsForRoom`]) wait instead of failing, until what is used falls
/// back to `low` (retention removing files, consumers deleting what they processed); a write
/// that waited `wait_secs` fails with ENOSPC, and the server logs why.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Watermarks {
    pub high: f64,
    pub low: f64,
    pub wait_secs: f64,
}

impl Watermarks {
    /// The watermarks `--high-water`, `--low-water` and `--pressure-wait` name (the first two
    /// together or neither: None, no back-pressure), checked.
    pub fn given(high: Option<f64>, low: Option<f64>, wait_secs: f64) -> Result<Option<Watermarks>, String> {
        let (Some(high), Some(low)) = (high, low) else { return Ok(None) };
        let marks = Watermarks { high, low, wait_secs };
        marks.check()?;
        Ok(Some(marks))
    }

    /// Checks `0 < low < high <= 1` and a wait of at most a day.
    pub fn check(&self) -> Result<(), String> {
        if !(self.low > 0.0 && self.low < self.high && self.high <= 1.0) {
            return Err(format!("watermarks must be 0 < low ({}) < high ({}) <= 1", self.low, self.high));
        }
        if !(self.wait_secs >= 0.0 && self.wait_secs <= 86_400.0) {
            return Err(format!("a write waits 0 to 86400 s at the high-water mark, not {}", self.wait_secs));
        }
        Ok(())
    }
}
