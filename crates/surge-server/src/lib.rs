//! # surge-server — one node's share of a Surge burst-buffer instance
//!
//! An instance is N of these servers, one per node. Each keeps, in a node-local directory:
//! * the metadata of the inodes homed on it ([`surge_meta`]), served from memory and journaled
//!   to disk ([`surge_meta::journal`]) so that a restart finds it again;
//! * the chunks of file data it owns ([`data`]), as sparse local files, up to its capacity share.
//!
//! There is no central metadata server: clients route each request by inode number (metadata)
//! or chunk index (data), and sequence the few operations that touch two servers. [`conn`]
//! runs one client connection: challenge/response authentication first, then pipelined
//! request frames, each answered by a handler of its service (`handle`) on behalf of the
//! connection's session (`session`: what the connection holds, given back when it ends);
//! connections that cache metadata are told of changes ([`watch`]), and one may hold a
//! directory alone for a while (`delegations`); byte-range locks (`locks`) and the workflow's
//! publication logs and back-pressure (`workflow`) are features of their own, each with its
//! state and its handlers. For
//! staging, every server copies the chunks it owns between the PFS and its store when asked
//! ([`stage_copy`]); the other staging requests go to the stage coordinator the daemon attached
//! beside the server ([`Server::attach_coordinator`]), which is a client of the instance and
//! lives in a crate of its own. In an instance with two replicas each server mirrors its share
//! on the next one and can serve a lost predecessor's share from the mirror it holds
//! ([`mirror`]). This crate depends on the namespace store's crate and the protocol crate.
//!
//! [`Server::bind`] then [`Server::serve`]: the `surge-server` daemon does so in its own
//! process; [`in_process::InProcessInstance`] does so for a whole instance inside a test's.

mod caller;
pub mod conn;
pub mod data;
mod delegations;
mod handle;
pub mod in_process;
mod locks;
pub mod mirror;
mod server;
mod session;
pub mod stage_copy;
pub mod watch;
mod workflow;

pub use server::{Server, ServerConfig, ServerState};
