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
}

impl Mount {
    /// Mounts at `mountpoint`; returns the connection's /dev/fuse descriptor.
    pub(crate) fn new(mountpoint: &Path, options: &MountOptions) -> io::Result<(OwnedFd, Mount)> {
        if nix::unistd::geteuid().is_root() {
            let fd = mount_directly(mountpoint, options)?;
            Ok((fd, Mount { mountpoint: mountpoint.to_path_buf(), by_helper: false }))
        } else {
            let fd = mount_with_helper(mountpoint, options)?;
            Ok((fd, Mount { mountpoint: mountpoint.to_path_buf(), by_helper: true }))
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
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
