//! Extended attributes of the inodes homed here: kept with the inode, journaled one attribute
//! at a time ([`crate::XattrState`]), within Linux's limits and a bound per inode (see
//! [`surge_proto::xattr`]). Who may read or change which is the caller's business
//! ([`crate::access`]); what an attribute may be set on, and how a set meets the one there,
//! is decided here.

use std::collections::BTreeMap;

use surge_proto::acl::{Acl, AclKind};
use surge_proto::xattr::{xattr_list_len, XattrNamespace, MAX_XATTR_BYTES, MAX_XATTR_LIST_LEN};
use surge_proto::{Attr, ErrorCode, FileKind, Ino, Timestamp, XattrSetMode};

use crate::access::{self, Perms};
use crate::error::Result;
use crate::model::{fail, MetaStore};

/// An inode's extended attributes. The ACLs are kept decoded: permission checks and creates
/// read them; the others are bytes nobody here looks into.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Xattrs {
    /// `user.*`, `trusted.*` and `security.*`, by name.
    named: BTreeMap<String, Vec<u8>>,
    access_acl: Option<Acl>,
    default_acl: Option<Acl>,
}

impl Xattrs {
    pub(crate) fn acl(&self, kind: AclKind) -> Option<&Acl> {
        match kind {
            AclKind::Access => self.access_acl.as_ref(),
            AclKind::Default => self.default_acl.as_ref(),
        }
    }

    fn acl_slot(&mut self, kind: AclKind) -> &mut Option<Acl> {
        match kind {
            AclKind::Access => &mut self.access_acl,
            AclKind::Default => &mut self.default_acl,
        }
    }

    pub(crate) fn set_acl(&mut self, kind: AclKind, acl: Option<Acl>) {
        *self.acl_slot(kind) = acl;
    }

    /// Every attribute, by name, each with its value (an ACL in its xattr form).
    pub(crate) fn all(&self) -> impl Iterator<Item = (&str, Vec<u8>)> {
        let acls = AclKind::ALL.into_iter().filter_map(|kind| Some((kind.xattr_name(), self.acl(kind)?.encode())));
        acls.chain(self.named.iter().map(|(name, value)| (name.as_str(), value.clone())))
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        let acls = AclKind::ALL.into_iter().filter_map(|kind| self.acl(kind).map(|_| kind.xattr_name()));
        acls.chain(self.named.keys().map(String::as_str))
    }

    /// The value of `name`, if there is one.
    pub(crate) fn get(&self, name: &str) -> Option<Vec<u8>> {
        match XattrNamespace::of(name) {
            Ok(XattrNamespace::Acl(kind)) => self.acl(kind).map(Acl::encode),
            _ => self.named.get(name).cloned(),
        }
    }

    /// The size of `name`'s attribute, name and value, if it is there.
    fn bytes_of(&self, name: &str) -> usize {
        match XattrNamespace::of(name) {
            Ok(XattrNamespace::Acl(kind)) => self.acl(kind).map_or(0, |acl| name.len() + acl.encoded_len()),
            _ => self.named.get(name).map_or(0, |value| name.len() + value.len()),
        }
    }

    /// Whether `name` may take a value of `len` bytes: within the bound of the inode's
    /// attributes in all, and (a new name) of its list of names.
    pub(crate) fn check_room(&self, name: &str, len: usize) -> Result<()> {
        let total: usize = self.names().map(|n| self.bytes_of(n)).sum();
        let after = total - self.bytes_of(name) + name.len() + len;
        if after > MAX_XATTR_BYTES {
            return fail(ErrorCode::NoSpace, format!("the inode's attributes would take {after} bytes (at most {MAX_XATTR_BYTES})"));
        }
        let is_new = self.bytes_of(name) == 0;
        let list = xattr_list_len(self.names()) + if is_new { xattr_list_len([name]) } else { 0 };
        if list > MAX_XATTR_LIST_LEN {
            return fail(ErrorCode::NoSpace, format!("the inode's list of attribute names would take {list} bytes"));
        }
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.named.is_empty() && self.access_acl.is_none() && self.default_acl.is_none()
    }

