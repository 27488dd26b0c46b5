//! This server's share of file data. Every file that has chunks here gets one local sparse
//! file, `data/<ino>`, holding those chunks at their offsets in the Surge file. Chunks owned by
//! other servers are holes, which cost nothing, so a read or write needs no offset mapping and
//! the local file system's page cache and extent allocation do the rest.
//!
//! Capacity is accounted in allocated blocks (what the device really holds), against this
//! server's share of the instance's capacity. A write that would go past it fails whole with
//! NoSpace before touching the file, so everything written earlier stays intact.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_meta::InoMap;
use surge_proto::admin::{DataFilePage, DataFileSummary};
use surge_proto::data::{AllocateMode, Extents, MAX_ALLOCATED, MAX_EXTENTS};
use surge_proto::{data_file_name, write_growth, ErrorCode, Ino, LocalData};

/// Open local files kept at once. This machine class allows 20,000 descriptors per process, and
/// a job can touch far more files than that, so handles are cached, not held.
const MAX_OPEN_FILES: usize = 4096;

struct LocalFile {
    file: File,
    /// Allocated bytes of this local file as last accounted.
    allocated: AtomicU64,
    /// Length of this local file (highest byte written here, or truncation point).
    len: AtomicU64,
}

/// The bytes a read will send, still in a local file (see [`DataStore::read_source`]).
pub struct ReadSource {
    local: Arc<LocalFile>,
    pub offset: u64,
    pub len: usize,
}

impl ReadSource {
    pub fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.local.file)
    }
}

pub struct DataStore {
    dir: PathBuf,
    capacity: u64,
    used: AtomicU64,
    /// Set aside for clients on this node writing data files themselves (`reserve_local`).
    reserved: AtomicU64,
    open: Mutex<InoMap<Arc<LocalFile>>>,
    /// The allocation accounted in `used` for each data file not in `open` (found at start,
    /// or dropped from `open`). A data file in neither was made by a client on this node
    /// (under kernel passthrough) and is accounted from nothing once it is opened here.
    accounted: Mutex<InoMap<u64>>,
    /// The largest size a data file here can have (the local file system's limit: ext4's is
    /// 16 TiB, tmpfs's and xfs's 8 EiB). Data files hold chunks at their offsets in the Surge
    /// file, so no Surge file may grow past it.
    largest_file: u64,
    /// Bytes sent in answer to reads and received in writes (statistics).
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    /// Where changes are noted for this share's mirror (see [`crate::mirror`]).
    mirror: Arc<crate::mirror::Feed>,
}

