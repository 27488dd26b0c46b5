//! Requests from the kernel, decoded. Both transports give a request as three parts: the in
//! header, the operation's own header (its first argument) and the payload (names, data).
//! Over /dev/fuse they come in one buffer, split here by the operation's header size; over
//! io_uring the kernel puts them in a ring entry's separate regions. Decoding never trusts a
//! length: anything short or unterminated is `Malformed`, answered with EINVAL.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::abi::{self, fuse_opcode, read, read_padded};

/// Who asked: the calling process as the kernel saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

/// One decoded request: its id, the inode it is about and what it asks.
#[derive(Debug)]
pub struct Request<'a> {
    pub unique: u64,
    pub nodeid: u64,
    pub caller: Caller,
    pub op: Operation<'a>,
}

/// A lock range as the kernel gives it (`end` inclusive, `u64::MAX` for "to the end").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRange {
    pub start: u64,
    pub end: u64,
    /// F_RDLCK, F_WRLCK or F_UNLCK.
    pub typ: i32,
    pub pid: u32,
}

/// A time a `setattr` sets: a given one, or the server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    /// Seconds and nanoseconds since the epoch.
    Specific(i64, u32),
    Now,
}

/// The attributes a `setattr` changes (None: leave as is).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
    /// FATTR_KILL_SUIDGID: a truncate by a caller without CAP_FSETID (with
    /// HANDLE_KILLPRIV_V2, the file system drops the set-id bits).
    pub kill_suidgid: bool,
}

#[derive(Debug)]
pub enum Operation<'a> {
    Init {
        major: u32,
        minor: u32,
        max_readahead: u32,
        capabilities: u64,
    },
    Destroy,
    Forget {
        nlookup: u64,
    },
    /// (inode, lookups to forget) pairs.
    BatchForget(Vec<(u64, u64)>),
    Interrupt {
        unique: u64,
    },
    Lookup {
        name: &'a OsStr,
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr(SetAttr),
    Readlink,
    Symlink {
        name: &'a OsStr,
        target: &'a OsStr,
    },
    Mknod {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    },
    Mkdir {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
    },
    Unlink {
        name: &'a OsStr,
    },
    Rmdir {
        name: &'a OsStr,
    },
    Rename {
        name: &'a OsStr,
        newdir: u64,
        newname: &'a OsStr,
        flags: u32,
    },
    Link {
        oldnodeid: u64,
        name: &'a OsStr,
    },
    Open {
        flags: i32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
        flags: i32,
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: i32,
    },
    Getxattr {
        name: &'a OsStr,
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a OsStr,
    },
    Flush {
        fh: u64,
        lock_owner: u64,
    },
    Opendir {
        flags: i32,
    },
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
    },
    /// READDIR with each entry's lookup (see `DO_READDIRPLUS`).
    ReaddirPlus {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Releasedir {
        fh: u64,
    },
    Fsyncdir {
        fh: u64,
    },
    Getlk {
        fh: u64,
        owner: u64,
        lock: LockRange,
    },
    Setlk {
        fh: u64,
        owner: u64,
        lock: LockRange,
        sleep: bool,
    },
    Access {
        mask: i32,
    },
    Create {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    },
    Lseek {
        fh: u64,
        offset: i64,
        whence: i32,
    },
    /// An operation this crate does not serve (answered ENOSYS).
    Unsupported(u32),
}

