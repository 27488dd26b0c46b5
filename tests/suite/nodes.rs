//! The test cluster's nodes (`slurm/nodes`): each node is a machine of its own as far as a
//! program on it can tell: its own hostname, address, /tmp, /run and local storage, its own
//! munged; only the shared file system and the configuration are seen by all, and everything
//! else passes between nodes over the network, which can be cut and healed; a node can be
//! killed whole and started again, and `down` leaves nothing behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use surge_tests::{binary, text};

/// A cluster of nodes made by `slurm/nodes up`, taken down on drop.
struct Nodes {
    dir: PathBuf,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../slurm/nodes")
}

impl Nodes {
    fn up(name: &str, nodes: &[&str]) -> Nodes {
        // SAFETY: geteuid(2) has no preconditions.
        assert!(unsafe { libc::geteuid() } == 0, "the cluster's nodes are namespaces: run this test as root");
        let dir = std::env::temp_dir().join(format!("surge-test-nodes-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cluster = Nodes { dir };
        let out = cluster.nodes(&["up"], nodes);
        assert!(out.status.success(), "slurm/nodes up: {}", text(&out));
        for node in nodes {
            assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{node}=10.")), "no address printed for {node}: {}", text(&out));
        }
        cluster
    }

    /// `slurm/nodes ACTION DIR ARGS...`
    fn nodes(&self, action: &[&str], args: &[&str]) -> Output {
        let (first, rest) = action.split_first().unwrap();
        Command::new(script()).arg(first).arg(&self.dir).args(rest).args(args).output().unwrap()
    }

    /// Runs `sh -c CMD` on `node` (as `user`, when given), its stdin `input`.
    fn run_as(&self, node: &str, user: Option<&str>, cmd: &str, input: &[u8]) -> Output {
        use std::io::Write;
        let mut command = Command::new(script());
        command.args(["run", self.dir.to_str().unwrap(), node]);
        if let Some(user) = user {
            command.args(["--user", user]);
        }
        let mut child =
            command.args(["--", "sh", "-c", cmd]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    fn run(&self, node: &str, cmd: &str) -> String {
        let out = self.run_as(node, None, cmd, b"");
        assert!(out.status.success(), "on {node}: {cmd}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn pfs(&self) -> PathBuf {
        self.dir.join("pfs")
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let out = self.nodes(&["down"], &[]);
        if !std::thread::panicking() {
            assert!(out.status.success(), "slurm/nodes down: {}", text(&out));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits for a TCP listener on `node` port 7000 that answers with its hostname; connects from
/// `from` by name. The answer, or the error.
fn ask(cluster: &Nodes, from: &str, to: &str) -> String {
    let probe = format!(
        "timeout 5 python3 -c 'import socket\ntry:\n s=socket.create_connection((\"{to}\",7000),timeout=2); print(s.recv(100).decode())\nexcept OSError as e: print(\"failed:\", e)'"
    );
    cluster.run(from, &probe)
}

fn serve_hostname(cluster: &Nodes, node: &str) -> std::process::Child {
    let server = "import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(('0.0.0.0',7000)); s.listen()\nopen('/tmp/listening','w').close()\nwhile True:\n c,a=s.accept(); c.sendall((socket.gethostname()+' saw '+a[0]).encode()); c.close()";
    let mut child =
        Command::new(script()).args(["run", cluster.dir.to_str().unwrap(), node, "--", "python3", "-c", server]).spawn().unwrap();
    for _ in 0..100 {
        if cluster.run(node, "test -e /tmp/listening && echo yes || true") == "yes" {
            return child;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the listener on {node} did not start");
}

#[test]
fn nodes_are_separate_machines_joined_by_a_network_that_can_fail() {
    let cluster = Nodes::up("separate", &["head", "n1", "n2"]);
    let dir = cluster.dir.display().to_string();
    // Names and addresses of their own.
    assert_eq!(cluster.run("n1", "hostname"), "n1");
    assert_eq!(cluster.run("n2", "hostname"), "n2");
    let head = String::from_utf8_lossy(&cluster.nodes(&["addr"], &["head"]).stdout).trim().to_string();
    assert_eq!(cluster.run("n1", "getent hosts head | cut -d' ' -f1"), head);

    // Private /tmp, /run and local storage; the shared file system at the same path as here.
    cluster.run(
        "n1",
        &format!("echo mine > /tmp/t && echo mine > /run/r && echo local > {dir}/nodes/n1/local/l && echo shared > {dir}/pfs/s"),
    );
    assert_eq!(cluster.run("n2", &format!("ls /tmp /run {dir}/nodes/n2/local | grep -c -x -e t -e r -e l || true")), "0");
    assert_eq!(cluster.run("n2", &format!("cat {dir}/pfs/s")), "shared");
    assert_eq!(std::fs::read_to_string(cluster.pfs().join("s")).unwrap(), "shared\n");
    assert_eq!(cluster.run("n2", &format!("test -e {dir}/nodes/n1 && echo seen || echo hidden")), "hidden", "another node's storage");
    assert_eq!(cluster.run("n2", &format!("touch {dir}/etc/x 2>/dev/null && echo written || echo read-only")), "read-only");

    // One munge key: a credential made on n1 for nobody is decoded on n2, as nobody.
    let credential = cluster.run_as("n1", Some("65534"), "munge -n", b"");
    assert!(credential.status.success(), "munge on n1: {}", text(&credential));
    let decoded = cluster.run_as("n2", None, "unmunge", &credential.stdout);
    assert!(decoded.status.success(), "unmunge on n2: {}", text(&decoded));
    assert!(String::from_utf8_lossy(&decoded.stdout).contains("UID:             nobody (65534)"), "{}", text(&decoded));
    assert_eq!(cluster.run_as("n1", Some("65534"), "id -u", b"").stdout, b"65534\n");

    // The network: by name, from the node's own address; cut, then healed.
    let mut listener = serve_hostname(&cluster, "head");
    let n1 = String::from_utf8_lossy(&cluster.nodes(&["addr"], &["n1"]).stdout).trim().to_string();
    assert_eq!(ask(&cluster, "n1", "head"), format!("head saw {n1}"));
    assert!(cluster.nodes(&["cut"], &["head"]).status.success());
    assert!(ask(&cluster, "n1", "head").starts_with("failed"), "a cut node answered");
    assert!(cluster.nodes(&["heal"], &["head"]).status.success());
    assert_eq!(ask(&cluster, "n1", "head"), format!("head saw {n1}"));

    // Killed whole: its listener and munged are gone, the others run on; started again, its
    // munged works and its local storage is as it was.
    assert!(cluster.nodes(&["kill"], &["n1"]).status.success());
    assert!(cluster.nodes(&["kill"], &["head"]).status.success());
    let _ = listener.wait();
    assert!(ask(&cluster, "n2", "head").starts_with("failed"), "a killed node answered");
    assert!(cluster.run_as("n1", None, "munge -n", b"").status.code() != Some(0), "munged outlived its node");
    assert!(cluster.run_as("n2", None, "munge -n", b"").status.success(), "another node's munged went with it");
    assert!(cluster.nodes(&["start"], &["n1"]).status.success());
    assert!(cluster.run_as("n1", None, "munge -n", b"").status.success(), "munged did not come back");
    assert_eq!(cluster.run("n1", &format!("cat {dir}/nodes/n1/local/l")), "local");
}

#[test]
fn down_leaves_no_namespace_link_mount_or_process() {
    let cluster = Nodes::up("down", &["n1", "bb1"]);
    let dir = cluster.dir.clone();
    let netns_before = Command::new("ip").args(["netns", "list"]).output().unwrap().stdout;
    assert!(String::from_utf8_lossy(&netns_before).lines().filter(|l| l.contains("-n1") || l.contains("-bb1")).count() >= 2);
    let out = cluster.nodes(&["down"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.to_str().unwrap()), "mounts left under {}", dir.display());
    // Other test runs may have their own nodes named alike: count only ours, by the tag.
    let ours = |l: &str| l.starts_with(&format!("sg{}", tag_of(&dir)));
    let after = Command::new("ip").args(["netns", "list"]).output().unwrap().stdout;
    assert!(String::from_utf8_lossy(&after).lines().all(|l| !ours(l)), "namespaces left: {}", String::from_utf8_lossy(&after));
    let links = Command::new("ip").args(["-br", "link"]).output().unwrap().stdout;
    assert!(String::from_utf8_lossy(&links).lines().all(|l| !ours(l) && !l.starts_with(&format!("sgbr{}", tag_of(&dir)))), "links left");
    // Nothing runs in the namespaces the nodes had: their munged went with them.
    let munged = Command::new("pgrep").args(["-f", &format!("{}/etc/munge", dir.display())]).output().unwrap();
    assert!(munged.stdout.is_empty(), "munged left: {}", String::from_utf8_lossy(&munged.stdout));
}

/// The tag `slurm/nodes` puts in the kernel's names for a cluster in `dir`.
fn tag_of(dir: &Path) -> String {
    let out = Command::new("sh").arg("-c").arg(format!("printf '%s' '{}' | sha256sum | cut -c1-4", dir.display())).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The manager on the head node answers the other nodes over TCP, each request inside a MUNGE
/// credential: the caller is who munged says made it. Anyone may read; only root and the
/// trusted uids (SlurmUser) may change anything; a forged credential and a replayed one are
/// refused, and nothing they carry is done.
#[test]
fn the_manager_answers_other_nodes_as_munged_vouches() {
    let cluster = Nodes::up("manager", &["head", "n1", "bb2"]);
    let dir = cluster.dir.display().to_string();
    let head = String::from_utf8_lossy(&cluster.nodes(&["addr"], &["head"]).stdout).trim().to_string();
    // bb2 is cut off: a connection to it waits for its timeout; bb1's agent does not run.
    let bb2 = String::from_utf8_lossy(&cluster.nodes(&["addr"], &["bb2"]).stdout).trim().to_string();
    let cut = cluster.nodes(&["cut"], &["bb2"]);
    assert!(cut.status.success(), "{}", text(&cut));
    let etc = cluster.dir.join("etc");
    std::fs::write(etc.join("cluster.key"), "ab".repeat(32)).unwrap();
    std::fs::set_permissions(etc.join("cluster.key"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let slurm_uid = users::slurm_uid();
    std::fs::write(
        etc.join("manager.toml"),
        format!(
            "socket = \"/run/surge/manager.sock\"\nlisten = \"{head}:6820\"\ntrusted_uids = [{slurm_uid}]\n\
             state_dir = \"{dir}/nodes/head/local/manager\"\njob_root = \"/var/spool/surge/jobs\"\n\
             key_file = \"{dir}/etc/cluster.key\"\ndefault_pool = \"bb\"\n\n[[pool]]\nname = \"bb\"\nkind = \"standing\"\n\
             granularity = \"1GiB\"\nnodes = [ {{ name = \"bb1\", agent = \"{head}:7300\", capacity = \"4GiB\" }}, \
             {{ name = \"bb2\", agent = \"{bb2}:7300\", capacity = \"4GiB\" }} ]\n"
        ),
    )
    .unwrap();
    let mut manager = Command::new(script())
        .args(["run", &dir, "head", "--"])
        .arg(binary("surge-manager"))
        .args(["--config", &format!("{dir}/etc/manager.toml")])
        .stderr(std::fs::File::create(cluster.pfs().join("manager.log")).unwrap())
        .spawn()
        .unwrap();
    let surge = binary("surge").display().to_string();
    let ask = |user: Option<&str>, args: &str| cluster.run_as("n1", user, &format!("SURGE_MANAGER={head}:6820 {surge} bb {args}"), b"");

    // Asked while the manager waits for the cut-off node, a status is answered once the
    // manager has reconciled (a hook inside slurmctld, as `bb pools`, would give up after its
    // bound instead).
    let status = cluster.run_as("n1", Some("65534"), &format!("SURGE_MANAGER={head}:6820 {surge} status"), b"");
    assert!(status.status.success(), "status as nobody on n1: {}\nmanager: {}", text(&status), manager_log(&cluster));
    assert!(manager_log(&cluster).contains("answering requests"), "answered before reconciling:\n{}", manager_log(&cluster));

    // Anyone reads: the pools, from another node.
    let pools = ask(Some("65534"), "pools");
    assert!(pools.status.success(), "pools as nobody on n1: {}\nmanager: {}", text(&pools), manager_log(&cluster));
    assert!(String::from_utf8_lossy(&pools.stdout).contains("bb"), "{}", text(&pools));

    // Both burst-buffer nodes failed to answer the reconciliation: a job placed on them fails
    // at once, saying so, rather than waiting out another timeout per node.
    std::fs::write(cluster.pfs().join("job.sh"), "#!/bin/sh\n#DW jobdw capacity=6GiB access_mode=striped type=scratch\n").unwrap();
    let setup = ask(None, &format!("setup --job 77 --uid 65534 --gid 65534 {}", cluster.pfs().join("job.sh").display()));
    assert!(!setup.status.success() && text(&setup).contains("unreachable"), "a job on unreachable nodes: {}", text(&setup));

    // Changes: refused to nobody, by the uid munged vouches for; done for SlurmUser and root.
    let refused = ask(Some("65534"), "teardown --job 4242");
    assert!(!refused.status.success() && text(&refused).contains("uid 65534"), "teardown as nobody: {}", text(&refused));
    for user in [Some(slurm_uid.to_string()), None] {
        let done = ask(user.as_deref(), "teardown --job 4242");
        assert!(!text(&done).contains("permission denied"), "teardown as {user:?}: {}", text(&done));
    }

    // A forged credential, and a real one sent twice: refused, the second as a replay.
    let request = r#"{"teardown":{"job":4243,"hurry":false}}"#;
    let credential = cluster.run_as("n1", None, &format!("munge -s '{request}'"), b"");
    assert!(credential.status.success(), "{}", text(&credential));
    let credential = String::from_utf8_lossy(&credential.stdout).trim().to_string();
    let send = |munge: &str| {
        let line = serde_json::json!({ "munge": munge }).to_string();
        let probe = format!(
            "python3 -c 'import socket,sys; s=socket.create_connection((\"{head}\",6820),timeout=10); s.sendall(sys.stdin.buffer.read()); print(s.makefile().readline().strip())'"
        );
        let out = cluster.run_as("n1", None, &probe, format!("{line}\n").as_bytes());
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // The same credential with one character of its body changed.
    let mut forged = credential.clone().into_bytes();
    let middle = forged.len() / 2;
    forged[middle] = if forged[middle] == b'A' { b'B' } else { b'A' };
    let forged = send(&String::from_utf8(forged).unwrap());
    assert!(forged.contains("refused"), "a forged credential was taken: {forged}");
    let first = send(&credential);
    assert!(!first.contains("refused"), "a real credential was refused: {first}");
    let replayed = send(&credential);
    assert!(replayed.contains("refused") && replayed.contains("Replayed"), "a replayed credential was taken: {replayed}");

    let _ = manager.kill();
    let _ = manager.wait();
}

fn manager_log(cluster: &Nodes) -> String {
    std::fs::read_to_string(cluster.pfs().join("manager.log")).unwrap_or_default()
}

mod users {
    /// SlurmUser's uid: the `slurm` user Debian's slurm packages make.
    pub fn slurm_uid() -> u32 {
        let out = std::process::Command::new("id").args(["-u", "slurm"]).output().unwrap();
        assert!(out.status.success(), "no `slurm` user: apt-get install slurm-wlm makes it");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }
}
