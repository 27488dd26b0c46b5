//! A small in-memory file system mounted for real (needs root and /dev/fuse), driven through
//! std::fs over each transport: the session's decoding, replies, readdir paging, unmount.
//! Over io_uring it also checks that requests did arrive in ring entries (when the kernel
//! offers FUSE over io_uring; a kernel that does not is reported, and that case asserts the
//! fallback instead).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use surge_fuse_session::*;

struct Node {
    attr: FileAttr,
    data: Vec<u8>,
    children: BTreeMap<OsString, u64>,
}

#[derive(Default)]
struct Counters {
    /// Requests handled on an io_uring queue's thread.
    on_ring: AtomicU64,
    /// Requests handled on the /dev/fuse thread.
    on_dev: AtomicU64,
    /// Writes whose data came with the buffer it was read into (kept without a copy).
    shared_writes: AtomicU64,
}

struct MemFs {
    nodes: Mutex<HashMap<u64, Node>>,
    next: AtomicU64,
    counters: Arc<Counters>,
}

const TTL: Duration = Duration::from_secs(1);

fn attr(ino: u64, kind: FileType, perm: u16) -> FileAttr {
    let now = Time { secs: 1_700_000_000, nanos: 0 };
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        // The mounting user's, so that an unprivileged mount may write in it.
        // SAFETY: geteuid and getegid only read the process's credentials.
        uid: unsafe { libc::geteuid() },
        // SAFETY: as above.
        gid: unsafe { libc::getegid() },
        rdev: 0,
        blksize: 4096,
    }
}

impl MemFs {
    fn new(counters: Arc<Counters>) -> MemFs {
        let root = Node { attr: attr(1, FileType::Directory, 0o755), data: vec![], children: BTreeMap::new() };
        MemFs { nodes: Mutex::new(HashMap::from([(1, root)])), next: AtomicU64::new(2), counters }
    }