/// Why a request could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// The size of `opcode`'s own header: the part of a /dev/fuse request that io_uring puts in
/// the entry's `op_in` region. Zero for requests that carry only names, or nothing.
pub fn op_header_len(opcode: u32) -> usize {
    use fuse_opcode::*;
    let Ok(op) = fuse_opcode::try_from(opcode) else { return 0 };
    match op {
        FUSE_INIT => size_of::<abi::fuse_init_in>(),
        FUSE_FORGET => size_of::<abi::fuse_forget_in>(),
        FUSE_BATCH_FORGET => size_of::<abi::fuse_batch_forget_in>(),
        FUSE_INTERRUPT => size_of::<abi::fuse_interrupt_in>(),
        FUSE_GETATTR => size_of::<abi::fuse_getattr_in>(),
        FUSE_SETATTR => size_of::<abi::fuse_setattr_in>(),
        FUSE_MKNOD => size_of::<abi::fuse_mknod_in>(),
        FUSE_MKDIR => size_of::<abi::fuse_mkdir_in>(),
        FUSE_RENAME => size_of::<abi::fuse_rename_in>(),
        FUSE_RENAME2 => size_of::<abi::fuse_rename2_in>(),
        FUSE_LINK => size_of::<abi::fuse_link_in>(),
        FUSE_OPEN | FUSE_OPENDIR => size_of::<abi::fuse_open_in>(),
        FUSE_READ | FUSE_READDIR | FUSE_READDIRPLUS => size_of::<abi::fuse_read_in>(),
        FUSE_WRITE => size_of::<abi::fuse_write_in>(),
        FUSE_RELEASE | FUSE_RELEASEDIR => size_of::<abi::fuse_release_in>(),
        FUSE_FSYNC | FUSE_FSYNCDIR => size_of::<abi::fuse_fsync_in>(),
        // Without FUSE_SETXATTR_EXT (not asked for) the kernel sends the short form.
        FUSE_SETXATTR => abi::FUSE_COMPAT_SETXATTR_IN_SIZE as usize,
        FUSE_GETXATTR | FUSE_LISTXATTR => size_of::<abi::fuse_getxattr_in>(),
        FUSE_FLUSH => size_of::<abi::fuse_flush_in>(),
        FUSE_GETLK | FUSE_SETLK | FUSE_SETLKW => size_of::<abi::fuse_lk_in>(),
        FUSE_ACCESS => size_of::<abi::fuse_access_in>(),
        FUSE_CREATE => size_of::<abi::fuse_create_in>(),
        FUSE_FALLOCATE => size_of::<abi::fuse_fallocate_in>(),
        FUSE_LSEEK => size_of::<abi::fuse_lseek_in>(),
        _ => 0,
    }
}

/// Reads NUL-terminated names off the front of a payload.
struct Names<'a>(&'a [u8]);

impl<'a> Names<'a> {
    fn next(&mut self) -> Result<&'a OsStr, Malformed> {
        let end = self.0.iter().position(|&b| b == 0).ok_or(Malformed("name without its terminating NUL"))?;
        let name = OsStr::from_bytes(&self.0[..end]);
        self.0 = &self.0[end + 1..];
        Ok(name)
    }
}

fn arg<T: zerocopy::FromBytes>(header: &[u8]) -> Result<T, Malformed> {
    read(header).ok_or(Malformed("operation header shorter than its structure"))
}

fn lock_range(lk: &abi::fuse_file_lock) -> LockRange {
    LockRange { start: lk.start, end: lk.end, typ: lk.type_ as i32, pid: lk.pid }
}

fn time(valid: u32, set: u32, now: u32, secs: u64, nsecs: u32) -> Option<TimeOrNow> {
    if valid & now != 0 {
        Some(TimeOrNow::Now)
    } else if valid & set != 0 {
        Some(TimeOrNow::Specific(secs as i64, nsecs))
    } else {
        None
    }
}

