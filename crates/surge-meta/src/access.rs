//! Permission checks a server makes itself, when it checks identities (`--check-identity`):
//! a namespace step is refused as the kernel would refuse the same call on a local file
//! system (mode bits, owner, group, sticky directories, root). A client that skips the
//! kernel's checks (the native library, a modified mount) gets the same answers. The
//! [`Caller`] is who a connection proved to be at its handshake, with that user's groups as
//! the server's node knows them (how it is proven is the server's business).
//!
//! Where an inode has an access ACL, it decides instead of the group and other bits, by the
//! POSIX algorithm (the owner's entry for the owner, a named user's entry within the mask, any
//! matching group entry within the mask, else the other entry); the ACLs' bearing on the mode
//! (setting one, chmod, inheritance by what is created) is here too, as Linux's
//! fs/posix_acl.c has it.
//!
//! These are pure functions of the caller and the attributes, so the rules are unit-tested
//! here; the server's request handlers apply them on the server that homes the inode.

use surge_proto::acl::{Acl, Tag};
use surge_proto::{Attr, AttrChanges, ErrorCode, FileKind, Requester, XattrNamespace};

use crate::error::{Result, ServerError};

const SET_UID: u32 = 0o4000;
const SET_GID: u32 = 0o2000;
const GROUP_EXEC: u32 = 0o010;

/// Permission bits asked for, as in a mode's `rwx` triplets.
pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

