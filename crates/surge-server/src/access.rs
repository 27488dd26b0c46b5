//! Permission checks a server makes itself, when it checks identities (`--check-identity`):
//! each connection's caller is the uid and gid a MUNGE credential proved at its handshake
//! (see [`surge_proto::identity`]), with that user's groups as this node knows them, and a
//! namespace step is refused as the kernel would refuse the same call on a local file system
//! (mode bits, owner, group, sticky directories, root). A client that skips the kernel's
//! checks (the native library, a modified mount) gets the same answers.
//!
//! These are pure functions of the caller and the attributes, so the rules are unit-tested
//! here; the steps in [`crate::handle`] apply them on the server that homes the inode.

use surge_proto::{Attr, AttrChanges, ErrorCode, FileKind};

use crate::error::{Result, ServerError};

/// Permission bits asked for, as in a mode's `rwx` triplets.
pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

/// What a name to remove or replace names, as its directory's server knows it.
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    /// No such name (a rename or link onto a new name).
    Nothing,
    /// An inode homed on this server.
    Here(&'a Attr),
    /// An inode homed on another server.
    Elsewhere,
}

/// Who a connection's requests come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one included).
    pub groups: Vec<u32>,
}

impl Caller {
    /// The caller a MUNGE credential made for `challenge` proves, with its groups.
    pub async fn prove(credential: String, challenge: &[u8]) -> std::result::Result<Caller, String> {
        let payload = surge_proto::identity::payload_of(challenge);
        let proven = tokio::task::spawn_blocking(move || surge_proto::identity::verify(&credential, &payload))
            .await
            .map_err(|e| format!("credential check: {e}"))??;
        Ok(Caller { uid: proven.uid, gid: proven.gid, groups: groups_of(proven.uid, proven.gid) })
    }

    fn is_root(&self) -> bool {
        self.uid == 0
    }

    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the caller has all of `want` (READ | WRITE | EXEC) on `attr`. Root has all,
    /// except executing a file nobody may execute.
    pub fn may(&self, attr: &Attr, want: u32) -> bool {
        if self.is_root() {
            return want & EXEC == 0 || attr.kind == FileKind::Dir || attr.mode & 0o111 != 0;
        }
        let bits = if attr.uid == self.uid {
            attr.mode >> 6
        } else if self.in_group(attr.gid) {
            attr.mode >> 3
        } else {
            attr.mode
        } & 7;
        bits & want == want
    }

