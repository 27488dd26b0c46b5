//! The operations layer's cache logic against real servers running in this process: what the
//! mount answers without a round trip, and how another client's change reaches it. No root,
//! no kernel mount: the operations are called as the adapter would call them.

use std::time::{Duration, Instant};

use crate::common::{me, now, put, read, warm_until_held, write, Fixture, TTL};
use surge_client::surge_proto::AttrChanges;
use surge_client::surge_proto::{ErrorCode, ROOT_INO};
use surge_fuse::ops::Opened;

/// In a directory the mount made, a missing name is answered without asking a server; once
/// another client creates that name, the server's notice (acknowledged before the create
/// returned) has dropped what the mount knew, and the lookup finds the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_created_elsewhere_is_never_answered_missing() {
    let fx = Fixture::new("missing", 3).await;
    let dir = fx.ops.mkdir(ROOT_INO, "run".into(), 0o755, 0, me()).await.unwrap();
    assert!(
        matches!(now(fx.ops.lookup(dir.ino, "plot.h5".into(), me())), Some(Err(e)) if e.code == ErrorCode::NotFound),
        "a name missing from a directory made here is known missing"
    );
    let f = fx.other.create_at(dir.ino, "plot.h5", 0o644, true).await.unwrap();
    let created = f.ino();
    f.close().await.unwrap();
    assert!(now(fx.ops.lookup(dir.ino, "plot.h5".into(), me())).is_none(), "after another node's create, the mount must ask");
    let found = fx.ops.lookup(dir.ino, "plot.h5".into(), me()).await.unwrap();
    assert_eq!(found.ino, created);
    fx.stop().await;
}

/// A directory's attributes are answered from what was just heard (saving the round trip the
/// kernel makes before every create), until this mount changes them or the window passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_attributes_are_answered_locally_until_changed() {
    let fx = Fixture::new("dirattr", 2).await;
    let dir = fx.ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap();
    assert_eq!(now(fx.ops.getattr(dir.ino, me())).map(|a| a.unwrap().mode), Some(0o755));
    let changed = fx.ops.setattr(dir.ino, AttrChanges { mode: Some(0o700), ..Default::default() }, None).await.unwrap();
    assert_eq!(changed.mode, 0o700);
    // Told again by setattr's answer: the new mode, never the old one.
    assert_eq!(now(fx.ops.getattr(dir.ino, me())).map(|a| a.unwrap().mode), Some(0o700));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(now(fx.ops.getattr(dir.ino, me())).is_none(), "the window has passed: ask the server");
    fx.stop().await;
}

/// A file reached through a name the kernel cached, removed by another node meanwhile: the
/// open fails with ESTALE (the kernel then looks the name up again); a second stale answer
/// to the same process's retry is ENOENT, as without any cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_through_a_stale_name_is_retried_once() {
    let fx = Fixture::new("stale", 2).await;
    let (attr, Opened { fh, .. }) = fx.ops.create(ROOT_INO, "ckpt".into(), 0o644, 0, 0, me()).await.unwrap();
    fx.ops.release(attr.ino, fh).await.unwrap();
    fx.other.unlink("/ckpt").await.unwrap();
    let first = fx.ops.open(attr.ino, 0, me()).await.err().expect("refused");
    assert_eq!(first.code, ErrorCode::Stale);
    let retry = fx.ops.open(attr.ino, 0, me()).await.err().expect("refused");
    assert_eq!(retry.code, ErrorCode::NotFound);
    fx.stop().await;
}

/// What one handle wrote and has not published yet is part of the file for every program on
/// this node: a stat reports its size, and a read through another handle sees its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpublished_writes_are_seen_through_other_handles_on_this_node() {
    let fx = Fixture::new("siblings", 3).await;
    let (attr, Opened { fh: writer, .. }) = fx.ops.create(ROOT_INO, "out".into(), 0o644, 0, 0, me()).await.unwrap();
    let reader = fx.ops.open(attr.ino, 0, me()).await.unwrap().fh;
    let body: Vec<u8> = (0..3 * (1 << 20) + 17).map(|i| (i % 251) as u8).collect();
    assert_eq!(write(&fx.ops, writer, attr.ino, 0, &body).await.unwrap(), body.len());
    assert_eq!(fx.ops.getattr(attr.ino, me()).await.unwrap().size, body.len() as u64, "local size before any flush");
    let seen = read(&fx.ops, reader, attr.ino, (1 << 20) - 5, 64 << 10).await.unwrap();
    assert_eq!(seen, body[(1 << 20) - 5..(1 << 20) - 5 + (64 << 10)]);
    // Another node sees nothing until the writer flushes (close-to-open), then everything.
    assert_eq!(fx.other.getattr(attr.ino).await.unwrap().size, 0);
    fx.ops.flush(attr.ino, writer, 0).await.unwrap();
    assert_eq!(fx.other.getattr(attr.ino).await.unwrap().size, body.len() as u64);
    fx.ops.release(attr.ino, writer).await.unwrap();
    fx.ops.release(attr.ino, reader).await.unwrap();
    assert_eq!(fx.ops.release(attr.ino, reader).await.unwrap_err().code, ErrorCode::BadHandle);
    fx.stop().await;
}

