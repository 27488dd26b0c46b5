//! What the mount does with files' contents and attributes, checked on the operations layer
//! over servers running in this process: extended attributes and ACLs, byte-range locks,
//! holes, explicit times, what handles of one file on one node see of each other, and when
//! the kernel may keep a file's pages. The kernel-free part of tests/suite/fuse.rs's checks of these
//! (the kernel adds its permission checks, its page cache and real programs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{append, close, contents, contents_elsewhere, errno, me, put, read, read_all, write, Fixture};
use surge_client::surge_proto::{AttrChanges, LockKind, Timestamp, ROOT_INO};
use surge_client::LockRange;
use surge_fuse::ops::{Opened, Ops};

const MIB: usize = 1 << 20;

/// Opens `ino` through the mount with `flags`; answers the handle.
async fn open(ops: &Arc<Ops>, ino: u64, flags: i32) -> u64 {
    ops.open(ino, flags, me()).await.unwrap().fh
}

/// A POSIX ACL in its extended attribute form: (tag, permissions, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut value = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        value.extend(tag.to_le_bytes());
        value.extend(perm.to_le_bytes());
        value.extend(id.to_le_bytes());
    }
    value
}

/// Extended attributes across nodes: set through the mount, read and listed by another node;
/// setxattr's XATTR_CREATE and XATTR_REPLACE and missing names answered with Linux's errno.
/// An access ACL sets the mode's group bits to its mask, and a directory's default ACL is
/// inherited by a file made in it, whatever the umask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xattrs_with_their_flags_and_acls() {
    let fx = Fixture::new("xattrs", 2).await;
    let ops = &fx.ops;
    let f = put(ops, ROOT_INO, "f", b"secret").await;
    ops.setattr(f, AttrChanges { mode: Some(0o600), ..Default::default() }, None).await.unwrap();
    ops.set_xattr(f, "user.run".into(), b"42".to_vec(), 0, me()).await.unwrap();
    ops.set_xattr(f, "user.empty".into(), Vec::new(), 0, me()).await.unwrap();
    assert_eq!(fx.other.get_xattr(f, "user.run").await.unwrap(), b"42");
    assert_eq!(ops.get_xattr(f, "user.empty".into(), me()).await.unwrap(), b"");
    let mut listed: Vec<&[u8]> = Vec::new();
    let list = ops.list_xattr(f, me()).await.unwrap();
    assert_eq!(list.last(), Some(&0), "each name followed by a NUL");
    listed.extend(list.split(|&b| b == 0).filter(|n| !n.is_empty()));
    listed.sort();
    assert_eq!(listed, [&b"user.empty"[..], b"user.run"]);

    let set = |name: &str, value: &[u8], flags: i32| ops.set_xattr(f, name.into(), value.to_vec(), flags, me());
    assert_eq!(errno(set("user.run", b"1", libc::XATTR_CREATE).await), libc::EEXIST);
    assert_eq!(errno(set("user.new", b"1", libc::XATTR_REPLACE).await), libc::ENODATA);
    assert_eq!(errno(set("user.run", b"1", libc::XATTR_CREATE | libc::XATTR_REPLACE).await), libc::EINVAL);
    set("user.run", b"43", libc::XATTR_REPLACE).await.unwrap();
    set("user.new", b"1", libc::XATTR_CREATE).await.unwrap();
    assert_eq!(fx.other.get_xattr(f, "user.run").await.unwrap(), b"43", "replaced");
    assert_eq!(errno(ops.get_xattr(f, "user.none".into(), me()).await), libc::ENODATA);
    ops.remove_xattr(f, "user.run".into(), me()).await.unwrap();
    assert_eq!(errno(fx.other.get_xattr(f, "user.run").await), libc::ENODATA, "removed, for another node too");
    assert_eq!(errno(ops.remove_xattr(f, "user.run".into(), me()).await), libc::ENODATA);

    // user::rw- user:65534:r-- group::--- mask::r-- other::---
    const ANY: u32 = u32::MAX;
    let access = acl(&[(1, 6, ANY), (2, 4, 65534), (4, 0, ANY), (0x10, 4, ANY), (0x20, 0, ANY)]);
    ops.set_xattr(f, "system.posix_acl_access".into(), access.clone(), 0, me()).await.unwrap();
    assert_eq!(ops.getattr(f, me()).await.unwrap().mode & 0o777, 0o640, "the mask shows as the group bits");
    assert_eq!(fx.other.getattr(f).await.unwrap().mode & 0o777, 0o640);
    assert_eq!(fx.other.get_xattr(f, "system.posix_acl_access").await.unwrap(), access);
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    ops.set_xattr(d, "system.posix_acl_default".into(), access.clone(), 0, me()).await.unwrap();
    let (g, Opened { fh, .. }) = ops.create(d, "g".into(), 0o666, 0o077, 0, me()).await.unwrap();
    close(ops, g.ino, fh).await;
    let inherited = ops.get_xattr(g.ino, "system.posix_acl_access".into(), me()).await.unwrap();
    assert_eq!(inherited.len(), 44, "g inherited the 5-entry ACL");
    assert_eq!(g.mode & 0o777, 0o640, "its mode from the ACL, not from the umask");
    fx.stop().await;
}

