//! The namespace service: one atomic step on one server, sent to the *home* server of the
//! inode it names (see [`crate::ino`]). Operations that span two servers (mkdir, rmdir of a
//! directory homed elsewhere, rename between directories homed on different servers) are
//! driven by the client as short sequences of these steps.

use serde::{Deserialize, Serialize};

use crate::call::service;
use crate::ino::Ino;
use crate::types::{
    Attr, AttrChanges, ContentVersion, DirEntry, DirInheritance, DirPage, FileKind, InodeFate, LinkAdded, LinkOutcome, LockHolder,
    LockKind, Timestamp, Unlinked,
};
use crate::xattr::XattrSetMode;

/// Looks `name` up in directory `parent`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub parent: Ino,
    pub name: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GetAttr {
    pub ino: Ino,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SetAttr {
    pub ino: Ino,
    pub changes: AttrChanges,
}

/// Creates a regular file whose inode is homed on the same server as `parent`. Not
/// `exclusive` and the name exists as a file: answers the existing file. `open` registers an
/// open handle (ended by `Commit { release: true }`).
///
/// `mode` is what the program asked for and `umask` the caller's: the new inode's mode is
/// `mode & !umask`, unless `parent` has a default ACL, which then decides with `mode` alone
/// (the umask does not apply, as on Linux; the same for `MakeNode` and `MakeDirInode`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Create {
    pub parent: Ino,
    pub name: String,
    pub mode: u32,
    pub umask: u32,
    pub uid: u32,
    pub gid: u32,
    pub exclusive: bool,
    pub open: bool,
    /// The server of the creating node, for a directory of the node-local layout (None: the
    /// creator has no server on its node, the file is striped).
    pub place_on: Option<u32>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Symlink {
    pub parent: Ino,
    pub name: String,
    pub target: String,
    pub uid: u32,
    pub gid: u32,
}

/// Makes a FIFO, socket or device node `parent/name` (mknod), homed with its directory.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MakeNode {
    pub parent: Ino,
    pub name: String,
    pub kind: FileKind,
    pub mode: u32,
    pub umask: u32,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Readlink {
    pub ino: Ino,
}

/// Allocates a directory inode on this server, not yet linked anywhere (mkdir step 1), with
/// `mode` less `umask`, or what the parent's default ACL makes of `mode` (see `Create`).
/// The directory inherits its parent's layout too. Where `parent` is homed here, its server
/// reads both itself; otherwise it takes what the client says (`inherited`), and the link step
/// checks it was so ([`DirInheritance`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MakeDirInode {
    pub parent: Ino,
    pub mode: u32,
    pub umask: u32,
    pub uid: u32,
    pub gid: u32,
    pub inherited: DirInheritance,
}

/// Makes directory `parent/name` in one step, where the new directory is homed with its
/// parent (its home is chosen by (parent, name)): the inode and the name on one server, with
/// `mode` less `umask` or what the parent's default ACL makes of it, and the parent's layout.
/// Elsewhere a mkdir takes two steps, `MakeDirInode` on the new directory's home and then
/// `InsertEntry` on the parent's. Durable once answered, as that link step is. With `ino`, a
/// mkdir made under a delegation of `parent`, written back with the number the holder gave
/// the directory (one the delegation set aside): only in the holder's `WriteBack`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MakeDir {
    pub parent: Ino,
    pub name: String,
    pub mode: u32,
    pub umask: u32,
    pub uid: u32,
    pub gid: u32,
    pub ino: Option<Ino>,
}

/// Removes an inode that never got linked (mkdir step 2 failed), or a retired directory.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DropInode {
    pub ino: Ino,
}