impl DataStore {
    pub fn open(dir: &Path, capacity: u64) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        // A restarted server finds its earlier data: account for it.
        let (mut used, mut accounted) = (0, InoMap::default());
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let allocated = entry.metadata()?.blocks() * 512;
            used += allocated;
            if let Some(ino) = data_file_ino(&entry.file_name()) {
                accounted.insert(ino, allocated);
            }
        }
        // A share the device cannot hold would be promised to users (and reported by `df`)
        // and fail with a device error mid-write instead of a clean ENOSPC at the limit.
        let available = surge_proto::host::available_bytes(dir)?;
        if capacity > available + used {
            let detail = format!(
                "a capacity share of {capacity} bytes does not fit {}: the device has {available} bytes free \
                 (with {used} held here already); ask for less capacity, more servers, or another --root",
                dir.display()
            );
            return Err(io::Error::new(io::ErrorKind::StorageFull, detail));
        }
        Ok(DataStore {
            dir: dir.to_path_buf(),
            capacity,
            used: AtomicU64::new(used),
            reserved: AtomicU64::new(0),
            open: Mutex::new(InoMap::default()),
            accounted: Mutex::new(accounted),
            largest_file: largest_file_in(dir)?,
            read_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            mirror: Arc::new(crate::mirror::Feed::new(1)),
        })
    }

    /// Notes every change of a data file in `feed`, for the share's mirror.
    pub fn with_mirror(mut self, feed: Arc<crate::mirror::Feed>) -> Self {
        self.mirror = feed;
        self
    }

    /// The largest size a file can have here (see the field).
    pub fn largest_file(&self) -> u64 {
        self.largest_file
    }

    /// The inodes of every data file here, in order (anything not named like a data file is
    /// not Surge's: left alone, not listed).
    pub fn data_files(&self) -> Result<Vec<Ino>> {
        let listing = std::fs::read_dir(&self.dir).map_err(|e| ServerError::store("list data directory", e))?;
        let mut inos = Vec::new();
        for entry in listing {
            let entry = entry.map_err(|e| ServerError::store("list data directory", e))?;
            inos.extend(data_file_ino(&entry.file_name()));
        }
        inos.sort_unstable();
        Ok(inos)
    }

    /// Bytes used and set aside.
    pub fn filled(&self) -> u64 {
        self.used().saturating_add(self.reserved.load(Ordering::Relaxed))
    }

    /// The room a write of `len` bytes at `offset` of `ino` needs: all of `len` for a file
    /// not open here, whose length is not at hand.
    pub fn write_growth(&self, ino: Ino, offset: u64, len: u64) -> u64 {
        match self.open.lock().unwrap().get(&ino) {
            Some(file) => write_growth(file.len.load(Ordering::Relaxed), offset, len),
            None => len,
        }
    }

    /// This store's directory as clients on this node can recognise it (see [`LocalData`]).
    /// Its files are only ever changed in place (written, truncated) or removed once no
    /// client has the inode open, so a reader holding one open sees what a read request would.
    pub fn local_data(&self) -> io::Result<LocalData> {
        let dir = std::fs::canonicalize(&self.dir)?;
        let meta = std::fs::metadata(&dir)?;
        Ok(LocalData {
            dir: dir.to_str().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "data directory path is not UTF-8"))?.to_string(),
            boot_id: surge_proto::host::boot_id()?,
            dev: meta.dev(),
            ino: meta.ino(),
            writes: true,
        })
    }

    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::Relaxed)
    }

    pub fn written_bytes(&self) -> u64 {
        self.written_bytes.load(Ordering::Relaxed)
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The data files above `after`, in inode order (a page of `surge fsck`'s scan).
    pub fn data_file_page(&self, after: Option<Ino>) -> Result<DataFilePage> {
        const FILES_PER_PAGE: usize = 4096;
        let mut inos = self.data_files()?;
        inos.retain(|&ino| after.is_none_or(|a| ino > a));
        let more = inos.len() > FILES_PER_PAGE;
        inos.truncate(FILES_PER_PAGE);
        let mut files = Vec::with_capacity(inos.len());
        for ino in inos {
            match std::fs::metadata(self.path(ino)) {
                Ok(m) => files.push(DataFileSummary { ino, len: m.len(), allocated: m.blocks() * 512 }),
                // Purged since it was listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(ServerError::store("stat data file", e)),
            }
        }
        Ok(DataFilePage { files, more })
    }

    /// Where `ino`'s data file is (or would be).
    pub fn path(&self, ino: Ino) -> PathBuf {
        self.dir.join(data_file_name(ino))
    }

    fn local_file(&self, ino: Ino, create: bool) -> Result<Option<Arc<LocalFile>>> {
        if let Some(f) = self.open.lock_or_recover().get(&ino) {
            return Ok(Some(f.clone()));
        }
        let file = match OpenOptions::new().read(true).write(true).create(create).open(self.path(ino)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(ServerError::store("open chunk file", e)),
        };
        let meta = file.metadata().map_err(|e| ServerError::store("stat chunk file", e))?;
        let mut open = self.open.lock_or_recover();
        if let Some(f) = open.get(&ino) {
            return Ok(Some(f.clone())); // opened meanwhile by another request
        }
        let mut accounted = self.accounted.lock_or_recover();
        let allocated = accounted.remove(&ino).unwrap_or(0);
        let local = Arc::new(LocalFile { file, allocated: AtomicU64::new(allocated), len: AtomicU64::new(meta.len()) });
        if open.len() >= MAX_OPEN_FILES {
            // Forget an arbitrary half; in-flight users keep their Arc alive, and what each
            // has accounted is kept for its next opening.
            let victims: Vec<Ino> = open.keys().take(MAX_OPEN_FILES / 2).copied().collect();
            for v in victims {
                if let Some(f) = open.remove(&v) {
                    accounted.insert(v, f.allocated.load(Ordering::Relaxed));
                }
            }
        }
        open.insert(ino, local.clone());
        Ok(Some(local))
    }

    /// Re-reads a local file's allocation after it changed and moves the difference into `used`.
    fn reaccount(&self, local: &LocalFile) {
        if let Ok(meta) = local.file.metadata() {
            let now = meta.blocks() * 512;
            let before = local.allocated.swap(now, Ordering::Relaxed);
            if now >= before {
                self.used.fetch_add(now - before, Ordering::Relaxed);
            } else {
                self.used.fetch_sub(before - now, Ordering::Relaxed);
            }
        }
    }

    /// Fails with NoSpace, before anything is written, if `len` bytes at `offset` could take
    /// this server past its share.
    fn reserve(&self, local: &LocalFile, offset: u64, len: u64) -> Result<()> {
        self.fits(write_growth(local.len.load(Ordering::Relaxed), offset, len))
    }

    /// Fails with NoSpace if `growth` more bytes would take this server past its share.
    fn fits(&self, growth: u64) -> Result<()> {
        let (used, reserved) = (self.used(), self.reserved.load(Ordering::Relaxed));
        if used.saturating_add(reserved).saturating_add(growth) > self.capacity {
            return Err(ServerError::new(
                ErrorCode::NoSpace,
                format!(
                    "server share full: {used} of {} bytes used, {reserved} set aside for local writes, write needs {growth}",
                    self.capacity
                ),
            ));
        }
        Ok(())
    }

    /// Sets `bytes` aside for a client on this node that writes `ino`'s file itself, and
    /// creates the file if need be.
    pub fn reserve_local(&self, ino: Ino, bytes: u64) -> Result<()> {
        self.local_file(ino, true)?;
        self.fits(bytes)?;
        self.reserved.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// A client on this node wrote `ino`'s file itself: takes its length and allocation as
    /// they now are, and gives back `reserved` bytes set aside for it.
    pub fn local_written(&self, ino: Ino, reserved: u64) -> Result<()> {
        let _ = self.reserved.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| Some(r.saturating_sub(reserved)));
        let Some(local) = self.local_file(ino, false)? else { return Ok(()) };
        self.refresh_len(&local)?;
        self.reaccount(&local);
        self.mirror.file_changed(ino, false);
        Ok(())
    }

    /// Re-reads a local file's length (clients on this node may have written past it).
    fn refresh_len(&self, local: &LocalFile) -> Result<u64> {
        let len = local.file.metadata().map_err(|e| ServerError::store("stat chunk file", e))?.len();
        local.len.store(len, Ordering::Relaxed);
        Ok(len)
    }

    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<u32> {
        check_range(offset, data.len() as u64)?;
        if data.is_empty() {
            // Writes nothing, so the file keeps its length: taking `offset` as its new end
            // would serve zeros past the real end and exempt later writes below it from the
            // capacity check.
            return Ok(0);
        }
        let local = self.local_file(ino, true)?.expect("created");
        self.reserve(&local, offset, data.len() as u64)?;
        local.file.write_all_at(data, offset).map_err(|e| ServerError::store("write chunk", e))?;
        local.len.fetch_max(offset + data.len() as u64, Ordering::Relaxed);
        self.reaccount(&local);
        self.written_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.mirror.data_changed(ino, offset, data.len() as u64);
        Ok(data.len() as u32)
    }

    /// Stage-in: copies `len` bytes at `offset` of `source` (a PFS file) into `ino` at the same
    /// offset inside the kernel, without passing them through this process. `Ok(false)`: the
    /// kernel cannot copy between these two file systems; the caller reads and writes instead.
    pub fn copy_from(&self, ino: Ino, offset: u64, len: u64, source: &File) -> Result<bool> {
        check_range(offset, len)?;
        let local = self.local_file(ino, true)?.expect("created");
        self.reserve(&local, offset, len)?;
        let copied = kernel_copy(source, &local.file, offset, len).map_err(|e| ServerError::store("copy from the PFS", e))?;
        let Some(copied) = copied else { return Ok(false) };
        local.len.fetch_max(offset + copied, Ordering::Relaxed);
        self.reaccount(&local);
        self.mirror.data_changed(ino, offset, copied);
        if copied < len {
            return Err(ServerError::new(
                ErrorCode::Io,
                format!("the PFS file ended {} bytes early (did it shrink while being staged?)", len - copied),
            ));
        }
        Ok(true)
    }

    /// Stage-out: copies what this server holds of `ino` in `[offset, offset + len)` into
    /// `target` at the same offset, inside the kernel (what is not held is a hole: zeros
    /// once the target has its size). `Ok(false)`: not possible between these file systems.
    pub fn copy_to(&self, ino: Ino, offset: u64, len: u64, target: &File) -> Result<bool> {
        let Some(local) = self.local_file(ino, false)? else { return Ok(true) };
        let held = local.len.load(Ordering::Relaxed).saturating_sub(offset).min(len);
        if held == 0 {
            return Ok(true);
        }
        Ok(kernel_copy(&local.file, target, offset, held).map_err(|e| ServerError::store("copy to the PFS", e))?.is_some())
    }

    /// Where the bytes of a read are, for sending them to the socket straight from the page
    /// cache (`sendfile`): the local file and how many bytes it has at `offset` (up to `len`).
    pub fn read_source(&self, ino: Ino, offset: u64, len: u32) -> Result<Option<ReadSource>> {
        if len as usize > surge_proto::MAX_PAYLOAD_LEN {
            let detail = format!("a read of {len} bytes: at most {} fit an answer", surge_proto::MAX_PAYLOAD_LEN);
            return Err(ServerError::new(ErrorCode::Invalid, detail));
        }
        check_range(offset, len as u64)?;
        let Some(local) = self.local_file(ino, false)? else { return Ok(None) };
        let available = local.len.load(Ordering::Relaxed).saturating_sub(offset).min(len as u64) as usize;
        self.read_bytes.fetch_add(available as u64, Ordering::Relaxed);
        Ok(Some(ReadSource { local, offset, len: available }))
    }

    /// Reads up to `len` bytes; a short result means this server holds nothing further there
    /// (the client fills holes below the file's size with zeros).
    pub fn read(&self, ino: Ino, offset: u64, len: u32) -> Result<Vec<u8>> {
        let Some(ReadSource { local, len: available, .. }) = self.read_source(ino, offset, len)? else {
            return Ok(Vec::new());
        };
        let mut buf: Vec<u8> = Vec::with_capacity(available);
        while buf.len() < available {
            let filled = buf.len();
            let spare = &mut buf.spare_capacity_mut()[..available - filled];
            // pread straight into the unfilled capacity: no zero-fill pass over the chunk.
            // SAFETY: the kernel writes at most `spare.len()` bytes into memory we own, and
            // only the `n` bytes it reports written are marked initialised.
            let n = unsafe {
                libc::pread(
                    std::os::fd::AsRawFd::as_raw_fd(&local.file),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    (offset + filled as u64) as libc::off_t,
                )
            };
            match n {
                0 => break,
                // SAFETY: the kernel initialised these `n` bytes of the spare capacity.
                n if n > 0 => unsafe { buf.set_len(filled + n as usize) },
                _ => {
                    let err = io::Error::last_os_error();
                    if err.kind() != io::ErrorKind::Interrupted {
                        return Err(ServerError::store("read chunk", err));
                    }
                }
            }
        }
        Ok(buf)
    }

    pub fn truncate(&self, ino: Ino, size: u64) -> Result<()> {
        check_range(size, 0)?;
        let Some(local) = self.local_file(ino, false)? else {
            return Ok(());
        };
        // The file's own length, not the one last accounted: a local writer may be past it.
        if self.refresh_len(&local)? > size {
            local.file.set_len(size).map_err(|e| ServerError::store("truncate chunk file", e))?;
            local.len.store(size, Ordering::Relaxed);
            self.reaccount(&local);
            self.mirror.file_changed(ino, false);
        }
        Ok(())
    }

    pub fn purge(&self, ino: Ino) -> Result<()> {
        let cached = self.open.lock_or_recover().remove(&ino);
        let allocated = match cached {
            Some(local) => local.allocated.load(Ordering::Relaxed),
            None => self.accounted.lock_or_recover().remove(&ino).unwrap_or(0),
        };
        match std::fs::remove_file(self.path(ino)) {
            Ok(()) => {
                self.used.fetch_sub(allocated.min(self.used()), Ordering::Relaxed);
                self.mirror.file_changed(ino, false);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ServerError::store("remove chunk file", e)),
        }
    }

    /// Sets space aside for, punches or zeroes `[offset, offset + len)` of `ino`'s file here
    /// (fallocate(2), the file's length kept). Setting space aside is checked against the
    /// share first, as a write of `len` bytes would be.
    pub fn allocate(&self, ino: Ino, offset: u64, len: u64, mode: AllocateMode) -> Result<()> {
        check_range(offset, len)?;
        if len == 0 {
            return Err(ServerError::new(ErrorCode::Invalid, "fallocate of no bytes"));
        }
        let punching = mode == AllocateMode::PunchHole;
        let Some(local) = self.local_file(ino, !punching)? else {
            return Ok(()); // nothing here to punch
        };
        if !punching {
            self.fits(len)?;
        }
        // Zeroing is a punch and an allocation: one step where the device has ZERO_RANGE,
        // but tmpfs (where burst buffers often live) has not, and readers of a hole see
        // zeros too.
        let steps: &[libc::c_int] = match mode {
            AllocateMode::Reserve => &[0],
            AllocateMode::PunchHole => &[libc::FALLOC_FL_PUNCH_HOLE],
            AllocateMode::ZeroRange => &[libc::FALLOC_FL_PUNCH_HOLE, 0],
        };
        let mut outcome = Ok(());
        for &step in steps {
            if let Err(e) = fallocate(&local.file, libc::FALLOC_FL_KEEP_SIZE | step, offset, len) {
                outcome = Err(match e.raw_os_error() {
                    Some(libc::EOPNOTSUPP) => ServerError::new(ErrorCode::NotSupported, format!("the data directory's file system: {e}")),
                    _ => ServerError::store("fallocate chunk file", e),
                });
                break;
            }
        }
        self.reaccount(&local);
        self.mirror.data_changed(ino, offset, len);
        outcome
    }

    /// The space each of `inos`' data files here takes, in 512-byte units (0 where there is
    /// none): their part of the files' `st_blocks`.
    pub fn allocated(&self, inos: &[Ino]) -> Result<Vec<u64>> {
        if inos.len() > MAX_ALLOCATED {
            return Err(ServerError::new(
                ErrorCode::Invalid,
                format!("allocation of {} files asked at once (at most {MAX_ALLOCATED})", inos.len()),
            ));
        }
        inos.iter()
            .map(|&ino| match std::fs::metadata(self.path(ino)) {
                Ok(meta) => Ok(meta.blocks()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
                Err(e) => Err(ServerError::store("stat chunk file", e)),
            })
            .collect()
    }

    /// The ranges of `ino`'s file here in `[from, to)` that hold data (SEEK_DATA / SEEK_HOLE
    /// on the data file), at most [`MAX_EXTENTS`] of them.
    pub fn extents(&self, ino: Ino, from: u64, to: u64) -> Result<Extents> {
        check_range(from, to.saturating_sub(from))?;
        let mut extents = Extents { ranges: Vec::new(), scanned_to: to };
        let Some(local) = self.local_file(ino, false)? else { return Ok(extents) };
        let seek = |at, whence| seek(&local.file, at, whence).map_err(|e| ServerError::store("seek chunk file", e));
        let mut at = from;
        while at < to {
            if extents.ranges.len() == MAX_EXTENTS {
                extents.scanned_to = at;
                break;
            }
            let Some(start) = seek(at, libc::SEEK_DATA)?.filter(|&start| start < to) else { break };
            // Every file ends in a hole (its end), so SEEK_HOLE from data always answers.
            let end = seek(start, libc::SEEK_HOLE)?.unwrap_or(to).min(to);
            extents.ranges.push((start, end));
            at = end;
        }
        Ok(extents)
    }

    pub fn sync(&self, ino: Ino) -> Result<()> {
        match self.local_file(ino, false)? {
            Some(local) => {
                local.file.sync_data().map_err(|e| ServerError::store("sync chunk file", e))?;
                self.mirror.file_changed(ino, true);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// `lseek` with SEEK_DATA or SEEK_HOLE from `at`; None where the file has no data at or after
/// `at` (ENXIO). Moves only the file's offset, which nothing here uses (I/O goes through
/// pread and pwrite).
pub(crate) fn seek(file: &File, at: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor the file holds open; no memory is passed.
    let found = unsafe { libc::lseek(file.as_raw_fd(), at as libc::off_t, whence) };
    if found >= 0 {
        return Ok(Some(found as u64));
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        e => Err(e),
    }
}

/// `fallocate(2)` of `[offset, offset + len)` with `flags` (offsets checked by the caller).
pub(crate) fn fallocate(file: &File, flags: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on a descriptor the file holds open; no memory is passed.
    match unsafe { libc::fallocate(file.as_raw_fd(), flags, offset as libc::off_t, len as libc::off_t) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The largest size a file in `dir` can have: found by setting a sparse file's size (which
/// allocates nothing), as no call tells a file system's limit.
fn largest_file_in(dir: &Path) -> io::Result<u64> {
    let probe = dir.join(".largest-file-probe");
    let file = OpenOptions::new().create(true).truncate(true).write(true).open(&probe)?;
    let fits = |size: u64| file.set_len(size).is_ok();
    let (mut fitting, mut too_large) = (0u64, i64::MAX as u64 + 1);
    if fits(i64::MAX as u64) {
        fitting = i64::MAX as u64;
    } else {
        while too_large - fitting > 1 {
            let middle = fitting + (too_large - fitting) / 2;
            if fits(middle) {
                fitting = middle;
            } else {
                too_large = middle;
            }
        }
    }
    drop(file);
    std::fs::remove_file(&probe)?;
    Ok(fitting)
}

/// The inode a data file's name names (None: not a data file; left alone).
fn data_file_ino(name: &std::ffi::OsStr) -> Option<Ino> {
    name.to_str().filter(|n| n.len() == 16).and_then(|n| Ino::from_str_radix(n, 16).ok())
}

/// A byte range a client names must end within the largest file offset (i64::MAX): beyond
/// it, sums overflow and the operating system takes offsets as negative.
fn check_range(offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(ServerError::new(ErrorCode::Invalid, format!("bytes {offset}+{len} lie beyond the largest file offset"))),
    }
}

/// `copy_file_range` of `[offset, offset + len)` between two files at the same offsets.
/// `Ok(None)`: unsupported between these file systems (nothing was copied); otherwise the bytes
/// copied, short only where `from` ends.
fn kernel_copy(from: &File, to: &File, offset: u64, len: u64) -> io::Result<Option<u64>> {
    use std::os::fd::AsRawFd;
    let (mut off_in, mut off_out) = (offset as libc::loff_t, offset as libc::loff_t);
    let mut copied = 0u64;
    while copied < len {
        // SAFETY: both descriptors are open; the offsets are ours and updated by the kernel.
        let n = unsafe { libc::copy_file_range(from.as_raw_fd(), &mut off_in, to.as_raw_fd(), &mut off_out, (len - copied) as usize, 0) };
        match n {
            0 => break,
            n if n > 0 => copied += n as u64,
            _ => {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL) if copied == 0 => return Ok(None),
                    _ => return Err(err),
                }
            }
        }
    }
    Ok(Some(copied))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_past_share_fails_whole_and_keeps_earlier_data() {
        let dir = std::env::temp_dir().join(format!("surge-data-test-{}", std::process::id()));
        let store = DataStore::open(&dir, 256 * 1024).unwrap();
        let block = vec![0xabu8; 128 * 1024];
        store.write(1, 0, &block).unwrap();
        let err = store.write(1, 128 * 1024, &vec![1u8; 192 * 1024]).unwrap_err();
        assert_eq!(err.code, ErrorCode::NoSpace);
        assert_eq!(store.read(1, 0, 1 << 20).unwrap(), block);
        store.purge(1).unwrap();
        assert_eq!(store.used(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The store knows the largest file its directory's file system holds, and a write past
    /// it fails as EFBIG (not as an I/O error), leaving nothing behind.
    #[test]
    fn a_write_past_the_largest_file_is_refused_as_too_large() {
        let dir = std::env::temp_dir().join(format!("surge-data-largest-{}", std::process::id()));
        let store = DataStore::open(&dir, 1 << 20).unwrap();
        let largest = store.largest_file();
        assert!(largest >= 1 << 40, "{largest}");
        let probe = File::create(dir.join("probe")).unwrap();
        probe.set_len(largest).unwrap();
        if largest < i64::MAX as u64 {
            assert!(probe.set_len(largest + 1).is_err());
            let err = store.write(1, largest, b"x").unwrap_err();
            assert_eq!(err.code, ErrorCode::FileTooLarge, "{err}");
            assert_eq!(store.used(), 0);
        }
        assert!(!dir.join(".largest-file-probe").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An empty write far out used to become the file's end: reads below it answered zeros
    /// the file does not hold, and writes below it skipped the capacity check.
    #[test]
    fn an_empty_write_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("surge-data-empty-write-{}", std::process::id()));
        let store = DataStore::open(&dir, 1 << 20).unwrap();
        assert_eq!(store.write(1, 1 << 40, &[]).unwrap(), 0);
        assert!(store.read(1, 0, 4096).unwrap().is_empty());
        assert_eq!(store.write(1, 0, &vec![1u8; 2 << 20]).unwrap_err().code, ErrorCode::NoSpace);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A data file a client on this node made and wrote itself (kernel passthrough) is
    /// accounted in full once the client reports it, and given back in full at purge; one
    /// found at start is accounted once, not again when it is opened.
    #[test]
    fn a_data_file_made_by_a_client_is_accounted_once() {
        let dir = std::env::temp_dir().join(format!("surge-data-client-made-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = DataStore::open(&dir, 16 << 20).unwrap();
        std::fs::write(dir.join(data_file_name(7)), vec![1u8; 1 << 20]).unwrap();
        assert_eq!(store.used(), 0, "not reported yet");
        store.local_written(7, 0).unwrap();
        assert_eq!(store.used(), 1 << 20);
        store.local_written(7, 0).unwrap();
        assert_eq!(store.used(), 1 << 20, "counted once");
        drop(store);

        let again = DataStore::open(&dir, 16 << 20).unwrap();
        assert_eq!(again.used(), 1 << 20, "found at start");
        again.write(7, 1 << 20, &[2u8; 4096]).unwrap();
        assert_eq!(again.used(), (1 << 20) + 4096, "only the growth added");
        again.purge(7).unwrap();
        assert_eq!(again.used(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
