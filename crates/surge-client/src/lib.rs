//! # surge-client — the native Surge client library
//!
//! Talks to an instance's servers directly: no gateway, no metadata server.
//! * Metadata requests go to the *home* server of the inode they name: its index is in the
//!   inode number's top bits ([`surge_proto::ino`]). New files are homed with their directory,
//!   so a create is one round trip; new directories are spread over the servers.
//! * File data is cut into chunks (default 1 MiB); chunk `c` of a file lives on server
//!   `(spread(ino) + c) mod N` ([`surge_proto::placement`]). A large request becomes concurrent requests to
//!   several servers.
//! * Operations spanning two servers (mkdir, rename between directories homed on different
//!   servers, removing a directory homed elsewhere) are sequenced here from atomic steps.
//!
//! ## Consistency: close-to-open
//! A writer's data reaches the servers when `pwrite` returns; the file's size and mtime are
//! published at `fsync` and `close`. An `open` (on any node) after that `close` sees the whole
//! file. A rename is atomic on the directory's server: a reader that opens the final name sees
//! either the old file or the complete new one. See `docs/consistency.md`.
//!
//! The API is async (tokio). Paths are absolute within the instance (`/a/b`); the path API does
//! not follow symlinks (use the FUSE mount for that); the `*_at` forms take a parent inode.
//!
//! ## Modules
//! * [`client`]: the [`Client`], its connections ([`conn`]) and the calls sent over them;
//! * [`namespace`] (by inode) and [`paths`] (by path): the namespace API; [`xattrs`]: extended
//!   attributes and POSIX ACLs;
//! * [`file`](mod@file): open files, striped I/O, write-behind and read-ahead, and local I/O on a
//!   server's own node (`local`);
//! * [`workflow`]: following the files published in a directory (closed after writing, or
//!   renamed into it), resumable from a cursor, and handing them to consumer groups;
//! * [`stage`]: staging between the PFS and the instance, through its stage coordinator;
//!   [`target`]: where a burst-buffer path a user gives is, and PFS paths made absolute;
//! * [`delegation`]: a directory held alone, its creates and unlinks answered here and
//!   written back later, and the set of them an adapter keeps (docs/delegation.md);
//!   [`notice_lease`]: whether a server's notices are all in, for a watcher that answers from
//!   what it was told;
//! * [`descriptor`]: instance descriptors and token files; [`options`]: how a client behaves;
//! * [`fsck`]: checking an instance's consistency across its servers, and repairing it;
//!   [`purges`]: the keeper's round that purges what clients left of the files servers ended;
//! * `background`: the answers a step does not wait for (a removed file's purge, a kept
//!   file's read-only release), counted so that a client waits for them before it ends.

mod allocation;
mod background;
pub mod client;
pub mod conn;
pub mod delegation;
pub mod descriptor;
pub mod error;
pub mod file;
pub mod fsck;
pub mod layouts;

mod local;
pub mod locks;
pub mod namespace;
pub mod notice_lease;
pub mod options;
pub mod passthrough;
pub mod paths;
pub mod purges;
pub mod servers;
pub mod stage;
pub mod target;
pub mod workflow;
pub mod xattrs;

pub use client::Client;
pub use conn::{Seen, Watcher};
pub use delegation::{DelegatedDir, Delegations, Named, RECLAIM_FOR};
pub use descriptor::{InstanceDescriptor, Mode};
pub use error::{Error, Result};
pub use file::File;
pub use locks::LockRange;
pub use notice_lease::NoticeLease;
pub use options::{is_this_hosts, ClientOptions, DEFAULT_TIMEOUT};
pub use surge_proto;
pub use surge_proto::placement::Layout;
