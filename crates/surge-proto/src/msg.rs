//! Request and reply messages.
//!
//! Metadata requests go to the *home* server of the inode they name (see [`crate::ino`]);
//! data requests go to the server that owns the chunk (see the client's layout). Operations
//! that span two servers (mkdir, rmdir of a directory homed elsewhere, rename between
//! directories homed on different servers) are driven by the client as short sequences of the
//! single-server steps below; each step is atomic on its server.

use crate::error::{Error, ErrorCode};
use crate::ino::Ino;
use crate::stage::{CopyOrder, CopyOutcome, StageFile, StageSpec, StageSummary};
use serde::{Deserialize, Serialize};

/// Longest file name component, as on Linux (NAME_MAX).
pub const MAX_NAME_LEN: usize = 255;
/// Longest symlink target (PATH_MAX).
pub const MAX_SYMLINK_LEN: usize = 4096;

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
}

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    pub fn now() -> Self {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub kind: FileKind,
    /// Permission bits only (0o7777); the type is in `kind`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

/// Attribute changes of a setattr; `None` leaves a field alone.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct AttrChanges {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub ino: Ino,
    pub kind: FileKind,
    /// Present when the entry's inode lives on the same server as the directory (the usual
    /// case for files), so `ls -l` needs no second round trip.
    pub attr: Option<Attr>,
}

/// What happened to an inode that lost a name (unlink, or replaced by a rename).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Unlinked {
    pub ino: Ino,
    pub kind: FileKind,
    /// The inode lives on another server: the client must send it `DropLink`.
    pub remote: bool,
    /// The inode is gone and nobody has it open: its data must be purged on every server.
    pub purge: bool,
    /// Its size then: only servers holding chunks below it need the purge.
    pub size: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerStats {
    pub server_index: u32,
    pub capacity: u64,
    pub used: u64,
    pub inodes: u64,
    pub files: u64,
    pub dirs: u64,
    /// File data sent to clients in answer to reads, and received from them in writes, since
    /// the server started (reads a client on this node made from the data directory itself
    /// are not among them).
    pub read_bytes: u64,
    pub written_bytes: u64,
}

/// A server's data directory, told to every client so that one on the same node can read chunk
/// files itself (a *local read*: no request, no copy through a socket). The directory is
/// identified by more than its path: a client uses it only if, on its side, `dir` is the
/// directory with this device and inode number under a kernel with this boot id, i.e. the very
/// same directory and not a namesake on another node.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LocalData {
    pub dir: String,
    pub boot_id: String,
    pub dev: u64,
    pub ino: u64,
}

/// Bytes a write of `len` at `offset` newly allocates in a data file that ends at `end`: all of
/// it past the end, none below (rewrites of holes below the end are rare: chunks are written
/// whole or appended). What a server counts against its share for a write, and so what a
/// client writing a data file itself must have set aside (`ReserveLocal`).
pub fn write_growth(end: u64, offset: u64, len: u64) -> u64 {
    (offset + len).saturating_sub(end.max(offset))
}

