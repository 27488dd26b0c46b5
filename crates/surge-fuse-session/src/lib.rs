//! # surge-fuse-session — the kernel side of a FUSE mount
//!
//! Mounts a file system, speaks the kernel's FUSE protocol (requests decoded in [`request`],
//! typed replies in [`reply`]) and carries it over either transport Linux has: reads and
//! writes of /dev/fuse, or FUSE over io_uring (Linux 6.14+), where requests arrive in ring
//! entries registered per CPU and each reply is one command that also takes the next
//! request ([`Ring`] and the `uring` module have the details). A file system implements
//! [`Filesystem`]; its methods may be called from several threads at once and answer from
//! any thread.
//!
//! A crate of its own rather than the `fuser` crate: fuser has no io_uring transport and keeps
//! its request parsing and replies private, so none can be added beside it. The kernel
//! structures come from `fuse-abi`; the io_uring ones (protocol 7.42) are in [`abi`].
//!
//! Only what a file system like Surge's mount uses is decoded; other requests are answered
//! ENOSYS. Interrupts are not acted on: every request is answered when its work is done.

pub mod abi;
mod buffers;
mod channel;
mod mount;
pub mod reply;
pub mod request;
mod session;
mod uring;

pub use buffers::WriteData;
pub use channel::{BackingId, Notifier};
pub use mount::MountOptions;
pub use reply::{
    FileAttr, FileType, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Time,
};
pub use request::{Caller, LockRange, SetAttr, TimeOrNow};
pub use session::{Filesystem, Flow, KernelConfig, Session, Transport};
pub use uring::Ring;
