//! Local I/O: a client on a server's node reads and writes that server's data files itself,
//! the way HDFS's short-circuit reads do, instead of sending requests over TCP.
//!
//! Each server tells its clients where its data directory is ([`surge_proto::LocalData`]); a
//! connection whose server turns out to be on this node knows the directory
//! ([`crate::conn::Connection::local_dir`]). One open file keeps, per such server, the server's
//! data file of its inode open, opened on first use.
//!
//! * **Reads** are one `pread` from the page cache. Exact because a server changes its data
//!   files only in place and removes one only once no client has the inode open.
//! * **Writes** are one `pwrite` (by the local writer's threads, or on the caller's own thread
//!   from the caller's buffer: `File::pwrite_in_place`), within capacity the server set aside for this handle
//!   beforehand (`ReserveLocal`, asked in steps of [`RESERVATION`]), so the instance's capacity
//!   limit holds as for any write. Once the handle flushes or closes, each server it wrote to is
//!   told (`LocalWritten`): it takes the file's new length and allocation into account, and only
//!   from then on does it serve those bytes to clients on other nodes, which is all that
//!   close-to-open promises them.
//!
//! Both are used only while the connection to the server is up (a server that died is not
//! read or written behind its back). A write goes local only when none of the handle's writes
//! to the same server are in flight over the network, and the other way round, so the two
//! never overtake each other (see `WriteBehind::crossing` in the file module).

use std::fs::File as StdFile;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use surge_proto::call::encode_reply;
use surge_proto::{data_file_name, write_growth as growth, ErrorCode, Ino, LocalData};

use crate::conn::{Answer, Pending, Response};
use crate::error::{Error, Result};
use crate::Client;
use surge_proto::placement::Piece;

/// True when, seen from this process, `local.dir` is the directory the server described: same
/// kernel boot, same device and inode. Then its files are the server's own.
pub(crate) fn is_on_this_node(local: &LocalData) -> bool {
    use std::os::unix::fs::MetadataExt;
    let same_kernel = surge_proto::host::boot_id().is_ok_and(|id| id == local.boot_id);
    same_kernel && std::fs::metadata(&local.dir).is_ok_and(|m| m.is_dir() && m.dev() == local.dev && m.ino() == local.ino)
}

/// Capacity asked of a server at a time for one handle's local writes.
pub const RESERVATION: u64 = 16 << 20;

#[derive(Clone, Default)]
enum DataFile {
    #[default]
    NotOpened,
    Open {
        file: Arc<StdFile>,
        writable: bool,
    },
    /// The server is on another node, or its file cannot be opened here: use requests.
    Unavailable,
}

/// One server's data file of this inode and what this handle may still write to it.
#[derive(Clone, Default)]
struct Slot {
    file: DataFile,
    /// Bytes of growth this handle may still cause (reserved and not yet used).
    allowance: u64,
    /// Bytes reserved since the server was last told of this handle's writes.
    reserved: u64,
    /// Written locally since the server was last told.
    written: bool,
    /// The data file's length as far as this handle knows (to tell a write's growth).
    end: u64,
}

/// The data files of one open file on this node's servers.
pub(crate) struct LocalFiles {
    client: Client,
    ino: Ino,
    slots: Mutex<Vec<Slot>>,
    /// Some server has not been told of writes made here yet.
    unreported: AtomicBool,
}

impl Drop for LocalFiles {
    fn drop(&mut self) {
        let held = self.slots.get_mut().map(|slots| slots.iter().filter(|s| matches!(s.file, DataFile::Open { .. })).count()).unwrap_or(0);
        self.client.return_local_files(held);
    }
}

impl LocalFiles {
    pub fn new(client: Client, ino: Ino) -> LocalFiles {
        LocalFiles { client, ino, slots: Mutex::new(Vec::new()), unreported: AtomicBool::new(false) }
    }

    /// Local I/O is on for this client.
    pub fn enabled(&self) -> bool {
        self.client.options().local_io
    }

    /// Some server has not been told of writes made here yet: a read over the network would
    /// not see them (report them first, see [`LocalFiles::take_unreported`]).
    pub fn unreported(&self) -> bool {
        self.unreported.load(Ordering::Relaxed)
    }

