//! The values requests and replies carry: file attributes, directory entries, what became of
//! an inode that lost a name, server statistics, and the rules both sides apply to them (name
//! checks, how much a write grows a data file, data file names).

use crate::error::{Error, ErrorCode};
use crate::ino::Ino;
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
    /// A named pipe, a socket or a device node: a name and attributes here; what it does
    /// (the pipe, the socket's listener, the device) is each node's own, as on NFS.
    Fifo,
    Socket,
    /// `rdev`: the device number as the kernel encodes it (`makedev`).
    CharDevice {
        rdev: u32,
    },
    BlockDevice {
        rdev: u32,
    },
}

impl FileKind {
    /// A FIFO, socket or device node.
    pub fn is_special(self) -> bool {
        matches!(self, FileKind::Fifo | FileKind::Socket | FileKind::CharDevice { .. } | FileKind::BlockDevice { .. })
    }
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
    /// Space the file takes on the servers, in 512-byte units (`st_blocks`): what their data
    /// files hold of it, holes left out. None where the home does not know it since the
    /// file's content last changed: the data servers are asked then ([`crate::data::Allocated`])
    /// and the home told ([`crate::namespace::NoteAllocation`]), so a file written once is
    /// measured once.
    pub blocks: Option<u64>,
}

impl Attr {
    /// What says whether the file's bytes may have changed ([`ContentVersion`]).
    pub fn content_version(&self) -> ContentVersion {
        ContentVersion { size: self.size, mtime: self.mtime, ctime: self.ctime }
    }

    /// The group a set-group-ID directory gives what is made in it (and a new directory the
    /// bit too, as Linux's inode_init_owner); None for any other inode.
    pub fn set_gid_group(&self) -> Option<u32> {
        (self.kind == FileKind::Dir && self.mode & 0o2000 != 0).then_some(self.gid)
    }
}

/// A file's size, mtime and ctime: every publication of written bytes, truncate or
/// fallocate changes ctime (which no user can set), so a node holding the bytes it read or
/// wrote at one version may keep them while the file still has it (close-to-open).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentVersion {
    pub size: u64,
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
    /// The change is what a write does to the set-id bits (a write, fallocate or a kernel's
    /// request to drop them): cleared unless the requester is privileged.
    pub kill_set_id: bool,
    /// On whose behalf a trusted client (a mount, connected as root) asks: the set-id bits a
    /// chown, truncate, chmod or write clears depend on the requester's privilege and groups.
    /// A server that checks identities takes it only from a root connection.
    pub by: Option<Requester>,
    /// With `size`: the file's content version the client knew when it cut the servers' data
    /// past `size` (a truncate cuts the data first, then sets the size at the home). The home
    /// refuses the change as Stale if the file changed since: a write published in between
    /// may have landed past `size` after the cut, and the client cuts again (see
    /// `Client::setattr`). None: the size is set whatever happened.
    pub cut_at: Option<ContentVersion>,
}

/// Who asked for a change, as a client that serves several users knows it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one may be among them).
    pub groups: Vec<u32>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub ino: Ino,
    pub kind: FileKind,
    /// Present when the entry's inode lives on the same server as the directory (the usual
    /// case for files), so `ls -l` needs no second round trip.
    pub attr: Option<Attr>,
    /// With `attr`: whether the inode has extended attributes (ACLs among them). `ls -l`
    /// asks every file for two it nearly never has.
    pub has_xattrs: bool,
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
    /// How far its data may reach on the servers (its size then, or more: space set aside
    /// past the end, a longer size before a truncation): only servers holding chunks below
    /// it need the purge.
    pub size: u64,
    /// Where servers check identities: with `purge`, the ticket the purge needs; with
    /// `remote`, the one its home wants for `DropLink`.
    pub ticket: Option<crate::ticket::Ticket>,
    /// An unlink's directory's attributes right after it (its new mtime and ctime): a client
    /// that caches them (the mount) keeps them instead of asking again.
    pub dir_attr: Option<Attr>,
}

/// What linking a name did (a rename, or the link step of a cross-server rename).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct LinkOutcome {
    /// The inode the target name used to name, which lost that link.
    pub replaced: Option<Unlinked>,
    /// A moved directory homed on another server whose `..` the client must update with
    /// `SetParent`.
    pub reparent: Option<Ino>,
}

/// Whether an inode that lost a link or an open handle is gone: then its data must be purged
/// on the servers that can hold chunks below `size`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InodeFate {
    pub purge: bool,
    /// With `purge`: how far its data may reach on the servers, as [`Unlinked::size`].
    pub size: u64,
    /// With `purge`, where servers check identities: the ticket the purge needs.
    pub ticket: Option<crate::ticket::Ticket>,
    /// For a `Commit` that published a size or mtime: the file's content version before and
    /// after it (the publisher's pages stay good if nobody else changed the file between).
    pub published: Option<(ContentVersion, ContentVersion)>,
}

