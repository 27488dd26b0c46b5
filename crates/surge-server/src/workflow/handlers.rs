//! The workflow service: reading directories' publication logs and handing their files to
//! consumer groups, waiting on the server for the next publication (or a lease that runs
//! out) rather than having readers poll. Claims and acknowledgements are durable before
//! they are answered: a hand-out a consumer heard of survives the server's crash.

use std::sync::Arc;
use std::time::Duration;

use surge_meta::access::READ;
use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_meta::workflow::groups::ClaimOutcome;
use surge_meta::workflow::publications::NamePattern;
use surge_meta::MetaStore;
use surge_proto::call::Handle;
use surge_proto::workflow::*;
use surge_proto::Timestamp;

use crate::handle::Answer;

use crate::server::ServerState;
use crate::session::Session;

impl Handle<Publications, Answer> for Session {
    fn handle(&mut self, read: Publications) -> Answer {
        self.publications(read)
    }
}

impl Handle<Claim, Answer> for Session {
    fn handle(&mut self, claim: Claim) -> Answer {
        self.claim(claim)
    }
}

impl Handle<Done, Answer> for Session {
    fn handle(&mut self, done: Done) -> Answer {
        match self.may_read(done.dir) {
            Ok(()) => self.durably::<Done>(|meta| meta.done(done.dir, done.group.as_deref(), &done.name, done.token, Timestamp::now())),
            Err(e) => Answer::Failure(e),
        }
    }
}

impl Handle<SetRetention, Answer> for Session {
    fn handle(&mut self, set: SetRetention) -> Answer {
        match self.may_change_policy(set.dir) {
            Ok(()) => self.durably::<SetRetention>(|meta| meta.set_retention(set.dir, &set.path, set.policy)),
            Err(e) => Answer::Failure(e),
        }
    }
}

impl Handle<GetRetention, Answer> for Session {
    fn handle(&mut self, get: GetRetention) -> Answer {
        match self.may_read(get.dir) {
            Ok(()) => Answer::of::<GetRetention>(self.server.meta.lock_or_recover().retention(get.dir)),
            Err(e) => Answer::Failure(e),
        }
    }
}

impl Handle<RetentionDue, Answer> for Session {
    fn handle(&mut self, _: RetentionDue) -> Answer {
        Answer::of::<RetentionDue>(Ok(self.server.meta.lock_or_recover().retention_due()))
    }
}

impl Handle<Retained, Answer> for Session {
    fn handle(&mut self, done: Retained) -> Answer {
        let mut meta = self.server.meta.lock_or_recover();
        let outcome = meta.retained(done.dir, done.cursor, done.staged);
        self.server.journal_changes(&mut meta);
        Answer::of::<Retained>(outcome)
    }
}

impl Handle<WaitsForRoom, Answer> for Session {
    fn handle(&mut self, file: WaitsForRoom) -> Answer {
        Answer::of::<WaitsForRoom>(Ok(self.server.meta.lock_or_recover().waits_for_room(file.ino)))
    }
}

impl Handle<QueueStatus, Answer> for Session {
    fn handle(&mut self, status: QueueStatus) -> Answer {
        if let Err(e) = self.may_read(status.dir) {
            return Answer::Failure(e);
        }
        let mut meta = self.server.meta.lock_or_recover();
        let groups = meta.group_status(status.dir, Timestamp::now());
        self.server.journal_changes(&mut meta);
        Answer::of::<QueueStatus>(groups)
    }
}

impl Session {
    /// Runs `change` on the namespace share and answers once its journal record is durable
    /// (in a task of its own: the connection goes on meanwhile).
    fn durably<C: surge_proto::Call>(&self, change: impl FnOnce(&mut MetaStore) -> Result<C::Reply>) -> Answer
    where
        C::Reply: Send + 'static,
    {
        let server = self.server.clone();
        let (outcome, seq) = {
            let mut meta = server.meta.lock_or_recover();
            let outcome = change(&mut meta);
            (outcome, server.journal_changes(&mut meta))
        };
        Answer::later::<C>(async move {
            server.durable(seq).await?;
            outcome
        })
    }

    /// With identities checked, what reads a directory's log or takes from it needs read
    /// permission on the directory.
    fn may_read(&self, dir: surge_proto::Ino) -> Result<()> {
        match &self.caller {
            Some(caller) => {
                let meta = self.server.meta.lock_or_recover();
                meta.perms(dir).and_then(|perms| caller.check(perms, READ, "read the publications of"))
            }
            None => Ok(()),
        }
    }

