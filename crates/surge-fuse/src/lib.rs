//! # surge-fuse — a Surge instance as a POSIX directory
//!
//! Maps the kernel's FUSE requests onto the native client library, so any unmodified program
//! (h5py, tar, git, ffmpeg, a shell) works on an instance. Surge inode numbers are used as
//! FUSE inode numbers unchanged (the root is 1 in both).
//!
//! What a program on the mount may rely on is the instance's close-to-open model
//! (docs/consistency.md): `flush` (every `close(2)`) waits for the handle's writes and
//! publishes size and mtime; an open always asks the file's home server, so it is exact even
//! when a change notice was lost; the attributes and names the kernel keeps (`--cache-secs`)
//! are invalidated as soon as a server's notice says another client changed them
//! ([`kernel::Invalidations`]), and names are never cached as missing (docs/consistency.md,
//! item 7, has the rest: ESTALE for a replaced name, pages kept only at their content version).
//!
//! Layers: [`adapter`] is the thin `Filesystem` of the FUSE session crate (arguments in,
//! replies out) over [`ops`], the operations, each answering an [`ops::Answer`] (a `Result`
//! now, or the work that yields it later, for the runtime), which use the kernel-cache
//! bookkeeping ([`kernel`], `listings`), the handle table (`handles`), the per-handle chunk
//! cache (`chunks`), the delegated directories (`surge_client::Delegations`) and the lock owners
//! (`locks`); `convert` translates between the session's types and Surge's.
//!
//! * **Concurrency**: requests arrive in io_uring ring entries, one queue per CPU served on
//!   that CPU, where the kernel offers it, else from /dev/fuse on the runtime
//!   (docs/fuse-transport.md). Many are in flight at once and replies go out in any order.
//!   What needs no server (a delegated create, a directory's attributes) is answered on the
//!   thread that received it; a plain read, and a write that fits the write-behind window, is
//!   sent from that thread and answered by the connection's reader
//!   ([`surge_client::File::read_then`], [`surge_client::File::write_behind_now`]): no task
//!   per request.
//! * **Large I/O**: 1 MiB writes (`max_write`, the kernel's ceiling) with write-behind, a large
//!   write's data kept in the buffer the session read it into (no copy of the mount's own);
//!   reads served from a per-handle cache of whole chunks for streaming readers (`chunks`),
//!   and a raised kernel read-ahead (set by `main`).
//! * **Listings** are snapshots taken at opendir, with the attributes of the entries homed
//!   with the directory; READDIRPLUS hands those to the kernel with the names (so `ls -l` or
//!   `rm -rf` of a directory another node filled asks no lookup per name), as a lookup would:
//!   the servers then send this mount that inode's change notices, and nothing is handed over
//!   once anything changed after the snapshot or for an inode the kernel already holds
//!   (`Ops::attr_to_give`).
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
mod handles;
pub mod kernel;
mod listings;
mod locks;
pub mod ops;
mod reopens;

pub use adapter::SurgeFs;
pub use ops::Ops;