/// An access ACL set by the file's owner when outside its group clears set-group-ID, as a
/// chmod by them would (Linux's posix_acl_update_mode); root's keeps it. The mount is trusted
/// by the servers, so it has to say on whose behalf it sets the ACL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_set_by_an_owner_outside_the_group_clears_set_group_id() {
    use surge_fuse::ops::Caller;
    let fx = Fixture::new("acl-setgid", 2).await;
    let ops = &fx.ops;
    let (outside, root) = (Caller { uid: 65534, gid: 65534, pid: std::process::id() }, Caller { uid: 0, gid: 0, pid: std::process::id() });
    // None of this process's groups, which the mount takes as the caller's.
    let group = 4242;
    // user::rwx group::r-x other::r-x, the mode's own bits.
    const ANY: u32 = u32::MAX;
    let access = acl(&[(1, 7, ANY), (4, 5, ANY), (0x20, 5, ANY)]);
    for (name, caller, kept) in [("by-owner", outside, 0o755), ("by-root", root, 0o2755)] {
        let (f, Opened { fh, .. }) = ops.create(ROOT_INO, name.into(), 0o644, 0, libc::O_RDWR, me()).await.unwrap();
        close(ops, f.ino, fh).await;
        let owned = AttrChanges { uid: Some(65534), gid: Some(group), ..Default::default() };
        ops.setattr(f.ino, owned, None).await.unwrap();
        ops.setattr(f.ino, AttrChanges { mode: Some(0o2755), ..Default::default() }, None).await.unwrap();
        assert_eq!(fx.other.getattr(f.ino).await.unwrap().mode & 0o7777, 0o2755, "{name}");
        ops.set_xattr(f.ino, "system.posix_acl_access".into(), access.clone(), 0, caller).await.unwrap();
        assert_eq!(fx.other.getattr(f.ino).await.unwrap().mode & 0o7777, kept, "{name}, read elsewhere");
        assert_eq!(ops.getattr(f.ino, me()).await.unwrap().mode & 0o7777, kept, "{name}, read here");
    }
    fx.stop().await;
}

/// A size past the largest file the servers' file systems hold is refused at once with EFBIG
/// (as ext4 refuses a truncate past 16 TiB), not taken and then unreachable by any write.
/// Where those file systems hold a 1 PiB file (tmpfs, xfs), that size is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_size_past_the_largest_file_is_refused_as_too_large() {
    const PIB: u64 = 1 << 50;
    let fx = Fixture::new("too-large", 2).await;
    let probe = fx.root.join("probe");
    let held_here = std::fs::File::create(&probe).unwrap().set_len(PIB).is_ok();
    std::fs::remove_file(&probe).unwrap();
    let ops = &fx.ops;
    let (f, Opened { fh, .. }) = ops.create(ROOT_INO, "f".into(), 0o644, 0, libc::O_RDWR, me()).await.unwrap();
    write(ops, fh, f.ino, 0, b"kept").await.unwrap();
    close(ops, f.ino, fh).await;
    let set = ops.setattr(f.ino, AttrChanges { size: Some(PIB), ..Default::default() }, None).await;
    if held_here {
        assert_eq!(set.unwrap().size, PIB);
    } else {
        assert_eq!(errno(set), libc::EFBIG);
        assert_eq!(fx.other.getattr(f.ino).await.unwrap().size, 4);
        assert_eq!(contents_elsewhere(&fx, ROOT_INO, "f").await, b"kept");
    }
    fx.stop().await;
}

