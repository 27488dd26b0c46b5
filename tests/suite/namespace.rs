//! Namespace semantics through the client library against real servers: the POSIX rules a
//! file system must keep, including across servers (directories are homed all over).

use surge_client::surge_proto::acl::{Acl, AclKind, Tag};
use surge_client::surge_proto::admin::SyncMetadata;
use surge_client::surge_proto::ino;
use surge_client::surge_proto::xattr::MAX_XATTR_VALUE_LEN;
use surge_client::surge_proto::{ErrorCode, FileKind, Timestamp, XattrSetMode};
use surge_tests::Instance;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_namespace_rules_hold_across_servers() {
    let inst = Instance::up("ns", &["--servers", "4", "--capacity", "1G", "--hosts", "127.0.0.171,127.0.0.172,127.0.0.173,127.0.0.174"]);
    let c = inst.client("127.0.0.175");
    // Many directories, so some pairs live on different servers.
    for i in 0..16 {
        c.mkdir(&format!("/d{i}"), 0o755).await.unwrap();
        let f = c.create(&format!("/d{i}/f"), 0o644).await.unwrap();
        f.pwrite(0, format!("file in d{i}").as_bytes()).await.unwrap();
        f.close().await.unwrap();
    }
    assert_eq!(c.mkdir("/d0", 0o755).await.unwrap_err().code, ErrorCode::Exists);
    assert_eq!(c.create("/d0/f", 0o644).await.err().unwrap().code, ErrorCode::Exists);
    assert_eq!(c.rmdir("/d0").await.unwrap_err().code, ErrorCode::NotEmpty);
    assert_eq!(c.unlink("/d0").await.unwrap_err().code, ErrorCode::IsDir);
    assert_eq!(c.rmdir("/d0/f").await.unwrap_err().code, ErrorCode::NotDir);
    assert_eq!(c.stat("/nope").await.unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(c.create(&format!("/{}", "x".repeat(256)), 0o644).await.err().unwrap().code, ErrorCode::NameTooLong);

    // File renames between every pair of directories, over existing targets.
    for i in 0..15 {
        c.rename(&format!("/d{i}/f"), &format!("/d{}/f", i + 1)).await.unwrap();
        assert_eq!(c.stat(&format!("/d{i}/f")).await.unwrap_err().code, ErrorCode::NotFound);
    }
    let f = c.open("/d15/f", false).await.unwrap();
    assert_eq!(f.pread(0, 100).await.unwrap(), b"file in d0");
    f.close().await.unwrap();

    // A rename onto another name of the same file changes nothing (rename(2)), also where
    // the two directories are homed on different servers (there the target is linked
    // first, and the source must then stay).
    let mut homes = Vec::new();
    for i in 0..16 {
        homes.push(ino::home(c.stat(&format!("/d{i}")).await.unwrap().ino));
    }
    let other = (1..16).find(|&i| homes[i] != homes[0]).expect("two directories on different servers");
    c.create("/d0/x", 0o644).await.unwrap().close().await.unwrap();
    c.link("/d0/x", &format!("/d{other}/y")).await.unwrap();
    c.rename("/d0/x", &format!("/d{other}/y")).await.unwrap();
    let (x, y) = (c.stat("/d0/x").await.unwrap(), c.stat(&format!("/d{other}/y")).await.unwrap());
    assert_eq!((x.ino, x.nlink), (y.ino, 2), "both names stay, and the count");
    c.unlink("/d0/x").await.unwrap();
    c.unlink(&format!("/d{other}/y")).await.unwrap();

    // Directory renames across servers, into a subtree, and the cycle check.
    c.mkdir_all("/a/b/c", 0o755).await.unwrap();
    c.rename("/a/b", "/d3/b").await.unwrap();
    assert_eq!(c.stat("/d3/b/c").await.unwrap().kind, FileKind::Dir);
    assert_eq!(c.rename("/d3", "/d3/b/c/d3").await.unwrap_err().code, ErrorCode::Invalid);
    // Rename over an empty directory works, over a non-empty one fails.
    c.mkdir("/empty", 0o755).await.unwrap();
    c.rename("/d3/b", "/empty").await.unwrap();
    assert_eq!(c.stat("/empty/c").await.unwrap().kind, FileKind::Dir);
    assert_eq!(c.rename("/d2", "/d15").await.unwrap_err().code, ErrorCode::NotEmpty);
    c.rmdir("/empty/c").await.unwrap();
    c.rmdir("/empty").await.unwrap();
    for i in 0..15 {
        c.rmdir(&format!("/d{i}")).await.unwrap();
    }

    // Symlinks, attributes, truncate, holes.
    c.symlink("/d15/f", "/link").await.unwrap();
    assert_eq!(c.readlink("/link").await.unwrap(), "/d15/f");
    assert_eq!(c.stat("/link").await.unwrap().kind, FileKind::Symlink);
    let a = c.chmod("/d15/f", 0o600).await.unwrap();
    assert_eq!(a.mode, 0o600);
    let a = c.chown("/d15/f", Some(1234), Some(5678)).await.unwrap();
    assert_eq!((a.uid, a.gid), (1234, 5678));
    let when = Timestamp { secs: 1_000_000_000, nanos: 5 };
    let a = c.utimens("/d15/f", Some(when), Some(when)).await.unwrap();
    assert_eq!((a.atime, a.mtime), (when, when));
    let f = c.create("/holes", 0o644).await.unwrap();
    f.pwrite(5 << 20, b"end").await.unwrap();
    f.close().await.unwrap();
    let f = c.open("/holes", false).await.unwrap();
    assert_eq!(f.size(), (5 << 20) + 3);
    let data = f.pread(0, 6 << 20).await.unwrap();
    assert!(data[..5 << 20].iter().all(|&b| b == 0) && &data[5 << 20..] == b"end");
    f.close().await.unwrap();
    c.truncate("/holes", 10).await.unwrap();
    c.truncate("/holes", 6 << 20).await.unwrap();
    let f = c.open("/holes", false).await.unwrap();
    assert!(f.pread(0, 7 << 20).await.unwrap().iter().all(|&b| b == 0), "truncated bytes came back");
    f.close().await.unwrap();

    // An unlinked file stays readable through a handle opened before.
    let f = c.open("/d15/f", false).await.unwrap();
    c.unlink("/d15/f").await.unwrap();
    assert_eq!(f.pread(0, 100).await.unwrap(), b"file in d0");
    f.close().await.unwrap();

    let names: Vec<String> = c.readdir("/").await.unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["a", "d15", "holes", "link"]);
}