/// A listing gives the kernel its files' attributes (READDIRPLUS) only as a lookup would
/// answer them then: not a directory's (a lookup keeps the kernel's one entry of it), not
/// once anything changed since the listing was taken (another node's change, this mount's
/// own), not an inode the kernel was already told of (what it holds may be newer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_gives_attributes_only_while_they_are_what_a_lookup_would_say() {
    let fx = Fixture::new("readdirplus", 2).await;
    let dir = fx.other.mkdir_at(ROOT_INO, "made-elsewhere", 0o755).await.unwrap();
    for name in ["a", "b", "c"] {
        let f = fx.other.create_at(dir.ino, name, 0o644, true).await.unwrap();
        f.pwrite(0, name.as_bytes()).await.unwrap();
        f.close().await.unwrap();
    }
    fx.other.mkdir_at(dir.ino, "sub", 0o755).await.unwrap();
    let given = |fh: u64| {
        let listing = fx.ops.dir_entries(fh).unwrap();
        listing.iter().map(|e| (e.name.clone(), fx.ops.attr_to_give(&listing, e).map(|a| (a.ino, a.size)))).collect::<Vec<_>>()
    };
    let fh = fx.ops.opendir(dir.ino).await.unwrap();
    let listed = fx.ops.dir_entries(fh).unwrap();
    let ino = |name: &str| listed.iter().find(|e| e.name == name).unwrap().ino;
    let expected = |b: Option<(u64, u64)>| {
        vec![
            ("a".to_string(), Some((ino("a"), 1))),
            ("b".to_string(), b),
            ("c".to_string(), Some((ino("c"), 1))),
            ("sub".to_string(), None),
        ]
    };
    assert_eq!(given(fh), expected(Some((ino("b"), 1))));
    let b = fx.ops.lookup(dir.ino, "b".into(), me()).await.unwrap();
    assert_eq!(given(fh), expected(None), "b was told to the kernel by its lookup");
    fx.ops.releasedir(fh);

    let fh = fx.ops.opendir(dir.ino).await.unwrap();
    fx.other.setattr(ino("c"), AttrChanges { mode: Some(0o600), ..Default::default() }).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while given(fh).iter().any(|(_, attr)| attr.is_some()) {
        assert!(std::time::Instant::now() < deadline, "a change elsewhere after the listing: {:?}", given(fh));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fx.ops.releasedir(fh);

    let fh = fx.ops.opendir(dir.ino).await.unwrap();
    assert!(given(fh).iter().any(|(_, attr)| attr.is_some()), "a listing taken after the change gives again");
    fx.ops.unlink(dir.ino, "a".into()).await.unwrap();
    assert!(given(fh).iter().all(|(_, attr)| attr.is_none()), "this mount's own unlink after the listing");
    fx.ops.releasedir(fh);
    assert_eq!(b.size, 1);
    fx.stop().await;
}

