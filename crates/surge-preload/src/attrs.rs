//! Surge's attributes as the kernel's `stat` and `statx` report them for the same file through
//! the mount: the same device (the mount's), inode number, block size (the chunk size) and
//! block count, so a program comparing what the library says with what the kernel says
//! (`cp`, `tar` and `find` compare devices and inodes) finds one file.

use surge_client::surge_proto::{Attr, FileKind, Timestamp};

/// The file type bits of a mode.
pub fn type_bits(kind: FileKind) -> u32 {
    match kind {
        FileKind::File => libc::S_IFREG,
        FileKind::Dir => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::Socket => libc::S_IFSOCK,
        FileKind::CharDevice { .. } => libc::S_IFCHR,
        FileKind::BlockDevice { .. } => libc::S_IFBLK,
    }
}

fn rdev(kind: FileKind) -> u64 {
    match kind {
        FileKind::CharDevice { rdev } | FileKind::BlockDevice { rdev } => rdev.into(),
        _ => 0,
    }
}

/// Measured from the servers' data files; where they could not be asked, the size.
fn blocks(a: &Attr) -> u64 {
    a.blocks.unwrap_or(a.size.div_ceil(512))
}

pub fn to_stat(a: &Attr, dev: u64, blksize: u32) -> libc::stat64 {
    // SAFETY: stat64 is plain old data; zero is a valid value of every field.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    st.st_dev = dev;
    st.st_ino = a.ino;
    st.st_nlink = a.nlink.into();
    st.st_mode = type_bits(a.kind) | (a.mode & 0o7777);
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_rdev = rdev(a.kind);
    st.st_size = a.size as i64;
    st.st_blksize = blksize.into();
    st.st_blocks = blocks(a) as i64;
    (st.st_atime, st.st_atime_nsec) = (a.atime.secs, a.atime.nanos.into());
    (st.st_mtime, st.st_mtime_nsec) = (a.mtime.secs, a.mtime.nanos.into());
    (st.st_ctime, st.st_ctime_nsec) = (a.ctime.secs, a.ctime.nanos.into());
    st
}

fn statx_time(t: Timestamp) -> libc::statx_timestamp {
    // SAFETY: plain old data (it has a reserved field).
    let mut s: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    s.tv_sec = t.secs;
    s.tv_nsec = t.nanos;
    s
}

/// What the mount's `statx` reports: the basic fields (no birth time, as FUSE has none).
pub fn to_statx(a: &Attr, dev: u64, blksize: u32) -> libc::statx {
    // SAFETY: plain old data; zero is a valid value of every field.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    sx.stx_mask = libc::STATX_BASIC_STATS;
    sx.stx_blksize = blksize;
    sx.stx_nlink = a.nlink;
    sx.stx_uid = a.uid;
    sx.stx_gid = a.gid;
    sx.stx_mode = (type_bits(a.kind) | (a.mode & 0o7777)) as u16;
    sx.stx_ino = a.ino;
    sx.stx_size = a.size;
    sx.stx_blocks = blocks(a);
    sx.stx_atime = statx_time(a.atime);
    sx.stx_mtime = statx_time(a.mtime);
    sx.stx_ctime = statx_time(a.ctime);
    let rdev = rdev(a.kind);
    (sx.stx_rdev_major, sx.stx_rdev_minor) = (libc::major(rdev), libc::minor(rdev));
    (sx.stx_dev_major, sx.stx_dev_minor) = (libc::major(dev), libc::minor(dev));
    sx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: FileKind) -> Attr {
        let t = Timestamp { secs: 1_700_000_000, nanos: 123 };
        Attr { ino: 42, kind, mode: 0o4755, uid: 7, gid: 8, size: 5000, nlink: 2, atime: t, mtime: t, ctime: t, blocks: None }
    }

    #[test]
    fn stat_and_statx_say_the_same_of_one_file() {
        let dev = libc::makedev(0, 61);
        let a = attr(FileKind::File);
        let (st, sx) = (to_stat(&a, dev, 1 << 20), to_statx(&a, dev, 1 << 20));
        assert_eq!(st.st_mode, libc::S_IFREG | 0o4755);
        assert_eq!(u32::from(sx.stx_mode), st.st_mode);
        assert_eq!((st.st_dev, st.st_ino, st.st_size, st.st_nlink), (dev, 42, 5000, 2));
        assert_eq!(libc::makedev(sx.stx_dev_major, sx.stx_dev_minor), dev);
        assert_eq!((st.st_blocks, sx.stx_blocks), (10, 10), "blocks from the size where unmeasured");
        assert_eq!((st.st_mtime_nsec, sx.stx_mtime.tv_nsec), (123, 123));
    }

    #[test]
    fn devices_keep_their_numbers_and_directories_their_type() {
        let st = to_stat(&attr(FileKind::CharDevice { rdev: libc::makedev(1, 3) as u32 }), 0, 4096);
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFCHR);
        assert_eq!(st.st_rdev, libc::makedev(1, 3));
        assert_eq!(to_stat(&attr(FileKind::Dir), 0, 4096).st_mode & libc::S_IFMT, libc::S_IFDIR);
    }
}
