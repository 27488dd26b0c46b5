//! The node a process runs on, as servers and clients both see it: its boot (to recognise a
//! server's data directory as being on the client's own node, [`crate::LocalData`]), the
//! free space of a directory's device (what a capacity share must fit), and a thread's
//! file-system identity (whose files a stage touches on the PFS).

/// The running kernel's boot id: differs between nodes, and between boots of one node.
pub fn boot_id() -> std::io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_string())
}

/// Bytes an unprivileged writer may still put on the file system holding `dir`.
pub fn available_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `stats` has room for one statvfs, which the call
    // fills when it succeeds (it is only read then).
    let stats = unsafe {
        if libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        stats.assume_init()
    };
    Ok(stats.f_bavail as u64 * stats.f_frsize as u64)
}

/// Runs `work` on this thread with the file-system identity of `uid`:`gid` (that group
/// alone), so that what it opens, makes, lists or renames is checked, and owned, as that
/// user's: how a stage touches the PFS as the user who submitted it when the servers run as
/// root (a shared instance). A process that is not root, or a stage of root's, runs `work` as
/// it is. Linux keeps credentials per thread and `setfsuid`/`setfsgid` change only the calling
/// thread's (the supplementary groups are set by the raw system call for the same reason:
/// glibc's `setgroups` changes every thread's), so call this on a thread of its own (a
/// blocking task), never on an async worker.
pub fn with_fs_ids<T>(uid: u32, gid: u32, work: impl FnOnce() -> T) -> T {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 || uid == 0 {
        return work();
    }
    /// Puts this thread's identity back, however `work` ends.
    struct Restore {
        uid: u32,
        gid: u32,
        groups: Vec<libc::gid_t>,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: plain system calls on this thread's own credentials; `groups` holds
            // `groups.len()` ids.
            unsafe {
                libc::setfsuid(self.uid);
                libc::setfsgid(self.gid);
                libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr());
            }
        }
    }
    // SAFETY: getgroups with a zero size only counts; the second call fills `groups`, which
    // has room for that many. setfsgid/setfsuid and setgroups act on this thread only.
    let _restore = unsafe {
        let count = libc::getgroups(0, std::ptr::null_mut()).max(0) as usize;
        let mut groups = vec![0 as libc::gid_t; count];
        let count = libc::getgroups(count as libc::c_int, groups.as_mut_ptr()).max(0) as usize;
        groups.truncate(count);
        let one = [gid as libc::gid_t];
        libc::syscall(libc::SYS_setgroups, 1usize, one.as_ptr());
        let old_gid = libc::setfsgid(gid) as u32;
        let old_uid = libc::setfsuid(uid) as u32;
        Restore { uid: old_uid, gid: old_gid, groups }
    };
    work()
}
