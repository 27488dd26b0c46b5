//! An instance's servers one at a time: a client that talks to a single server (what
//! administration needs, since private-mode servers are separate namespaces), and the links
//! that pair servers into mirrors when an instance keeps two copies of each share. Both the
//! command line (`surge up`, `surge restart`) and the control plane's manager start instances,
//! so both link their mirrors through here.

use std::net::SocketAddr;
use std::time::Duration;

use surge_proto::admin::MirrorTo;
use surge_proto::mirror::mirror_of;

use crate::descriptor::ServerInfo;
use crate::{Client, ClientOptions, InstanceDescriptor, Mode, Result};

/// A client that talks to `server` only (as server 0 of its own), whatever the mode.
pub fn single_server_client(desc: &InstanceDescriptor, server: &ServerInfo, opts: &ClientOptions) -> Result<Client> {
    let single = InstanceDescriptor { mode: Mode::Private, servers: vec![server.clone()], ..desc.clone() };
    Client::new(&single, opts.clone())
}

/// Tells each server of an instance with two copies of each share where its mirror is (the
/// next server), with every server's address and the failover delay; `only`: that server
/// alone (one started again). Nothing to do for one copy. Clients are made from the
/// descriptor's token.
pub async fn link_mirrors(desc: &InstanceDescriptor, only: Option<usize>) -> Result<()> {
    let opts = ClientOptions { timeout: Duration::from_secs(10), node: None, ..Default::default() };
    link_mirrors_with(desc, only, |server| single_server_client(desc, server, &opts)).await
}

/// [`link_mirrors`], reaching each server through `client_for` (a caller that holds the
/// instance's secret rather than a token file: the control plane's manager).
pub async fn link_mirrors_with(
    desc: &InstanceDescriptor,
    only: Option<usize>,
    client_for: impl Fn(&ServerInfo) -> Result<Client>,
) -> Result<()> {
    if desc.replicas < 2 {
        return Ok(());
    }
    let count = desc.servers.len();
    let peers: Vec<SocketAddr> = desc.servers.iter().map(|s| s.addr).collect();
    let failover_after_ms = desc.failover_after.map(|secs| (secs * 1000.0) as u64);
    for (position, server) in desc.servers.iter().enumerate() {
        if only.is_some_and(|i| i != server.index) {
            continue;
        }
        let to = desc.servers[mirror_of(position, count)].addr;
        let told = MirrorTo { to: Some(to), peers: peers.clone(), failover_after_ms };
        client_for(server)?.call(0, told).await.map_err(|e| e.context(&format!("tell server {} to mirror on {to}", server.index)))?;
    }
    Ok(())
}
