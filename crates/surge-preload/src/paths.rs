//! Which paths the library serves: the kernel resolves a path's directory, the library its
//! last name.
//!
//! For `dir/name`, `dir` is looked up by the kernel: symbolic links, `..`, bind mounts and
//! the search permission on every directory on the way are the kernel's, as is the cache of
//! those lookups (the mount's, kept exact by the servers' notices). When the directory is on a
//! Surge mount, the library takes its inode number (Surge's own) and serves the last name
//! itself. A path whose last part is `.`, `..`, or empty (a trailing slash) is the kernel's,
//! as is every path off the Surge mounts.
//!
//! The directory is resolved with `name_to_handle_at` first when this process holds
//! delegations: that walks the path as any call does but asks nothing about the directory
//! itself, whose attributes its home changes as the delegation's steps are written back (a
//! `stat` of it would then go through the mount to the home, which recalls the delegation from
//! whoever else asks). A directory held under a delegation, or asked for, is checked against
//! the attributes its home gives this process (once for a held one: its mode and owner cannot
//! change while it is held); any other is `stat`ed through the kernel.

use std::ffi::{c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;

use std::sync::Arc;

use surge_client::surge_proto::FileKind;
use surge_client::DelegatedDir;

use crate::mounts::{Mount, Mounts};
use crate::next;
use crate::process::Library;

/// A name in a directory of a Surge mount.
pub(crate) struct Target {
    pub mount: Mount,
    pub dir: Dir,
    pub name: String,
    /// The whole path made absolute (what a descriptor is opened by again, through the mount).
    pub absolute: CString,
}

/// The directory of a [`Target`].
pub(crate) struct Dir {
    pub ino: u64,
    /// Its owner and mode (permission bits, set-id and sticky bits).
    pub uid: u32,
    pub mode: u32,
    /// Its delegation, when this process holds it.
    pub delegated: Option<Arc<DelegatedDir>>,
}

impl Target {
    pub(crate) fn dir_ino(&self) -> u64 {
        self.dir.ino
    }
}

/// Where `path` (relative to `dirfd`, as the `*at` calls take it) names a Surge file, or None
/// when the kernel is to serve it.
pub(crate) fn resolve(library: &Library, dirfd: c_int, path: &CStr) -> Option<Target> {
    let bytes = path.to_bytes();
    if bytes.is_empty() || bytes.ends_with(b"/") {
        return None;
    }
    let absolute = bytes.starts_with(b"/");
    let mounts = library.mounts();
    if mounts.is_empty() || absolute && !mounts.may_hold(std::path::Path::new(std::ffi::OsStr::from_bytes(bytes))) {
        return None;
    }
    let (dir, name) = match bytes.iter().rposition(|&b| b == b'/') {
        Some(0) => (&b"/"[..], &bytes[1..]),
        Some(slash) => (&bytes[..slash], &bytes[slash + 1..]),
        None => (&b"."[..], bytes),
    };
    if name == b"." || name == b".." {
        return None;
    }
    let name = std::str::from_utf8(name).ok()?.to_string();
    let dir_path = CString::new(dir).ok()?;
    let (mount, dir) = held_dir(library, &mounts, dirfd, &dir_path).or_else(|| stated_dir(&mounts, dirfd, &dir_path))?;
    let absolute = if absolute { path.to_owned() } else { CString::new(join(base_of(dirfd)?, bytes)).ok()? };
    Some(Target { mount, dir, name, absolute })
}

/// As [`resolve`], for a call whose last name is a directory's (mkdir, rmdir), which may be
/// written with trailing slashes (`mkdir("out/")`, as mdtest and many scripts write it).
pub(crate) fn resolve_directory(library: &Library, dirfd: c_int, path: &CStr) -> Option<Target> {
    let bytes = path.to_bytes();
    let kept = bytes.iter().rposition(|&b| b != b'/')? + 1;
    if kept == bytes.len() {
        return resolve(library, dirfd, path);
    }
    resolve(library, dirfd, &CString::new(&bytes[..kept]).ok()?)
}

/// `dir_path` (relative to `dirfd`) when it is a directory this process holds under a
/// delegation, or has asked for, found without asking the mount about the directory itself
/// (see the module's words), with the attributes its home gives this process.
fn held_dir(library: &Library, mounts: &Mounts, dirfd: c_int, dir_path: &CStr) -> Option<(Mount, Dir)> {
    if !library.holds_delegations() {
        return None;
    }
    let (mount_id, ino) = kernel_handle(dirfd, dir_path)?;
    let mount = mounts.by_id(mount_id)?;
    let instance = library.instance(mount)?;
    let (attr, delegated) = match instance.delegated(ino) {
        Some(delegated) => {
            let attr = match delegated.dir_attr() {
                Some(attr) => attr.clone(),
                None => library.run(delegated.fetch_dir_attr()).ok()?,
            };
            (attr, Some(delegated))
        }
        None if instance.delegations.asking(ino) => (library.run(instance.client.getattr(ino)).ok()?, None),
        None => return None,
    };
    if attr.kind != FileKind::Dir {
        return None;
    }
    Some((mount.clone(), Dir { ino, uid: attr.uid, mode: attr.mode, delegated }))
}

/// `dir_path` (relative to `dirfd`) as the kernel reports it through the mount, if it is a
/// directory on a Surge mount (one this process holds is [`held_dir`]'s).
fn stated_dir(mounts: &Mounts, dirfd: c_int, dir_path: &CStr) -> Option<(Mount, Dir)> {
    // SAFETY: a zeroed stat is a valid out-buffer.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    if (next::FSTATAT.get())(dirfd, dir_path.as_ptr(), &mut st, 0) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return None;
    }
    let mount = mounts.by_dev(st.st_dev)?.clone();
    Some((mount, Dir { ino: st.st_ino, uid: st.st_uid, mode: st.st_mode & 0o7777, delegated: None }))
}

