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
}

/// The client's first frame (a request frame): its session and the answer to the challenge
/// (see [`crate::auth`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub session: u64,
    pub proof: [u8; 32],
}

/// Authentication passed. `local`: where this server keeps its file data, for clients on the
/// same node to read and write it without a round trip (see [`LocalData`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub local: Option<LocalData>,
}
