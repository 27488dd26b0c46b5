//! POSIX semantics of the mount, checked on the operations layer over servers running in this
//! process: what the workspace's kernel-mount tests (tests/fuse.rs) check through a mount and
//! needs no kernel to decide, driven as the adapter drives it. The kernel adds its own checks
//! (permissions, a name's type before an unlink) and caches; these are the mount's answers
//! beneath them, for the ordinary path and for a directory held under a delegation.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{me, names, now, read_all, write, Fixture};
use surge_client::surge_proto::ROOT_INO;
use surge_client::Result;
use surge_fuse::ops::{Answer, Opened, Ops};

/// The errno a failed operation answers.
fn errno<T>(result: Result<T>) -> i32 {
    match result {
        Ok(_) => panic!("the operation succeeded"),
        Err(e) => e.errno(),
    }
}

/// Creates `parent/name` (as open(2) with O_CREAT), writes `data`, closes it.
async fn put(ops: &Arc<Ops>, parent: u64, name: &str, data: &[u8]) -> u64 {
    let (attr, Opened { fh, .. }) = ops.create(parent, name.into(), 0o644, 0, 0, me()).await.unwrap();
    assert_eq!(write(ops, fh, attr.ino, 0, data).await.unwrap(), data.len());
    close(ops, attr.ino, fh).await;
    attr.ino
}

/// close(2) of the last descriptor of handle `fh`: its flush, then its release.
async fn close(ops: &Arc<Ops>, ino: u64, fh: u64) {
    ops.flush(ino, fh, 0).await.unwrap();
    ops.release(ino, fh).await.unwrap();
}

/// What `parent/name` holds, read through a handle of the mount.
async fn contents(ops: &Arc<Ops>, parent: u64, name: &str) -> Vec<u8> {
    let attr = ops.lookup(parent, name.into(), me()).await.unwrap();
    let Opened { fh, .. } = ops.open(attr.ino, libc::O_RDONLY, me()).await.unwrap();
    let data = read_all(ops, fh, attr.ino).await.unwrap();
    close(ops, attr.ino, fh).await;
    data
}

/// What `parent/name` holds, as another node reads it.
async fn contents_elsewhere(fx: &Fixture, parent: u64, name: &str) -> Vec<u8> {
    let attr = fx.other.lookup(parent, name).await.unwrap();
    let f = fx.other.open_ino(attr.ino).await.unwrap();
    let data = f.pread(0, attr.size as usize + 1).await.unwrap();
    f.close().await.unwrap();
    data
}

/// The kernel-free part of tests/fuse.rs's errno checks: each refusal carries its errno.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_the_right_errno() {
    let fx = Fixture::new("errno", 2).await;
    let ops = &fx.ops;
    let dir = ops.mkdir(ROOT_INO, "dir".into(), 0o755, 0, me()).await.unwrap();
    let f = put(ops, dir.ino, "f", b"x").await;
    assert_eq!(errno(ops.lookup(ROOT_INO, "nope".into(), me()).await), libc::ENOENT);
    assert_eq!(errno(ops.mkdir(ROOT_INO, "dir".into(), 0o755, 0, me()).await), libc::EEXIST);
    assert_eq!(errno(ops.rmdir(ROOT_INO, "dir".into()).await), libc::ENOTEMPTY);
    assert_eq!(errno(ops.rmdir(dir.ino, "f".into()).await), libc::ENOTDIR);
    assert_eq!(errno(ops.opendir(f).await), libc::ENOTDIR);
    assert_eq!(errno(ops.create(ROOT_INO, "n".repeat(256), 0o644, 0, 0, me()).await), libc::ENAMETOOLONG);
    assert_eq!(errno(ops.unlink(ROOT_INO, "nope".into()).await), libc::ENOENT);
    // Nothing of the refusals changed the directory.
    assert_eq!(names(ops, ROOT_INO).await.unwrap(), ["dir"]);
    assert_eq!(names(ops, dir.ino).await.unwrap(), ["f"]);
    fx.stop().await;
}

