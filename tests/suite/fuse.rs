//! Real programs on a FUSE mount of a real instance (4 servers on loopback aliases): fio with
//! verification, tar + diff, rsync, git, ffmpeg, bonnie++, dbench, postmark; errno values;
//! permission bits for an unprivileged user; two mounts on two "nodes". A mount on a server's
//! address reads chunks from the servers' data directories (local reads); one on an address of
//! its own reads over the network (see the harness notes).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use surge_tests::{sh, Instance, Mount};

fn instance(name: &str, base: u8) -> Instance {
    let hosts: Vec<String> = (0..4).map(|i| format!("127.0.0.{}", base + i)).collect();
    Instance::up(name, &["--capacity", "4G", "--hosts", &hosts.join(",")])
}

/// Mounts of `inst` (made by `instance(_, base)`) on two nodes: "a" on the first server's
/// address (it reads chunks from the data directories), "b" on an address of its own.
fn two_nodes(inst: &Instance, base: u8) -> (Mount<'_>, Mount<'_>) {
    (inst.mount("a", &format!("127.0.0.{base}")), inst.mount("b", &format!("127.0.0.{}", base + 4)))
}

#[test]
fn fio_verifies_sequential_and_random_io() {
    let inst = instance("fio", 11);
    // On a server's node (reads from the data directories) and on a node of its own (reads
    // over the network).
    for node in ["127.0.0.11", "127.0.0.15"] {
        let m = inst.mount(node, node);
        let dir = m.dir.display();
        // Each job writes, then reads everything back and checks it (sequentially for
        // `write`, in the order written for the random ones).
        for (rw, bs) in [("write", "1M"), ("randwrite", "4k"), ("randrw", "16k")] {
            sh(&format!(
                "fio --name=v-{rw} --directory={dir} --rw={rw} --bs={bs} --size=32M --ioengine=psync --verify=crc32c --do_verify=1 \
                 --verify_fatal=1 --verify_state_save=0 --end_fsync=1 --output-format=terse >/dev/null"
            ));
        }
    }
}

#[test]
fn tar_rsync_and_diff_reproduce_a_source_tree() {
    let inst = instance("tar", 21);
    let m = inst.mount("a", "127.0.0.21");
    let dir = m.dir.display();
    let src = "/usr/include/linux";
    sh(&format!("tar cf - -C /usr/include linux | tar xf - -C {dir} && diff -r {src} {dir}/linux"));
    let back = std::env::temp_dir().join(format!("surge-rsync-back-{}", std::process::id()));
    sh(&format!("rsync -a {src}/ {dir}/rsynced/ && rsync -a {dir}/rsynced/ {}/ && diff -r {src} {}", back.display(), back.display()));
    std::fs::remove_dir_all(back).unwrap();
    // Symlinks and permissions survive tar (-p) too.
    sh(&format!("cd {dir} && ln -s linux/stddef.h link && test \"$(readlink link)\" = linux/stddef.h && cmp link {src}/stddef.h"));
}

#[test]
fn times_set_after_writing_survive_the_writers_close() {
    // cp -a, cp -p and tar x write a file, then set its times on the open descriptor
    // (futimens), then close it: the close must not put its own time over them.
    let inst = instance("times", 171);
    let m = inst.mount("a", "127.0.0.171");
    let dir = m.dir.display();
    let src = std::env::temp_dir().join(format!("surge-times-{}", std::process::id()));
    let s = src.display();
    let then = 981_173_106; // 2001-02-03 04:05:06 UTC
    sh(&format!(
        "rm -rf {s} && mkdir -p {s}/tree/sub && head -c 3000000 /dev/urandom > {s}/tree/big && echo hi > {s}/tree/sub/small \
         && touch -d @{then} {s}/tree/big {s}/tree/sub/small {s}/tree/sub {s}/tree"
    ));
    sh(&format!(
        "cp -a {s}/tree {dir}/cpa && cp -p {s}/tree/big {dir}/cpp && mkdir {dir}/untar && tar cf - -C {s} tree | tar xf - -C {dir}/untar"
    ));
    // Seen from another node (this mount's kernel keeps the times its setattr answered).
    let other = inst.mount("b", "127.0.0.175");
    let there = other.dir.display();
    for path in ["cpa/big", "cpa/sub/small", "cpa/sub", "cpa", "cpp", "untar/tree/big", "untar/tree/sub/small", "untar/tree/sub"] {
        let mtime = sh(&format!("stat -c %Y {there}/{path}"));
        assert_eq!(mtime.trim(), then.to_string(), "{path}: mtime kept");
    }
    // A write after the times were set sets mtime again. Read after an open on the other
    // node (close-to-open): a bare stat there may race the change's notice.
    sh(&format!("touch -d @{then} {dir}/cpp && echo more >> {dir}/cpp"));
    let mtime: i64 = sh(&format!("cat {there}/cpp > /dev/null && stat -c %Y {there}/cpp")).trim().parse().unwrap();
    assert!(mtime > then + 1_000_000, "a later write moves mtime on: {mtime}");
    std::fs::remove_dir_all(&src).unwrap();
}

#[test]
fn directory_link_counts_follow_their_subdirectories() {
    // 2 + subdirectories, as find and other tree walkers expect, on this node at once and on
    // another.
    let inst = instance("nlink", 181);
    let (here, there) = two_nodes(&inst, 181);
    let (a, b) = (here.dir.display(), there.dir.display());
    let links = |dir: &str| sh(&format!("stat -c %h {dir}")).trim().parse::<u32>().unwrap();
    sh(&format!("mkdir {a}/d && mkdir {a}/d/s1 {a}/d/s2 {a}/d/s3 && touch {a}/d/file"));
    assert_eq!(links(&format!("{a}/d")), 5, "three subdirectories");
    assert_eq!(links(&format!("{b}/d")), 5, "seen from another node");
    sh(&format!("rmdir {a}/d/s1"));
    assert_eq!(links(&format!("{a}/d")), 4, "after an rmdir");
    sh(&format!("mv {a}/d/s2 {a}/moved"));
    assert_eq!((links(&format!("{a}/d")), links(&a.to_string())), (3, 4), "after moving one up");
    assert_eq!(sh(&format!("find {b}/d -type d | wc -l")).trim(), "2");
}

#[test]
fn appends_from_two_nodes_all_land_whole() {
    // O_APPEND on two nodes at once: every line lands, none over another (the offset comes
    // from the file's home, not from each kernel's idea of the end).
    let inst = instance("append", 191);
    let (here, there) = two_nodes(&inst, 191);
    let (a, b) = (here.dir.display(), there.dir.display());
    sh(&format!("touch {a}/log"));
    sh(&format!(
        "(for i in $(seq 1000); do echo \"a $i of the lines appended from node a\" >> {a}/log; done) & \
         (for i in $(seq 1000); do echo \"b $i of the lines appended from node b\" >> {b}/log; done) & wait"
    ));
    for (node, dir) in [("a", &a), ("b", &b)] {
        let lines = sh(&format!("cat {dir}/log"));
        let mut seen: Vec<&str> = lines.lines().collect();
        assert_eq!(seen.len(), 2000, "node {node} reads every line");
        seen.sort();
        let twice: Vec<&str> = seen.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
        seen.dedup();
        assert_eq!(seen.len(), 2000, "node {node}: no line twice: {twice:?}");
        for from in ["a", "b"] {
            let whole =
                seen.iter().filter(|l| l.starts_with(&format!("{from} ")) && l.ends_with(&format!("appended from node {from}"))).count();
            assert_eq!(whole, 1000, "node {node}: every line from {from} whole");
        }
    }
}

#[test]
fn hard_links_span_directories_on_any_server() {
    // Names in directories homed on different servers, one inode: the count, the data and the
    // inode number agree on both nodes, and the data stays until the last name goes.
    let inst = instance("links", 211);
    let (here, there) = two_nodes(&inst, 211);
    let (a, b) = (here.dir.display(), there.dir.display());
    let stat = |path: String| sh(&format!("stat -c '%h %i %s' {path}")).trim().to_string();
    sh(&format!("mkdir {a}/d1 {a}/d2 {a}/d3 {a}/d4 && echo first > {a}/f"));
    let ctime_before = sh(&format!("stat -c %z {a}/f"));
    for d in ["d1", "d2", "d3", "d4"] {
        sh(&format!("ln {a}/f {a}/{d}/g"));
    }
    let ino = sh(&format!("stat -c %i {a}/f")).trim().to_string();
    for path in [format!("{a}/f"), format!("{b}/f"), format!("{b}/d3/g"), format!("{a}/d4/g")] {
        assert_eq!(stat(path.clone()), format!("5 {ino} 6"), "{path}");
    }
    assert_ne!(sh(&format!("stat -c %z {b}/f")), ctime_before, "a link changes the inode's ctime");
    sh(&format!("echo second >> {b}/d2/g"));
    assert_eq!(sh(&format!("cat {a}/d1/g")), "first\nsecond\n", "one file's data under every name");
    sh(&format!("rm {a}/f {b}/d1/g {a}/d2/g"));
    assert_eq!(stat(format!("{b}/d4/g")), format!("2 {ino} 13"), "two names left");
    assert_eq!(sh(&format!("cat {b}/d3/g")), "first\nsecond\n");
    // What ln refuses, with the errno Linux gives.
    let refused = |cmd: String| sh(&format!("{cmd} 2>&1 && echo allowed || true"));
    assert!(refused(format!("ln {a}/d1 {a}/dirlink")).contains("hard link not allowed for directory"), "no links to directories");
    assert!(refused(format!("ln {a}/d3/g {a}/d4/g")).contains("File exists"), "an existing name, the same file's too");
    assert_eq!(stat(format!("{a}/d3/g")), format!("2 {ino} 13"), "a refused link leaves the count");
    sh(&format!("rm {a}/d3/g {b}/d4/g"));
    assert_eq!(sh(&format!("find {b}/d1 {b}/d2 {b}/d3 {b}/d4 -type f | wc -l")).trim(), "0", "every name gone");
    // Tools that keep links: tar.
    sh(&format!("mkdir {a}/src && echo x > {a}/src/one && ln {a}/src/one {a}/src/two && tar -C {a} -cf {a}/t.tar src"));
    sh(&format!("mkdir {b}/out && tar -C {b}/out -xf {b}/t.tar"));
    assert_eq!(sh(&format!("stat -c %i {a}/out/src/one")), sh(&format!("stat -c %i {a}/out/src/two")), "tar made a link, not a copy");
}

