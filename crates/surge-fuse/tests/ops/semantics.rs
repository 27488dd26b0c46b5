//! POSIX semantics of the mount, checked on the operations layer over servers running in this
//! process: what the workspace's kernel-mount tests (tests/suite/fuse.rs) check through a mount and
//! needs no kernel to decide, driven as the adapter drives it. The kernel adds its own checks
//! (permissions, a name's type before an unlink) and caches; these are the mount's answers
//! beneath them, for the ordinary path and for a directory held under a delegation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{
    close, contents, contents_elsewhere, errno, me, names, now, put, read_all, warm_until_held, write, write_killing_set_id, Fixture,
};
use surge_client::surge_proto::ROOT_INO;
use surge_fuse::ops::{Answer, Caller, Opened, Ops};

/// The kernel-free part of tests/suite/fuse.rs's errno checks: each refusal carries its errno.
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
    assert_eq!(errno(ops.unlink(ROOT_INO, "dir".into()).await), libc::EISDIR);
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
    assert_eq!(crate::common::sorted(&fx.other.readdir_ino(d).await.unwrap()), expected);
    renames_seen_elsewhere(&fx, d).await;
    assert_eq!(errno(fx.other.lookup(d, "scratch").await), libc::ENOENT);
    assert_eq!(contents_elsewhere(&fx, d, "kept").await, b"");
    assert_eq!(contents_elsewhere(&fx, sub.ino, "f").await, b"in a new directory");
    let parent = fx.other.getattr(d).await.unwrap();
    assert_eq!(parent.nlink, 3, "the parent's link count: one subdirectory");
    fx.stop().await;
}

/// A directory's link count is 2 + its subdirectories (find and other tree walkers rely on
/// it), as the mount answers it (from what it heard moments ago, moved by its own mkdirs and
/// rmdirs) and as another node reads it, through mkdir, rmdir and a move up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_link_counts_follow_their_subdirectories() {
    let fx = Fixture::new("nlink", 3).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    for sub in ["s1", "s2", "s3"] {
        let made = ops.mkdir(d, sub.into(), 0o755, 0, me()).await.unwrap();
        assert_eq!(made.nlink, 2, "{sub}: a new directory");
    }
    let file = put(ops, d, "file", b"x").await;
    let other = &fx.other;
    let links = |ino: u64| async move { (ops.getattr(ino, me()).await.unwrap().nlink, other.getattr(ino).await.unwrap().nlink) };
    assert_eq!(links(d).await, (5, 5), "three subdirectories, one file");
    assert_eq!(links(file).await, (1, 1));
    ops.rmdir(d, "s1".into()).await.unwrap();
    assert_eq!(links(d).await, (4, 4), "after an rmdir");
    ops.rename(d, "s2".into(), ROOT_INO, "moved".into(), 0).await.unwrap();
    assert_eq!((links(d).await, links(ROOT_INO).await), ((3, 3), (4, 4)), "after moving one up");
    assert_eq!(names(ops, d).await.unwrap(), ["file", "s3"]);
    fx.stop().await;
}

/// Hard links: names in directories homed on different servers, one inode. The count, the
/// data and the inode agree under every name, for the mount and another node; the data stays
/// until the last name goes; an existing name (the same file's too) is refused, the count
/// left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_links_span_directories_on_any_server() {
    let fx = Fixture::new("links", 4).await;
    let ops = &fx.ops;
    let mut dirs = Vec::new();
    for name in ["d1", "d2", "d3", "d4"] {
        dirs.push(ops.mkdir(ROOT_INO, name.into(), 0o755, 0, me()).await.unwrap().ino);
    }
    let homes: std::collections::HashSet<usize> = dirs.iter().map(|&d| surge_client::surge_proto::ino::home(d)).collect();
    assert!(homes.len() > 1, "the directories are homed on several servers");
    let f = put(ops, ROOT_INO, "f", b"first\n").await;
    let ctime_before = fx.other.getattr(f).await.unwrap().ctime;
    for (i, &dir) in dirs.iter().enumerate() {
        let linked = ops.link(f, dir, "g".into()).await.unwrap();
        assert_eq!((linked.ino, linked.nlink), (f, 2 + i as u32), "the link's answer counts it");
    }
    for (&dir, name) in [(&ROOT_INO, "f"), (&dirs[2], "g"), (&dirs[3], "g")] {
        let here = ops.lookup(dir, name.into(), me()).await.unwrap();
        let there = fx.other.lookup(dir, name).await.unwrap();
        for attr in [here, there] {
            assert_eq!((attr.ino, attr.nlink, attr.size), (f, 5, 6), "{name}");
        }
    }
    assert_ne!(fx.other.getattr(f).await.unwrap().ctime, ctime_before, "a link changes the inode's ctime");
    let g = ops.lookup(dirs[1], "g".into(), me()).await.unwrap();
    let Opened { fh, .. } = ops.open(g.ino, libc::O_WRONLY | libc::O_APPEND, me()).await.unwrap();
    crate::common::append(ops, fh, g.ino, 0, b"second\n").await.unwrap();
    close(ops, g.ino, fh).await;
    assert_eq!(contents_elsewhere(&fx, dirs[0], "g").await, b"first\nsecond\n", "one file's data under every name");

    ops.unlink(ROOT_INO, "f".into()).await.unwrap();
    fx.other.unlink_at(dirs[0], "g").await.unwrap();
    ops.unlink(dirs[1], "g".into()).await.unwrap();
    let left = ops.lookup(dirs[3], "g".into(), me()).await.unwrap();
    assert_eq!((left.ino, left.nlink, left.size), (f, 2, 13), "two names left");
    assert_eq!(contents(ops, dirs[2], "g").await, b"first\nsecond\n");
    assert_eq!(errno(ops.link(f, dirs[3], "g".into()).await), libc::EEXIST, "an existing name, the same file's too");
    assert_eq!(errno(ops.link(f, dirs[0], "n".repeat(256)).await), libc::ENAMETOOLONG);
    assert_eq!(errno(ops.link(dirs[0], ROOT_INO, "dirlink".into()).await), libc::EPERM, "no links to directories");
    assert_eq!(fx.other.getattr(f).await.unwrap().nlink, 2, "a refused link leaves the count");
    ops.unlink(dirs[2], "g".into()).await.unwrap();
    ops.unlink(dirs[3], "g".into()).await.unwrap();
    for &dir in &dirs {
        assert!(names(ops, dir).await.unwrap().is_empty(), "every name gone");
    }
    assert_eq!(errno(fx.other.getattr(f).await), libc::ENOENT, "the file went with its last name");
    fx.stop().await;
}

