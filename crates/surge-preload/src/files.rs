//! The calls the library serves itself, in terms of the native client: opening and creating
//! regular files, reading, writing, seeking, `stat`, truncating, syncing and closing.
//!
//! Each answers `Ok(Some(..))` when served, `Err(errno)` for a failure to report, or
//! `Ok(None)` when the kernel is to answer instead (through the mount): a directory, a
//! symbolic link to follow, a special file, a permission the owner's bits do not grant
//! ([`crate::paths::owner_grants`]), a set-user-ID or set-group-ID file opened for writing
//! (whose bits a write must clear as the kernel decides), an instance this process cannot
//! reach. So what is served here is what the kernel would have allowed, and the rest is
//! served by the kernel exactly as without the library.
//!
//! Consistency within the process is the kernel's: what one descriptor wrote, a read through
//! another sees (writes are waited for first), and `stat` shows the size a descriptor's
//! unpublished writes reach. Between processes and nodes it is close-to-open, as through the
//! mount: a close publishes, an open asks the file's home.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use surge_client::namespace::OpenedName;
use surge_client::surge_proto::LockKind;
use surge_client::surge_proto::{Attr, AttrChanges, ErrorCode, FileKind, Timestamp};
use surge_client::{File, LockRange, Named};

use crate::descriptors::{self, Description, KEPT_STATUS};
use crate::paths::{owner_grants, owns, Dir, Target};
use crate::process::{Instance, Library};
use crate::report::{self, Call};

/// Served, or None: the kernel's to answer (see the module's words).
pub(crate) type Answer<T> = Result<Option<T>, c_int>;

const READ: u32 = 4;
const WRITE: u32 = 2;
const SEARCH: u32 = 1;
const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;

fn errno(e: surge_client::Error) -> c_int {
    e.errno()
}

/// Opens (or with O_CREAT makes) `target` as open(2) would, as a new description.
pub(crate) fn open(library: &Library, target: &Target, flags: c_int, mode: u32) -> Answer<Arc<Description>> {
    let access = flags & libc::O_ACCMODE;
    if access == libc::O_ACCMODE || flags & (libc::O_DIRECTORY | libc::O_PATH | libc::O_TMPFILE) != 0 {
        return Ok(None);
    }
    let writable = access != libc::O_RDONLY;
    if flags & libc::O_TRUNC != 0 && !writable {
        return Ok(None);
    }
    let Some(instance) = library.instance(&target.mount) else { return Ok(None) };
    let client = instance.client.clone();
    let dir = &target.dir;
    let (file, just_made) = if flags & libc::O_CREAT != 0 {
        // Set-id bits on a file written are the kernel's to clear: such a create is its own.
        if !owner_grants(dir.uid, dir.mode, WRITE | SEARCH) || writable && mode & SET_ID != 0 {
            return Ok(None);
        }
        if let Some(made) = create_delegated(&instance, target, flags, mode, library.umask())? {
            return Ok(Some(described(made, &instance, target, access | (flags & KEPT_STATUS))));
        }
        let Some(file) = create(library, &instance, target, flags, mode)? else { return Ok(None) };
        // Made by this very open when exclusive: its mode does not limit this descriptor.
        (file, flags & libc::O_EXCL != 0)
    } else {
        if !owner_grants(dir.uid, dir.mode, SEARCH) {
            return Ok(None);
        }
        match library.run_settled(client.open_name(target.dir_ino(), &target.name)).map_err(errno)? {
            OpenedName::File(file) => (*file, false),
            OpenedName::Other(entry) => {
                return match entry.kind {
                    FileKind::Symlink if flags & libc::O_NOFOLLOW != 0 => Err(libc::ELOOP),
                    FileKind::Dir if writable => Err(libc::EISDIR),
                    _ => Ok(None),
                }
            }
        }
    };
    // Checked once open (the open answered the attributes): what the owner's bits do not
    // grant is the kernel's to decide.
    if !just_made && !may_open(file.attr_at_open(), access) {
        let _ = library.run(file.close());
        return Ok(None);
    }
    // What other descriptions here wrote, this one reads to (see `read`).
    for other in descriptors::of_ino(file.ino()) {
        file.note_size(other.file.written_through());
    }
    let prepared = library.run(async {
        if flags & libc::O_TRUNC != 0 && file.size() > 0 {
            file.set_len(0).await?;
        }
        if writable {
            // Its close publishes the file (a directory's watchers see it closed after writing).
            file.opened_for_writing();
        }
        file.set_write_behind(client.stream_window()).await
    });
    if writable {
        // Truncated, or about to be written and published.
        instance.cache.changed_here(file.ino());
    }
    if let Err(e) = prepared {
        let _ = library.run(file.close());
        return Err(errno(e));
    }
    Ok(Some(described(file, &instance, target, access | (flags & KEPT_STATUS))))
}

