//! The kernel's FUSE structures: `fuse-abi`'s (protocol 7.40), plus what FUSE over io_uring
//! added in 7.42, which that crate predates, and the capability bits this crate negotiates.

pub use fuse_abi::linux::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The protocol minor version this crate speaks: 7.40's structures and 7.42's io_uring.
pub const MINOR_VERSION: u32 = 42;

/// Init flags as one 64-bit set (the kernel splits them into `flags` and `flags2`).
pub mod init {
    use super::*;
    pub const ASYNC_READ: u64 = FUSE_ASYNC_READ as u64;
    pub const POSIX_LOCKS: u64 = FUSE_POSIX_LOCKS as u64;
    pub const EXPORT_SUPPORT: u64 = FUSE_EXPORT_SUPPORT as u64;
    pub const ATOMIC_O_TRUNC: u64 = FUSE_ATOMIC_O_TRUNC as u64;
    pub const BIG_WRITES: u64 = FUSE_BIG_WRITES as u64;
    pub const DONT_MASK: u64 = FUSE_DONT_MASK as u64;
    pub const FLOCK_LOCKS: u64 = FUSE_FLOCK_LOCKS as u64;
    pub const PARALLEL_DIROPS: u64 = FUSE_PARALLEL_DIROPS as u64;
    pub const POSIX_ACL: u64 = FUSE_POSIX_ACL as u64;
    pub const DO_READDIRPLUS: u64 = FUSE_DO_READDIRPLUS as u64;
    pub const READDIRPLUS_AUTO: u64 = FUSE_READDIRPLUS_AUTO as u64;
    pub const MAX_PAGES: u64 = FUSE_MAX_PAGES as u64;
    pub const HANDLE_KILLPRIV_V2: u64 = FUSE_HANDLE_KILLPRIV_V2 as u64;
    pub const INIT_EXT: u64 = FUSE_INIT_EXT as u64;
    pub const PASSTHROUGH: u64 = FUSE_PASSTHROUGH;
    /// Requests through io_uring ring entries instead of reads of /dev/fuse (7.42).
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// Sizes of the regions of a ring entry's header (7.42).
pub const URING_IN_OUT_HEADER_SZ: usize = 128;
pub const URING_OP_IN_OUT_SZ: usize = 128;

/// Where a ring entry's request and reply meet the kernel: the in (request) or out (reply)
/// header, the operation's own header, and the entry's bookkeeping.
#[repr(C)]
#[derive(Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fuse_uring_req_header {
    pub in_out: [u8; URING_IN_OUT_HEADER_SZ],
    pub op_in: [u8; URING_OP_IN_OUT_SZ],
    pub ring_ent_in_out: fuse_uring_ent_in_out,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fuse_uring_ent_in_out {
    pub flags: u64,
    /// What a reply names this entry by (`fuse_uring_cmd_req::commit_id`).
    pub commit_id: u64,
    /// Bytes used in the payload buffer, by the request or by the reply.
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// The command an io_uring `URING_CMD` carries to /dev/fuse (in the SQE's command area).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fuse_uring_cmd_req {
    pub flags: u64,
    pub commit_id: u64,
    pub qid: u16,
    pub padding: [u8; 6],
}

/// `cmd_op` of a ring entry's first command: register the entry (its iovecs: header, payload).
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
/// `cmd_op` of a reply: commit the answer in the entry and wait for the next request in it.
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// The in header's size on the wire.
pub const IN_HEADER_LEN: usize = size_of::<fuse_in_header>();
/// The out header's size on the wire.
pub const OUT_HEADER_LEN: usize = size_of::<fuse_out_header>();

/// A structure from the front of `bytes`, if they are long enough.
pub fn read<T: FromBytes>(bytes: &[u8]) -> Option<T> {
    T::read_from_prefix(bytes).ok().map(|(value, _)| value)
}

/// A structure from the front of `bytes`, zero-filled where the kernel sent less (an older
/// kernel's shorter form of a structure that grew).
pub fn read_padded<T: FromBytes + IntoBytes>(bytes: &[u8]) -> T {
    let mut value = T::new_zeroed();
    let target = value.as_mut_bytes();
    let n = target.len().min(bytes.len());
    target[..n].copy_from_slice(&bytes[..n]);
    value
}
