//! Administration: statistics, shutdown, batches of namespace steps, the watch a caching
//! client asks for (its notices go out through the connection's writer), the scans of
//! `surge fsck`, and the list of ended files whose data the keeper beside this server purges
//! ([`surge_meta::purges`]).

use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_proto::admin::*;
use surge_proto::call::Handle;
use surge_proto::ServerStats;

use super::Answer;

use crate::session::Session;

impl Session {
    pub(super) fn admin(&mut self, request: AdminRequest) -> Answer {
        let runs_the_instance = matches!(
            request,
            AdminRequest::Shutdown(_)
                | AdminRequest::MirrorTo(_)
                | AdminRequest::TakeOver(_)
                | AdminRequest::PurgesDue(_)
                | AdminRequest::Purged(_)
        );
        if runs_the_instance {
            if let Err(e) = self.check_administrator(request.name()) {
                return Answer::Failure(e);
            }
        }
        // A scan (`surge fsck`) sees the share whole.
        let scans = matches!(request, AdminRequest::ListInodes(_) | AdminRequest::ListEntries(_) | AdminRequest::ListDataFiles(_));
        if scans {
            if let Err(e) = self.guard_scan() {
                return Answer::Failure(e);
            }
        }
        request.dispatch(self)
    }

    /// Where identities are checked, what runs or changes the instance itself (stopping a
    /// server, mirroring, taking a share over) is for the instance's owner, root, and the
    /// servers (which run as the owner or root); elsewhere every token holder is trusted.
    pub(super) fn check_administrator(&self, what: &str) -> Result<()> {
        let Some(caller) = &self.caller else { return Ok(()) };
        // SAFETY: geteuid takes no arguments and cannot fail.
        let server_uid = unsafe { libc::geteuid() };
        if [0, self.server.config.owner_uid, server_uid].contains(&caller.uid) {
            return Ok(());
        }
        Err(ServerError::new(
            surge_proto::ErrorCode::AccessDenied,
            format!("{what}: for the instance's owner (uid {}) alone", self.server.config.owner_uid),
        ))
    }
}

impl Handle<StatFs, Answer> for Session {
    fn handle(&mut self, _: StatFs) -> Answer {
        let (server, data) = (&self.server, &self.server.data);
        let (inodes, files, dirs) = server.meta.lock_or_recover().counts();
        Answer::of::<StatFs>(Ok(ServerStats {
            server_index: server.index as u32,
            capacity: data.capacity(),
            used: data.used(),
            inodes,
            files,
            dirs,
            read_bytes: data.read_bytes(),
            written_bytes: data.written_bytes(),
            holding_writers: server.workflow.holding_writers(data),
            mirror: server.replication.feed.state(),
            standing_in_for: server.replication.stand_ins.lock_or_recover().keys().map(|&i| i as u32).collect(),
            fenced: server.replication.fenced.load(std::sync::atomic::Ordering::Relaxed),
        }))
    }
}

impl Handle<Shutdown, Answer> for Session {
    fn handle(&mut self, _: Shutdown) -> Answer {
        Answer::Stop
    }
}

impl Handle<Batch, Answer> for Session {
    fn handle(&mut self, batch: Batch) -> Answer {
        let outcomes = batch.requests.into_iter().map(|request| self.batched(request)).collect();
        Answer::of::<Batch>(Ok(outcomes))
    }
}

impl Handle<Watch, Answer> for Session {
    fn handle(&mut self, watch: Watch) -> Answer {
        self.watch(watch.keeps);
        Answer::of::<Watch>(Ok(()))
    }
}

impl Handle<AwaitWatchers, Answer> for Session {
    fn handle(&mut self, _: AwaitWatchers) -> Answer {
        self.awaits_watchers = true;
        Answer::of::<AwaitWatchers>(Ok(()))
    }
}

impl Handle<NoticeSeen, Answer> for Session {
    fn handle(&mut self, seen: NoticeSeen) -> Answer {
        self.server.watchers.seen(seen.ack);
        Answer::Nothing
    }
}

impl Handle<SyncMetadata, Answer> for Session {
    fn handle(&mut self, _: SyncMetadata) -> Answer {
        // The connection answers once the journal holds this sequence number.
        self.durable = Some(self.server.journal.last_seq());
        Answer::of::<SyncMetadata>(Ok(()))
    }
}

impl Handle<ListInodes, Answer> for Session {
    fn handle(&mut self, list: ListInodes) -> Answer {
        Answer::of::<ListInodes>(Ok(self.server.meta.lock_or_recover().inode_page(list.after)))
    }
}

impl Handle<ListEntries, Answer> for Session {
    fn handle(&mut self, list: ListEntries) -> Answer {
        Answer::of::<ListEntries>(Ok(self.server.meta.lock_or_recover().entry_page(list.after)))
    }
}

impl Handle<ListDataFiles, Answer> for Session {
    fn handle(&mut self, list: ListDataFiles) -> Answer {
        Answer::of::<ListDataFiles>(self.server.data.data_file_page(list.after))
    }
}

impl Handle<MirrorTo, Answer> for Session {
    fn handle(&mut self, to: MirrorTo) -> Answer {
        let server = &self.server;
        let outcome = match server.config.replicas {
            1 if to.to.is_some() => {
                Err(ServerError::new(surge_proto::ErrorCode::NotSupported, "this server keeps one replica (started without --replicas 2)"))
            }
            _ if to.failover_after_ms.is_some() && (to.peers.len() < 3 || to.peers.len() != server.count) => Err(ServerError::new(
                surge_proto::ErrorCode::Invalid,
                format!("automatic failover needs every server's address, and three servers or more ({} given)", to.peers.len()),
            )),
            _ => {
                let plan = to.failover_after_ms.map(|ms| crate::mirror::failover::Plan {
                    peers: to.peers,
                    after: std::time::Duration::from_millis(ms.max(crate::mirror::failover::SHORTEST_DELAY_MS)),
                });
                server.mirror_to(to.to, plan);
                Ok(())
            }
        };
        Answer::of::<MirrorTo>(outcome)
    }
}

impl Handle<CanReach, Answer> for Session {
    fn handle(&mut self, c: CanReach) -> Answer {
        Answer::later::<CanReach>(async move { Ok(crate::mirror::failover::reachable(c.addr).await) })
    }
}

impl Handle<TakeOver, Answer> for Session {
    fn handle(&mut self, t: TakeOver) -> Answer {
        // Replays the lost share's journal: a blocking step, like any metadata step.
        Answer::of::<TakeOver>(self.server.take_over(t.index as usize))
    }
}

impl Handle<PurgesDue, Answer> for Session {
    fn handle(&mut self, due: PurgesDue) -> Answer {
        let listed = self.server.meta.lock_or_recover().purges_due(std::time::Duration::from_millis(due.grace_ms), due.limit as usize);
        let ticket =
            |ino| crate::caller::ticket_for(self.server.ticket_key.as_ref(), self.caller.as_ref(), ino, surge_proto::ticket::PURGE);
        Answer::of::<PurgesDue>(Ok(listed.into_iter().map(|(ino, reach)| PurgeDue { ino, reach, ticket: ticket(ino) }).collect()))
    }
}

impl Handle<Purged, Answer> for Session {
    fn handle(&mut self, purged: Purged) -> Answer {
        let mut meta = self.server.meta.lock_or_recover();
        for ino in purged.inos {
            meta.purged(ino);
        }
        self.server.journal_changes(&mut meta);
        Answer::of::<Purged>(Ok(()))
    }
}