/// Links `ino` under `parent/name` (mkdir step 2, cross-server rename step 2). `replace`: an
/// existing target may be replaced under rename's rules (`retired_target`: the directory
/// there, retired on its own home first; a target that already names `ino` is refused with
/// Exists all the same, as rename(2) onto another link of the same file changes nothing).
/// `new_dir`: the step links a directory made on another server (mkdir), with the default
/// ACL it inherited.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct InsertEntry {
    pub parent: Ino,
    pub name: String,
    pub ino: Ino,
    pub kind: FileKind,
    pub replace: bool,
    pub retired_target: Option<Ino>,
    pub new_dir: Option<DirInheritance>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Unlink {
    pub parent: Ino,
    pub name: String,
}

/// Removes an empty directory homed on this same server, with its entry.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Rmdir {
    pub parent: Ino,
    pub name: String,
}

/// Marks an empty directory dead so nothing can be created in it (rmdir of a directory homed
/// elsewhere, or a rename that replaces one). Fails with NotEmpty.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RetireDir {
    pub ino: Ino,
}

/// Undoes `RetireDir` when the step after it failed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct UnretireDir {
    pub ino: Ino,
}

/// Removes the entry `parent/name` if it still names `ino` (rmdir of a remote directory).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RemoveEntry {
    pub parent: Ino,
    pub name: String,
    pub ino: Ino,
}

/// Drops one link of an inode homed here whose name lived on another server.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DropLink {
    pub ino: Ino,
    /// From the step that removed the name, where servers check identities.
    pub ticket: Option<crate::ticket::Ticket>,
}

/// Hard link step 1: one more link to the non-directory inode `ino`, homed here. Its new name
/// goes in next (`InsertEntry`, on the new parent's home); `DropLink` with the answered ticket
/// undoes this one if that fails. In this order a crash between the steps leaves a link count
/// one too high (fsck lowers it), never a name its count does not know of.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AddLink {
    pub ino: Ino,
}

/// Sets a file's link count to the number of names it has (`surge fsck`, after a rename
/// between servers stopped halfway left it two): refused as stale unless it is `expected` now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SetLinks {
    pub ino: Ino,
    pub expected: u32,
    pub nlink: u32,
}

/// Sets the `..` of a directory homed here after it moved to another parent.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SetParent {
    pub ino: Ino,
    pub parent: Ino,
}

/// Rename when both parents are homed on this server: atomic here.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    pub src_parent: Ino,
    pub src_name: String,
    pub dst_parent: Ino,
    pub dst_name: String,
    pub noreplace: bool,
    pub retired_target: Option<Ino>,
}

/// RENAME_EXCHANGE when both parents are homed on this server: the two names swap the inodes
/// they name, atomically here. Answers the directories homed elsewhere whose `..` must now
/// name another parent: `(directory, new parent)`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub parent_a: Ino,
    pub name_a: String,
    pub parent_b: Ino,
    pub name_b: String,
}

/// Cross-server RENAME_EXCHANGE, after both names were locked (`RenamePrepare`): points the
/// locked `parent/name`, which must still name `expected`, at `ino` of kind `kind`, and
/// unlocks it. Answers `ino` if it is a directory homed elsewhere whose `..` must change.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SwapEntry {
    pub parent: Ino,
    pub name: String,
    pub expected: Ino,
    pub ino: Ino,
    pub kind: FileKind,
}

/// Cross-server rename step 1: lock `parent/name` against other changes and answer it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RenamePrepare {
    pub parent: Ino,
    pub name: String,
}

/// Cross-server rename step 3: remove the locked entry (`commit`) or unlock it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RenameFinish {
    pub parent: Ino,
    pub name: String,
    pub ino: Ino,
    pub commit: bool,
}

/// A page of at most `limit` entries of directory `ino`, in name order, after `after`.
/// `watch_names`: the directory's names are watched for this connection (a change made
/// elsewhere comes as a notice): asked by a client that keeps them (a mount, whose kernel
/// caches the listing), not by one that hands a listing on and forgets it (`readdir(3)` in
/// the interception library), whose registration would only make every later change in the
/// directory wait for its acknowledgement. `watch_attrs`: the attributes the page brings are
/// watched too, as a lookup's are: asked by a mount that hands them to its kernel with the
/// names (READDIRPLUS), not by a walk that only reads them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Readdir {
    pub ino: Ino,
    pub after: Option<String>,
    pub limit: u32,
    pub watch_names: bool,
    pub watch_attrs: bool,
}