/// Decodes one request from its in header, its operation header and its payload.
pub fn decode<'a>(header: &abi::fuse_in_header, op_header: &'a [u8], payload: &'a [u8]) -> Result<Request<'a>, Malformed> {
    use fuse_opcode::*;
    let mut names = Names(payload);
    let op = match fuse_opcode::try_from(header.opcode) {
        Err(_) => Operation::Unsupported(header.opcode),
        Ok(op) => match op {
            FUSE_INIT => {
                let init: abi::fuse_init_in = read_padded(op_header);
                let mut capabilities = u64::from(init.flags);
                if capabilities & abi::init::INIT_EXT != 0 {
                    capabilities |= u64::from(init.flags2) << 32;
                }
                Operation::Init { major: init.major, minor: init.minor, max_readahead: init.max_readahead, capabilities }
            }
            FUSE_DESTROY => Operation::Destroy,
            FUSE_FORGET => Operation::Forget { nlookup: arg::<abi::fuse_forget_in>(op_header)?.nlookup },
            FUSE_BATCH_FORGET => {
                let count = arg::<abi::fuse_batch_forget_in>(op_header)?.count as usize;
                let one = size_of::<abi::fuse_forget_one>();
                let list = payload.get(..count.saturating_mul(one)).ok_or(Malformed("batch forget longer than its request"))?;
                Operation::BatchForget(
                    list.chunks_exact(one).filter_map(read::<abi::fuse_forget_one>).map(|f| (f.nodeid, f.nlookup)).collect(),
                )
            }
            FUSE_INTERRUPT => Operation::Interrupt { unique: arg::<abi::fuse_interrupt_in>(op_header)?.unique },
            FUSE_LOOKUP => Operation::Lookup { name: names.next()? },
            FUSE_GETATTR => {
                let a: abi::fuse_getattr_in = arg(op_header)?;
                Operation::Getattr { fh: (a.getattr_flags & abi::FUSE_GETATTR_FH != 0).then_some(a.fh) }
            }
            FUSE_SETATTR => {
                let a: abi::fuse_setattr_in = arg(op_header)?;
                let v = a.valid;
                let when = |bit: u32| v & bit != 0;
                Operation::Setattr(SetAttr {
                    mode: when(abi::FATTR_MODE).then_some(a.mode),
                    uid: when(abi::FATTR_UID).then_some(a.uid),
                    gid: when(abi::FATTR_GID).then_some(a.gid),
                    size: when(abi::FATTR_SIZE).then_some(a.size),
                    atime: time(v, abi::FATTR_ATIME, abi::FATTR_ATIME_NOW, a.atime, a.atimensec),
                    mtime: time(v, abi::FATTR_MTIME, abi::FATTR_MTIME_NOW, a.mtime, a.mtimensec),
                    fh: when(abi::FATTR_FH).then_some(a.fh),
                    kill_suidgid: when(abi::FATTR_KILL_SUIDGID),
                })
            }
            FUSE_READLINK => Operation::Readlink,
            FUSE_SYMLINK => Operation::Symlink { name: names.next()?, target: names.next()? },
            FUSE_MKNOD => {
                let a: abi::fuse_mknod_in = arg(op_header)?;
                Operation::Mknod { name: names.next()?, mode: a.mode, umask: a.umask, rdev: a.rdev }
            }
            FUSE_MKDIR => {
                let a: abi::fuse_mkdir_in = arg(op_header)?;
                Operation::Mkdir { name: names.next()?, mode: a.mode, umask: a.umask }
            }
            FUSE_UNLINK => Operation::Unlink { name: names.next()? },
            FUSE_RMDIR => Operation::Rmdir { name: names.next()? },
            FUSE_RENAME => {
                let a: abi::fuse_rename_in = arg(op_header)?;
                Operation::Rename { name: names.next()?, newdir: a.newdir, newname: names.next()?, flags: 0 }
            }
            FUSE_RENAME2 => {
                let a: abi::fuse_rename2_in = arg(op_header)?;
                Operation::Rename { name: names.next()?, newdir: a.newdir, newname: names.next()?, flags: a.flags }
            }
            FUSE_LINK => Operation::Link { oldnodeid: arg::<abi::fuse_link_in>(op_header)?.oldnodeid, name: names.next()? },
            FUSE_OPEN => Operation::Open { flags: arg::<abi::fuse_open_in>(op_header)?.flags as i32 },
            FUSE_OPENDIR => Operation::Opendir { flags: arg::<abi::fuse_open_in>(op_header)?.flags as i32 },
            FUSE_READ => {
                let a: abi::fuse_read_in = arg(op_header)?;
                Operation::Read { fh: a.fh, offset: a.offset, size: a.size }
            }
            FUSE_READDIR => {
                let a: abi::fuse_read_in = arg(op_header)?;
                Operation::Readdir { fh: a.fh, offset: a.offset, size: a.size }
            }
            FUSE_READDIRPLUS => {
                let a: abi::fuse_read_in = arg(op_header)?;
                Operation::ReaddirPlus { fh: a.fh, offset: a.offset, size: a.size }
            }
            FUSE_WRITE => {
                let a: abi::fuse_write_in = arg(op_header)?;
                let data = payload.get(..a.size as usize).ok_or(Malformed("write shorter than its size"))?;
                Operation::Write { fh: a.fh, offset: a.offset, data, write_flags: a.write_flags, flags: a.flags as i32 }
            }
            FUSE_STATFS => Operation::Statfs,
            FUSE_RELEASE => Operation::Release { fh: arg::<abi::fuse_release_in>(op_header)?.fh },
            FUSE_RELEASEDIR => Operation::Releasedir { fh: arg::<abi::fuse_release_in>(op_header)?.fh },
            FUSE_FSYNC => {
                let a: abi::fuse_fsync_in = arg(op_header)?;
                Operation::Fsync { fh: a.fh, datasync: a.fsync_flags & abi::FUSE_FSYNC_FDATASYNC != 0 }
            }
            FUSE_FSYNCDIR => Operation::Fsyncdir { fh: arg::<abi::fuse_fsync_in>(op_header)?.fh },
            FUSE_SETXATTR => {
                let size = arg::<u32>(op_header)? as usize;
                let flags = arg::<[u32; 2]>(op_header)?[1] as i32;
                let name = names.next()?;
                let value = names.0.get(..size).ok_or(Malformed("attribute value shorter than its size"))?;
                Operation::Setxattr { name, value, flags }
            }
            FUSE_GETXATTR => Operation::Getxattr { size: arg::<abi::fuse_getxattr_in>(op_header)?.size, name: names.next()? },
            FUSE_LISTXATTR => Operation::Listxattr { size: arg::<abi::fuse_getxattr_in>(op_header)?.size },
            FUSE_REMOVEXATTR => Operation::Removexattr { name: names.next()? },
            FUSE_FLUSH => {
                let a: abi::fuse_flush_in = arg(op_header)?;
                Operation::Flush { fh: a.fh, lock_owner: a.lock_owner }
            }
            FUSE_GETLK => {
                let a: abi::fuse_lk_in = arg(op_header)?;
                Operation::Getlk { fh: a.fh, owner: a.owner, lock: lock_range(&a.lk) }
            }
            FUSE_SETLK | FUSE_SETLKW => {
                let a: abi::fuse_lk_in = arg(op_header)?;
                Operation::Setlk { fh: a.fh, owner: a.owner, lock: lock_range(&a.lk), sleep: op == FUSE_SETLKW }
            }
            FUSE_ACCESS => Operation::Access { mask: arg::<abi::fuse_access_in>(op_header)?.mask as i32 },
            FUSE_CREATE => {
                let a: abi::fuse_create_in = arg(op_header)?;
                Operation::Create { name: names.next()?, mode: a.mode, umask: a.umask, flags: a.flags as i32 }
            }
            FUSE_FALLOCATE => {
                let a: abi::fuse_fallocate_in = arg(op_header)?;
                Operation::Fallocate { fh: a.fh, offset: a.offset, length: a.length, mode: a.mode as i32 }
            }
            FUSE_LSEEK => {
                let a: abi::fuse_lseek_in = arg(op_header)?;
                Operation::Lseek { fh: a.fh, offset: a.offset as i64, whence: a.whence as i32 }
            }
            _ => Operation::Unsupported(header.opcode),
        },
    };
    Ok(Request { unique: header.unique, nodeid: header.nodeid, caller: Caller { uid: header.uid, gid: header.gid, pid: header.pid }, op })
}

