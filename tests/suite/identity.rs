//! Servers that check permissions themselves (`surge up --check-identity`): each client proves
//! who it is with a MUNGE credential at its handshake (a real munged, with a key of its own),
//! and the servers refuse what the kernel would refuse on a local file system, to clients of
//! the native library that no kernel checks: reading or listing another user's private
//! files, chmod or chown of them, removing another's name from a sticky directory, creating
//! files in another user's name, data requests sent without the namespace's steps (no ticket,
//! or a forged one), another's extended attributes and ACLs, and a client without a
//! credential at all; and what an ACL grants, it allows.

use std::path::{Path, PathBuf};
use std::process::Command;

use surge_client::surge_proto::XattrSetMode;
use surge_tests::{binary, scratch, text, Instance};

const ALICE: u32 = 1001;
const BOB: u32 = 1002;

/// A munged of the test's own (key, socket, pid file under `dir`), stopped by pid when dropped.
struct Munged {
    socket: PathBuf,
    pid_file: PathBuf,
}

impl Munged {
    fn start(dir: &Path) -> Munged {
        std::fs::create_dir_all(dir).unwrap();
        // munged refuses a socket directory others cannot search.
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let key = dir.join("munge.key");
        let made = Command::new("mungekey").arg("-c").arg("-k").arg(&key).output().expect("mungekey (apt-get install munge)");
        assert!(made.status.success(), "{}", text(&made));
        let munged = Munged { socket: dir.join("munge.socket"), pid_file: dir.join("munged.pid") };
        let started = Command::new("munged")
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", munged.socket.display()))
            .arg(format!("--pid-file={}", munged.pid_file.display()))
            .arg(format!("--log-file={}", dir.join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.join("munge.seed").display()))
            .arg("--force")
            .output()
            .expect("munged");
        assert!(started.status.success(), "{}", text(&started));
        munged
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.pid_file) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: kill(2) of the munged this test started, by its pid file.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
    }
}

/// Runs `ops` (see `surge-test-client try`) as `uid`, each answered on a line.
fn try_as(inst: &Instance, home: &Path, uid: u32, env: &[(&str, &str)], ops: &[&str]) -> Vec<String> {
    let mut command = Command::new("setpriv");
    command
        .args([format!("--reuid={uid}"), format!("--regid={uid}"), "--clear-groups".into()])
        .arg(binary("surge-test-client"))
        .arg("try")
        .args(ops)
        .env("SURGE_HOME", home)
        .env("SURGE_INSTANCE", &inst.name)
        .env("SURGE_LOCAL_IO", "0");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "surge-test-client try as {uid}: {}", text(&out));
    let answers: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(|l| l.rsplit(" -> ").next().unwrap().to_string()).collect();
    assert_eq!(answers.len(), ops.len(), "{}", text(&out));
    answers
}