/// RENAME_EXCHANGE of a file and a directory across directories homed on different servers:
/// each name takes the other's inode, the parents' link counts follow the directory, and
/// every file is where the swaps put it; renameat2's refusals carry their errno.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_exchange_swaps_names_across_servers() {
    let fx = Fixture::new("exchange", 4).await;
    let ops = &fx.ops;
    let mkdir = |parent: u64, name: &str| {
        let name = name.to_string();
        async move { ops.mkdir(parent, name, 0o755, 0, me()).await.unwrap().ino }
    };
    let mut dirs = std::collections::HashMap::new();
    for name in ["d1", "d2", "d3", "d4"] {
        dirs.insert(name, mkdir(ROOT_INO, name).await);
    }
    let homes: std::collections::HashSet<usize> = dirs.values().map(|&d| surge_client::surge_proto::ino::home(d)).collect();
    assert!(homes.len() > 1, "the directories are homed on several servers");
    put(ops, dirs["d1"], "f", b"one").await;
    put(ops, dirs["d2"], "f", b"two").await;
    let sub3 = mkdir(dirs["d3"], "sub").await;
    put(ops, sub3, "g", b"g").await;
    let sub4 = mkdir(dirs["d4"], "sub").await;
    put(ops, sub4, "h", b"h").await;
    // (directory holding a file, name; directory holding a directory, name)
    for (file_dir, file_name, dir_dir, dir_name) in [("d1", "f", "d3", "sub"), ("d2", "f", "d4", "sub"), ("d4", "sub", "d1", "f")] {
        let (f, d) = (dirs[file_dir], dirs[dir_dir]);
        let (file_ino, dir_ino) =
            (ops.lookup(f, file_name.into(), me()).await.unwrap().ino, ops.lookup(d, dir_name.into(), me()).await.unwrap().ino);
        let (file_links, dir_links) = (ops.getattr(f, me()).await.unwrap().nlink, ops.getattr(d, me()).await.unwrap().nlink);
        ops.rename(f, file_name.into(), d, dir_name.into(), libc::RENAME_EXCHANGE).await.expect("exchanged");
        assert_eq!(ops.lookup(f, file_name.into(), me()).await.unwrap().ino, dir_ino, "{file_dir}/{file_name}");
        assert_eq!(fx.other.lookup(d, dir_name).await.unwrap().ino, file_ino, "{dir_dir}/{dir_name}, seen elsewhere");
        assert_eq!(
            (ops.getattr(f, me()).await.unwrap().nlink, ops.getattr(d, me()).await.unwrap().nlink),
            (file_links + 1, dir_links - 1),
            "link counts, {file_dir} <-> {dir_dir}"
        );
        assert_eq!((fx.other.getattr(f).await.unwrap().nlink, fx.other.getattr(d).await.unwrap().nlink), (file_links + 1, dir_links - 1));
    }
    assert_eq!(contents_at(&fx, dirs["d4"], &["sub", "g"]).await, b"g");
    assert_eq!(contents_at(&fx, dirs["d2"], &["f", "h"]).await, b"h");
    assert_eq!(contents_at(&fx, dirs["d1"], &["f"]).await, b"two");
    assert_eq!(contents_at(&fx, dirs["d3"], &["sub"]).await, b"one");

    let x = put(ops, ROOT_INO, "x", b"x").await;
    let exchange = |from: &str, to_dir: u64, to: &str| ops.rename(ROOT_INO, from.into(), to_dir, to.into(), libc::RENAME_EXCHANGE);
    assert_eq!(errno(exchange("x", ROOT_INO, "missing").await), libc::ENOENT);
    let outer = mkdir(ROOT_INO, "outer").await;
    mkdir(outer, "inner").await;
    assert_eq!(errno(exchange("outer", outer, "inner").await), libc::EINVAL, "a directory with its own subdirectory");
    assert_eq!(errno(ops.rename(ROOT_INO, "outer".into(), ROOT_INO, "x".into(), libc::RENAME_NOREPLACE).await), libc::EEXIST);
    assert_eq!(errno(ops.rename(ROOT_INO, "x".into(), ROOT_INO, "y".into(), libc::RENAME_WHITEOUT).await), libc::EINVAL);
    assert_eq!(ops.lookup(ROOT_INO, "x".into(), me()).await.unwrap().ino, x, "nothing moved by a refusal");
    assert_eq!(names(ops, outer).await.unwrap(), ["inner"]);
    fx.stop().await;
}

