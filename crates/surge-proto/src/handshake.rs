//! The first frames of a connection, before any request: the server's challenge, the client's
//! answer, and the server's welcome (or a failure frame, and the connection closes).

use serde::{Deserialize, Serialize};

use crate::types::LocalData;

/// First frame the server sends on a connection (a reply frame with request id 0).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub challenge: [u8; 32],
    pub server_index: u32,
    pub server_count: u32,
    /// The server checks permissions against who the client is, proven by a MUNGE
    /// credential in the hello (see [`crate::identity`]).
    pub wants_identity: bool,
}

/// The client's first frame (a request frame): its session and the answer to the challenge
/// (see [`crate::auth`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub session: u64,
    pub proof: [u8; 32],
    /// A MUNGE credential of the client process whose payload is the challenge in hex, when
    /// the server wants it: who the client is.
    pub identity: Option<String>,
    /// The share the client wants: None for the server's own; another server's index for a
    /// share this server took over from a lost predecessor (see [`crate::mirror`]).
    pub share: Option<u32>,
}

/// Authentication passed. `local`: where this server keeps its file data, for clients on the
/// same node to read and write it without a round trip (see [`LocalData`]). `holds_writers`:
/// the server applies back-pressure ([`crate::workflow::Watermarks`]), so a writer asks which
/// of its writes may wait ([`crate::workflow::WaitsForRoom`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub local: Option<LocalData>,
    pub holds_writers: bool,
}
