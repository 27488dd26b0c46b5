//! Extended attributes and POSIX ACLs, kept by each inode's home server: by inode, and by path
//! (named after the system calls, as the path API's other calls are). An ACL is read and
//! written as its attribute (`system.posix_acl_access`, `system.posix_acl_default`) in the
//! kernel's binary form, [`surge_proto::acl::Acl`]'s `encode` and `decode`.

use surge_proto::ino::Ino;
use surge_proto::namespace::{GetXattr, ListXattr, RemoveXattr, SetXattr};
use surge_proto::xattr::check_xattr_value;
use surge_proto::{Attr, Requester, XattrNamespace, XattrSetMode};

use crate::error::Result;
use crate::Client;

impl Client {
    /// The value of attribute `name` of `ino` (NoData, ENODATA, if it has none).
    pub async fn get_xattr(&self, ino: Ino, name: &str) -> Result<Vec<u8>> {
        XattrNamespace::of(name)?;
        self.call_home(ino, GetXattr { ino, name: name.to_string() }).await
    }

    /// Sets attribute `name` of `ino` to `value`: whether or not it exists (`Either`), only
    /// if it does not (`Create`, else Exists) or only if it does (`Replace`, else NoData);
    /// setxattr(2)'s flags are [`XattrSetMode::from_flags`]. Answers the inode's attributes
    /// after it (ctime; the mode, for an access ACL).
    pub async fn set_xattr(&self, ino: Ino, name: &str, value: &[u8], mode: XattrSetMode) -> Result<Attr> {
        self.set_xattr_for(ino, name, value, mode, None).await
    }

    /// [`Client::set_xattr`] on behalf of `by` (a mount passing on its caller, see
    /// [`SetXattr::by`]).
    pub async fn set_xattr_for(&self, ino: Ino, name: &str, value: &[u8], mode: XattrSetMode, by: Option<Requester>) -> Result<Attr> {
        XattrNamespace::of(name)?;
        check_xattr_value(value)?;
        self.call_home(ino, SetXattr { ino, name: name.to_string(), value: value.to_vec(), mode, by }).await
    }

    /// The names of `ino`'s attributes. `trusted.*` ones only for root, as on Linux: where
    /// servers check identities they leave them out for others; elsewhere this client does,
    /// for the user it acts as.
    pub async fn list_xattr(&self, ino: Ino) -> Result<Vec<String>> {
        let mut names = self.call_home(ino, ListXattr { ino }).await?;
        if self.identity().0 != 0 {
            names.retain(|name| !matches!(XattrNamespace::of(name), Ok(XattrNamespace::Trusted)));
        }
        Ok(names)
    }

    /// Removes attribute `name` of `ino` (NoData if it has none; an ACL that is not there is
    /// removed without complaint, as on Linux). Answers the inode's attributes after it.
    pub async fn remove_xattr(&self, ino: Ino, name: &str) -> Result<Attr> {
        XattrNamespace::of(name)?;
        self.call_home(ino, RemoveXattr { ino, name: name.to_string() }).await
    }

    /// [`Client::get_xattr`] of the inode at `path` (not followed if it is a symlink).
    pub async fn getxattr(&self, path: &str, name: &str) -> Result<Vec<u8>> {
        let ino = self.stat(path).await?.ino;
        self.get_xattr(ino, name).await.map_err(|e| e.context(path))
    }

    /// [`Client::set_xattr`] of the inode at `path`.
    pub async fn setxattr(&self, path: &str, name: &str, value: &[u8], mode: XattrSetMode) -> Result<Attr> {
        let ino = self.stat(path).await?.ino;
        self.set_xattr(ino, name, value, mode).await.map_err(|e| e.context(path))
    }

    /// [`Client::list_xattr`] of the inode at `path`.
    pub async fn listxattr(&self, path: &str) -> Result<Vec<String>> {
        let ino = self.stat(path).await?.ino;
        self.list_xattr(ino).await.map_err(|e| e.context(path))
    }

    /// [`Client::remove_xattr`] of the inode at `path`.
    pub async fn removexattr(&self, path: &str, name: &str) -> Result<Attr> {
        let ino = self.stat(path).await?.ino;
        self.remove_xattr(ino, name).await.map_err(|e| e.context(path))
    }
}