/// A checkpoint written as a temporary and renamed over the last one replaces it at once for
/// every node, and a handle still open on the file replaced keeps that file's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_replaces_a_file_and_a_handle_of_the_old_one_keeps_its_bytes() {
    let fx = Fixture::new("rename", 3).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    renames_replace(ops, d).await;
    renames_seen_elsewhere(&fx, d).await;
    fx.stop().await;
}

async fn renames_replace(ops: &Arc<Ops>, d: u64) {
    let mut last = 0;
    for step in 0..5 {
        last = put(ops, d, "ckpt.tmp", format!("step {step}").as_bytes()).await;
        ops.rename(d, "ckpt.tmp".into(), d, "ckpt".into(), 0).await.unwrap();
    }
    assert_eq!(ops.lookup(d, "ckpt".into(), me()).await.unwrap().ino, last);
    assert_eq!(errno(ops.lookup(d, "ckpt.tmp".into(), me()).await), libc::ENOENT);
    assert_eq!(contents(ops, d, "ckpt").await, b"step 4");

    let (victim, Opened { fh, .. }) = ops.create(d, "victim".into(), 0o644, 0, libc::O_RDWR | libc::O_EXCL, me()).await.unwrap();
    write(ops, fh, victim.ino, 0, b"still mine").await.unwrap();
    let winner = put(ops, d, "winner", b"won").await;
    ops.rename(d, "winner".into(), d, "victim".into(), 0).await.unwrap();
    write(ops, fh, victim.ino, 10, b"!").await.unwrap();
    assert_eq!(read_all(ops, fh, victim.ino).await.unwrap(), b"still mine!");
    close(ops, victim.ino, fh).await;
    assert_eq!(ops.lookup(d, "victim".into(), me()).await.unwrap().ino, winner);
    assert_eq!(contents(ops, d, "victim").await, b"won");
}

async fn renames_seen_elsewhere(fx: &Fixture, d: u64) {
    assert_eq!(contents_elsewhere(fx, d, "ckpt").await, b"step 4");
    assert_eq!(contents_elsewhere(fx, d, "victim").await, b"won");
    assert_eq!(errno(fx.other.lookup(d, "ckpt.tmp").await), libc::ENOENT);
    assert_eq!(errno(fx.other.lookup(d, "winner").await), libc::ENOENT);
}

/// rename(2)'s refusals (a file over a directory, a directory over a file, RENAME_NOREPLACE
/// over a name that exists, a missing name, over a directory that is not empty), a directory
/// over an empty one, and RENAME_EXCHANGE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_refuses_what_posix_refuses_and_exchanges() {
    let fx = Fixture::new("refusals", 3).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    let rename = |from: &str, to: &str, flags: u32| ops.rename(d, from.into(), d, to.into(), flags);
    let file = put(ops, d, "file", b"f").await;
    put(ops, d, "other", b"o").await;
    let empty = ops.mkdir(d, "empty".into(), 0o755, 0, me()).await.unwrap().ino;
    let full = ops.mkdir(d, "full".into(), 0o755, 0, me()).await.unwrap().ino;
    put(ops, full, "inside", b"x").await;
    let moving = ops.mkdir(d, "moving".into(), 0o755, 0, me()).await.unwrap().ino;

    assert_eq!(errno(rename("file", "empty", 0).await), libc::EISDIR);
    assert_eq!(errno(rename("empty", "file", 0).await), libc::ENOTDIR);
    assert_eq!(errno(rename("file", "other", libc::RENAME_NOREPLACE).await), libc::EEXIST);
    assert_eq!(errno(rename("nothing", "fresh", 0).await), libc::ENOENT);
    assert_eq!(errno(rename("moving", "full", 0).await), libc::ENOTEMPTY);
    rename("moving", "empty", 0).await.expect("a directory over an empty one");
    assert_eq!(ops.lookup(d, "empty".into(), me()).await.unwrap().ino, moving);
    assert_eq!(errno(fx.other.getattr(empty).await), libc::ENOENT);
    rename("file", "full", libc::RENAME_EXCHANGE).await.expect("a file and a directory swapped");
    assert_eq!(ops.lookup(d, "full".into(), me()).await.unwrap().ino, file);
    assert_eq!(ops.lookup(d, "file".into(), me()).await.unwrap().ino, full);
    assert_eq!(names(ops, full).await.unwrap(), ["inside"]);
    assert_eq!(contents_elsewhere(&fx, d, "full").await, b"f");
    fx.stop().await;
}

