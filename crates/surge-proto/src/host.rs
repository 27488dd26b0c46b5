//! The node a process runs on, as servers and clients both see it: its boot (to recognise a
//! server's data directory as being on the client's own node, [`crate::LocalData`]) and the
//! free space of a directory's device (what a capacity share must fit).

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
