//! The delegation calls: granting (`Delegate`), renewing, giving back and reclaiming a
//! directory's delegation, the holder's `WriteBack` of what it did meanwhile, and the guard
//! every other connection's namespace step (and every scan of the share) passes first.

use surge_meta::access::{EXEC, WRITE};
use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_proto::admin::{BatchOutcome, WriteBack};
use surge_proto::call::Handle;
use surge_proto::namespace::{Delegate, Delegated, GiveBack, NamespaceRequest, Reclaim, Renew, MAX_DELEGATED_INOS};
use surge_proto::{ErrorCode, Ino};

use crate::handle::Answer;
use crate::session::{Session, WrittenBack};

impl Handle<Delegate, Answer> for Session {
    fn handle(&mut self, d: Delegate) -> Answer {
        Answer::of::<Delegate>(self.delegate(d))
    }
}

impl Handle<GiveBack, Answer> for Session {
    fn handle(&mut self, g: GiveBack) -> Answer {
        Answer::of::<GiveBack>(self.give_back(g))
    }
}

impl Handle<Reclaim, Answer> for Session {
    fn handle(&mut self, r: Reclaim) -> Answer {
        Answer::of::<Reclaim>(self.reclaim(r))
    }
}

impl Handle<Renew, Answer> for Session {
    fn handle(&mut self, r: Renew) -> Answer {
        Answer::of::<Renew>(self.renew(r))
    }
}

impl Handle<WriteBack, Answer> for Session {
    fn handle(&mut self, w: WriteBack) -> Answer {
        self.journal_at_end = true;
        let outcomes = (0..)
            .zip(w.steps)
            .map(|(i, step)| match w.first_seq.checked_add(i) {
                Some(seq) => self.written_back(WrittenBack { dir: w.dir, token: w.token, seq }, step),
                None => Err(surge_proto::Error::new(surge_proto::ErrorCode::Invalid, "a write-back's steps are numbered past 2^64")),
            })
            .collect();
        self.journal_at_end = false;
        // One record for the batch (steps of other connections may have journaled some of
        // its changes already, each with its step's mark). The holder forgets what is
        // answered: it must survive a crash of this server.
        let seq = self.server.journal_changes(&mut self.server.meta.lock_or_recover());
        self.durable = Some(seq.max(self.server.journal.last_seq()));
        Answer::of::<WriteBack>(Ok(outcomes))
    }
}

impl Session {
    /// The guard a namespace step of this connection passes before it runs: `Recalling` when
    /// it names what is delegated to another connection (see [`super::Delegations::guard`]).
    pub(crate) fn guard_delegated(&self, request: &NamespaceRequest) -> Result<()> {
        // A write-back's steps were checked against its delegation (`WriteBack`).
        if self.server.delegations.any() && self.written_back.is_none() {
            let mut named = super::named(request);
            if let Some((parent, name)) = super::removed_by_name(request) {
                if let Ok(entry) = self.server.meta.lock_or_recover().lookup(parent, name) {
                    named.push(entry.ino);
                }
            }
            self.server.delegations.guard(self.watcher, &named, false, &self.server.watchers)?;
        }
        Ok(())
    }

    /// The guard a scan of the whole share (`surge fsck`) passes: no directory delegated to
    /// another connection, whose creates not written back would look like orphaned data.
    pub(crate) fn guard_scan(&self) -> Result<()> {
        if !self.server.delegations.any() {
            return Ok(());
        }
        self.server.delegations.guard(self.watcher, &[], true, &self.server.watchers)
    }