/// What the file at `path` below directory `dir` holds, as another node reads it.
async fn contents_at(fx: &Fixture, dir: u64, path: &[&str]) -> Vec<u8> {
    let (last, walk) = path.split_last().unwrap();
    let mut ino = dir;
    for name in walk {
        ino = fx.other.lookup(ino, name).await.unwrap().ino;
    }
    contents_elsewhere(fx, ino, last).await
}

/// Symbolic links keep their targets, and FIFOs, sockets and device nodes are names with
/// their kinds, modes and device numbers, for the mount and another node; they are linked and
/// unlinked like files. A mknod of a kind that is none of these is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_fifos_sockets_and_device_nodes_are_names_of_their_kind() {
    use surge_client::surge_proto::FileKind;
    let fx = Fixture::new("special", 2).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    let link = ops.symlink(d, "link".into(), "linux/stddef.h".into(), me()).await.unwrap();
    assert_eq!(link.kind, FileKind::Symlink);
    assert_eq!(ops.readlink(link.ino).await.unwrap(), "linux/stddef.h");
    assert_eq!(fx.other.readlink_ino(fx.other.lookup(d, "link").await.unwrap().ino).await.unwrap(), "linux/stddef.h");
    assert_eq!(errno(ops.symlink(d, "link".into(), "elsewhere".into(), me()).await), libc::EEXIST);

    let dev = |major, minor| libc::makedev(major, minor) as u32;
    let made = [
        ("pipe", libc::S_IFIFO | 0o640, 0, FileKind::Fifo),
        ("null", libc::S_IFCHR | 0o644, dev(1, 3), FileKind::CharDevice { rdev: dev(1, 3) }),
        ("loop", libc::S_IFBLK | 0o644, dev(7, 0), FileKind::BlockDevice { rdev: dev(7, 0) }),
        ("sock", libc::S_IFSOCK | 0o755, 0, FileKind::Socket),
    ];
    for (name, mode, rdev, kind) in made {
        let attr = ops.mknod(d, name.into(), mode, 0o022, rdev, me()).await.unwrap();
        assert_eq!((attr.kind, attr.mode), (kind, mode & 0o755), "{name}: as made, less the umask");
        let there = fx.other.lookup(d, name).await.unwrap();
        assert_eq!((there.kind, there.mode, there.ino), (kind, mode & 0o755, attr.ino), "{name}, seen elsewhere");
    }
    let plain = ops.mknod(d, "plain".into(), libc::S_IFREG | 0o600, 0, 0, me()).await.unwrap();
    assert_eq!((plain.kind, plain.size, plain.mode), (FileKind::File, 0, 0o600), "mknod of a regular file");
    assert_eq!(errno(ops.mknod(d, "dir".into(), libc::S_IFDIR | 0o755, 0, 0, me()).await), libc::EINVAL);
    let fh = ops.opendir(d).await.unwrap();
    let listed: Vec<(String, FileKind)> = ops.dir_entries(fh).unwrap().iter().map(|e| (e.name.clone(), e.kind)).collect();
    ops.releasedir(fh);
    let mut expected: Vec<(String, FileKind)> = made
        .iter()
        .map(|(name, _, _, kind)| (name.to_string(), *kind))
        .chain([("link".into(), FileKind::Symlink), ("plain".into(), FileKind::File)])
        .collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed, expected, "listed with their kinds");

    let pipe = ops.lookup(d, "pipe".into(), me()).await.unwrap().ino;
    assert_eq!(ops.link(pipe, d, "pipe2".into()).await.unwrap().nlink, 2);
    for name in ["pipe", "null", "loop", "sock", "link"] {
        ops.unlink(d, name.into()).await.unwrap();
    }
    let left = fx.other.lookup(d, "pipe2").await.unwrap();
    assert_eq!((left.kind, left.nlink), (FileKind::Fifo, 1), "linked and unlinked like files");
    assert_eq!(names(ops, d).await.unwrap(), ["pipe2", "plain"]);
    fx.stop().await;
}

