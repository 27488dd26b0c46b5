//! Replication between servers: in an instance with two replicas, each server keeps a mirror
//! of its predecessor's whole share (metadata journal and data files) and can take that share
//! over when its predecessor is lost.
//!
//! Server `s` sends its changes to server `(s + 1) mod N` over one connection of its own
//! (a server to server link, authenticated as any client is): first `MirrorOpen`, which empties
//! what the mirror held, then the whole share (a metadata snapshot, every data file) and
//! `MirrorSynced`, after which the mirror is complete; from then on every change as it is made.
//! A mirror that never got `MirrorSynced` cannot be taken over. Requests are pipelined and
//! applied in order; a reply says the change is on the mirror's node (a `sync` one: on its
//! device).
//!
//! The journal travels as the bytes the home writes to its own journal (records framed and
//! checksummed as there), the data as byte ranges read back from the home's data files, so
//! the mirror's directory is a share a server opens as it would its own after a restart.
//!
//! Failover is asked for ([`crate::admin::TakeOver`]) or, in an instance of three servers or
//! more started with a failover delay, automatic: a successor takes its predecessor's share
//! over once it has not reached the predecessor for the delay and a majority of the servers
//! (the successor and those that answer [`crate::admin::CanReach`]) cannot reach it; and a server that cannot reach a majority for half the delay stops answering
//! (fenced) until its mirror takes it back, so that a share is never served from both sides.
//! A fenced server whose mirror says its share was taken over stops for good.

use serde::{Deserialize, Serialize};

use crate::call::service;
use crate::ino::Ino;

/// The server that mirrors server `server`'s share, of `servers` (and takes it over when
/// `server` is lost): the next one. Servers, clients and the command all place mirrors so.
pub fn mirror_of(server: usize, servers: usize) -> usize {
    (server + 1) % servers
}

/// The server whose share server `server` mirrors, of `servers`: the previous one.
pub fn mirrored_by(server: usize, servers: usize) -> usize {
    (server + servers - 1) % servers
}

/// Starts (or restarts) mirroring server `from`'s share here: what the mirror held is
/// dropped, and it is incomplete until `MirrorSynced`. Only a server's successor accepts its
/// mirror, and only while it has not taken the share over.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorOpen {
    pub from: u32,
}

/// A part of the home's metadata snapshot, in order (payload: its bytes); the last part puts
/// the snapshot in place and empties the mirror's journal, as a fold does on the home.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorSnapshot {
    pub last: bool,
}

/// Journal bytes (payload) the home appended at byte `at` of its journal file; the mirror's
/// journal ends after them, and they are on the mirror's device when answered.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorJournal {
    pub at: u64,
}

/// A data file's state over a range: the payload's bytes at `offset`, then `hole` bytes of
/// hole after them, and the file `file_len` long. `sync`: on the device before the answer
/// (the home's file was fsynced).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorData {
    pub ino: Ino,
    pub offset: u64,
    pub hole: u64,
    pub file_len: u64,
    pub sync: bool,
}

/// The home no longer has a data file for `ino`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorPurge {
    pub ino: Ino,
}

/// Everything the home held when mirroring started has been sent: the mirror is complete.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorSynced;

/// Sent by an idle link every second: the mirror still takes this connection's changes (a
/// link that hears nothing for a few seconds is gone; one refused was taken over).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MirrorPing;

service! {
    /// A change to the mirror of a server's share, from that server.
    MirrorRequest => Mirror {
        MirrorOpen -> (), "mirror-open";
        MirrorSnapshot -> (), "mirror-snapshot";
        MirrorJournal -> (), "mirror-journal";
        MirrorData -> (), "mirror-data";
        MirrorPurge -> (), "mirror-purge";
        MirrorSynced -> (), "mirror-synced";
        MirrorPing -> (), "mirror-ping";
    }
}