fn described(file: File, instance: &Instance, target: &Target, status: c_int) -> Arc<Description> {
    Arc::new(Description {
        file,
        client: instance.client.clone(),
        cache: instance.cache.clone(),
        path: target.absolute.clone(),
        dev: target.mount.dev,
        position: Mutex::new(0),
        status: AtomicI32::new(status),
        flocked: AtomicI32::new(0),
    })
}

/// A new file made at once in a directory this process holds under a delegation (nothing
/// asked of its home: the delegation's write-back tells it). None: the ordinary path (not
/// held, its numbers used up, or the name exists and O_EXCL was not asked).
fn create_delegated(instance: &Instance, target: &Target, flags: c_int, mode: u32, umask: u32) -> Result<Option<File>, c_int> {
    let Some(delegated) = &target.dir.delegated else { return Ok(None) };
    let (uid, gid) = instance.client.identity();
    instance.cache.name_changed_here(target.dir_ino(), &target.name);
    match delegated.create(&target.name, mode & 0o7777, umask, uid, gid) {
        // Made by this open: its mode does not limit this descriptor, as open(2) says.
        Ok(Some(attr)) => {
            report::count(Call::AnsweredHere);
            Ok(Some(instance.client.file_made_under(delegated, &attr, instance.client.stream_window())))
        }
        Ok(None) => {
            if !delegated.is_held() {
                instance.delegations.give_back(target.dir_ino());
            }
            Ok(None)
        }
        Err(e) if e.code == ErrorCode::Exists && flags & libc::O_EXCL == 0 => Ok(None),
        Err(e) => Err(errno(e)),
    }
}

/// What O_CREAT makes or opens the ordinary way: None where the kernel is to (an existing
/// symbolic link, which O_CREAT follows, or a special file).
fn create(library: &Library, instance: &Instance, target: &Target, flags: c_int, mode: u32) -> Answer<File> {
    let exclusive = flags & libc::O_EXCL != 0;
    let client = &instance.client;
    let made = library.run_settled(client.create_at_with_umask(target.dir_ino(), &target.name, mode & 0o7777, library.umask(), exclusive));
    changed(instance, target, &made, Some(Named::NotDirectory));
    match made {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.code == ErrorCode::Exists => Err(libc::EEXIST),
        // Something other than a regular file has the name.
        Err(e) if e.code == ErrorCode::Invalid || e.code == ErrorCode::IsDir => {
            match library.run(client.lookup(target.dir_ino(), &target.name)) {
                Ok(attr) if attr.kind == FileKind::Dir => Err(libc::EISDIR),
                Ok(attr) if attr.kind == FileKind::Symlink && flags & libc::O_NOFOLLOW != 0 => Err(libc::ELOOP),
                Ok(_) => Ok(None),
                Err(e) => Err(errno(e)),
            }
        }
        Err(e) => Err(errno(e)),
    }
}

/// Whether the owner's bits grant an open with `access` (O_RDONLY, O_WRONLY, O_RDWR), and the
/// open is one the library may serve.
fn may_open(attr: &Attr, access: c_int) -> bool {
    let want = match access {
        libc::O_RDONLY => READ,
        libc::O_WRONLY => WRITE,
        _ => READ | WRITE,
    };
    // A write or truncate clears set-id bits by rules that are the kernel's to apply.
    let set_id_written = access != libc::O_RDONLY && attr.mode & SET_ID != 0;
    attr.kind == FileKind::File && !set_id_written && owner_grants(attr.uid, attr.mode, want)
}