/// An inode as permission checks see it: its attributes, and its access ACL if it has one.
#[derive(Debug, Clone, Copy)]
pub struct Perms<'a> {
    pub attr: &'a Attr,
    pub acl: Option<&'a Acl>,
}

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
    /// Whom the set-id rules of a setattr treat as its author: the connection's proven
    /// caller; or the requester the change names, when the connection is root's (a mount
    /// serving many users) or unproven (a server that does not check identities, whose
    /// clients are trusted); else root.
    pub fn acting_for(connection: Option<&Caller>, by: Option<&Requester>) -> Caller {
        match (connection, by) {
            (Some(caller), _) if !caller.is_root() => caller.clone(),
            (_, Some(by)) => Caller { uid: by.uid, gid: by.gid, groups: by.groups.clone() },
            (Some(caller), None) => caller.clone(),
            (None, None) => Caller { uid: 0, gid: 0, groups: Vec::new() },
        }
    }

    fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the set-group-id bit of a file of group `gid` goes when its owner or group
    /// changes, or when someone without privilege writes it, as Linux's
    /// setattr_should_drop_sgid has it: with group execute it marks a set-group-id program
    /// and always goes; without, it only marks mandatory locking, and goes unless the caller
    /// is privileged or in the group.
    fn drops_setgid(&self, mode: u32, gid: u32) -> bool {
        mode & SET_GID != 0 && (mode & GROUP_EXEC != 0 || !(self.is_root() || self.in_group(gid)))
    }

    /// The mode `attr` has after `changes` by this caller: the set-id bits Linux clears go.
    /// A chmod by someone neither privileged nor in the (new) group loses set-group-id; a
    /// chown or chgrp of anything but a directory loses set-user-id, also root's, and
    /// set-group-id as [`Caller::drops_setgid`] says; a truncate or a write of a regular file
    /// by someone without privilege loses both the same way (the kernel's
    /// should_remove_suid).
    pub fn mode_after(&self, attr: &Attr, changes: &AttrChanges) -> u32 {
        let mut mode = changes.mode.map_or(attr.mode, |mode| mode & 0o7777);
        if changes.mode.is_some() && !self.is_root() && !self.in_group(changes.gid.unwrap_or(attr.gid)) {
            mode &= !SET_GID;
        }
        let chown = changes.uid.is_some() || changes.gid.is_some();
        let written = changes.size.is_some() || changes.kill_set_id;
        let kills = (chown && attr.kind != FileKind::Dir) || (written && attr.kind == FileKind::File && !self.is_root());
        if kills {
            if self.drops_setgid(mode, attr.gid) {
                mode &= !SET_GID;
            }
            mode &= !SET_UID;
        }
        mode
    }

    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the caller has all of `want` (READ | WRITE | EXEC) on `inode`. Root has all,
    /// except executing a file nobody may execute.
    pub fn may(&self, inode: Perms, want: u32) -> bool {
        let attr = inode.attr;
        if self.is_root() {
            return want & EXEC == 0 || attr.kind == FileKind::Dir || attr.mode & 0o111 != 0;
        }
        if attr.uid == self.uid {
            // The owner's entry of an ACL is the mode's owner bits.
            return (attr.mode >> 6) & want == want;
        }
        match inode.acl {
            Some(acl) => self.acl_grants(acl, attr.gid, want),
            None => (if self.in_group(attr.gid) { attr.mode >> 3 } else { attr.mode }) & want == want,
        }
    }

    /// POSIX's algorithm for a caller other than the owner: a named user's entry, within the
    /// mask; else, if the caller is in the owning group or a named one, whether any of those
    /// entries grants all of `want` (within the mask); else the other entry.
    fn acl_grants(&self, acl: &Acl, owning_gid: u32, want: u32) -> bool {
        let mask = acl.perm(Tag::Mask).unwrap_or(7);
        if let Some(perm) = acl.perm(Tag::User(self.uid)) {
            return perm & mask & want == want;
        }
        let mut in_a_group = false;
        for entry in acl.entries() {
            let member = match entry.tag {
                Tag::GroupObj => self.in_group(owning_gid),
                Tag::Group(gid) => self.in_group(gid),
                _ => false,
            };
            if member {
                in_a_group = true;
                if entry.perm & want == want {
                    return entry.perm & mask & want == want;
                }
            }
        }
        !in_a_group && acl.perm(Tag::Other).unwrap_or(0) & want == want
    }

    /// Refused with EACCES unless [`Caller::may`].
    pub fn check(&self, inode: Perms, want: u32, what: &str) -> Result<()> {
        if self.may(inode, want) {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::AccessDenied, format!("{what}: permission denied to uid {}", self.uid)))
        }
    }

    /// Open: read or write at least (the handle's use is checked as it writes, see the
    /// module's caveats in docs/architecture.md).
    pub fn check_open(&self, inode: Perms) -> Result<()> {
        if self.may(inode, READ) || self.may(inode, WRITE) {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::AccessDenied, format!("open: permission denied to uid {}", self.uid)))
        }
    }

    /// Publishing what a handle wrote (a close or fsync with a size or time): a writer, or
    /// the owner (who may have created the file read-only and written it through the
    /// descriptor of that create, as `tar` does).
    pub fn check_publish(&self, inode: Perms) -> Result<()> {
        if inode.attr.uid == self.uid || self.may(inode, WRITE) {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::AccessDenied, format!("write: permission denied to uid {}", self.uid)))
        }
    }

    /// Removing (or replacing) a name from directory `dir`: write and search on the
    /// directory, and in a sticky directory ownership of the directory or the name's inode
    /// (one homed on another server, whose owner is not known here, counts as another's).
    pub fn check_remove(&self, dir: Perms, target: Named) -> Result<()> {
        self.check(dir, WRITE | EXEC, "remove a name")?;
        let dir = dir.attr;
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
    pub fn check_link(&self, inode: Perms) -> Result<()> {
        if self.is_root() || inode.attr.uid == self.uid || self.may(inode, READ | WRITE) {
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
    pub fn check_setattr(&self, inode: Perms, changes: &AttrChanges) -> Result<()> {
        if self.is_root() {
            return Ok(());
        }
        let attr = inode.attr;
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
            self.check(inode, WRITE, "truncate")?;
        }
        if (changes.atime.is_some() || changes.mtime.is_some()) && !owner && !self.may(inode, WRITE) {
            return denied("utimes");
        }
        Ok(())
    }

    /// Steps only the owner (or root) may take: setting an ACL, as chmod (EPERM).
    pub fn check_owner(&self, attr: &Attr, what: &str) -> Result<()> {
        if self.is_root() || attr.uid == self.uid {
            Ok(())
        } else {
            Err(ServerError::new(ErrorCode::NotPermitted, format!("{what}: not the owner (uid {})", self.uid)))
        }
    }

    /// Whether a change of the mode by this caller keeps the set-group-id bit of an inode of
    /// group `gid`: root's, or a member's of the group (otherwise Linux clears it when an ACL
    /// sets the mode, as chmod does).
    pub fn keeps_setgid(&self, gid: u32) -> bool {
        self.is_root() || self.in_group(gid)
    }

    /// Reading an extended attribute of `namespace` (getxattr), as Linux's xattr_permission
    /// has it: `user.*` needs read permission; `trusted.*` is root's (to others there is none:
    /// ENODATA); `security.*` and the ACLs are anyone's to read.
    pub fn check_xattr_read(&self, inode: Perms, namespace: XattrNamespace) -> Result<()> {
        match namespace {
            XattrNamespace::User => self.check(inode, READ, "read an attribute"),
            XattrNamespace::Trusted if !self.is_root() => Err(ServerError::new(ErrorCode::NoData, "trusted attributes are root's")),
            _ => Ok(()),
        }
    }

    /// Setting or removing an extended attribute of `namespace` (setxattr, removexattr), but
    /// for the ACLs (their owner's, [`Caller::check_owner`]): `user.*` only on regular files
    /// and directories, with write permission, and on a sticky directory only by its owner;
    /// `trusted.*` and `security.*` by root (EPERM).
    pub fn check_xattr_write(&self, inode: Perms, namespace: XattrNamespace) -> Result<()> {
        let attr = inode.attr;
        let refused = |why: &str| Err(ServerError::new(ErrorCode::NotPermitted, format!("uid {}: {why}", self.uid)));
        match namespace {
            XattrNamespace::User if !namespace.allowed_on(attr.kind) => refused("user attributes are for regular files and directories"),
            XattrNamespace::User if attr.kind == FileKind::Dir && attr.mode & 0o1000 != 0 && !self.is_root() && attr.uid != self.uid => {
                refused("user attributes of a sticky directory are its owner's")
            }
            XattrNamespace::User => self.check(inode, WRITE, "change an attribute"),
            XattrNamespace::Trusted | XattrNamespace::Security if !self.is_root() => refused("trusted and security attributes are root's"),
            _ => Ok(()),
        }
    }

    /// Whether listing attributes shows this caller those of `namespace` (trusted ones only
    /// to root; no permission is needed to list the others, as on Linux).
    pub fn lists_xattr(&self, namespace: XattrNamespace) -> bool {
        namespace != XattrNamespace::Trusted || self.is_root()
    }
}

/// The permission bits (0o777) an ACL makes a mode show: the owner's entry, the mask (or the
/// owning group's entry if there is no mask), the other entry.
pub fn mode_of_acl(acl: &Acl) -> u32 {
    let perm = |tag| acl.perm(tag).unwrap_or(0);
    let group = acl.perm(Tag::Mask).unwrap_or_else(|| perm(Tag::GroupObj));
    (perm(Tag::UserObj) << 6) | (group << 3) | perm(Tag::Other)
}

/// `acl` with the entries a mode shows (the owner's; the mask, or the owning group's if there
/// is no mask; the other) set to what `f` makes of each one's permissions and its class's
/// bits in `mode`; the named entries, and the owning group's behind a mask, as they are.
fn with_mode_classes(acl: &Acl, mode: u32, f: impl Fn(u32, u32) -> u32) -> Acl {
    let has_mask = acl.perm(Tag::Mask).is_some();
    acl.with_perms(|tag, perm| match tag {
        Tag::UserObj => f(perm, mode >> 6),
        Tag::Mask => f(perm, mode >> 3),
        Tag::GroupObj if !has_mask => f(perm, mode >> 3),
        Tag::Other => f(perm, mode),
        _ => perm,
    })
}

/// An access ACL after chmod to `mode`: the entries the mode shows follow it; named entries
/// stay.
pub fn chmod_acl(acl: &Acl, mode: u32) -> Acl {
    with_mode_classes(acl, mode, |_, bits| bits)
}

/// What a new inode gets: its mode, and its ACLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inherited {
    pub mode: u32,
    pub access_acl: Option<Acl>,
    pub default_acl: Option<Acl>,
}