    /// Grants directory `d.dir`'s delegation to this connection when rule 1 of
    /// docs/delegation.md allows it (see [`Delegate`]).
    fn delegate(&mut self, d: Delegate) -> Result<Delegated> {
        let refuse = |why: String| Err(ServerError::new(ErrorCode::NotPermitted, format!("no delegation of {:#x}: {why}", d.dir)));
        let Some(me) = self.watcher else {
            return refuse("only a watching connection may hold one (a recall reaches it as a notice)".into());
        };
        if self.server.delegations.stopping() {
            return refuse("the server is stopping".into());
        }
        check_delegated_count(d.count)?;
        let server = self.server.clone();
        // Under the ledger: no step can tell another connection a name of the directory
        // between the check and the grant.
        let mut ledger = server.watchers.lock();
        let mut meta = server.meta.lock_or_recover();
        if let Some(caller) = &self.caller {
            let perms = meta.perms(d.dir)?;
            if caller.uid != perms.attr.uid {
                return refuse(format!("uid {} does not own it", caller.uid));
            }
            caller.check(perms, WRITE | EXEC, "delegate")?;
        }
        meta.delegable(d.dir)?;
        if let Some(holder) = server.delegations.delegated_to(d.dir) {
            let whom = match holder {
                Some(holder) if holder == me => " to this connection",
                Some(_) => "",
                None => " to a holder that may reclaim it",
            };
            return refuse(format!("already delegated{whom}"));
        }
        if ledger.others_hold_names(d.dir, me) {
            return refuse("other clients hold names in it".into());
        }
        // Under the same lock as the grant: no name can be told them in between.
        let forgotten = ledger.take_back_names(d.dir, me);
        let inos = meta.set_aside(d.dir, d.count, d.place_on.map(|s| s as usize))?;
        let group = meta.set_gid_group(d.dir);
        // Never handed out again: the delegation's name for ever.
        let token = inos[0];
        meta.delegation_granted(d.dir, token, inos.clone());
        // Durable before the holder uses it: the numbers must never be handed out again, and
        // the holder must find its delegation after a crash here.
        let seq = server.journal_changes(&mut meta);
        self.durable = self.durable.max(Some(seq));
        server.delegations.grant(d.dir, me, token, inos.clone());
        // Answered once those that keep names exactly forgot the directory's.
        self.awaited.extend(forgotten);
        Ok(Delegated { inos, token, group })
    }

    /// The holder asks for more numbers for its creates (see [`Renew`]); answered once they
    /// are durable, as a grant's.
    fn renew(&mut self, r: Renew) -> Result<Vec<Ino>> {
        check_delegated_count(r.count)?;
        let server = self.server.clone();
        server.delegations.may_renew(self.watcher, r.dir, r.token)?;
        let mut meta = server.meta.lock_or_recover();
        let inos = meta.set_aside(r.dir, r.count, r.place_on.map(|s| s as usize))?;
        meta.delegation_renewed(r.dir, r.token, inos.clone());
        let seq = server.journal_changes(&mut meta);
        self.durable = self.durable.max(Some(seq));
        if !server.delegations.renewed(r.dir, r.token, &inos) {
            return Err(ServerError::new(ErrorCode::NotFound, format!("delegation {:#x} of {:#x} ended", r.token, r.dir)));
        }
        Ok(inos)
    }

    /// The holder gives its delegation up; its end is journaled at once (else a restart
    /// would hold the directory for a holder that is not coming back).
    fn give_back(&mut self, g: GiveBack) -> Result<()> {
        self.server.delegations.give_back(self.watcher, g.dir, g.token)?;
        self.server.journal_changes(&mut self.server.meta.lock_or_recover());
        Ok(())
    }

    /// A holder that lost its connection or its home's restart takes its delegation up again
    /// (see [`Reclaim`]): the last step of its log applied here.
    fn reclaim(&mut self, r: Reclaim) -> Result<u64> {
        let meta = self.server.meta.lock_or_recover();
        let applied = meta.delegation(r.dir, r.token).map(|mark| mark.applied);
        self.server.delegations.reclaim(self.watcher, r.dir, r.token)?;
        applied.ok_or_else(|| ServerError::new(ErrorCode::NotFound, format!("delegation {:#x} of {:#x} is not journaled", r.token, r.dir)))
    }

    /// One step of delegation `mark`'s write-back, checked against the delegation.
    fn written_back(&mut self, mark: WrittenBack, step: NamespaceRequest) -> BatchOutcome {
        if let Err(e) = self.server.delegations.may_write_back(self.watcher, mark.dir, mark.token, &step) {
            return Err(e.into());
        }
        self.written_back = Some(mark);
        let outcome = self.batched(step);
        if let Some(mark) = self.written_back.take() {
            // Not run as a step (it cannot happen for the four kinds a write-back holds; a step
            // must still never be reported applied without its mark).
            // Journaled with the rest of the write-back, at its end.
            self.server.meta.lock_or_recover().delegation_applied(mark.dir, mark.token, mark.seq);
        }
        outcome
    }
}

/// How many numbers a grant or a renewal may set aside: 1 to [`MAX_DELEGATED_INOS`].
fn check_delegated_count(count: u32) -> Result<()> {
    if count == 0 || count > MAX_DELEGATED_INOS {
        return Err(ServerError::new(ErrorCode::Invalid, format!("{count} inode numbers asked for (1 to {MAX_DELEGATED_INOS})")));
    }
    Ok(())
}