/// A directory larger than one page of the servers' listing, every name 255 bytes long:
/// opendir lists each name once, in name order, with its inode and kind; the listing is a
/// snapshot taken at opendir that later creates and unlinks leave alone, and a name of 256
/// bytes is refused by every operation that makes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_long_names_lists_in_full_as_a_snapshot() {
    use surge_client::surge_proto::namespace::Create;
    use surge_client::surge_proto::FileKind;
    const FILES: usize = 5000;
    let fx = Fixture::new("huge", 2).await;
    let ops = &fx.ops;
    let name = |i: usize| format!("{i:06}{}", "n".repeat(249));
    let dir = fx.other.mkdir_at(ROOT_INO, "big", 0o755).await.unwrap().ino;
    let (uid, gid) = fx.other.identity();
    let creates: Vec<Create> = (0..FILES)
        .map(|i| Create { parent: dir, name: name(i), mode: 0o644, umask: 0, uid, gid, exclusive: true, open: false, place_on: None })
        .collect();
    for outcome in fx.other.batch(surge_client::surge_proto::ino::home(dir), creates).await.unwrap() {
        outcome.unwrap();
    }
    let fh = ops.opendir(dir).await.unwrap();
    let listed = ops.dir_entries(fh).unwrap();
    assert_eq!(listed.len(), FILES, "every entry");
    assert!(listed.iter().enumerate().all(|(i, e)| e.name == name(i) && e.kind == FileKind::File), "in name order, each once");
    for i in [0, 4095, 4096, FILES - 1] {
        assert_eq!(ops.lookup(dir, name(i), me()).await.unwrap().ino, listed[i].ino, "entry {i}'s inode");
    }

    put(ops, dir, "late", b"").await;
    ops.unlink(dir, name(7)).await.unwrap();
    assert_eq!(ops.dir_entries(fh).unwrap(), listed, "the open listing is the snapshot taken at opendir");
    ops.releasedir(fh);
    assert_eq!(errno(ops.dir_entries(fh)), libc::EBADF, "a released directory handle");
    let now_listed = names(ops, dir).await.unwrap();
    assert_eq!(now_listed.len(), FILES);
    assert!(now_listed.contains(&"late".to_string()) && !now_listed.contains(&name(7)), "a new opendir sees both changes");

    let long = "n".repeat(256);
    assert_eq!(errno(ops.mkdir(dir, long.clone(), 0o755, 0, me()).await), libc::ENAMETOOLONG);
    assert_eq!(errno(ops.symlink(dir, long.clone(), "t".into(), me()).await), libc::ENAMETOOLONG);
    assert_eq!(errno(ops.mknod(dir, long.clone(), libc::S_IFIFO | 0o644, 0, 0, me()).await), libc::ENAMETOOLONG);
    assert_eq!(errno(ops.rename(dir, "late".into(), dir, long.clone(), 0).await), libc::ENAMETOOLONG);
    assert_eq!(errno(ops.lookup(dir, long, me()).await), libc::ENAMETOOLONG);
    assert!(ops.lookup(dir, "late".into(), me()).await.is_ok(), "a refused rename moves nothing");
    fx.stop().await;
}

/// In a directory the mount made, names another node makes are found the moment their
/// create returns, and names another node removes are gone at once: a create of that name
/// here then makes a new file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_made_and_removed_elsewhere_are_seen_at_once() {
    let fx = Fixture::new("elsewhere", 3).await;
    let ops = &fx.ops;
    let out = ops.mkdir(ROOT_INO, "out".into(), 0o755, 0, me()).await.unwrap().ino;
    for i in 0..40 {
        let theirs = format!("f{i}");
        assert_eq!(errno(ops.lookup(out, theirs.clone(), me()).await), libc::ENOENT);
        let f = fx.other.create_at(out, &theirs, 0o644, true).await.unwrap();
        f.pwrite(0, format!("{i}").as_bytes()).await.unwrap();
        f.close().await.unwrap();
        assert_eq!(contents(ops, out, &theirs).await, format!("{i}").as_bytes(), "round {i}");
        put(ops, out, &format!("mine{i}"), b"a").await;
    }
    assert_eq!(names(ops, out).await.unwrap().len(), 80);
    let mine7 = ops.lookup(out, "mine7".into(), me()).await.unwrap().ino;
    fx.other.unlink_at(out, "mine7").await.unwrap();
    assert_eq!(errno(ops.lookup(out, "mine7".into(), me()).await), libc::ENOENT, "removed elsewhere: gone here too");
    let (again, Opened { fh, .. }) = ops.create(out, "mine7".into(), 0o644, 0, libc::O_EXCL, me()).await.unwrap();
    assert_ne!(again.ino, mine7, "an exclusive create of the name makes a new file");
    close(ops, again.ino, fh).await;
    fx.other.mkdir_at(out, "sub", 0o755).await.unwrap();
    assert_eq!(errno(ops.mkdir(out, "sub".into(), 0o755, 0, me()).await), libc::EEXIST, "a directory made elsewhere");
    assert_eq!(names(ops, out).await.unwrap().len(), 81);
    fx.stop().await;
}

