//! Extended attributes: which names a server keeps (by namespace, as Linux sorts them), the
//! limits Linux puts on names, values and lists, and how a set treats an attribute that is
//! there already or not (`XATTR_CREATE`, `XATTR_REPLACE`). Both sides apply these rules: a
//! client to refuse early what a server would refuse, a server whatever a client sends.

use serde::{Deserialize, Serialize};

use crate::acl::AclKind;
use crate::error::{Error, ErrorCode};
use crate::types::FileKind;

/// Longest attribute name, prefix included (Linux's XATTR_NAME_MAX).
pub const MAX_XATTR_NAME_LEN: usize = 255;
/// Largest value (XATTR_SIZE_MAX): a larger one is refused with E2BIG.
pub const MAX_XATTR_VALUE_LEN: usize = 65536;
/// Largest list of an inode's names, each with its terminating NUL as listxattr(2) hands it
/// over (XATTR_LIST_MAX): a set that would make it longer is refused with ENOSPC.
pub const MAX_XATTR_LIST_LEN: usize = 65536;
/// What one inode's attributes may take in all, names and values (the ACLs in their xattr
/// form included): a set past it is refused with ENOSPC, as ext4 refuses what its xattr
/// block cannot take. A quarter of a frame's message, so that whatever carries them fits.
pub const MAX_XATTR_BYTES: usize = crate::frame::MAX_MESSAGE_LEN / 4;

/// The namespaces of the attributes a server keeps; a name of any other is not supported
/// (EOPNOTSUPP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrNamespace {
    /// `user.*`: on regular files and directories, read and written by whoever may read and
    /// write the inode.
    User,
    /// `trusted.*`: root's alone.
    Trusted,
    /// `security.*`: readable by all, set by root.
    Security,
    /// `system.posix_acl_access` and `system.posix_acl_default`: the inode's ACLs (see
    /// [`crate::acl`]).
    Acl(AclKind),
}

impl XattrNamespace {
    /// The namespace of attribute `name`, as Linux tells it: an empty name or one longer than
    /// [`MAX_XATTR_NAME_LEN`] is out of range (ERANGE), a prefix with nothing after it invalid,
    /// an unknown prefix not supported.
    pub fn of(name: &str) -> Result<XattrNamespace, Error> {
        if name.is_empty() || name.len() > MAX_XATTR_NAME_LEN {
            return Err(Error::new(ErrorCode::OutOfRange, format!("attribute name of {} bytes", name.len())));
        }
        if name.contains('\0') {
            return Err(Error::new(ErrorCode::Invalid, "attribute name with a NUL in it"));
        }
        if let Some(kind) = AclKind::ALL.into_iter().find(|kind| kind.xattr_name() == name) {
            return Ok(XattrNamespace::Acl(kind));
        }
        let prefixed = [("user.", XattrNamespace::User), ("trusted.", XattrNamespace::Trusted), ("security.", XattrNamespace::Security)];
        for (prefix, namespace) in prefixed {
            if let Some(rest) = name.strip_prefix(prefix) {
                if rest.is_empty() {
                    return Err(Error::new(ErrorCode::Invalid, format!("attribute name '{name}' is a prefix alone")));
                }
                return Ok(namespace);
            }
        }
        Err(Error::new(ErrorCode::NotSupported, format!("attribute '{name}': only user., trusted., security. and POSIX ACLs are kept")))
    }

    /// Whether an inode of `kind` may have attributes of this namespace: `user.*` only
    /// regular files and directories, as on Linux (the permission bits of the others do not
    /// say who may write there).
    pub fn allowed_on(self, kind: FileKind) -> bool {
        self != XattrNamespace::User || matches!(kind, FileKind::File | FileKind::Dir)
    }
}

/// What setting an attribute requires of the one there: setxattr(2)'s flags.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSetMode {
    /// Create it or replace it (no flag).
    Either,
    /// It must not exist (XATTR_CREATE; EEXIST if it does).
    Create,
    /// It must exist (XATTR_REPLACE; ENODATA if it does not).
    Replace,
}