/// A lock of `kind` over `start..=end` by `owner` (process `pid`).
fn lock(owner: u64, pid: u32, kind: LockKind, start: u64, end: u64) -> LockRange {
    LockRange { owner, pid, kind, start, end }
}

/// Byte-range locks exclude other owners, on this node and on another, and F_GETLK names the
/// holder; a close by the holder gives its POSIX locks back (a waiter elsewhere then gets
/// it), a close by anyone else does not; a lock taken as flock goes with the last close of
/// the handle it was taken through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_exclude_other_owners_and_go_with_their_holders() {
    use LockKind::{Read, Unlock, Write};
    let fx = Fixture::new("locks", 2).await;
    let ops = &fx.ops;
    let ino = put(ops, ROOT_INO, "data", &[0u8; 4096]).await;
    let (a, b) = (open(ops, ino, libc::O_RDWR).await, open(ops, ino, libc::O_RDWR).await);
    const END: u64 = u64::MAX;
    // Owner 1 (process 100) holds bytes 0-99 for writing.
    ops.set_lock(ino, a, lock(1, 100, Write, 0, 99), false).await.unwrap();
    let refused = |r| errno(r) == libc::EAGAIN;
    assert!(refused(ops.set_lock(ino, b, lock(2, 200, Write, 50, 59), false).await), "a write lock inside");
    assert!(refused(ops.set_lock(ino, b, lock(2, 200, Read, 99, 99), false).await), "a read lock on its last byte");
    let holder = ops.get_lock(ino, lock(2, 200, Write, 0, END)).await.unwrap().expect("a holder in the way");
    assert_eq!((holder.kind, holder.start, holder.end, holder.pid), (Write, 0, 99, 100));
    ops.set_lock(ino, b, lock(2, 200, Write, 100, 199), false).await.expect("free beside it");
    assert!(ops.get_lock(ino, lock(2, 200, Read, 100, 100)).await.unwrap().is_none(), "an owner's own lock is not in its way");
    assert!(refused(fx.other.set_lock(ino, lock(3, 300, Read, 0, 9), false).await), "another node is refused too");
    ops.set_lock(ino, a, lock(1, 100, Read, 0, 99), false).await.expect("the holder changes its own lock");
    fx.other.set_lock(ino, lock(3, 300, Read, 0, 9), false).await.expect("a read lock beside a read lock");
    fx.other.set_lock(ino, lock(3, 300, Unlock, 0, END), false).await.unwrap();

    // A waiter on another node gets the lock once the holder closes the file.
    let waiter = {
        let other = fx.other.clone();
        tokio::spawn(async move { other.set_lock(ino, lock(3, 300, Write, 0, 9), true).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter got a lock that is held");
    ops.flush(ino, b, 7).await.unwrap();
    assert!(refused(fx.other.set_lock(ino, lock(4, 400, Write, 0, 9), false).await), "a close by another process gives nothing back");
    ops.flush(ino, a, 1).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("the waiter got the lock").unwrap().unwrap();
    fx.other.set_lock(ino, lock(3, 300, Unlock, 0, END), false).await.unwrap();
    assert!(refused(fx.other.set_lock(ino, lock(3, 300, Write, 150, 150), false).await), "owner 2's lock stays until it closes");
    ops.flush(ino, b, 2).await.unwrap();
    fx.other.set_lock(ino, lock(3, 300, Write, 150, 150), false).await.expect("owner 2's close gave its lock back");
    fx.other.set_lock(ino, lock(3, 300, Unlock, 0, END), false).await.unwrap();

    // flock: the owner is the open file; its last close gives the lock back.
    let c = open(ops, ino, libc::O_RDONLY).await;
    ops.set_lock(ino, c, lock(5, 500, Write, 0, END), false).await.unwrap();
    assert!(refused(fx.other.set_lock(ino, lock(6, 600, Read, 0, END), false).await));
    ops.release(ino, c).await.unwrap();
    fx.other.set_lock(ino, lock(6, 600, Read, 0, END), false).await.expect("the flock went with its handle");
    for fh in [a, b] {
        ops.release(ino, fh).await.unwrap();
    }
    fx.stop().await;
}

/// fallocate and lseek's SEEK_DATA/SEEK_HOLE through the mount: a hole punched reads as zeros
/// on another node, which the mount finds where it is (the kernel's generic answer would call
/// the whole file data); mode 0 grows a file, KEEP_SIZE does not, ZERO_RANGE zeros; modes
/// the mount does not know and bad whences are refused, and a negative offset finds nothing
/// (ENXIO). `st_blocks` counts what the servers hold: holes are not counted, space set aside is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holes_punched_and_found() {
    let fx = Fixture::new("holes", 2).await;
    let ops = &fx.ops;
    let ino = put(ops, ROOT_INO, "sparse", &vec![9u8; 4 * MIB]).await;
    let fh = open(ops, ino, libc::O_RDWR).await;
    let (m1, m3, m4) = (MIB as u64, 3 * MIB as u64, 4 * MIB as u64);
    ops.fallocate(ino, fh, m1, 2 * m1, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE).await.unwrap();
    let seen = contents_elsewhere(&fx, ROOT_INO, "sparse").await;
    assert_eq!(seen.len(), 4 * MIB, "punching keeps the size");
    assert!(seen[..MIB].iter().all(|&x| x == 9) && seen[3 * MIB..].iter().all(|&x| x == 9));
    assert!(seen[MIB..3 * MIB].iter().all(|&x| x == 0), "the hole reads as zeros");
    assert_eq!(read(ops, fh, ino, m1 - 1, 2).await.unwrap(), [9, 0], "and through the handle that punched it");
    assert_blocks(&fx, ino, 2 * m1, "2 of 4 MiB left after the punch").await;
    let seek = |offset: i64, whence: i32| ops.seek_data(fh, offset, whence);
    assert_eq!(seek(0, libc::SEEK_HOLE).await.unwrap(), m1);
    assert_eq!(seek(0, libc::SEEK_DATA).await.unwrap(), 0);
    assert_eq!(seek(m1 as i64, libc::SEEK_DATA).await.unwrap(), m3);
    assert_eq!(seek(m3 as i64, libc::SEEK_HOLE).await.unwrap(), m4, "the end of the file is a hole");
    assert_eq!(errno(seek(m4 as i64, libc::SEEK_DATA).await), libc::ENXIO, "no data at the end");
    assert_eq!(errno(seek(0, libc::SEEK_END).await), libc::EINVAL);
    assert_eq!(errno(seek(-1, libc::SEEK_DATA).await), libc::ENXIO, "a negative offset, as ext4 and xfs answer");
    assert_eq!(errno(seek(-1, libc::SEEK_HOLE).await), libc::ENXIO);

    ops.fallocate(ino, fh, 0, 6 * m1, 0).await.unwrap();
    assert_eq!(fx.other.getattr(ino).await.unwrap().size, 6 * m1, "posix_fallocate grows the file");
    assert_blocks(&fx, ino, 6 * m1, "posix_fallocate sets the whole range aside").await;
    ops.fallocate(ino, fh, 6 * m1, 2 * m1, libc::FALLOC_FL_KEEP_SIZE).await.unwrap();
    assert_eq!(fx.other.getattr(ino).await.unwrap().size, 6 * m1, "KEEP_SIZE keeps it");
    assert_blocks(&fx, ino, 8 * m1, "space set aside past the end counts").await;
    ops.fallocate(ino, fh, 100, 100, libc::FALLOC_FL_ZERO_RANGE).await.unwrap();
    assert_eq!(read(ops, fh, ino, 99, 102).await.unwrap(), [[9].as_slice(), &[0; 100], &[9]].concat());
    assert_eq!(errno(ops.fallocate(ino, fh, 0, m1, libc::FALLOC_FL_COLLAPSE_RANGE).await), libc::EOPNOTSUPP);
    close(ops, ino, fh).await;
    let seen = contents_elsewhere(&fx, ROOT_INO, "sparse").await;
    assert_eq!(seen.len(), 6 * MIB);
    assert!(seen[100..200].iter().all(|&x| x == 0) && seen[4 * MIB..].iter().all(|&x| x == 0));
    fx.stop().await;
}

/// Asserts that file `ino` holds `bytes` on the servers (`st_blocks`; a data file's own
/// bookkeeping may add a few blocks), as the mount answers and as another node reads it.
async fn assert_blocks(fx: &Fixture, ino: u64, bytes: u64, what: &str) {
    let here = fx.ops.getattr(ino, me()).await.unwrap().blocks;
    let there = fx.other.getattr(ino).await.unwrap().blocks;
    for blocks in [here, there] {
        assert!(blocks.is_some_and(|b| (bytes / 512..=bytes / 512 + 64).contains(&b)), "{what}: {here:?} blocks here, {there:?} there");
    }
}

/// Times set after writing (cp -a, cp -p and tar x set them on the open descriptor, then
/// close it) survive the writer's close, for another node; a write after that sets mtime
/// again. setattr keeps only permission bits of a mode and truncates through a handle or
/// without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_set_after_writing_survive_the_writers_close() {
    let fx = Fixture::new("times", 2).await;
    let ops = &fx.ops;
    let then = Timestamp { secs: 981_173_106, nanos: 0 }; // 2001-02-03 04:05:06 UTC
    let set_times = AttrChanges { atime: Some(then), mtime: Some(then), ..Default::default() };
    let (big, Opened { fh, .. }) = ops.create(ROOT_INO, "big".into(), 0o644, 0, libc::O_WRONLY, me()).await.unwrap();
    write(ops, fh, big.ino, 0, &vec![5u8; 3_000_000]).await.unwrap();
    let set = ops.setattr(big.ino, set_times.clone(), Some(fh)).await.unwrap();
    assert_eq!(set.mtime, then, "the answer has the time set");
    close(ops, big.ino, fh).await;
    let there = fx.other.getattr(big.ino).await.unwrap();
    assert_eq!((there.mtime.secs, there.atime.secs, there.size), (then.secs, then.secs, 3_000_000), "kept over the close");
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    ops.setattr(d, set_times.clone(), None).await.unwrap();
    assert_eq!(fx.other.getattr(d).await.unwrap().mtime.secs, then.secs, "a directory's too");

    let fh = open(ops, big.ino, libc::O_WRONLY).await;
    write(ops, fh, big.ino, 3_000_000, b"more\n").await.unwrap();
    close(ops, big.ino, fh).await;
    let later = fx.other.getattr(big.ino).await.unwrap();
    assert!(later.mtime.secs > then.secs + 1_000_000, "a later write moves mtime on: {:?}", later.mtime);
    assert_eq!(later.size, 3_000_005);

    let mode = ops.setattr(big.ino, AttrChanges { mode: Some(libc::S_IFREG | 0o4750), ..Default::default() }, None).await.unwrap();
    assert_eq!(mode.mode, 0o4750, "the permission and set-id bits, not the type");
    let fh = open(ops, big.ino, libc::O_WRONLY).await;
    ops.setattr(big.ino, AttrChanges { size: Some(10), ..Default::default() }, Some(fh)).await.unwrap();
    close(ops, big.ino, fh).await;
    assert_eq!(contents_elsewhere(&fx, ROOT_INO, "big").await, [5u8; 10], "truncated through a handle");
    ops.setattr(big.ino, AttrChanges { size: Some(20), ..Default::default() }, None).await.unwrap();
    assert_eq!(contents(ops, ROOT_INO, "big").await, [[5u8; 10], [0u8; 10]].concat(), "extended by truncate(2)");
    fx.stop().await;
}