    /// Opens `server`'s data file into `slot` if it can be: the server is on this node and its
    /// connection up. Returns whether the slot may be used (`Some`), and if so whether the file
    /// exists yet (`Some(false)`: nothing written there so far; tried again next time).
    fn prepare(&self, server: usize, slot: &mut Slot) -> Option<bool> {
        let conn = self.client.connection_now(server)?;
        match slot.file {
            DataFile::Open { .. } => return Some(true),
            DataFile::Unavailable => return None,
            DataFile::NotOpened => {}
        }
        let Some(dir) = conn.local_dir() else {
            slot.file = DataFile::Unavailable;
            return None;
        };
        if !self.client.take_local_file() {
            return None;
        }
        let path = dir.join(data_file_name(self.ino));
        let opened = match StdFile::options().read(true).write(conn.local_writes()).open(&path) {
            Ok(file) if !conn.local_writes() => Ok((file, false)),
            Ok(file) => Ok((file, true)),
            // Readable but not writable by this user: local reads only.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => StdFile::open(&path).map(|file| (file, false)),
            Err(e) => Err(e),
        };
        match opened {
            Ok((file, writable)) => {
                slot.end = file.metadata().map(|m| m.len()).unwrap_or(0);
                slot.file = DataFile::Open { file: Arc::new(file), writable };
                Some(true)
            }
            Err(e) => {
                self.client.return_local_files(1);
                if e.kind() == std::io::ErrorKind::NotFound {
                    return Some(false);
                }
                slot.file = DataFile::Unavailable;
                None
            }
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        let mut slots = self.slots.lock().unwrap();
        if slots.is_empty() {
            slots.resize(self.client.server_count(), Slot::default());
        }
        slots
    }

    /// Reads `len` bytes at `offset` (within the file's size) when every piece is held by a
    /// server on this node; None otherwise (a mixed request goes out whole, over the network).
    pub fn read(&self, offset: u64, len: u64) -> Option<Result<Vec<u8>>> {
        let mut out = vec![0u8; len as usize];
        self.read_into(offset, &mut out).map(|read| read.map(|()| out))
    }

    /// [`LocalFiles::read`] of `out.len()` bytes into `out`, the caller's buffer (no buffer
    /// of the client's in between).
    pub fn read_into(&self, offset: u64, out: &mut [u8]) -> Option<Result<()>> {
        let mut files: Vec<(Option<Arc<StdFile>>, Piece)> = Vec::with_capacity(2);
        {
            let mut slots = self.slots();
            for piece in self.client.layout().pieces(self.ino, offset, out.len() as u64) {
                let slot = &mut slots[piece.server];
                let file = match (self.prepare(piece.server, slot)?, &slot.file) {
                    (true, DataFile::Open { file, .. }) => Some(file.clone()),
                    _ => None,
                };
                files.push((file, piece));
            }
        }
        for (file, piece) in files {
            let into = &mut out[piece.buf_offset..piece.buf_offset + piece.len as usize];
            // What a data file does not hold (a hole, or past its end) reads as zeros.
            let read = match file {
                Some(file) => match read_at_most(&file, into, piece.file_offset) {
                    Ok(read) => read,
                    Err(e) => return Some(Err(self.io_error("read", piece.file_offset, e))),
                },
                None => 0,
            };
            into[read..].fill(0);
        }
        Some(Ok(()))
    }

    /// Claims a local write of `len` bytes at `offset`: when every piece goes to a server on
    /// this node whose data file this handle may write and has room set aside for, the room is
    /// taken and the files to write come back, with the pieces; None otherwise.
    pub fn claim(&self, offset: u64, len: u64) -> Option<Vec<(Arc<StdFile>, Piece)>> {
        let mut slots = self.slots();
        let pieces: Vec<Piece> = self.client.layout().pieces(self.ino, offset, len).collect();
        for piece in &pieces {
            let slot = &mut slots[piece.server];
            let ready = self.prepare(piece.server, slot)?;
            let writable = matches!(slot.file, DataFile::Open { writable: true, .. });
            if !ready || !writable || growth(slot.end, piece.file_offset, piece.len) > slot.allowance {
                return None;
            }
        }
        self.unreported.store(true, Ordering::Relaxed);
        let mut claimed = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let slot = &mut slots[piece.server];
            let DataFile::Open { file, .. } = &slot.file else { unreachable!("checked above") };
            slot.allowance -= growth(slot.end, piece.file_offset, piece.len);
            slot.end = slot.end.max(piece.file_offset + piece.len);
            slot.written = true;
            claimed.push((file.clone(), piece));
        }
        Some(claimed)
    }

