//! Answering requests: one module per service, each a set of handlers on the connection's
//! [`Session`], one per call ([`surge_proto::call::Handle`]), to which the service's
//! generated `dispatch` hands each call: a call without a handler does not compile. A
//! handler returns an [`Answer`]: an encoded reply (and payload), a failure, a
//! read to send straight from its data file, or an answer that comes later from a task of its
//! own. The connection ([`crate::conn`]) writes answers out; it knows no request.

mod admin;
mod data;
mod mirror;
mod namespace;
mod staging;
mod xattrs;

use std::future::Future;
use std::pin::Pin;

use surge_meta::error::{Result, ServerError};
use surge_proto::call::encode_reply;
use surge_proto::{Call, Request};

use crate::data::ReadSource;
use crate::session::Session;

/// An answer produced by a task of its own, encoded (such answers carry no payload).
pub(crate) type Later = Pin<Box<dyn Future<Output = Result<Vec<u8>>> + Send>>;

/// What to send for one request.
pub(crate) enum Answer {
    /// A reply (encoded) and its payload, sent in request order.
    Reply {
        message: Vec<u8>,
        payload: Vec<u8>,
    },
    Failure(ServerError),
    /// The bytes of a read, sent from the data file to the socket in one copy.
    File(ReadSource),
    /// Sent when the task completes, out of order (slow requests, or a change whose notices
    /// watchers must acknowledge first).
    Later(Later),
    /// A one-way request: nothing to send.
    Nothing,
    /// Answer (an empty reply), then close the connection and stop the server.
    Stop,
}

impl Answer {
    /// The answer to call `C`.
    pub(crate) fn of<C: Call>(outcome: Result<C::Reply>) -> Answer {
        match outcome {
            Ok(reply) => Answer::Reply { message: encode_reply(&reply), payload: Vec::new() },
            Err(e) => Answer::Failure(e),
        }
    }

    /// The answer to call `C`, computed by `work` in a task of its own.
    pub(crate) fn later<C: Call>(work: impl Future<Output = Result<C::Reply>> + Send + 'static) -> Answer {
        Answer::Later(Box::pin(async move { work.await.map(|reply| encode_reply(&reply)) }))
    }
}

impl Session {
    /// Answers one request (its payload: the bytes of a write).
    pub(crate) fn handle(&mut self, request: Request, payload: Vec<u8>) -> Answer {
        use surge_proto::admin::AdminRequest::{CanReach, Shutdown, StatFs};
        let asks_nothing_of_the_share = matches!(request, Request::Admin(StatFs(_) | Shutdown(_) | CanReach(_)));
        if self.server.replication.fenced.load(std::sync::atomic::Ordering::Relaxed) && !asks_nothing_of_the_share {
            let detail = "this server is cut off from most of its instance and answers nothing, lest its share be served twice";
            return Answer::Failure(ServerError::new(surge_proto::ErrorCode::ServerDown, detail));
        }
        match request {
            Request::Namespace(request) => self.namespace(request),
            Request::Data(request) => self.data(request, payload),
            Request::Staging(request) => request.dispatch(self),
            Request::Admin(request) => self.admin(request),
            Request::Workflow(request) => request.dispatch(self),
            Request::Mirror(request) => self.mirror(request, &payload),
        }
    }
}