/// Looks `parent/name` up and, when it is a regular file homed here (as files are, with their
/// directory), registers an open handle of it in the same step: an open by name in one round
/// trip. Answers the entry; its `attr` is the opened file's attributes only for a regular
/// file (kind `File`, `attr` present); a file homed elsewhere (`attr` absent) is opened there
/// by number, and anything else (a directory, a symbolic link) is not opened.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OpenAt {
    pub parent: Ino,
    pub name: String,
}

/// Registers an open handle of a file homed here and answers its current attributes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Open {
    pub ino: Ino,
    /// Besides the handle, the caller (a watching connection) keeps the file to answer its
    /// later read-only opens itself, until it sends [`ReleaseKept`]: the file (and its data)
    /// stays while kept, and every change to its attributes (a size or time published, a
    /// truncate, a link lost) is noticed to the keeper and acknowledged before it is
    /// answered, so that no open it answers misses a change another node was told is done.
    /// A kept file is not open for what asks whether it is read (retention, publication):
    /// the handles answered from it are registered each, as any.
    pub keep: bool,
}

/// Ends what an `Open { keep: true }` kept (not a handle: those are released by `Commit`).
/// Answers whether the file is now gone and its data to be purged, as `Commit` does.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ReleaseKept {
    pub ino: Ino,
}

/// Sets `len` bytes at the end of regular file `ino` aside for one appending write (the
/// size grows by `len` at once) and answers their offset: how writes to a file opened with
/// O_APPEND on several nodes each land whole, none over another.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub ino: Ino,
    pub len: u64,
}

/// Asks a file's home to issue a ticket for the file's data (see [`crate::ticket`]), with the
/// rights the caller has on it (read, write); AccessDenied if neither. Asked after an open,
/// and before a truncate, by clients of servers that check identities.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct IssueTicket {
    pub ino: Ino,
}

/// Publishes what a writer did (size grows to at least `size`, mtime) and, with `release`,
/// ends an open handle. Close-to-open consistency hangs on this step. `wrote`: the handle
/// released wrote to the file: its close publishes the file in its directory's log (see
/// [`crate::workflow`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub ino: Ino,
    pub size: Option<u64>,
    pub mtime: Option<Timestamp>,
    pub release: bool,
    pub wrote: bool,
}

/// Tells a file's home what a client measured of its allocation ([`crate::data::Allocated`]):
/// kept where the file's content is still at `version` (a write published since makes the
/// figure old). `blocks: None` says the allocation changed without the size or times changing
/// (fallocate keeping the size, a punched hole): the home forgets what it knew. A cache of
/// what the servers' data files say, not journaled. `set_aside_to`: space was set aside up
/// to this offset, which may lie past the size (fallocate keeping the size): the home
/// remembers it so that the file's removal frees that space too.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct NoteAllocation {
    pub notes: Vec<AllocationNote>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AllocationNote {
    pub ino: Ino,
    pub version: ContentVersion,
    pub blocks: Option<u64>,
    pub set_aside_to: Option<u64>,
}

/// Takes, changes or gives back a byte-range lock on file `ino` (homed here) for `owner`, an
/// owner of this connection's (a process for fcntl's POSIX locks, an open file for flock and
/// OFD locks: the mount passes on the kernel's lock owner). Bytes `start..=end` (`end ==
/// u64::MAX`: to any end of file). Locks of different owners exclude each other where they
/// overlap and one is a write lock; an owner's own locks merge and split as POSIX says.
/// Without `wait`, a lock in the way fails with `Locked`; with it the answer comes once the
/// lock is taken, or `Interrupted` if the owner let go of the whole file meanwhile (its
/// process died). Every lock of a connection goes with it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SetLock {
    pub ino: Ino,
    pub owner: u64,
    pub pid: u32,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
    pub wait: bool,
}