/// Files made under a delegation behave as any file, for the mount and another node: fsync
/// publishes before close; renames, hard links, truncation through a handle, explicit times
/// and unlinks of a file made before the delegation keep their meaning; the mode is the
/// caller's less its umask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_made_under_a_delegation_behave_as_any_file() {
    use surge_client::surge_proto::{AttrChanges, Timestamp};
    let fx = Fixture::new("delegatedfiles", 2).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    put(ops, d, "before", b"made before").await;
    let warm = warm_until_held(ops, d).await;

    let (synced, Opened { fh, .. }) = ops.create(d, "synced".into(), 0o666, 0o022, libc::O_WRONLY, me()).await.unwrap();
    assert_eq!(synced.mode, 0o644, "the caller's mode less its umask");
    write(ops, fh, synced.ino, 0, b"durable").await.unwrap();
    ops.fsync(fh).await.unwrap();
    assert_eq!(contents_elsewhere(&fx, d, "synced").await, b"durable", "fsync publishes, close has not happened");
    close(ops, synced.ino, fh).await;

    put(ops, d, "tmp", b"checkpoint").await;
    ops.rename(d, "tmp".into(), d, "ckpt".into(), 0).await.unwrap();
    let ckpt = ops.lookup(d, "ckpt".into(), me()).await.unwrap().ino;
    assert_eq!(ops.link(ckpt, d, "ckpt.link".into()).await.unwrap().nlink, 2);
    let cut = put(ops, d, "cut", b"0123456789").await;
    let Opened { fh, .. } = ops.open(cut, libc::O_WRONLY, me()).await.unwrap();
    let truncated = ops.setattr(cut, AttrChanges { size: Some(4), ..Default::default() }, Some(fh)).await.unwrap();
    assert_eq!(truncated.size, 4);
    close(ops, cut, fh).await;
    let old = put(ops, d, "old", b"old").await;
    let then = Timestamp { secs: 981_173_106, nanos: 0 };
    ops.setattr(old, AttrChanges { mtime: Some(then), ..Default::default() }, None).await.unwrap();
    ops.unlink(d, "before".into()).await.unwrap();
    ops.unlink(d, "warm03".into()).await.unwrap();

    assert_eq!(contents_elsewhere(&fx, d, "ckpt").await, b"checkpoint");
    assert_eq!(errno(fx.other.lookup(d, "tmp").await), libc::ENOENT);
    assert_eq!(fx.other.lookup(d, "ckpt.link").await.unwrap().nlink, 2);
    assert_eq!(contents_elsewhere(&fx, d, "cut").await, b"0123");
    assert_eq!(fx.other.lookup(d, "old").await.unwrap().mtime.secs, then.secs);
    assert_eq!(fx.other.lookup(d, "synced").await.unwrap().mode, 0o644);
    let mut expected: Vec<String> = ["ckpt", "ckpt.link", "cut", "old", "synced"].map(String::from).to_vec();
    expected.extend(warm.into_iter().filter(|name| name != "warm03"));
    expected.sort();
    assert_eq!(crate::common::sorted(&fx.other.readdir_ino(d).await.unwrap()), expected);
    assert_eq!(names(ops, d).await.unwrap(), expected);
    fx.stop().await;
}

/// Directories made and renames answered under a delegation behave as any: the new
/// directory's mode and link count, the parent's link count after mkdirs, rmdirs, a move and
/// a directory replacing an empty one; a file renamed while open keeps taking its writes;
/// rename(2)'s refusals; mdtest's rotation of names; and what another node finds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_and_renames_under_a_delegation_behave_as_any() {
    let fx = Fixture::new("delegateddirs", 2).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    let warm = warm_until_held(ops, d).await;
    let sub = |i: usize| format!("sub{i:02}");
    let mut subs = Vec::new();
    for i in 0..20 {
        let made = ops.mkdir(d, sub(i), 0o777, 0o027, me()).await.unwrap();
        assert_eq!((made.mode, made.nlink), (0o750, 2), "{}", sub(i));
        subs.push(made.ino);
    }
    put(ops, subs[0], "f", b"in a new directory").await;
    put(ops, subs[1], "g", b"gone soon").await;
    ops.unlink(subs[1], "g".into()).await.unwrap();
    for i in (15..20).chain([1]) {
        ops.rmdir(d, sub(i)).await.unwrap_or_else(|e| panic!("rmdir {}: {e}", sub(i)));
    }
    assert_eq!(errno(ops.rmdir(d, sub(0)).await), libc::ENOTEMPTY);
    ops.rename(d, sub(14), d, "moved".into(), 0).await.unwrap();
    ops.rename(d, sub(13), d, sub(12), 0).await.expect("a directory over an empty one");
    assert_eq!(ops.lookup(d, sub(12), me()).await.unwrap().ino, subs[13]);

    let (open, Opened { fh, .. }) = ops.create(d, "open".into(), 0o644, 0, libc::O_WRONLY, me()).await.unwrap();
    write(ops, fh, open.ino, 0, b"first ").await.unwrap();
    ops.rename(d, "open".into(), d, "renamed-open".into(), 0).await.unwrap();
    write(ops, fh, open.ino, 6, b"second").await.unwrap();
    close(ops, open.ino, fh).await;
    let rename = |from: &str, to: &str, flags: u32| ops.rename(d, from.into(), d, to.into(), flags);
    assert_eq!(errno(rename("warm00", &sub(4), 0).await), libc::EISDIR);
    assert_eq!(errno(rename(&sub(4), "warm01", 0).await), libc::ENOTDIR);
    assert_eq!(errno(rename("warm02", "warm03", libc::RENAME_NOREPLACE).await), libc::EEXIST);
    rename("warm02", "fresh", libc::RENAME_NOREPLACE).await.unwrap();
    assert_eq!(errno(rename("nothing", "fresh2", 0).await), libc::ENOENT);
    put(ops, subs[6], "mark", b"was sub06").await;
    for (from, to) in [(sub(5), "sub05-XX".to_string()), (sub(6), sub(5)), ("sub05-XX".to_string(), sub(6))] {
        rename(&from, &to, 0).await.unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
    }
    assert_eq!(errno(rename(&sub(3), &sub(0), 0).await), libc::ENOTEMPTY);

    // 20 made; 15-19 and 01 removed, 13 over 12: 13 left, one of them "moved".
    let mut expected: Vec<String> = (0..13).filter(|&i| i != 1).map(sub).collect();
    expected.extend(["moved", "renamed-open", "fresh"].map(String::from));
    expected.extend(warm.into_iter().filter(|name| name != "warm02"));
    expected.sort();
    assert_eq!(names(ops, d).await.unwrap(), expected);
    assert_eq!(ops.getattr(d, me()).await.unwrap().nlink, 2 + 13, "the parent's link count, on this node");
    assert_eq!(crate::common::sorted(&fx.other.readdir_ino(d).await.unwrap()), expected);
    assert_eq!(fx.other.getattr(d).await.unwrap().nlink, 2 + 13, "and on another");
    let made = fx.other.lookup(d, &sub(2)).await.unwrap();
    assert_eq!((made.mode, made.nlink), (0o750, 2));
    assert_eq!(contents_elsewhere(&fx, subs[0], "f").await, b"in a new directory");
    assert_eq!(contents_elsewhere(&fx, d, "renamed-open").await, b"first second");
    let marked = fx.other.lookup(d, &sub(5)).await.unwrap().ino;
    assert_eq!(contents_elsewhere(&fx, marked, "mark").await, b"was sub06");
    fx.stop().await;
}