    fn count(&self) {
        let on_ring = std::thread::current().name().is_some_and(|n| n.starts_with("fuse-ring"));
        let counter = if on_ring { &self.counters.on_ring } else { &self.counters.on_dev };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn make(&self, parent: u64, name: &OsStr, kind: FileType, mode: u32) -> Result<FileAttr, i32> {
        let mut nodes = self.nodes.lock().unwrap();
        let dir = nodes.get(&parent).ok_or(libc::ENOENT)?;
        if dir.children.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next.fetch_add(1, Ordering::Relaxed);
        let a = attr(ino, kind, (mode & 0o7777) as u16);
        nodes.insert(ino, Node { attr: a, data: vec![], children: BTreeMap::new() });
        nodes.get_mut(&parent).unwrap().children.insert(name.to_owned(), ino);
        Ok(a)
    }

    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), i32> {
        let mut nodes = self.nodes.lock().unwrap();
        let ino = *nodes.get(&parent).and_then(|p| p.children.get(name)).ok_or(libc::ENOENT)?;
        let node = &nodes[&ino];
        match (dir, node.attr.kind == FileType::Directory) {
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            (true, true) if !node.children.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        nodes.get_mut(&parent).unwrap().children.remove(name);
        nodes.remove(&ino);
        Ok(())
    }
}

impl Filesystem for MemFs {
    fn init(&self, config: &mut KernelConfig) -> std::io::Result<()> {
        config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _c: &Caller, parent: u64, name: &OsStr, reply: ReplyEntry) {
        self.count();
        let nodes = self.nodes.lock().unwrap();
        match nodes.get(&parent).and_then(|p| p.children.get(name)).and_then(|ino| nodes.get(ino)) {
            Some(node) => reply.entry(TTL, &node.attr, 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&self, _c: &Caller, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        self.count();
        match self.nodes.lock().unwrap().get(&ino) {
            Some(node) => reply.attr(TTL, &node.attr),
            None => reply.error(libc::ENOENT),
        }
    }

    fn setattr(&self, _c: &Caller, ino: u64, changes: SetAttr, reply: ReplyAttr) {
        let mut nodes = self.nodes.lock().unwrap();
        let Some(node) = nodes.get_mut(&ino) else { return reply.error(libc::ENOENT) };
        if let Some(size) = changes.size {
            node.data.resize(size as usize, 0);
            node.attr.size = size;
        }
        if let Some(mode) = changes.mode {
            node.attr.perm = (mode & 0o7777) as u16;
        }
        reply.attr(TTL, &node.attr);
    }

    fn mkdir(&self, _c: &Caller, parent: u64, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        match self.make(parent, name, FileType::Directory, mode) {
            Ok(a) => reply.entry(TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn create(&self, _c: &Caller, parent: u64, name: &OsStr, mode: u32, _umask: u32, _flags: i32, reply: ReplyCreate) {
        self.count();
        match self.make(parent, name, FileType::RegularFile, mode) {
            Ok(a) => reply.created(TTL, &a, 0, a.ino, 0),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _c: &Caller, ino: u64, _flags: i32, reply: ReplyOpen) {
        reply.opened(ino, 0);
    }

    fn read(&self, _c: &Caller, ino: u64, _fh: u64, offset: u64, size: u32, reply: ReplyData) {
        let nodes = self.nodes.lock().unwrap();
        let Some(node) = nodes.get(&ino) else { return reply.error(libc::ENOENT) };
        let start = (offset as usize).min(node.data.len());
        let end = (start + size as usize).min(node.data.len());
        reply.data(&node.data[start..end]);
    }

    fn write(&self, _c: &Caller, ino: u64, _fh: u64, offset: u64, data: WriteData<'_>, _wf: u32, _f: i32, reply: ReplyWrite) {
        if data.is_shared() {
            self.counters.shared_writes.fetch_add(1, Ordering::Relaxed);
            assert_eq!(&data.to_bytes()[..], &data[..]);
        }
        let mut nodes = self.nodes.lock().unwrap();
        let Some(node) = nodes.get_mut(&ino) else { return reply.error(libc::ENOENT) };
        let end = offset as usize + data.len();
        if node.data.len() < end {
            node.data.resize(end, 0);
        }
        node.data[offset as usize..end].copy_from_slice(&data);
        node.attr.size = node.data.len() as u64;
        reply.written(data.len() as u32);
    }

    fn flush(&self, _c: &Caller, _ino: u64, _fh: u64, _owner: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn unlink(&self, _c: &Caller, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.count();
        // Answered from another thread, later: replies need not come from the request's.
        let result = self.remove(parent, name, false);
        std::thread::spawn(move || match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        });
    }

    fn rmdir(&self, _c: &Caller, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _c: &Caller, ino: u64, _fh: u64, offset: u64, mut reply: ReplyDirectory) {
        let nodes = self.nodes.lock().unwrap();
        let Some(dir) = nodes.get(&ino) else { return reply.error(libc::ENOENT) };
        for (i, (name, child)) in dir.children.iter().enumerate().skip(offset as usize) {
            if reply.add(*child, i as u64 + 1, nodes[child].attr.kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid only reads the process's credentials.
    unsafe { libc::geteuid() == 0 }
}

/// Fails the test, saying why, when it cannot run: these tests mount for real.
fn require_root(why: &str) {
    assert!(is_root(), "this test needs root ({why}): run the suite as root (`sudo make test`)");
}

fn uring_offered() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|v| v.trim() == "Y")
}

/// Mounts a MemFs at a fresh directory; the thread serving it ends at unmount.
fn mounted(transport: Transport) -> (PathBuf, Arc<Counters>, std::thread::JoinHandle<std::io::Result<()>>) {
    let dir = std::env::temp_dir().join(format!("surge-fuse-session-{}-{}", std::process::id(), transport.io_uring));
    std::fs::create_dir_all(&dir).unwrap();
    let (counters, serving) = mounted_at(&dir, true, transport);
    (dir, counters, serving)
}

fn mounted_at(dir: &Path, allow_other: bool, transport: Transport) -> (Arc<Counters>, std::thread::JoinHandle<std::io::Result<()>>) {
    let counters = Arc::new(Counters::default());
    let options =
        MountOptions { fsname: "memfs".into(), subtype: "memfs".into(), default_permissions: true, allow_other, ..Default::default() };
    let session = Session::mount(MemFs::new(counters.clone()), dir, &options, transport).expect("mount");
    (counters, std::thread::spawn(move || session.run()))
}

fn unmount(dir: &Path, serving: std::thread::JoinHandle<std::io::Result<()>>) {
    let status = std::process::Command::new("umount").arg(dir).status().unwrap();
    assert!(status.success(), "umount {}", dir.display());
    serving.join().unwrap().expect("session ends cleanly at unmount");
    std::fs::remove_dir(dir).unwrap();
}

fn exercise(dir: &Path) {
    // Files: create, write 3 MiB in 1 MiB writes, read back, truncate.
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 + i / 4096) as u8).collect();
    let path = dir.join("big");
    std::fs::File::create(&path).unwrap().write_all(&data).unwrap();
    let mut back = vec![];
    std::fs::File::open(&path).unwrap().read_to_end(&mut back).unwrap();
    assert!(back == data, "read back what was written");
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(10).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 10);

    // Many entries with long names: readdir answers in pages.
    let sub = dir.join("many");
    std::fs::create_dir(&sub).unwrap();
    let names: Vec<String> = (0..500).map(|i| format!("{i:04}-{}", "x".repeat(200))).collect();
    for name in &names {
        std::fs::File::create(sub.join(name)).unwrap();
    }
    let mut listed: Vec<String> = std::fs::read_dir(&sub).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    listed.sort();
    assert_eq!(listed, names);

    // Errors come back as errnos.
    assert_eq!(std::fs::create_dir(&sub).unwrap_err().raw_os_error(), Some(libc::EEXIST));
    assert_eq!(std::fs::remove_dir(&sub).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    assert_eq!(std::fs::metadata(dir.join("absent")).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    for name in &names {
        std::fs::remove_file(sub.join(name)).unwrap();
    }
    std::fs::remove_dir(&sub).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0);
}

#[test]
fn serves_over_dev_fuse() {
    require_root("mount(2)");
    let (dir, counters, serving) = mounted(Transport { io_uring: false, ..Default::default() });
    exercise(&dir);
    unmount(&dir, serving);
    assert_eq!(counters.on_ring.load(Ordering::Relaxed), 0);
    assert!(counters.on_dev.load(Ordering::Relaxed) > 1000);
    // The 3 MiB file goes in 1 MiB writes, each handed over with its read buffer.
    assert!(counters.shared_writes.load(Ordering::Relaxed) >= 3, "large writes over /dev/fuse come without a copy");
}

#[test]
fn serves_over_io_uring() {
    require_root("mount(2)");
    let (dir, counters, serving) = mounted(Transport { io_uring: true, ..Default::default() });
    exercise(&dir);
    unmount(&dir, serving);
    let (on_ring, on_dev) = (counters.on_ring.load(Ordering::Relaxed), counters.on_dev.load(Ordering::Relaxed));
    assert_requests_came_through_rings(on_ring, on_dev);
}

/// A process that may not make the rings (no CAP_IPC_LOCK and no locked memory to count them
/// against, as a mount daemon running as a job's user past its `ulimit -l`) serves the mount
/// through /dev/fuse instead of leaving every request waiting for queues that never come.
/// The mount runs in a child process of this test executable made that way.
#[test]
fn a_ring_that_cannot_be_made_leaves_the_mount_on_dev_fuse() {
    require_root("mount(2)");
    if std::env::var_os(WITHOUT_LOCKED_MEMORY).is_some() {
        let (dir, counters, serving) = mounted(Transport { io_uring: true, ..Default::default() });
        exercise(&dir);
        unmount(&dir, serving);
        let (on_ring, on_dev) = (counters.on_ring.load(Ordering::Relaxed), counters.on_dev.load(Ordering::Relaxed));
        assert!(on_ring == 0 && on_dev > 1000, "requests through rings {on_ring}, through /dev/fuse {on_dev}");
        return;
    }
    if !uring_offered() {
        eprintln!("this kernel does not offer FUSE over io_uring: no ring to fail to make");
    }
    // Bounded: a mount left waiting for its rings would hang the child for good.
    let child = std::process::Command::new("timeout")
        .args(["-k", "5", "120", "prlimit", "--memlock=0:0", "setpriv", "--bounding-set", "-ipc_lock", "--inh-caps", "-ipc_lock"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "a_ring_that_cannot_be_made_leaves_the_mount_on_dev_fuse", "--nocapture", "--test-threads", "1"])
        .env(WITHOUT_LOCKED_MEMORY, "1")
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(child.status.success() && said.contains("1 passed"), "the mount without locked memory: {said}");
}

/// Set in the child process of `a_ring_that_cannot_be_made_leaves_the_mount_on_dev_fuse`.
const WITHOUT_LOCKED_MEMORY: &str = "SURGE_TEST_WITHOUT_LOCKED_MEMORY";

/// With FUSE over io_uring offered, the requests (all but those before the queues were
/// registered) came through ring entries; without it, all through /dev/fuse.
fn assert_requests_came_through_rings(via_ring: u64, via_dev: u64) {
    if uring_offered() {
        assert!(via_ring > 1000 && via_dev < 50, "requests through rings {via_ring}, through /dev/fuse {via_dev}");
    } else {
        eprintln!("this kernel does not offer FUSE over io_uring: checked the fallback to /dev/fuse");
        assert!(via_ring == 0 && via_dev > 1000);
    }
}

/// The rings handed to the caller (`ring_threads` off) and driven, with /dev/fuse, by one
/// poll(2) loop on one thread, as an event loop would.
#[test]
fn serves_over_io_uring_driven_by_an_event_loop() {
    require_root("mount(2)");
    let dir = std::env::temp_dir().join(format!("surge-fuse-session-{}-driven", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let counters = Arc::new(Counters::default());
    let options = MountOptions {
        fsname: "memfs".into(),
        subtype: "memfs".into(),
        default_permissions: true,
        allow_other: true,
        ..Default::default()
    };
    let transport = Transport { io_uring: true, ring_threads: false, ..Default::default() };
    let mut session = Session::mount(MemFs::new(counters.clone()), &dir, &options, transport).expect("mount");
    // Requests handed over during each kind of call, from the file system's count.
    let (via_dev, via_ring) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let served = {
        let counters = counters.clone();
        move || counters.on_dev.load(Ordering::Relaxed) + counters.on_ring.load(Ordering::Relaxed)
    };
    let (dev_count, ring_count) = (via_dev.clone(), via_ring.clone());
    let serving = std::thread::spawn(move || -> std::io::Result<()> {
        session.set_nonblocking()?;
        let mut rings: Vec<Ring> = vec![];
        loop {
            let mut fds: Vec<libc::pollfd> = std::iter::once(session.fd())
                .chain(rings.iter().map(Ring::fd))
                .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
                .collect();
            // SAFETY: `fds` is a valid array of pollfd for the call's duration.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
            let before = served();
            if session.serve_waiting(64)? == Flow::Unmounted {
                return Ok(());
            }
            dev_count.fetch_add(served() - before, Ordering::Relaxed);
            rings.extend(session.take_rings());
            for ring in &rings {
                let before = served();
                ring.serve_ready(64)?;
                ring_count.fetch_add(served() - before, Ordering::Relaxed);
            }
        }
    });
    exercise(&dir);
    unmount(&dir, serving);
    let (via_ring, via_dev) = (via_ring.load(Ordering::Relaxed), via_dev.load(Ordering::Relaxed));
    assert_requests_came_through_rings(via_ring, via_dev);
}

/// Set in the child that `mounts_without_privilege_through_fusermount3` starts as an
/// unprivileged user: the directory to mount on.
const CHILD_DIR: &str = "SURGE_FUSE_SESSION_TEST_UNPRIVILEGED_DIR";

/// Without root, the session mounts through the setuid fusermount3 (which opens /dev/fuse,
/// mounts, and passes the descriptor back over a socket) and unmounts the same way. The test
/// runs itself again as uid 65534 to be that user.
#[test]
fn mounts_without_privilege_through_fusermount3() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let dir = PathBuf::from(dir);
        assert!(!is_root());
        let (counters, serving) = mounted_at(&dir, false, Transport::default());
        exercise(&dir);
        let status = std::process::Command::new("fusermount3").arg("-u").arg(&dir).status().unwrap();
        assert!(status.success(), "fusermount3 -u {}", dir.display());
        serving.join().unwrap().expect("session ends cleanly at unmount");
        assert!(counters.on_dev.load(Ordering::Relaxed) > 1000);
        return;
    }
    require_root("to become another user");
    // fusermount3 opens /dev/fuse as the calling user: most distributions ship it 0666; where
    // it is root's alone (as on some build machines) it is opened up for the test's span.
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::set_permissions("/dev/fuse", std::os::unix::fs::PermissionsExt::from_mode(self.0));
        }
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o7777;
    let _restore = Restore(mode);
    std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode | 0o666)).unwrap();
    let dir = std::env::temp_dir().join(format!("surge-fuse-session-{}-user", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "mounts_without_privilege_through_fusermount3", "--nocapture"])
        .env(CHILD_DIR, &dir)
        .output()
        .unwrap();
    let _ = std::process::Command::new("umount").arg("-l").arg(&dir).stderr(std::process::Stdio::null()).status();
    std::fs::remove_dir(&dir).unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