/// The first lock of another owner in the way of the lock described (F_GETLK), if any.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GetLock {
    pub ino: Ino,
    pub owner: u64,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
}

/// The value of extended attribute `name` of `ino` (ENODATA if it has none; an ACL in its
/// xattr form, see [`crate::acl`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GetXattr {
    pub ino: Ino,
    pub name: String,
}

/// Sets extended attribute `name` of `ino` to `value`, as `mode` allows (an ACL's set ignores
/// it, as Linux's does). Answers the inode's attributes after it: its ctime, and for an access
/// ACL the mode the ACL makes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SetXattr {
    pub ino: Ino,
    pub name: String,
    pub value: Vec<u8>,
    pub mode: XattrSetMode,
    /// On whose behalf a trusted client asks (as [`crate::AttrChanges::by`]): an access ACL
    /// set by someone neither privileged nor in the file's group clears set-group-ID.
    #[serde(default)]
    pub by: Option<crate::Requester>,
}

/// The names of `ino`'s extended attributes (the caller may not be shown all, see the server's
/// `access`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ListXattr {
    pub ino: Ino,
}

/// Removes extended attribute `name` of `ino` (ENODATA if it has none; removing an ACL that
/// is not there does nothing, as on Linux). Answers the inode's attributes after it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RemoveXattr {
    pub ino: Ino,
    pub name: String,
}

/// A directory's layout for the files made in it from now on (`set`; None: only asks). Set
/// by the directory's owner or root; files already there keep theirs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LayoutOf {
    pub dir: Ino,
    pub set: Option<crate::placement::DirLayout>,
}

/// Asks for directory `dir`'s delegation (docs/delegation.md): the caller alone may then
/// create, unlink and rename files in it, answering its own callers at once and telling
/// this server afterwards, in order (`CreateAs` for a create, the usual steps for the rest).
/// Granted only to a watching connection, for a directory that is the caller's own and that
/// no other client holds names of; with the grant come `count` (at most
/// [`MAX_DELEGATED_INOS`]) inode numbers for the files it makes, placed on `place_on` in a
/// node-local directory as [`Create`]'s are. Any other client's step naming the directory,
/// a name in it or a file made under the delegation is answered `Recalling` while the
/// holder is sent [`crate::admin::Notice::Recall`]; the holder's `GiveBack` ends it. A holder
/// whose connection ended (or whose home restarted) may [`Reclaim`] it within a few seconds
/// to write back what it had not, and give it back; after that it ends.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Delegate {
    pub dir: Ino,
    pub count: u32,
    pub place_on: Option<u32>,
}

/// The most inode numbers one `Delegate` sets aside.
pub const MAX_DELEGATED_INOS: u32 = 4096;

/// A delegation granted: the inode numbers set aside for the holder's creates (never handed
/// out again, even after a restart), and the delegation's name, `token` (unique for ever: the
/// first of those numbers), which its write-backs, reclaim and give-back quote.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Delegated {
    pub inos: Vec<Ino>,
    pub token: Ino,
    /// The directory's group if it is set-group-ID: what the holder makes in it takes that
    /// group (and a directory the bit), as the home gives it when the log is written back.
    #[serde(default)]
    pub group: Option<u32>,
}

/// A create made under a delegation, written back: like [`Create`] (exclusive), with the
/// inode number the holder gave the file, one of those its delegation set aside.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CreateAs {
    pub parent: Ino,
    pub name: String,
    pub ino: Ino,
    pub mode: u32,
    pub umask: u32,
    pub uid: u32,
    pub gid: u32,
    pub open: bool,
}

/// The holder gives directory `dir`'s delegation `token` up (after writing its steps back);
/// the inode numbers it did not use are not handed out again.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GiveBack {
    pub dir: Ino,
    pub token: Ino,
}

