//! Staging messages: moving files between the parallel file system (PFS) and an instance.
//!
//! A client submits a [`StageSpec`] to one server (server 0 of a striped instance, the node's
//! own server in private mode), which hands it to the stage *coordinator* hosted beside it
//! ([`StageService`], implemented by the `surge-stage` crate). The coordinator plans the copy
//! and drives it, but moves no file data itself: it sends [`CopyItem`]s to the servers that
//! own the chunks, and each of them copies its chunks directly between the PFS path (mounted
//! on every node) and its node-local store. Progress and per-file state live on the
//! coordinator, which journals them to its node-local directory.

use crate::call::service;
use crate::error::{Error, ErrorCode};
use crate::ino::Ino;
use crate::types::Timestamp;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageDirection {
    /// PFS -> burst buffer.
    In,
    /// Burst buffer -> PFS.
    Out,
}

impl StageDirection {
    pub fn label(self) -> &'static str {
        match self {
            StageDirection::In => "stage-in",
            StageDirection::Out => "stage-out",
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    File,
    Directory,
    /// The source is a text file of `SOURCE DESTINATION` lines (read on the client's side for
    /// stage-out, on the coordinator's for stage-in: it is a PFS file either way).
    List,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageWhen {
    Immediate,
    /// Deferred until the job ends (`StageJobEnd`); a revoke drops it before then.
    JobEnd,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageSpec {
    pub direction: StageDirection,
    pub kind: StageKind,
    pub when: StageWhen,
    /// Path inside the instance (`/a/b`).
    pub bb_path: String,
    /// Absolute path on the PFS.
    pub pfs_path: String,
    /// Compare size and per-chunk checksums of what was written with what was read.
    pub verify: bool,
    /// Owner of what a stage-in creates.
    pub uid: u32,
    pub gid: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StageState {
    /// At job end, unless revoked.
    Deferred,
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl StageState {
    pub fn is_final(self) -> bool {
        matches!(self, StageState::Done | StageState::Failed | StageState::Cancelled)
    }

    pub fn label(self) -> &'static str {
        match self {
            StageState::Deferred => "deferred",
            StageState::Queued => "queued",
            StageState::Running => "running",
            StageState::Done => "done",
            StageState::Failed => "failed",
            StageState::Cancelled => "cancelled",
        }
    }
}

/// One stage as `surge stage status` shows it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StageSummary {
    pub id: u64,
    pub direction: StageDirection,
    pub kind: StageKind,
    pub when: StageWhen,
    pub bb_path: String,
    pub pfs_path: String,
    pub state: StageState,
    pub files_total: u64,
    pub files_done: u64,
    pub files_failed: u64,
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub submitted: Timestamp,
    /// Seconds spent running so far (or in all, once final).
    pub elapsed: f64,
    /// Why it failed (the first file failure, or what stopped it).
    pub error: Option<String>,
    /// The code of a failure before any copy (a missing source: NotFound).
    pub error_code: Option<ErrorCode>,
}

/// One file of a stage.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StageFile {
    pub bb_path: String,
    pub pfs_path: String,
    pub state: StageState,
    pub bytes_total: u64,
    pub bytes_done: u64,
    /// Seconds from the file's start to its end (or to now while it runs).
    pub elapsed: f64,
    pub error: Option<String>,
}

/// Work for one server: copy the chunks it owns of one file, within `[first_chunk, end_chunk)`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CopyItem {
    pub ino: Ino,
    /// The PFS file to read from (stage-in) or write into (stage-out: it exists already,
    /// unless `publish` is set).
    pub pfs_path: String,
    pub file_size: u64,
    pub first_chunk: u64,
    pub end_chunk: u64,
    /// Stage-out of a file this server holds whole: create `pfs_path` itself, write it, then
    /// rename it to this final name (one server, no coordination needed).
    pub publish: Option<String>,
    /// File mode for `publish`.
    pub mode: u32,
}

/// Sent by a coordinator to a server that owns chunks: copy them (one outcome per item).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CopyOrder {
    pub direction: StageDirection,
    pub chunk_size: u64,
    pub verify: bool,
    pub items: Vec<CopyItem>,
    /// Whose files on the PFS these are: the copy reads and writes them as this user (see
    /// [`crate::host::with_fs_ids`]).
    pub uid: u32,
    pub gid: u32,
}