    /// For a local write of `len` bytes at `offset`: None when it cannot be one (a server is
    /// not on this node, or its file is not writable here); otherwise the servers that must
    /// set more capacity aside first, and how much each.
    pub fn shortfall(&self, offset: u64, len: u64) -> Option<Vec<(usize, u64)>> {
        let mut slots = self.slots();
        let mut short: Vec<(usize, u64)> = Vec::new();
        for piece in self.client.layout().pieces(self.ino, offset, len) {
            let slot = &mut slots[piece.server];
            if self.prepare(piece.server, slot)? && !matches!(slot.file, DataFile::Open { writable: true, .. }) {
                return None;
            }
            let need = growth(slot.end, piece.file_offset, piece.len).saturating_sub(slot.allowance);
            if need > 0 || !matches!(slot.file, DataFile::Open { .. }) {
                // (A file that does not exist yet is created by the reservation.)
                match short.iter_mut().find(|(s, _)| *s == piece.server) {
                    Some((_, n)) => *n += need,
                    None => short.push((piece.server, need)),
                }
            }
        }
        Some(short)
    }

    /// `server` set `bytes` aside for this handle.
    pub fn reserved(&self, server: usize, bytes: u64) {
        let mut slots = self.slots();
        slots[server].allowance += bytes;
        slots[server].reserved += bytes;
        self.unreported.store(true, Ordering::Relaxed);
    }

    /// The servers to tell that this handle's local writes are done for now, with the
    /// capacity each set aside; forgets both (the next write reserves afresh).
    pub fn take_unreported(&self) -> Vec<(usize, u64)> {
        if !self.unreported.swap(false, Ordering::Relaxed) {
            return Vec::new();
        }
        let mut slots = self.slots();
        let mut done = Vec::new();
        for (server, slot) in slots.iter_mut().enumerate() {
            if slot.written || slot.reserved > 0 {
                done.push((server, slot.reserved));
                (slot.written, slot.reserved, slot.allowance) = (false, 0, 0);
            }
        }
        done
    }

    /// Writes the pieces [`LocalFiles::claim`] gave for a write of `data` on the calling
    /// thread, straight from `data` (the local writer's threads do it for a write handed to
    /// them).
    pub fn write_claimed(&self, claimed: Vec<(Arc<StdFile>, Piece)>, data: &[u8]) -> Result<()> {
        for (file, piece) in claimed {
            let from = &data[piece.buf_offset..piece.buf_offset + piece.len as usize];
            file.write_all_at(from, piece.file_offset).map_err(|e| self.io_error("write", piece.file_offset, e))?;
        }
        Ok(())
    }

    fn io_error(&self, op: &str, offset: u64, e: std::io::Error) -> Error {
        io_error(op, self.ino, offset, e)
    }
}

fn io_error(op: &str, ino: Ino, offset: u64, e: std::io::Error) -> Error {
    Error::new(ErrorCode::of_store_io(&e), format!("local {op} of inode {ino:#x} at {offset}: {e}"))
}

/// A local write handed to the [`LocalWriter`].
struct Job {
    file: Arc<StdFile>,
    ino: Ino,
    offset: u64,
    data: Bytes,
    done: tokio::sync::oneshot::Sender<Response>,
}

