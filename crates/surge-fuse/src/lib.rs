//! # surge-fuse — a Surge instance as a POSIX directory
//!
//! Maps the kernel's FUSE requests onto the native client library, so any unmodified program
//! (h5py, tar, git, ffmpeg, a shell) works on an instance. Surge inode numbers are used as
//! FUSE inode numbers unchanged (the root is 1 in both).
//!
//! Layers: [`adapter`] is the thin `Filesystem` of the FUSE session crate (arguments in, replies out) over
//! [`ops`], the operations, each answering an [`ops::Answer`] (a `Result` now, or the work
//! that yields it later, for the runtime), which use the kernel-cache
//! bookkeeping ([`kernel`], `listings`), the handle table (`handles`) and the per-handle
//! chunk cache (`chunks`); `convert` translates between the session's types and Surge's.
//!
//! * **Concurrency**: where the kernel offers FUSE over io_uring, requests arrive in ring
//!   entries of one queue per CPU, each served by a thread kept on that CPU, so a caller's
//!   request is answered on the CPU it waits on (what needs no server — a delegated create,
//!   a directory's attributes — on that thread at once). Otherwise they are read from
//!   /dev/fuse by a task on the tokio runtime (one thread by default), which decodes each and
//!   starts its work there (`surge-fuse --session-thread` reads on a thread of its own
//!   instead). Either way many requests are in flight at once (FUSE replies may be sent from
//!   any thread, in any order). A plain read (random 4 KiB, nothing cached) is sent to its server at once and
//!   answered by the connection's reader ([`surge_client::File::read_then`]), and a write that
//!   fits the write-behind window is sent and answered at once
//!   ([`surge_client::File::write_behind_now`]): no task per request.
//! * **Large I/O**: 1 MiB writes (`max_write`, the kernel's ceiling) with write-behind, a large
//!   write's data kept in the buffer the session read it into (no copy of the mount's own); async
//!   reads served from a per-handle cache of whole chunks for streaming readers ([`chunks`]),
//!   and a raised kernel read-ahead (set by `main`).
//! * **Kernel caching kept exact by the servers' notices**: the kernel keeps attributes and
//!   names for a long time (`--cache-secs`), so `stat`, path walks and permission checks cost
//!   no round trip, and the mount watches every server ([`surge_client::Client::watch`]): a
//!   change made through another client (another node) to anything this kernel was told about
//!   comes back as a notice, and the entry or attributes are invalidated in the kernel at once
//!   ([`kernel::Invalidations`]). Names are never cached as missing, so a file made on another node is
//!   found at once. Opens stay exact even without notices (a lost connection): an open always
//!   asks the file's home server; an inode that is gone or unlinked (its name was replaced or
//!   removed on another node while the kernel cached it) is refused with ESTALE, which makes
//!   the kernel look the name up again; attributes that differ from what the kernel was told
//!   are invalidated (`inval_inode`), and the page cache is dropped unless the file's content
//!   version is the one its pages hold ([`kernel::KernelCache::open_pages`]). `flush` (every `close(2)`)
//!   waits for the handle's writes and publishes size and mtime.
//! * **Extended attributes and POSIX ACLs** are the inodes' homes' (the kernel enforces the
//!   ACLs). With FUSE_HANDLE_KILLPRIV_V2 the mount clears set-id bits on a write itself, so
//!   the kernel does not ask for `security.capability` before every write.
//! * **Kernel passthrough**: a file held whole by this node's server (an instance of one, a
//!   node-local file) is opened with the server's data file as the kernel's backing file; its
//!   reads and writes never reach the mount (see [`surge_client::passthrough`]).
//! * **Allocation**: `fallocate` (mode 0, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE) and `lseek`'s
//!   SEEK_DATA/SEEK_HOLE go to every server holding part of the range.

pub mod adapter;
mod chunks;
mod convert;
mod delegations;
mod handles;
pub mod kernel;
mod listings;
mod locks;
pub mod ops;

pub use adapter::SurgeFs;
pub use ops::Ops;