/// unlink(2) of a file still open: the name is gone at once, for every node; the handle
/// keeps reading and writing the file's bytes until it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlinked_open_file_keeps_its_data_until_released() {
    let fx = Fixture::new("unlinked", 2).await;
    let d = fx.ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    unlinked_open_file(&fx.ops, d).await;
    assert_eq!(errno(fx.other.lookup(d, "scratch").await), libc::ENOENT);
    fx.stop().await;
}

async fn unlinked_open_file(ops: &Arc<Ops>, d: u64) {
    let (attr, Opened { fh, .. }) = ops.create(d, "scratch".into(), 0o644, 0, libc::O_RDWR | libc::O_EXCL, me()).await.unwrap();
    ops.unlink(d, "scratch".into()).await.unwrap();
    let body = vec![7u8; 100_000];
    assert_eq!(write(ops, fh, attr.ino, 0, &body).await.unwrap(), body.len());
    assert_eq!(read_all(ops, fh, attr.ino).await.unwrap(), body, "an unlinked open file keeps its bytes");
    assert_eq!(errno(ops.lookup(d, "scratch".into(), me()).await), libc::ENOENT);
    assert!(!names(ops, d).await.unwrap().contains(&"scratch".to_string()));
    close(ops, attr.ino, fh).await;
}

/// open(2) with O_CREAT | O_EXCL of a name that exists fails with EEXIST and changes nothing;
/// without O_EXCL it opens the file there, and with O_TRUNC empties it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_create_of_an_existing_name_fails_and_a_plain_one_opens_it() {
    let fx = Fixture::new("excl", 2).await;
    let d = fx.ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    exclusive_creates(&fx.ops, d).await;
    assert_eq!(contents_elsewhere(&fx, d, "kept").await, b"");
    fx.stop().await;
}

async fn exclusive_creates(ops: &Arc<Ops>, d: u64) {
    let ino = put(ops, d, "kept", b"keep me").await;
    assert_eq!(errno(ops.create(d, "kept".into(), 0o600, 0, libc::O_RDWR | libc::O_EXCL, me()).await), libc::EEXIST);
    assert_eq!(contents(ops, d, "kept").await, b"keep me");
    let (attr, Opened { fh, .. }) = ops.create(d, "kept".into(), 0o600, 0, libc::O_RDWR, me()).await.unwrap();
    assert_eq!((attr.ino, attr.mode & 0o777), (ino, 0o644), "the file there, its mode unchanged");
    assert_eq!(read_all(ops, fh, ino).await.unwrap(), b"keep me");
    close(ops, ino, fh).await;
    let (attr, Opened { fh, .. }) = ops.create(d, "kept".into(), 0o600, 0, libc::O_RDWR | libc::O_TRUNC, me()).await.unwrap();
    assert_eq!((attr.ino, attr.size), (ino, 0));
    close(ops, ino, fh).await;
}