    /// Refused with EACCES unless [`Caller::may`].
    pub fn check(&self, attr: &Attr, want: u32, what: &str) -> Result<()> {
        if self.may(attr, want) {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::AccessDenied, format!("{what}: permission denied to uid {}", self.uid)))
        }
    }

    /// Open: read or write at least (the handle's use is checked as it writes, see the
    /// module's caveats in docs/architecture.md).
    pub fn check_open(&self, attr: &Attr) -> Result<()> {
        if self.may(attr, READ) || self.may(attr, WRITE) {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::AccessDenied, format!("open: permission denied to uid {}", self.uid)))
        }
    }

    /// Publishing what a handle wrote (a close or fsync with a size or time): a writer, or
    /// the owner (who may have created the file read-only and written it through the
    /// descriptor of that create, as `tar` does).
    pub fn check_publish(&self, attr: &Attr) -> Result<()> {
        if attr.uid == self.uid || self.may(attr, WRITE) {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::AccessDenied, format!("write: permission denied to uid {}", self.uid)))
        }
    }

    /// Removing (or replacing) a name from directory `dir`: write and search on the
    /// directory, and in a sticky directory ownership of the directory or the name's inode
    /// (one homed on another server, whose owner is not known here, counts as another's).
    pub fn check_remove(&self, dir: &Attr, target: Named) -> Result<()> {
        self.check(dir, WRITE | EXEC, "remove a name")?;
        let sticky = dir.mode & 0o1000 != 0;
        let owns_target = match target {
            Named::Nothing => true,
            Named::Here(attr) => attr.uid == self.uid,
            Named::Elsewhere => false,
        };
        if sticky && !self.is_root() && dir.uid != self.uid && !owns_target {
            return Err(ServerError::new(ErrorCode::NotPermitted, "the directory is sticky and the name is another user's"));
        }
        Ok(())
    }

    /// A hard link to `attr`'s file, as Linux allows it with `protected_hardlinks` (the
    /// distributions' default): its owner, or a caller who may read and write it, or root.
    pub fn check_link(&self, attr: &Attr) -> Result<()> {
        if self.is_root() || attr.uid == self.uid || self.may(attr, READ | WRITE) {
            Ok(())
        } else {
            Err(ServerError::new(
                ErrorCode::NotPermitted,
                format!("uid {} may not link another user's file it cannot read and write", self.uid),
            ))
        }
    }

    /// A new inode's owner, as the client asks it: the caller, in one of its groups (or the
    /// directory's group, which a set-group-id directory hands down). Root may give any.
    pub fn check_new_owner(&self, uid: u32, gid: u32, parent_gid: Option<u32>) -> Result<()> {
        if self.is_root() || (uid == self.uid && (self.in_group(gid) || Some(gid) == parent_gid)) {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::NotPermitted, format!("uid {} may not create an inode owned by {uid}:{gid}", self.uid)))
        }
    }

    /// A setattr, by the rules of chmod, chown, truncate and utimes: the owner changes mode
    /// and times, root the owner, the owner the group (to one of its own), a writer the size.
    /// Times set by a writer who does not own the file (utimes(NULL), touch) are allowed:
    /// the request does not say whether the times were explicit.
    pub fn check_setattr(&self, attr: &Attr, changes: &AttrChanges) -> Result<()> {
        if self.is_root() {
            return Ok(());
        }
        let owner = attr.uid == self.uid;
        let denied = |what: &str| Err(ServerError::new(ErrorCode::NotPermitted, format!("{what}: not the owner (uid {})", self.uid)));
        if changes.uid.is_some_and(|uid| uid != attr.uid) {
            return denied("chown");
        }
        if let Some(gid) = changes.gid {
            if gid != attr.gid && !(owner && self.in_group(gid)) {
                return denied("chgrp");
            }
        }
        if changes.mode.is_some() && !owner {
            return denied("chmod");
        }
        if changes.size.is_some() {
            self.check(attr, WRITE, "truncate")?;
        }
        if (changes.atime.is_some() || changes.mtime.is_some()) && !owner && !self.may(attr, WRITE) {
            return denied("utimes");
        }
        Ok(())
    }
}

