//! The /dev/fuse descriptor: requests read from it, replies and notices written to it, and
//! the backing files of passthrough opens registered through it.
//!
//! Every message goes out in one `writev`, since the kernel takes a message only whole, so
//! replies from any number of threads never interleave. A backing file is unregistered when
//! its handle is dropped (the kernel keeps it while opens use it).

use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use zerocopy::IntoBytes;

use crate::abi;

nix::ioctl_write_ptr!(fuse_backing_open, abi::FUSE_DEV_IOC_MAGIC, 1, abi::fuse_backing_map);
nix::ioctl_write_ptr!(fuse_backing_close, abi::FUSE_DEV_IOC_MAGIC, 2, u32);

/// An open /dev/fuse connection.
pub(crate) struct Dev {
    file: File,
}

impl Dev {
    pub(crate) fn new(fd: OwnedFd) -> Dev {
        Dev { file: File::from(fd) }
    }

    pub(crate) fn raw_fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    pub(crate) fn set_nonblocking(&self) -> io::Result<()> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let flags = OFlag::from_bits_truncate(fcntl(&self.file, FcntlArg::F_GETFL)?);
        fcntl(&self.file, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        Ok(())
    }

    /// Reads one request (the kernel hands out whole requests, one per read).
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.file).read(buf)
    }

    /// Writes one message: the out header and `parts`, in one `writev` (the kernel takes a
    /// message only whole).
    fn write_message(&self, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
        let len = abi::OUT_HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
        let header = abi::fuse_out_header { len: len as u32, error, unique };
        let mut slices = Vec::with_capacity(parts.len() + 1);
        slices.push(IoSlice::new(header.as_bytes()));
        slices.extend(parts.iter().map(|p| IoSlice::new(p)));
        let written = (&self.file).write_vectored(&slices)?;
        if written != len {
            return Err(io::Error::other(format!("the kernel took {written} of a {len}-byte message")));
        }
        Ok(())
    }

    /// Answers request `unique` with `error` (0 or a negative errno) and `parts`.
    pub(crate) fn reply(&self, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
        let parts = if error != 0 { &[][..] } else { parts };
        self.write_message(unique, error, parts)
    }

    /// Sends an unsolicited notice (`code`: a `fuse_notify_code`).
    fn notify(&self, code: abi::fuse_notify_code, parts: &[&[u8]]) -> io::Result<()> {
        self.write_message(0, code as i32, parts)
    }

    pub(crate) fn open_backing(self: &Arc<Self>, file: &File) -> io::Result<BackingId> {
        let map = abi::fuse_backing_map { fd: file.as_raw_fd(), flags: 0, padding: 0 };
        // SAFETY: the ioctl reads a `fuse_backing_map` from the pointer, which lives across
        // the call; the descriptors are open.
        let id = unsafe { fuse_backing_open(self.raw_fd(), &map) }.map_err(io::Error::from)?;
        Ok(BackingId { dev: self.clone(), id: id as u32 })
    }
}

/// A backing file registered with the kernel for passthrough opens; unregistered when dropped
/// (the kernel keeps it while opens use it).
pub struct BackingId {
    dev: Arc<Dev>,
    id: u32,
}

impl BackingId {
    pub(crate) fn id(&self) -> i32 {
        self.id as i32
    }
}

impl Drop for BackingId {
    fn drop(&mut self) {
        // SAFETY: the ioctl reads a u32 from the pointer, which lives across the call.
        if let Err(e) = unsafe { fuse_backing_close(self.dev.raw_fd(), &self.id) } {
            tracing::debug!("backing file {} not closed: {e}", self.id);
        }
    }
}

/// Tells the kernel to drop what it cached, when the file system learns of a change it did
/// not make. Errors say the kernel holds no such inode or name (nothing to drop).
#[derive(Clone)]
pub struct Notifier {
    dev: Arc<Dev>,
}

impl Notifier {
    pub(crate) fn new(dev: Arc<Dev>) -> Notifier {
        Notifier { dev }
    }

    /// Drops `ino`'s cached attributes and its pages from `offset` for `len` bytes (0: to
    /// the end); an `offset` below 0 drops the attributes only.
    pub fn inval_inode(&self, ino: u64, offset: i64, len: i64) -> io::Result<()> {
        let out = abi::fuse_notify_inval_inode_out { ino, off: offset, len };
        self.dev.notify(abi::fuse_notify_code::FUSE_NOTIFY_INVAL_INODE, &[out.as_bytes()])
    }

    /// Drops the cached entry `name` of directory `parent`.
    pub fn inval_entry(&self, parent: u64, name: &std::ffi::OsStr) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let name = name.as_bytes();
        let out = abi::fuse_notify_inval_entry_out { parent, namelen: name.len() as u32, flags: 0 };
        self.dev.notify(abi::fuse_notify_code::FUSE_NOTIFY_INVAL_ENTRY, &[out.as_bytes(), name, b"\0"])
    }
}