    /// With identities checked, a directory's policy is set by its owner or root: it removes
    /// files.
    fn may_change_policy(&self, dir: surge_proto::Ino) -> Result<()> {
        match &self.caller {
            Some(caller) => {
                let meta = self.server.meta.lock_or_recover();
                let owner = meta.perms(dir)?.attr.uid;
                if caller.uid != 0 && caller.uid != owner {
                    let detail = format!("only the directory's owner (uid {owner}) or root sets its retention policy");
                    return Err(ServerError::new(surge_proto::ErrorCode::NotPermitted, detail));
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A claim, answered once durable; with nothing to hand out, answered when a publication
    /// or a lease running out gives the group something, or the wait is over.
    fn claim(&mut self, claim: Claim) -> Answer {
        if let Err(e) = self.may_read(claim.dir) {
            return Answer::Failure(e);
        }
        if claim.lease_ms == 0 || claim.lease_ms > MAX_LEASE_MS {
            let e = ServerError::new(surge_proto::ErrorCode::Invalid, format!("a lease is 1 ms to {MAX_LEASE_MS} ms"));
            return Answer::Failure(e);
        }
        let server = self.server.clone();
        let mut published = server.workflow.published.subscribe();
        Answer::later::<Claim>(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(claim.wait_ms.min(MAX_WAIT_MS) as u64);
            loop {
                let (outcome, seq) = {
                    let mut meta = server.meta.lock_or_recover();
                    let outcome =
                        meta.claim(claim.dir, &claim.group, claim.pattern.as_deref(), &claim.consumer, claim.lease_ms, Timestamp::now());
                    (outcome, server.journal_changes(&mut meta))
                };
                let next_expiry = match outcome? {
                    ClaimOutcome::Claimed(claimed) => {
                        server.durable(seq).await?;
                        return Ok(Some(claimed));
                    }
                    ClaimOutcome::Nothing { next_expiry } => next_expiry,
                };
                let mut wake = deadline;
                if let Some(expiry) = next_expiry {
                    wake = wake.min(tokio::time::Instant::now() + until(expiry));
                }
                let woken = tokio::time::timeout_at(wake, published.changed()).await;
                if woken.is_err() && tokio::time::Instant::now() >= deadline {
                    return Ok(None);
                }
            }
        })
    }

    /// A page of a log at once when it has publications for the reader, else later: when
    /// one comes or the wait is over (in a task, so the connection goes on meanwhile).
    fn publications(&mut self, read: Publications) -> Answer {
        let pattern = match read.pattern.as_deref().map(NamePattern::new).transpose() {
            Ok(pattern) => pattern.unwrap_or_default(),
            Err(e) => return Answer::Failure(e),
        };
        if let Some(caller) = &self.caller {
            let meta = self.server.meta.lock_or_recover();
            if let Err(e) = meta.perms(read.dir).and_then(|perms| caller.check(perms, READ, "watch")) {
                return Answer::Failure(e);
            }
        }
        let server = self.server.clone();
        // Subscribed before the first look, so that a publication right after it wakes the wait.
        let mut published = server.workflow.published.subscribe();
        let page = read_page(&server, &read, &pattern);
        let waits = matches!(&page, Ok(page) if page.publications.is_empty()) && read.wait_ms > 0;
        if !waits {
            return Answer::of::<Publications>(page);
        }
        let wait = Duration::from_millis(read.wait_ms.min(MAX_WAIT_MS) as u64);
        Answer::later::<Publications>(async move {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                if tokio::time::timeout_at(deadline, published.changed()).await.is_err() {
                    return read_page(&server, &read, &pattern);
                }
                let page = read_page(&server, &read, &pattern)?;
                if !page.publications.is_empty() {
                    return Ok(page);
                }
            }
        })
    }
}

/// How long from now until wall-clock time `t` (zero if past), plus a millisecond so that
/// the lease has run out when the wait ends.
fn until(t: Timestamp) -> Duration {
    let now = Timestamp::now();
    let ms = (t.secs - now.secs) * 1000 + (t.nanos as i64 - now.nanos as i64) / 1_000_000;
    Duration::from_millis(ms.max(0) as u64 + 1)
}

fn read_page(server: &Arc<ServerState>, read: &Publications, pattern: &NamePattern) -> Result<PublicationPage> {
    let limit = read.limit.clamp(1, MAX_PUBLICATIONS_PAGE) as usize;
    server.meta.lock_or_recover().publications(read.dir, read.after, limit, pattern)
}
