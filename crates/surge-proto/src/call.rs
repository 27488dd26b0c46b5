//! Calls: every request a client can make, grouped by the service that answers it
//! ([`crate::namespace`], [`crate::data`], [`crate::stage`], [`crate::admin`]), each a type
//! of its own with the type of its reply ([`Call::Reply`]).
//!
//! On the wire a request frame carries a [`Request`] (the service, then the call); the answer
//! is a reply frame carrying the call's reply, or a failure frame carrying an [`Error`]
//! (crate::error::Error), whatever the call. So the reply needs no tag of its own: whoever
//! sent the call knows what type to decode.
//!
//! Adding an operation: define its type in its service's module, add one line to the
//! service's list (`service!`), and answer it in the server's handler for that service.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::admin::AdminRequest;
use crate::data::DataRequest;
use crate::mirror::MirrorRequest;
use crate::namespace::NamespaceRequest;
use crate::stage::StagingRequest;
use crate::workflow::WorkflowRequest;

/// A request and what answers it.
pub trait Call: Serialize + DeserializeOwned + Into<Request> + Clone + std::fmt::Debug + Send + 'static {
    /// The reply to a call that succeeded.
    type Reply: Serialize + DeserializeOwned + std::fmt::Debug + Send + 'static;
    /// Short name for logs and error messages.
    const NAME: &'static str;
}

/// Any request, by service.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Request {
    Namespace(NamespaceRequest),
    Data(DataRequest),
    Staging(StagingRequest),
    Admin(AdminRequest),
    Workflow(WorkflowRequest),
    Mirror(MirrorRequest),
}

impl Request {
    /// Short name of the call, for logs and error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Namespace(r) => r.name(),
            Request::Data(r) => r.name(),
            Request::Staging(r) => r.name(),
            Request::Admin(r) => r.name(),
            Request::Workflow(r) => r.name(),
            Request::Mirror(r) => r.name(),
        }
    }
}

/// Declares a service: its request enum, one variant per call type (named as the type), and
/// for each call its reply type and name, and its conversion into a [`Request`].
macro_rules! service {
    ($(#[$doc:meta])* $service:ident => $variant:ident { $($call:ident -> $reply:ty, $name:literal;)+ }) => {
        $(#[$doc])*
        #[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
        pub enum $service {
            $($call($call),)+
        }

        impl $service {
            /// Short name of the call, for logs and error messages.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$call(_) => $name,)+
                }
            }
        }

        $(
            impl $crate::call::Call for $call {
                type Reply = $reply;
                const NAME: &'static str = $name;
            }

            impl From<$call> for $service {
                fn from(call: $call) -> Self {
                    $service::$call(call)
                }
            }

            impl From<$call> for $crate::call::Request {
                fn from(call: $call) -> Self {
                    $crate::call::Request::$variant($service::$call(call))
                }
            }
        )+
    };
}
pub(crate) use service;

/// Encodes a reply for a reply frame (or for one request of a batch).
pub fn encode_reply<R: Serialize>(reply: &R) -> Vec<u8> {
    postcard::to_allocvec(reply).expect("Vec writes never fail")
}