/// A directory another node made, where names keep turning out missing, gets its listing
/// fetched (missing names are then answered without a round trip); a name the other node
/// makes afterwards is found at once, and so are the mount's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_directory_still_finds_names_made_elsewhere() {
    let fx = Fixture::new("listed", 3).await;
    let ops = &fx.ops;
    let theirs = fx.other.mkdir_at(ROOT_INO, "theirs", 0o755).await.unwrap().ino;
    let deadline = Instant::now() + Duration::from_secs(5);
    for i in 0.. {
        match ops.lookup(theirs, format!("none{i}"), me()) {
            Answer::Now(missing) => {
                assert_eq!(errno(missing), libc::ENOENT);
                break;
            }
            later => assert_eq!(errno(later.await), libc::ENOENT),
        }
        assert!(Instant::now() < deadline, "the listing was never fetched");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mine = put(ops, theirs, "mine", b"a").await;
    assert_eq!(ops.lookup(theirs, "mine".into(), me()).await.unwrap().ino, mine);
    for i in 0..20 {
        let name = format!("b{i}");
        // Missing here before the other node makes it...
        assert_eq!(errno(ops.lookup(theirs, name.clone(), me()).await), libc::ENOENT);
        let f = fx.other.create_at(theirs, &name, 0o644, true).await.unwrap();
        let made = f.ino();
        f.close().await.unwrap();
        // ...and found once its create returned.
        assert_eq!(ops.lookup(theirs, name, me()).await.unwrap().ino, made, "round {i}");
    }
    let mut expected: Vec<String> = (0..20).map(|i| format!("b{i}")).chain(["mine".to_string()]).collect();
    expected.sort();
    assert_eq!(names(ops, theirs).await.unwrap(), expected);
    fx.stop().await;
}

/// Makes files warm00, warm01, ... in `dir` (a directory the mount made) until the mount
/// holds it under a delegation, which a create answered at once shows. Answers their names.
async fn warm_until_held(ops: &Arc<Ops>, dir: u64) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut warm = Vec::new();
    loop {
        let name = format!("warm{:02}", warm.len());
        let (created, held) = match ops.create(dir, name.clone(), 0o644, 0, 0, me()) {
            Answer::Now(created) => (created, true),
            later => (later.await, false),
        };
        let (attr, Opened { fh, .. }) = created.unwrap();
        close(ops, attr.ino, fh).await;
        warm.push(name);
        if held {
            return warm;
        }
        assert!(Instant::now() < deadline, "no delegation granted");
        if warm.len() > 16 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The same semantics in a directory the mount holds under a delegation, where it answers
/// creates, unlinks, renames, mkdirs and rmdirs itself: a directory not empty is not
/// removed, a name that exists is not made again, and another node sees what was done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_directory_keeps_the_same_semantics() {
    let fx = Fixture::new("delegated", 2).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    let warm = warm_until_held(ops, d).await;
    let exclusive = now(ops.create(d, warm[0].clone(), 0o644, 0, libc::O_EXCL, me()));
    assert_eq!(exclusive.map(errno), Some(libc::EEXIST), "refused at once under the delegation");
    let sub = ops.mkdir(d, "sub".into(), 0o750, 0, me()).await.unwrap();
    assert_eq!(errno(ops.mkdir(d, "sub".into(), 0o750, 0, me()).await), libc::EEXIST);
    put(ops, sub.ino, "f", b"in a new directory").await;
    assert_eq!(errno(ops.rmdir(d, "sub".into()).await), libc::ENOTEMPTY);
    ops.mkdir(d, "gone".into(), 0o750, 0, me()).await.unwrap();
    ops.rmdir(d, "gone".into()).await.expect("an empty directory made here is removed");
    renames_replace(ops, d).await;
    unlinked_open_file(ops, d).await;
    exclusive_creates(ops, d).await;

    let mut expected: Vec<String> = ["ckpt", "kept", "sub", "victim"].iter().map(|s| s.to_string()).chain(warm).collect();
    expected.sort();
    assert_eq!(names(ops, d).await.unwrap(), expected);
    // Another node names the directory last: the delegation is recalled, its log written back.
    assert_eq!(common::sorted(&fx.other.readdir_ino(d).await.unwrap()), expected);
    renames_seen_elsewhere(&fx, d).await;
    assert_eq!(errno(fx.other.lookup(d, "scratch").await), libc::ENOENT);
    assert_eq!(contents_elsewhere(&fx, d, "kept").await, b"");
    assert_eq!(contents_elsewhere(&fx, sub.ino, "f").await, b"in a new directory");
    let parent = fx.other.getattr(d).await.unwrap();
    assert_eq!(parent.nlink, 3, "the parent's link count: one subdirectory");
    fx.stop().await;
}
