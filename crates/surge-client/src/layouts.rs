//! Directory layouts ([`DirLayout`]): read and set per directory, by inode and by path.

use std::net::{IpAddr, UdpSocket};

use surge_proto::ino::Ino;
use surge_proto::namespace::LayoutOf;
use surge_proto::placement::DirLayout;

use crate::error::Result;
use crate::Client;

impl Client {
    /// Where the files made in directory `dir` are put.
    pub async fn layout_of(&self, dir: Ino) -> Result<DirLayout> {
        self.call_home(dir, LayoutOf { dir, set: None }).await
    }

    /// Puts the files made in directory `dir` from now on `layout` (the directories made in it
    /// inherit it); the files there keep theirs. For the directory's owner or root.
    pub async fn set_layout(&self, dir: Ino, layout: DirLayout) -> Result<DirLayout> {
        self.call_home(dir, LayoutOf { dir, set: Some(layout) }).await
    }

    /// [`Client::layout_of`] the directory at `path`.
    pub async fn dir_layout(&self, path: &str) -> Result<DirLayout> {
        let ino = self.stat(path).await?.ino;
        self.layout_of(ino).await.map_err(|e| e.context(path))
    }

    /// [`Client::set_layout`] of the directory at `path`.
    pub async fn set_dir_layout(&self, path: &str, layout: DirLayout) -> Result<DirLayout> {
        let ino = self.stat(path).await?.ino;
        self.set_layout(ino, layout).await.map_err(|e| e.context(path))
    }
}

/// Whether `ip` is an address of this host: only then can a socket be bound to it (without
/// the non-local bind that no burst-buffer node needs).
pub(crate) fn is_this_hosts(ip: IpAddr) -> bool {
    !ip.is_unspecified() && UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_hosts_addresses_are_its_own() {
        assert!(is_this_hosts("127.0.0.1".parse().unwrap()));
        assert!(is_this_hosts("127.0.3.9".parse().unwrap()), "all of 127/8 is loopback");
        // TEST-NET-1 (RFC 5737) is never assigned to a host.
        assert!(!is_this_hosts("192.0.2.1".parse().unwrap()));
        assert!(!is_this_hosts("0.0.0.0".parse().unwrap()));
    }
}