/// The groups `uid` is in on this node (its primary `gid` at least).
fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let mut groups = vec![gid];
    // SAFETY: getpwuid_r writes into the buffers given, of the sizes given; the name it points
    // at lives in `buf`, which outlives its use by getgrouplist.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) != 0 || found.is_null() {
            return groups;
        }
        let mut list = vec![0 as libc::gid_t; 256];
        let mut count = list.len() as libc::c_int;
        if libc::getgrouplist(pwd.pw_name, gid, list.as_mut_ptr(), &mut count) >= 0 {
            list.truncate(count.max(0) as usize);
            groups = list;
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::Timestamp;

    fn attr(kind: FileKind, mode: u32, uid: u32, gid: u32) -> Attr {
        let t = Timestamp::default();
        Attr { ino: 7, kind, mode, uid, gid, size: 0, nlink: 1, atime: t, mtime: t, ctime: t }
    }

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller { uid, gid, groups: groups.to_vec() }
    }

    #[test]
    fn mode_bits_by_owner_group_other() {
        let file = attr(FileKind::File, 0o640, 1001, 100);
        let (owner, member, other) = (caller(1001, 1001, &[]), caller(1002, 1002, &[100]), caller(1003, 1003, &[]));
        assert!(owner.may(&file, READ | WRITE));
        assert!(!owner.may(&file, EXEC));
        assert!(member.may(&file, READ) && !member.may(&file, WRITE));
        assert!(!other.may(&file, READ));
        assert!(other.check_open(&file).is_err() && member.check_open(&file).is_ok());
        // The owner's triplet decides for the owner, even when the others' would allow more.
        assert!(!owner.may(&attr(FileKind::File, 0o077, 1001, 100), READ));
    }

    #[test]
    fn root_may_all_but_execute_a_file_nobody_may() {
        let root = caller(0, 0, &[]);
        assert!(root.may(&attr(FileKind::File, 0o000, 1001, 100), READ | WRITE));
        assert!(!root.may(&attr(FileKind::File, 0o644, 1001, 100), EXEC));
        assert!(root.may(&attr(FileKind::Dir, 0o000, 1001, 100), EXEC));
    }

    #[test]
    fn sticky_directories_keep_others_names() {
        let tmp = attr(FileKind::Dir, 0o1777, 0, 0);
        let mine = attr(FileKind::File, 0o600, 1001, 1001);
        let (me, other) = (caller(1001, 1001, &[]), caller(1002, 1002, &[]));
        assert!(me.check_remove(&tmp, Named::Here(&mine)).is_ok());
        assert_eq!(other.check_remove(&tmp, Named::Here(&mine)).unwrap_err().code, ErrorCode::NotPermitted);
        assert!(other.check_remove(&tmp, Named::Elsewhere).is_err(), "an owner not known here is another's");
        assert!(other.check_remove(&tmp, Named::Nothing).is_ok(), "a new name");
        let shared = attr(FileKind::Dir, 0o777, 0, 0);
        assert!(other.check_remove(&shared, Named::Here(&mine)).is_ok(), "without the sticky bit, write on the directory is enough");
        let closed = attr(FileKind::Dir, 0o755, 1001, 1001);
        assert_eq!(other.check_remove(&closed, Named::Nothing).unwrap_err().code, ErrorCode::AccessDenied);
    }

    #[test]
    fn setattr_follows_chmod_chown_truncate_utimes() {
        let file = attr(FileKind::File, 0o664, 1001, 100);
        let (owner, member, other) = (caller(1001, 1001, &[100, 200]), caller(1002, 1002, &[100]), caller(1003, 1003, &[]));
        let chmod = AttrChanges { mode: Some(0o600), ..Default::default() };
        assert!(owner.check_setattr(&file, &chmod).is_ok());
        assert_eq!(member.check_setattr(&file, &chmod).unwrap_err().code, ErrorCode::NotPermitted);
        let give_away = AttrChanges { uid: Some(1002), ..Default::default() };
        assert!(owner.check_setattr(&file, &give_away).is_err());
        assert!(caller(0, 0, &[]).check_setattr(&file, &give_away).is_ok());
        assert!(owner.check_setattr(&file, &AttrChanges { gid: Some(200), ..Default::default() }).is_ok());
        assert!(owner.check_setattr(&file, &AttrChanges { gid: Some(300), ..Default::default() }).is_err());
        let truncate = AttrChanges { size: Some(0), ..Default::default() };
        assert!(member.check_setattr(&file, &truncate).is_ok());
        assert_eq!(other.check_setattr(&file, &truncate).unwrap_err().code, ErrorCode::AccessDenied);
        let touch = AttrChanges { mtime: Some(Timestamp::default()), ..Default::default() };
        assert!(member.check_setattr(&file, &touch).is_ok());
        assert!(other.check_setattr(&file, &touch).is_err());
    }

    #[test]
    fn new_inodes_belong_to_their_creator() {
        let me = caller(1001, 1001, &[100]);
        assert!(me.check_new_owner(1001, 1001, None).is_ok());
        assert!(me.check_new_owner(1001, 100, None).is_ok());
        assert!(me.check_new_owner(1001, 555, Some(555)).is_ok(), "a set-group-id directory's group");
        assert!(me.check_new_owner(1002, 1001, None).is_err());
        assert!(me.check_new_owner(1001, 555, None).is_err());
        assert!(caller(0, 0, &[]).check_new_owner(1002, 555, None).is_ok());
    }
}
