//! Mounting and unmounting: directly with mount(2) when running as root, through the setuid
//! `fusermount3` helper otherwise (it mounts and passes the /dev/fuse descriptor back over a
//! socket, the protocol libfuse uses).

use std::ffi::OsString;
use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::socket::{self, ControlMessageOwned, MsgFlags};

/// How the mount looks and who may use it.
#[derive(Debug, Clone, Default)]
pub struct MountOptions {
    /// The "device" column of /proc/mounts.
    pub fsname: String,
    /// The type shown as `fuse.<subtype>`.
    pub subtype: String,
    /// The kernel checks permissions from the attributes (as for a local file system).
    pub default_permissions: bool,
    /// Users other than the mounting one may enter (needs root, or user_allow_other in
    /// /etc/fuse.conf).
    pub allow_other: bool,
    /// The kernel refuses every change (EROFS); `mount -o remount,rw` lifts it.
    pub read_only: bool,
    /// No program is executed from the mount.
    pub no_exec: bool,
}

impl MountOptions {
    fn common(&self) -> Vec<String> {
        let mut options = vec![];
        if self.default_permissions {
            options.push("default_permissions".to_string());
        }
        if self.allow_other {
            options.push("allow_other".to_string());
        }
        options
    }

    /// The mount's flags: never set-user-ID or device files (whatever the files say), and what
    /// was asked.
    fn flags(&self) -> nix::mount::MsFlags {
        use nix::mount::MsFlags;
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        flags.set(MsFlags::MS_RDONLY, self.read_only);
        flags.set(MsFlags::MS_NOEXEC, self.no_exec);
        flags
    }
}

/// A mount this process made; unmounted (lazily) when dropped, unless someone else has
/// unmounted it already (the normal case: `fusermount3 -u` ends the session).
pub(crate) struct Mount {
    mountpoint: PathBuf,
    by_helper: bool,
    /// The mount's device as /proc/self/mountinfo showed it right after mounting: once this
    /// mount is gone, another may stand at the same path (`umount` then `mount` again while
    /// this daemon is still ending), and that one is not ours to detach.
    device: Option<String>,
}

impl Mount {
    /// Mounts at `mountpoint`; returns the connection's /dev/fuse descriptor.
    pub(crate) fn new(mountpoint: &Path, options: &MountOptions) -> io::Result<(OwnedFd, Mount)> {
        let mountpoint = mountpoint.canonicalize()?;
        let by_helper = !nix::unistd::geteuid().is_root();
        let fd = if by_helper { mount_with_helper(&mountpoint, options)? } else { mount_directly(&mountpoint, options)? };
        let device = device_on_top_at(&mountpoint);
        Ok((fd, Mount { mountpoint, by_helper, device }))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.device.is_some() && device_on_top_at(&self.mountpoint) != self.device {
            return; // unmounted already, and perhaps mounted again by someone else
        }
        let result = if self.by_helper {
            Command::new("fusermount3").arg("-u").arg("-z").arg("-q").arg("--").arg(&self.mountpoint).status().map(|_| ())
        } else {
            nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH).map_err(io::Error::from)
        };
        if let Err(e) = result {
            // EINVAL: no longer a mount point (unmounted already).
            if e.raw_os_error() != Some(libc::EINVAL) {
                tracing::debug!("unmount {}: {e}", self.mountpoint.display());
            }
        }
    }
}

/// The device ("major:minor") of the mount on top at `point` (canonical), from
/// /proc/self/mountinfo: its last line for that mount point, as later mounts stack on earlier ones.
fn device_on_top_at(point: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // "id parent MAJOR:MINOR root MOUNTPOINT options ...", the mount point octal-escaped.
    let on_top = info.lines().rev().find(|line| line.split(' ').nth(4).is_some_and(|p| Path::new(&unescape_octal(p)) == point))?;
    on_top.split(' ').nth(2).map(str::to_string)
}

/// Undoes the kernel's escaping of space, tab, newline and backslash (`\040`) in mountinfo.
fn unescape_octal(field: &str) -> OsString {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (bytes[i], code) {
            (b'\\', Some(code)) => {
                out.push(code);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

fn mount_directly(mountpoint: &Path, options: &MountOptions) -> io::Result<OwnedFd> {
    let root_mode = std::fs::metadata(mountpoint)?.mode() & libc::S_IFMT;
    let fd: OwnedFd = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?.into();
    let mut data = vec![
        format!("fd={}", fd.as_raw_fd()),
        format!("rootmode={root_mode:o}"),
        format!("user_id={}", nix::unistd::getuid()),
        format!("group_id={}", nix::unistd::getgid()),
    ];
    data.extend(options.common());
    let fstype = format!("fuse.{}", options.subtype);
    nix::mount::mount(Some(options.fsname.as_str()), mountpoint, Some(fstype.as_str()), options.flags(), Some(data.join(",").as_str()))
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("mount(2) at {}: {e}", mountpoint.display())))?;
    Ok(fd)
}

fn mount_with_helper(mountpoint: &Path, options: &MountOptions) -> io::Result<OwnedFd> {
    use socket::{AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socket::socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)?;
    // The helper's end must survive exec: clear close-on-exec on it only.
    nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))?;
    let mut all = vec![format!("fsname={}", options.fsname), format!("subtype={}", options.subtype)];
    all.extend(options.common());
    // fusermount3 mounts nosuid,nodev for a user in any case.
    all.extend(options.read_only.then(|| "ro".to_string()));
    all.extend(options.no_exec.then(|| "noexec".to_string()));
    let status = Command::new("fusermount3")
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .arg("-o")
        .arg(all.join(","))
        .arg("--")
        .arg::<OsString>(mountpoint.into())
        .status()
        .map_err(|e| io::Error::new(e.kind(), format!("run fusermount3: {e}")))?;
    drop(theirs);
    if !status.success() {
        return Err(io::Error::other(format!("fusermount3 could not mount {} ({status})", mountpoint.display())));
    }
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(std::os::fd::RawFd);
    let message = socket::recvmsg::<()>(ours.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            if let Some(&fd) = fds.first() {
                // SAFETY: the descriptor just arrived with SCM_RIGHTS: it is open and ours.
                return Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            }
        }
    }
    Err(io::Error::other("fusermount3 mounted but sent no /dev/fuse descriptor"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_octal(r"/mnt/a\040b\134c"), OsString::from(r"/mnt/a b\c"));
        assert_eq!(unescape_octal(r"/plain\0"), OsString::from(r"/plain\0"));
    }

    #[test]
    fn the_root_file_system_has_a_device_on_top() {
        let device = device_on_top_at(Path::new("/")).expect("/ is a mount point");
        assert!(device.split_once(':').is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok()), "{device}");
        assert_eq!(device_on_top_at(Path::new("/surely/not/a/mount/point")), None);
    }
}