/// A holder that lost its connection to the home (the home restarted, or the connection
/// broke) takes delegation `token` of `dir` up again to write back the rest of its log and
/// give it back; answered with the number of the last step of the log the home applied
/// (0: none). Refused once the delegation ended: a few seconds after its holder's connection
/// did, or after the restart, unless reclaimed meanwhile.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Reclaim {
    pub dir: Ino,
    pub token: Ino,
}

/// The holder of delegation `token` of `dir` asks for `count` (at most
/// [`MAX_DELEGATED_INOS`]) more inode numbers for its creates, placed as [`Delegate`]'s, without
/// giving the directory back: a burst of creates longer than one grant's numbers stays local,
/// and so does what the holder knows of the directories it made there. Answered with the
/// numbers once they are durable; refused once the delegation was recalled (the holder is to
/// give it back) or ended.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Renew {
    pub dir: Ino,
    pub token: Ino,
    pub count: u32,
    pub place_on: Option<u32>,
}

service! {
    /// A namespace step.
    NamespaceRequest => Namespace {
        Lookup -> DirEntry, "lookup";
        GetAttr -> Attr, "getattr";
        SetAttr -> Attr, "setattr";
        Create -> DirEntry, "create";
        Symlink -> Attr, "symlink";
        Readlink -> String, "readlink";
        MakeDirInode -> Attr, "mkdir-inode";
        DropInode -> (), "drop-inode";
        InsertEntry -> LinkOutcome, "insert-entry";
        Unlink -> Unlinked, "unlink";
        Rmdir -> (), "rmdir";
        RetireDir -> (), "retire-dir";
        UnretireDir -> (), "unretire-dir";
        RemoveEntry -> (), "remove-entry";
        DropLink -> InodeFate, "drop-link";
        AddLink -> LinkAdded, "add-link";
        SetParent -> (), "set-parent";
        SetLinks -> Attr, "set-links";

        Rename -> LinkOutcome, "rename";
        RenamePrepare -> DirEntry, "rename-prepare";
        RenameFinish -> (), "rename-finish";
        Readdir -> DirPage, "readdir";
        Open -> Attr, "open";
        Commit -> InodeFate, "commit";
        IssueTicket -> crate::ticket::Ticket, "grant";
        Append -> u64, "append";
        Exchange -> Vec<(Ino, Ino)>, "exchange";
        SwapEntry -> Option<Ino>, "swap-entry";
        MakeNode -> Attr, "make-node";
        SetLock -> (), "set-lock";
        GetLock -> Option<LockHolder>, "get-lock";
        GetXattr -> Vec<u8>, "get-xattr";
        SetXattr -> Attr, "set-xattr";
        ListXattr -> Vec<String>, "list-xattr";
        RemoveXattr -> Attr, "remove-xattr";
        LayoutOf -> crate::placement::DirLayout, "layout";
        NoteAllocation -> (), "note-allocation";
        Delegate -> Delegated, "delegate";
        CreateAs -> DirEntry, "create-as";
        GiveBack -> (), "give-back";
        MakeDir -> Attr, "mkdir";
        Reclaim -> u64, "reclaim";
        Renew -> Vec<Ino>, "renew";
        ReleaseKept -> InodeFate, "release-kept";
        OpenAt -> DirEntry, "open-at";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Call, Request};

    /// Renaming a call's type changes nothing on the wire: a request is encoded by the
    /// positions of its service and call in their lists, and logged by the call's name.
    #[test]
    fn a_ticket_request_keeps_its_place_and_name() {
        let encoded = postcard::to_allocvec(&Request::from(IssueTicket { ino: 5 })).unwrap();
        assert_eq!(encoded, [0, 24, 5], "service 0 (namespace), call 24, then the inode");
        assert_eq!(IssueTicket::NAME, "grant");
    }
}
