//! The lock calls of the namespace service: `SetLock` and `GetLock` on the files homed here,
//! for owners of the asking connection (see [`super::Locks`]).

use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_proto::call::Handle;
use surge_proto::namespace::{GetLock, SetLock};
use surge_proto::{ErrorCode, Ino};

use super::{Owner, Wanted};
use crate::handle::Answer;
use crate::session::Session;

impl Handle<SetLock, Answer> for Session {
    fn handle(&mut self, s: SetLock) -> Answer {
        self.set_lock(s)
    }
}

impl Handle<GetLock, Answer> for Session {
    fn handle(&mut self, s: GetLock) -> Answer {
        Answer::of::<GetLock>(self.lockable(s.ino).map(|()| {
            let wanted = self.wanted(s.owner, 0, s.kind, s.start, s.end);
            self.server.locks.conflict(s.ino, &wanted)
        }))
    }
}

impl Session {
    /// A lock as the lock table takes it: an owner of this connection's.
    fn wanted(&self, owner: u64, pid: u32, kind: surge_proto::LockKind, start: u64, end: u64) -> Wanted {
        Wanted { owner: Owner { connection: self.lock_connection, owner }, pid, kind, start, end }
    }

    /// Locks are taken on regular files homed here that the caller may open.
    fn lockable(&self, ino: Ino) -> Result<()> {
        let meta = self.server.meta.lock_or_recover();
        let perms = meta.perms(ino)?;
        if perms.attr.kind != surge_proto::FileKind::File {
            return Err(ServerError::new(ErrorCode::Invalid, "locks are taken on regular files"));
        }
        match &self.caller {
            Some(caller) => caller.check_open(perms),
            None => Ok(()),
        }
    }

    /// Takes or gives back a lock; a wait for one is answered later, by a task of its own,
    /// so this connection's other requests go on meanwhile.
    fn set_lock(&mut self, s: SetLock) -> Answer {
        if s.kind != surge_proto::LockKind::Unlock {
            if let Err(e) = self.lockable(s.ino) {
                return Answer::Failure(e);
            }
        }
        let wanted = self.wanted(s.owner, s.pid, s.kind, s.start, s.end);
        match self.server.locks.set(s.ino, &wanted) {
            Err(e) if e.code == ErrorCode::Locked && s.wait => {
                let server = self.server.clone();
                Answer::later::<SetLock>(async move { server.locks.wait(s.ino, wanted).await })
            }
            other => Answer::of::<SetLock>(other),
        }
    }
}