/// Reads into `buf` at `at`, or at the description's offset (which then moves).
pub(crate) fn read(library: &Library, d: &Description, buf: &mut [u8], at: Option<u64>) -> Result<usize, c_int> {
    if !d.readable() {
        return Err(libc::EBADF);
    }
    let mut position = d.position.lock().unwrap_or_else(|e| e.into_inner());
    let offset = at.unwrap_or(*position);
    // What another description here wrote is read back too.
    for other in descriptors::of_ino(d.file.ino()) {
        if other.file.unpublished_end().is_some() && !std::ptr::eq(Arc::as_ptr(&other), d) {
            library.run(other.file.wait_writes()).map_err(errno)?;
            d.file.note_size(other.file.written_through());
        }
    }
    // Straight into the caller's buffer where the data is on this node.
    let read = match d.file.read_local_into(offset, buf) {
        Some(read) => read.map_err(errno)?,
        None => {
            let bytes = library.run(d.file.pread(offset, buf.len())).map_err(errno)?;
            buf[..bytes.len()].copy_from_slice(&bytes);
            bytes.len()
        }
    };
    if at.is_none() {
        *position = offset + read as u64;
    }
    Ok(read)
}

/// Writes `data` at `at`, or at the description's offset (the end with O_APPEND).
pub(crate) fn write(library: &Library, d: &Description, data: &[u8], at: Option<u64>) -> Result<usize, c_int> {
    if !d.writable() {
        return Err(libc::EBADF);
    }
    let mut position = d.position.lock().unwrap_or_else(|e| e.into_inner());
    let written = library.run(async {
        match at {
            // pwrite on an O_APPEND descriptor appends on Linux, too.
            _ if d.has(libc::O_APPEND) => d.file.append(bytes::Bytes::copy_from_slice(data)).await.map(|offset| (offset, data.len())),
            Some(offset) => d.file.pwrite_in_place(offset, data).await.map(|n| (offset, n)),
            None => d.file.pwrite_in_place(*position, data).await.map(|n| (*position, n)),
        }
    });
    d.cache.changed_here(d.file.ino());
    let (offset, n) = written.map_err(errno)?;
    if at.is_none() {
        *position = offset + n as u64;
    }
    if d.has(libc::O_SYNC) || d.has(libc::O_DSYNC) {
        library.run(d.file.fsync()).map_err(errno)?;
    }
    Ok(n)
}

pub(crate) fn seek(d: &Description, offset: i64, whence: c_int) -> Result<u64, c_int> {
    let mut position = d.position.lock().unwrap_or_else(|e| e.into_inner());
    let size = d.file.size();
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => *position as i64,
        libc::SEEK_END => size as i64,
        // The whole file is data: holes are not told apart here (as many file systems).
        libc::SEEK_DATA if offset >= 0 && (offset as u64) < size => 0,
        libc::SEEK_HOLE if offset >= 0 && (offset as u64) < size => {
            *position = size;
            return Ok(size);
        }
        libc::SEEK_DATA | libc::SEEK_HOLE => return Err(libc::ENXIO),
        _ => return Err(libc::EINVAL),
    };
    let target = base.checked_add(offset).filter(|t| *t >= 0).ok_or(libc::EINVAL)?;
    *position = target as u64;
    Ok(*position)
}

/// The file's attributes (kept here, or from its home), with the size this process's writes
/// reached.
pub(crate) fn stat(library: &Library, d: &Description) -> Result<Attr, c_int> {
    let ino = d.file.ino();
    if let Some(attr) = d.cache.attr(ino) {
        report::count(Call::StatKept);
        return Ok(with_own_writes(attr));
    }
    let (epoch, sent) = (d.cache.epoch(), Instant::now());
    let attr = library.run_settled(d.client.getattr(ino)).map_err(errno)?;
    d.cache.keep(epoch, sent, None, &attr);
    Ok(with_own_writes(attr))
}

/// `stat` of a name, with the block size to report: None for what the kernel answers (a
/// symbolic link followed, a directory it cannot search as its owner).
pub(crate) fn stat_name(library: &Library, target: &Target, follow: bool) -> Answer<(Attr, u32)> {
    if !owner_grants(target.dir.uid, target.dir.mode, SEARCH) {
        return Ok(None);
    }
    let Some(instance) = library.instance(&target.mount) else { return Ok(None) };
    let (client, cache, dir) = (&instance.client, &instance.cache, target.dir_ino());
    let attr = match cache.lookup(dir, &target.name) {
        Some(attr) => {
            report::count(Call::StatKept);
            attr
        }
        None => {
            cache.missed(dir);
            let (epoch, sent) = (cache.epoch(), Instant::now());
            let attr = library.run_settled(client.lookup(dir, &target.name)).map_err(errno)?;
            cache.keep(epoch, sent, Some((dir, &target.name)), &attr);
            attr
        }
    };
    if follow && attr.kind == FileKind::Symlink {
        return Ok(None);
    }
    Ok(Some((with_own_writes(attr), client.chunk_size() as u32)))
}

