//! Between the kernel's types (the FUSE session's) and Surge's: attributes, file types, times, names.
//! Pure conversions, deciding nothing: a name that is not UTF-8 (Surge's names are) is refused
//! `Invalid`, and `st_blocks` a server could not measure is taken from the size.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use surge_client::surge_proto::{Attr, ErrorCode, FileKind, Timestamp};
use surge_fuse_session::{FileAttr, FileType, Time, TimeOrNow};

fn to_time(t: Timestamp) -> Time {
    Time { secs: t.secs, nanos: t.nanos }
}

pub(crate) fn to_timestamp(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::Now => Timestamp::now(),
        TimeOrNow::Specific(secs, nanos) => Timestamp { secs, nanos },
    }
}

pub(crate) fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice { .. } => FileType::CharDevice,
        FileKind::BlockDevice { .. } => FileType::BlockDevice,
    }
}

/// The kind a mknod mode asks for (regular files are made by create).
pub(crate) fn special_kind(mode: u32, rdev: u32) -> Option<FileKind> {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => Some(FileKind::Fifo),
        libc::S_IFSOCK => Some(FileKind::Socket),
        libc::S_IFCHR => Some(FileKind::CharDevice { rdev }),
        libc::S_IFBLK => Some(FileKind::BlockDevice { rdev }),
        _ => None,
    }
}

pub(crate) fn fuse_attr(a: &Attr, blksize: u32) -> FileAttr {
    FileAttr {
        ino: a.ino,
        size: a.size,
        // Measured from the servers' data files; where they could not be asked, the size.
        blocks: a.blocks.unwrap_or(a.size.div_ceil(512)),
        atime: to_time(a.atime),
        mtime: to_time(a.mtime),
        ctime: to_time(a.ctime),
        kind: file_type(a.kind),
        perm: a.mode as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: match a.kind {
            FileKind::CharDevice { rdev } | FileKind::BlockDevice { rdev } => rdev,
            _ => 0,
        },
        blksize,
    }
}

/// A name from the kernel: Surge names are UTF-8.
pub(crate) fn name_of(name: &OsStr) -> surge_client::Result<String> {
    std::str::from_utf8(name.as_bytes())
        .map(str::to_string)
        .map_err(|_| surge_client::Error::new(ErrorCode::Invalid, format!("{}: names must be UTF-8", name.to_string_lossy())))
}