/// The mount and FUSE node (Surge's inode number) of `path`, following a last symbolic link,
/// from the kernel's file handle: a path walk, with no request about the last component.
fn kernel_handle(dirfd: c_int, path: &CStr) -> Option<(i32, u64)> {
    /// FUSE's handle: the node number in two native-endian halves, then the generation
    /// (`FILEID_INO64_GEN`).
    const FUSE_HANDLE: c_int = 0x81;
    #[repr(C)]
    struct Handle {
        header: libc::file_handle,
        bytes: [u32; 4],
    }
    let mut handle = Handle { header: libc::file_handle { handle_bytes: 16, handle_type: 0, f_handle: [] }, bytes: [0; 4] };
    let mut mount_id: c_int = 0;
    // SAFETY: the handle's header is followed by the 16 bytes it declares; the path is a C string.
    let done = unsafe { libc::name_to_handle_at(dirfd, path.as_ptr(), &mut handle.header, &mut mount_id, libc::AT_SYMLINK_FOLLOW) };
    if done != 0 || handle.header.handle_type != FUSE_HANDLE || handle.header.handle_bytes != 12 {
        return None;
    }
    Some((mount_id, (u64::from(handle.bytes[0]) << 32) | u64::from(handle.bytes[1])))
}

/// The directory a relative path starts from: the working directory, or `dirfd`'s.
fn base_of(dirfd: c_int) -> Option<Vec<u8>> {
    let base =
        if dirfd == libc::AT_FDCWD { std::env::current_dir().ok()? } else { std::fs::read_link(format!("/proc/self/fd/{dirfd}")).ok()? };
    Some(base.as_os_str().as_bytes().to_vec())
}

fn join(mut base: Vec<u8>, relative: &[u8]) -> Vec<u8> {
    if !base.ends_with(b"/") {
        base.push(b'/');
    }
    base.extend_from_slice(relative);
    base
}

/// Whether this process owns what `uid` owns (its file-system uid is its effective one).
pub(crate) fn owns(uid: u32) -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == uid }
}

/// Whether `attr`-like ownership and mode grant `want` (rwx bits, as `4`, `2`, `1`) to this
/// process as the owner: the only grant the library decides itself. Every other case (group,
/// other, ACL entries, root's privileges, a denial) is the kernel's to decide: the call goes
/// through the mount, whose kernel checks apply, so no rule is ever relaxed here.
pub(crate) fn owner_grants(uid: u32, mode: u32, want: u32) -> bool {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    euid == uid && (mode >> 6) & want == want
}