/// Splits a request read from /dev/fuse into its in header, operation header and payload.
pub fn split_dev_request(buf: &[u8]) -> Result<(abi::fuse_in_header, &[u8], &[u8]), Malformed> {
    let header: abi::fuse_in_header = read(buf).ok_or(Malformed("request shorter than its header"))?;
    let len = header.len as usize;
    if len < abi::IN_HEADER_LEN || len > buf.len() {
        return Err(Malformed("request length disagrees with what was read"));
    }
    let body = &buf[abi::IN_HEADER_LEN..len];
    let op_len = op_header_len(header.opcode);
    if header.opcode == fuse_opcode::FUSE_INIT as u32 {
        // An older kernel sends a shorter init structure; it is all header.
        return Ok((header, body, &[]));
    }
    if body.len() < op_len {
        return Err(Malformed("request shorter than its operation's header"));
    }
    Ok((header, &body[..op_len], &body[op_len..]))
}

#[cfg(test)]
mod tests {
    use zerocopy::IntoBytes;

    use super::*;

    fn request(opcode: fuse_opcode, op: &[u8], payload: &[u8]) -> Vec<u8> {
        let header = abi::fuse_in_header {
            len: (abi::IN_HEADER_LEN + op.len() + payload.len()) as u32,
            opcode: opcode as u32,
            unique: 7,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 42,
            ..Default::default()
        };
        [header.as_bytes(), op, payload].concat()
    }