/// Creates answered under a delegation reach another node in order and at once: whenever it
/// lists the directory, it sees a prefix of the creates that includes every one that had
/// returned, with its bytes (the first listing recalls the delegation; the creates go on the
/// ordinary way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_under_a_delegation_reach_another_node_in_order_and_at_once() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    const FILES: usize = 300;
    let fx = Fixture::new("delegatedorder", 2).await;
    let d = fx.ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    warm_until_held(&fx.ops, d).await;
    let done = Arc::new(AtomicUsize::new(0));
    let creator = {
        let (ops, done) = (fx.ops.clone(), done.clone());
        tokio::spawn(async move {
            for i in 0..FILES {
                let content = if i % 2 == 0 { format!("{i}") } else { String::new() };
                put(&ops, d, &format!("f{i:04}"), content.as_bytes()).await;
                done.store(i + 1, SeqCst);
                if i % 16 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    loop {
        let returned = done.load(SeqCst);
        let listed: Vec<String> =
            crate::common::sorted(&fx.other.readdir_ino(d).await.unwrap()).into_iter().filter(|n| n.starts_with('f')).collect();
        let prefix: Vec<String> = (0..listed.len()).map(|i| format!("f{i:04}")).collect();
        assert_eq!(listed, prefix, "not a prefix of the creates");
        assert!(listed.len() >= returned, "{} names listed, {returned} creates had returned", listed.len());
        if let Some(last) = returned.checked_sub(1).map(|i| i & !1) {
            assert_eq!(contents_elsewhere(&fx, d, &format!("f{last:04}")).await, format!("{last}").as_bytes());
        }
        if returned == FILES {
            break;
        }
        tokio::task::yield_now().await;
    }
    creator.await.unwrap();
    fx.stop().await;
}

/// The mount asks for a directory while it goes on creating there the ordinary way: every
/// create answered while the grant was on its way is one the delegation knows, so its unlink
/// finds it, in directory after directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_made_while_a_grant_is_on_its_way_stay_known() {
    let fx = Fixture::new("delegatedrace", 2).await;
    let ops = &fx.ops;
    for round in 0..30 {
        let dir = ops.mkdir(ROOT_INO, format!("d{round}"), 0o755, 0, me()).await.unwrap().ino;
        for i in 0..40 {
            put(ops, dir, &format!("f{i}"), b"").await;
        }
        for i in 0..40 {
            ops.unlink(dir, format!("f{i}")).await.unwrap_or_else(|e| panic!("round {round}: unlink f{i}: {e}"));
        }
        assert!(names(ops, dir).await.unwrap().is_empty(), "round {round}");
        ops.rmdir(ROOT_INO, format!("d{round}")).await.unwrap();
    }
    assert!(names(ops, ROOT_INO).await.unwrap().is_empty());
    fx.stop().await;
}

/// A burst of mkdirs longer than a grant's inode numbers keeps its delegation (renewed, not
/// given back and asked for again): more mkdirs are answered at once than one grant has
/// numbers for, and every directory made that way is removed by the mount at once too,
/// which only the delegation that made it can do. Another node then finds the directory as
/// the burst left it. (About half of the directories are homed with their parent and answered
/// at once; the others are made on the other server the ordinary way.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_longer_than_a_grant_renews_its_delegation() {
    // The numbers one grant sets aside (surge-fuse's delegations).
    const NUMBERS: usize = 4096;
    const DIRS: usize = 10_000;
    let fx = Fixture::new("delegatedrenew", 2).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    let mut made_at_once = std::collections::HashSet::new();
    for i in 0..DIRS {
        let name = format!("{i:05}");
        match ops.mkdir(d, name.clone(), 0o755, 0, me()) {
            Answer::Now(made) => {
                made.unwrap();
                made_at_once.insert(name);
            }
            later => {
                later.await.unwrap();
            }
        }
        if i % 64 == 0 {
            // Room for the renewal's answer on a loaded runtime.
            tokio::task::yield_now().await;
        }
    }
    assert!(made_at_once.len() > NUMBERS, "{} mkdirs answered at once: the delegation was not renewed", made_at_once.len());
    for i in 0..100 {
        put(ops, d, &format!("f{i:03}"), b"").await;
    }
    let mut not_at_once = 0;
    for i in 0..DIRS {
        let name = format!("{i:05}");
        match ops.rmdir(d, name.clone()) {
            Answer::Now(removed) => removed.unwrap(),
            later => {
                later.await.unwrap();
                not_at_once += usize::from(made_at_once.contains(&name));
            }
        }
    }
    assert_eq!(not_at_once, 0, "directories made under the delegation were removed the ordinary way: it was given back");
    let expected: Vec<String> = (0..100).map(|i| format!("f{i:03}")).collect();
    assert_eq!(crate::common::sorted(&fx.other.readdir_ino(d).await.unwrap()), expected);
    assert_eq!(fx.other.getattr(d).await.unwrap().nlink, 2);
    fx.stop().await;
}

/// A name longer than NAME_MAX is ENAMETOOLONG for every operation that takes one, also in a
/// directory made here, whose missing names the mount answers for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_too_long_is_enametoolong_everywhere() {
    let fx = Fixture::new("toolong", 2).await;
    let ops = &fx.ops;
    let dir = ops.mkdir(ROOT_INO, "made".into(), 0o755, 0, me()).await.unwrap().ino;
    let f = put(ops, dir, "f", b"x").await;
    let long = || "x".repeat(256);
    for parent in [dir, ROOT_INO] {
        assert_eq!(errno(ops.lookup(parent, long(), me()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.create(parent, long(), 0o644, 0, 0, me()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.mknod(parent, long(), libc::S_IFIFO | 0o644, 0, 0, me()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.mkdir(parent, long(), 0o755, 0, me()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.unlink(parent, long()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.rmdir(parent, long()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.symlink(parent, long(), "t".into(), me()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.link(f, parent, long()).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.rename(dir, "f".into(), parent, long(), 0).await), libc::ENAMETOOLONG);
        assert_eq!(errno(ops.rename(parent, long(), dir, "g".into(), 0).await), libc::ENAMETOOLONG);
    }
    assert_eq!(errno(ops.lookup(dir, "x".repeat(255), me()).await), libc::ENOENT, "NAME_MAX itself is a name");
    assert_eq!(names(ops, dir).await.unwrap(), ["f"]);
    fx.stop().await;
}

/// A directory's mtime and ctime read right after a create, link, unlink, mkdir, rmdir or
/// rename through this mount are the ones its home has: they do not change by themselves a
/// moment later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_times_are_exact_after_a_change_here() {
    let fx = Fixture::new("dirtimes", 2).await;
    let ops = &fx.ops;
    let dir = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    let f = put(ops, dir, "f", b"x").await;
    let other = &fx.other;
    let exact = |what: &'static str| async move {
        let seen = ops.getattr(dir, me()).await.unwrap();
        let home = other.getattr(dir).await.unwrap();
        assert_eq!((seen.mtime, seen.ctime, seen.nlink), (home.mtime, home.ctime, home.nlink), "after {what}");
        seen
    };
    let mut before = exact("a create").await;
    for what in ["link", "unlink", "mkdir", "rename", "rmdir", "symlink"] {
        tokio::time::sleep(Duration::from_millis(20)).await;
        match what {
            "link" => drop(ops.link(f, dir, "g".into()).await.unwrap()),
            "unlink" => ops.unlink(dir, "g".into()).await.unwrap(),
            "mkdir" => drop(ops.mkdir(dir, "sub".into(), 0o755, 0, me()).await.unwrap()),
            "rename" => ops.rename(dir, "f".into(), dir, "f2".into(), 0).await.unwrap(),
            "rmdir" => ops.rmdir(dir, "sub".into()).await.unwrap(),
            _ => drop(ops.symlink(dir, "s".into(), "f2".into(), me()).await.unwrap()),
        }
        let after = exact(what).await;
        assert!(after.mtime > before.mtime && after.ctime > before.ctime, "{what} moved the directory's times");
        before = after;
    }
    let linked = ops.getattr(f, me()).await.unwrap();
    assert_eq!(linked.ctime, fx.other.getattr(f).await.unwrap().ctime);
    fx.stop().await;
}

/// A write the kernel marks as one by a caller without CAP_FSETID is answered only once the
/// file's set-id bits are gone (a stat or exec right after it must not find them); the
/// servers keep them for root's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_privilege_is_answered_after_the_set_id_bits_went() {
    let fx = Fixture::new("setid", 2).await;
    let ops = &fx.ops;
    let nobody = Caller { uid: 65534, gid: 65534, pid: std::process::id() };
    let root = Caller { uid: 0, gid: 0, pid: std::process::id() };
    for (name, caller, left) in [("by-nobody", nobody, 0o777), ("by-root", root, 0o6777)] {
        let (f, Opened { fh, .. }) = ops.create(ROOT_INO, name.into(), 0o6777, 0, libc::O_RDWR, me()).await.unwrap();
        assert_eq!(fx.other.getattr(f.ino).await.unwrap().mode & 0o7777, 0o6777, "{name}");
        write_killing_set_id(ops, fh, f.ino, 0, b"x", Some(caller)).await.unwrap();
        assert_eq!(fx.other.getattr(f.ino).await.unwrap().mode & 0o7777, left, "{name}");
        close(ops, f.ino, fh).await;
        assert_eq!(contents_elsewhere(&fx, ROOT_INO, name).await, b"x");
    }
    fx.stop().await;
}

/// `touch`, `cp -p` and `tar x` set the times of each file they make: in a directory held
/// under a delegation that is answered at once while the file's create is still in the log
/// (through the handle or by name, before or after a write and close), and the times, the
/// size and a later chmod (which takes the ordinary path) are what another node then reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_set_on_files_made_under_a_delegation_reach_the_home() {
    use surge_client::surge_proto::{AttrChanges, Timestamp};
    let fx = Fixture::new("delegated-times", 2).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    warm_until_held(ops, d).await;
    let at = |secs| Timestamp { secs, nanos: 7 };
    let times = |atime, mtime| AttrChanges { atime: Some(at(atime)), mtime: Some(at(mtime)), ..Default::default() };
    // The log is written back every few milliseconds: some of these files' creates may have
    // gone by the time their times are set, which then take the ordinary path.
    let mut answered_now = 0;
    for i in 0..20 {
        let name = format!("f{i:02}");
        let (f, Opened { fh, .. }) = ops.create(d, name.clone(), 0o644, 0, libc::O_RDWR, me()).await.unwrap();
        let set = ops.setattr(f.ino, times(1_000, 2_000), Some(fh));
        answered_now += matches!(set, Answer::Now(_)) as u32;
        let attr = set.await.unwrap();
        assert_eq!((attr.atime, attr.mtime, attr.size), (at(1_000), at(2_000), 0), "{name}");
        write(ops, fh, f.ino, 0, b"abc").await.unwrap();
        close(ops, f.ino, fh).await;
        let set = ops.setattr(f.ino, times(3_000, 4_000), None);
        answered_now += matches!(set, Answer::Now(_)) as u32;
        let attr = set.await.unwrap();
        assert_eq!((attr.atime, attr.mtime, attr.size), (at(3_000), at(4_000), 3), "{name}");
        if i % 2 == 0 {
            let chmod = ops.setattr(f.ino, AttrChanges { mode: Some(0o600), ..times(5_000, 6_000) }, None);
            assert!(matches!(chmod, Answer::Later(_)), "a mode goes to the home");
            assert_eq!(chmod.await.unwrap().mode & 0o7777, 0o600);
        }
    }
    assert!(answered_now > 0, "no change of times was answered under the delegation");
    for i in 0..20 {
        let name = format!("f{i:02}");
        let attr = fx.other.lookup(d, &name).await.unwrap();
        let (mode, atime, mtime) = if i % 2 == 0 { (0o600, 5_000, 6_000) } else { (0o644, 3_000, 4_000) };
        assert_eq!((attr.mode & 0o7777, attr.atime, attr.mtime, attr.size), (mode, at(atime), at(mtime), 3), "{name}");
        assert_eq!(contents_elsewhere(&fx, d, &name).await, b"abc");
    }
    fx.stop().await;
}

/// A directory handle lists the directory as it was at opendir, however it changes while the
/// program reads on; going back to the start (rewinddir) lists it as it is then, names made
/// and removed meanwhile by another node included, also when the program rewinds before its
/// first read (xfstests generic/471).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewound_directory_handle_lists_the_directory_anew() {
    let fx = Fixture::new("rewind", 2).await;
    let ops = &fx.ops;
    let dir = ops.mkdir(ROOT_INO, "dir".into(), 0o755, 0, me()).await.unwrap();
    put(ops, dir.ino, "old", b"x").await;
    let fh = ops.opendir(dir.ino).await.unwrap();
    let listed = |listing: &[surge_client::surge_proto::DirEntry]| listing.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
    assert_eq!(listed(&ops.listing_from(fh, 0).await.unwrap()), ["old"]);
    fx.other.create_at(dir.ino, "new", 0o644, true).await.unwrap().close().await.unwrap();
    fx.other.unlink_at(dir.ino, "old").await.unwrap();
    assert_eq!(listed(&ops.listing_from(fh, 3).await.unwrap()), ["old"], "read on: the snapshot");
    assert_eq!(listed(&ops.listing_from(fh, 0).await.unwrap()), ["new"], "rewound: the directory now");
    assert_eq!(listed(&ops.listing_from(fh, 2).await.unwrap()), ["new"], "and reading on from there");
    ops.releasedir(fh);

    // Rewound before its first read (the kernel tells nothing of a rewinddir): the names
    // this node made since opendir are listed.
    let fh = ops.opendir(dir.ino).await.unwrap();
    put(ops, dir.ino, "made", b"y").await;
    assert_eq!(listed(&ops.listing_from(fh, 0).await.unwrap()), ["made", "new"]);
    ops.releasedir(fh);
    fx.stop().await;
}

/// The lookups the kernel makes to turn a file handle back into an inode: "." in the inode
/// itself, ".." in a directory for its parent; a file gone since is a stale handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_by_number_find_the_inode_and_a_directory_s_parent() {
    let fx = Fixture::new("bynumber", 2).await;
    let ops = &fx.ops;
    let dir = ops.mkdir(ROOT_INO, "dir".into(), 0o755, 0, me()).await.unwrap();
    let f = put(ops, dir.ino, "f", b"abc").await;
    let found = ops.lookup(f, ".".into(), me()).await.unwrap();
    assert_eq!((found.ino, found.size), (f, 3));
    assert_eq!(ops.lookup(dir.ino, "..".into(), me()).await.unwrap().ino, ROOT_INO);
    assert_eq!(ops.lookup(dir.ino, ".".into(), me()).await.unwrap().ino, dir.ino);
    fx.other.unlink_at(dir.ino, "f").await.unwrap();
    assert_eq!(errno(ops.lookup(f, ".".into(), me()).await), libc::ESTALE);
    fx.stop().await;
}
