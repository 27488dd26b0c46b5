//! The data service: chunk I/O, sent to the server that holds the chunk (see
//! [`crate::placement`]). File data travels in the frame's payload, never in the message.

use serde::{Deserialize, Serialize};

use crate::call::service;
use crate::ino::Ino;
use crate::ticket::Ticket;

/// Writes the frame's payload at `offset` of the file. Answers the bytes written.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub ino: Ino,
    pub offset: u64,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
    /// Whether the write waits for room past the server's high-water mark (its file is in a
    /// directory something drains, see [`crate::workflow::WaitsForRoom`]); else it is
    /// written while the share has room at all.
    pub may_wait: bool,
}

/// Reads up to `len` bytes at `offset`. The answer's payload holds them (shorter than asked
/// at this server's end of data).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub ino: Ino,
    pub offset: u64,
    pub len: u32,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
}

/// Drops this server's data of `ino` beyond `size`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TruncateData {
    pub ino: Ino,
    pub size: u64,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
}

/// Deletes this server's data of `ino`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PurgeData {
    pub ino: Ino,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
}

/// Makes this server's data of `ino` durable on its device.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SyncData {
    pub ino: Ino,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
}

/// From a client on this server's node that will write `ino`'s data file itself (a local
/// write, see [`crate::LocalData`]): sets `bytes` of the server's share aside for it (NoSpace
/// if they do not fit), and makes sure the file exists. Given back by `LocalWritten`, or when
/// the connection closes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ReserveLocal {
    pub ino: Ino,
    pub bytes: u64,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
}

/// The client stopped writing `ino`'s data file itself for now (a flush or close): the server
/// takes the file's new length and allocation into account and gives back `reserved` bytes
/// set aside by `ReserveLocal`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LocalWritten {
    pub ino: Ino,
    pub reserved: u64,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
}

/// What `Allocate` does to a byte range (the fallocate(2) modes Surge keeps).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocateMode {
    /// Sets space aside for the range (what is there stays): mode 0 and KEEP_SIZE.
    Reserve,
    /// Frees the range, which then reads as zeros: PUNCH_HOLE.
    PunchHole,
    /// Makes the range read as zeros, with space set aside: ZERO_RANGE.
    ZeroRange,
}

/// Allocates, punches or zeroes `[offset, offset + len)` of this server's data of `ino` (the
/// client sends each server the pieces in its chunks). The data file's length stays: the
/// file's size is its home's, changed apart.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Allocate {
    pub ino: Ino,
    pub offset: u64,
    pub len: u64,
    pub mode: AllocateMode,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
    /// Whether it waits for room past the high-water mark, as [`Write::may_wait`].
    pub may_wait: bool,
}

/// The ranges of this server's data of `ino` in `[from, to)` that hold data (the rest are
/// holes), for SEEK_DATA and SEEK_HOLE.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DataExtents {
    pub ino: Ino,
    pub from: u64,
    pub to: u64,
    /// The file's ticket, where servers check identities (see [`crate::ticket`]).
    pub ticket: Option<Ticket>,
}

/// Most ranges one `DataExtents` answer holds (a frame's worth, far below its limit).
pub const MAX_EXTENTS: usize = 4096;

/// The answer to `DataExtents`: data ranges `[start, end)` in order, found up to `scanned_to`
/// (below `to` when the answer is full: ask again from there).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Extents {
    pub ranges: Vec<(u64, u64)>,
    pub scanned_to: u64,
}

/// The space this server's data files of `inos` take, in 512-byte units (0 for a file it
/// holds nothing of), in their order: a file's `st_blocks` is the sum over the servers that
/// may hold its chunks. Asks for no ticket: it tells only what `stat` tells anyone.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    pub inos: Vec<Ino>,
}

/// Most files one `Allocated` asks about (a readdir page's worth).
pub const MAX_ALLOCATED: usize = 4096;

service! {
    /// A data request.
    DataRequest => Data {
        Write -> u32, "write";
        Read -> (), "read";
        TruncateData -> (), "truncate-data";
        PurgeData -> (), "purge-data";
        SyncData -> (), "sync-data";
        ReserveLocal -> (), "reserve-local";
        LocalWritten -> (), "local-written";
        Allocate -> (), "allocate";
        DataExtents -> Extents, "data-extents";
        Allocated -> Vec<u64>, "allocated";
    }
}