/// Threads that do a client's local writes, so that a writer that keeps writes behind (the
/// FUSE mount) is answered at once and goes on with its next write while the data is copied
/// into the file on another core — as with writes sent to a server, one copy fewer than them
/// and no socket in between. Each server's data file of an inode has one lane, whose writes
/// are done in the order they come (a later write over the same bytes lands last); different
/// data files' writes go on side by side in as many lanes as there are cores (up to
/// `MAX_LANES`), so two streams — two files, or one file striped over this node's servers —
/// are not held to one thread's copying speed.
pub(crate) struct LocalWriter {
    lanes: Vec<std::sync::mpsc::Sender<Job>>,
}

/// At most this many local-writer threads per client.
const MAX_LANES: usize = 4;

impl LocalWriter {
    pub fn start() -> LocalWriter {
        let count = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_LANES);
        let lanes = (0..count)
            .map(|lane| {
                let (jobs, queue) = std::sync::mpsc::channel::<Job>();
                std::thread::Builder::new()
                    .name(format!("surge-local-writer-{lane}"))
                    .spawn(move || {
                        // Ends when the client, holding the sender, goes.
                        for job in queue {
                            let outcome = match job.file.write_all_at(&job.data, job.offset) {
                                Ok(()) => Ok(Answer { message: encode_reply(&(job.data.len() as u32)), payload: Vec::new() }),
                                Err(e) => Err(io_error("write", job.ino, job.offset, e)),
                            };
                            let _ = job.done.send(outcome);
                        }
                    })
                    .expect("start a local writer thread");
                jobs
            })
            .collect();
        LocalWriter { lanes }
    }

    /// Queues `data` to be written at `offset` of `file`, server `server`'s data file of
    /// inode `ino`; the outcome comes through the returned [`Pending`], like a server's answer.
    pub fn submit(&self, file: Arc<StdFile>, ino: Ino, server: usize, offset: u64, data: Bytes) -> Pending {
        let (done, outcome) = tokio::sync::oneshot::channel();
        // A send fails only if the thread is gone; the dropped sender then reads as a failure.
        let _ = self.lanes[lane_of(ino, server, self.lanes.len())].send(Job { file, ino, offset, data, done });
        Pending::local(outcome)
    }
}

/// The lane of server `server`'s data file of inode `ino`, out of `lanes`: inodes spread by a
/// multiplicative hash, and a striped file's data files on consecutive servers take
/// consecutive lanes.
fn lane_of(ino: Ino, server: usize, lanes: usize) -> usize {
    (ino.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(server as u64) % lanes as u64) as usize
}

/// Fills `buf` from `file` at `offset` until the file ends; answers how much it filled (the
/// rest of `buf` is left alone).
fn read_at_most(file: &StdFile, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_striped_files_data_files_take_different_lanes() {
        for ino in [1u64, 2, 0x0001_0000_0000_0007, u64::MAX] {
            assert_ne!(lane_of(ino, 0, 2), lane_of(ino, 1, 2));
            let four: std::collections::HashSet<usize> = (0..4).map(|server| lane_of(ino, server, 4)).collect();
            assert_eq!(four.len(), 4);
        }
        assert!((0..100).all(|ino| lane_of(ino, 3, 1) == 0));
    }

    #[tokio::test]
    async fn writes_to_one_data_file_land_in_the_order_they_came() {
        let dir = std::env::temp_dir().join(format!("surge-local-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        let file = Arc::new(std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&path).unwrap());
        let other = Arc::new(std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(dir.join("other")).unwrap());
        let writer = LocalWriter::start();
        let mut pending = Vec::new();
        for round in 0..200u8 {
            // The same 64 KiB, over and over: the last submitted must be what stays.
            pending.push(writer.submit(file.clone(), 7, 0, 4096, Bytes::from(vec![round; 64 << 10])));
            // Other data files' writes go on in other lanes meanwhile.
            pending.push(writer.submit(other.clone(), 8, 1, u64::from(round) << 16, Bytes::from(vec![round; 64 << 10])));
        }
        for p in pending {
            p.wait_untimed().await.expect("local write");
        }
        let mut back = vec![0u8; 64 << 10];
        file.read_exact_at(&mut back, 4096).unwrap();
        assert!(back.iter().all(|&b| b == 199));
        assert_eq!(std::fs::metadata(dir.join("other")).unwrap().len(), 200 << 16);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
