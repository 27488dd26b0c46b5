//! The purge keeper beside each server: every few seconds, one round of
//! [`surge_client::Client::purge_round`] for that server, which purges, as a client of the
//! instance, what clients left of the data of files the server ended, and reports it done.
//! It keeps no state of its own: what its server still lists after a restart is due again.

use std::time::Duration;

use surge_client::purges::PURGE_GRACE;
use surge_client::Client;

use crate::CoordinatorConfig;

/// How often the keeper asks its server.
const ROUND: Duration = Duration::from_secs(5);

/// Runs the keeper of server `server` until the process ends (spawn it on the daemon's runtime).
pub async fn keep(config: CoordinatorConfig, server: usize) {
    let mut client: Option<Client> = None;
    loop {
        tokio::time::sleep(ROUND).await;
        if client.is_none() {
            client = config.keeper_client();
        }
        let Some(c) = &client else { continue };
        match c.purge_round(server, PURGE_GRACE).await {
            Ok(round) if round.listed > 0 => {
                tracing::debug!(listed = round.listed, purged = round.purged, "purge keeper: a round");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(server, "purge keeper: cannot ask the server: {e}");
                if e.code == surge_proto::ErrorCode::ServerDown {
                    client = None; // Its address may have changed: read the peers again.
                }
            }
        }
    }
}