/// What one handle writes, a read through another handle of the file on this node sees, even
/// where that reader had read ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_sees_writes_made_through_another_handle_on_the_same_node() {
    let fx = Fixture::new("handles", 3).await;
    let ops = &fx.ops;
    let (attr, Opened { fh: writer, .. }) = ops.create(ROOT_INO, "shared".into(), 0o644, 0, libc::O_RDWR, me()).await.unwrap();
    let ino = attr.ino;
    write(ops, writer, ino, 0, &vec![1u8; 4 * MIB]).await.unwrap();
    ops.flush(ino, writer, 0).await.unwrap();
    let reader = open(ops, ino, libc::O_RDONLY).await;
    // Sequential reads start reading ahead...
    for offset in [0, 64 << 10] {
        assert!(read(ops, reader, ino, offset, 64 << 10).await.unwrap().iter().all(|&b| b == 1));
    }
    // ...then the other handle rewrites a region ahead of the reader.
    write(ops, writer, ino, 128 << 10, &vec![2u8; 64 << 10]).await.unwrap();
    let seen = read(ops, reader, ino, 128 << 10, 64 << 10).await.unwrap();
    assert!(seen.len() == 64 << 10 && seen.iter().all(|&b| b == 2), "read returned data fetched before the write");
    let seen = read(ops, reader, ino, (2 * MIB) as u64, 64 << 10).await.unwrap();
    assert!(seen.iter().all(|&b| b == 1));
    close(ops, ino, writer).await;
    close(ops, ino, reader).await;
    fx.stop().await;
}