/// What a new inode of `kind`, asked for with `mode`, gets in a directory whose default ACL is
/// `default`, as Linux's posix_acl_create has it. Without one: `mode` less the umask. With one,
/// the umask does not apply: the default ACL, each entry within what `mode` grants that class
/// (the mask, or the owning group's entry if there is no mask, within the group bits), is the
/// new inode's access ACL — none if it says no more than a mode — and its permission bits the
/// mode's; a directory keeps the default ACL as its own. Symlinks have neither ACL nor umask.
pub fn inherit(kind: FileKind, mode: u32, umask: u32, default: Option<&Acl>) -> Inherited {
    let mode = mode & 0o7777;
    let default = match default {
        Some(default) if kind != FileKind::Symlink => default,
        _ => {
            let mode = if kind == FileKind::Symlink { mode } else { mode & !umask };
            return Inherited { mode, access_acl: None, default_acl: None };
        }
    };
    let access = with_mode_classes(default, mode, |perm, bits| perm & bits);
    Inherited {
        mode: (mode & !0o777) | mode_of_acl(&access),
        access_acl: (!access.is_minimal()).then_some(access),
        default_acl: (kind == FileKind::Dir).then(|| default.clone()),
    }
}

/// The group of a new inode of `kind` that the caller of group `gid` makes in a directory,
/// given the directory's group if the directory is set-group-ID (`dir_group`): that group,
/// and for a new directory the set-group-ID bit as well, so that a project's tree stays the
/// project's (Linux's inode_init_owner). The bit of a file asked for by a caller outside
/// the group is the kernel's to strip before the request comes (mode_strip_sgid).
pub fn owner_in(kind: FileKind, perms: &mut Inherited, gid: u32, dir_group: Option<u32>) -> u32 {
    let Some(group) = dir_group else { return gid };
    if kind == FileKind::Dir {
        perms.mode |= SET_GID;
    }
    group
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::acl::Entry;
    use surge_proto::Timestamp;

    fn attr(kind: FileKind, mode: u32, uid: u32, gid: u32) -> Attr {
        let t = Timestamp::default();
        Attr { ino: 7, kind, mode, uid, gid, size: 0, nlink: 1, atime: t, mtime: t, ctime: t, blocks: Some(0) }
    }

    /// An inode without an ACL, as checks see it.
    fn bits(attr: &Attr) -> Perms<'_> {
        Perms { attr, acl: None }
    }

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller { uid, gid, groups: groups.to_vec() }
    }

    #[test]
    fn mode_bits_by_owner_group_other() {
        let file = attr(FileKind::File, 0o640, 1001, 100);
        let (owner, member, other) = (caller(1001, 1001, &[]), caller(1002, 1002, &[100]), caller(1003, 1003, &[]));
        assert!(owner.may(bits(&file), READ | WRITE));
        assert!(!owner.may(bits(&file), EXEC));
        assert!(member.may(bits(&file), READ) && !member.may(bits(&file), WRITE));
        assert!(!other.may(bits(&file), READ));
        assert!(other.check_open(bits(&file)).is_err() && member.check_open(bits(&file)).is_ok());
        // The owner's triplet decides for the owner, even when the others' would allow more.
        assert!(!owner.may(bits(&attr(FileKind::File, 0o077, 1001, 100)), READ));
    }

    #[test]
    fn root_may_all_but_execute_a_file_nobody_may() {
        let root = caller(0, 0, &[]);
        assert!(root.may(bits(&attr(FileKind::File, 0o000, 1001, 100)), READ | WRITE));
        assert!(!root.may(bits(&attr(FileKind::File, 0o644, 1001, 100)), EXEC));
        assert!(root.may(bits(&attr(FileKind::Dir, 0o000, 1001, 100)), EXEC));
    }

    #[test]
    fn sticky_directories_keep_others_names() {
        let tmp = attr(FileKind::Dir, 0o1777, 0, 0);
        let mine = attr(FileKind::File, 0o600, 1001, 1001);
        let (me, other) = (caller(1001, 1001, &[]), caller(1002, 1002, &[]));
        assert!(me.check_remove(bits(&tmp), Named::Here(&mine)).is_ok());
        assert_eq!(other.check_remove(bits(&tmp), Named::Here(&mine)).unwrap_err().code, ErrorCode::NotPermitted);
        assert!(other.check_remove(bits(&tmp), Named::Elsewhere).is_err(), "an owner not known here is another's");
        assert!(other.check_remove(bits(&tmp), Named::Nothing).is_ok(), "a new name");
        let shared = attr(FileKind::Dir, 0o777, 0, 0);
        assert!(other.check_remove(bits(&shared), Named::Here(&mine)).is_ok(), "without the sticky bit, write on the directory is enough");
        let closed = attr(FileKind::Dir, 0o755, 1001, 1001);
        assert_eq!(other.check_remove(bits(&closed), Named::Nothing).unwrap_err().code, ErrorCode::AccessDenied);
    }

    #[test]
    fn setattr_follows_chmod_chown_truncate_utimes() {
        let file = attr(FileKind::File, 0o664, 1001, 100);
        let (owner, member, other) = (caller(1001, 1001, &[100, 200]), caller(1002, 1002, &[100]), caller(1003, 1003, &[]));
        let chmod = AttrChanges { mode: Some(0o600), ..Default::default() };
        assert!(owner.check_setattr(bits(&file), &chmod).is_ok());
        assert_eq!(member.check_setattr(bits(&file), &chmod).unwrap_err().code, ErrorCode::NotPermitted);
        let give_away = AttrChanges { uid: Some(1002), ..Default::default() };
        assert!(owner.check_setattr(bits(&file), &give_away).is_err());
        assert!(caller(0, 0, &[]).check_setattr(bits(&file), &give_away).is_ok());
        assert!(owner.check_setattr(bits(&file), &AttrChanges { gid: Some(200), ..Default::default() }).is_ok());
        assert!(owner.check_setattr(bits(&file), &AttrChanges { gid: Some(300), ..Default::default() }).is_err());
        let truncate = AttrChanges { size: Some(0), ..Default::default() };
        assert!(member.check_setattr(bits(&file), &truncate).is_ok());
        assert_eq!(other.check_setattr(bits(&file), &truncate).unwrap_err().code, ErrorCode::AccessDenied);
        let touch = AttrChanges { mtime: Some(Timestamp::default()), ..Default::default() };
        assert!(member.check_setattr(bits(&file), &touch).is_ok());
        assert!(other.check_setattr(bits(&file), &touch).is_err());
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

    /// chown and chgrp, as on Linux's local file systems: set-user-id goes whoever changes
    /// the owner or group of anything but a directory (root too, also to the same values);
    /// set-group-id with group execute goes too, without it only if the caller is neither
    /// root nor in the file's group.
    #[test]
    fn a_chown_clears_the_set_id_bits() {
        let file = attr(FileKind::File, 0o6555, 65534, 65533);
        let (owner, root) = (caller(65534, 65534, &[65534, 65533, 65532]), caller(0, 0, &[]));
        let chgrp = AttrChanges { uid: Some(65534), gid: Some(65532), ..Default::default() };
        assert_eq!(owner.mode_after(&file, &chgrp), 0o555, "the owner's chgrp to another of its groups");
        assert_eq!(root.mode_after(&file, &AttrChanges { uid: Some(65532), ..Default::default() }), 0o555);
        assert_eq!(root.mode_after(&file, &AttrChanges { gid: Some(65533), ..Default::default() }), 0o555, "to the same group");
        let locking = attr(FileKind::File, 0o2545, 65534, 65533);
        assert_eq!(root.mode_after(&locking, &chgrp), 0o2545, "set-group-id without group execute stays for root");
        assert_eq!(owner.mode_after(&locking, &chgrp), 0o2545, "and for a member of the file's group");
        let outsider = caller(65534, 65534, &[65532]);
        assert_eq!(outsider.mode_after(&locking, &chgrp), 0o545, "but not for one outside it");
        let dir = attr(FileKind::Dir, 0o6755, 65534, 65533);
        assert_eq!(root.mode_after(&dir, &chgrp), 0o6755, "a directory keeps its bits");
        assert_eq!(owner.mode_after(&file, &AttrChanges { mtime: Some(Timestamp::default()), ..Default::default() }), 0o6555);
    }

    /// A truncate or a write by someone without privilege clears the bits of a regular file
    /// (the kernel's should_remove_suid); root's keep them.
    #[test]
    fn a_write_or_truncate_without_privilege_clears_the_set_id_bits() {
        let file = attr(FileKind::File, 0o6777, 0, 100);
        let (other, member, root) = (caller(65534, 65534, &[]), caller(65534, 65534, &[100]), caller(0, 0, &[]));
        let truncate = AttrChanges { size: Some(0), ..Default::default() };
        let write = AttrChanges { kill_set_id: true, ..Default::default() };
        assert_eq!(other.mode_after(&file, &truncate), 0o777);
        assert_eq!(other.mode_after(&file, &write), 0o777);
        assert_eq!(root.mode_after(&file, &truncate), 0o6777);
        assert_eq!(root.mode_after(&file, &write), 0o6777);
        let locking = attr(FileKind::File, 0o6767, 0, 100);
        assert_eq!(other.mode_after(&locking, &write), 0o767, "set-group-id without group execute, outside the group");
        assert_eq!(member.mode_after(&locking, &write), 0o2767, "a member's write keeps the locking mark");
    }

    /// chmod by someone neither root nor in the file's group (the new one, if the same
    /// change sets it) cannot set set-group-id (setattr_prepare).
    #[test]
    fn a_chmod_outside_the_group_clears_set_group_id() {
        let file = attr(FileKind::File, 0o644, 1001, 100);
        let chmod = AttrChanges { mode: Some(0o6777), ..Default::default() };
        assert_eq!(caller(1001, 1001, &[]).mode_after(&file, &chmod), 0o4777);
        assert_eq!(caller(1001, 1001, &[100]).mode_after(&file, &chmod), 0o6777);
        assert_eq!(caller(0, 0, &[]).mode_after(&file, &chmod), 0o6777);
        let dir = attr(FileKind::Dir, 0o755, 1001, 100);
        assert_eq!(caller(1001, 1001, &[]).mode_after(&dir, &AttrChanges { mode: Some(0o2775), ..Default::default() }), 0o775);
    }

    /// A root connection acts for the requester it names; any other for its proven caller.
    #[test]
    fn set_id_rules_apply_to_whom_a_root_connection_names() {
        let by = Requester { uid: 65534, gid: 65534, groups: vec![65534] };
        let root = caller(0, 0, &[]);
        assert_eq!(Caller::acting_for(Some(&root), Some(&by)), caller(65534, 65534, &[65534]));
        assert_eq!(Caller::acting_for(None, Some(&by)).uid, 65534);
        let user = caller(1001, 1001, &[]);
        assert_eq!(Caller::acting_for(Some(&user), Some(&Requester::default())), user, "a user cannot claim root");
        assert_eq!(Caller::acting_for(None, None).uid, 0);
    }

    fn entry(tag: Tag, perm: u32) -> Entry {
        Entry { tag, perm }
    }

    /// `u::rw, u:1002:rw, g::r, g:200:rwx, m::r, o::-` (named user 1002, named group 200, a
    /// mask that lets neither write), as setfacl would make it for a 0640 file of 1001:100.
    fn shared_acl() -> Acl {
        Acl::new(vec![
            entry(Tag::UserObj, 6),
            entry(Tag::User(1002), 6),
            entry(Tag::GroupObj, 4),
            entry(Tag::Group(200), 7),
            entry(Tag::Mask, 4),
            entry(Tag::Other, 0),
        ])
        .unwrap()
    }

    /// POSIX's algorithm: the owner by the owner's entry; a named user by its entry within
    /// the mask; a member of the owning or a named group by any of those entries that grants
    /// all, within the mask, and by nothing else (not the other entry) if none does; everyone
    /// else by the other entry; root as ever.
    #[test]
    fn an_access_acl_decides_for_all_but_the_owner() {
        let acl = shared_acl();
        let file = attr(FileKind::File, 0o640, 1001, 100);
        let with_acl = Perms { attr: &file, acl: Some(&acl) };
        let (owner, named, member, in_named_group, other) = (
            caller(1001, 1001, &[]),
            caller(1002, 1002, &[]),
            caller(1003, 1003, &[100]),
            caller(1004, 1004, &[200]),
            caller(1005, 1005, &[]),
        );
        assert!(owner.may(with_acl, READ | WRITE));
        assert!(named.may(with_acl, READ), "the named user reads");
        assert!(!named.may(with_acl, WRITE), "its write is masked");
        assert!(!named.may(bits(&file), READ), "without the ACL the other bits refused it");
        assert!(member.may(with_acl, READ) && !member.may(with_acl, WRITE));
        assert!(in_named_group.may(with_acl, READ));
        assert!(!in_named_group.may(with_acl, WRITE | EXEC), "rwx of the group entry, but the mask lets only read");
        assert!(!other.may(with_acl, READ));
        assert!(caller(0, 0, &[]).may(with_acl, READ | WRITE));

        // A group member whom no group entry grants gets nothing, though others might.
        let others_read = acl.with_perms(|tag, perm| {
            if tag == Tag::Other {
                4
            } else if tag == Tag::GroupObj {
                0
            } else {
                perm
            }
        });
        let group_denied = Perms { attr: &file, acl: Some(&others_read) };
        assert!(!member.may(group_denied, READ), "the owning group's empty entry decides for its members");
        assert!(other.may(group_denied, READ));
        // A named user's entry decides for that user, even if a group of theirs would grant.
        let user_none = acl.with_perms(|tag, perm| if tag == Tag::User(1002) { 0 } else { perm });
        assert!(!caller(1002, 1002, &[100]).may(Perms { attr: &file, acl: Some(&user_none) }, READ));
        assert!(named.check_open(with_acl).is_ok() && other.check_open(with_acl).is_err());
    }

    #[test]
    fn an_acl_shows_in_the_mode_and_chmod_changes_it() {
        let acl = shared_acl();
        assert_eq!(mode_of_acl(&acl), 0o640, "the group bits are the mask's");
        assert_eq!(mode_of_acl(&Acl::from_mode(0o751)), 0o751, "without a mask, the owning group's");
        let chmodded = chmod_acl(&acl, 0o705);
        assert_eq!(chmodded.perm(Tag::UserObj), Some(7));
        assert_eq!(chmodded.perm(Tag::Mask), Some(0), "the mask follows the group bits");
        assert_eq!(chmodded.perm(Tag::GroupObj), Some(4), "the owning group's entry stays behind a mask");
        assert_eq!(chmodded.perm(Tag::User(1002)), Some(6), "named entries stay");
        assert_eq!(chmodded.perm(Tag::Other), Some(5));
        assert_eq!(mode_of_acl(&chmodded), 0o705);
        let plain = chmod_acl(&Acl::from_mode(0o600), 0o654);
        assert_eq!(plain, Acl::from_mode(0o654), "without a mask, the owning group's entry follows");
    }

    /// Extended attributes, as Linux's xattr_permission allows them.
    #[test]
    fn xattrs_by_namespace() {
        use XattrNamespace::*;
        let private = attr(FileKind::File, 0o600, 1001, 100);
        let (owner, other, root) = (caller(1001, 1001, &[]), caller(1002, 1002, &[]), caller(0, 0, &[]));
        assert!(owner.check_xattr_read(bits(&private), User).is_ok());
        assert_eq!(other.check_xattr_read(bits(&private), User).unwrap_err().code, ErrorCode::AccessDenied);
        assert_eq!(other.check_xattr_write(bits(&private), User).unwrap_err().code, ErrorCode::AccessDenied);
        let acl = shared_acl();
        let granted = Perms { attr: &private, acl: Some(&acl) };
        assert!(other.check_xattr_read(granted, User).is_ok(), "an ACL that lets them read lets them read attributes");
        assert!(other.check_xattr_write(granted, User).is_err());
        assert_eq!(other.check_xattr_read(bits(&private), Trusted).unwrap_err().code, ErrorCode::NoData, "none, to them");
        assert_eq!(owner.check_xattr_write(bits(&private), Trusted).unwrap_err().code, ErrorCode::NotPermitted);
        assert!(root.check_xattr_write(bits(&private), Trusted).is_ok() && root.check_xattr_read(bits(&private), Trusted).is_ok());
        assert!(other.check_xattr_read(bits(&private), Security).is_ok(), "readable by all");
        assert_eq!(owner.check_xattr_write(bits(&private), Security).unwrap_err().code, ErrorCode::NotPermitted);
        assert!(other.check_xattr_read(bits(&private), Acl(surge_proto::acl::AclKind::Access)).is_ok());
        assert!(!other.lists_xattr(Trusted) && other.lists_xattr(User) && root.lists_xattr(Trusted));

        let tmp = attr(FileKind::Dir, 0o1777, 0, 0);
        assert_eq!(
            other.check_xattr_write(bits(&tmp), User).unwrap_err().code,
            ErrorCode::NotPermitted,
            "a sticky directory's are its owner's"
        );
        assert!(other.check_xattr_write(bits(&attr(FileKind::Dir, 0o777, 0, 0)), User).is_ok());
        assert!(root.check_xattr_write(bits(&tmp), User).is_ok());
        let fifo = attr(FileKind::Fifo, 0o666, 1001, 100);
        assert_eq!(owner.check_xattr_write(bits(&fifo), User).unwrap_err().code, ErrorCode::NotPermitted);

        assert!(owner.check_owner(&private, "set an ACL").is_ok() && root.check_owner(&private, "set an ACL").is_ok());
        assert_eq!(other.check_owner(&private, "set an ACL").unwrap_err().code, ErrorCode::NotPermitted);
        assert!(caller(1003, 1003, &[100]).keeps_setgid(100) && !other.keeps_setgid(100) && root.keeps_setgid(100));
    }

    /// What is made in a directory with a default ACL inherits it, as posix_acl_create: each
    /// class within what the mode asked for grants, the umask not applied; a directory keeps
    /// it as its default; a result that says no more than a mode is no ACL. Without a default
    /// ACL the umask applies; symlinks have neither.
    #[test]
    fn new_inodes_inherit_the_default_acl() {
        let default = shared_acl(); // u::rw, u:1002:rw, g::r, g:200:rwx, m::r, o::-
        let file = inherit(FileKind::File, 0o666, 0o077, Some(&default));
        let access = file.access_acl.clone().expect("named entries make an access ACL");
        assert_eq!(access.perm(Tag::User(1002)), Some(6), "named entries as they were");
        assert_eq!(access.perm(Tag::Mask), Some(4), "the mask within the mode's group bits (rw) and its own (r)");
        assert_eq!(file.mode, 0o640, "the umask 077 did not apply");
        assert_eq!(file.default_acl, None, "a file has no default ACL");
        let narrow = inherit(FileKind::File, 0o600, 0, Some(&default));
        assert_eq!((narrow.mode, narrow.access_acl.unwrap().perm(Tag::Mask)), (0o600, Some(0)), "the mode masks the mask");

        let dir = inherit(FileKind::Dir, 0o2777, 0o022, Some(&default));
        assert_eq!(dir.mode, 0o2640, "special bits kept, permission bits from the ACL");
        assert_eq!(dir.default_acl.as_ref(), Some(&default), "a directory passes it on");
        let node = inherit(FileKind::Fifo, 0o644, 0, Some(&default));
        assert!(node.access_acl.is_some());

        let minimal = Acl::from_mode(0o750);
        let plain = inherit(FileKind::File, 0o666, 0o022, Some(&minimal));
        assert_eq!((plain.mode, plain.access_acl), (0o640, None), "a base-only default makes a mode, not an ACL");
        let umasked = inherit(FileKind::Dir, 0o777, 0o027, None);
        assert_eq!(umasked, Inherited { mode: 0o750, access_acl: None, default_acl: None });
        let link = inherit(FileKind::Symlink, 0o777, 0o077, Some(&default));
        assert_eq!(link, Inherited { mode: 0o777, access_acl: None, default_acl: None });
    }
}