/// Two clients renaming across servers in opposite directions at once (a to b while b to a),
/// and swapping the same pair from both ends: each rename locks its source first, so each
/// finds the other's locked. Neither may wait for the other for good (an EBUSY after the
/// wait) nor lose a file: one name is left after the renames, both after the swaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_and_swaps_that_cross_between_servers_all_finish() {
    let inst = Instance::up("cross", &["--servers", "2", "--capacity", "1G", "--hosts", "127.0.0.181,127.0.0.182"]);
    let (one, two) = (inst.client("127.0.0.183"), inst.client("127.0.0.184"));
    // Two directories homed on different servers.
    let mut dirs = Vec::new();
    for i in 0.. {
        let dir = format!("/d{i}");
        let home = ino::home(one.mkdir(&dir, 0o755).await.unwrap().ino);
        if dirs.iter().all(|(_, h)| *h != home) {
            dirs.push((dir, home));
        }
        if dirs.len() == 2 {
            break;
        }
    }
    let (a, b) = (format!("{}/a", dirs[0].0), format!("{}/b", dirs[1].0));
    let content = |path: &str| {
        let (c, path) = (&one, path.to_string());
        async move {
            let f = c.open(&path, false).await?;
            let bytes = f.pread(0, 16).await;
            f.close().await?;
            bytes
        }
    };
    for round in 0..150 {
        for (path, text) in [(&a, "A"), (&b, "B")] {
            let f = one.create(path, 0o644).await.unwrap();
            f.pwrite(0, text.as_bytes()).await.unwrap();
            f.close().await.unwrap();
        }
        let (to_b, to_a) = tokio::join!(one.rename(&a, &b), two.rename(&b, &a));
        for outcome in [&to_b, &to_a] {
            if let Err(e) = outcome {
                assert_eq!(e.code, ErrorCode::NotFound, "round {round}: crossing renames: {e}");
            }
        }
        let left = [one.stat(&a).await.is_ok(), one.stat(&b).await.is_ok()];
        assert_eq!(left.iter().filter(|&&l| l).count(), 1, "round {round}: after {to_b:?} and {to_a:?}, names left {left:?}");
        for path in [&a, &b] {
            let _ = one.unlink(path).await;
        }

        for (path, text) in [(&a, "A"), (&b, "B")] {
            let f = one.create(path, 0o644).await.unwrap();
            f.pwrite(0, text.as_bytes()).await.unwrap();
            f.close().await.unwrap();
        }
        let (swap_one, swap_two) = tokio::join!(one.exchange(&a, &b), two.exchange(&b, &a));
        swap_one.unwrap_or_else(|e| panic!("round {round}: a swap crossing another: {e}"));
        swap_two.unwrap_or_else(|e| panic!("round {round}: a swap crossing another: {e}"));
        // Swapped twice: as they were.
        assert_eq!((content(&a).await.unwrap(), content(&b).await.unwrap()), (b"A".to_vec(), b"B".to_vec()), "round {round}");
        for path in [&a, &b] {
            one.unlink(path).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_behind_and_read_ahead_keep_bytes_and_report_errors() {
    use surge_client::surge_proto::data::AllocateMode;
    let inst = Instance::up(
        "stream",
        &["--servers", "3", "--capacity", "24M", "--chunk-size", "64K", "--hosts", "127.0.0.181,127.0.0.182,127.0.0.183"],
    );
    let c = inst.client("127.0.0.184");
    let data = surge_tests::pattern(77, 3_000_001);
    let f = c.create("/stream", 0o644).await.unwrap();
    f.set_write_behind(512 << 10).await.unwrap();
    // Odd request sizes: pieces straddle chunk boundaries.
    let mut at = 0;
    for (i, piece) in data.chunks(70_001).enumerate() {
        assert_eq!(f.pwrite(at, piece).await.unwrap(), piece.len(), "write {i}");
        at += piece.len() as u64;
    }
    f.close().await.unwrap();

    let f = c.open("/stream", false).await.unwrap();
    f.set_read_ahead(1 << 20).await;
    let mut back = Vec::new();
    loop {
        let got = f.pread(back.len() as u64, 50_000).await.unwrap();
        if got.is_empty() {
            break;
        }
        back.extend(got);
    }
    assert!(back == data, "sequential read-ahead returned different bytes");
    // A jump backwards and a read across the end still come out right.
    assert_eq!(f.pread(100_000, 10).await.unwrap(), &data[100_000..100_010]);
    assert_eq!(f.pread(2_999_990, 100).await.unwrap(), &data[2_999_990..]);
    f.close().await.unwrap();

    // Past capacity with write-behind: the failure surfaces by close at the latest.
    let f = c.create("/too-big", 0o644).await.unwrap();
    f.set_write_behind(4 << 20).await.unwrap();
    let mut failed = None;
    for i in 0..64u64 {
        if let Err(e) = f.pwrite(i << 20, &vec![1u8; 1 << 20]).await {
            failed = Some(e);
            break;
        }
    }
    let closed = f.close().await;
    match failed {
        Some(e) => assert_eq!(e.errno(), libc::ENOSPC, "a write past capacity failed otherwise: {e}"),
        None => assert!(closed.as_ref().is_err_and(|e| e.errno() == libc::ENOSPC), "64 MiB into 24 MiB reported no ENOSPC: {closed:?}"),
    }
    // The room set aside for the failed file's writes (this client is on the servers' node:
    // it writes their data files itself, within room they set aside) comes back with the
    // failure, and its data with its removal: the instance takes writes again at once.
    c.unlink("/too-big").await.unwrap();
    let f = c.create("/after", 0o644).await.unwrap();
    f.pwrite(0, &vec![2u8; 12 << 20]).await.unwrap();
    f.close().await.expect("12 MiB into the 21 MiB left once the file that ran out of space is gone");
    c.unlink("/after").await.unwrap();
    // A fallocate that runs out of space gives back what it set aside past the file's end.
    let f = c.create("/reserved", 0o644).await.unwrap();
    assert_eq!(f.allocate(0, 64 << 20, AllocateMode::Reserve, false).await.unwrap_err().code, ErrorCode::NoSpace);
    assert_eq!(f.size(), 0, "a failed fallocate leaves the size");
    let used: u64 = c.statfs().await.into_iter().map(|s| s.unwrap().used).sum();
    assert!(used < 4 << 20, "{used} bytes used (3 MB of them the first file's) after a failed fallocate: what it set aside stayed");
    f.close().await.unwrap();
    c.unlink("/reserved").await.unwrap();
    let f = c.open("/stream", false).await.unwrap();
    assert!(f.pread(0, 4 << 20).await.unwrap() == data, "earlier file damaged");
    f.close().await.unwrap();
}

/// Extended attributes as Linux keeps them, on files and directories homed on any server:
/// XATTR_CREATE and XATTR_REPLACE, lists, removal, ctime, Linux's limits and the bound per
/// inode, and which namespaces exist and on what.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_attributes_keep_linux_rules() {
    let inst = Instance::up_on("xattrs", "127.0.4", 11, 4, &["--capacity", "1G"]);
    let c = inst.client("127.0.4.15");
    let code = |e: surge_client::Error| e.code;
    c.create("/f", 0o644).await.unwrap().close().await.unwrap();
    let before = c.stat("/f").await.unwrap().ctime;
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let after = c.setxattr("/f", "user.a", b"one", XattrSetMode::Create).await.unwrap();
    assert!(after.ctime > before, "a set changes ctime");
    assert_eq!(c.getxattr("/f", "user.a").await.unwrap(), b"one");
    assert_eq!(c.setxattr("/f", "user.a", b"two", XattrSetMode::Create).await.map_err(code).unwrap_err(), ErrorCode::Exists);
    assert_eq!(c.setxattr("/f", "user.b", b"two", XattrSetMode::Replace).await.map_err(code).unwrap_err(), ErrorCode::NoData);
    c.setxattr("/f", "user.a", b"two", XattrSetMode::Replace).await.unwrap();
    c.setxattr("/f", "trusted.t", b"", XattrSetMode::Either).await.unwrap();
    c.setxattr("/f", "security.s", b"label", XattrSetMode::Either).await.unwrap();
    assert_eq!(c.getxattr("/f", "user.a").await.unwrap(), b"two");
    assert_eq!(c.listxattr("/f").await.unwrap(), ["security.s", "trusted.t", "user.a"], "root is shown trusted ones too");
    let ctime = c.stat("/f").await.unwrap().ctime;
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    assert!(c.removexattr("/f", "user.a").await.unwrap().ctime > ctime, "a removal changes ctime");
    assert_eq!(c.removexattr("/f", "user.a").await.map_err(code).unwrap_err(), ErrorCode::NoData);
    assert_eq!(c.getxattr("/f", "user.a").await.map_err(code).unwrap_err(), ErrorCode::NoData);
    assert_eq!(c.getxattr("/f", "user.never").await.map_err(code).unwrap_err(), ErrorCode::NoData);

    // Names and values as Linux bounds them.
    let longest = format!("user.{}", "n".repeat(250));
    c.setxattr("/f", &longest, b"x", XattrSetMode::Either).await.unwrap();
    assert_eq!(
        c.setxattr("/f", &format!("{longest}n"), b"x", XattrSetMode::Either).await.map_err(code).unwrap_err(),
        ErrorCode::OutOfRange
    );
    assert_eq!(c.getxattr("/f", "").await.map_err(code).unwrap_err(), ErrorCode::OutOfRange);
    c.setxattr("/f", "user.largest", &vec![1; MAX_XATTR_VALUE_LEN], XattrSetMode::Either).await.unwrap();
    assert_eq!(c.getxattr("/f", "user.largest").await.unwrap().len(), MAX_XATTR_VALUE_LEN);
    let too_large = vec![1; MAX_XATTR_VALUE_LEN + 1];
    assert_eq!(c.setxattr("/f", "user.big", &too_large, XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::TooBig);
    // The bound of an inode's attributes in all: four largest values do not fit with names.
    c.mkdir("/full", 0o755).await.unwrap();
    for i in 0..3 {
        c.setxattr("/full", &format!("user.{i}"), &vec![2; MAX_XATTR_VALUE_LEN], XattrSetMode::Either).await.unwrap();
    }
    let fourth = c.setxattr("/full", "user.3", &vec![2; MAX_XATTR_VALUE_LEN], XattrSetMode::Either).await;
    assert_eq!(fourth.map_err(code).unwrap_err(), ErrorCode::NoSpace);
    assert_eq!(c.listxattr("/full").await.unwrap().len(), 3, "a directory's, on its own home");

    // Namespaces: only four, and user attributes only on regular files and directories.
    assert_eq!(c.setxattr("/f", "os2.name", b"x", XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::NotSupported);
    assert_eq!(c.setxattr("/f", "system.other", b"x", XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::NotSupported);
    assert_eq!(c.setxattr("/f", "user.", b"x", XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::Invalid);
    c.symlink("/f", "/link").await.unwrap();
    assert_eq!(c.setxattr("/link", "user.a", b"x", XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::NotPermitted);
    assert_eq!(c.getxattr("/link", "user.a").await.map_err(code).unwrap_err(), ErrorCode::NoData);
    c.setxattr("/link", "trusted.a", b"x", XattrSetMode::Either).await.unwrap();
    assert_eq!(c.listxattr("/link").await.unwrap(), ["trusted.a"]);
    // A client acting as another user is not shown trusted attributes.
    assert_eq!(c.as_user(1234, 1234).listxattr("/f").await.unwrap(), ["security.s", "user.largest", longest.as_str()]);
}

/// POSIX ACLs: an access ACL sets the mode and chmod sets it back; an ACL that says no more
/// than a mode is only the mode; malformed ones are refused; a directory's default ACL is
/// inherited by what is made in it (the umask then not applied), by directories homed on
/// other servers than their parent too, and passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_set_the_mode_and_are_inherited_across_servers() {
    let inst = Instance::up_on("acls", "127.0.4", 21, 4, &["--capacity", "1G"]);
    let c = inst.client("127.0.4.25");
    let code = |e: surge_client::Error| e.code;
    let (access, default) = (AclKind::Access.xattr_name(), AclKind::Default.xattr_name());
    let acl_of = |bytes: Vec<u8>| Acl::decode(&bytes).unwrap().unwrap();
    c.create("/f", 0o640).await.unwrap().close().await.unwrap();
    let shared = surge_tests::acl("u::6,u:1002:6,g::4,m::6,o::0");
    assert_eq!(c.setxattr("/f", access, &shared, XattrSetMode::Either).await.unwrap().mode, 0o660, "group bits from the mask");
    assert_eq!(c.getxattr("/f", access).await.unwrap(), shared);
    assert_eq!(c.listxattr("/f").await.unwrap(), [access]);
    c.chmod("/f", 0o600).await.unwrap();
    let chmodded = acl_of(c.getxattr("/f", access).await.unwrap());
    assert_eq!((chmodded.perm(Tag::Mask), chmodded.perm(Tag::User(1002))), (Some(0), Some(6)), "chmod sets the mask");
    let minimal = surge_tests::acl("u::7,g::5,o::4");
    assert_eq!(c.setxattr("/f", access, &minimal, XattrSetMode::Either).await.unwrap().mode, 0o754);
    assert_eq!(c.getxattr("/f", access).await.map_err(code).unwrap_err(), ErrorCode::NoData, "a mode's ACL is kept as the mode");
    c.removexattr("/f", access).await.unwrap(); // As on Linux: removing none is no error.

    let mut other_version = shared.clone();
    other_version[0] = 1;
    assert_eq!(c.setxattr("/f", access, &other_version, XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::NotSupported);
    let no_mask = [&shared[..28], &shared[36..]].concat(); // u::, u:1002:, g::, o::, without m::
    assert_eq!(c.setxattr("/f", access, &no_mask, XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::Invalid);
    let unsorted = [&shared[..4], &shared[12..20], &shared[4..12], &shared[20..]].concat();
    assert_eq!(c.setxattr("/f", access, &unsorted, XattrSetMode::Either).await.map_err(code).unwrap_err(), ErrorCode::Invalid);
    let on_a_file = c.setxattr("/f", default, &minimal, XattrSetMode::Either).await;
    assert_eq!(on_a_file.map_err(code).unwrap_err(), ErrorCode::AccessDenied, "a default ACL is for directories");

    // A directory with a default ACL, and what is made in it with a umask of 077.
    let d = c.mkdir("/d", 0o755).await.unwrap();
    let inherited = surge_tests::acl("u::7,u:1002:7,g::5,m::7,o::0");
    c.setxattr("/d", default, &inherited, XattrSetMode::Either).await.unwrap();
    let file = c.create_at_with_umask(d.ino, "file", 0o666, 0o077, true).await.unwrap();
    file.close().await.unwrap();
    let file = c.stat("/d/file").await.unwrap();
    assert_eq!(file.mode, 0o660, "the ACL within the mode, the umask not applied");
    assert_eq!(acl_of(c.get_xattr(file.ino, access).await.unwrap()).perm(Tag::User(1002)), Some(7));
    let node = c.mknod_at_with_umask(d.ino, "pipe", FileKind::Fifo, 0o600, 0o077).await.unwrap();
    assert_eq!((node.mode, c.get_xattr(node.ino, access).await.is_ok()), (0o600, true));
    let link = c.symlink("/d/file", "/d/link").await.unwrap();
    assert!(c.list_xattr(link.ino).await.unwrap().is_empty(), "symlinks get no ACL");
    let mut apart = 0;
    for i in 0..12 {
        let name = format!("sub{i}");
        let sub = c.mkdir_at_with_umask(d.ino, &name, 0o777, 0o077).await.unwrap();
        apart += usize::from(ino::home(sub.ino) != ino::home(d.ino));
        assert_eq!(sub.mode, 0o770, "{name}");
        assert_eq!(c.get_xattr(sub.ino, default).await.unwrap(), inherited, "{name} passes the default ACL on");
        assert!(c.get_xattr(sub.ino, access).await.is_ok(), "{name} has it as its access ACL");
        let deeper = c.mkdir_at_with_umask(sub.ino, "deeper", 0o700, 0o077).await.unwrap();
        assert_eq!((deeper.mode, c.get_xattr(deeper.ino, default).await.unwrap()), (0o700, inherited.clone()), "{name}/deeper");
    }
    assert!(apart > 0, "some directories were made on another server than their parent's");

    // Without a default ACL, the umask applies.
    c.removexattr("/d", default).await.unwrap();
    assert_eq!(c.mkdir_at_with_umask(d.ino, "plain", 0o777, 0o027).await.unwrap().mode, 0o750);
    let plain = c.create_at_with_umask(d.ino, "plain-file", 0o666, 0o027, true).await.unwrap();
    plain.close().await.unwrap();
    assert_eq!(c.stat("/d/plain-file").await.unwrap().mode, 0o640);
    assert_eq!(c.mkdir("/d/no-umask", 0o777).await.unwrap().mode, 0o777, "the methods without a umask apply none");
}

/// Attributes and ACLs survive servers killed with SIGKILL and started again, from the
/// journal, and again from the snapshot that restart folded them into.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_attributes_survive_a_restart() {
    let inst = Instance::up_on("xdurable", "127.0.4", 31, 4, &["--capacity", "1G"]);
    let c = inst.client("127.0.4.35");
    let (access, default) = (AclKind::Access.xattr_name(), AclKind::Default.xattr_name());
    let dirs: Vec<String> = (0..6).map(|i| format!("/d{i}")).collect();
    let acl = surge_tests::acl("u::7,u:1002:5,g::5,m::5,o::0");
    for dir in &dirs {
        c.mkdir(dir, 0o755).await.unwrap();
        c.setxattr(dir, "user.dir", dir.as_bytes(), XattrSetMode::Either).await.unwrap();
        c.setxattr(dir, default, &acl, XattrSetMode::Either).await.unwrap();
        c.create(&format!("{dir}/f"), 0o644).await.unwrap().close().await.unwrap();
        c.setxattr(&format!("{dir}/f"), "user.file", b"v1", XattrSetMode::Either).await.unwrap();
        c.setxattr(&format!("{dir}/f"), "user.file", b"v2", XattrSetMode::Replace).await.unwrap();
        c.setxattr(&format!("{dir}/f"), "trusted.gone", b"x", XattrSetMode::Either).await.unwrap();
        c.removexattr(&format!("{dir}/f"), "trusted.gone").await.unwrap();
    }
    // Attribute changes are durable within the journal's flush period; make them so now.
    for server in 0..4 {
        c.call(server, SyncMetadata).await.unwrap();
    }
    let check = |c: surge_client::Client| {
        let (dirs, acl) = (dirs.clone(), acl.clone());
        async move {
            for dir in &dirs {
                assert_eq!(c.getxattr(dir, "user.dir").await.unwrap(), dir.as_bytes());
                assert_eq!(c.getxattr(dir, default).await.unwrap(), acl);
                let file = format!("{dir}/f");
                assert_eq!(c.getxattr(&file, "user.file").await.unwrap(), b"v2", "{file}");
                assert_eq!(c.listxattr(&file).await.unwrap(), [access, "user.file"], "{file}: inherited, set, not the removed one");
                assert_eq!(c.stat(&file).await.unwrap().mode, 0o640, "{file}: the inherited ACL's mode");
            }
        }
    };
    check(c.clone()).await;
    let mut restarted = Vec::new();
    for round in 0..2 {
        let children = tokio::task::block_in_place(|| {
            (0..4).for_each(|index| inst.kill_server(index));
            (0..4).map(|index| inst.restart_server(index)).collect::<Vec<_>>()
        });
        restarted.extend(children);
        check(inst.client("127.0.4.35")).await;
        eprintln!("round {round}: attributes back");
    }
    drop(inst);
    for mut child in restarted {
        let _ = child.wait();
    }
}

/// Data each server holds, in server order.
async fn used_per_server(c: &surge_client::Client) -> Vec<u64> {
    c.statfs().await.into_iter().map(|s| s.unwrap().used).collect()
}

/// `surge up --layout node-local`: a file's chunks all go to the server of the node that
/// makes it (a node without a server stripes), any node reads and writes it, and the layout is
/// a directory's, inherited by the directories made in it and changed per directory, even when
/// the new directory is homed away from its parent (whose home then corrects the client's
/// supposition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_local_layout_keeps_a_file_on_its_creators_server() {
    use surge_client::surge_proto::placement::DirLayout;
    let hosts = "127.0.0.22,127.0.0.23,127.0.0.24,127.0.0.25";
    let inst = Instance::up("nodelocal", &["--capacity", "1G", "--chunk-size", "64K", "--hosts", hosts, "--layout", "node-local"]);
    assert_eq!(inst.descriptor()["layout"], "node-local");
    let (a, b) = (inst.client("127.0.0.23"), inst.client("127.0.0.26"));
    assert_eq!((a.near_server(), b.near_server()), (Some(1), None));
    assert_eq!(a.dir_layout("/").await.unwrap(), DirLayout::NodeLocal);

    let data = surge_tests::pattern(22, 1 << 20); // 16 chunks: striped, every server holds some
    let before = used_per_server(&a).await;
    let f = a.create("/from-a", 0o644).await.unwrap();
    f.pwrite(0, &data).await.unwrap();
    let placed = f.ino();
    f.close().await.unwrap();
    assert_eq!(ino::data_server(placed), Some(1));
    let after = used_per_server(&a).await;
    let grew: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(grew, [0, 1 << 20, 0, 0], "all of it on the creator's server");

    let f = b.create("/from-b", 0o644).await.unwrap();
    f.pwrite(0, &data).await.unwrap();
    let striped_file = f.ino();
    f.close().await.unwrap();
    assert_eq!(ino::data_server(striped_file), None, "no server on b's node: striped");
    let striped = used_per_server(&a).await;
    assert!(striped.iter().zip(&after).all(|(now, then)| now > then), "every server holds some of it: {striped:?}");
    for (reader, name) in [(&b, "/from-a"), (&a, "/from-b")] {
        let f = reader.open(name, false).await.unwrap();
        assert!(f.pread(0, 2 << 20).await.unwrap() == data, "{name} read back exactly");
        f.close().await.unwrap();
    }
    // Another node writes into a node-local file: to its server, wherever that is.
    let f = b.open("/from-a", false).await.unwrap();
    f.pwrite(1 << 20, b"appended by b").await.unwrap();
    f.close().await.unwrap();
    let grew: Vec<bool> = used_per_server(&a).await.iter().zip(&striped).map(|(now, then)| now > then).collect();
    assert_eq!(grew, [false, true, false, false], "b's write went to server 1");

    // Directories inherit; one set striped stripes, and so do the directories made in it,
    // wherever they are homed (eight names: some are homed away from their parent).
    a.mkdir("/sub", 0o755).await.unwrap();
    assert_eq!(a.dir_layout("/sub").await.unwrap(), DirLayout::NodeLocal);
    assert_eq!(a.set_dir_layout("/sub", DirLayout::Striped).await.unwrap(), DirLayout::Striped);
    let mut homes = std::collections::BTreeSet::new();
    for i in 0..8 {
        let dir = a.mkdir(&format!("/sub/d{i}"), 0o755).await.unwrap();
        homes.insert(ino::home(dir.ino));
        assert_eq!(a.layout_of(dir.ino).await.unwrap(), DirLayout::Striped, "d{i} inherits its parent's, not the instance's");
        let f = a.create(&format!("/sub/d{i}/f"), 0o644).await.unwrap();
        assert_eq!(ino::data_server(f.ino()), None);
        f.close().await.unwrap();
    }
    assert!(homes.len() > 1, "directories homed apart from each other: {homes:?}");
    assert_eq!(a.set_dir_layout("/from-a", DirLayout::Striped).await.unwrap_err().code, ErrorCode::NotDir);
}

/// fallocate(2) and SEEK_DATA/SEEK_HOLE over a file striped on four servers: holes punched
/// and ranges zeroed read as zeros and free the servers' space, space set aside past the end
/// grows the file unless asked not to, and data and holes are found across chunk and server
/// boundaries (64 KiB chunks: every server holds some of a 1 MiB file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallocate_and_seek_data_follow_the_servers_data_files() {
    use surge_client::surge_proto::data::AllocateMode;
    let hosts = "127.0.0.57,127.0.0.58,127.0.0.59,127.0.0.60";
    let inst = Instance::up("alloc", &["--capacity", "1G", "--chunk-size", "64K", "--hosts", hosts]);
    let c = inst.client("127.0.0.61");
    const K: u64 = 1024;
    let f = c.create("/sparse", 0o644).await.unwrap();
    // Data in chunks 0, 4-5 (two servers side by side) and 9; holes between; 1 MiB long.
    for (at, len) in [(0, 64 * K), (256 * K, 128 * K), (600 * K, 10 * K)] {
        f.pwrite(at, &vec![7u8; len as usize]).await.unwrap();
    }
    f.set_len(1024 * K).await.unwrap();
    let seek = |at: u64, hole: bool| f.seek_data(at, hole);
    assert_eq!(seek(0, false).await.unwrap(), 0);
    assert_eq!(seek(0, true).await.unwrap(), 64 * K);
    assert_eq!(seek(64 * K, false).await.unwrap(), 256 * K);
    assert_eq!(seek(300 * K, true).await.unwrap(), 384 * K, "one run of data over two servers' chunks");
    assert_eq!(seek(400 * K, false).await.unwrap() / (4 * K), 600 / 4, "the page holding 600 KiB");
    assert_eq!(seek(700 * K, true).await.unwrap(), 700 * K);
    assert_eq!(seek(700 * K, false).await.unwrap_err().code, ErrorCode::PastEnd, "only holes to the end");
    assert_eq!(seek(1024 * K, true).await.unwrap_err().code, ErrorCode::PastEnd);

    let used = |c: &surge_client::Client| {
        let c = c.clone();
        async move { c.statfs().await.into_iter().map(|s| s.unwrap().used).sum::<u64>() }
    };
    let before = used(&c).await;
    f.allocate(256 * K, 128 * K, AllocateMode::PunchHole, true).await.unwrap();
    assert_eq!(before - used(&c).await, 128 * K, "the punched chunks' space given back");
    assert_eq!(seek(64 * K, false).await.unwrap() / (4 * K), 600 / 4);
    assert!(f.pread(250 * K, 140 * K as usize).await.unwrap().iter().all(|&b| b == 0), "a punched hole reads as zeros");
    f.allocate(10 * K, 20 * K, AllocateMode::ZeroRange, true).await.unwrap();
    let head = f.pread(0, 64 * K as usize).await.unwrap();
    assert!(head[..10 * K as usize].iter().all(|&b| b == 7) && head[10 * K as usize..30 * K as usize].iter().all(|&b| b == 0));
    assert!(head[30 * K as usize..].iter().all(|&b| b == 7));

    let before = used(&c).await;
    f.allocate(1024 * K, 256 * K, AllocateMode::Reserve, true).await.unwrap();
    assert_eq!(used(&c).await - before, 256 * K, "space set aside");
    assert_eq!(f.size(), 1024 * K, "KEEP_SIZE");
    f.allocate(1024 * K, 512 * K, AllocateMode::Reserve, false).await.unwrap();
    assert_eq!(c.stat("/sparse").await.unwrap().size, 1536 * K, "grown to the range's end");
    assert_eq!(f.allocate(0, 0, AllocateMode::Reserve, false).await.unwrap_err().code, ErrorCode::Invalid);
    f.close().await.unwrap();
}