/// A link added to an inode (`AddLink`): its attributes now, and where servers check
/// identities the ticket that lets the caller drop that link again (`DropLink`) when its name
/// cannot be made.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LinkAdded {
    pub attr: Attr,
    pub undo: Option<crate::ticket::Ticket>,
}

/// What a new directory inherits from its parent: the parent's default ACL (in its xattr
/// form; None: none), its layout, and its group when it is set-group-ID. A server making a
/// directory whose parent it homes reads them itself; one making a directory for a parent
/// homed elsewhere takes them from the request, as the client supposes them (no default ACL,
/// the instance's default layout, no group), and mkdir's link step (`InsertEntry`) carries the
/// same supposition to the parent's home, which links the name only if it still holds and
/// answers Stale otherwise: the client then reads them, and makes the directory again. (Where
/// the supposition holds, the common case, a mkdir costs no round trip more.)
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct DirInheritance {
    pub default_acl: Option<Vec<u8>>,
    pub layout: crate::placement::DirLayout,
    /// The parent's group if the parent is set-group-ID: the new directory takes that group
    /// and the bit (see [`Attr::set_gid_group`]).
    #[serde(default)]
    pub group: Option<u32>,
}

/// What a lock request asks for: a shared (read) or exclusive (write) lock, or to let go.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    Read,
    Write,
    Unlock,
}

/// A lock in the way of another (fcntl's F_GETLK answer): its kind, its byte range
/// (`end` inclusive; `u64::MAX` reaches past any end of file) and its holder's process id on
/// the holder's node.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockHolder {
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
    pub pid: u32,
}

/// One page of a directory's entries, in name order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct DirPage {
    pub entries: Vec<DirEntry>,
    /// More entries follow the last one.
    pub more: bool,
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
    /// Past its high-water mark and not yet back at the low one: writes needing room here
    /// wait (see [`crate::workflow::Watermarks`]).
    pub holding_writers: bool,
    /// Replication: how this server's share is mirrored on its successor (None: the
    /// instance has one replica).
    pub mirror: Option<MirrorState>,
    /// Shares of lost servers this one has taken over and serves (see [`crate::mirror`]).
    pub standing_in_for: Vec<u32>,
    /// Cut off from most of the instance, it answers nothing but statistics (automatic
    /// failover's fencing, see [`crate::mirror`]).
    pub fenced: bool,
}

/// Where a server's mirror stands (see [`crate::mirror`]).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorState {
    /// The successor is not reached: changes are made here alone.
    Unreached,
    /// The successor is being sent the whole share; changes are made here alone until then.
    Filling,
    /// Every change is on the successor before it is answered.
    InStep,
}

impl MirrorState {
    pub fn describe(self) -> &'static str {
        match self {
            MirrorState::Unreached => "unreached",
            MirrorState::Filling => "filling",
            MirrorState::InStep => "in step",
        }
    }
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
    /// Clients may write the data files too (not where the share is mirrored: what a client
    /// writes itself would not reach the mirror).
    pub writes: bool,
}

/// Bytes a write of `len` at `offset` newly allocates in a data file that ends at `end`: all of
/// it past the end, none below (rewrites of holes below the end are rare: chunks are written
/// whole or appended). What a server counts against its share for a write, and so what a
/// client writing a data file itself must have set aside (`ReserveLocal`).
pub fn write_growth(end: u64, offset: u64, len: u64) -> u64 {
    offset.saturating_add(len).saturating_sub(end.max(offset))
}

/// Name of the file in a server's data directory that holds its chunks of inode `ino`.
pub fn data_file_name(ino: Ino) -> String {
    format!("{ino:016x}")
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
    use super::*;

    #[test]
    fn write_growth_counts_only_bytes_past_the_end() {
        assert_eq!(write_growth(0, 0, 10), 10);
        assert_eq!(write_growth(100, 0, 10), 0, "a rewrite below the end grows nothing");
        assert_eq!(write_growth(100, 95, 10), 5);
        assert_eq!(write_growth(100, 200, 10), 10, "a write past a hole grows by its length (the hole costs nothing)");
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn names_are_checked_as_linux_does() {
        assert!(check_name("plot_0001.h5").is_ok());
        assert_eq!(check_name("a/b").unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(check_name("..").unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(check_name(&"n".repeat(256)).unwrap_err().code, ErrorCode::NameTooLong);
        assert!(check_name(&"n".repeat(255)).is_ok());
    }
}
