//! Test harness for Surge's cross-component tests: starts real `surge-server` processes on
//! several loopback addresses through the `surge` command (each test with its own
//! `SURGE_HOME`), runs client processes as different "nodes", and tears everything down.
//!
//! Every process here sees every server's data directory, as if all were on one node. A client
//! "node" whose address is not a server's is treated as a node of its own that holds no server:
//! its reads cross the network (local reads off, `SURGE_LOCAL_IO=0`). A client on a server's
//! address reads what the servers of this machine hold from their data directories.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

pub mod netns;
pub mod testbed;

/// The workspace's built binaries live beside the test executable's `deps/` directory (or
/// beside this program, when it is one of them).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let beside = exe.parent().expect("the executable's directory");
    let dir = if beside.ends_with("deps") { beside.parent().expect("target profile directory") } else { beside };
    let path = dir.join(name);
    assert!(path.exists(), "{} not built: run `cargo build --release --workspace --bins` first", path.display());
    path
}

/// A test's scratch directory, removed when dropped, also when the test fails half-way.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A scratch directory for one test in the temp dir (on disk).
pub fn scratch(test: &str) -> Scratch {
    Scratch(std::env::temp_dir().join(format!("surge-test-scratch-{test}-{}", std::process::id())))
}

/// A scratch directory for one test in /dev/shm (in memory: for large files).
pub fn shm_scratch(test: &str) -> Scratch {
    Scratch(PathBuf::from(format!("/dev/shm/surge-test-scratch-{test}-{}", std::process::id())))
}

pub struct Instance {
    pub name: String,
    pub home: PathBuf,
    pub root: PathBuf,
}