/// `attr` with the size the writes of this process's descriptions reach.
fn with_own_writes(mut attr: Attr) -> Attr {
    for d in descriptors::of_ino(attr.ino) {
        if let Some(end) = d.file.unpublished_end() {
            attr.size = attr.size.max(end);
        }
    }
    attr
}

pub(crate) fn truncate(library: &Library, d: &Description, len: u64) -> Result<(), c_int> {
    if !d.writable() {
        return Err(libc::EINVAL);
    }
    d.cache.changed_here(d.file.ino());
    library.run(d.file.set_len(len)).map_err(errno)?;
    for other in descriptors::of_ino(d.file.ino()) {
        other.file.note_resize(len);
    }
    Ok(())
}

/// fsync(2): the file's data and size durable, and every step this process answered under a
/// delegation written back before (a program that syncs a file may count on the names it made
/// before it).
pub(crate) fn sync(library: &Library, d: &Description) -> Result<(), c_int> {
    let synced = library.run_settled(d.file.fsync()).map_err(errno);
    d.cache.changed_here(d.file.ino());
    synced
}

/// The last number of `d` was closed: its flock given back, its writes waited for and
/// published, and the handle released (what close(2) reports, as through the mount). A
/// handle that has nothing to publish is released without waiting for its home, as the
/// kernel releases a mount's after close(2) returned.
pub(crate) fn close(library: &Library, d: Arc<Description>) -> Result<(), c_int> {
    if d.flocked.swap(0, Ordering::Relaxed) != 0 {
        let _ = unlock(library, &d);
    }
    if !d.writable() && d.file.release_unwaited() {
        return Ok(());
    }
    let released = library.run(d.file.release()).map_err(errno);
    if d.writable() {
        // Published: its size and times are the home's now.
        d.cache.changed_here(d.file.ino());
    }
    released
}

/// flock(2) on a served file: a whole-file lock at the file's home, whose owner is the
/// description (so it excludes other descriptions, processes and nodes, and the mount's
/// users, as the kernel's flock does). A blocking wait cannot be interrupted by a signal.
pub(crate) fn flock(library: &Library, d: &Description, operation: c_int) -> Result<(), c_int> {
    let kind = match operation & !libc::LOCK_NB {
        libc::LOCK_SH => LockKind::Read,
        libc::LOCK_EX => LockKind::Write,
        libc::LOCK_UN => LockKind::Unlock,
        _ => return Err(libc::EINVAL),
    };
    let wait = operation & libc::LOCK_NB == 0 && kind != LockKind::Unlock;
    let taken = library.run(d.client.set_lock(d.file.ino(), whole_file(d, kind), wait)).map_err(|e| match e.code {
        ErrorCode::Locked => libc::EWOULDBLOCK,
        _ => errno(e),
    });
    taken?;
    let held = if kind == LockKind::Unlock { 0 } else { operation & !libc::LOCK_NB };
    d.flocked.store(held, Ordering::Relaxed);
    Ok(())
}

/// Gives back the description's flock.
pub(crate) fn unlock(library: &Library, d: &Description) -> Result<(), c_int> {
    library.run(d.client.set_lock(d.file.ino(), whole_file(d, LockKind::Unlock), false)).map_err(errno)
}

/// The whole file, as `d`'s (its address names the owner within this process's connection).
fn whole_file(d: &Description, kind: LockKind) -> LockRange {
    LockRange { owner: d as *const Description as u64, pid: std::process::id(), kind, start: 0, end: u64::MAX }
}

/// Whether the process may add and remove names in `dir` by a rule decided here: as its
/// owner, with the write and search bits, in a directory without the sticky bit (whose rules
/// on who may remove a name are the kernel's to apply).
fn may_change_names(dir: &Dir) -> bool {
    dir.mode & libc::S_ISVTX == 0 && owner_grants(dir.uid, dir.mode, WRITE | SEARCH)
}

