//! The data service: this server's chunks of files ([`crate::data`]), and the room it sets
//! aside for a client on its node that writes them itself.

use surge_meta::error::{Result, ServerError};
use surge_proto::call::Handle;
use surge_proto::data::*;

use surge_proto::ticket::{Ticket, PURGE, READ, WRITE};
use surge_proto::ErrorCode;

use super::Answer;

use crate::session::Session;

/// Reads at least this large are sent with `sendfile`: from the page cache to the socket in
/// one copy instead of two (pread into a buffer, then send).
const SENDFILE_MIN: u32 = 128 * 1024;

impl Session {
    pub(super) fn data(&mut self, request: DataRequest, payload: Vec<u8>) -> Answer {
        if let Err(e) = self.authorize_data(&request) {
            return Answer::Failure(e);
        }
        let changes = !matches!(
            request,
            DataRequest::Read(_) | DataRequest::DataExtents(_) | DataRequest::Allocated(_) | DataRequest::ReserveLocal(_)
        );
        let answer = request.dispatch(&mut DataCall { session: self, payload });
        // A change is answered once the mirror has it too (while it is in step).
        if changes && matches!(answer, Answer::Reply { .. }) {
            self.mirrored = self.server.replication.feed.barrier();
        }
        answer
    }
}

/// A data request being answered: the connection's session and the frame's payload (the
/// bytes of a write; empty for the other calls).
struct DataCall<'s> {
    session: &'s mut Session,
    payload: Vec<u8>,
}

impl Handle<Write, Answer> for DataCall<'_> {
    fn handle(&mut self, w: Write) -> Answer {
        let payload = std::mem::take(&mut self.payload);
        let data = &self.session.server.data;
        match self.session.server.workflow.write_must_wait(data, w.ino, w.offset, payload.len() as u64).filter(|_| w.may_wait) {
            Some(growth) => self.session.when_room::<Write>(growth, move |data| data.write(w.ino, w.offset, &payload)),
            None => Answer::of::<Write>(data.write(w.ino, w.offset, &payload)),
        }
    }
}

impl Handle<Allocate, Answer> for DataCall<'_> {
    fn handle(&mut self, a: Allocate) -> Answer {
        let data = &self.session.server.data;
        if a.may_wait && a.mode != AllocateMode::PunchHole && self.session.server.workflow.must_wait(data, a.len) {
            return self.session.when_room::<Allocate>(a.len, move |data| data.allocate(a.ino, a.offset, a.len, a.mode));
        }
        Answer::of::<Allocate>(data.allocate(a.ino, a.offset, a.len, a.mode))
    }
}

impl Handle<Read, Answer> for DataCall<'_> {
    fn handle(&mut self, r: Read) -> Answer {
        let data = &self.session.server.data;
        if r.len >= SENDFILE_MIN {
            return match data.read_source(r.ino, r.offset, r.len) {
                Ok(Some(source)) => Answer::File(source),
                Ok(None) => Answer::of::<Read>(Ok(())),
                Err(e) => Answer::Failure(e),
            };
        }
        match data.read(r.ino, r.offset, r.len) {
            Ok(bytes) => Answer::Reply { message: Vec::new(), payload: bytes },
            Err(e) => Answer::Failure(e),
        }
    }
}

impl Handle<TruncateData, Answer> for DataCall<'_> {
    fn handle(&mut self, t: TruncateData) -> Answer {
        Answer::of::<TruncateData>(self.session.server.data.truncate(t.ino, t.size))
    }
}

impl Handle<PurgeData, Answer> for DataCall<'_> {
    fn handle(&mut self, p: PurgeData) -> Answer {
        Answer::of::<PurgeData>(self.session.server.data.purge(p.ino))
    }
}

impl Handle<SyncData, Answer> for DataCall<'_> {
    fn handle(&mut self, s: SyncData) -> Answer {
        Answer::of::<SyncData>(self.session.server.data.sync(s.ino))
    }
}

impl Handle<DataExtents, Answer> for DataCall<'_> {
    fn handle(&mut self, e: DataExtents) -> Answer {
        Answer::of::<DataExtents>(self.session.server.data.extents(e.ino, e.from, e.to))
    }
}

impl Handle<Allocated, Answer> for DataCall<'_> {
    fn handle(&mut self, a: Allocated) -> Answer {
        Answer::of::<Allocated>(self.session.server.data.allocated(&a.inos))
    }
}

impl Handle<ReserveLocal, Answer> for DataCall<'_> {
    fn handle(&mut self, r: ReserveLocal) -> Answer {
        let data = &self.session.server.data;
        // Past the high-water mark room is not set aside: the client's writes then go over
        // the network, where they wait for room ([`Session::when_room`]).
        let outcome = match self.session.server.workflow.past_high_water(data, r.bytes) {
            true => Err(ServerError::new(ErrorCode::NoSpace, "past the high-water mark: no room set aside for local writes")),
            false => data.reserve_local(r.ino, r.bytes),
        };
        if outcome.is_ok() {
            *self.session.reserved.entry(r.ino).or_default() += r.bytes;
        }
        Answer::of::<ReserveLocal>(outcome)
    }
}

impl Handle<LocalWritten, Answer> for DataCall<'_> {
    fn handle(&mut self, w: LocalWritten) -> Answer {
        let reserved = &mut self.session.reserved;
        let held = reserved.get(&w.ino).copied().unwrap_or(0);
        let released = w.reserved.min(held);
        if held == released {
            reserved.remove(&w.ino);
        } else {
            reserved.insert(w.ino, held - released);
        }
        Answer::of::<LocalWritten>(self.session.server.data.local_written(w.ino, released))
    }
}

impl Session {
    /// Where this server checks identities, a data request needs a ticket from the file's
    /// home that names this connection's caller and grants what the request does (root, the
    /// stage coordinator beside the servers among others, needs none).
    fn authorize_data(&self, request: &DataRequest) -> Result<()> {
        let Some(key) = &self.server.ticket_key else { return Ok(()) };
        let Some(caller) = &self.caller else { return Ok(()) };
        if caller.uid == 0 {
            return Ok(());
        }
        let (ino, ticket, right): (_, &Option<Ticket>, _) = match request {
            DataRequest::Write(w) => (w.ino, &w.ticket, WRITE),
            DataRequest::Read(r) => (r.ino, &r.ticket, READ),
            DataRequest::TruncateData(t) => (t.ino, &t.ticket, WRITE),
            DataRequest::PurgeData(p) => (p.ino, &p.ticket, PURGE),
            DataRequest::SyncData(s) => (s.ino, &s.ticket, READ | WRITE),
            DataRequest::ReserveLocal(r) => (r.ino, &r.ticket, WRITE),
            DataRequest::LocalWritten(w) => (w.ino, &w.ticket, WRITE),
            DataRequest::Allocate(a) => (a.ino, &a.ticket, WRITE),
            DataRequest::DataExtents(e) => (e.ino, &e.ticket, READ),
            // Tells only what stat tells: sizes on disk, no content.
            DataRequest::Allocated(_) => return Ok(()),
        };
        match ticket {
            Some(ticket) if ticket.allows(key, ino, caller.uid, right) => Ok(()),
            Some(_) => Err(ServerError::new(
                ErrorCode::AccessDenied,
                format!("{}: the ticket does not grant it to uid {}", request.name(), caller.uid),
            )),
            None => Err(ServerError::new(ErrorCode::AccessDenied, format!("{}: no ticket (open the file first)", request.name()))),
        }
    }
}
