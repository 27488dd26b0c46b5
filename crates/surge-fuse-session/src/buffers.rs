//! The buffers requests are read into from /dev/fuse, and a write's data handed to the file
//! system without a copy.
//!
//! A write's data reaches a file system that keeps it past the call (write-behind: the data
//! goes to a server or a local writer after the request is answered) through one more copy
//! than the kernel's, out of the session's read buffer into the file system's own. For a
//! large write the session hands the whole read buffer over instead ([`WriteData::to_bytes`]
//! is then a reference to it) and reads the next request into another buffer; the first
//! comes back to a free list when the file system lets go of the data, so a stream of writes
//! cycles through a few buffers whose pages stay mapped. Small writes are copied instead:
//! a handed-over buffer is pinned until its data is written, and pinning a whole buffer for a
//! few KiB would cost more memory than the copy costs time.

use std::ops::Deref;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// A write whose data is at least this large takes the read buffer with it: at least a
/// quarter of the buffer (1 MiB and a page with Surge's `max_write`), so a buffer pinned by
/// write-behind holds at most four times the data it carries.
const HAND_OVER_MIN: usize = 256 << 10;

/// How many free buffers are kept for reuse (beyond that, returned buffers are freed): as many
/// as a write-behind window of a few MiB keeps in flight, so a steady stream allocates none.
const KEEP_FREE: usize = 16;

/// The read buffers of one session's /dev/fuse reader.
pub(crate) struct Buffers {
    size: usize,
    free: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Buffers {
    /// Buffers of `size` bytes (the largest request the kernel may send).
    pub(crate) fn new(size: usize) -> Buffers {
        Buffers { size, free: Arc::new(Mutex::new(Vec::new())) }
    }

    /// A buffer to read the next request into.
    pub(crate) fn take(&self) -> Vec<u8> {
        self.free.lock().unwrap().pop().unwrap_or_else(|| vec![0u8; self.size])
    }

    /// Whether the request in `request` (as read) is a write large enough to take its buffer
    /// along rather than be copied.
    pub(crate) fn worth_handing_over(request: &[u8]) -> bool {
        let opcode = crate::abi::read::<crate::abi::fuse_in_header>(request).map(|h| h.opcode);
        request.len() >= HAND_OVER_MIN && opcode == Some(crate::abi::fuse_opcode::FUSE_WRITE as u32)
    }

    /// Hands `buf`'s first `len` bytes over as shared bytes (returned to the free list once
    /// every reference is dropped) and puts a buffer for the next read in its place.
    pub(crate) fn hand_over(&self, buf: &mut Vec<u8>, len: usize) -> Bytes {
        let taken = std::mem::replace(buf, self.take());
        Bytes::from_owner(Lent { buf: taken, len, home: self.free.clone() })
    }
}

/// A read buffer lent out with the data in its first `len` bytes.
struct Lent {
    buf: Vec<u8>,
    len: usize,
    home: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let mut free = self.home.lock().unwrap();
        if free.len() < KEEP_FREE {
            free.push(std::mem::take(&mut self.buf));
        }
    }
}

/// A write request's data, as the file system receives it: readable in place during the
/// call, and kept past it with [`WriteData::to_bytes`], which copies only when the transport
/// still needs the buffer it came in (small writes, and every write over io_uring, whose ring
/// entry takes the reply and the next request).
#[derive(Debug, Clone, Copy)]
pub struct WriteData<'a> {
    data: &'a [u8],
    /// The whole read buffer `data` lies in, when the session handed it over.
    owner: Option<&'a Bytes>,
}

impl<'a> WriteData<'a> {
    /// `data`, which lies within `owner`.
    pub(crate) fn within(data: &'a [u8], owner: Option<&'a Bytes>) -> WriteData<'a> {
        WriteData { data, owner }
    }

    /// The data, to keep: a reference to the handed-over buffer, or a copy.
    pub fn to_bytes(&self) -> Bytes {
        match self.owner {
            Some(owner) => owner.slice_ref(self.data),
            None => Bytes::copy_from_slice(self.data),
        }
    }

    /// Whether [`WriteData::to_bytes`] costs no copy.
    pub fn is_shared(&self) -> bool {
        self.owner.is_some()
    }
}

impl Deref for WriteData<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{self, fuse_opcode};
    use zerocopy::IntoBytes;

    fn write_request(payload: usize) -> Vec<u8> {
        let header = abi::fuse_in_header {
            len: (abi::IN_HEADER_LEN + payload) as u32,
            opcode: fuse_opcode::FUSE_WRITE as u32,
            ..Default::default()
        };
        let mut buf = header.as_bytes().to_vec();
        buf.resize(abi::IN_HEADER_LEN + payload, 7);
        buf
    }

    #[test]
    fn only_large_writes_take_their_buffer() {
        assert!(Buffers::worth_handing_over(&write_request(1 << 20)));
        assert!(!Buffers::worth_handing_over(&write_request(4096)));
        let mut lookup = write_request(1 << 20);
        lookup[4..8].copy_from_slice(&(fuse_opcode::FUSE_LOOKUP as u32).to_ne_bytes());
        assert!(!Buffers::worth_handing_over(&lookup));
        assert!(!Buffers::worth_handing_over(&[0u8; 8]));
    }

    #[test]
    fn a_handed_over_buffer_comes_back_once_let_go() {
        let buffers = Buffers::new(4096);
        let mut buf = buffers.take();
        buf[..5].copy_from_slice(b"hello");
        let first = buf.as_ptr();
        let whole = buffers.hand_over(&mut buf, 5);
        assert_ne!(buf.as_ptr(), first, "the next read goes into another buffer");
        let data = WriteData::within(&whole[1..4], Some(&whole));
        let kept = data.to_bytes();
        assert!(data.is_shared());
        assert_eq!(&kept[..], b"ell");
        assert_eq!(kept.as_ptr(), whole[1..].as_ptr(), "kept without a copy");
        drop(whole);
        assert!(buffers.free.lock().unwrap().is_empty(), "still referenced by what was kept");
        drop(kept);
        let again = buffers.take();
        assert_eq!(again.as_ptr(), first, "reused once let go");
    }

    #[test]
    fn borrowed_data_is_copied_to_keep() {
        let source = [1u8, 2, 3];
        let data = WriteData::within(&source, None);
        assert!(!data.is_shared());
        let kept = data.to_bytes();
        assert_ne!(kept.as_ptr(), source.as_ptr());
        assert_eq!(&kept[..], &source[..]);
    }

    #[test]
    fn the_free_list_is_bounded() {
        let buffers = Buffers::new(16);
        let lent: Vec<Bytes> = (0..KEEP_FREE + 4)
            .map(|_| {
                let mut buf = buffers.take();
                buffers.hand_over(&mut buf, 1)
            })
            .collect();
        drop(lent);
        assert_eq!(buffers.free.lock().unwrap().len(), KEEP_FREE);
    }
}
