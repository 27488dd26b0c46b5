//! # surge-meta — one server's share of a Surge instance's namespace
//!
//! The inodes whose number carries this server's index, and the entries of the directories
//! among them, with their extended attributes, the directories' workflow state and the
//! delegations granted of them: served from memory, and journaled to disk so that a restart
//! finds them again. The server (`surge-server`) keeps the store behind one mutex held for
//! microseconds (a metadata step is a handful of hash-map updates), runs each namespace
//! request as one method of [`MetaStore`], and appends what the step changed to the journal.
//!
//! * `model`: inodes, directories, entries and [`MetaStore`], with the invariants every step
//!   keeps;
//! * `records`: the store as journal records ([`Record`]): what steps changed, a snapshot,
//!   and records replayed at start;
//! * `ops`: the protocol's steps, by family: entries, directories, rename, attributes,
//!   extended attributes, fsck's scan;
//! * [`workflow`]: directories' publication logs, consumer groups and retention policies;
//! * [`delegated`]: the delegations of this share's directories, as the journal keeps them;
//! * [`purges`]: the files ended here whose data a keeper is still to purge on the servers;
//! * [`journal`]: the records on disk (group commits, snapshots, the replay at start), and
//!   [`formats`]: the earlier formats it still reads, frozen;
//! * [`access`]: the permission checks, made as the kernel makes them; [`error`]: the error
//!   the store and the server answer with;
//! * [`poison_free`]: mutexes that a panic under them does not take down.
//!
//! No networking and no async runtime (`scripts/check-layering.py` checks): the crate depends
//! on the protocol crate's types, not its I/O, so that the store and its journal are tested
//! and fuzzed alone (the fuzz target `journal`). The journal's waits are std futures, and what
//! it writes is told to an [`journal::Observer`] (the server's mirror).

pub mod access;
pub mod delegated;
pub mod error;
pub mod formats;
pub mod journal;
mod model;
mod ops;
pub mod poison_free;
pub mod purges;
mod records;
pub mod workflow;

/// A map keyed by inode number, for the tables every request looks up: hashed with aHash
/// (keyed per process) rather than SipHash. The numbers are the servers' own, or a delegation
/// holder's within the range it was granted.
pub type InoMap<V> = std::collections::HashMap<surge_proto::Ino, V, ahash::RandomState>;

pub use model::MetaStore;
pub use records::{BodyState, EntryState, InodeState, Record, StoredAttr, WorkflowChange, XattrState};
