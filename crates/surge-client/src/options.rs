//! How a client behaves: its node, its timeout, the identity it creates files as, and whether
//! it reads and writes chunks held on its own node itself. Defaults come from the environment
//! (`SURGE_NODE`, `SURGE_TIMEOUT_SECS`, `SURGE_LOCAL_IO`, `SURGE_LOCAL_SOCKET`).

use std::net::{IpAddr, UdpSocket};
use std::time::Duration;

/// Whether `ip` is an address of this host: only then can a socket be bound to it (without
/// the non-local bind that no burst-buffer node needs). The unspecified address names none.
pub fn is_this_hosts(ip: IpAddr) -> bool {
    !ip.is_unspecified() && UdpSocket::bind((ip, 0)).is_ok()
}

/// How long a request may wait for its reply before it fails with TimedOut.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// This node's address: outgoing connections start from it, and in private mode it picks
    /// the server whose namespace this client sees. `None`: the OS chooses / first server.
    pub node: Option<IpAddr>,
    pub timeout: Duration,
    /// Identity stamped on created files.
    pub uid: u32,
    pub gid: u32,
    /// Read and write chunks held by a server on this node in its data directory directly
    /// (one `pread` / `pwrite`, no round trip; see the `local` module), while the connection to that
    /// server is up. On by default; `SURGE_LOCAL_IO=0` turns it off (all data then crosses
    /// the network).
    pub local_io: bool,
    /// Reach a server on this node over its Unix socket rather than TCP
    /// (`surge_proto::transport`). On by default; `SURGE_LOCAL_SOCKET=0` turns it off (every
    /// connection then goes through the TCP/IP stack, as to another node).
    pub local_socket: bool,
    /// How long the holder of a directory delegation whose home was lost keeps trying to reach
    /// it again, to write back what it answered and give the directory up
    /// ([`crate::RECLAIM_FOR`] by default, `SURGE_RECLAIM_SECS`): a mount unmounted meanwhile
    /// lives on that long at most.
    pub reclaim_for: Duration,
    /// This client's changes to attributes are answered only once every watcher that may
    /// hold them (a mount) acknowledged their notice: for a client beside a mount of its node
    /// whose program also asks the kernel (the interception library). Off by default.
    pub await_watchers: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        let node = std::env::var("SURGE_NODE").ok().and_then(|s| s.parse().ok());
        let timeout =
            std::env::var("SURGE_TIMEOUT_SECS").ok().and_then(|s| s.parse().ok()).map(Duration::from_secs_f64).unwrap_or(DEFAULT_TIMEOUT);
        let off = |variable| matches!(std::env::var(variable).as_deref(), Ok("0" | "off" | "false" | "no"));
        let (local_io, local_socket) = (!off("SURGE_LOCAL_IO"), !off("SURGE_LOCAL_SOCKET"));
        // SAFETY: geteuid/getegid take no arguments and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let reclaim_for = std::env::var("SURGE_RECLAIM_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs_f64)
            .unwrap_or(crate::RECLAIM_FOR);
        ClientOptions { node, timeout, uid, gid, local_io, local_socket, reclaim_for, await_watchers: false }
    }
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
