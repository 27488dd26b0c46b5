//! The mirror service: the predecessor's changes to its share, kept here (see
//! [`crate::mirror::replica`]). Only a server of the instance may send them.

use surge_meta::error::ServerError;
use surge_meta::poison_free::LockRecover;
use surge_proto::mirror::MirrorRequest;
use surge_proto::ErrorCode;

use super::Answer;

use crate::session::Session;

impl Session {
    pub(super) fn mirror(&mut self, request: MirrorRequest, payload: &[u8]) -> Answer {
        let Some(replica) = &self.server.replication.replica else {
            return Answer::Failure(ServerError::new(ErrorCode::NotSupported, "this instance keeps one replica: nothing is mirrored here"));
        };
        // A client of another user must not write a share behind the permission checks.
        if let Err(e) = self.check_administrator(request.name()) {
            return Answer::Failure(e);
        }
        let outcome = replica.lock_or_recover().apply(self.lock_connection, request, payload);
        match outcome {
            Ok(()) => Answer::Reply { message: surge_proto::call::encode_reply(&()), payload: Vec::new() },
            Err(e) => Answer::Failure(e),
        }
    }
}
