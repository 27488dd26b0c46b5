//! Automatic failover (instances of three servers or more started with a failover delay).
//!
//! Two rules, checked every second by each server, keep a share from being served from both
//! sides (see [`surge_proto::mirror`]):
//! * **Fencing.** A server that has reached fewer than a majority of the instance's servers
//!   (itself counted) for half the delay stops answering requests: it may be the one cut off,
//!   and its successor may take its share over. It answers again once its mirror link is
//!   taken back by the successor, which proves the share was not taken over (a successor that
//!   took it over refuses, and the server stops for good).
//! * **Taking over.** A successor that has not reached its predecessor for the delay, holding
//!   a complete mirror, asks the other servers whether they reach it; when a majority (itself
//!   counted) does not, it serves the share (a mirror connection that still looks up is a dead
//!   node's, until TCP keepalive ends it, and is dropped). By then the predecessor, if alive
//!   and cut off, has been fenced for half the delay.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use surge_meta::poison_free::LockRecover;
use surge_proto::admin::CanReach;
use surge_proto::frame::decode_message;
use surge_proto::frame_io::{read_frame, write_frame};
use surge_proto::{FrameKind, MirrorState, Request, MAX_MESSAGE_LEN};
use tokio::io::AsyncWriteExt;

use crate::ServerState;

/// The shortest failover delay: a cut-off server notices within about 2 s (its mirror link
/// silent, then a round of probes) and fences after half the delay, which must come before
/// its successor (whose clock starts when it stops hearing from it) takes over after the
/// whole delay.
pub const SHORTEST_DELAY_MS: u64 = 5000;

/// How often each rule is checked, and how long a probe of one address may take.
const CHECK_EVERY: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What automatic failover needs: every server's address, by index, and the delay.
#[derive(Clone, Debug)]
pub struct Plan {
    pub peers: Vec<SocketAddr>,
    pub after: Duration,
}

impl Plan {
    /// Every server's address but those of the servers in `but`.
    fn others<'a>(&'a self, but: &'a [usize]) -> impl Iterator<Item = SocketAddr> + 'a {
        self.peers.iter().enumerate().filter(move |(i, _)| !but.contains(i)).map(|(_, &addr)| addr)
    }
}

/// How many of `checks`, run side by side, come out true.
async fn count_true(checks: impl Iterator<Item = impl std::future::Future<Output = bool> + Send + 'static>) -> usize {
    let mut set = tokio::task::JoinSet::new();
    for check in checks {
        set.spawn(check);
    }
    set.join_all().await.into_iter().filter(|&yes| yes).count()
}

/// Runs both rules for `server` until the task is aborted.
pub fn start(server: Arc<ServerState>, plan: Plan) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let majority = plan.peers.len() / 2 + 1;
        let mut cut_off_since: Option<Instant> = None;
        let mut predecessor_gone_since: Option<Instant> = None;
        let mut said_not_lost = false;
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            // Fencing. A link whose mirror answers (it pings every second) shows this server
            // is not cut off from its successor, the only server that could take its share
            // over: the others are probed only once the mirror has been silent a second.
            let reached = if server.replication.feed.silent_for() < CHECK_EVERY {
                plan.peers.len()
            } else {
                1 + count_true(plan.others(&[server.index]).map(reachable)).await
            };
            if reached >= majority {
                cut_off_since = None;
                // A link up to the successor proves the share was not taken over (the
                // successor takes over only once it has not reached this server for the
                // whole delay).
                if matches!(server.replication.feed.state(), Some(MirrorState::Filling | MirrorState::InStep)) {
                    unfence(&server);
                }
            } else {
                let since = *cut_off_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= plan.after / 2 && !server.replication.fenced.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        reached,
                        servers = plan.peers.len(),
                        "cut off from most of the instance for {:?}: not answering, lest the share be served twice",
                        plan.after / 2
                    );
                }
            }
            // Taking over: the predecessor unreached, and a majority agreeing (not by a server
            // in the minority itself). A predecessor heard from lately is there.
            let Some(replica) = &server.replication.replica else { continue };
            if reached < majority {
                predecessor_gone_since = None;
                continue;
            }
            let (waiting, from) = {
                let replica = replica.lock_or_recover();
                (!replica.taken_over() && replica.complete() && !replica.heard_within(CHECK_EVERY * 2), replica.from())
            };
            let lost = plan.peers[from];
            // Its mirror connection may look up for a while after its node died (until TCP
            // keepalive ends it): what counts is that it cannot be reached.
            if !waiting || from == server.index || reachable(lost).await {
                predecessor_gone_since = None;
                continue;
            }
            let since = *predecessor_gone_since.get_or_insert_with(Instant::now);
            if since.elapsed() < plan.after {
                continue;
            }
            // The others vote side by side (each takes up to a probe's timeout to answer).
            let vote = |voter| {
                let server = server.clone();
                async move { matches!(ask_can_reach(&server, voter, lost).await, Ok(false)) }
            };
            let not_reached = 1 + count_true(plan.others(&[server.index, from]).map(vote)).await;
            if not_reached < majority {
                if !said_not_lost {
                    tracing::warn!(from, not_reached, "server {from} is not reached from here, but a majority does not say it is lost");
                    said_not_lost = true;
                }
                continue;
            }
            said_not_lost = false;
            tracing::warn!(
                from,
                not_reached,
                "server {from} is lost (unreached for {:?}, and by a majority): taking its share over",
                plan.after
            );
            replica.lock_or_recover().forget_mirroring();
            if let Err(e) = server.take_over(from) {
                tracing::error!(from, "could not take server {from}'s share over: {e}");
            }
        }
    })
    .abort_handle()
}

/// The mirror link was taken back by the successor: the share was not taken over.
pub(crate) fn unfence(server: &ServerState) {
    if server.replication.fenced.swap(false, Ordering::Relaxed) {
        tracing::warn!("the mirror took this share back: answering again");
    }
}

/// Whether a connection to `addr` opens within [`PROBE_TIMEOUT`].
pub(crate) async fn reachable(addr: SocketAddr) -> bool {
    matches!(tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await, Ok(Ok(_)))
}

/// Asks the server at `voter` whether it reaches `addr`.
async fn ask_can_reach(server: &ServerState, voter: SocketAddr, addr: SocketAddr) -> std::io::Result<bool> {
    let ask = async {
        let (mut reader, mut writer) = super::link::connect_to(server, voter, None).await?;
        write_frame(&mut writer, FrameKind::Request, 2, &Request::from(CanReach { addr }), &[]).await?;
        writer.flush().await?;
        let frame = read_frame(&mut reader, MAX_MESSAGE_LEN, 0).await.map_err(|e| std::io::Error::other(e.to_string()))?;
        let frame = frame.ok_or_else(|| std::io::Error::other("closed"))?;
        if frame.header.kind != FrameKind::Reply {
            return Err(std::io::Error::other("refused"));
        }
        decode_message::<bool>(&frame.message).map_err(|e| std::io::Error::other(e.to_string()))
    };
    tokio::time::timeout(PROBE_TIMEOUT * 3, ask).await.map_err(|_| std::io::Error::other("no answer"))?
}