/// Per item: bytes copied, or why it failed (with a message naming the path).
pub type CopyOutcome = Result<u64, Error>;

/// Submits a stage to the coordinator; answers its id (see [`StageService::submit`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageSubmit {
    pub spec: StageSpec,
}

/// Stages whose bb path is `bb_path` (all stages when `None`), oldest first, from the first
/// with an id above `after`: a page of them (as many as fit half a frame).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageList {
    pub bb_path: Option<String>,
    pub after: Option<u64>,
}

/// A page of stages; more follow the last one when `more`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StagePage {
    pub stages: Vec<StageSummary>,
    pub more: bool,
}

/// What a page of stages or of a stage's files may take encoded: half a frame, whatever the
/// lengths of their paths and errors.
pub const PAGE_BYTES: usize = crate::frame::MAX_MESSAGE_LEN / 2;

impl StageSummary {
    /// An upper bound of its encoded size.
    pub fn encoded_bound(&self) -> usize {
        self.bb_path.len() + self.pfs_path.len() + self.error.as_ref().map_or(0, String::len) + 192
    }
}

impl StageFile {
    /// An upper bound of its encoded size.
    pub fn encoded_bound(&self) -> usize {
        self.bb_path.len() + self.pfs_path.len() + self.error.as_ref().map_or(0, String::len) + 64
    }
}

/// Files of stage `id`, at most `limit` of them (and as many as fit half a frame) from
/// position `offset`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageFiles {
    pub id: u64,
    pub offset: u32,
    pub limit: u32,
}

/// A page of a stage's files, and how many it has in all.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StageFilesPage {
    pub files: Vec<StageFile>,
    pub total: u64,
}

/// Stops a stage: nothing more is copied and nothing unfinished is published.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageCancel {
    pub id: u64,
}

/// Drops the deferred (job-end) stages of `bb_path`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageRevoke {
    pub bb_path: String,
}

/// The job is ending: start every deferred stage.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StageJobEnd;

service! {
    /// A staging request: to the stage coordinator beside the server, or, for a
    /// [`CopyOrder`], to a server that holds chunks to copy.
    StagingRequest => Staging {
        StageSubmit -> u64, "stage-submit";
        StageList -> StagePage, "stage-list";
        StageFiles -> StageFilesPage, "stage-files";
        StageCancel -> (), "stage-cancel";
        StageRevoke -> (), "stage-revoke";
        StageJobEnd -> (), "stage-job-end";
        CopyOrder -> Vec<CopyOutcome>, "stage-copy";
    }
}

/// A future that answers a staging request, boxed so that [`StageService`] is object safe.
pub type Answer<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Error>> + Send + 'static>>;

/// The staging service: what a stage coordinator answers. A data server hands the staging
/// requests it receives to the coordinator its daemon attached; the coordinator reaches the
/// instance as any client does.
pub trait StageService: Send + Sync {
    /// Records a stage and returns its id. An immediate stage is planned before the answer
    /// (a missing source fails it at once, with [`StageSummary::error_code`] set), then copied
    /// in the background; a job-end stage waits for [`StageService::job_end`].
    fn submit(&self, spec: StageSpec) -> Answer<u64>;
    /// A page of the stages whose bb path is `bb_path` (all when `None`), oldest first, from
    /// the first with an id above `after` (see [`StageList`]).
    fn list(&self, bb_path: Option<&str>, after: Option<u64>) -> StagePage;
    /// Files of stage `id`, `limit` of them from position `offset`, and how many it has.
    fn files(&self, id: u64, offset: u32, limit: u32) -> Result<(Vec<StageFile>, u64), Error>;
    /// Stops a stage: nothing more is copied and nothing unfinished is published.
    fn cancel(&self, id: u64) -> Result<(), Error>;
    /// Drops the job-end stages of `bb_path` that have not started.
    fn revoke(&self, bb_path: &str) -> Result<(), Error>;
    /// The job is ending: every deferred stage starts now.
    fn job_end(&self);
}