/// A name of `target`'s directory was changed the ordinary way (`outcome`; `now`: what the
/// name names after it): a delegation of the directory, held or asked for, learns it, and one
/// is asked for once such changes come often there.
fn changed<T, E>(instance: &Instance, target: &Target, outcome: &Result<T, E>, now: Option<Named>) {
    let dir = target.dir_ino();
    instance.cache.name_changed_here(dir, &target.name);
    instance.delegations.changed(dir, &target.name, outcome.as_ref().map(|_| now).map_err(|_| ()));
    if outcome.is_ok() {
        instance.delegations.stepped_in(dir, true);
    }
}

/// unlink(2) of a name (a directory is refused EISDIR by its home, as Linux does); answered
/// at once in a directory held under a delegation.
pub(crate) fn unlink(library: &Library, target: &Target) -> Answer<()> {
    if !may_change_names(&target.dir) {
        return Ok(None);
    }
    let Some(instance) = library.instance(&target.mount) else { return Ok(None) };
    if let Some(delegated) = &target.dir.delegated {
        instance.cache.name_changed_here(target.dir_ino(), &target.name);
        match delegated.unlink(&target.name) {
            Ok(true) => {
                report::count(Call::AnsweredHere);
                return Ok(Some(()));
            }
            Ok(false) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    let removed = library.run_settled(instance.client.unlink_at(target.dir_ino(), &target.name));
    changed(&instance, target, &removed, None);
    removed.map(Some).map_err(errno)
}

/// mkdir(2), with the process's umask (or the parent's default ACL); answered at once in a
/// directory held under a delegation.
pub(crate) fn mkdir(library: &Library, target: &Target, mode: u32) -> Answer<()> {
    if !may_change_names(&target.dir) {
        return Ok(None);
    }
    let Some(instance) = library.instance(&target.mount) else { return Ok(None) };
    let (mode, umask) = (mode & 0o7777, library.umask());
    if let Some(delegated) = &target.dir.delegated {
        let (uid, gid) = instance.client.identity();
        instance.cache.name_changed_here(target.dir_ino(), &target.name);
        match delegated.mkdir(&target.name, mode, umask, uid, gid) {
            Ok(Some(_)) => {
                report::count(Call::AnsweredHere);
                return Ok(Some(()));
            }
            Ok(None) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    let made = library.run_settled(instance.client.mkdir_at_with_umask(target.dir_ino(), &target.name, mode, umask));
    changed(&instance, target, &made, Some(Named::Other));
    made.map(|_| Some(())).map_err(errno)
}

/// rmdir(2) of an empty directory.
pub(crate) fn rmdir(library: &Library, target: &Target) -> Answer<()> {
    if !may_change_names(&target.dir) {
        return Ok(None);
    }
    let Some(instance) = library.instance(&target.mount) else { return Ok(None) };
    let removed = library.run_settled(instance.client.rmdir_at(target.dir_ino(), &target.name));
    changed(&instance, target, &removed, None);
    removed.map(Some).map_err(errno)
}

/// Whether this process owns the served file, and so may set its times and (without set-id
/// bits, whose rules on groups are the kernel's) its mode here: every other case of futimens
/// and fchmod is the kernel's to decide.
pub(crate) fn owner_may_change(d: &Description, mode: Option<u32>) -> bool {
    owns(d.file.attr_at_open().uid) && mode.is_none_or(|mode| mode & SET_ID == 0)
}

/// futimens(2) on a served file (see [`owner_may_change`]). A time set after writes stays:
/// no description's close replaces it.
pub(crate) fn set_times(library: &Library, d: &Description, atime: Option<Timestamp>, mtime: Option<Timestamp>) -> Result<(), c_int> {
    let ino = d.file.ino();
    let changes = AttrChanges { atime, mtime, ..Default::default() };
    // A file made under a delegation and not written back yet has its times set in the log.
    d.cache.changed_here(ino);
    if !library.instances().iter().any(|instance| instance.delegations.set_times(ino, &changes).is_some()) {
        library.run_settled(d.client.setattr(ino, changes)).map_err(errno)?;
    }
    if mtime.is_some() {
        for other in descriptors::of_ino(ino) {
            other.file.times_set_explicitly();
        }
    }
    Ok(())
}

/// fchmod(2) on a served file (see [`owner_may_change`]).
pub(crate) fn set_mode(library: &Library, d: &Description, mode: u32) -> Result<(), c_int> {
    let changes = AttrChanges { mode: Some(mode & 0o7777), ..Default::default() };
    d.cache.changed_here(d.file.ino());
    library.run_settled(d.client.setattr(d.file.ino(), changes)).map(drop).map_err(errno)
}