impl Instance {
    /// `surge up` with the given extra arguments; panics with the command's output on failure.
    pub fn up(name: &str, args: &[&str]) -> Instance {
        let home = std::env::temp_dir().join(format!("surge-test-home-{name}-{}", std::process::id()));
        let root = PathBuf::from("/dev/shm").join(format!("surge-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        let instance = Instance { name: name.to_string(), home, root };
        let mut cmd_args = vec!["up", "--name", name, "--root"];
        let root_str = instance.root.to_str().unwrap().to_string();
        cmd_args.push(&root_str);
        cmd_args.extend_from_slice(args);
        let out = instance.surge(&cmd_args);
        assert!(out.status.success(), "surge up failed: {}", text(&out));
        instance
    }

    /// `count` servers on consecutive loopback addresses `prefix.base`, `prefix.base + 1`, ...
    pub fn up_on(name: &str, prefix: &str, base: u8, count: usize, args: &[&str]) -> Instance {
        let hosts: Vec<String> = (0..count).map(|i| format!("{prefix}.{}", base as usize + i)).collect();
        let count = count.to_string();
        let hosts = hosts.join(",");
        let mut all = vec!["--servers", count.as_str(), "--hosts", hosts.as_str()];
        all.extend_from_slice(args);
        Instance::up(name, &all)
    }

    /// Sends `signal` to server `index`; returns its pid.
    pub fn signal_server(&self, index: usize, signal: i32) -> i32 {
        let pid = self.descriptor()["servers"][index]["pid"].as_u64().expect("server pid") as i32;
        // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
        unsafe { libc::kill(pid, signal) };
        pid
    }

    /// SIGKILLs server `index` (a crash: no clean shutdown).
    pub fn kill_server(&self, index: usize) {
        let pid = self.signal_server(index, libc::SIGKILL);
        // Gone, or a zombie whose every thread has exited (only then are its sockets closed),
        // before the caller goes on.
        let alive = || {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|stat| stat.contains(") Z "));
            let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0);
            match zombie {
                Err(_) => false,
                Ok(zombie) => !zombie || threads > 1,
            }
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive() {
            assert!(std::time::Instant::now() < deadline, "server {index} (pid {pid}) survived SIGKILL");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Starts server `index` again with its old address, directory and share, as a restart
    /// after a crash would; returns once it listens. The caller waits for the child.
    pub fn restart_server(&self, index: usize) -> std::process::Child {
        let desc = self.descriptor();
        let addr = desc["servers"][index]["addr"].as_str().unwrap().to_string();
        self.restart_server_with(index, &addr, &[])
    }

    /// Starts server `index` again on its directory, listening on `listen`, its command run
    /// through `wrapper` (e.g. `ip netns exec NS`, to move the server to another network
    /// namespace); records the address in the descriptor. Returns once it listens.
    pub fn restart_server_with(&self, index: usize, listen: &str, wrapper: &[&str]) -> std::process::Child {
        let mut desc = self.descriptor();
        let descriptor_path = self.descriptor_path();
        if desc["servers"][index]["addr"] != listen {
            desc["servers"][index]["addr"] = listen.into();
            desc["servers"][index]["host"] = listen.rsplit_once(':').unwrap().0.into();
            std::fs::write(&descriptor_path, serde_json::to_vec_pretty(&desc).unwrap()).unwrap();
        }
        let server = &desc["servers"][index];
        let count = desc["servers"].as_array().unwrap().len();
        let root = PathBuf::from(server["root"].as_str().unwrap());
        let share = desc["capacity"].as_u64().unwrap() / count as u64;
        let _ = std::fs::remove_file(root.join("ready"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut command = wrapper.iter().map(|s| s.to_string()).chain([binary("surge-server").to_str().unwrap().to_string()]);
        let program = command.next().unwrap();
        let wrapped: Vec<String> = command.collect();
        loop {
            let mut child = Command::new(&program)
                .args(&wrapped)
                .args(["--listen", listen, "--root", root.to_str().unwrap()])
                .args(["--capacity", &share.to_string(), "--index", &index.to_string(), "--count", &count.to_string()])
                .args(["--token-file", desc["token_path"].as_str().unwrap()])
                .args(["--chunk-size", &desc["chunk_size"].to_string()])
                .args(["--replicas", &desc["replicas"].as_u64().unwrap_or(1).to_string()])
                .arg("--instance-file")
                .arg(&descriptor_path)
                .spawn()
                .expect("start surge-server");
            while !root.join("ready").exists() {
                if std::time::Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("restarted server {index} not ready");
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if root.join("ready").exists() {
                // The descriptor names the server's process, for kill_server (`ip netns exec`
                // execs the server: the same pid).
                let mut desc = self.descriptor();
                desc["servers"][index]["pid"] = child.id().into();
                std::fs::write(&descriptor_path, serde_json::to_vec_pretty(&desc).unwrap()).unwrap();
                return child;
            }
            let _ = child.wait();
            // It exited: its address was still held by the dying process's last threads (the
            // thread-group leader shows as a zombie before they have closed its sockets). Retry.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn surge(&self, args: &[&str]) -> Output {
        Command::new(binary("surge"))
            .args(args)
            .env("SURGE_HOME", &self.home)
            .env("SURGE_INSTANCE", &self.name)
            .output()
            .expect("run surge")
    }

    /// Runs `surge` as a client on node `node` (its own source address).
    pub fn surge_on(&self, node: &str, args: &[&str]) -> Output {
        self.on_node(Command::new(binary("surge")), node).args(args).output().expect("run surge")
    }

    /// A `surge` command on node `node`, to spawn.
    pub fn surge_command(&self, node: &str) -> Command {
        self.on_node(Command::new(binary("surge")), node)
    }

    /// `bash -c script` on node `node`, with `$SURGE` naming the `surge` binary.
    pub fn shell_on(&self, node: &str, script: &str) -> Command {
        let mut cmd = self.on_node(Command::new("bash"), node);
        cmd.arg("-c").arg(script).env("SURGE", binary("surge"));
        cmd
    }

    /// A `surge-test-client` command on node `node`.
    pub fn test_client(&self, node: &str) -> Command {
        self.on_node(Command::new(binary("surge-test-client")), node)
    }

    /// `cmd` as a client on node `node` (see the module notes on local reads).
    fn on_node(&self, mut cmd: Command, node: &str) -> Command {
        cmd.env("SURGE_HOME", &self.home).env("SURGE_INSTANCE", &self.name).env("SURGE_NODE", node);
        cmd.env("SURGE_LOCAL_IO", if self.hosts_a_server(node) { "1" } else { "0" });
        cmd
    }

    /// True when a server of this instance listens on address `node`.
    pub fn hosts_a_server(&self, node: &str) -> bool {
        let desc = self.descriptor();
        desc["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .any(|s| s["addr"].as_str().is_some_and(|a| a.rsplit_once(':').is_some_and(|(ip, _)| ip == node)))
    }

    /// What the instance's mounts have logged so far (they share one log file); empty before
    /// the first mount.
    pub fn mount_log(&self) -> String {
        std::fs::read_to_string(self.home.join("instances").join(format!("{}.fuse.log", self.name))).unwrap_or_default()
    }

    /// What the instance's servers have logged so far, all of them one after the other.
    pub fn server_logs(&self) -> String {
        let descriptor = self.descriptor();
        let servers = descriptor["servers"].as_array().expect("the descriptor lists servers");
        servers
            .iter()
            .map(|s| {
                std::fs::read_to_string(Path::new(s["root"].as_str().expect("a server's root")).join("server.log")).unwrap_or_default()
            })
            .collect()
    }

    /// Where `surge up` wrote the instance's descriptor.
    pub fn descriptor_path(&self) -> PathBuf {
        self.home.join("instances").join(format!("{}.json", self.name))
    }

    pub fn descriptor(&self) -> serde_json::Value {
        let path = self.descriptor_path();
        serde_json::from_str(&std::fs::read_to_string(path).expect("descriptor")).expect("descriptor json")
    }

    /// A SURGE_HOME for user `uid` holding their own copy of the instance's descriptor and
    /// token (0600, theirs), as an admin hands the users of a shared instance; made under `dir`.
    pub fn home_for(&self, dir: &Path, uid: u32, gid: u32) -> PathBuf {
        let home = dir.join(format!("home-{uid}"));
        let instances = home.join("instances");
        std::fs::create_dir_all(&instances).unwrap();
        let mut desc = self.descriptor();
        let token = instances.join(format!("{}.token", self.name));
        std::fs::copy(desc["token_path"].as_str().unwrap(), &token).unwrap();
        desc["token_path"] = serde_json::Value::String(token.display().to_string());
        std::fs::write(instances.join(format!("{}.json", self.name)), desc.to_string()).unwrap();
        for path in [&home, &instances, &token, &instances.join(format!("{}.json", self.name))] {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
        }
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        home
    }

    /// Client library handle from this test process, as node `node`.
    pub fn client(&self, node: &str) -> surge_client::Client {
        self.client_with(surge_client::ClientOptions {
            node: Some(node.parse().unwrap()),
            local_io: self.hosts_a_server(node),
            ..Default::default()
        })
    }

    /// Client library handle from this test process, with these options.
    pub fn client_with(&self, opts: surge_client::ClientOptions) -> surge_client::Client {
        let desc = surge_client::InstanceDescriptor::load_from(&self.descriptor_path()).expect("descriptor");
        surge_client::Client::new(&desc, opts).expect("client")
    }
}

/// Whether the mount `label` of instance `instance` takes its requests over io_uring (true) or
/// /dev/fuse, so that one run of the suite covers both transports: half of the instances
/// (by a hash of their name) start with io_uring, and the mount labelled `b` (a two-node
/// test's second node) takes the other transport than its instance's others. Where the kernel
/// does not offer FUSE over io_uring, the mount falls back to /dev/fuse by itself.
/// `SURGE_FUSE_IO_URING=0` (or `1`) in the test's environment puts every mount on one.
pub fn fuse_transport_of(instance: &str, label: &str) -> bool {
    // FNV-1a: stable across runs and Rust versions, so a failure reproduces on its transport.
    let hash = instance.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    (hash & 1 == 0) != (label == "b")
}

/// A FUSE mount of an instance; unmounted when dropped.
pub struct Mount<'a> {
    instance: &'a Instance,
    pub dir: PathBuf,
}

impl Instance {
    /// `surge mount` on a fresh directory, as node `node` (a server's address: with local reads).
    pub fn mount(&self, label: &str, node: &str) -> Mount<'_> {
        self.mount_with(label, node, &[])
    }

    /// [`Instance::mount`] with these environment variables for the mount process (e.g.
    /// `SURGE_TIMEOUT_SECS`). Unless they or the test's own environment set
    /// `SURGE_FUSE_IO_URING`, the mount takes the transport [`fuse_transport_of`] picks.
    pub fn mount_with(&self, label: &str, node: &str, env: &[(&str, &str)]) -> Mount<'_> {
        let dir = std::env::temp_dir().join(format!("surge-test-mnt-{}-{label}-{}", self.name, std::process::id()));
        let chosen = env.iter().any(|(k, _)| *k == "SURGE_FUSE_IO_URING") || std::env::var_os("SURGE_FUSE_IO_URING").is_some();
        let transport = (!chosen).then(|| ("SURGE_FUSE_IO_URING", if fuse_transport_of(&self.name, label) { "1" } else { "0" }));
        let out = self
            .on_node(Command::new(binary("surge")), node)
            .envs(transport)
            .envs(env.iter().copied())
            .args(["mount", &self.name, dir.to_str().unwrap(), "--node", node])
            .output()
            .expect("run surge mount");
        assert!(out.status.success(), "surge mount failed: {}", text(&out));
        Mount { instance: self, dir }
    }
}

impl Mount<'_> {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let mounted = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().contains(self.dir.to_str().unwrap());
        if !mounted {
            // The test unmounted it itself.
            let _ = std::fs::remove_dir(&self.dir);
            return;
        }
        let out = self.instance.surge(&["umount", self.dir.to_str().unwrap()]);
        if !out.status.success() {
            eprintln!("umount {} failed: {}", self.dir.display(), text(&out));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A user of this machine, as its user database knows it.
pub struct User {
    pub name: String,
    pub uid: u32,
    /// The primary group (its passwd entry's).
    pub gid: u32,
}

/// The user named `name`, which must exist (`id` knows it).
pub fn user(name: &str) -> User {
    let id = |flag: &str| sh(&format!("id {flag} {name}")).trim().parse().unwrap();
    User { name: name.to_string(), uid: id("-u"), gid: id("-g") }
}

/// A group made for one test (`groupadd`), with existing users as members (`gpasswd -a`: a
/// supplementary group of theirs, not their primary one). Deleted with its memberships when
/// dropped, also when the test fails half-way; its name has the test's tag and pid.
pub struct TempGroup {
    pub name: String,
    pub gid: u32,
}

impl TempGroup {
    pub fn new(tag: &str, members: &[&str]) -> TempGroup {
        let name = format!("surge{tag}{}", std::process::id());
        assert!(name.len() <= 32, "group name {name} too long");
        sh(&format!("groupadd {name}"));
        let mut group = TempGroup { name, gid: 0 };
        group.gid = sh(&format!("getent group {}", group.name)).split(':').nth(2).unwrap().parse().unwrap();
        for member in members {
            sh(&format!("gpasswd -a {member} {}", group.name));
        }
        group
    }
}

impl Drop for TempGroup {
    fn drop(&mut self) {
        let out = Command::new("groupdel").arg(&self.name).output().expect("run groupdel");
        if !out.status.success() {
            eprintln!("groupdel {} failed: {}", self.name, text(&out));
        }
    }
}

/// Unmounts `dir` with umount(8), as an admin or xfstests does. A test process's other threads
/// start children all the time, and a child holds copies of the test's open files from its
/// fork until its exec closes them: a mount that is busy is tried again for up to 10 s, then
/// the test fails naming the processes that hold it.
pub fn umount(dir: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("umount").arg(dir).output().expect("run umount");
        if out.status.success() {
            return;
        }
        let busy = text(&out).contains("busy");
        if !busy || std::time::Instant::now() > deadline {
            panic!("`umount {}` failed: {}; held by: {:?}", dir.display(), text(&out), holders_of(dir));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The processes (pid and command) whose working directory or an open file is under `dir`.
fn holders_of(dir: &Path) -> Vec<String> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return vec![] };
    let under = |link: PathBuf| std::fs::read_link(link).is_ok_and(|target| target.starts_with(dir));
    procs
        .flatten()
        .filter(|p| p.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|p| {
            under(p.path().join("cwd")) || std::fs::read_dir(p.path().join("fd")).is_ok_and(|fds| fds.flatten().any(|fd| under(fd.path())))
        })
        .map(|p| {
            format!("{} {}", p.file_name().to_string_lossy(), std::fs::read_to_string(p.path().join("comm")).unwrap_or_default().trim())
        })
        .collect()
}

/// Runs a shell command line, panicking with its output if it fails.
pub fn sh(cmdline: &str) -> String {
    let out = Command::new("bash").arg("-c").arg(cmdline).output().expect("run bash");
    assert!(out.status.success(), "`{cmdline}` failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).to_string()
}

impl Drop for Instance {
    fn drop(&mut self) {
        let out = self.surge(&["down", &self.name, "--force"]);
        if !out.status.success() {
            eprintln!("surge down {} failed: {}", self.name, text(&out));
        }
        let _ = std::fs::remove_dir_all(&self.home);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A number a long form of a test takes from the environment (`SURGE_FSX_OPS=100000 ...`), or
/// `default`; a value that is not a number fails the test rather than run the short form.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: a number")))
}

pub fn text(out: &Output) -> String {
    format!("status {}\nstdout: {}\nstderr: {}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Deterministic pseudo-random bytes (xorshift), so two processes can agree on content. Eight
/// bytes per step: this crate is built unoptimized (the workspace's Cargo.toml), and the tests
/// make gigabytes of it.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut data = vec![0u8; len.next_multiple_of(8)];
    for word in data.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        word.copy_from_slice(&x.to_le_bytes());
    }
    data.truncate(len);
    data
}

pub fn write_local(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

/// An access or default ACL in its xattr form, from entries written as setfacl's short form
/// with octal permissions: `u::6,u:1002:4,g::4,g:100:5,m::6,o::0`. Panics on an invalid one.
pub fn acl(text: &str) -> Vec<u8> {
    use surge_client::surge_proto::acl::{Acl, Entry, Tag};
    let entries = text
        .split(',')
        .map(|entry| {
            let fields: Vec<&str> = entry.split(':').collect();
            let [class, id, perm] = fields[..] else { panic!("ACL entry '{entry}': class:id:perm") };
            let uid_or_gid = || id.parse::<u32>().unwrap_or_else(|_| panic!("ACL entry '{entry}': a numeric id"));
            let tag = match (class, !id.is_empty()) {
                ("u", false) => Tag::UserObj,
                ("u", true) => Tag::User(uid_or_gid()),
                ("g", false) => Tag::GroupObj,
                ("g", true) => Tag::Group(uid_or_gid()),
                ("m", false) => Tag::Mask,
                ("o", false) => Tag::Other,
                _ => panic!("ACL entry '{entry}'"),
            };
            Entry { tag, perm: u32::from_str_radix(perm, 8).unwrap_or_else(|_| panic!("ACL entry '{entry}': octal permissions")) }
        })
        .collect();
    Acl::new(entries).unwrap_or_else(|e| panic!("ACL '{text}': {e}")).encode()
}