/// Name of the file in a server's data directory that holds its chunks of inode `ino`.
pub fn data_file_name(ino: Ino) -> String {
    format!("{ino:016x}")
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// First frame of every connection: answer to the server's challenge.
    Hello {
        session: u64,
        proof: [u8; 32],
    },

    // ---- namespace, sent to the home server of `parent` / `ino` ----
    Lookup {
        parent: Ino,
        name: String,
    },
    GetAttr {
        ino: Ino,
    },
    SetAttr {
        ino: Ino,
        changes: AttrChanges,
    },
    /// Creates a regular file whose inode is homed on the same server as `parent`.
    /// Not exclusive and the name exists as a file: returns the existing file.
    /// `open` registers an open handle (see `Commit`).
    Create {
        parent: Ino,
        name: String,
        mode: u32,
        uid: u32,
        gid: u32,
        exclusive: bool,
        open: bool,
    },
    Symlink {
        parent: Ino,
        name: String,
        target: String,
        uid: u32,
        gid: u32,
    },
    Readlink {
        ino: Ino,
    },
    /// Allocates a directory inode on this server, not yet linked anywhere (mkdir step 1).
    MakeDirInode {
        parent: Ino,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// Removes an inode that never got linked (mkdir step 2 failed).
    DropInode {
        ino: Ino,
    },
    /// Links `ino` under `parent/name` (mkdir step 2, cross-server rename step 2).
    /// `replace`: an existing target may be replaced under rename's rules.
    InsertEntry {
        parent: Ino,
        name: String,
        ino: Ino,
        kind: FileKind,
        replace: bool,
        retired_target: Option<Ino>,
    },
    Unlink {
        parent: Ino,
        name: String,
    },
    /// Removes an empty directory homed on this same server, with its entry.
    Rmdir {
        parent: Ino,
        name: String,
    },
    /// Marks an empty directory dead so nothing can be created in it (rmdir of a directory
    /// homed elsewhere, or a rename that replaces one). Fails with NotEmpty.
    RetireDir {
        ino: Ino,
    },
    /// Undoes `RetireDir` when the step after it failed.
    UnretireDir {
        ino: Ino,
    },
    /// Removes the entry `parent/name` if it still names `ino` (rmdir of a remote directory).
    RemoveEntry {
        parent: Ino,
        name: String,
        ino: Ino,
    },
    /// Drops one link of an inode homed here whose name lived on another server.
    DropLink {
        ino: Ino,
    },
    /// Sets the `..` of a directory homed here after it moved to another parent.
    SetParent {
        ino: Ino,
        parent: Ino,
    },
    /// Rename when both parents are homed on this server: atomic here.
    Rename {
        src_parent: Ino,
        src_name: String,
        dst_parent: Ino,
        dst_name: String,
        noreplace: bool,
        retired_target: Option<Ino>,
    },
    /// Cross-server rename step 1: lock `parent/name` against other changes and return it.
    RenamePrepare {
        parent: Ino,
        name: String,
    },
    /// Cross-server rename step 3: remove the locked entry (`commit`) or unlock it.
    RenameFinish {
        parent: Ino,
        name: String,
        ino: Ino,
        commit: bool,
    },
    Readdir {
        ino: Ino,
        after: Option<String>,
        limit: u32,
    },
    /// Registers an open handle of a file homed here and returns its current attributes.
    Open {
        ino: Ino,
    },
    /// Publishes what a writer did (size grows to at least `size`, mtime) and, with `release`,
    /// ends an open handle. Close-to-open consistency hangs on this message.
    Commit {
        ino: Ino,
        size: Option<u64>,
        mtime: Option<Timestamp>,
        release: bool,
    },

    // ---- data, sent to the server owning the chunk ----
    /// Payload = the bytes to write at `offset` of the file.
    Write {
        ino: Ino,
        offset: u64,
    },
    Read {
        ino: Ino,
        offset: u64,
        len: u32,
    },
    /// Drops this server's data of `ino` beyond `size`.
    TruncateData {
        ino: Ino,
        size: u64,
    },
    /// Deletes this server's data of `ino`.
    PurgeData {
        ino: Ino,
    },
    /// Makes this server's data of `ino` durable on its device.
    SyncData {
        ino: Ino,
    },
    /// From a client on this server's node that will write `ino`'s data file itself (a local
    /// write, see [`LocalData`]): sets `bytes` of the server's share aside for it (NoSpace if
    /// they do not fit), and makes sure the file exists. Given back by `LocalWritten`, or when
    /// the connection closes.
    ReserveLocal {
        ino: Ino,
        bytes: u64,
    },
    /// The client stopped writing `ino`'s data file itself for now (a flush or close): the
    /// server takes the file's new length and allocation into account and gives back
    /// `reserved` bytes set aside by `ReserveLocal`.
    LocalWritten {
        ino: Ino,
        reserved: u64,
    },

    // ---- staging (see [`crate::stage`]), sent to the stage's coordinator ----
    StageSubmit {
        spec: StageSpec,
    },
    /// Stages whose bb path is `bb_path` (all stages when `None`), oldest first.
    StageList {
        bb_path: Option<String>,
    },
    /// Files of stage `id`, `limit` of them from position `offset`.
    StageFiles {
        id: u64,
        offset: u32,
        limit: u32,
    },
    /// Stops a stage: nothing more is copied and nothing unfinished is published.
    StageCancel {
        id: u64,
    },
    /// Drops the deferred (job-end) stages of `bb_path`.
    StageRevoke {
        bb_path: String,
    },
    /// The job is ending: start every deferred stage.
    StageJobEnd,
    /// Sent by a coordinator to a server that owns chunks: copy them.
    StageCopy(CopyOrder),

    // ---- administration ----
    StatFs,
    Shutdown,
    /// Several requests for this server, answered in order by one `Reply::Batch`; each
    /// succeeds or fails on its own. Requests that carry a payload cannot be batched.
    Batch(Vec<Request>),
    /// From now on, tell this connection (with [`Notice`] frames) when something it was told
    /// about changes through another connection: what a client that caches metadata (the
    /// FUSE mount) needs to drop stale entries at once instead of after a timeout.
    Watch,
    /// A watcher has acted on the notice whose frame carried request id `ack`. One-way: the
    /// server sends no reply.
    NoticeSeen {
        ack: u64,
    },
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

impl Request {
    /// Short name for logs and error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Lookup { .. } => "lookup",
            Request::GetAttr { .. } => "getattr",
            Request::SetAttr { .. } => "setattr",
            Request::Create { .. } => "create",
            Request::Symlink { .. } => "symlink",
            Request::Readlink { .. } => "readlink",
            Request::MakeDirInode { .. } => "mkdir-inode",
            Request::DropInode { .. } => "drop-inode",
            Request::InsertEntry { .. } => "insert-entry",
            Request::Unlink { .. } => "unlink",
            Request::Rmdir { .. } => "rmdir",
            Request::RetireDir { .. } => "retire-dir",
            Request::UnretireDir { .. } => "unretire-dir",
            Request::RemoveEntry { .. } => "remove-entry",
            Request::DropLink { .. } => "drop-link",
            Request::SetParent { .. } => "set-parent",
            Request::Rename { .. } => "rename",
            Request::RenamePrepare { .. } => "rename-prepare",
            Request::RenameFinish { .. } => "rename-finish",
            Request::Readdir { .. } => "readdir",
            Request::Open { .. } => "open",
            Request::Commit { .. } => "commit",
            Request::Write { .. } => "write",
            Request::Read { .. } => "read",
            Request::TruncateData { .. } => "truncate-data",
            Request::PurgeData { .. } => "purge-data",
            Request::SyncData { .. } => "sync-data",
            Request::ReserveLocal { .. } => "reserve-local",
            Request::LocalWritten { .. } => "local-written",
            Request::StageSubmit { .. } => "stage-submit",
            Request::StageList { .. } => "stage-list",
            Request::StageFiles { .. } => "stage-files",
            Request::StageCancel { .. } => "stage-cancel",
            Request::StageRevoke { .. } => "stage-revoke",
            Request::StageJobEnd => "stage-job-end",
            Request::StageCopy(_) => "stage-copy",
            Request::StatFs => "statfs",
            Request::Shutdown => "shutdown",
            Request::Batch(_) => "batch",
            Request::Watch => "watch",
            Request::NoticeSeen { .. } => "notice-seen",
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Reply {
    /// First frame the server sends on a connection (request id 0).
    Challenge {
        challenge: [u8; 32],
        server_index: u32,
        server_count: u32,
    },
    /// Authentication passed. `local`: where this server keeps its file data, for clients on
    /// the same node to read it without a round trip (see [`LocalData`]).
    Welcome {
        local: Option<LocalData>,
    },
    Ok,
    Attr(Attr),
    Entry(DirEntry),
    Entries {
        entries: Vec<DirEntry>,
        more: bool,
    },
    Link(String),
    Unlinked(Unlinked),
    /// `replaced`: the inode the rename's target used to name; `reparent`: a moved directory
    /// homed on another server whose `..` the client must update with `SetParent`.
    Renamed {
        replaced: Option<Unlinked>,
        reparent: Option<Ino>,
    },
    /// A `DropLink` answer: the inode is gone and its data must be purged everywhere.
    Dropped {
        purge: bool,
        size: u64,
    },
    Written {
        len: u32,
    },
    /// Payload = the bytes read (shorter than asked at this server's end of data).
    Data,
    Stats(ServerStats),
    Error {
        code: ErrorCode,
        detail: String,
    },
    StageId {
        id: u64,
    },
    Stages(Vec<StageSummary>),
    StageFiles {
        files: Vec<StageFile>,
        total: u64,
    },
    Copied(Vec<CopyOutcome>),
    Batch(Vec<Reply>),
}

/// Checks a single path component the way Linux does.
pub fn check_name(name: &str) -> Result<(), Error> {
    let code = if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        ErrorCode::Invalid
    } else if name.len() > MAX_NAME_LEN {
        ErrorCode::NameTooLong
    } else {
        return Ok(());
    };
    Err(Error::new(code, format!("bad name '{name}'")))
}

#[cfg(test)]
mod tests {
    use super::write_growth;

    #[test]
    fn write_growth_counts_only_bytes_past_the_end() {
        assert_eq!(write_growth(0, 0, 10), 10);
        assert_eq!(write_growth(100, 0, 10), 0, "a rewrite below the end grows nothing");
        assert_eq!(write_growth(100, 95, 10), 5);
        assert_eq!(write_growth(100, 200, 10), 10, "a write past a hole grows by its length (the hole costs nothing)");
    }
}