/// Handles of one file on one node agree on its size: a reader opened before two writers
/// extend the file reads every byte they wrote once they closed, and a shorter rewrite
/// (O_TRUNC) while that reader still holds the file ends where the new bytes end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_on_one_node_agree_on_a_files_size_as_it_grows_and_shrinks() {
    let fx = Fixture::new("sizes", 3).await;
    let ops = &fx.ops;
    let ino = put(ops, ROOT_INO, "checkpoint", &vec![1u8; 8 * MIB]).await;
    let reader = open(ops, ino, libc::O_RDONLY).await;
    assert_eq!(read_all(ops, reader, ino).await.unwrap(), vec![1u8; 8 * MIB]);
    let mut writers = Vec::new();
    for half in 0..2u8 {
        let (ops, fh) = (ops.clone(), open(ops, ino, libc::O_WRONLY).await);
        writers.push(tokio::spawn(async move {
            for i in 0..4u64 {
                write(&ops, fh, ino, (u64::from(half) * 4 + i) * MIB as u64, &vec![10 + half; MIB]).await.unwrap();
            }
            if half == 1 {
                write(&ops, fh, ino, 8 * MIB as u64, &[12u8; 100]).await.unwrap();
            }
            close(&ops, ino, fh).await;
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(ops.getattr(ino, me()).await.unwrap().size, 8 * MIB as u64 + 100);
    let after = read_all(ops, reader, ino).await.unwrap();
    assert_eq!(after.len(), 8 * MIB + 100, "the reader reads to the new end");
    assert!(after[..4 * MIB].iter().all(|&b| b == 10), "first half");
    assert!(after[4 * MIB..8 * MIB].iter().all(|&b| b == 11), "second half");
    assert!(after[8 * MIB..].iter().all(|&b| b == 12), "past the old end");

    let shorter: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let fh = open(ops, ino, libc::O_WRONLY | libc::O_TRUNC).await;
    write(ops, fh, ino, 0, &shorter).await.unwrap();
    close(ops, ino, fh).await;
    assert_eq!(ops.getattr(ino, me()).await.unwrap().size, 3_000_000);
    assert_eq!(read_all(ops, reader, ino).await.unwrap(), shorter, "the older reader ends where the new bytes end");
    assert_eq!(contents_elsewhere(&fx, ROOT_INO, "checkpoint").await, shorter);
    close(ops, ino, reader).await;
    fx.stop().await;
}

/// A reopen of a file nobody changed since this node wrote or read it lets the kernel keep
/// its pages (the first open after writing too); one whose file another node rewrote in
/// place (same size, the old mtime set back) does not, and reads the new bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopened_files_keep_their_pages_until_another_node_changes_them() {
    let fx = Fixture::new("keepcache", 2).await;
    let ops = &fx.ops;
    let old = vec![1u8; 3 * MIB];
    let ino = put(ops, ROOT_INO, "data", &old).await;
    for (read, what) in [(1, "first open after writing"), (2, "second open")] {
        let Opened { fh, keep_cache, .. } = ops.open(ino, libc::O_RDONLY, me()).await.unwrap();
        assert!(keep_cache, "{what}: the written pages are the file's");
        assert_eq!(read_all(ops, fh, ino).await.unwrap(), old, "read {read}");
        close(ops, ino, fh).await;
    }
    let mtime = fx.other.getattr(ino).await.unwrap().mtime;
    let f = fx.other.open_ino(ino).await.unwrap();
    f.pwrite(0, &vec![2u8; 3 * MIB]).await.unwrap();
    f.close().await.unwrap();
    fx.other.setattr(ino, AttrChanges { mtime: Some(mtime), ..Default::default() }).await.unwrap();
    let Opened { fh, keep_cache, .. } = ops.open(ino, libc::O_RDONLY, me()).await.unwrap();
    assert!(!keep_cache, "another node's bytes: the kernel's pages are dropped");
    assert_eq!(read_all(ops, fh, ino).await.unwrap(), vec![2u8; 3 * MIB]);
    close(ops, ino, fh).await;
    assert!(ops.open(ino, libc::O_RDONLY, me()).await.unwrap().keep_cache, "and keeps those in turn");
    let Opened { keep_cache, .. } = ops.open(ino, libc::O_WRONLY | libc::O_TRUNC, me()).await.unwrap();
    assert!(!keep_cache, "an open that truncates drops them");
    fx.stop().await;
}

/// O_APPEND through the mount and from another node at once: every line lands whole, none
/// over another, wherever the kernel thinks the end is (the offset passed is ignored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_from_the_mount_and_another_node_all_land_whole() {
    const LINES: usize = 300;
    let fx = Fixture::new("append", 3).await;
    let ino = put(&fx.ops, ROOT_INO, "log", b"").await;
    let here = {
        let ops = fx.ops.clone();
        let fh = open(&ops, ino, libc::O_WRONLY | libc::O_APPEND).await;
        tokio::spawn(async move {
            for i in 0..LINES {
                let line = format!("a {i} of the lines appended through the mount\n");
                assert_eq!(append(&ops, fh, ino, 0, line.as_bytes()).await.unwrap(), line.len());
            }
            close(&ops, ino, fh).await;
        })
    };
    let there = {
        let f = fx.other.open_ino(ino).await.unwrap();
        tokio::spawn(async move {
            for i in 0..LINES {
                f.append(bytes::Bytes::from(format!("b {i} of the lines appended from another node\n"))).await.unwrap();
            }
            f.close().await.unwrap();
        })
    };
    here.await.unwrap();
    there.await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    for (node, text) in [("mount", contents(&fx.ops, ROOT_INO, "log").await), ("other", contents_elsewhere(&fx, ROOT_INO, "log").await)] {
        assert!(Instant::now() < deadline);
        let text = String::from_utf8(text).unwrap();
        let mut seen: Vec<&str> = text.lines().collect();
        assert_eq!(seen.len(), 2 * LINES, "{node}: every line");
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 2 * LINES, "{node}: no line twice");
        let whole = |from: &str, end: &str| seen.iter().filter(|l| l.starts_with(from) && l.ends_with(end)).count();
        assert_eq!(whole("a ", "through the mount"), LINES, "{node}: every line from the mount whole");
        assert_eq!(whole("b ", "from another node"), LINES, "{node}: every line from the other node whole");
    }
    fx.stop().await;
}

/// A hole punched or a range zeroed changes the file's bytes as a write does: its close
/// publishes a new mtime, so the content version every node's open compares moves, and a
/// node holding the old bytes in its page cache drops them at its next open (without it, the
/// fsx two-mount check read a's old bytes after b's punch, when the change notice lost the
/// race with a's open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_punched_hole_moves_the_content_version_as_a_write_does() {
    let fx = Fixture::new("punchversion", 2).await;
    let ops = &fx.ops;
    let ino = put(ops, ROOT_INO, "f", &vec![7u8; 64 << 10]).await;
    for (mode, what) in [(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, "punch hole"), (libc::FALLOC_FL_ZERO_RANGE, "zero range")]
    {
        let before = fx.other.getattr(ino).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let fh = open(ops, ino, libc::O_RDWR).await;
        ops.fallocate(ino, fh, 4096, 8192, mode).await.unwrap();
        close(ops, ino, fh).await;
        let after = fx.other.getattr(ino).await.unwrap();
        assert_eq!(after.size, before.size, "{what}");
        assert!(after.mtime > before.mtime, "{what}: mtime {:?} then {:?}", before.mtime, after.mtime);
        assert_ne!(after.content_version(), before.content_version(), "{what}");
    }
    fx.stop().await;
}