    /// Puts back what the journal recorded of `name` (`None`: removed).
    pub(crate) fn restore(&mut self, name: String, value: Option<Vec<u8>>) -> std::result::Result<(), String> {
        match XattrNamespace::of(&name) {
            Ok(XattrNamespace::Acl(kind)) => {
                let acl = value.map(|bytes| Acl::decode(&bytes)).transpose().map_err(|e| format!("{name}: {e}"))?.flatten();
                self.set_acl(kind, acl);
            }
            _ => match value {
                Some(value) => drop(self.named.insert(name, value)),
                None => drop(self.named.remove(&name)),
            },
        }
        Ok(())
    }
}

impl MetaStore {
    /// The inode's attributes, to change: recorded as changed for the journal under `name`.
    pub(crate) fn xattrs_mut(&mut self, ino: Ino, name: &str) -> Result<&mut Xattrs> {
        self.changed_xattr(ino, name);
        Ok(self.inode_mut(ino)?.xattrs.get_or_insert_with(Box::default))
    }

    /// Marks the inode changed now (its ctime), and drops its attributes' room if it has none
    /// left.
    fn xattrs_changed(&mut self, ino: Ino) -> Result<Attr> {
        let inode = self.inode_mut(ino)?;
        if inode.xattrs.as_ref().is_some_and(|x| x.is_empty()) {
            inode.xattrs = None;
        }
        inode.attr.ctime = Timestamp::now();
        Ok(inode.attr.clone())
    }