    fn decoded(buf: &[u8]) -> Result<Operation<'_>, Malformed> {
        let (header, op, payload) = split_dev_request(buf)?;
        decode(&header, op, payload).map(|r| r.op)
    }

    #[test]
    fn create_carries_its_header_and_name() {
        let create = abi::fuse_create_in { flags: libc::O_WRONLY as u32, mode: 0o100644, umask: 0o022, open_flags: 0 };
        let buf = request(fuse_opcode::FUSE_CREATE, create.as_bytes(), b"file.txt\0");
        match decoded(&buf).unwrap() {
            Operation::Create { name, mode, umask, flags } => {
                assert_eq!((name, mode, umask, flags), (OsStr::new("file.txt"), 0o100644, 0o022, libc::O_WRONLY));
            }
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn rename_reads_two_names_after_its_header() {
        let rename = abi::fuse_rename2_in { newdir: 9, flags: libc::RENAME_NOREPLACE, padding: 0 };
        let buf = request(fuse_opcode::FUSE_RENAME2, rename.as_bytes(), b"a\0bb\0");
        match decoded(&buf).unwrap() {
            Operation::Rename { name, newdir, newname, flags } => {
                assert_eq!((name, newdir, newname, flags), (OsStr::new("a"), 9, OsStr::new("bb"), libc::RENAME_NOREPLACE));
            }
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn short_or_unterminated_requests_are_malformed() {
        assert!(decoded(&request(fuse_opcode::FUSE_LOOKUP, &[], b"no-nul")).is_err());
        assert!(decoded(&request(fuse_opcode::FUSE_CREATE, &[0; 4], b"")).is_err());
        let write = abi::fuse_write_in { size: 100, ..Default::default() };
        assert!(decoded(&request(fuse_opcode::FUSE_WRITE, write.as_bytes(), &[1; 99])).is_err());
        let batch = abi::fuse_batch_forget_in { count: u32::MAX, dummy: 0 };
        assert!(decoded(&request(fuse_opcode::FUSE_BATCH_FORGET, batch.as_bytes(), &[0; 16])).is_err());
        let mut lying = request(fuse_opcode::FUSE_STATFS, &[], &[]);
        lying[0] = 200;
        assert!(decoded(&lying).is_err());
        assert!(decoded(&lying[..10]).is_err());
    }

    #[test]
    fn setxattr_value_may_hold_zero_bytes() {
        let buf = request(fuse_opcode::FUSE_SETXATTR, [3u32, 1].as_bytes(), b"user.a\0x\0y");
        match decoded(&buf).unwrap() {
            Operation::Setxattr { name, value, flags } => assert_eq!((name, value, flags), (OsStr::new("user.a"), &b"x\0y"[..], 1)),
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn unknown_opcodes_are_unsupported_not_errors() {
        let mut buf = request(fuse_opcode::FUSE_STATFS, &[], &[]);
        buf[4] = 250;
        assert!(matches!(decoded(&buf).unwrap(), Operation::Unsupported(250)));
    }
}
