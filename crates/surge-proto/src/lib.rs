//! # surge-proto — the Surge wire protocol
//!
//! Everything a Surge client and a Surge server must agree on, and nothing that does I/O (but
//! for what both do with the operating system, behind the `io` feature: reading and writing
//! frames on tokio streams, [`frame_io`], the streams themselves, TCP or a Unix socket on one
//! node, [`transport`], and telling which boot of which node a process runs on, [`host`]):
//!
//! * [`frame`]: the fixed 20-byte frame header (magic, version, kind, lengths, request id) and
//!   the limits that keep a malformed or hostile peer from making anyone allocate without bound;
//! * [`call`]: every request, grouped by the service that answers it — [`namespace`],
//!   [`data`], [`stage`] (staging), [`admin`] (statistics, batches, change notices) — each a
//!   type with its reply type; [`handshake`]: the frames that open a connection;
//! * [`types`]: the values requests and replies carry (attributes, directory entries ...);
//! * [`error`]: [`ErrorCode`], which maps one-to-one onto POSIX errno values, and [`Error`],
//!   what a failed request is answered with;
//! * [`ino`]: inode numbers, which carry the index of their *home* server in their top bits so any
//!   node can route a metadata request without asking a central service;
//! * [`placement`]: which server holds which chunk of a file, and which homes a new directory;
//! * [`auth`]: the challenge/response that proves a client holds the instance's secret without
//!   sending the secret over the wire;
//! * [`stage`]: what staging between the PFS and an instance asks of the servers and reports;
//! * [`workflow`]: publication logs, what watchers read; [`mirror`]: a server's share
//!   mirrored on its successor, in instances with two replicas;
//! * [`xattr`]: extended attributes' namespaces and limits; [`acl`]: POSIX ACLs in their xattr
//!   form.
//!
//! A frame is `header (20 bytes) | message (postcard, <= MAX_MESSAGE_LEN) | payload (raw bytes,
//! <= MAX_PAYLOAD_LEN)`. Bulk file data travels only in the payload, never inside the encoded
//! message, so neither side copies it through the serializer. A request frame carries a
//! [`Request`]; its answer is a reply frame with the call's reply, or a failure frame with an
//! [`Error`].

pub mod acl;
pub mod admin;
pub mod auth;
pub mod call;
pub mod data;
pub mod error;
pub mod frame;
#[cfg(feature = "io")]
pub mod frame_io;
pub mod handshake;
#[cfg(feature = "io")]
pub mod host;
#[cfg(feature = "io")]
pub mod identity;
pub mod ino;
pub mod mirror;
pub mod namespace;
pub mod placement;
pub mod stage;
pub mod ticket;
#[cfg(feature = "io")]
pub mod transport;
pub mod types;
pub mod workflow;
pub mod xattr;

pub use call::{Call, Request};
pub use error::{Error, ErrorCode};
pub use frame::{FrameError, FrameHeader, FrameKind, FRAME_HEADER_LEN, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN};
pub use ino::{Ino, ROOT_INO};
pub use types::*;
pub use xattr::{XattrNamespace, XattrSetMode};

/// Version of the protocol spoken by this build. A peer announcing another version is refused
/// at the first frame, with an error that names both versions.
pub const PROTOCOL_VERSION: u8 = 25;
