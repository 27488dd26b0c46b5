//! Which paths the library serves: the kernel resolves a path's directory, the library its
//! last name.
//!
//! For `dir/name`, `dir` is looked up by the kernel (`fstatat`): symbolic links, `..`, bind
//! mounts and the search permission on every directory on the way are the kernel's, as is
//! the cache of those lookups (the mount's, kept exact by the servers' notices). When the
//! directory is on a Surge mount (its device is the mount's), the library takes its inode
//! number (Surge's own) and serves the last name itself. A path whose last part is `.`,
//! `..`, or empty (a trailing slash) is the kernel's, as is every path off the Surge mounts.

use std::ffi::{c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;

use crate::mounts::Mount;
use crate::next;
use crate::process::Library;

/// A name in a directory of a Surge mount.
pub(crate) struct Target {
    pub mount: Mount,
    /// The directory, as the kernel reports it through the mount.
    pub dir: libc::stat64,
    pub name: String,
    /// The whole path made absolute (what a descriptor is opened by again, through the mount).
    pub absolute: CString,
}

impl Target {
    pub(crate) fn dir_ino(&self) -> u64 {
        self.dir.st_ino
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
    // SAFETY: a zeroed stat is a valid out-buffer.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    if (next::FSTATAT.get())(dirfd, dir_path.as_ptr(), &mut st, 0) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return None;
    }
    let mount = mounts.by_dev(st.st_dev)?.clone();
    let absolute = if absolute { path.to_owned() } else { CString::new(join(base_of(dirfd)?, bytes)).ok()? };
    Some(Target { mount, dir: st, name, absolute })
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