/// `ls -l` asks every file for `security.selinux` and its access ACL: for a file a listing
/// gave the kernel and said has no extended attributes, and for a name the servers said a
/// file the kernel holds lacks, the answer is the mount's own, until the inode changes
/// (another node sets one: its notice) or this mount sets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_extended_attributes_are_answered_here_until_the_inode_changes() {
    use surge_client::surge_proto::XattrSetMode;
    let fx = Fixture::new("xattrs", 2).await;
    let dir = fx.other.mkdir_at(ROOT_INO, "d", 0o755).await.unwrap();
    for name in ["plain", "tagged"] {
        fx.other.create_at(dir.ino, name, 0o644, true).await.unwrap().close().await.unwrap();
    }
    let tagged = fx.other.lookup(dir.ino, "tagged").await.unwrap().ino;
    fx.other.set_xattr(tagged, "user.tag", b"t", XattrSetMode::Either).await.unwrap();
    let fh = fx.ops.opendir(dir.ino).await.unwrap();
    let listing = fx.ops.dir_entries(fh).unwrap();
    for entry in listing.iter() {
        let attr = fx.ops.attr_to_give(&listing, entry).unwrap();
        fx.ops.gave(&listing, entry, &attr);
    }
    fx.ops.releasedir(fh);
    let ino = |name: &str| listing.iter().find(|e| e.name == name).unwrap().ino;
    let get = |ino: u64, name: &str| fx.ops.get_xattr(ino, name.into(), me());
    let answered_now = |ino: u64, name: &str| matches!(now(get(ino, name)), Some(Err(e)) if e.code == ErrorCode::NoData);
    assert!(answered_now(ino("plain"), "security.selinux"), "a file listed without attributes");
    assert!(answered_now(ino("plain"), "system.posix_acl_access"));
    assert!(!answered_now(tagged, "security.selinux"), "a file with some: asked");
    assert_eq!(get(tagged, "security.selinux").await.unwrap_err().code, ErrorCode::NoData);
    assert!(answered_now(tagged, "security.selinux"), "that name, once the servers said so");
    assert_eq!(get(tagged, "user.tag").await.unwrap(), b"t");

    fx.other.set_xattr(ino("plain"), "security.selinux", b"ctx", XattrSetMode::Either).await.unwrap();
    fx.other.set_xattr(tagged, "security.selinux", b"ctx", XattrSetMode::Either).await.unwrap();
    for changed in [ino("plain"), tagged] {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while answered_now(changed, "security.selinux") {
            assert!(std::time::Instant::now() < deadline, "another node's change did not reach the mount");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(get(changed, "security.selinux").await.unwrap(), b"ctx");
    }
    // The notice dropped what the kernel held of it; a stat gives it again.
    fx.ops.getattr(ino("plain"), me()).await.unwrap();
    assert_eq!(get(ino("plain"), "user.mine").await.unwrap_err().code, ErrorCode::NoData);
    assert!(answered_now(ino("plain"), "user.mine"));
    fx.ops.set_xattr(ino("plain"), "user.mine".into(), b"m".to_vec(), 0, me()).await.unwrap();
    assert_eq!(get(ino("plain"), "user.mine").await.unwrap(), b"m", "this mount's own change");
    fx.stop().await;
}

/// Attributes the servers read before another node's change, given the kernel after that
/// change's notice arrived, get no cache time: for an inode the kernel did not hold yet (a
/// lookup) the notice found nothing to drop, and the kernel would keep the old link count
/// for the whole cache time. Other inodes, and later requests, keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_read_across_a_change_elsewhere_get_no_cache_time() {
    let fx = Fixture::new("racing", 1).await;
    let ops = &fx.ops;
    let shared = put(ops, ROOT_INO, "shared", b"x").await;
    let unrelated = put(ops, ROOT_INO, "unrelated", b"y").await;
    let mark = ops.change_mark();
    assert_eq!(ops.lookup(ROOT_INO, "shared".into(), me()).await.unwrap().nlink, 1);
    ops.lookup(ROOT_INO, "unrelated".into(), me()).await.unwrap();
    assert_eq!(ops.ttl_since(shared, mark), TTL, "nothing changed since the lookup began");

    fx.other.link("/shared", "/shared.link").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ops.ttl_since(shared, mark) != Duration::ZERO {
        assert!(Instant::now() < deadline, "the link made elsewhere was never heard of");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(ops.ttl_since(unrelated, mark), TTL, "an inode nothing happened to keeps its cache time");
    let fresh = ops.change_mark();
    assert_eq!(ops.lookup(ROOT_INO, "shared".into(), me()).await.unwrap().nlink, 2);
    assert_eq!(ops.ttl_since(shared, fresh), TTL, "a lookup begun after the change is cached");
    fx.stop().await;
}

/// A file with two names loses one in a directory the mount holds under a delegation: the
/// unlink is answered at once and its home drops the link only at the write-back. The
/// servers tell no client of its own changes, so the mount tells itself: what it had of the
/// file before (its other name's link count) is stale once the write-back is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlink_written_back_from_a_delegation_is_heard_of_by_the_mount_itself() {
    let fx = Fixture::new("ownwriteback", 1).await;
    let ops = &fx.ops;
    let d = ops.mkdir(ROOT_INO, "d".into(), 0o755, 0, me()).await.unwrap().ino;
    let e = ops.mkdir(ROOT_INO, "e".into(), 0o755, 0, me()).await.unwrap().ino;
    let file = put(ops, d, "f", b"two names").await;
    assert_eq!(ops.link(file, e, "f2".into()).await.unwrap().nlink, 2);
    warm_until_held(ops, d).await;

    let mark = ops.change_mark();
    assert_eq!(ops.lookup(e, "f2".into(), me()).await.unwrap().nlink, 2);
    assert!(matches!(now(ops.unlink(d, "f".into())), Some(Ok(()))), "answered at once under the delegation");
    ops.fsyncdir().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ops.ttl_since(file, mark) != Duration::ZERO {
        assert!(Instant::now() < deadline, "the mount never heard of its own unlink's write-back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(ops.lookup(e, "f2".into(), me()).await.unwrap().nlink, 1);
    fx.stop().await;
}