    /// The inode as permission checks see it: its attributes and its access ACL.
    pub fn perms(&self, ino: Ino) -> Result<Perms<'_>> {
        let inode = self.inode(ino)?;
        Ok(Perms { attr: &inode.attr, acl: inode.xattrs.as_ref().and_then(|x| x.acl(AclKind::Access)) })
    }

    /// The value of `name` (ENODATA if it has none).
    pub fn get_xattr(&self, ino: Ino, name: &str) -> Result<Vec<u8>> {
        match self.inode(ino)?.xattrs.as_ref().and_then(|x| x.get(name)) {
            Some(value) => Ok(value),
            None => fail(ErrorCode::NoData, format!("no attribute '{name}'")),
        }
    }

    /// The names of the inode's attributes, the ACLs first.
    pub fn list_xattr(&self, ino: Ino) -> Result<Vec<String>> {
        Ok(self.inode(ino)?.xattrs.as_ref().map(|x| x.names().map(str::to_string).collect()).unwrap_or_default())
    }

    /// Sets a `user.*`, `trusted.*` or `security.*` attribute (the ACLs have steps of their
    /// own). `user.*` only on regular files and directories (EPERM on others, as Linux: their
    /// permission bits do not say who may write there).
    pub fn set_xattr(&mut self, ino: Ino, name: &str, value: Vec<u8>, mode: XattrSetMode) -> Result<Attr> {
        let namespace = XattrNamespace::of(name)?;
        surge_proto::xattr::check_xattr_value(&value)?;
        let inode = self.inode(ino)?;
        if let XattrNamespace::Acl(_) = namespace {
            return fail(ErrorCode::Invalid, "an ACL is set as an ACL");
        }
        if !namespace.allowed_on(inode.attr.kind) {
            return fail(ErrorCode::NotPermitted, "user attributes are for regular files and directories");
        }
        let existing = inode.xattrs.as_ref().is_some_and(|x| x.named.contains_key(name));
        match mode {
            XattrSetMode::Create if existing => return fail(ErrorCode::Exists, format!("attribute '{name}' exists")),
            XattrSetMode::Replace if !existing => return fail(ErrorCode::NoData, format!("no attribute '{name}'")),
            _ => {}
        }
        if let Some(xattrs) = &inode.xattrs {
            xattrs.check_room(name, value.len())?;
        }
        self.xattrs_mut(ino, name)?.named.insert(name.to_string(), value);
        self.xattrs_changed(ino)
    }

    /// Sets (or with None removes) an ACL, once the caller was found to be allowed and the
    /// ACL valid. An access ACL sets the mode's permission bits (see
    /// [`access::mode_of_acl`]), and the set-group-id bit goes unless `keeps_setgid`; one that
    /// says no more than the mode is not kept, as on Linux. Removing one changes no mode.
    pub fn set_acl(&mut self, ino: Ino, kind: AclKind, acl: Option<Acl>, keeps_setgid: bool) -> Result<Attr> {
        let inode = self.inode(ino)?;
        if kind == AclKind::Default && inode.attr.kind != FileKind::Dir {
            return fail(ErrorCode::AccessDenied, "a default ACL is for directories");
        }
        if acl.is_none() && inode.xattrs.as_ref().and_then(|x| x.acl(kind)).is_none() {
            return Ok(inode.attr.clone()); // Nothing to remove: nothing changes, as on ext4.
        }
        let name = kind.xattr_name();
        if let (Some(acl), Some(xattrs)) = (&acl, &inode.xattrs) {
            xattrs.check_room(name, acl.encoded_len())?;
        }
        let kept = match (kind, acl) {
            (AclKind::Access, Some(acl)) => {
                let attr = &mut self.inode_mut(ino)?.attr;
                attr.mode = (attr.mode & !0o777) | access::mode_of_acl(&acl);
                if !keeps_setgid {
                    attr.mode &= !0o2000;
                }
                (!acl.is_minimal()).then_some(acl)
            }
            (_, acl) => acl,
        };
        self.xattrs_mut(ino, name)?.set_acl(kind, kept);
        self.xattrs_changed(ino)
    }

    /// Removes a `user.*`, `trusted.*` or `security.*` attribute (ENODATA if there is none).
    pub fn remove_xattr(&mut self, ino: Ino, name: &str) -> Result<Attr> {
        if let XattrNamespace::Acl(_) = XattrNamespace::of(name)? {
            return fail(ErrorCode::Invalid, "an ACL is removed as an ACL");
        }
        if !self.inode(ino)?.xattrs.as_ref().is_some_and(|x| x.named.contains_key(name)) {
            return fail(ErrorCode::NoData, format!("no attribute '{name}'"));
        }
        self.xattrs_mut(ino, name)?.named.remove(name);
        self.xattrs_changed(ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::placement::DirLayout;
    use surge_proto::xattr::MAX_XATTR_VALUE_LEN;
    use surge_proto::{AttrChanges, ROOT_INO};

    fn code<T: std::fmt::Debug>(outcome: Result<T>) -> ErrorCode {
        outcome.unwrap_err().code
    }

    #[test]
    fn set_get_list_remove_as_setxattr_does() {
        let mut s = MetaStore::new(0, 0, 0);
        let file = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        let before = s.getattr(file).unwrap().ctime;
        std::thread::sleep(std::time::Duration::from_millis(2));
        let attr = s.set_xattr(file, "user.a", b"one".to_vec(), XattrSetMode::Create).unwrap();
        assert!(attr.ctime > before, "a set changes ctime");
        assert_eq!(s.get_xattr(file, "user.a").unwrap(), b"one");
        assert_eq!(code(s.set_xattr(file, "user.a", b"two".to_vec(), XattrSetMode::Create)), ErrorCode::Exists);
        assert_eq!(code(s.set_xattr(file, "user.b", b"two".to_vec(), XattrSetMode::Replace)), ErrorCode::NoData);
        s.set_xattr(file, "user.a", b"two".to_vec(), XattrSetMode::Replace).unwrap();
        s.set_xattr(file, "trusted.t", Vec::new(), XattrSetMode::Either).unwrap();
        assert_eq!(s.get_xattr(file, "user.a").unwrap(), b"two");
        assert_eq!(s.get_xattr(file, "trusted.t").unwrap(), b"", "an empty value is a value");
        assert_eq!(s.list_xattr(file).unwrap(), ["trusted.t", "user.a"]);
        s.remove_xattr(file, "user.a").unwrap();
        assert_eq!(code(s.remove_xattr(file, "user.a")), ErrorCode::NoData);
        assert_eq!(code(s.get_xattr(file, "user.a")), ErrorCode::NoData);
        s.remove_xattr(file, "trusted.t").unwrap();
        assert!(s.inodes[&file].xattrs.is_none(), "an inode without attributes keeps no room for them");
    }

    #[test]
    fn user_attributes_only_on_files_and_directories() {
        let mut s = MetaStore::new(0, 0, 0);
        let link = s.symlink(ROOT_INO, "l", "target", 0, 0).unwrap().ino;
        let fifo = s.make_node(ROOT_INO, "p", FileKind::Fifo, 0o644, 0, 0, 0).unwrap().ino;
        for ino in [link, fifo] {
            assert_eq!(code(s.set_xattr(ino, "user.a", b"x".to_vec(), XattrSetMode::Either)), ErrorCode::NotPermitted);
            s.set_xattr(ino, "trusted.a", b"x".to_vec(), XattrSetMode::Either).unwrap();
        }
        s.set_xattr(ROOT_INO, "user.a", b"x".to_vec(), XattrSetMode::Either).unwrap();
    }

    /// Linux's limits, and the bound of an inode's attributes in all (names and values) and
    /// of its list of names.
    #[test]
    fn limits_hold() {
        let mut s = MetaStore::new(0, 0, 0);
        let file = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        let set = |s: &mut MetaStore, name: &str, len: usize| s.set_xattr(file, name, vec![7; len], XattrSetMode::Either);
        assert_eq!(code(set(&mut s, "user.big", MAX_XATTR_VALUE_LEN + 1)), ErrorCode::TooBig);
        assert_eq!(code(set(&mut s, &format!("user.{}", "n".repeat(251)), 1)), ErrorCode::OutOfRange);
        assert_eq!(code(set(&mut s, "other.a", 1)), ErrorCode::NotSupported);
        for i in 0..3 {
            set(&mut s, &format!("user.{i}"), MAX_XATTR_VALUE_LEN).unwrap();
        }
        set(&mut s, "user.3", MAX_XATTR_VALUE_LEN - 100).unwrap();
        assert_eq!(code(set(&mut s, "user.4", 100)), ErrorCode::NoSpace, "past the inode's bound");
        set(&mut s, "user.3", MAX_XATTR_VALUE_LEN - 100).unwrap(); // A replacement of the same size still fits.
        assert_eq!(code(set(&mut s, "user.3", MAX_XATTR_VALUE_LEN)), ErrorCode::NoSpace, "a replacement counts what it adds");

        let other = s.create(ROOT_INO, "g", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        let long = |i: usize| format!("user.{i:04}{}", "n".repeat(246));
        let fitting = surge_proto::xattr::MAX_XATTR_LIST_LEN / (long(0).len() + 1);
        for i in 0..fitting {
            s.set_xattr(other, &long(i), Vec::new(), XattrSetMode::Either).unwrap();
        }
        assert_eq!(code(s.set_xattr(other, &long(fitting), Vec::new(), XattrSetMode::Either)), ErrorCode::NoSpace, "the list is full");
        let listed: usize = s.list_xattr(other).unwrap().iter().map(|n| n.len() + 1).sum();
        assert!(listed <= surge_proto::xattr::MAX_XATTR_LIST_LEN);
    }

    fn named_acl(uid: u32, perm: u32, mask: u32) -> Acl {
        use surge_proto::acl::{Entry, Tag};
        let entry = |tag, perm| Entry { tag, perm };
        Acl::new(vec![
            entry(Tag::UserObj, 6),
            entry(Tag::User(uid), perm),
            entry(Tag::GroupObj, 4),
            entry(Tag::Mask, mask),
            entry(Tag::Other, 0),
        ])
        .unwrap()
    }

    /// An access ACL sets the mode (and takes set-group-id from whom may not keep it); one
    /// that says no more than a mode is not kept; chmod changes the kept one; a default ACL
    /// is for directories; removing an ACL leaves the mode.
    #[test]
    fn acls_and_the_mode_follow_each_other() {
        let mut s = MetaStore::new(0, 0, 0);
        let file = s.create(ROOT_INO, "f", 0o2644, 0, 0, 0, true, false, None).unwrap().ino;
        let attr = s.set_acl(file, AclKind::Access, Some(named_acl(1002, 6, 6)), true).unwrap();
        assert_eq!(attr.mode, 0o2660, "group bits from the mask, set-group-id kept");
        assert_eq!(Acl::decode(&s.get_xattr(file, AclKind::Access.xattr_name()).unwrap()).unwrap(), Some(named_acl(1002, 6, 6)));
        assert_eq!(s.list_xattr(file).unwrap(), [AclKind::Access.xattr_name()]);
        assert_eq!(s.perms(file).unwrap().acl, Some(&named_acl(1002, 6, 6)));

        let attr = s.setattr(file, &AttrChanges { mode: Some(0o640), ..Default::default() }).unwrap();
        assert_eq!(attr.mode, 0o640);
        assert_eq!(s.perms(file).unwrap().acl, Some(&named_acl(1002, 6, 4)), "chmod masks the named entry");

        let attr = s.set_acl(file, AclKind::Access, Some(Acl::from_mode(0o2751)), false).unwrap();
        assert_eq!(attr.mode, 0o751, "the mode's bits, set-group-id gone for a caller outside the group");
        assert_eq!(s.get_xattr(file, AclKind::Access.xattr_name()).unwrap_err().code, ErrorCode::NoData, "a mode's ACL is the mode");
        s.set_acl(file, AclKind::Access, Some(named_acl(7, 4, 4)), true).unwrap();
        let attr = s.set_acl(file, AclKind::Access, None, true).unwrap();
        assert_eq!((attr.mode, s.perms(file).unwrap().acl), (0o640, None), "removal keeps the mode the ACL made");

        assert_eq!(code(s.set_acl(file, AclKind::Default, Some(Acl::from_mode(0o755)), true)), ErrorCode::AccessDenied);
        s.set_acl(ROOT_INO, AclKind::Default, Some(Acl::from_mode(0o750)), true).unwrap();
        assert_eq!(s.getattr(ROOT_INO).unwrap().mode, 0o755, "a default ACL leaves its directory's mode");
        assert!(s.get_xattr(ROOT_INO, AclKind::Default.xattr_name()).is_ok(), "a default ACL is kept even if it is three entries");
    }

    /// Creates, mknod and mkdir in a directory with a default ACL give the new inode what it
    /// inherits; a directory homed elsewhere than its parent takes the ACL the client says
    /// the parent has.
    #[test]
    fn what_is_made_inherits_the_default_acl() {
        let mut s = MetaStore::new(0, 0, 0);
        let default = named_acl(1002, 7, 7);
        s.set_acl(ROOT_INO, AclKind::Default, Some(default.clone()), true).unwrap();
        let file = s.create(ROOT_INO, "f", 0o664, 0o077, 0, 0, true, false, None).unwrap().attr.unwrap();
        assert_eq!(file.mode, 0o660, "the umask does not apply, the ACL does");
        assert_eq!(s.perms(file.ino).unwrap().acl.unwrap().perm(surge_proto::acl::Tag::User(1002)), Some(7));
        let node = s.make_node(ROOT_INO, "p", FileKind::Fifo, 0o600, 0o077, 0, 0).unwrap();
        assert_eq!((node.mode, s.perms(node.ino).unwrap().acl.is_some()), (0o600, true));
        let dir = s.make_dir_inode(ROOT_INO, 0o755, 0o077, 0, 0, None, DirLayout::Striped, None, None).unwrap();
        assert_eq!(dir.mode, 0o650, "the owner's entry rw, the mask within r-x, others none");
        assert_eq!(s.default_acl_of(dir.ino), Some(&default), "a directory passes it on");
        let link = s.symlink(ROOT_INO, "l", "f", 0, 0).unwrap();
        assert!(s.list_xattr(link.ino).unwrap().is_empty(), "symlinks get no ACL");

        let mut elsewhere = MetaStore::new(1, 0, 0);
        let told = elsewhere.make_dir_inode(ROOT_INO, 0o777, 0o022, 0, 0, Some(&default), DirLayout::Striped, None, None).unwrap();
        assert_eq!(elsewhere.default_acl_of(told.ino), Some(&default), "the parent's, as the client said");
        let untold = elsewhere.make_dir_inode(ROOT_INO, 0o777, 0o022, 0, 0, None, DirLayout::Striped, None, None).unwrap();
        assert_eq!((untold.mode, elsewhere.default_acl_of(untold.ino)), (0o755, None));
    }
}
