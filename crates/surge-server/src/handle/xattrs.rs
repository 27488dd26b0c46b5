//! The extended attribute steps of the namespace service: get, set, list and remove, on the
//! inode's home, checked as Linux checks them where the server checks identities
//! ([`surge_meta::access`]); the ACLs' values are read and acted on (see [`set_acl`]).

use surge_meta::access::Caller;
use surge_meta::error::{Result, ServerError};
use surge_proto::acl::{decode_entries, Acl, AclKind};
use surge_proto::namespace::{GetXattr, ListXattr, RemoveXattr, SetXattr};
use surge_proto::xattr::check_xattr_value;
use surge_proto::{Attr, FileKind, Ino, Requester, XattrNamespace};

use super::namespace::{Step, StepContext};

use crate::watch::Effects;
use surge_proto::ErrorCode;

/// What a change of an inode's attributes tells watchers: its attributes changed (a mount
/// that caches ACLs forgets them with the attributes).
fn changed(ino: Ino) -> Effects {
    Effects { changed_attrs: vec![ino], told_attrs: vec![ino], ..Default::default() }
}

/// Sets (`value`) or removes (None) an ACL, as Linux's set_posix_acl: its xattr form must
/// read (EINVAL, or EOPNOTSUPP for another version), a default ACL is only for a directory
/// (EACCES; removing one elsewhere does nothing), only the owner or root may (EPERM), and the
/// ACL must be valid (EINVAL) — in that order.
fn set_acl(cx: &mut StepContext, ino: Ino, kind: AclKind, value: Option<&[u8]>, by: Option<&Requester>) -> Result<Attr> {
    let entries = value.map(decode_entries).transpose()?.flatten();
    let attr = cx.meta.getattr(ino)?;
    if kind == AclKind::Default && attr.kind != FileKind::Dir {
        return match entries {
            Some(_) => Err(ServerError::new(ErrorCode::AccessDenied, "a default ACL is for directories")),
            None => Ok(attr),
        };
    }
    if let Some(caller) = cx.caller {
        caller.check_owner(&attr, "set an ACL")?;
    }
    let acl = entries.map(Acl::new).transpose()?;
    let keeps_setgid = Caller::acting_for(cx.caller, by).keeps_setgid(attr.gid);
    cx.meta.set_acl(ino, kind, acl, keeps_setgid)
}

impl Step for GetXattr {
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<Vec<u8>> {
        let namespace = XattrNamespace::of(&self.name)?;
        if let Some(caller) = cx.caller {
            caller.check_xattr_read(cx.meta.perms(self.ino)?, namespace)?;
        }
        cx.meta.get_xattr(self.ino, &self.name)
    }
}

impl Step for ListXattr {
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<Vec<String>> {
        let mut names = cx.meta.list_xattr(self.ino)?;
        if let Some(caller) = cx.caller {
            names.retain(|name| XattrNamespace::of(name).is_ok_and(|namespace| caller.lists_xattr(namespace)));
        }
        Ok(names)
    }
}

impl Step for SetXattr {
    fn run(&self, cx: &mut StepContext) -> Result<Attr> {
        check_xattr_value(&self.value)?;
        match XattrNamespace::of(&self.name)? {
            XattrNamespace::Acl(kind) => set_acl(cx, self.ino, kind, Some(&self.value), self.by.as_ref()),
            namespace => {
                if let Some(caller) = cx.caller {
                    caller.check_xattr_write(cx.meta.perms(self.ino)?, namespace)?;
                }
                cx.meta.set_xattr(self.ino, &self.name, self.value.clone(), self.mode)
            }
        }
    }

    fn effects(&self, _: &Attr) -> Effects {
        changed(self.ino)
    }
}

impl Step for RemoveXattr {
    fn run(&self, cx: &mut StepContext) -> Result<Attr> {
        match XattrNamespace::of(&self.name)? {
            XattrNamespace::Acl(kind) => set_acl(cx, self.ino, kind, None, None),
            namespace => {
                if let Some(caller) = cx.caller {
                    caller.check_xattr_write(cx.meta.perms(self.ino)?, namespace)?;
                }
                cx.meta.remove_xattr(self.ino, &self.name)
            }
        }
    }

    fn effects(&self, _: &Attr) -> Effects {
        changed(self.ino)
    }
}
