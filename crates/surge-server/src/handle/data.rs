//! The data service: this server's chunks of files ([`crate::data`]), and the room it sets
//! aside for a client on its node that writes them itself.

use surge_proto::data::*;

use super::Answer;
use crate::session::Session;

/// Reads at least this large are sent with `sendfile`: from the page cache to the socket in
/// one copy instead of two (pread into a buffer, then send).
const SENDFILE_MIN: u32 = 128 * 1024;

impl Session {
    pub(super) fn data(&mut self, request: DataRequest, payload: Vec<u8>) -> Answer {
        let data = &self.shared.data;
        match request {
            DataRequest::Write(w) => Answer::of::<Write>(data.write(w.ino, w.offset, &payload)),
            DataRequest::Read(r) if r.len >= SENDFILE_MIN => match data.read_source(r.ino, r.offset, r.len) {
                Ok(Some(source)) => Answer::File(source),
                Ok(None) => Answer::of::<Read>(Ok(())),
                Err(e) => Answer::Failure(e),
            },
            DataRequest::Read(r) => match data.read(r.ino, r.offset, r.len) {
                Ok(bytes) => Answer::Reply { message: Vec::new(), payload: bytes },
                Err(e) => Answer::Failure(e),
            },
            DataRequest::TruncateData(t) => Answer::of::<TruncateData>(data.truncate(t.ino, t.size)),
            DataRequest::PurgeData(p) => Answer::of::<PurgeData>(data.purge(p.ino)),
            DataRequest::SyncData(s) => Answer::of::<SyncData>(data.sync(s.ino)),
            DataRequest::ReserveLocal(r) => {
                let outcome = data.reserve_local(r.ino, r.bytes);
                if outcome.is_ok() {
                    *self.reserved.entry(r.ino).or_default() += r.bytes;
                }
                Answer::of::<ReserveLocal>(outcome)
            }
            DataRequest::LocalWritten(w) => {
                let held = self.reserved.get(&w.ino).copied().unwrap_or(0);
                let released = w.reserved.min(held);
                if held == released {
                    self.reserved.remove(&w.ino);
                } else {
                    self.reserved.insert(w.ino, held - released);
                }
                Answer::of::<LocalWritten>(data.local_written(w.ino, released))
            }
        }
    }
}