impl XattrSetMode {
    /// The mode setxattr(2)'s `flags` ask for. Both flags at once (which Linux accepts and
    /// then fails either way) and unknown flags are invalid.
    pub fn from_flags(flags: i32) -> Result<XattrSetMode, Error> {
        match flags {
            0 => Ok(XattrSetMode::Either),
            libc::XATTR_CREATE => Ok(XattrSetMode::Create),
            libc::XATTR_REPLACE => Ok(XattrSetMode::Replace),
            _ => Err(Error::new(ErrorCode::Invalid, format!("setxattr flags {flags:#x}"))),
        }
    }
}

/// What `names` take in listxattr(2)'s form: each followed by a NUL.
pub fn xattr_list_len<'a>(names: impl IntoIterator<Item = &'a str>) -> usize {
    names.into_iter().map(|name| name.len() + 1).sum()
}

/// Checks a value's size against [`MAX_XATTR_VALUE_LEN`] (E2BIG).
pub fn check_xattr_value(value: &[u8]) -> Result<(), Error> {
    if value.len() > MAX_XATTR_VALUE_LEN {
        return Err(Error::new(ErrorCode::TooBig, format!("attribute value of {} bytes (at most {MAX_XATTR_VALUE_LEN})", value.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sorted_into_namespaces_as_linux_does() {
        let code = |name: &str| XattrNamespace::of(name).unwrap_err().code;
        assert_eq!(XattrNamespace::of("user.mime_type").unwrap(), XattrNamespace::User);
        assert_eq!(XattrNamespace::of("trusted.overlay.opaque").unwrap(), XattrNamespace::Trusted);
        assert_eq!(XattrNamespace::of("security.selinux").unwrap(), XattrNamespace::Security);
        assert_eq!(XattrNamespace::of("system.posix_acl_access").unwrap(), XattrNamespace::Acl(AclKind::Access));
        assert_eq!(XattrNamespace::of("system.posix_acl_default").unwrap(), XattrNamespace::Acl(AclKind::Default));
        assert_eq!(code(""), ErrorCode::OutOfRange);
        assert_eq!(code(&format!("user.{}", "n".repeat(251))), ErrorCode::OutOfRange);
        assert!(XattrNamespace::of(&format!("user.{}", "n".repeat(250))).is_ok(), "255 bytes in all");
        assert_eq!(code("user."), ErrorCode::Invalid);
        assert_eq!(code("system.posix_acl_other"), ErrorCode::NotSupported);
        assert_eq!(code("os2.name"), ErrorCode::NotSupported);
        assert_eq!(code("noprefix"), ErrorCode::NotSupported);
    }

    #[test]
    fn set_flags_map_onto_modes() {
        assert_eq!(XattrSetMode::from_flags(0).unwrap(), XattrSetMode::Either);
        assert_eq!(XattrSetMode::from_flags(libc::XATTR_CREATE).unwrap(), XattrSetMode::Create);
        assert_eq!(XattrSetMode::from_flags(libc::XATTR_REPLACE).unwrap(), XattrSetMode::Replace);
        assert_eq!(XattrSetMode::from_flags(libc::XATTR_CREATE | libc::XATTR_REPLACE).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(XattrSetMode::from_flags(8).unwrap_err().code, ErrorCode::Invalid);
    }

    #[test]
    fn values_and_lists_are_measured_as_linux_does() {
        assert!(check_xattr_value(&vec![0; MAX_XATTR_VALUE_LEN]).is_ok());
        assert_eq!(check_xattr_value(&vec![0; MAX_XATTR_VALUE_LEN + 1]).unwrap_err().code, ErrorCode::TooBig);
        assert_eq!(xattr_list_len(["user.a", "user.bc"]), 15);
    }
}
