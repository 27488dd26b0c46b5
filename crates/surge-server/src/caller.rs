//! Who a connection's requests come from, when the server checks identities: the uid and gid
//! a MUNGE credential proved at the handshake (see [`surge_proto::identity`]), with that
//! user's groups as this node knows them ([`surge_proto::host::user_groups`]). The checks
//! made against it are [`surge_meta::access`]'s.

use surge_meta::access::Caller;
use surge_proto::ticket::{Ticket, TicketKey};
use surge_proto::Ino;

/// A ticket for `right` on `ino`, for `caller` (where servers check identities: there is a
/// key and a proven caller; elsewhere none is needed).
pub(crate) fn ticket_for(key: Option<&TicketKey>, caller: Option<&Caller>, ino: Ino, right: u32) -> Option<Ticket> {
    match (key, caller) {
        (Some(key), Some(caller)) => Some(Ticket::issue(key, ino, caller.uid, right)),
        _ => None,
    }
}

/// The caller a MUNGE credential made for `challenge` proves, with its groups.
pub async fn prove(credential: String, challenge: &[u8]) -> std::result::Result<Caller, String> {
    let payload = surge_proto::identity::payload_of(challenge);
    // The user database may be a directory service: asked off the async workers, as munge is.
    tokio::task::spawn_blocking(move || {
        let proven = surge_proto::identity::verify(&credential, &payload)?;
        let groups = surge_proto::host::user_groups(proven.uid, proven.gid).to_vec();
        Ok(Caller { uid: proven.uid, gid: proven.gid, groups })
    })
    .await
    .map_err(|e| format!("credential check: {e}"))?
}