/// A helper script written into a mount, for the tests to run.
fn script(mount: &Mount, name: &str, text: &str) -> std::path::PathBuf {
    let path = mount.path(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// fcntl from Python: `lock.py FILE SPEC...`, each SPEC `w:START:LEN`, `r:START:LEN`,
/// `u:START:LEN` (F_SETLK), `W:START:LEN` (F_SETLKW), `?w:START:LEN` (F_GETLK, prints the
/// holder's pid or "free"), `sleep:SECONDS`; prints "ok" or "EAGAIN" per lock.
const LOCK_PY: &str = r#"
import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
kinds = {"r": fcntl.F_RDLCK, "w": fcntl.F_WRLCK, "u": fcntl.F_UNLCK}
for spec in sys.argv[2:]:
    if spec.startswith("sleep:"):
        time.sleep(float(spec[6:])); continue
    op, start, length = spec.split(":")
    if op.startswith("?"):
        got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi", kinds[op[1]], 0, int(start), int(length), 0))
        typ, _, _, _, pid = struct.unpack("hhqqi", got)
        print("free" if typ == fcntl.F_UNLCK else pid, flush=True); continue
    cmd = fcntl.F_SETLKW if op == "W" else fcntl.F_SETLK
    try:
        fcntl.fcntl(fd, cmd, struct.pack("hhqqi", kinds[op.lower()], 0, int(start), int(length), 0))
        print("ok", flush=True)
    except BlockingIOError:
        print("EAGAIN", flush=True)
"#;

#[test]
fn locks_exclude_across_nodes_and_go_with_their_holders() {
    let inst = instance("locks", 216);
    let (here, there) = two_nodes(&inst, 216);
    let (a, b) = (here.dir.display(), there.dir.display());
    let py = script(&here, "lock.py", LOCK_PY);
    let py = py.display();
    sh(&format!("head -c 4096 /dev/zero > {a}/data"));

    // fcntl byte ranges: node a holds 0-99 for writing; node b is refused there, told who
    // holds it, and free elsewhere; a's close gives everything back.
    let holder = std::process::Command::new("python3")
        .args([&py.to_string(), &format!("{a}/data"), "w:0:100", "sleep:30"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let seen = sh(&format!("python3 {py} {b}/data w:50:10 r:99:1 ?w:0:0 w:100:100 ?r:100:1"));
    assert_eq!(seen, format!("EAGAIN\nEAGAIN\n{}\nok\nfree\n", holder.id()), "node b beside node a's lock");
    // A waiter on node b gets the lock once the holder on node a dies (kill -9: the kernel
    // closes its files, which gives its locks back).
    let started = std::time::Instant::now();
    let waiter = std::process::Command::new("python3")
        .args([&py.to_string(), &format!("{b}/data"), "W:0:10"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut holder = holder;
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "the waiter got the lock");
    assert!(started.elapsed() >= Duration::from_millis(500), "it waited for the holder");

    // flock: exclusive across nodes; a blocking flock on node b waits for node a's to end.
    let timed = sh(&format!(
        "flock -x {a}/data -c 'sleep 1.5' & sleep 0.3; \
         flock -n {b}/data -c true && echo got-it || echo refused; \
         s=$(date +%s%N); flock -x {b}/data -c true; echo $(( ($(date +%s%N) - s) / 1000000 )); wait"
    ));
    let mut lines = timed.lines();
    assert_eq!(lines.next(), Some("refused"), "flock -n on node b while node a holds it");
    let waited: u64 = lines.next().unwrap().parse().unwrap();
    assert!(waited >= 800, "flock on node b waited for node a's ({waited} ms)");
    sh(&format!("flock -s {a}/data -c 'flock -s -n {b}/data -c true'"));

    // A mount that dies takes its locks with it (its connections to the servers end).
    // In a process group of its own: `sleep` inherits the locked descriptor, and both go.
    let mut holder = std::os::unix::process::CommandExt::process_group(
        std::process::Command::new("flock").args(["-x", &format!("{a}/data"), "-c", "sleep 60"]),
        0,
    )
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!sh(&format!("flock -n {b}/data -c true && echo got-it || echo refused")).contains("got-it"));
    let daemon = sh(&format!("pgrep -f 'surge-fuse locks {a} '"));
    sh(&format!("kill -9 {}", daemon.trim()));
    // SAFETY: kill(2) of the holder's own process group, made above.
    unsafe { libc::kill(-(holder.id() as i32), libc::SIGKILL) };
    let _ = holder.wait();
    let took = sh(&format!("timeout 10 flock -x {b}/data -c 'echo got-it' || echo timed-out"));
    assert_eq!(took.trim(), "got-it", "node a's mount died: its lock went with it");
}

/// renameat2 from Python: `rename2.py FLAGS OLD NEW` prints "ok" or the errno's name.
const RENAME2_PY: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
rc = libc.renameat2(AT_FDCWD, sys.argv[2].encode(), AT_FDCWD, sys.argv[3].encode(), int(sys.argv[1]))
print("ok" if rc == 0 else errno.errorcode[ctypes.get_errno()])
"#;

#[test]
fn rename_exchange_swaps_names_within_and_across_servers() {
    let inst = instance("exchange", 206);
    let (here, there) = two_nodes(&inst, 206);
    let (a, b) = (here.dir.display(), there.dir.display());
    let py = script(&here, "rename2.py", RENAME2_PY);
    let exchange = |from: String, to: String| sh(&format!("python3 {} 2 {from} {to}", py.display())).trim().to_string();
    let noreplace = |from: String, to: String| sh(&format!("python3 {} 1 {from} {to}", py.display())).trim().to_string();
    let ino = |path: String| sh(&format!("stat -c %i {path}")).trim().to_string();
    let links = |path: String| sh(&format!("stat -c %h {path}")).trim().to_string();

    // In one directory: a file and a directory change places.
    sh(&format!("echo file > {a}/x && mkdir {a}/y && echo inside > {a}/y/z"));
    assert_eq!(exchange(format!("{a}/x"), format!("{a}/y")), "ok");
    assert_eq!(sh(&format!("cat {b}/y; cat {b}/x/z")), "file\ninside\n", "seen from another node");
    // Across directories homed on different servers, directories' `..` and link counts follow.
    sh(&format!(
        "mkdir {a}/d1 {a}/d2 {a}/d3 {a}/d4 && echo one > {a}/d1/f && echo two > {a}/d2/f && \
         mkdir {a}/d3/sub {a}/d4/sub && echo g > {a}/d3/sub/g && echo h > {a}/d4/sub/h"
    ));
    let homes: std::collections::HashSet<u64> =
        ["d1", "d2", "d3", "d4"].iter().map(|d| ino(format!("{a}/{d}")).parse::<u64>().unwrap() >> 48).collect();
    assert!(homes.len() > 1, "the directories are homed on several servers");
    // (directory holding a file, name; directory holding a directory, name)
    for (file_dir, file_name, dir_dir, dir_name) in [("d1", "f", "d3", "sub"), ("d2", "f", "d4", "sub"), ("d4", "sub", "d1", "f")] {
        let (f, d) = (format!("{a}/{file_dir}"), format!("{a}/{dir_dir}"));
        let (file_links, dir_links) = (links(f.clone()), links(d.clone()));
        assert_eq!(exchange(format!("{f}/{file_name}"), format!("{d}/{dir_name}")), "ok", "{file_dir} <-> {dir_dir}");
        assert_eq!(ino(format!("{f}/{file_name}/..")), ino(f.clone()), "the moved directory's .. is its new parent");
        assert_eq!(ino(format!("{b}/{file_dir}/{file_name}/..")), ino(format!("{b}/{file_dir}")), "also on another node");
        let expect = |n: String, by: i32| (n.parse::<i32>().unwrap() + by).to_string();
        assert_eq!((links(f.clone()), links(d.clone())), (expect(file_links, 1), expect(dir_links, -1)), "link counts");
        assert!(sh(&format!("test -f {b}/{dir_dir}/{dir_name} && echo file")).contains("file"));
    }
    assert_eq!(sh(&format!("cat {b}/d4/sub/g {b}/d2/f/h {b}/d1/f {b}/d3/sub")), "g\nh\ntwo\none\n", "every file where the swaps put it");
    // What renameat2 refuses.
    assert_eq!(exchange(format!("{a}/x"), format!("{a}/missing")), "ENOENT");
    sh(&format!("mkdir -p {a}/outer/inner"));
    assert_eq!(exchange(format!("{a}/outer"), format!("{a}/outer/inner")), "EINVAL", "a directory with its own subdirectory");
    assert_eq!(noreplace(format!("{a}/y"), format!("{a}/x")), "EEXIST", "RENAME_NOREPLACE onto a name");
    // y, x/z, the script, and the four files of the swaps.
    assert_eq!(sh(&format!("find {a} -type f | wc -l")).trim(), "7", "nothing lost or doubled");
}

#[test]
fn fifos_sockets_and_device_nodes_are_names_every_node_sees_and_uses_locally() {
    let inst = instance("special", 152);
    let (here, there) = two_nodes(&inst, 152);
    let (a, b) = (here.dir.display(), there.dir.display());
    sh(&format!("mkfifo -m 0640 {a}/pipe && mknod {a}/null c 1 3 && mknod {a}/loop b 7 0"));
    sh(&format!("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('{a}/sock')\""));
    let described = sh(&format!("stat -c '%n %F %a %t:%T' {b}/pipe {b}/null {b}/loop {b}/sock"));
    assert_eq!(
        described.replace(&format!("{b}/"), ""),
        "pipe fifo 640 0:0\nnull character special file 644 1:3\nloop block special file 644 7:0\nsock socket 755 0:0\n",
        "seen from another node with their types and device numbers"
    );
    // A pipe is each node's own: a writer and a reader on node b meet in it.
    assert_eq!(sh(&format!("(echo through > {b}/pipe &) ; cat {b}/pipe")), "through\n");
    assert_eq!(sh(&format!("ls -l {a} | tail -n +2 | cut -c1 | sort | tr -d '\\n'")), "bcps", "ls -l shows their kinds");
    sh(&format!("ln {a}/pipe {a}/pipe2 && rm {a}/pipe {b}/null {a}/loop {b}/sock"));
    assert_eq!(sh(&format!("stat -c '%h %F' {b}/pipe2")), "1 fifo\n", "linked and unlinked like files");
}

#[test]
fn git_init_commit_clone_and_fsck() {
    let inst = instance("git", 31);
    let m = inst.mount("a", "127.0.0.31");
    let dir = m.dir.display();
    sh(&format!(
        "set -e; export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x; \
         mkdir {dir}/repo && cd {dir}/repo && git init -q && cp -r /usr/include/linux/netfilter . && git add -A && git commit -qm one && \
         echo more >> netfilter/x_tables.h && git commit -qam two && git clone -q {dir}/repo {dir}/clone && \
         cd {dir}/clone && git fsck --strict && test \"$(git log --oneline | wc -l)\" = 2 && diff -r netfilter {dir}/repo/netfilter"
    ));
}

#[test]
fn ffmpeg_encodes_png_frames_into_an_mp4() {
    let inst = instance("ffmpeg", 41);
    let m = inst.mount("a", "127.0.0.41");
    let dir = m.dir.display();
    sh(&format!(
        "set -e; cd {dir}; ffmpeg -loglevel error -f lavfi -i testsrc=size=320x240:rate=10 -frames:v 20 frame_%03d.png && \
         ffmpeg -loglevel error -framerate 10 -i frame_%03d.png -pix_fmt yuv420p movie.mp4 && \
         test \"$(ffprobe -v error -count_frames -select_streams v -show_entries stream=nb_read_frames -of csv=p=0 movie.mp4)\" = 20"
    ));
}

#[test]
fn bonnie_dbench_and_postmark_finish_cleanly() {
    let inst = instance("bench", 51);
    let m = inst.mount("a", "127.0.0.51");
    let dir = m.dir.display();
    sh(&format!("bonnie++ -q -d {dir} -s 64M -r 32M -n 1 -u root -f >/dev/null"));
    sh(&format!("dbench -D {dir} -t 5 2 >/dev/null"));
    sh(&format!("cd {dir} && printf 'set location {dir}\\nset number 500\\nset transactions 1000\\nrun\\nquit\\n' | postmark >/dev/null"));
}

#[test]
fn errors_carry_the_right_errno_and_permissions_hold_for_other_users() {
    let inst = instance("errno", 61);
    let m = inst.mount("a", "127.0.0.65");
    let d = |p: &str| m.path(p);
    std::fs::create_dir(d("dir")).unwrap();
    std::fs::write(d("dir/f"), b"x").unwrap();
    let errno = |r: std::io::Result<()>| r.unwrap_err().raw_os_error().unwrap();
    assert_eq!(errno(std::fs::metadata(d("nope")).map(|_| ())), libc::ENOENT);
    assert_eq!(errno(std::fs::create_dir(d("dir"))), libc::EEXIST);
    assert_eq!(errno(std::fs::remove_dir(d("dir"))), libc::ENOTEMPTY);
    assert_eq!(errno(std::fs::remove_file(d("dir"))), libc::EISDIR);
    assert_eq!(errno(std::fs::read_dir(d("dir/f")).map(|_| ())), libc::ENOTDIR);
    assert_eq!(errno(std::fs::write(d(&"n".repeat(256)), b"")), libc::ENAMETOOLONG);
    // Permission bits, enforced for uid 65534 by the kernel (default_permissions).
    std::fs::set_permissions(&m.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(d("dir"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(d("dir/private"), b"secret").unwrap();
    std::fs::set_permissions(d("dir/private"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let nobody = |cmd: &str| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", cmd])
            .output()
            .unwrap()
    };
    let out = nobody(&format!("cat {}", d("dir/private").display()));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{out:?}");
    let out = nobody(&format!("echo hi > {}/x", m.dir.display()));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{out:?}");
    let out = nobody(&format!("echo hi > {0}/mine && cat {0}/mine && stat -c %u {0}/mine", d("dir").display()));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n65534\n");
    // Nor behind the mount's back: a server's directory (data files, journal, log) is its
    // owner's alone, whatever the umask and --root.
    for server in inst.descriptor()["servers"].as_array().unwrap() {
        let root = server["root"].as_str().unwrap();
        assert_eq!(std::fs::metadata(root).unwrap().permissions().mode() & 0o777, 0o700, "{root}");
        let out = nobody(&format!("ls {root}/data || cat {root}/meta/snapshot"));
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{out:?}");
    }
}

/// Set-id bits go as on a local file system: a chgrp by the file's owner to another of its
/// groups clears them, and so does a write or truncate by a user without privilege, whether
/// the kernel sends the write to the mount or straight to a data file (passthrough); root's
/// write keeps them.
#[test]
fn set_id_bits_go_with_a_chown_by_the_owner_and_a_write_by_another_user() {
    let inst = instance("setid", 2);
    let m = inst.mount("a", "127.0.0.2");
    let d = |p: &str| m.path(p).display().to_string();
    std::fs::set_permissions(&m.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let nobody = |cmd: &str| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--groups=65534,65533", "bash", "-c", cmd])
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {out:?}");
    };
    let mode = |p: &str| sh(&format!("stat -c %a {}", d(p))).trim().to_string();
    sh(&format!("touch {0} && chown 65534:65534 {0} && chmod 06555 {0}", d("owned")));
    nobody(&format!("chgrp 65533 {}", d("owned")));
    assert_eq!(mode("owned"), "555", "the owner's chgrp");
    sh(&format!("touch {0} && chmod 06555 {0} && chgrp 65533 {0}", d("rooted")));
    assert_eq!(mode("rooted"), "555", "root's chgrp, as Linux's chown clears them for root too");
    for (name, how) in
        [("written", "echo x >> {}"), ("big", "dd if=/dev/zero of={} bs=1M count=2 conv=notrunc status=none"), ("cut", "truncate -s 0 {}")]
    {
        sh(&format!("echo data > {0} && chmod 06777 {0}", d(name)));
        nobody(&how.replace("{}", &d(name)));
        assert_eq!(mode(name), "777", "{name} by another user");
    }
    sh(&format!("echo data > {0} && chmod 06777 {0} && echo more >> {0} && truncate -s 1 {0}", d("mine")));
    assert_eq!(mode("mine"), "6777", "root's write keeps them");
}

/// What is made in a set-group-ID directory takes the directory's group, and a new directory
/// the bit as well, on the node that made the directory and on another, whichever server
/// homes what is made (a directory homed away from its parent is made in two steps), also
/// when the node held the directory under a delegation before it became set-group-ID.
#[test]
fn a_set_group_id_directory_gives_its_group_down_the_tree_on_every_node() {
    use std::os::unix::fs::MetadataExt;
    let inst = instance("setgid", 16);
    let (a, b) = two_nodes(&inst, 16);
    let project = a.path("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::set_permissions(&project, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Enough creates for node a to ask for the directory's delegation.
    for i in 0..64 {
        std::fs::write(project.join(format!("before{i}")), b"").unwrap();
    }
    sh(&format!("chgrp 65533 {0} && chmod 2777 {0}", project.display()));
    let maker = |dir: &std::path::Path, names: &str| {
        let cmd = format!("cd {} && for n in {names}; do touch f$n && mkdir d$n && touch d$n/g && mkdir d$n/e; done", dir.display());
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--groups=65534,65533", "bash", "-c", &cmd])
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {out:?}");
    };
    // Enough on node a for it to hold the set-group-ID directory's delegation again, and
    // answer creates and mkdirs itself.
    maker(&project, "$(seq 0 59)");
    maker(&b.path("project"), "$(seq 60 79)");
    for m in [&a, &b] {
        for i in 0..80 {
            for (path, dir) in [(format!("f{i}"), false), (format!("d{i}"), true), (format!("d{i}/g"), false), (format!("d{i}/e"), true)] {
                let meta = std::fs::metadata(m.path("project").join(&path)).unwrap();
                assert_eq!((meta.uid(), meta.gid()), (65534, 65533), "{path} as node {} sees it", m.dir.display());
                let set_gid = meta.mode() & libc::S_ISGID != 0;
                assert_eq!(set_gid, dir, "{path}: the bit on directories only");
            }
        }
        let before = std::fs::metadata(m.path("project/before0")).unwrap();
        assert_eq!(before.gid(), 0, "what was there before keeps its group");
    }
}

/// A file or directory still open after a rename over it, or a directory after its rmdir,
/// has no link left as fstat sees it (the kernel asks the mount once it has dropped the
/// name; the home has no such directory any more), also once the mount's short-lived copy
/// of the directory's attributes has run out.
#[test]
fn what_is_open_after_a_rename_over_it_or_its_rmdir_has_no_links() {
    use std::os::unix::fs::MetadataExt;
    let inst = Instance::up("openremoved", &["--capacity", "1G", "--hosts", "127.0.5.201,127.0.5.202"]);
    let m = inst.mount("a", "127.0.5.201");
    for (round, pause) in [(0, false), (1, true)] {
        let path = |name: &str| m.path(&format!("{name}{round}"));
        std::fs::create_dir(path("from")).unwrap();
        std::fs::create_dir(path("over")).unwrap();
        std::fs::create_dir(path("gone")).unwrap();
        std::fs::write(path("file"), b"new").unwrap();
        std::fs::write(path("replaced"), b"old").unwrap();
        let (over, gone, replaced) = (
            std::fs::File::open(path("over")).unwrap(),
            std::fs::File::open(path("gone")).unwrap(),
            std::fs::File::open(path("replaced")).unwrap(),
        );
        if pause {
            std::thread::sleep(Duration::from_millis(1200));
        }
        std::fs::rename(path("from"), path("over")).unwrap();
        std::fs::remove_dir(path("gone")).unwrap();
        std::fs::rename(path("file"), path("replaced")).unwrap();
        for (what, f) in [("a directory renamed over", &over), ("a removed directory", &gone), ("a file renamed over", &replaced)] {
            let meta = f.metadata().unwrap_or_else(|e| panic!("fstat of {what}: {e}"));
            assert_eq!(meta.nlink(), 0, "{what}, round {round}");
        }
        assert!(over.metadata().unwrap().is_dir() && replaced.metadata().unwrap().is_file());
        assert_eq!(std::fs::metadata(path("over")).unwrap().nlink(), 2, "the name now names the moved directory");
    }
}

/// Renames of directories over empty ones in a directory the mount holds under a
/// delegation (answered by the mount, which checks the replaced directory is removable),
/// while other threads stat and list (each waiting for the delegation's log to be written
/// back): all of it finishes. The two once took the same two locks in opposite orders and the
/// mount stopped answering within seconds (xfstests generic/011's dirstress met it).
#[test]
fn renames_over_directories_in_a_delegated_directory_beside_stats_never_hang() {
    let inst = Instance::up("renamehang", &["--capacity", "1G", "--hosts", "127.0.5.206,127.0.5.207"]);
    // Over io_uring: a queue a core, each dispatching on its own thread, as where it was met.
    let m = inst.mount_with("a", "127.0.5.206", &[("SURGE_FUSE_IO_URING", "1")]);
    let dir = m.path("w");
    std::fs::create_dir(&dir).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done, finished) = std::sync::mpsc::channel();
    for t in 0..5 {
        let (dir, stop, done) = (dir.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if t < 3 {
                    let (from, over) = (dir.join(format!("a{t}_{i}")), dir.join(format!("b{t}_{i}")));
                    std::fs::create_dir(&from).unwrap();
                    std::fs::create_dir(&over).unwrap();
                    std::fs::rename(&from, &over).unwrap();
                    std::fs::write(dir.join(format!("f{t}_{i}")), b"").unwrap();
                } else {
                    std::fs::metadata(&dir).unwrap();
                    std::fs::read_dir(dir.parent().unwrap()).unwrap().for_each(drop);
                }
                i += 1;
            }
            done.send(i).unwrap();
        });
    }
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for _ in 0..5 {
        // Generous: a thread ends within milliseconds of being told to; only a hang takes this long.
        let Ok(steps) = finished.recv_timeout(Duration::from_secs(60)) else {
            // Its requests fail, so that the threads stuck in it (and this test) can end.
            abort_fuse_connection(&m.dir);
            panic!("a thread hung in the mount for 60 s");
        };
        assert!(steps > 0);
    }
}

#[test]
fn rename_on_one_node_publishes_to_a_mount_on_another() {
    let inst = instance("twonode", 71);
    let a = inst.mount("a", "127.0.0.71");
    let b = inst.mount("b", "127.0.0.76");
    std::fs::write(a.path("hello"), b"from node a").unwrap();
    assert_eq!(std::fs::read(b.path("hello")).unwrap(), b"from node a");
    // Writer on node a publishes versions by rename; a reader polling on node b must never
    // see a partial file under the final name.
    let (adir, bdir) = (a.dir.clone(), b.dir.clone());
    let writer = std::thread::spawn(move || {
        for v in 1..=60u32 {
            let body: Vec<u8> = std::iter::repeat_n(v as u8, 100_000 + (v as usize * 37_117) % 2_000_000).collect();
            let mut content = (body.len() as u64).to_le_bytes().to_vec();
            content.extend(body);
            std::fs::write(adir.join("plot.tmp"), &content).unwrap();
            std::fs::rename(adir.join("plot.tmp"), adir.join("plot.h5")).unwrap();
        }
    });
    let mut seen = std::collections::BTreeSet::new();
    while !writer.is_finished() || seen.is_empty() {
        match std::fs::read(bdir.join("plot.h5")) {
            Ok(data) => {
                assert!(data.len() >= 8, "partial file: {} bytes", data.len());
                let len = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
                assert_eq!(data.len(), len + 8, "size does not match the header");
                assert!(data[8..].iter().all(|&x| x == data[8]), "mixed versions");
                seen.insert(data[8]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("read failed: {e:?}"),
        }
    }
    writer.join().unwrap();
    assert_eq!(std::fs::read(b.path("plot.h5")).unwrap()[8], 60, "the final version is visible on node b");
    assert!(seen.len() >= 2, "reader saw only {seen:?}");
}

#[test]
fn umount_and_down_work_after_a_server_died() {
    let inst = instance("dead", 81);
    let m = inst.mount("a", "127.0.0.85");
    let reader = inst.mount("b", "127.0.0.86");
    std::fs::write(m.path("f"), vec![7u8; 8 << 20]).unwrap();
    let pid = inst.descriptor()["servers"][1]["pid"].as_u64().unwrap();
    // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let start = std::time::Instant::now();
    assert!(std::fs::read(reader.path("f")).is_err(), "a file striped over a dead server was read");
    assert!(start.elapsed() < Duration::from_secs(10));
    // The writer's node may still hold the file's pages, which are its bytes (nobody can
    // publish a change while the open asks the home): exact, or an error, never stale.
    if let Ok(bytes) = std::fs::read(m.path("f")) {
        assert!(bytes == vec![7u8; 8 << 20], "the writer's node read other bytes than it wrote");
    }
    drop(reader);
    let out = inst.surge(&["umount", m.dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", surge_tests::text(&out));
    assert!(!sh("cat /proc/self/mountinfo").contains(m.dir.to_str().unwrap()));
}

#[test]
fn a_reader_sees_writes_made_through_another_descriptor_on_the_same_node() {
    use std::os::unix::fs::FileExt;
    let inst = instance("handles", 91);
    let m = inst.mount("a", "127.0.0.91");
    let path = m.path("shared");
    let writer = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path).unwrap();
    writer.write_all_at(&vec![1u8; 4 << 20], 0).unwrap();
    let reader = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    // Sequential reads start read-ahead over the whole file...
    reader.read_exact_at(&mut buf, 0).unwrap();
    reader.read_exact_at(&mut buf, 64 << 10).unwrap();
    // ...then the other descriptor rewrites a region ahead of the reader.
    writer.write_all_at(&vec![2u8; 64 << 10], 128 << 10).unwrap();
    reader.read_exact_at(&mut buf, 128 << 10).unwrap();
    assert!(buf.iter().all(|&b| b == 2), "read returned data fetched before the write");
}

/// Descriptors of one file on one node agree on its size: a reader opened before two writers
/// extend the file (the last page partly, so the kernel asks the mount for it) reads every
/// byte they wrote after they closed, and a shorter rewrite (O_TRUNC) while that reader still
/// holds the file ends where the new bytes end.
#[test]
fn descriptors_on_one_node_agree_on_a_files_size_as_it_grows_and_shrinks() {
    use std::os::unix::fs::FileExt;
    const MIB: usize = 1 << 20;
    let inst = instance("sizes", 237);
    let m = inst.mount("a", "127.0.0.237");
    let path = m.path("checkpoint");
    std::fs::write(&path, vec![1u8; 8 * MIB]).unwrap();
    let reader = std::fs::File::open(&path).unwrap();
    let mut seen = vec![0u8; 8 * MIB];
    reader.read_exact_at(&mut seen, 0).unwrap();
    assert!(seen.iter().all(|&b| b == 1));
    // Two writers, a half each in 1 MiB writes, at once; the second also writes past the end.
    std::thread::scope(|scope| {
        for half in 0..2u8 {
            let path = &path;
            scope.spawn(move || {
                let w = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                for i in 0..4u64 {
                    w.write_all_at(&vec![10 + half; MIB], (u64::from(half) * 4 + i) * MIB as u64).unwrap();
                }
                if half == 1 {
                    w.write_all_at(&[12u8; 100], 8 * MIB as u64).unwrap();
                }
            });
        }
    });
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 * MIB as u64 + 100);
    let mut after = vec![0u8; 8 * MIB + 100];
    reader.read_exact_at(&mut after, 0).unwrap();
    assert!(after[..4 * MIB].iter().all(|&b| b == 10), "first half");
    assert!(after[4 * MIB..8 * MIB].iter().all(|&b| b == 11), "second half");
    assert!(after[8 * MIB..].iter().all(|&b| b == 12), "past the old end");
    assert_eq!(std::fs::read(&path).unwrap(), after);
    // A shorter file written over it ends where the new bytes end, although the reader above
    // still holds the file open with its longer size.
    sh(&format!("head -c 3000000 /dev/urandom > {0}.src && cat {0}.src > {0} && cmp {0}.src {0}", path.display()));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 3_000_000);
    drop(reader);
}

/// What a mount remembers of its own writers never overrides a size set later elsewhere:
/// written to 0x40000 on node A, truncated to 0xc19b on node B, then opened on A, the file is
/// 0xc19b long before and after a read, an extending write on A lands past 0xc19b with a hole
/// between, and B sees the size A made. A descriptor A still holds from before the truncate
/// does not lift the size either (a `stat` by name on A shows B's).
#[test]
fn a_size_set_on_another_node_wins_over_what_this_node_wrote() {
    use std::os::unix::fs::FileExt;
    let inst = instance("staleSize", 237);
    let (a, b) = two_nodes(&inst, 237);
    let (on_a, on_b) = (a.path("f"), b.path("f"));
    std::fs::write(&on_a, vec![b'x'; 0x40000]).unwrap();
    let held = std::fs::File::open(&on_a).unwrap();
    std::fs::OpenOptions::new().write(true).open(&on_b).unwrap().set_len(0xc19b).unwrap();

    let f = std::fs::File::open(&on_a).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 0xc19b, "fstat on A right after the open");
    let mut page = vec![0u8; 0x1000];
    f.read_exact_at(&mut page, 0x8000).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 0xc19b, "fstat on A after a read");
    assert_eq!(std::fs::metadata(&on_a).unwrap().len(), 0xc19b, "stat on A while a descriptor from before the truncate is open");
    drop(f);

    let w = std::fs::OpenOptions::new().write(true).open(&on_a).unwrap();
    w.write_all_at(b"end", 0x20000).unwrap();
    drop(w);
    let seen = std::fs::read(&on_b).unwrap();
    assert_eq!(seen.len(), 0x20003, "B after A extended the truncated file");
    assert!(seen[..0xc19b].iter().all(|&c| c == b'x'));
    assert!(seen[0xc19b..0x20000].iter().all(|&c| c == 0), "the truncated bytes came back");
    assert_eq!(&seen[0x20000..], b"end");
    drop(held);
}

/// The kernel caches names and attributes for a moment (docs/consistency.md); an open must
/// still see what another node published, even through a name or size the kernel cached.
#[test]
fn an_open_on_another_node_sees_a_replaced_name_and_a_grown_file_at_once() {
    let inst = instance("cached", 101);
    let a = inst.mount("a", "127.0.0.105");
    let b = inst.mount("b", "127.0.0.101");
    let mut held = Vec::new();
    for v in 1..=20u8 {
        let body = vec![v; 1000 + 997 * v as usize];
        std::fs::write(a.path("data.tmp"), &body).unwrap();
        if v > 1 {
            // Node b has the previous version's name and attributes cached...
            assert_eq!(std::fs::metadata(b.path("data")).unwrap().len(), 1000 + 997 * (v as u64 - 1));
            if v % 2 == 0 {
                // ...and sometimes keeps it open, so it is unlinked but not gone.
                held.push(std::fs::File::open(b.path("data")).unwrap());
            }
        }
        std::fs::rename(a.path("data.tmp"), a.path("data")).unwrap();
        assert_eq!(std::fs::read(b.path("data")).unwrap(), body, "version {v}: old file or size opened on node b");
        assert_eq!(std::fs::metadata(b.path("data")).unwrap().len(), body.len() as u64, "stat after open");
    }
    // A file rewritten in place grows: an open sees the new size although the old one is cached.
    std::fs::write(a.path("log"), vec![1u8; 100]).unwrap();
    assert_eq!(std::fs::read(b.path("log")).unwrap().len(), 100);
    std::fs::write(a.path("log"), vec![2u8; 300_000]).unwrap();
    assert_eq!(std::fs::read(b.path("log")).unwrap(), vec![2u8; 300_000]);
    // Names are not cached as missing: a file made elsewhere is found at once, and one
    // removed elsewhere cannot be opened.
    assert!(!b.path("late").exists());
    std::fs::write(a.path("late"), b"here").unwrap();
    assert_eq!(std::fs::read(b.path("late")).unwrap(), b"here");
    std::fs::remove_file(a.path("late")).unwrap();
    assert_eq!(std::fs::File::open(b.path("late")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    // A descriptor of a file deleted on its own node can still be reopened through /proc.
    let f = std::fs::File::create(b.path("gone")).unwrap();
    std::fs::remove_file(b.path("gone")).unwrap();
    use std::os::fd::AsRawFd;
    std::fs::File::open(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
    drop(held);
}

/// A listing hands node b's kernel the attributes of what it lists (READDIRPLUS), and tells
/// b's mount which files have no extended attributes, so `ls -l` needs no lookup and no
/// xattr request per name; what node a changes afterwards (an extended attribute too)
/// reaches node b all the same, as for names it looked up one by one.
#[test]
fn attributes_a_listing_brought_follow_changes_made_elsewhere() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let inst = instance("listed", 250);
    let (a, b) = two_nodes(&inst, 250);
    std::fs::create_dir(a.path("out")).unwrap();
    for i in 0..20 {
        std::fs::write(a.path(&format!("out/f{i:02}")), format!("{i}")).unwrap();
    }
    let listed = sh(&format!("ls -ln {}", b.path("out").display()));
    assert_eq!(listed.lines().filter(|l| l.starts_with("-rw-r--r--")).count(), 20, "{listed}");
    let old_ino = std::fs::metadata(b.path("out/f04")).unwrap().ino();
    let xattr = |path: std::path::PathBuf| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import os, sys; print(os.getxattr(sys.argv[1], 'user.tag').decode())", path.to_str().unwrap()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(xattr(b.path("out/f05")), "", "no extended attribute yet");

    sh(&format!("python3 -c \"import os; os.setxattr('{}', 'user.tag', b'set on a')\"", a.path("out/f05").display()));
    std::fs::set_permissions(a.path("out/f01"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(a.path("out/f02"), vec![7u8; 4321]).unwrap();
    std::fs::remove_file(a.path("out/f03")).unwrap();
    std::fs::write(a.path("out/new"), b"new!").unwrap();
    std::fs::rename(a.path("out/new"), a.path("out/f04")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let seen = || {
        let m = |name: &str| std::fs::metadata(b.path(&format!("out/{name}")));
        m("f01").is_ok_and(|m| m.mode() & 0o777 == 0o600)
            && m("f02").is_ok_and(|m| m.len() == 4321)
            && m("f03").is_err()
            && m("f04").is_ok_and(|m| m.ino() != old_ino && m.len() == 4)
            && xattr(b.path("out/f05")) == "set on a"
    };
    while !seen() {
        assert!(std::time::Instant::now() < deadline, "node b: {}", sh(&format!("ls -lni {}", b.path("out").display())));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(std::fs::read(b.path("out/f02")).unwrap(), vec![7u8; 4321]);
}

/// The kernel keeps names and attributes for minutes; what another node changes reaches it as
/// a server notice. `stat` on node b must see a's changes within moments, not the cache time.
#[test]
fn stat_on_another_node_sees_changes_at_once() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let inst = instance("notices", 111);
    let a = inst.mount("a", "127.0.0.115");
    let b = inst.mount("b", "127.0.0.116");
    // Waits (briefly) until node b's view satisfies `seen`.
    let soon = |what: &str, seen: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !seen() {
            assert!(std::time::Instant::now() < deadline, "node b did not see {what} within 2 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    std::fs::write(a.path("grows"), b"x").unwrap();
    std::fs::create_dir(a.path("dir")).unwrap();
    std::fs::write(a.path("replaced"), b"old").unwrap();
    std::fs::write(a.path("removed"), b"gone soon").unwrap();
    // Node b looks at everything once: its kernel now caches names and attributes.
    assert_eq!(std::fs::metadata(b.path("grows")).unwrap().len(), 1);
    let dir_mode = std::fs::metadata(b.path("dir")).unwrap().mode() & 0o777;
    let old_ino = std::fs::metadata(b.path("replaced")).unwrap().ino();
    assert!(b.path("removed").exists());

    std::fs::write(a.path("grows"), vec![7u8; 12345]).unwrap();
    soon("a file grow", &|| std::fs::metadata(b.path("grows")).unwrap().len() == 12345);
    std::fs::set_permissions(a.path("dir"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_ne!(dir_mode, 0o700);
    soon("a chmod", &|| std::fs::metadata(b.path("dir")).unwrap().mode() & 0o777 == 0o700);
    std::fs::write(a.path("replacement"), b"new!").unwrap();
    std::fs::rename(a.path("replacement"), a.path("replaced")).unwrap();
    soon("a rename over a name", &|| std::fs::metadata(b.path("replaced")).is_ok_and(|m| m.ino() != old_ino && m.len() == 4));
    std::fs::remove_file(a.path("removed")).unwrap();
    soon("an unlink", &|| !b.path("removed").exists());
    // And the other way round, through a directory node a has cached.
    std::fs::write(b.path("dir/from-b"), b"b").unwrap();
    assert_eq!(std::fs::metadata(a.path("dir/from-b")).unwrap().len(), 1);
    std::fs::write(b.path("dir/from-b"), b"bbb").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::fs::metadata(a.path("dir/from-b")).unwrap().len() != 3 {
        assert!(std::time::Instant::now() < deadline, "node a did not see b's write within 2 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A mount answers "no such name" itself in a directory it made (it knows all its names);
/// a name made there by another node must still be found the moment its creation returns.
#[test]
fn names_made_elsewhere_in_a_directory_made_here_are_found_at_once() {
    let inst = instance("listing", 121);
    let a = inst.mount("a", "127.0.0.125");
    let b = inst.mount("b", "127.0.0.126");
    std::fs::create_dir(a.path("out")).unwrap();
    for i in 0..200 {
        // Node a looks the name up first (missing: answered from its listing)...
        assert!(!a.path(&format!("out/f{i}")).exists());
        std::fs::write(b.path(&format!("out/f{i}")), format!("{i}")).unwrap();
        // ...and must find it once b's create and close returned.
        assert_eq!(std::fs::read_to_string(a.path(&format!("out/f{i}"))).unwrap(), format!("{i}"), "round {i}");
        std::fs::write(a.path(&format!("out/mine{i}")), b"a").unwrap();
    }
    let mut names: Vec<String> = std::fs::read_dir(a.path("out")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names.len(), 400);
    // Removed elsewhere: gone here too.
    std::fs::remove_file(b.path("out/mine7")).unwrap();
    assert!(!a.path("out/mine7").exists());
}

/// Two nodes creating files in one directory both watch: each create waits for the other
/// mount's acknowledgement of its name notice. Neither may hold the other up (a server must
/// take an acknowledgement while a change of the same connection waits for one).
#[test]
fn two_nodes_creating_in_one_directory_do_not_wait_on_each_other() {
    let inst = instance("crosswatch", 131);
    let a = inst.mount("a", "127.0.0.135");
    let b = inst.mount("b", "127.0.0.136");
    std::fs::create_dir(a.path("shared")).unwrap();
    assert!(b.path("shared").is_dir());
    std::thread::scope(|s| {
        for (label, m) in [("a", &a), ("b", &b)] {
            s.spawn(move || {
                for i in 0..300 {
                    std::fs::write(m.path(&format!("shared/{label}{i}")), b"x").unwrap();
                }
            });
        }
    });
    assert_eq!(std::fs::read_dir(a.path("shared")).unwrap().count(), 600);
    // A create held up waits for the acknowledgement timeout, and the server says so.
    let logs = inst.server_logs();
    assert!(!logs.is_empty(), "the servers' logs were not found");
    assert!(!logs.contains("did not acknowledge a change notice"), "a create waited for the acknowledgement timeout:\n{logs}");
}

/// A directory this mount did not make gets its listing fetched once names keep turning out
/// missing there; names made elsewhere afterwards must still be found at once, and names this
/// mount made while the listing was on its way must not be lost.
#[test]
fn a_fetched_listing_still_finds_names_made_elsewhere() {
    let inst = instance("fetched", 141);
    let a = inst.mount("a", "127.0.0.145");
    let b = inst.mount("b", "127.0.0.146");
    std::fs::create_dir(b.path("theirs")).unwrap();
    for i in 0..300 {
        // Node a creates here (each create is first a lookup that finds nothing)...
        std::fs::write(a.path(&format!("theirs/a{i}")), b"a").unwrap();
        assert!(a.path(&format!("theirs/a{i}")).exists(), "round {i}: own file lost");
        if i % 10 == 0 {
            // ...and every so often node b adds a name, which a must find at once.
            std::fs::write(b.path(&format!("theirs/b{i}")), b"b").unwrap();
            assert_eq!(std::fs::read(a.path(&format!("theirs/b{i}"))).unwrap(), b"b", "round {i}");
        }
        assert!(!a.path(&format!("theirs/none{i}")).exists());
    }
    assert_eq!(std::fs::read_dir(a.path("theirs")).unwrap().count(), 330);
}

/// A mount that a process still uses (a shell's working directory) is not pulled from under
/// it: `surge umount` and `surge down` refuse, naming the process; `--force` detaches it
/// lazily and says so, and the mount's daemon ends once the process lets go.
#[test]
fn a_busy_mount_is_refused_naming_its_holders_unless_forced() {
    let inst = instance("busy", 151);
    let m = inst.mount("a", "127.0.0.151");
    let mut shell = std::process::Command::new("sleep").arg("60").current_dir(&m.dir).spawn().unwrap();
    let dir = m.dir.to_str().unwrap();
    let refused = inst.surge(&["umount", dir]);
    assert!(!refused.status.success(), "a busy mount was unmounted");
    let why = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(why.contains(&format!("pid {}", shell.id())) && why.contains("sleep") && why.contains("--force"), "{why}");
    let down = inst.surge(&["down", &inst.name]);
    assert!(!down.status.success(), "down went ahead over a busy mount");
    assert!(inst.surge(&["status", &inst.name]).status.success(), "the instance must stay up");

    let forced = inst.surge(&["umount", "--force", dir]);
    assert!(forced.status.success(), "{}", surge_tests::text(&forced));
    assert!(String::from_utf8_lossy(&forced.stderr).contains("detached lazily"), "said out loud: {}", surge_tests::text(&forced));
    // ([s]: the shell running pgrep must not match its own command line.)
    let daemon = || sh(&format!("pgrep -f '[s]urge-fuse {} {dir}' || true", inst.name));
    assert!(!daemon().trim().is_empty(), "the daemon serves the detached mount while it is held");
    shell.kill().unwrap();
    shell.wait().unwrap();
    // A hang detector, not a measure: on a loaded 2-core machine the daemon once outlived the
    // 10 s this allowed (one of five fresh-clone CI runs).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !daemon().trim().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the mount daemon outlived the last holder by 30 s: {}", daemon());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!inst.surge(&["umount", dir]).status.success(), "unmounting what is not a mount is an error");
}

/// `surge mount` refuses a mount point that would hide files, or is not a directory, and does
/// not create a chain of missing parents (a typo would otherwise become a directory tree).
#[test]
fn mount_points_are_checked_before_mounting() {
    let inst = instance("mountpoint", 161);
    let dir = surge_tests::scratch("mountpoint");
    std::fs::create_dir_all(dir.join("full")).unwrap();
    std::fs::write(dir.join("full/keep.txt"), b"mine").unwrap();
    std::fs::write(dir.join("file"), b"x").unwrap();
    let refused = |target: &std::path::Path, why: &str| {
        let out = inst.surge(&["mount", &inst.name, target.to_str().unwrap()]);
        assert!(!out.status.success(), "mounted on {}", target.display());
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{}: {}", target.display(), surge_tests::text(&out));
    };
    refused(&dir.join("full"), "not empty");
    refused(&dir.join("file"), "not a directory");
    refused(&dir.join("no/such/parents"), "does not exist");
    assert!(!dir.join("no").exists(), "no parents were created");
    assert_eq!(std::fs::read(dir.join("full/keep.txt")).unwrap(), b"mine");
}

/// A directory of 100,000 files with 255-byte names lists in full through the library and
/// through a mount, `ls -l` included (every page of names fits a frame).
#[test]
fn a_huge_directory_of_long_names_lists_in_full() {
    use surge_client::surge_proto::namespace::Create;
    const FILES: usize = 100_000;
    let inst = instance("huge", 241);
    let name = |i: usize| format!("{i:06}{}", "n".repeat(249));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = inst.client("127.0.0.245");
    runtime.block_on(async {
        let dir = client.mkdir("/big", 0o755).await.unwrap();
        let home = surge_client::surge_proto::ino::home(dir.ino);
        let (uid, gid) = client.identity();
        // 10,000 steps per call: the client splits them into frames whose answers fit.
        for start in (0..FILES).step_by(10_000) {
            let creates: Vec<Create> = (start..start + 10_000)
                .map(|i| Create {
                    parent: dir.ino,
                    name: name(i),
                    mode: 0o644,
                    umask: 0,
                    uid,
                    gid,
                    exclusive: true,
                    open: false,
                    place_on: None,
                })
                .collect();
            for outcome in client.batch(home, creates).await.unwrap() {
                outcome.unwrap();
            }
        }
        let listed = client.readdir("/big").await.unwrap();
        assert_eq!(listed.len(), FILES, "the library lists every entry");
        assert!(listed.iter().enumerate().all(|(i, e)| e.name == name(i)), "in name order, each once");
    });
    let m = inst.mount("huge", "127.0.0.245");
    let lines = sh(&format!("ls -l {} | wc -l", m.path("big").display()));
    assert_eq!(lines.trim(), (FILES + 1).to_string(), "ls -l: a total line and one line per file");
}

/// `surge restart` starts a killed server again on its directory and address: it comes back
/// with its namespace share and data, and a mount that was using it goes on by itself.
#[test]
fn a_restarted_server_serves_its_files_to_a_mount_that_stayed() {
    let inst = instance("restart", 201);
    let m = inst.mount("a", "127.0.0.205");
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::write(m.path("d/kept.txt"), b"kept across the crash").unwrap();
    std::fs::write(m.path("top.bin"), vec![9u8; 3 << 20]).unwrap();
    for index in 0..4 {
        inst.kill_server(index);
    }
    assert!(std::fs::read(m.path("top.bin")).is_err(), "read from killed servers");
    let out = inst.surge(&["restart", &inst.name]);
    assert!(out.status.success(), "{}", surge_tests::text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("restarted server(s) 0, 1, 2, 3"), "{}", surge_tests::text(&out));
    assert_eq!(std::fs::read(m.path("d/kept.txt")).unwrap(), b"kept across the crash");
    assert_eq!(std::fs::read(m.path("top.bin")).unwrap(), vec![9u8; 3 << 20]);
    let again = inst.surge(&["restart", &inst.name]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("every server"), "{}", surge_tests::text(&again));
}

/// The mount daemon serving `m`.
/// What each thread of process `pid` is doing (its name, state and kernel wait channel), for
/// a failure's message when a daemon outlives what it should.
fn threads_of(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return format!("process {pid} is gone") };
    tasks
        .flatten()
        .map(|task| {
            let read = |file: &str| std::fs::read_to_string(task.path().join(file)).unwrap_or_default();
            let state = read("status").lines().find(|l| l.starts_with("State:")).unwrap_or_default().to_string();
            format!("{} {} {} wchan={}\n", task.file_name().to_string_lossy(), read("comm").trim(), state, read("wchan"))
        })
        .collect()
}

fn daemon_of(m: &Mount) -> u32 {
    let wanted = m.dir.to_str().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"surge-fuse")) && args.contains(&wanted.as_bytes())
        })
        .expect("the mount's surge-fuse process")
}

/// Bytes process `pid` has read and written through system calls (/dev/fuse included).
fn bytes_through(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines().filter(|l| l.starts_with("rchar:") || l.starts_with("wchar:")).map(|l| l[6..].trim().parse::<u64>().unwrap()).sum()
}

/// A file held whole by this node's server is passed through to the kernel (FUSE
/// passthrough): its bytes never cross the mount daemon, yet `stat` on the writer's node
/// follows the writes, another node sees everything exactly after close, and the server's
/// books count the bytes.
#[test]
fn passthrough_moves_a_node_local_file_without_the_daemon() {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let inst = Instance::up("passthrough", &["--capacity", "1G", "--hosts", "127.0.0.43"]);
    let (a, b) = (inst.mount("a", "127.0.0.43"), inst.mount("b", "127.0.0.47"));
    let daemon = daemon_of(&a);
    let data = surge_tests::pattern(43, 48 << 20);
    let before = bytes_through(daemon);
    {
        let mut f = std::fs::File::create(a.path("big")).unwrap();
        f.write_all(&data[..32 << 20]).unwrap();
        assert_eq!(std::fs::metadata(a.path("big")).unwrap().len(), 32 << 20, "stat on the writer's node, file still open");
        f.write_all(&data[32 << 20..]).unwrap();
    }
    let through = bytes_through(daemon) - before;
    assert!(through < 4 << 20, "the daemon moved {through} bytes of a 48 MiB passthrough write");
    assert!(std::fs::read(b.path("big")).unwrap() == data, "another node reads what was written, after close");
    let before = bytes_through(daemon);
    assert!(std::fs::read(a.path("big")).unwrap() == data);
    assert!(bytes_through(daemon) - before < 4 << 20, "reads pass through too");
    let used = |m: &Mount| {
        let out = sh(&format!("stat -f -c '%b %f %S' {}", m.dir.display()));
        let v: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
        (v[0] - v[1]) * v[2]
    };
    assert!(used(&b) >= 48 << 20, "the server counts the passthrough bytes: {} used", used(&b));

    // A truncate and a rewrite through a passthrough handle, seen from the other node.
    {
        let f = std::fs::OpenOptions::new().write(true).open(a.path("big")).unwrap();
        f.set_len(10 << 20).unwrap();
        f.write_at(b"rewritten", 5 << 20).unwrap();
    }
    let seen = std::fs::read(b.path("big")).unwrap();
    assert_eq!(seen.len(), 10 << 20);
    assert_eq!(&seen[5 << 20..(5 << 20) + 9], b"rewritten");
    assert!(seen[..5 << 20] == data[..5 << 20]);
    // Times stay exact: a time set after writing wins over the close.
    sh(&format!("touch -d '2001-02-03 04:05:06' {}", a.path("big").display()));
    assert_eq!(sh(&format!("stat -c %Y {}", b.path("big").display())).trim(), sh("date -d '2001-02-03 04:05:06' +%s").trim());
}

/// Extended attributes and POSIX ACLs through the mount, across nodes: set on one node, read
/// and listed on the other; XATTR_CREATE/REPLACE answered as the kernel's; an ACL entry
/// granting a user read access lets that user (nobody) read a 0600 file on the other node,
/// where the mode alone would refuse; a default ACL is inherited by a file made below it.
#[test]
fn xattrs_and_acls_cross_nodes() {
    let inst = instance("xattrs", 225);
    let (a, b) = two_nodes(&inst, 225);
    std::fs::set_permissions(&a.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(a.path("f"), b"secret").unwrap();
    std::fs::set_permissions(a.path("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let py = |m: &Mount, code: &str| sh(&format!("cd {} && python3 -c '{code}'", m.dir.display()));
    py(&a, "import os; os.setxattr(\"f\", \"user.run\", b\"42\"); os.setxattr(\"f\", \"trusted.t\", b\"x\")");
    assert_eq!(py(&b, "import os; print(os.getxattr(\"f\", \"user.run\").decode())").trim(), "42");
    assert_eq!(py(&b, "import os; print(sorted(os.listxattr(\"f\")))").trim(), "['trusted.t', 'user.run']");
    let flags = py(
        &b,
        "import os, errno\n\
         def err(f):\n    try: f(); return \"ok\"\n    except OSError as e: return errno.errorcode[e.errno]\n\
         print(err(lambda: os.setxattr(\"f\", \"user.run\", b\"1\", os.XATTR_CREATE)), \
         err(lambda: os.setxattr(\"f\", \"user.new\", b\"1\", os.XATTR_REPLACE)), \
         err(lambda: os.getxattr(\"f\", \"user.none\")), err(lambda: os.removexattr(\"f\", \"user.run\")))",
    );
    assert_eq!(flags.trim(), "EEXIST ENODATA ENODATA ok");
    let nobody_reads = |m: &Mount| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
            .arg(m.path("f"))
            .output()
            .unwrap();
        out.status.success()
    };
    assert!(!nobody_reads(&b), "mode 0600 keeps nobody out");
    // user::rw- user:65534:r-- group::--- mask::r-- other::---
    let acl = "import os, struct; e=[(1,6,0xffffffff),(2,4,65534),(4,0,0xffffffff),(0x10,4,0xffffffff),(0x20,0,0xffffffff)]; \
               os.setxattr(\"f\", \"system.posix_acl_access\", struct.pack(\"<I\",2)+b\"\".join(struct.pack(\"<HHI\",*x) for x in e))";
    py(&a, acl);
    assert!(nobody_reads(&b), "the ACL lets nobody read, on the other node");
    assert_eq!(sh(&format!("stat -c %a {}", b.path("f").display())).trim(), "640", "the mask shows as the group bits");
    // A default ACL on a directory: a file made in it gets it, whatever the umask.
    std::fs::create_dir(a.path("d")).unwrap();
    let default_acl = acl.replace("\"f\"", "\"d\"").replace("posix_acl_access", "posix_acl_default");
    py(&a, &default_acl);
    sh(&format!("cd {} && umask 077 && echo x > d/g", b.dir.display()));
    assert_eq!(
        py(&a, "import os; print(len(os.getxattr(\"d/g\", \"system.posix_acl_access\")))").trim(),
        "44",
        "d/g inherited the 5-entry ACL"
    );
}

/// Bytes in the data directory of each server of `inst`, in server order.
fn data_per_server(inst: &Instance) -> Vec<u64> {
    let servers = inst.descriptor()["servers"].as_array().unwrap().clone();
    servers
        .iter()
        .map(|s| {
            let data = std::path::Path::new(s["root"].as_str().unwrap()).join("data");
            sh(&format!("du -s --block-size=1 {}", data.display())).split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

/// A striped instance whose files are node-local (`surge up --layout node-local`): each
/// node's files land whole on its own server and are passed through to the kernel there,
/// the other node reads them exactly over the network, and a directory set back to striped
/// (`surge layout`) puts its files on every server, through the daemon.
#[test]
fn node_local_files_stay_on_their_node_and_pass_through() {
    use std::io::Write;
    let hosts = "127.0.0.52,127.0.0.53,127.0.0.54,127.0.0.55";
    let inst = Instance::up("nodelocal-fuse", &["--capacity", "2G", "--hosts", hosts, "--layout", "node-local"]);
    let (a, b) = (inst.mount("a", "127.0.0.52"), inst.mount("b", "127.0.0.54"));
    let shown = inst.surge(&["layout", a.dir.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&shown.stdout).trim(), format!("{}: node-local", a.dir.display()));

    let data = surge_tests::pattern(52, 24 << 20);
    let before = data_per_server(&inst);
    for (m, name) in [(&a, "from-a"), (&b, "from-b")] {
        let daemon = daemon_of(m);
        let moved = bytes_through(daemon);
        std::fs::File::create(m.path(name)).unwrap().write_all(&data).unwrap();
        let through = bytes_through(daemon) - moved;
        assert!(through < 4 << 20, "{name}: the daemon moved {through} bytes of a 24 MiB node-local write");
    }
    let grew: Vec<u64> = data_per_server(&inst).iter().zip(&before).map(|(now, then)| (now - then) >> 20).collect();
    assert_eq!(grew, [24, 0, 24, 0], "each file whole on its writer's server (MiB per server)");
    assert!(std::fs::read(b.path("from-a")).unwrap() == data, "b reads a's file over the network");
    assert!(std::fs::read(a.path("from-b")).unwrap() == data, "a reads b's file over the network");
    // Removal frees the creator's server; empty files made under passthrough (their data
    // file made at open) leave nothing behind either.
    let data_files = |server: usize| {
        let root = inst.descriptor()["servers"][server]["root"].as_str().unwrap().to_string();
        std::fs::read_dir(std::path::Path::new(&root).join("data")).unwrap().count()
    };
    let files_before = data_files(0);
    for i in 0..20 {
        std::fs::File::create(a.path(&format!("empty{i}"))).unwrap();
        std::fs::remove_file(a.path(&format!("empty{i}"))).unwrap();
    }
    std::fs::remove_file(b.path("from-a")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200)); // the purges nobody waits for
    assert_eq!(data_files(0), files_before - 1, "no data file left by the empty files, from-a's gone");
    assert_eq!(data_per_server(&inst)[0] >> 20, before[0] >> 20);

    std::fs::create_dir(a.path("wide")).unwrap();
    let set = inst.surge(&["layout", a.path("wide").to_str().unwrap(), "striped"]);
    assert!(set.status.success(), "{}", surge_tests::text(&set));
    let bad = inst.surge(&["layout", a.path("wide").to_str().unwrap(), "local"]);
    assert!(!bad.status.success() && surge_tests::text(&bad).contains("striped, node-local"), "{}", surge_tests::text(&bad));
    let before = data_per_server(&inst);
    std::fs::write(a.path("wide/striped"), &data).unwrap();
    let grew: Vec<u64> = data_per_server(&inst).iter().zip(&before).map(|(now, then)| now - then).collect();
    assert!(grew.iter().all(|&g| g >= 4 << 20), "a striped file's chunks on every server: {grew:?}");
    assert!(std::fs::read(b.path("wide/striped")).unwrap() == data);
}

/// fallocate(1) and lseek's SEEK_DATA/SEEK_HOLE through the mount, across nodes: a hole
/// punched on one node reads as zeros on the other, which finds data and holes where they are
/// (the kernel's generic answer would call the whole file data); posix_fallocate grows a file.
/// `st_blocks` counts what the servers hold, seen alike from both nodes: holes are not
/// counted, space set aside is, and `du` tells a sparse file from a dense one.
#[test]
fn holes_punched_and_found_through_the_mount() {
    let inst = instance("holes", 232);
    let (a, b) = two_nodes(&inst, 232);
    let file = a.path("sparse");
    // 4 MiB of data, then punch 1-3 MiB: two chunks on two servers.
    std::fs::write(&file, vec![9u8; 4 << 20]).unwrap();
    sh(&format!("fallocate --punch-hole --offset 1MiB --length 2MiB {}", file.display()));
    let seen = std::fs::read(b.path("sparse")).unwrap();
    assert_eq!(seen.len(), 4 << 20, "punching keeps the size");
    assert_blocks(&[&a, &b], "sparse", 2 << 20, "2 of 4 MiB left after the punch");
    assert!(seen[1 << 20..3 << 20].iter().all(|&x| x == 0) && seen[..1 << 20].iter().all(|&x| x == 9));
    assert!(seen[3 << 20..].iter().all(|&x| x == 9));
    let seek = |m: &Mount| {
        let code = "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); \
                    print(os.lseek(fd, 0, os.SEEK_HOLE), os.lseek(fd, 1<<20, os.SEEK_DATA), os.lseek(fd, 3<<20, os.SEEK_HOLE))";
        sh(&format!("python3 -c '{code}' {}", m.path("sparse").display()))
    };
    let expected = format!("{} {} {}", 1 << 20, 3 << 20, 4 << 20);
    assert_eq!(seek(&a).trim(), expected);
    assert_eq!(seek(&b).trim(), expected, "the other node finds the same holes");
    // cp --sparse=always keeps the hole: the copy holds less than its size.
    sh(&format!("cp --sparse=always {} {}", b.path("sparse").display(), b.path("copy").display()));
    assert!(std::fs::read(a.path("copy")).unwrap() == seen);
    assert_blocks(&[&a, &b], "copy", 2 << 20, "cp --sparse=always leaves the hole out");
    sh(&format!("python3 -c 'import os; fd=os.open(\"{}\", os.O_RDWR); os.posix_fallocate(fd, 0, 6<<20)'", a.path("sparse").display()));
    // An open is exact across nodes (close-to-open); a bare stat may race the size's notice.
    let grown = std::fs::File::open(b.path("sparse")).unwrap().metadata().unwrap().len();
    assert_eq!(grown, 6 << 20, "posix_fallocate grows the file");
    assert_blocks(&[&b, &a], "sparse", 6 << 20, "posix_fallocate sets the whole range aside");
    // Space set aside past the end counts without changing the size or times.
    sh(&format!("fallocate --keep-size --offset 6MiB --length 2MiB {}", b.path("sparse").display()));
    assert_blocks(&[&a, &b], "sparse", 8 << 20, "fallocate --keep-size counts");
    // A 1 GiB file with 1 MiB written in its middle, on the other node.
    sh(&format!(
        "truncate -s 1G {0} && dd if=/dev/urandom of={0} bs=1M count=1 seek=100 conv=notrunc status=none",
        b.path("big").display()
    ));
    assert_blocks(&[&a, &b], "big", 1 << 20, "a file of 1 GiB with 1 MiB written");
    let du = sh(&format!("du -k {} {}", a.path("big").display(), a.path("copy").display()));
    assert_eq!(du.split_whitespace().step_by(2).collect::<Vec<_>>(), ["1024", "2048"], "du: {du}");
    // The figures are measured again after a restart of every server, which keeps none (a
    // client of its own, whose answer no kernel cache holds).
    for index in 0..4 {
        inst.kill_server(index);
    }
    let restarted = inst.surge(&["restart", &inst.name]);
    assert!(restarted.status.success(), "{}", surge_tests::text(&restarted));
    let stat = inst.surge(&["stat", "/big", "--json"]);
    let stat: serde_json::Value = serde_json::from_slice(&stat.stdout).unwrap_or_else(|_| panic!("{}", surge_tests::text(&stat)));
    assert!((2048..=2048 + 64).contains(&stat["blocks"].as_u64().unwrap()), "after a restart: {stat}");
}

/// Asserts that `name` holds `bytes` on the servers as each of `mounts` sees it (`st_blocks`;
/// a data file's own bookkeeping may add a few blocks). Another node's kernel sees the change
/// once the home's notice has arrived (attribute notices are not acknowledged, see
/// docs/consistency.md 7): its figure may take a moment.
fn assert_blocks(mounts: &[&Mount], name: &str, bytes: u64, what: &str) {
    use std::os::unix::fs::MetadataExt;
    for m in mounts {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let blocks = std::fs::metadata(m.path(name)).unwrap().blocks();
            if (bytes / 512..=bytes / 512 + 64).contains(&blocks) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: {name} has {blocks} blocks on {}", m.dir.display());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// A node that reopens a file nobody changed since it wrote or read it keeps the pages its
/// kernel holds (they are read again without the mount, the first read after writing too),
/// and one whose file another node rewrote in place — same size, the old mtime set back —
/// drops them and reads the new bytes (ctime moved).
#[test]
fn reopened_files_keep_their_pages_until_another_node_changes_them() {
    let inst = instance("keepcache", 246);
    let (a, b) = two_nodes(&inst, 246);
    let old = surge_tests::pattern(246, 32 << 20);
    std::fs::write(a.path("data"), &old).unwrap();
    let daemon = daemon_of(&a);
    for read in ["first read after writing", "second read"] {
        let before = bytes_through(daemon);
        assert!(std::fs::read(a.path("data")).unwrap() == old);
        let moved = bytes_through(daemon) - before;
        assert!(moved < 1 << 20, "{read}: the written pages were kept, yet the mount moved {moved} bytes for 32 MiB");
    }

    let mtime = sh(&format!("stat -c %y {}", a.path("data").display()));
    let new = surge_tests::pattern(247, 32 << 20);
    std::fs::write(b.path("data"), &new).unwrap();
    sh(&format!("touch -d '{}' {}", mtime.trim(), b.path("data").display()));
    assert!(std::fs::read(a.path("data")).unwrap() == new, "a reads b's bytes, not its kept pages");
    let before = bytes_through(daemon);
    assert!(std::fs::read(a.path("data")).unwrap() == new);
    assert!(bytes_through(daemon) - before < 1 << 20, "and keeps those in turn");
}

/// Two servers on `127.0.5.{base}` and `base + 1`; mounts there ("a", holding delegations and
/// logging them) and on `base + 4` ("b", a node of its own).
fn delegating_nodes(inst: &Instance, base: u8) -> (Mount<'_>, Mount<'_>) {
    let log = "warn,surge_client::delegation=info,surge_client::delegation::holder=debug";
    let a = inst.mount_with("a", &format!("127.0.5.{base}"), &[("SURGE_LOG", log)]);
    (a, inst.mount("b", &format!("127.0.5.{}", base + 4)))
}

fn delegating_instance(name: &str, base: u8) -> Instance {
    Instance::up(name, &["--capacity", "4G", "--hosts", &format!("127.0.5.{base},127.0.5.{}", base + 1)])
}

/// How many delegations the mounts of `inst` were granted (their log says).
fn delegations_granted(inst: &Instance) -> usize {
    let log = inst.mount_log();
    log.lines().filter(|l| l.contains("surge_client::delegation::holder: delegated")).count()
}

/// Makes 20 empty files, warm00 to warm19, in `dir` (enough creates for the mount to ask for
/// it) and waits until a mount of `inst` holds a delegation. Answers their names.
fn warm_until_held(inst: &Instance, dir: &std::path::Path) -> Vec<String> {
    warm_until_held_beyond(inst, dir, 0)
}

/// Waits (up to 5 s) until a mount of `inst` holds a delegation: it asks in the background.
fn await_a_grant(inst: &Instance) {
    await_grants_beyond(inst, 0);
}

/// Waits (up to 5 s) until the mounts of `inst` have logged more than `earlier` grants.
fn await_grants_beyond(inst: &Instance, earlier: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while delegations_granted(inst) <= earlier {
        assert!(std::time::Instant::now() < deadline, "no delegation granted beyond the first {earlier}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`warm_until_held`] for a test whose mounts have logged `earlier` grants already.
fn warm_until_held_beyond(inst: &Instance, dir: &std::path::Path, earlier: usize) -> Vec<String> {
    let warm: Vec<String> = (0..20).map(|i| format!("warm{i:02}")).collect();
    for name in &warm {
        std::fs::write(dir.join(name), b"").unwrap();
    }
    await_grants_beyond(inst, earlier);
    warm
}

fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// A mount creating files in a directory it made holds the directory under a delegation and
/// answers the creates itself; another node listing it at any moment sees a prefix of those
/// creates, in order, including every create that had returned, with its bytes; afterwards
/// both nodes create there. (Once the other node holds names of the directory, the home
/// grants it to nobody: each round takes a fresh directory.)
#[test]
fn creates_under_a_delegation_reach_another_node_in_order_and_at_once() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let inst = delegating_instance("delegated", 41);
    let (a, b) = delegating_nodes(&inst, 41);
    const ROUNDS: usize = 5;
    const FILES: usize = 400;
    for round in 0..ROUNDS {
        let dir = format!("out{round}");
        std::fs::create_dir(a.path(&dir)).unwrap();
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..FILES {
                    let content = if i % 2 == 0 { format!("{i}") } else { String::new() };
                    std::fs::write(a.path(&format!("{dir}/f{i:04}")), content).unwrap();
                    done.store(i + 1, SeqCst);
                }
            });
            // Look once the directory is held, at a moment that differs from round to round.
            while delegations_granted(&inst) <= round && done.load(SeqCst) < FILES {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(round as u64 * 3));
            loop {
                let returned = done.load(SeqCst);
                let names = names_in(&b.path(&dir));
                let prefix: Vec<String> = (0..names.len()).map(|i| format!("f{i:04}")).collect();
                assert_eq!(names, prefix, "round {round}: not a prefix of a's creates");
                assert!(names.len() >= returned, "round {round}: {} names, {returned} creates had returned", names.len());
                if let Some(last) = returned.checked_sub(1).map(|i| i & !1) {
                    assert_eq!(std::fs::read_to_string(b.path(&format!("{dir}/f{last:04}"))).unwrap(), format!("{last}"));
                }
                if returned == FILES {
                    break;
                }
            }
        });
        assert!(delegations_granted(&inst) > round, "round {round}: the directory was never delegated");
        assert_eq!(names_in(&b.path(&dir)).len(), FILES);
    }
    for i in 0..50 {
        std::fs::write(a.path(&format!("out0/a{i}")), b"a").unwrap();
        std::fs::write(b.path(&format!("out0/b{i}")), b"b").unwrap();
    }
    assert_eq!(names_in(&a.path("out0")), names_in(&b.path("out0")));
    assert_eq!(names_in(&a.path("out0")).len(), FILES + 100);
}

/// Files made under a delegation behave as any file, for the node that made them and for
/// another: fsync publishes before close; unlinked while open, a file keeps its bytes for
/// its descriptor and is gone everywhere after; renames, links, truncation, explicit times
/// and unlinks of files made before the delegation all keep their meaning.
#[test]
fn files_made_under_a_delegation_behave_as_any_file() {
    use std::io::{Read, Seek, Write};
    let inst = delegating_instance("delegatedfiles", 51);
    let (a, b) = delegating_nodes(&inst, 51);
    std::fs::create_dir(a.path("d")).unwrap();
    std::fs::write(a.path("d/before"), b"made before").unwrap();
    let warm = warm_until_held(&inst, &a.path("d"));

    let mut synced = std::fs::File::create(a.path("d/synced")).unwrap();
    synced.write_all(b"durable").unwrap();
    synced.sync_all().unwrap();
    assert_eq!(std::fs::read(b.path("d/synced")).unwrap(), b"durable", "fsync publishes, close has not happened");
    drop(synced);

    let mut scratch = std::fs::OpenOptions::new().create_new(true).read(true).write(true).open(a.path("d/scratch")).unwrap();
    std::fs::remove_file(a.path("d/scratch")).unwrap();
    scratch.write_all(&[7u8; 100_000]).unwrap();
    scratch.rewind().unwrap();
    let mut back = Vec::new();
    scratch.read_to_end(&mut back).unwrap();
    assert_eq!(back, vec![7u8; 100_000], "an unlinked open file keeps its bytes");
    assert!(!b.path("d/scratch").exists());
    drop(scratch);

    std::fs::write(a.path("d/tmp"), b"checkpoint").unwrap();
    std::fs::rename(a.path("d/tmp"), a.path("d/ckpt")).unwrap();
    std::fs::hard_link(a.path("d/ckpt"), a.path("d/ckpt.link")).unwrap();
    std::fs::write(a.path("d/cut"), b"0123456789").unwrap();
    std::fs::OpenOptions::new().write(true).open(a.path("d/cut")).unwrap().set_len(4).unwrap();
    std::fs::write(a.path("d/old"), b"old").unwrap();
    sh(&format!("touch -d '2001-02-03 04:05:06' {}", a.path("d/old").display()));
    std::fs::remove_file(a.path("d/before")).unwrap();
    std::fs::remove_file(a.path("d/warm03")).unwrap();

    assert_eq!(std::fs::read(b.path("d/ckpt")).unwrap(), b"checkpoint");
    assert!(!b.path("d/tmp").exists());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(b.path("d/ckpt.link")).unwrap().nlink(), 2);
    assert_eq!(std::fs::read(b.path("d/cut")).unwrap(), b"0123");
    assert_eq!(std::fs::metadata(b.path("d/old")).unwrap().mtime(), sh("date -d '2001-02-03 04:05:06' +%s").trim().parse::<i64>().unwrap());
    let mut expected: Vec<String> = ["ckpt", "ckpt.link", "cut", "old", "synced"].map(String::from).to_vec();
    expected.extend(warm.into_iter().filter(|name| name != "warm03"));
    assert_eq!(names_in(&b.path("d")), expected);
    assert_eq!(names_in(&a.path("d")), expected);
    // Created with the caller's mode less its umask.
    assert_eq!(std::fs::metadata(b.path("d/synced")).unwrap().mode() & 0o777, 0o644);
}

/// Directories made under a delegation (homed with their parent, answered by the mount)
/// behave as any directory, for the node that made them and for another: modes, link counts
/// of the parent and the new directory, files made in them, an rmdir of an empty one answered
/// by the mount and of a full one refused, renames, and a name that exists.
#[test]
fn directories_made_under_a_delegation_behave_as_any_directory() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let inst = delegating_instance("delegateddirs", 111);
    let (a, b) = delegating_nodes(&inst, 111);
    std::fs::create_dir(a.path("d")).unwrap();
    let warm = warm_until_held(&inst, &a.path("d"));
    let sub = |node: &Mount, i: usize| node.path(&format!("d/sub{i:02}"));
    let errno = |r: std::io::Result<()>| r.unwrap_err().raw_os_error().unwrap();
    for i in 0..50 {
        std::fs::DirBuilder::new().mode(0o750).create(sub(&a, i)).unwrap();
    }
    // Placed as any directory is, by the hash of parent and name, not all with their parent:
    // both servers home some of them.
    let homes: std::collections::BTreeSet<usize> =
        (0..50).map(|i| surge_client::surge_proto::ino::home(std::fs::metadata(sub(&a, i)).unwrap().ino())).collect();
    assert_eq!(homes.len(), 2, "the directories made under a delegation are homed on {homes:?}");
    assert_eq!(errno(std::fs::create_dir(sub(&a, 7))), libc::EEXIST);
    std::fs::write(sub(&a, 0).join("f"), b"in a new directory").unwrap();
    std::fs::write(sub(&a, 1).join("g"), b"gone soon").unwrap();
    std::fs::remove_file(sub(&a, 1).join("g")).unwrap();
    for i in (40..50).chain([1]) {
        std::fs::remove_dir(sub(&a, i)).unwrap_or_else(|e| panic!("rmdir sub{i:02}: {e}"));
    }
    assert_eq!(errno(std::fs::remove_dir(sub(&a, 0))), libc::ENOTEMPTY);
    std::fs::rename(sub(&a, 39), a.path("d/moved")).unwrap();
    std::fs::remove_dir(sub(&a, 38)).unwrap();

    // 50 made, 12 removed: 38 left, seen alike from both nodes.
    let mut expected: Vec<String> = (0..38).filter(|&i| i != 1).map(|i| format!("sub{i:02}")).collect();
    expected.push("moved".into());
    expected.extend(warm);
    expected.sort();
    assert_eq!(names_in(&b.path("d")), expected);
    assert_eq!(names_in(&a.path("d")), expected);
    for node in [&a, &b] {
        assert_eq!(std::fs::metadata(node.path("d")).unwrap().nlink(), 2 + 38, "the parent's link count");
        let made = std::fs::metadata(sub(node, 2)).unwrap();
        assert!(made.is_dir());
        assert_eq!((made.mode() & 0o7777, made.nlink()), (0o750, 2));
    }
    assert_eq!(std::fs::read(sub(&b, 0).join("f")).unwrap(), b"in a new directory");
    std::fs::write(sub(&b, 2).join("from-b"), b"b").unwrap();
    assert_eq!(std::fs::read(sub(&a, 2).join("from-b")).unwrap(), b"b");
    assert!(b.path("d/moved").is_dir());
}

/// Renames within a directory held under a delegation (answered by the mount where it knows
/// both names) behave as any rename, for the node that made them and for another: a
/// checkpoint written as a temporary and renamed over the last one, a file renamed while
/// open, directories moved, one replacing an empty one, rename(2)'s refusals, and a rotation
/// of names as mdtest's rename phase makes.
#[test]
fn renames_in_a_delegated_directory_behave_as_any_rename() {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let inst = delegating_instance("delegatedrename", 131);
    let (a, b) = delegating_nodes(&inst, 131);
    std::fs::create_dir(a.path("d")).unwrap();
    let warm = warm_until_held(&inst, &a.path("d"));
    let at = |node: &Mount, name: &str| node.path(&format!("d/{name}"));
    let rename = |from: &str, to: &str, flags: u32| {
        let (from, to) = (std::ffi::CString::new(at(&a, from).into_os_string().into_encoded_bytes()).unwrap(), {
            std::ffi::CString::new(at(&a, to).into_os_string().into_encoded_bytes()).unwrap()
        });
        // SAFETY: two NUL-terminated paths that outlive the call.
        match unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), flags) } {
            0 => 0,
            _ => std::io::Error::last_os_error().raw_os_error().unwrap(),
        }
    };
    for step in 0..5 {
        std::fs::write(at(&a, "ckpt.tmp"), format!("step {step}")).unwrap();
        assert_eq!(rename("ckpt.tmp", "ckpt", 0), 0);
    }
    let mut open = std::fs::File::create(at(&a, "open")).unwrap();
    open.write_all(b"first ").unwrap();
    assert_eq!(rename("open", "renamed-open", 0), 0);
    open.write_all(b"second").unwrap();
    drop(open);
    // A file replaced while its creator holds it open keeps its bytes for the handle.
    let mut victim = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(at(&a, "victim")).unwrap();
    victim.write_all(b"still mine").unwrap();
    std::fs::write(at(&a, "winner"), b"won").unwrap();
    assert_eq!(rename("winner", "victim", 0), 0);
    victim.write_all(b"!").unwrap();
    let mut kept = String::new();
    std::io::Seek::rewind(&mut victim).unwrap();
    std::io::Read::read_to_string(&mut victim, &mut kept).unwrap();
    assert_eq!(kept, "still mine!");
    drop(victim);
    for i in 0..10 {
        std::fs::create_dir(at(&a, &format!("dir{i}"))).unwrap();
    }
    std::fs::write(at(&a, "dir9/inside"), b"x").unwrap();
    assert_eq!(rename("dir0", "moved0", 0), 0);
    assert_eq!(rename("dir1", "dir2", 0), 0, "a directory over an empty one");
    assert_eq!(rename("warm00", "dir4", 0), libc::EISDIR);
    assert_eq!(rename("dir4", "warm01", 0), libc::ENOTDIR);
    assert_eq!(rename("warm02", "warm03", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(rename("warm02", "fresh", libc::RENAME_NOREPLACE), 0);
    assert_eq!(rename("nothing", "fresh2", 0), libc::ENOENT);
    std::fs::remove_dir(at(&a, "moved0")).unwrap();
    // mdtest's rotation: dir5 -> dir5-XX, dir6 -> dir5, dir5-XX -> dir6.
    std::fs::write(at(&a, "dir6/mark"), b"was dir6").unwrap();
    for (from, to) in [("dir5", "dir5-XX"), ("dir6", "dir5"), ("dir5-XX", "dir6")] {
        assert_eq!(rename(from, to, 0), 0, "{from} -> {to}");
    }
    // Last: over a directory that is not empty, the ordinary path, whose failure gives the
    // delegation back (its outcome is not taken as known).
    assert_eq!(rename("dir3", "dir9", 0), libc::ENOTEMPTY);

    let mut expected: Vec<String> =
        ["ckpt", "renamed-open", "victim", "fresh", "dir2", "dir3", "dir4", "dir5", "dir6", "dir7", "dir8", "dir9"]
            .iter()
            .map(|s| s.to_string())
            .chain(warm.into_iter().filter(|name| name != "warm02"))
            .collect();
    expected.sort();
    assert_eq!(names_in(&b.path("d")), expected);
    assert_eq!(names_in(&a.path("d")), expected);
    for node in [&a, &b] {
        assert_eq!(std::fs::read(at(node, "ckpt")).unwrap(), b"step 4");
        assert_eq!(std::fs::read(at(node, "renamed-open")).unwrap(), b"first second");
        assert_eq!(std::fs::read(at(node, "victim")).unwrap(), b"won");
        assert_eq!(std::fs::read(at(node, "dir5/mark")).unwrap(), b"was dir6");
        assert_eq!(std::fs::read(at(node, "dir9/inside")).unwrap(), b"x");
        assert_eq!(std::fs::metadata(node.path("d")).unwrap().nlink(), 2 + 8, "the parent's link count");
    }
}

/// A mount killed while it holds a delegation loses at most the steps it had not written
/// back: the directory is a prefix of its creates, and holds every create made before an
/// fsync of the directory.
#[test]
fn a_killed_holder_leaves_a_prefix_of_its_creates_and_every_synced_one() {
    let inst = delegating_instance("delegatedkill", 61);
    let (a, b) = delegating_nodes(&inst, 61);
    std::fs::create_dir(a.path("d")).unwrap();
    for i in 0..300 {
        std::fs::write(a.path(&format!("d/f{i:04}")), b"").unwrap();
    }
    std::fs::File::open(a.path("d")).unwrap().sync_all().unwrap();
    // The grant comes in the background: the next creates are made under it.
    await_a_grant(&inst);
    for i in 300..600 {
        std::fs::write(a.path(&format!("d/f{i:04}")), b"").unwrap();
    }
    sh(&format!("kill -9 {}", daemon_of(&a)));
    let names = names_in(&b.path("d"));
    assert!(names.len() >= 300, "only {} names: creates synced before the kill were lost", names.len());
    let prefix: Vec<String> = (0..names.len()).map(|i| format!("f{i:04}")).collect();
    assert_eq!(names, prefix, "not a prefix of the killed holder's creates");
    // The directory is usable from the other node at once (the holder's connection ended).
    std::fs::write(b.path("d/after"), b"b").unwrap();
    sh(&format!("umount -l {} || true", a.dir.display()));
}

/// A clean stop of a directory's home (SIGTERM: a planned restart) first recalls the
/// delegations it granted and waits for their write-backs: every create the holder answered
/// right up to the stop is there after the restart, seen from another node, and the holder
/// creates in the directory again. (Before, the creates of the holder's last write-back
/// interval were lost.)
#[test]
fn a_home_stopped_cleanly_takes_its_delegations_back_and_loses_no_create() {
    let inst = delegating_instance("delegatedstop", 31);
    let (a, b) = delegating_nodes(&inst, 31);
    let restarted = every_create_survives_a_restart_of_both_servers(&inst, &a, &b, libc::SIGTERM);
    drop((a, b));
    drop(inst);
    for mut server in restarted {
        server.wait().unwrap();
    }
}

/// Both servers killed (SIGKILL) while the holder's last creates wait in its log or in a
/// write-back nobody answered: the holder keeps them, reclaims the delegation from the
/// restarted home, learns which steps the home applied and writes back the rest. Every create
/// it answered is there after the restart, once. (Before, the creates the home had not
/// applied were lost with the delegation.)
#[test]
fn a_home_killed_gets_every_create_its_holder_answered_once_it_is_back() {
    let inst = delegating_instance("delegatedhomekill", 101);
    let (a, b) = delegating_nodes(&inst, 101);
    let restarted = every_create_survives_a_restart_of_both_servers(&inst, &a, &b, libc::SIGKILL);
    let log = inst.mount_log();
    assert!(log.contains("a delegation reclaimed"), "the holder never reclaimed its delegation:\n{log}");
    drop((a, b));
    drop(inst);
    for mut server in restarted {
        server.wait().unwrap();
    }
}

/// A mount unmounted while both servers are down, holding creates its delegation answered and
/// had not written back: `surge umount` returns at once, and the daemon writes them back once
/// the home is back within its reclaim time, then ends; when the home does not come back in
/// that time, it ends all the same and says so in the log.
#[test]
fn an_unmount_while_the_home_is_down_writes_back_when_it_returns_and_ends_when_it_does_not() {
    let inst = delegating_instance("delegatedunmount", 141);
    let log = "warn,surge_client::delegation=info,surge_client::delegation::holder=debug";
    let reclaim_secs = 4;
    let env = [("SURGE_LOG", log), ("SURGE_RECLAIM_SECS", "4")];
    let b = inst.mount("b", "127.0.5.145");
    let mut restarted = Vec::new();
    for (round, home_returns) in [(0, true), (1, false)] {
        let a = inst.mount_with(&format!("a{round}"), "127.0.5.141", &env);
        let dir = format!("d{round}");
        std::fs::create_dir(a.path(&dir)).unwrap();
        // The mount asks for its delegation in the background: the 400 creates are made once
        // it holds one, so that they are the delegation's to write back, however slow the
        // machine.
        let warm = warm_until_held_beyond(&inst, &a.path(&dir), round);
        for i in 0..400 {
            std::fs::write(a.path(&format!("{dir}/f{i:04}")), b"").unwrap();
        }
        for server in 0..2 {
            inst.kill_server(server);
        }
        let daemon = daemon_of(&a);
        let unmounted = std::time::Instant::now();
        let out = inst.surge(&["umount", a.dir.to_str().unwrap()]);
        assert!(out.status.success(), "umount: {}", surge_tests::text(&out));
        // The home is down: the daemon cannot have written back yet, so it still runs unless
        // the unmount waited for it.
        assert!(std::path::Path::new(&format!("/proc/{daemon}")).exists(), "umount waited for the daemon");
        if home_returns {
            restarted.extend((0..2).map(|server| inst.restart_server(server)));
        }
        while std::path::Path::new(&format!("/proc/{daemon}")).exists() {
            let limit = Duration::from_secs(reclaim_secs + 15);
            assert!(
                unmounted.elapsed() < limit,
                "the daemon still runs {limit:?} after the unmount; its threads:\n{}\n{}",
                threads_of(daemon),
                inst.mount_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if home_returns {
            let expected: Vec<String> = (0..400).map(|i| format!("f{i:04}")).chain(warm).collect();
            assert_eq!(names_in(&b.path(&dir)), expected, "creates lost:\n{}", inst.mount_log());
        } else {
            assert!(unmounted.elapsed() >= Duration::from_secs(reclaim_secs), "gave up before its reclaim time");
            let told = inst.mount_log().lines().any(|l| l.contains("of a delegation not") && l.contains("its home was away"));
            assert!(told, "the daemon did not say what it gave up:\n{}", inst.mount_log());
            restarted.extend((0..2).map(|server| inst.restart_server(server)));
        }
    }
    drop(b);
    drop(inst);
    for mut server in restarted {
        server.wait().unwrap();
    }
}

/// `a` makes 400 files in a directory it holds under a delegation; right after the last,
/// both servers get `signal` at once and are restarted; `b` must then list all 400, and both
/// nodes go on creating there. The restarted servers, for the caller to wait for once the
/// instance is down.
fn every_create_survives_a_restart_of_both_servers(inst: &Instance, a: &Mount, b: &Mount, signal: i32) -> Vec<std::process::Child> {
    std::fs::create_dir(a.path("d")).unwrap();
    let warm = warm_until_held(inst, &a.path("d"));
    for i in 0..400 {
        std::fs::write(a.path(&format!("d/f{i:04}")), b"").unwrap();
    }
    // At once, while the last creates wait in the holder's log.
    let pids: Vec<i32> = (0..2).map(|index| inst.signal_server(index, signal)).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while pids.iter().any(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists()) {
        assert!(std::time::Instant::now() < deadline, "servers still running 20 s after signal {signal}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let restarted: Vec<_> = (0..2).map(|index| inst.restart_server(index)).collect();
    let expected: Vec<String> = (0..400).map(|i| format!("f{i:04}")).chain(warm).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let names = loop {
        match std::fs::read_dir(b.path("d")) {
            Ok(_) => break names_in(&b.path("d")),
            Err(e) if std::time::Instant::now() > deadline => panic!("d not listed after the restart: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    if names.len() != expected.len() {
        // What the holder did about it (lost its home? reclaimed? with how many steps?), for a
        // failure that does not come back on demand.
        let log = inst.mount_log();
        let delegation_lines: Vec<&str> = log.lines().filter(|l| l.contains("delegat") || l.contains("home")).collect();
        panic!(
            "creates lost across the restart (signal {signal}): {} of {} there; the mount's log of its delegations:\n{}",
            names.len(),
            expected.len(),
            delegation_lines.join("\n")
        );
    }
    assert_eq!(names, expected);
    std::fs::write(a.path("d/after"), b"a").unwrap();
    assert_eq!(std::fs::read(b.path("d/after")).unwrap(), b"a");
    restarted
}

/// A burst of mkdirs longer than a grant's numbers keeps its delegation (renewed, not given
/// back and asked for again), so the directories it made are removed by the mount too; the
/// other node then finds the directory as the burst left it. (About half of the directories
/// are homed with their parent and take the grant's numbers; the others are made on the other
/// server the ordinary way: 10,000 use up a grant of 4,096.)
#[test]
fn a_burst_longer_than_a_grant_renews_its_delegation() {
    const DIRS: usize = 10_000;
    let inst = delegating_instance("delegatedrenew", 121);
    let (a, b) = delegating_nodes(&inst, 121);
    std::fs::create_dir(a.path("d")).unwrap();
    for i in 0..DIRS {
        std::fs::create_dir(a.path(&format!("d/{i:05}"))).unwrap();
    }
    for i in 0..100 {
        std::fs::write(a.path(&format!("d/f{i:03}")), b"").unwrap();
    }
    assert!(inst.mount_log().contains("renewed: Ok(true)"), "no renewal:\n{}", inst.mount_log());
    for i in 0..DIRS {
        std::fs::remove_dir(a.path(&format!("d/{i:05}"))).unwrap();
    }
    assert_eq!(delegations_granted(&inst), 1, "the directory was given back and asked for again");
    let names = names_in(&b.path("d"));
    assert_eq!(names, (0..100).map(|i| format!("f{i:03}")).collect::<Vec<_>>());
}

/// The mount asks for a directory while it goes on creating there the ordinary way: a
/// create answered while the grant was on its way is one the delegation knows (else an unlink
/// of it would find nothing), in directory after directory.
#[test]
fn creates_made_while_a_grant_is_on_its_way_stay_known() {
    let inst = delegating_instance("delegatedrace", 71);
    let (a, _b) = delegating_nodes(&inst, 71);
    for round in 0..30 {
        let dir = a.path(&format!("d{round}"));
        std::fs::create_dir(&dir).unwrap();
        for i in 0..40 {
            std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
        }
        for i in 0..40 {
            std::fs::remove_file(dir.join(format!("f{i}"))).unwrap_or_else(|e| panic!("round {round}: unlink f{i}: {e}"));
        }
        std::fs::remove_dir(&dir).unwrap();
    }
    assert!(delegations_granted(&inst) >= 10, "few grants: {}", delegations_granted(&inst));
}

/// In a directory held under a delegation, new files are handed to the kernel as data files
/// (passthrough) only once files made there turned out to be written at length: a create
/// of an empty file (mdtest) skips the data file's creation and backing id, and a directory
/// of checkpoints gets passthrough from its next file on.
#[test]
fn a_delegated_directory_passes_files_through_once_its_files_are_written_at_length() {
    let inst = Instance::up("delegatedpt", &["--capacity", "1G", "--hosts", "127.0.5.81"]);
    let a = inst.mount_with("a", "127.0.5.81", &[("SURGE_LOG", "warn,surge_client::delegation::holder=debug")]);
    let b = inst.mount("b", "127.0.5.85");
    std::fs::create_dir(a.path("ckpt")).unwrap();
    for i in 0..20 {
        std::fs::write(a.path(&format!("ckpt/empty{i:02}")), b"").unwrap();
    }
    await_a_grant(&inst);
    let daemon = daemon_of(&a);
    let (first, second) = (surge_tests::pattern(81, 8 << 20), surge_tests::pattern(82, 32 << 20));
    let before = bytes_through(daemon);
    std::fs::write(a.path("ckpt/first"), &first).unwrap();
    let through = bytes_through(daemon) - before;
    assert!(through >= 8 << 20, "the first file of the directory went through the daemon ({through} bytes)");
    let before = bytes_through(daemon);
    std::fs::write(a.path("ckpt/second"), &second).unwrap();
    let through = bytes_through(daemon) - before;
    assert!(through < 4 << 20, "the daemon moved {through} bytes of the second file: not passed through");
    assert!(std::fs::read(b.path("ckpt/first")).unwrap() == first);
    assert!(std::fs::read(b.path("ckpt/second")).unwrap() == second);
}

/// Where the kernel offers FUSE over io_uring, the mount takes its requests from one ring
/// queue per CPU, each served by a thread kept on that CPU (a caller's request is answered
/// on the CPU it waits on); where it does not, or with SURGE_FUSE_IO_URING=0, from
/// /dev/fuse. Both serve files alike.
#[test]
fn each_cpus_requests_are_served_on_that_cpu_where_the_kernel_offers_io_uring() {
    let inst = Instance::up("rings", &["--capacity", "1G", "--hosts", "127.0.5.91", "--layout", "node-local"]);
    let rings = inst.mount_with("rings", "127.0.5.91", &[("SURGE_FUSE_IO_URING", "1"), ("SURGE_LOG", "info")]);
    let plain = inst.mount_with("plain", "127.0.5.91", &[("SURGE_FUSE_IO_URING", "0")]);
    for (mount, label) in [(&rings, "rings"), (&plain, "plain")] {
        let dir = mount.path(label);
        std::fs::create_dir(&dir).unwrap();
        for i in 0..200 {
            std::fs::write(dir.join(format!("f{i}")), surge_tests::pattern(i, 4096 + i as usize)).unwrap();
        }
        for i in 0..200 {
            assert!(std::fs::read(dir.join(format!("f{i}"))).unwrap() == surge_tests::pattern(i, 4096 + i as usize));
            std::fs::remove_file(dir.join(format!("f{i}"))).unwrap();
        }
        std::fs::remove_dir(&dir).unwrap();
    }
    let ring_threads = |mount: &Mount| -> Vec<(usize, String)> {
        let pid = sh(&format!("pgrep -f '[s]urge-fuse rings {}'", mount.dir.display()));
        let mut threads = vec![];
        for task in std::fs::read_dir(format!("/proc/{}/task", pid.trim())).unwrap() {
            let task = task.unwrap().path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap();
            if let Some(Ok(cpu)) = name.trim().strip_prefix("fuse-ring-").map(str::parse::<usize>) {
                let status = std::fs::read_to_string(task.join("status")).unwrap();
                let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
                threads.push((cpu, allowed));
            }
        }
        threads.sort();
        threads
    };
    let offered = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|v| v.trim() == "Y");
    let log = inst.mount_log();
    let (threads, online) = (ring_threads(&rings), cpus_in(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap()));
    if offered {
        assert!(log.contains("FUSE over io_uring: "), "{log}");
        let possible = cpus_in(&std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap());
        assert_eq!(threads.iter().map(|(cpu, _)| *cpu).collect::<Vec<_>>(), possible, "a queue thread per possible CPU");
        for (cpu, allowed) in threads.iter().filter(|(cpu, _)| online.contains(cpu)) {
            assert_eq!(allowed, &cpu.to_string(), "queue {cpu}'s thread runs on CPU {cpu} only");
        }
    } else {
        eprintln!("this kernel does not offer FUSE over io_uring: checked the fallback to /dev/fuse");
        assert!(log.contains("FUSE over io_uring off"), "{log}");
        assert!(threads.is_empty());
    }
    let pid = sh(&format!("pgrep -f '[s]urge-fuse rings {}'", plain.dir.display()));
    let names = sh(&format!("cat /proc/{}/task/*/comm", pid.trim()));
    assert!(!names.contains("fuse-ring"), "SURGE_FUSE_IO_URING=0: no rings ({names})");
}

/// The CPUs of a kernel CPU list ("0-3,8").
fn cpus_in(list: &str) -> Vec<usize> {
    let mut cpus = vec![];
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(first.parse::<usize>().unwrap()..=last.parse::<usize>().unwrap());
    }
    cpus
}

/// A blocking lock's wait holds the request's ring entry, and the kernel hands a CPU's
/// requests to that CPU's queue alone: a hundred waiters on one CPU (more than a queue starts
/// with) must not take every entry, or the holder's unlock from that CPU could never be
/// handed over and the holder and every waiter would hang, unkillable. The queue grows
/// instead (said in the log); with its growth limited to 64 entries, the waits that would
/// take its last 16 are refused (ENOLCK) and the rest get the lock. Over /dev/fuse waiters
/// cost nothing but memory. Where the kernel does not offer io_uring, all three mounts are
/// /dev/fuse and must let all waiters through.
#[test]
fn a_hundred_lock_waiters_on_one_cpu_all_end_and_never_hang_the_mount() {
    let inst = Instance::up("waiters", &["--capacity", "1G", "--hosts", "127.0.5.95"]);
    let offered = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|v| v.trim() == "Y");
    let log_path = inst.home.join("instances").join("waiters.fuse.log");
    for (label, env) in [
        ("rings", vec![("SURGE_FUSE_IO_URING", "1")]),
        ("rings-of-64", vec![("SURGE_FUSE_IO_URING", "1"), ("SURGE_FUSE_RING_ENTRIES", "64")]),
        ("devfuse", vec![("SURGE_FUSE_IO_URING", "0")]),
    ] {
        let log_before = std::fs::read_to_string(&log_path).map_or(0, |l| l.len());
        let env = [env, vec![("SURGE_LOG", "warn,surge_fuse_session=debug")]].concat();
        let m = inst.mount_with(label, "127.0.5.95", &env);
        let outcome = lock_waiters_on_cpu0(&m, 100);
        let log = std::fs::read_to_string(&log_path).unwrap_or_default().split_off(log_before);
        let (got, refused) = outcome.unwrap_or_else(|still| panic!("{label}: {still}; the mount's log: {log}"));
        match (label, offered) {
            ("rings", true) => {
                assert_eq!((got, refused), (100, 0), "{label}: every waiter gets the lock");
                assert!(log.contains("ring queue grows"), "{label}: queue 0 grew past its first entries: {log}");
            }
            ("rings-of-64", true) => {
                assert!(refused > 0 && got >= 40 && got + refused == 100, "{label}: {got} got the lock, {refused} refused");
                assert!(log.contains("answered ENOLCK"), "{label}: the refusals are said in the log: {log}");
            }
            _ => assert_eq!((got, refused), (100, 0), "{label}: every waiter gets the lock"),
        }
    }
}

/// Takes an exclusive flock on a file in `m` for 2 s, with `n` more flock calls waiting for
/// it, every process on CPU 0; how many waiters then got the lock and how many were refused.
/// Processes still running 30 s after the holder let go are an error, which says which (the
/// mount's connection is aborted first: its waiters would otherwise hang unkillable).
fn lock_waiters_on_cpu0(m: &Mount, n: usize) -> Result<(usize, usize), String> {
    let file = m.path("lockfile");
    std::fs::write(&file, b"").unwrap();
    let file = file.display().to_string();
    let on_cpu0 = |args: &[&str]| {
        let mut command = std::process::Command::new("taskset");
        command.args(["-c", "0", "flock", "-x", &file]).args(args).stderr(std::process::Stdio::null());
        command.spawn().unwrap()
    };
    let holder = on_cpu0(&["-c", "sleep 2"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(sh(&format!("flock -n {file} -c true && echo got-it || echo refused")).contains("refused"), "the holder holds it");
    let mut processes: Vec<_> = (0..n).map(|_| on_cpu0(&["-c", "true"])).collect();
    processes.insert(0, holder);
    let deadline = std::time::Instant::now() + Duration::from_secs(32);
    let mut statuses = vec![];
    for process in &mut processes {
        loop {
            if let Some(status) = process.try_wait().unwrap() {
                statuses.push(status);
                break;
            }
            if std::time::Instant::now() > deadline {
                let running: Vec<usize> =
                    processes.iter_mut().enumerate().filter_map(|(i, p)| p.try_wait().is_ok_and(|s| s.is_none()).then_some(i)).collect();
                abort_fuse_connection(&m.dir);
                processes.iter_mut().for_each(|p| drop(p.kill()));
                processes.iter_mut().for_each(|p| drop(p.wait()));
                return Err(format!(
                    "{} of the holder (0) and {n} waiters still run 30 s after the holder let go: {running:?}",
                    running.len()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(statuses[0].success(), "the holder's flock: {:?}", statuses[0]);
    let got = statuses[1..].iter().filter(|s| s.success()).count();
    Ok((got, n - got))
}

/// Aborts the FUSE connection of the mount on `dir` (through the fusectl file system): its
/// waiting requests fail, and their callers, unkillable until then, can end.
/// The connection is named by the mount's device number, read from the mount table: a stat
/// of the mount could wait as its requests do.
fn abort_fuse_connection(dir: &std::path::Path) {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    // Fields: mount id, parent id, major:minor, root, mount point, ...
    let device = mounts.lines().map(|l| l.split(' ').collect::<Vec<_>>()).find(|f| f.len() > 4 && std::path::Path::new(f[4]) == dir);
    let Some(minor) = device.and_then(|f| f[2].split_once(':').map(|(_, minor)| minor.to_string())) else { return };
    if !std::path::Path::new("/sys/fs/fuse/connections").read_dir().is_ok_and(|mut d| d.next().is_some()) {
        sh("mount -t fusectl none /sys/fs/fuse/connections || true");
    }
    let _ = std::fs::write(format!("/sys/fs/fuse/connections/{minor}/abort"), "1");
}

/// Running out of space leaves the instance usable: after a write that ran into ENOSPC (its
/// error reported at close, as `dd` sees it) and the file's removal, and after a fallocate
/// that failed for space, a new file takes the room again at once (the mount is on the
/// servers' node: it writes their data files itself, within room they set aside for it).
#[test]
fn a_full_instance_takes_writes_again_once_room_is_freed() {
    let inst = Instance::up("nospace", &["--capacity", "64M", "--hosts", "127.0.6.11,127.0.6.12,127.0.6.13,127.0.6.14"]);
    let m = inst.mount("a", "127.0.6.11");
    let dd = |name: &str, mib: u32| {
        std::process::Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", m.path(name).display()))
            .args(["bs=1M", &format!("count={mib}"), "status=none"])
            .output()
            .unwrap()
    };
    let overfull = dd("big", 96);
    assert!(!overfull.status.success() && surge_tests::text(&overfull).contains("No space left"), "{}", surge_tests::text(&overfull));
    std::fs::remove_file(m.path("big")).unwrap();
    let after = dd("after", 32);
    assert!(after.status.success(), "32 MiB into an emptied 64 MiB instance: {}", surge_tests::text(&after));
    std::fs::remove_file(m.path("after")).unwrap();

    let reserve = std::process::Command::new("fallocate").args(["-l", "96M"]).arg(m.path("reserved")).output().unwrap();
    assert!(!reserve.status.success(), "fallocate of 96 MiB in 64 MiB succeeded");
    std::fs::remove_file(m.path("reserved")).unwrap();
    let after = dd("after", 32);
    assert!(after.status.success(), "32 MiB after a failed fallocate and its file's removal: {}", surge_tests::text(&after));
    std::fs::remove_file(m.path("after")).unwrap();

    // Space set aside past a file's end, and a file truncated to nothing: their removal
    // frees everything they held on the servers.
    sh(&format!("touch {0} && fallocate --keep-size -l 48M {0}", m.path("kept").display()));
    std::fs::remove_file(m.path("kept")).unwrap();
    let after = dd("after", 32);
    assert!(after.status.success(), "32 MiB after removing a file with 48 MiB set aside past its end: {}", surge_tests::text(&after));
    sh(&format!("truncate -s 0 {0} && rm {0}", m.path("after").display()));
    let fsck = inst.surge(&["fsck", &inst.name]);
    assert!(fsck.status.success(), "surge fsck after the removals: {}", surge_tests::text(&fsck));
}

/// mount(8)'s helper, as `mount -t fuse.surge surge:NAME DIR -o OPTIONS` and /etc/fstab run it
/// (a link named `mount.fuse.surge` to `surge`): it mounts with mount(8)'s environment (the
/// instance found through `home=`), `-o remount,ro` makes the mount refuse changes with EROFS
/// and `remount,rw` lifts it, with the same daemon; set-id and device options are refused.
#[test]
fn the_mount_helper_mounts_and_remounts_as_mount_8_asks() {
    let inst = Instance::up("mhelper", &["--capacity", "256M", "--hosts", "127.0.5.161"]);
    let bin = surge_tests::scratch("mhelper-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let helper = bin.join("mount.fuse.surge");
    std::os::unix::fs::symlink(surge_tests::binary("surge"), &helper).unwrap();
    let dir = std::env::temp_dir().join(format!("surge-test-mnt-mhelper-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |options: &str| {
        std::process::Command::new(&helper)
            .env_remove("SURGE_HOME")
            .env_remove("SURGE_INSTANCE")
            .arg(format!("surge:{}", inst.name))
            .arg(&dir)
            .args(["-o", options])
            .output()
            .unwrap()
    };
    let refused = run("rw,suid");
    assert!(!refused.status.success() && surge_tests::text(&refused).contains("nosuid,nodev"), "suid: {}", surge_tests::text(&refused));
    let home = format!("home={}", inst.home.display());
    let mounted = run(&format!("rw,_netdev,node=127.0.5.161,{home}"));
    assert!(mounted.status.success(), "the helper's mount: {}", surge_tests::text(&mounted));
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mountinfo.lines().find(|l| l.contains(dir.to_str().unwrap())).expect("in mountinfo");
    assert!(line.contains("fuse.surge surge:mhelper") && line.contains("nosuid") && line.contains("nodev"), "{line}");

    std::fs::write(dir.join("before"), b"written").unwrap();
    // As mount(8) asks it: the mount's current options, then the new ones.
    let current = "rw,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,allow_other";
    let ro = run(&format!("{current},remount,ro,{home}"));
    assert!(ro.status.success(), "remount,ro: {}", surge_tests::text(&ro));
    let refused = std::fs::write(dir.join("while-ro"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS), "a write to a read-only mount: {refused}");
    assert_eq!(std::fs::read(dir.join("before")).unwrap(), b"written", "reads go on");
    let rw = run(&format!("remount,rw,{home}"));
    assert!(rw.status.success(), "remount,rw: {}", surge_tests::text(&rw));
    std::fs::write(dir.join("after"), b"again").unwrap();

    // Unmounted by umount(8) and mounted again, twice (as xfstests does): the instance goes
    // down all the same, its mount record kept once.
    for _ in 0..2 {
        surge_tests::umount(&dir);
        let again = run(&format!("node=127.0.5.161,{home}"));
        assert!(again.status.success(), "mounted again: {}", surge_tests::text(&again));
    }
    surge_tests::umount(&dir);
    let down = inst.surge(&["down", &inst.name]);
    assert!(down.status.success(), "down after umount(8): {}", surge_tests::text(&down));
    let _ = std::fs::remove_dir(&dir);
}

/// A directory moved on node B is found under its new name on node A, also while A holds a
/// file in it open (the kernel's entry for it cannot be dropped then, only moved), and A can
/// then move it again between directories; and without anything open in it, A's rename
/// between directories finds it at once. (A rename on A whose first lookup of the moved
/// directory is its source or target while A holds something in it gets ESTALE from the
/// kernel: docs/consistency.md, guarantee 7.)
#[test]
fn a_directory_moved_on_another_node_is_found_and_moved_again_here() {
    let inst = Instance::up("dirmoved", &["--capacity", "1G", "--hosts", "127.0.5.171,127.0.5.172"]);
    let (a, b) = (inst.mount("a", "127.0.5.171"), inst.mount("b", "127.0.5.175"));
    for d in ["p1", "p2"] {
        std::fs::create_dir(a.path(d)).unwrap();
    }
    for round in 0..5 {
        let (x, y) = (format!("x{round}"), format!("y{round}"));
        // Held open on A: its entry stays until a lookup moves it.
        std::fs::create_dir(a.path(&format!("p1/{x}"))).unwrap();
        let held = std::fs::File::create(a.path(&format!("p1/{x}/file"))).unwrap();
        std::fs::rename(b.path(&format!("p1/{x}")), b.path(&format!("p2/{x}"))).unwrap();
        let listed: Vec<_> = std::fs::read_dir(a.path(&format!("p2/{x}"))).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(listed, ["file"], "round {round}: the moved directory through A");
        std::fs::rename(a.path(&format!("p2/{x}")), a.path(&format!("p1/{y}"))).unwrap();
        drop(held);
        assert!(b.path(&format!("p1/{y}/file")).exists(), "round {round}: B sees A's move");

        // Nothing open in it on A: the notice drops A's entry, and a rename finds the new name.
        std::fs::create_dir(b.path(&format!("p1/{x}"))).unwrap();
        assert!(a.path(&format!("p1/{x}")).is_dir());
        std::fs::rename(b.path(&format!("p1/{x}")), b.path(&format!("p2/{x}"))).unwrap();
        std::fs::rename(a.path(&format!("p2/{x}")), a.path(&format!("p1/z{round}"))).unwrap();
        assert!(b.path(&format!("p1/z{round}")).is_dir(), "round {round}");
    }
}

/// A file handle as `name_to_handle_at` gives it (`struct file_handle` with room for its bytes).
#[repr(C)]
struct FileHandle {
    bytes: u32,
    kind: i32,
    data: [u8; 128],
}

fn handle_of(path: &std::path::Path) -> FileHandle {
    use std::os::unix::ffi::OsStrExt;
    let mut handle = FileHandle { bytes: 128, kind: 0, data: [0; 128] };
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut mount_id = 0;
    // SAFETY: `handle` has room for the 128 bytes its `bytes` field offers the kernel, and
    // `path` is a C string that outlives the call.
    let got =
        unsafe { libc::name_to_handle_at(libc::AT_FDCWD, path.as_ptr(), (&raw mut handle).cast::<libc::file_handle>(), &mut mount_id, 0) };
    assert_eq!(got, 0, "name_to_handle_at {}: {}", path.to_string_lossy(), std::io::Error::last_os_error());
    handle
}

/// `open_by_handle_at` through the mount at `mount`: the descriptor, or the errno.
fn open_by_handle(mount: &std::path::Path, handle: &mut FileHandle, flags: i32) -> Result<std::fs::File, i32> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mount = std::fs::File::open(mount).unwrap();
    // SAFETY: `handle` is a whole handle as name_to_handle_at filled it.
    let fd = unsafe { libc::open_by_handle_at(mount.as_raw_fd(), (handle as *mut FileHandle).cast::<libc::file_handle>(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    // SAFETY: `fd` was just opened and belongs to nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// File handles (`name_to_handle_at`, what xfstests' open_by_handle tests and an NFS
/// re-export use) outlive the kernel's inode and the mount: after an unmount and a new mount
/// on another node, a handle opens its file (and a directory's, its directory), and the
/// handle of a file removed meanwhile is stale.
#[test]
fn file_handles_open_their_files_after_the_mount_is_gone() {
    use std::io::Read;
    let inst = Instance::up_on("handles", "127.0.6", 201, 2, &["--capacity", "256M"]);
    let mut handles = {
        let m = inst.mount("a", "127.0.6.201");
        std::fs::create_dir(m.path("d")).unwrap();
        std::fs::write(m.path("d/kept"), b"kept bytes").unwrap();
        std::fs::write(m.path("d/removed"), b"x").unwrap();
        [handle_of(&m.path("d/kept")), handle_of(&m.path("d/removed")), handle_of(&m.path("d"))]
    };
    let m = inst.mount("b", "127.0.6.205");
    std::fs::remove_file(m.path("d/removed")).unwrap();
    // This node's kernel never held the kept file (only `d` and the removed one were looked
    // up here): its open asks the mount for the inode by number.
    let mut kept = open_by_handle(&m.dir, &mut handles[0], libc::O_RDONLY).expect("open the kept file by its handle");
    let mut read = String::new();
    kept.read_to_string(&mut read).unwrap();
    assert_eq!(read, "kept bytes");
    assert_eq!(open_by_handle(&m.dir, &mut handles[1], libc::O_RDONLY).unwrap_err(), libc::ESTALE, "the removed file's handle");
    let dir = open_by_handle(&m.dir, &mut handles[2], libc::O_RDONLY | libc::O_DIRECTORY).expect("open the directory by its handle");
    let listed = std::fs::read_dir(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir))).unwrap();
    let names: Vec<String> = listed.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["kept"], "the directory opened by its handle");
}

/// A file opened read-only on a node is kept open at its home, and its next opens there are
/// answered by the mount itself (they succeed while the home is stopped); every change made
/// on another node is seen by the next open all the same (close-to-open), and a file removed
/// elsewhere (or here) while such a handle reads it keeps its bytes until the handle is
/// closed, then its data is freed.
#[test]
fn opens_answered_by_the_mount_keep_close_to_open_and_the_bytes_of_a_removed_file() {
    let inst = Instance::up_on("reopen", "127.0.7", 101, 4, &["--capacity", "4G"]);
    let (a, b) = (inst.mount("a", "127.0.7.101"), inst.mount("b", "127.0.7.105"));
    use std::os::unix::fs::MetadataExt;

    // Answered on b with the empty file's home stopped: no request went there.
    std::fs::write(a.path("empty"), b"").unwrap();
    assert_eq!(std::fs::read(b.path("empty")).unwrap(), b"", "the first open, kept");
    let home = surge_client::surge_proto::ino::home(std::fs::metadata(b.path("empty")).unwrap().ino());
    inst.signal_server(home, libc::SIGSTOP);
    let (path, (tx, rx)) = (b.path("empty"), std::sync::mpsc::channel());
    std::thread::spawn(move || tx.send(std::fs::read(path).map(|bytes| bytes.len())).unwrap());
    let reopened = rx.recv_timeout(Duration::from_secs(10));
    inst.signal_server(home, libc::SIGCONT);
    assert!(matches!(reopened, Ok(Ok(0))), "a kept file's open asked its stopped home: {reopened:?}");

    // Close-to-open: each rewrite on a (truncating, growing, shrinking) is what b's next
    // open reads, whatever b opened before.
    for round in 0..24u64 {
        let len = [7, 70_000, 3, 1 << 20, 0, 4096][round as usize % 6] + round as usize;
        let bytes = surge_tests::pattern(round, len);
        std::fs::write(a.path("f"), &bytes).unwrap();
        for reading in 0..2 {
            assert!(std::fs::read(b.path("f")).unwrap() == bytes, "round {round}, read {reading} on b: not what a wrote");
        }
    }

    // Removed on a while a handle answered on b reads it: b keeps reading its bytes.
    let kept = surge_tests::pattern(99, 3 << 20);
    std::fs::write(a.path("g"), &kept).unwrap();
    assert!(std::fs::read(b.path("g")).unwrap() == kept);
    let mut open = std::fs::File::open(b.path("g")).unwrap();
    std::fs::remove_file(a.path("g")).unwrap();
    // The name's removal reaches b by a notice the directory's home does not wait for.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while b.path("g").exists() {
        assert!(std::time::Instant::now() < deadline, "the name is still there on b after 2 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut open, &mut read).unwrap();
    assert!(read == kept, "a handle answered on b lost the bytes of a file removed on a");
    drop(open);
    // And a kept file removed on the node that keeps it.
    std::fs::write(a.path("h"), &kept).unwrap();
    assert!(std::fs::read(b.path("h")).unwrap() == kept);
    std::fs::remove_file(b.path("h")).unwrap();

    // Nothing of either is left on the servers once their last handles are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let check = inst.surge(&["fsck", &inst.name]);
        if check.status.success() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "data of removed files left behind: {}", surge_tests::text(&check));
        std::thread::sleep(Duration::from_millis(200));
    }
}