#[test]
fn servers_refuse_what_the_callers_permissions_do_not_allow() {
    let dir = scratch("identity");
    let munged = Munged::start(&dir.join("munge"));
    // Inherited by `surge up` (so by the servers) and by every client this test starts.
    std::env::set_var("SURGE_MUNGE_SOCKET", &munged.socket);
    let inst = Instance::up("ident", &["--servers", "2", "--capacity", "256M", "--check-identity"]);
    assert!(inst.descriptor()["ticket_key_path"].is_string(), "the servers have a ticket key");

    // Root (this process) lays out a shared directory and a sticky one.
    let root = inst.client("127.0.0.1");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // And a shared directory homed on the other server than /open, for names that move
    // between servers.
    let far = rt.block_on(async {
        for (dir, mode) in [("/open", 0o777), ("/sticky", 0o1777)] {
            root.mkdir(dir, 0o755).await.unwrap();
            root.chmod(dir, mode).await.unwrap();
        }
        let home = |attr: surge_client::surge_proto::Attr| surge_client::surge_proto::ino::home(attr.ino);
        let open_home = home(root.stat("/open").await.unwrap());
        for i in 0.. {
            let dir = format!("/far{i}");
            let attr = root.mkdir(&dir, 0o777).await.unwrap();
            root.chmod(&dir, 0o777).await.unwrap();
            if home(attr) != open_home {
                return dir;
            }
        }
        unreachable!()
    });
    let (alice, bob) = (inst.home_for(&dir, ALICE, ALICE), inst.home_for(&dir, BOB, BOB));
    let made = try_as(
        &inst,
        &alice,
        ALICE,
        &[],
        &[
            "create:/open/private:0600",
            "create:/open/victim:0600",
            "create:/sticky/mine:0644",
            "mkdir:/open/closed:0700",
            "create:/open/closed/inner:0644",
        ],
    );
    assert!(made.iter().all(|a| a == "ok"), "alice lays out her files: {made:?}");

    let refused = [
        ("read:/open/private", "EACCES"),
        ("append:/open/private:more", "EACCES"),
        ("truncate:/open/private", "EACCES"),
        ("chmod:/open/private:0666", "EPERM"),
        ("chown:/open/private:1002", "EPERM"),
        ("list:/open/closed", "EACCES"),
        ("stat:/open/closed/inner", "EACCES"),
        ("create:/open/closed/planted:0644", "EACCES"),
        ("unlink:/sticky/mine", "EPERM"),
        ("rename:/sticky/mine:/open/taken", "EPERM"),
        ("rawread:/open/private", "EACCES"),
        ("rawpurge:/open/private", "EACCES"),
        ("forgedwrite:/open/private", "EACCES"),
        ("rawdroplink:/open/private", "EACCES"),
        // Hard links as protected_hardlinks allows them: not to another's file he cannot
        // both read and write.
        ("link:/open/private:/open/bobs-link", "EPERM"),
        ("link:/sticky/mine:/open/bobs-link", "EPERM"),
        ("mknodc:/open/bobs-device", "EPERM"),
        ("lock:/open/private", "EACCES"),
        // Stopping a server, or telling it where to mirror, is the owner's.
        ("shutdown:/", "EACCES"),
        ("mirrorto:/", "EACCES"),
    ];
    let ops: Vec<&str> = refused.iter().map(|(op, _)| *op).collect();
    let answers = try_as(&inst, &bob, BOB, &[], &ops);
    for ((op, expected), answer) in refused.iter().zip(&answers) {
        assert_eq!(answer, expected, "bob: {op}");
    }
    // What POSIX lets him do: read a world-readable file, create his own, and (the directory
    // being writable and not sticky) remove alice's name from it.
    let allowed = try_as(
        &inst,
        &bob,
        BOB,
        &[],
        &[
            "read:/sticky/mine",
            "create:/open/bobs:0644",
            "unlink:/open/victim",
            "link:/open/bobs:/open/bobs-too",
            "mkfifo:/open/pipe",
            "lock:/sticky/mine",
        ],
    );
    assert_eq!(allowed, ["/sticky/mine", "ok", "ok", "ok", "ok", "ok"], "bob");
    assert_eq!(try_as(&inst, &alice, ALICE, &[], &["link:/open/private:/open/alices-link"]), ["ok"], "alice links her own file");

    // Extended attributes and ACLs, as Linux checks them. Bob cannot read or set the user
    // attributes of alice's 0600 file, nor set its ACL; once she grants him read with one, he
    // reads the file and its attributes, and writes neither. Trusted attributes are root's:
    // bob is told there are none, and cannot set one; security ones are set by root only.
    let grant = "u::6,u:1002:4,g::0,m::4,o::0";
    assert_eq!(try_as(&inst, &alice, ALICE, &[], &["setxattr:/open/private:user.note=hers"]), ["ok"]);
    let before = try_as(
        &inst,
        &bob,
        BOB,
        &[],
        &["getxattr:/open/private:user.note", "setxattr:/open/private:user.x=1", &format!("setacl:/open/private:{grant}")],
    );
    assert_eq!(before, ["EACCES", "EACCES", "EPERM"], "bob, before the ACL");
    assert_eq!(
        try_as(&inst, &alice, ALICE, &[], &[&format!("setacl:/open/private:{grant}")]),
        ["640"],
        "alice's ACL, the mask in the mode"
    );
    let granted = try_as(
        &inst,
        &bob,
        BOB,
        &[],
        &["getxattr:/open/private:user.note", "read:/open/private", "append:/open/private:more", "setxattr:/open/private:user.x=1"],
    );
    assert_eq!(granted, ["hers", "/open/private", "EACCES", "EACCES"], "bob, granted read by the ACL");
    rt.block_on(root.setxattr("/open/bobs", "trusted.root", b"root's", XattrSetMode::Either)).unwrap();
    assert_eq!(rt.block_on(root.getxattr("/open/bobs", "trusted.root")).unwrap(), b"root's");
    let namespaces = try_as(
        &inst,
        &bob,
        BOB,
        &[],
        &[
            "setxattr:/open/bobs:user.his=1",
            "getxattr:/open/bobs:trusted.root",
            "setxattr:/open/bobs:trusted.his=1",
            "setxattr:/open/bobs:security.his=1",
            "listxattr:/open/bobs",
        ],
    );
    assert_eq!(namespaces, ["ok", "ENODATA", "EPERM", "EPERM", "user.his"], "bob on his own file");

    // Alice moves a file of hers to a directory homed on the other server; bob removes its
    // name there (a shared directory): the link is dropped on the file's home with the ticket
    // the directory's server gave him, and its data purged.
    let moved = try_as(&inst, &alice, ALICE, &[], &[&format!("create:{far}/moving:0600"), &format!("rename:{far}/moving:/open/moved")]);
    assert_eq!(moved, ["ok", "ok"], "alice moves a file between servers");
    assert_eq!(try_as(&inst, &bob, BOB, &[], &["unlink:/open/moved"]), ["ok"], "bob removes the moved name");
    assert_eq!(try_as(&inst, &alice, ALICE, &[], &["stat:/open/moved"]), ["ENOENT"]);

    // Stages touch the PFS as the user who submits them, though the servers run as root: bob
    // cannot stage in a file only root may read, nor out into a directory only root may
    // write; what he stages out into his own is his.
    let pfs = dir.join("pfs");
    std::fs::create_dir_all(pfs.join("bob")).unwrap();
    std::fs::set_permissions(&pfs, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(pfs.join("bob"), Some(BOB), Some(BOB)).unwrap();
    std::fs::write(pfs.join("root-only.dat"), b"root's").unwrap();
    std::fs::set_permissions(pfs.join("root-only.dat"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let p = |name: &str| pfs.join(name).display().to_string();
    let staged = try_as(
        &inst,
        &bob,
        BOB,
        &[],
        &[
            &format!("stagein:/open/stolen:{}", p("root-only.dat")),
            &format!("stageout:/open/bobs:{}", p("forbidden.dat")),
            &format!("stageout:/open/bobs:{}", p("bob/bobs.dat")),
        ],
    );
    assert!(staged[0].contains("Permission denied") || staged[0] == "EACCES", "stage-in of root's file: {}", staged[0]);
    assert!(staged[1].contains("Permission denied"), "stage-out into root's directory: {}", staged[1]);
    assert_eq!(staged[2], "ok");
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(pfs.join("bob/bobs.dat")).unwrap());
    assert_eq!(owner, BOB, "what bob stages out is his");
    assert!(!pfs.join("forbidden.dat").exists());

    // A client that says it is alice gets nothing made in her name.
    let forged = try_as(&inst, &bob, BOB, &[("SURGE_TEST_CLAIM_UID", &ALICE.to_string())], &["create:/open/forged:0644"]);
    assert_eq!(forged, ["EPERM"], "a new file in another user's name");
    // A client without a credential (no munged where it looks) is not let in at all.
    let anonymous = try_as(&inst, &bob, BOB, &[("SURGE_MUNGE_SOCKET", "/nonexistent/munge.socket")], &["stat:/open"]);
    assert_eq!(anonymous, ["EACCES"], "no credential");

    // Alice still has all of hers.
    let mine = try_as(&inst, &alice, ALICE, &[], &["read:/open/private", "list:/open/closed", "unlink:/sticky/mine", "stat:/open/bobs"]);
    assert_eq!(mine, ["/open/private".to_string(), "1".into(), "ok".into(), format!("644 {BOB}")], "alice");
    let _ = inst.surge(&["down", "ident"]);
}
