//! The `surge` command as a newcomer and a job script use it: what guards their data and their
//! allocation (a closed stdout, a relative root, a capacity the device cannot hold).

use std::process::Command;

use surge_tests::{binary, pattern, scratch, text, user, TempGroup};

/// A `surge` command with its own SURGE_HOME, run from `cwd`.
fn surge(home: &std::path::Path, cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(binary("surge")).args(args).env("SURGE_HOME", home).current_dir(cwd).output().expect("run surge")
}

/// `surge up ... | head -1` under `set -o pipefail`: the reader goes away after one line, and
/// the command must still succeed (its instance is up; a failing script would leak it).
#[test]
fn a_closed_stdout_fails_no_command() {
    let dir = scratch("cli-pipe");
    std::fs::create_dir_all(dir.join("home")).unwrap();
    let root = format!("/dev/shm/surge-test-cli-pipe-{}", std::process::id());
    let script = format!(
        "set -o pipefail; {surge} up --name piped --servers 2 --capacity 256M --root {root} | head -1 && {surge} status piped | head -1",
        surge = binary("surge").display()
    );
    let out = Command::new("bash").arg("-c").arg(&script).env("SURGE_HOME", dir.join("home")).output().unwrap();
    let down = surge(&dir.join("home"), &dir, &["down", "piped", "--force"]);
    assert!(out.status.success(), "a pipeline with head failed: {}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("instance 'piped' up in"), "{}", text(&out));
    assert!(down.status.success(), "{}", text(&down));
}

/// `--root relative` is made absolute at `up`: `down` from elsewhere removes the chunk files.
#[test]
fn a_relative_root_is_removed_by_down_from_another_directory() {
    let dir = scratch("cli-relative");
    let (home, work, elsewhere) = (dir.join("home"), dir.join("work"), dir.join("elsewhere"));
    for d in [&home, &work, &elsewhere] {
        std::fs::create_dir_all(d).unwrap();
    }
    let up = surge(&home, &work, &["up", "--name", "rel", "--servers", "2", "--capacity", "64M", "--root", "bb"]);
    assert!(up.status.success(), "{}", text(&up));
    assert!(work.join("bb/rel/server-0").is_dir());
    let down = surge(&home, &elsewhere, &["down", "rel"]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(!work.join("bb").exists(), "chunk directories left behind: {:?}", std::fs::read_dir(work.join("bb")).map(|d| d.count()));
}

/// A capacity larger than the free space of --root is refused before anything starts, saying
/// what to do; nothing is left behind.
#[test]
fn a_capacity_the_device_cannot_hold_is_refused() {
    let dir = scratch("cli-capacity");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let free = {
        let out = Command::new("df").args(["--output=avail", "-B1", "/dev/shm"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse::<u64>().unwrap()
    };
    let too_much = format!("{}", free + (8 << 30));
    let root = format!("/dev/shm/surge-test-cli-capacity-{}", std::process::id());
    let up = surge(&home, &dir, &["up", "--name", "big", "--capacity", &too_much, "--root", &root]);
    assert!(!up.status.success(), "a capacity beyond the free space was accepted");
    let message = String::from_utf8_lossy(&up.stderr);
    assert!(message.contains("free") && message.contains("--capacity"), "the error says why and what to do: {message}");
    assert!(!std::path::Path::new(&root).exists(), "nothing is created");
    assert!(!home.join("instances/big.json").exists() && !home.join("instances/big.token").exists());
}

/// One server asked for a share its device cannot hold refuses to start, naming the cause
/// (this is what catches it on another node, where `surge up` cannot look).
#[test]
fn a_server_refuses_a_share_its_device_cannot_hold() {
    let dir = scratch("cli-server-share");
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "ab".repeat(32)).unwrap();
    let out = Command::new(binary("surge-server"))
        .args(["--listen", "127.0.0.1:0", "--index", "0", "--count", "1", "--capacity", &u64::MAX.to_string()])
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--token-file")
        .arg(&token)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not fit"), "{}", text(&out));
}

/// The command helps a newcomer: a mistyped command gets a suggestion, the help names every
/// component, and with one instance on the machine no `--instance` is needed; listings read
/// as `ls -l` does and parse as JSON.
#[test]
fn the_command_guides_a_newcomer() {
    let dir = scratch("cli-texts");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let typo = surge(&home, &dir, &["stag"]);
    assert!(!typo.status.success());
    assert!(String::from_utf8_lossy(&typo.stderr).contains("did you mean 'stage'"), "{}", text(&typo));
    let help = String::from_utf8_lossy(&surge(&home, &dir, &["--help"]).stdout).to_string();
    assert!(help.contains("sim") && help.contains("predict") && help.contains("powers of 1000"), "{help}");

    let root = format!("/dev/shm/surge-test-cli-texts-{}", std::process::id());
    let up = surge(&home, &dir, &["up", "--name", "texts", "--servers", "2", "--capacity", "64M", "--root", &root]);
    assert!(up.status.success(), "{}", text(&up));
    std::fs::write(dir.join("local.txt"), b"hello").unwrap();
    let put = surge(&home, &dir, &["put", "local.txt", "/hello.txt"]);
    assert!(put.status.success() && String::from_utf8_lossy(&put.stdout).contains("5 B in"), "{}", text(&put));
    let ls = surge(&home, &dir, &["ls", "/"]);
    assert!(String::from_utf8_lossy(&ls.stdout).contains("-rw-r--r--"), "{}", text(&ls));
    let json = surge(&home, &dir, &["ls", "--json", "/"]);
    let entries: serde_json::Value = serde_json::from_slice(&json.stdout).expect("ls --json is JSON");
    assert_eq!(entries[0]["name"], "hello.txt");
    assert_eq!(entries[0]["size"], 5);
    let stat = surge(&home, &dir, &["stat", "/hello.txt"]);
    assert!(String::from_utf8_lossy(&stat.stdout).contains(" UTC"), "a readable time: {}", text(&stat));
    assert!(surge(&home, &dir, &["down", "texts"]).status.success());
}

/// `surge check-script`, what the Slurm submit hook runs: a script's #DW problems, each with
/// its line, and a non-zero exit; a good script's request in words or JSON.
#[test]
fn check_script_names_every_problem_with_its_line() {
    let dir = scratch("cli-dw");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#DW jobdw capacity=1TB access_mode=striped type=scratch\n\
         #DW stage_in type=file source=input.h5 destination=$DW_JOB_STRIPED/input.h5\nsrun ./sim\n\
         #DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=/pfs/out\n",
    )
    .unwrap();
    let out = surge(&dir, &dir, &["check-script", script.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 problem(s)") && stderr.contains("line 3: source=input.h5: a parallel-file-system path must be absolute"),
        "{stderr}"
    );
    std::fs::write(&script, std::fs::read_to_string(&script).unwrap().replace("source=input.h5", "source=/pfs/input.h5")).unwrap();
    let out = surge(&dir, &dir, &["check-script", script.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let request: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(request["jobdw"]["capacity"], 1_000_000_000_000u64);
    assert_eq!(request["stage_out"][0]["kind"], "directory");
    assert_eq!(request["stage_out"][0]["line"], 5, "the stage-out after the commands was read");
}

/// A manager and two burst-buffer nodes' agents on this machine (loopback addresses of the
/// test's own), no workload manager: the hooks are called as Slurm would, with `surge bb`.
/// Dropped, it tears down what the jobs left and stops what it started.
struct LocalManager {
    dir: surge_tests::Scratch,
    children: Vec<std::process::Child>,
    jobs: Vec<u64>,
}

impl LocalManager {
    fn up(test: &str) -> LocalManager {
        let dir = scratch(test);
        std::fs::create_dir_all(dir.join("pfs")).unwrap();
        std::fs::set_permissions(&*dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let key = dir.join("cluster.key");
        std::fs::write(&key, "ab".repeat(32)).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        // Addresses of this manager's own: tests of this file run side by side.
        static MANAGERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nth = MANAGERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let net = format!("127.{}.{}", 77 + nth, std::process::id() % 250);
        let mut children = Vec::new();
        let mut nodes = Vec::new();
        for n in [1, 2] {
            let (listen, root) = (format!("{net}.{n}:7300"), dir.join(format!("bb{n}")));
            let log = std::fs::File::create(dir.join(format!("agent-bb{n}.log"))).unwrap();
            let agent = Command::new(binary("surge-agent"))
                .args(["--listen", &listen, "--root", root.to_str().unwrap(), "--key-file", key.to_str().unwrap()])
                .stderr(log)
                .spawn()
                .unwrap();
            children.push(agent);
            nodes.push(format!("{{ name = \"bb{n}\", agent = \"{listen}\", capacity = \"256MiB\" }}"));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::net::TcpStream::connect(&listen).is_err() {
                assert!(std::time::Instant::now() < deadline, "agent on {listen} does not listen");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let d = dir.display();
        std::fs::write(
            dir.join("manager.toml"),
            format!(
                "socket = \"{d}/manager.sock\"\nstate_dir = \"{d}/state\"\njob_root = \"{d}/jobs\"\nkey_file = \"{d}/cluster.key\"\n\
                 default_pool = \"bb\"\n\n[[pool]]\nname = \"bb\"\nkind = \"standing\"\ngranularity = \"64MiB\"\nnodes = [ {} ]\n",
                nodes.join(", ")
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("manager.log")).unwrap();
        children.push(Command::new(binary("surge-manager")).arg("--config").arg(dir.join("manager.toml")).stderr(log).spawn().unwrap());
        LocalManager { dir, children, jobs: Vec::new() }
    }

    /// `surge ARGS` against this manager, as root or as `uid` (its own gid).
    fn surge_as(&self, uid: Option<u32>, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(binary("surge"));
        cmd.args(args).env("SURGE_MANAGER_SOCKET", self.dir.join("manager.sock")).env_remove("SURGE_MANAGER");
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, uid);
        }
        cmd.output().expect("run surge")
    }

    /// `surge ARGS` as root, which must succeed; its standard output.
    fn surge(&self, args: &[&str]) -> String {
        let out = self.surge_as(None, args);
        assert!(out.status.success(), "surge {args:?}: {}\nmanager: {}", text(&out), self.log());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The status as `uid` (root: `None`) is shown it, with `args` after `bb status`.
    fn status_as(&self, uid: Option<u32>, args: &[&str]) -> serde_json::Value {
        let out = self.surge_as(uid, &[&["bb", "status", "--json"], args].concat());
        assert!(out.status.success(), "bb status {args:?} as {uid:?}: {}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Slurm's setup of a job of `uid` (its own gid) with this script's `#DW` lines.
    fn setup(&mut self, job: u64, uid: u32, lines: &str) {
        self.setup_as(job, uid, uid, lines)
    }

    /// Slurm's setup of a job of `uid`:`gid` with this script's `#DW` lines.
    fn setup_as(&mut self, job: u64, uid: u32, gid: u32, lines: &str) {
        let script = self.dir.join(format!("job-{job}.sh"));
        std::fs::write(&script, format!("#!/bin/bash\n{lines}\n")).unwrap();
        self.jobs.push(job);
        let (job, uid, gid) = (job.to_string(), uid.to_string(), gid.to_string());
        self.surge(&["bb", "setup", "--job", &job, "--uid", &uid, "--gid", &gid, script.to_str().unwrap()]);
    }

    /// [`LocalManager::setup`] that may be refused: the command's output.
    fn try_setup(&mut self, job: u64, uid: u32, gid: u32, lines: &str) -> std::process::Output {
        let script = self.dir.join(format!("job-{job}.sh"));
        std::fs::write(&script, format!("#!/bin/bash\n{lines}\n")).unwrap();
        let out = self.surge_as(
            None,
            &["bb", "setup", "--job", &job.to_string(), "--uid", &uid.to_string(), "--gid", &gid.to_string(), script.to_str().unwrap()],
        );
        if out.status.success() {
            self.jobs.push(job);
        }
        out
    }

    /// A node's prolog (`node`) or epilog for `job`, as Slurm runs them: root, the job's
    /// variables; the node's notes under this test's directory.
    fn node_hook(&self, hook: &str, job: u64, node: &str) {
        let out = Command::new(binary("surge"))
            .args(["bb", hook])
            .env("SURGE_MANAGER_SOCKET", self.dir.join("manager.sock"))
            .env_remove("SURGE_MANAGER")
            .env("SURGE_NODE_STATE", self.dir.join(format!("node-{node}")))
            .env("SLURM_JOB_ID", job.to_string())
            .env("SLURMD_NODENAME", node)
            .env("SLURM_JOB_NODELIST", "")
            .output()
            .unwrap();
        assert!(out.status.success(), "{hook} of job {job}: {}\nmanager: {}", text(&out), self.log());
    }

    /// Kills the manager (as a crash would) and starts it again on the same state: it
    /// reconciles with the agents before it answers.
    fn restart_manager(&mut self) {
        let manager = self.children.last_mut().unwrap();
        manager.kill().unwrap();
        manager.wait().unwrap();
        let log = std::fs::OpenOptions::new().append(true).open(self.dir.join("manager.log")).unwrap();
        *manager = Command::new(binary("surge-manager")).arg("--config").arg(self.dir.join("manager.toml")).stderr(log).spawn().unwrap();
    }

    /// Where job `job`'s reservation `name` is mounted on a node.
    fn persistent_mount(&self, job: u64, name: &str) -> std::path::PathBuf {
        self.dir.join("jobs").join(job.to_string()).join("persistent").join(name)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("manager.log")).unwrap_or_default()
    }
}

/// `sh -c script` as `uid` with primary group `gid` and these supplementary groups (as a job's
/// processes run: slurmstepd gives them the user's groups).
fn shell_as(uid: u32, gid: u32, groups: &[u32], script: &str) -> std::process::Output {
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        format!("--groups={}", groups.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
    };
    Command::new("setpriv").args([&format!("--reuid={uid}"), &format!("--regid={gid}"), &groups, "sh", "-c", script]).output().unwrap()
}

impl Drop for LocalManager {
    fn drop(&mut self) {
        // Also after a test that failed half-way: the mounts the prologs made, the jobs' buffers
        // and the reservations go before the agents do.
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for point in info.lines().filter_map(|line| line.split(' ').nth(4)).filter(|p| p.starts_with(&*self.dir.to_string_lossy())) {
            let _ = Command::new("umount").arg("-l").arg(point).status();
        }
        // A manager the test stopped is not asked (a request would wait a minute for it).
        if !self.children.last_mut().is_some_and(|manager| matches!(manager.try_wait(), Ok(None))) {
            self.stop_children();
            return;
        }
        for job in &self.jobs {
            let _ = self.surge_as(None, &["bb", "teardown", "--job", &job.to_string(), "--hurry"]);
        }
        let listed = self.surge_as(None, &["reservation", "list", "--json"]);
        let reservations: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).unwrap_or_default();
        for name in reservations.iter().filter_map(|r| r["persistent"].as_str()) {
            let _ = self.surge_as(None, &["reservation", "destroy", name, "--hurry"]);
        }
        self.stop_children();
    }
}

impl LocalManager {
    fn stop_children(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The rows of one dwstat view, each split on whitespace, after its header and rule.
fn dwstat_rows(manager: &LocalManager, view: &str) -> Vec<Vec<String>> {
    manager
        .surge(&["dwstat", view])
        .lines()
        .skip(2)
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// What an administrator sees of the burst buffer, and what a user sees: dwstat's fragments
/// and nodes for a known placement, ids that stay the same while other jobs come and go,
/// states as the manager recorded them, and a user shown only their own sessions and stages
/// whatever they ask for (`scontrol show bbstat` on their behalf included).
#[test]
fn the_admins_view_is_stable_and_a_user_sees_only_their_own() {
    let (alice, bob) = (65534, 4242);
    let mut m = LocalManager::up("cli-status");
    let pfs = m.dir.join("pfs");
    // 192 MiB in 64 MiB units over two nodes of 256 MiB, one unit at a time to the node with
    // the most free: 128 MiB on bb1, 64 MiB on bb2.
    m.setup(
        101,
        alice,
        &format!(
            "#DW jobdw capacity=192MiB access_mode=striped type=scratch\n#DW stage_out type=file source=$DW_JOB_STRIPED/missing destination={}/out",
            pfs.display()
        ),
    );
    let instance = |status: &serde_json::Value, name: &str| {
        status["instances"].as_array().unwrap().iter().find(|i| i["name"] == name).cloned().unwrap()
    };
    let status = m.status_as(None, &[]);
    let job_101 = instance(&status, "job-101");
    let inst = job_101["id"].as_u64().unwrap().to_string();
    let frags: Vec<String> = job_101["servers"].as_array().unwrap().iter().map(|s| s["id"].as_u64().unwrap().to_string()).collect();

    let fragments = dwstat_rows(&m, "fragments");
    assert_eq!(
        fragments,
        [
            [&frags[0], "CA---", &inst, "128.0MiB", "64.0MiB", "bb1", "ready"],
            [&frags[1], "CA---", &inst, "64.0MiB", "64.0MiB", "bb2", "ready"],
        ]
    );
    let nodes = dwstat_rows(&m, "nodes");
    assert_eq!(
        nodes,
        [
            ["bb1", "bb", "64.0MiB", "256.0MiB", "128.0MiB", "128.0MiB", "1"],
            ["bb2", "bb", "64.0MiB", "256.0MiB", "64.0MiB", "192.0MiB", "1"]
        ]
    );

    // Two calls, nothing changed: the same ids. Another job (of another user) comes and goes:
    // job 101's session, instance, configuration and fragments keep theirs.
    let views = ["sessions", "instances", "configurations", "fragments"];
    let first: Vec<_> = views.iter().map(|v| dwstat_rows(&m, v)).collect();
    assert_eq!(views.iter().map(|v| dwstat_rows(&m, v)).collect::<Vec<_>>(), first);
    m.setup(
        102,
        bob,
        &format!(
            "#DW jobdw capacity=64MiB access_mode=striped type=scratch\n#DW stage_in type=file source={}/in destination=$DW_JOB_STRIPED/in",
            pfs.display()
        ),
    );
    let with_102: Vec<_> = views.iter().map(|v| dwstat_rows(&m, v)).collect();
    for (view, (before, now)) in views.iter().zip(first.iter().zip(&with_102)) {
        assert_eq!(&now[..before.len()], &before[..], "{view}: job 101's rows changed when job 102 came");
        assert!(now.len() > before.len(), "{view}: job 102 not shown");
    }
    assert_eq!(dwstat_rows(&m, "nodes")[1][4], "128.0MiB", "job 102's unit went to bb2, the node with the most free");

    // A user sees their own sessions and stages only, whatever they ask for; root sees what it
    // asks for. Instances and pools are everyone's.
    let jobs_of = |status: &serde_json::Value, what: &str| -> Vec<u64> {
        status[what].as_array().unwrap().iter().map(|s| s["job"].as_u64().unwrap()).collect()
    };
    for (uid, args) in [
        (Some(alice), &[][..]),
        (Some(alice), &["--uid", "4242"][..]),
        (Some(alice), &["--", "102", "101"][..]),
        (None, &["--uid", "65534"][..]),
    ] {
        let status = m.status_as(uid, args);
        assert_eq!(
            (jobs_of(&status, "sessions"), jobs_of(&status, "stages")),
            (vec![101], vec![101]),
            "as {uid:?} with {args:?}: {status}"
        );
        if args.is_empty() {
            assert_eq!(status["viewer"], serde_json::json!({"user": alice}));
            assert_eq!(status["instances"].as_array().unwrap().len(), 2, "instances are everyone's: {status}");
        }
    }
    let bobs = m.status_as(Some(bob), &[]);
    assert_eq!((jobs_of(&bobs, "sessions"), jobs_of(&bobs, "stages")), (vec![102], vec![102]));
    let unknown = m.status_as(None, &["--unknown-caller"]);
    assert!(jobs_of(&unknown, "sessions").is_empty() && jobs_of(&unknown, "stages").is_empty(), "{unknown}");
    let root = m.status_as(None, &[]);
    assert_eq!((jobs_of(&root, "sessions"), jobs_of(&root, "stages")), (vec![101, 102], vec![101, 102]));
    let one_job = m.status_as(None, &["102"]);
    assert_eq!((jobs_of(&one_job, "sessions"), jobs_of(&one_job, "instances")), (vec![102], vec![102]));
    // What the Lua hook runs for bob's `scontrol show bbstat stages` (Slurm 23.02+).
    let hook = String::from_utf8_lossy(&m.surge_as(None, &["bb", "status", "--uid", "4242", "--", "stages"]).stdout).into_owned();
    assert!(
        hook.starts_with("Sessions and stages of uid 4242's jobs only.") && hook.contains("/in") && !hook.contains("missing"),
        "{hook}"
    );
    let alices_dwstat = m.surge_as(Some(alice), &["dwstat", "sessions"]);
    let shown = String::from_utf8_lossy(&alices_dwstat.stdout).into_owned();
    assert!(shown.contains(" 101 ") && !shown.contains(" 102 "), "{}", text(&alices_dwstat));

    m.surge(&["bb", "teardown", "--job", "102"]);
    m.jobs.retain(|j| *j != 102);
    let without_102: Vec<_> = views.iter().map(|v| dwstat_rows(&m, v)).collect();
    assert_eq!(without_102, first, "job 101's rows changed when job 102 went");

    // States as the manager records them: the job ends, its stage-out fails (its source is
    // missing), and both say so.
    m.surge(&["bb", "post-run", "--job", "101"]);
    let session = |m: &LocalManager| dwstat_rows(m, "sessions").into_iter().find(|row| row[2] == "101").unwrap();
    assert_eq!((session(&m)[1].as_str(), session(&m)[6].as_str()), ("CA---", "ended"));
    let out = m.surge_as(Some(alice), &["bb", "data-out", "--job", "101"]);
    assert!(!out.status.success() && text(&out).contains("missing"), "{}", text(&out));
    assert_eq!((session(&m)[1].as_str(), session(&m)[6].as_str()), ("CAF--", "stage-out-failed"));
    let stage = &m.status_as(Some(alice), &[])["stages"][0];
    assert_eq!((stage["direction"].as_str(), stage["state"].as_str()), (Some("out"), Some("failed")), "{stage}");
    let bbstat = m.surge(&["bb", "status", "101"]);
    assert!(bbstat.contains("stage-out-failed") && bbstat.contains("failed"), "{bbstat}");
}

/// The servers an agent starts for a job run as its user with the user's groups, as the
/// job's own processes do: the job's stage-in reads a directory its user may read only
/// through a supplementary group (0750), its stage-out writes into one (2770: the file gets
/// the group). Another user's job is refused the same directory.
#[test]
fn a_jobs_stages_reach_what_its_user_reaches_through_a_group() {
    let (member, stranger) = (user("games"), user("nobody"));
    let group = TempGroup::new("cli", &[&member.name]);
    let mut m = LocalManager::up("cli-groups");
    let (input, results) = (m.dir.join("pfs/input"), m.dir.join("pfs/results"));
    for (dir, mode) in [(&input, 0o750), (&results, 0o2770)] {
        std::fs::create_dir_all(dir).unwrap();
        std::os::unix::fs::chown(dir, Some(0), Some(group.gid)).unwrap();
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    let data = pattern(201, (2 << 20) + 7);
    std::fs::write(input.join("in.dat"), &data).unwrap();
    std::os::unix::fs::chown(input.join("in.dat"), Some(0), Some(group.gid)).unwrap();
    std::fs::set_permissions(input.join("in.dat"), std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();

    m.setup_as(
        201,
        member.uid,
        member.gid,
        &format!(
            "#DW jobdw capacity=64MiB access_mode=striped type=scratch\n\
             #DW stage_in type=file source={}/in.dat destination=$DW_JOB_STRIPED/in.dat\n\
             #DW stage_out type=file source=$DW_JOB_STRIPED/in.dat destination={}/out.dat",
            input.display(),
            results.display()
        ),
    );
    m.surge(&["bb", "data-in", "--job", "201"]);
    m.surge(&["bb", "post-run", "--job", "201"]);
    m.surge(&["bb", "data-out", "--job", "201"]);
    let out = results.join("out.dat");
    assert!(std::fs::read(&out).unwrap() == data, "staged-out bytes differ");
    let meta = std::fs::metadata(&out).unwrap();
    assert_eq!(
        (std::os::unix::fs::MetadataExt::uid(&meta), std::os::unix::fs::MetadataExt::gid(&meta)),
        (member.uid, group.gid),
        "the user's file, with the directory's group"
    );

    m.setup_as(
        202,
        stranger.uid,
        stranger.gid,
        &format!(
            "#DW jobdw capacity=64MiB access_mode=striped type=scratch\n\
             #DW stage_in type=file source={}/in.dat destination=$DW_JOB_STRIPED/in.dat",
            input.display()
        ),
    );
    let denied = m.surge_as(None, &["bb", "data-in", "--job", "202"]);
    assert!(!denied.status.success() && text(&denied).contains("Permission denied"), "{}", text(&denied));
}

/// A reservation an administrator makes without a job, for a user, shared with a group and a
/// user: `surge reservation list` shows whom with; a job of a member (its group the one shared
/// with) and of the listed user may use it, a stranger's is refused, and so is a member's that
/// would stage into it (stages run as the owner); mounted by the prolog for the member, its
/// root lets the member in through the group (a supplementary one too) and keeps the same uid
/// out without it; what the member writes the listed user reads and writes (the root's default
/// ACL); a member may destroy it neither in a job nor outside one; a plain user may not make
/// one (user_reservations is off); the administrator destroys it once the jobs are done.
#[test]
fn a_reservation_shared_with_a_group_lets_its_members_in_and_no_one_else() {
    let (owner, member, listed, stranger, team) = (4201, 4202, 4203, 4204, 4300);
    let mut m = LocalManager::up("cli-shared");
    let created = m.surge(&[
        "reservation",
        "create",
        "team",
        "--capacity",
        "64MiB",
        "--owner",
        &owner.to_string(),
        "--group",
        &team.to_string(),
        "--users",
        &listed.to_string(),
    ]);
    assert!(created.starts_with("reservation 'team' created, 64.0 MiB for 4201"), "{created}");
    let listed_json: serde_json::Value = serde_json::from_str(&m.surge(&["reservation", "list", "--json"])).unwrap();
    let shown = &listed_json[0];
    assert_eq!((shown["persistent"].as_str(), shown["owner_uid"].as_u64()), (Some("team"), Some(owner as u64)), "{listed_json}");
    assert_eq!((shown["group"].as_u64(), shown["users"].clone()), (Some(team as u64), serde_json::json!([listed])), "{listed_json}");
    let table = m.surge(&["reservation", "list"]);
    assert!(table.contains("team") && table.contains("4300") && table.contains("4203") && table.contains("ready"), "{table}");

    // A plain user may not make one, nor destroy this one.
    let refused = m.surge_as(Some(member), &["reservation", "create", "mine", "--capacity", "64MiB"]);
    assert!(!refused.status.success() && text(&refused).contains("user_reservations is off"), "{}", text(&refused));
    let refused = m.surge_as(Some(member), &["reservation", "destroy", "team"]);
    assert!(!refused.status.success() && text(&refused).contains("belongs to uid 4201"), "{}", text(&refused));

    // Who may use it: at submit (the user and group named, as Slurm 23.02+ does) and at setup.
    let uses = "#DW persistentdw name=team";
    let script = m.dir.join("uses.sh");
    std::fs::write(&script, format!("#!/bin/bash\n{uses}\n")).unwrap();
    let submit = |uid: u32, gid: u32| {
        m.surge_as(None, &["bb", "job-process", "--uid", &uid.to_string(), "--gid", &gid.to_string(), script.to_str().unwrap()])
    };
    assert!(submit(member, team).status.success());
    assert!(submit(listed, listed).status.success());
    let strange = submit(stranger, stranger);
    assert!(!strange.status.success() && text(&strange).contains("who has not shared it with you"), "{}", text(&strange));
    assert!(m.try_setup(201, member, team, uses).status.success(), "{}", m.log());
    assert!(m.try_setup(203, listed, listed, uses).status.success(), "{}", m.log());
    let strange = m.try_setup(204, stranger, stranger, uses);
    assert!(
        !strange.status.success() && text(&strange).contains("persistentdw team: the reservation belongs to uid 4201"),
        "{}",
        text(&strange)
    );
    let staging = m.try_setup(
        205,
        member,
        team,
        &format!("{uses}\n#DW stage_in type=file source={}/in destination=$DW_PERSISTENT_STRIPED_team/in", m.dir.join("pfs").display()),
    );
    assert!(!staging.status.success() && text(&staging).contains("run as its owner (uid 4201)"), "{}", text(&staging));
    let destroying = m.try_setup(206, member, team, "#DW destroy_persistent name=team");
    assert!(!destroying.status.success() && text(&destroying).contains("only its owner destroys it"), "{}", text(&destroying));

    // The member's job on node n1: the prolog mounts it for the member.
    m.node_hook("prolog", 201, "n1");
    m.node_hook("prolog", 203, "n2");
    let mine = m.persistent_mount(201, "team");
    let meta = std::fs::metadata(&mine).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (owner, team, 0o770), "the root: the owner's and the group's");
    let note = mine.join("note");
    let wrote = shell_as(member, team, &[], &format!("echo shared > {0} && cat {0}", note.display()));
    assert_eq!(String::from_utf8_lossy(&wrote.stdout), "shared\n", "a member whose group is the one shared with: {}", text(&wrote));
    // The group counts as a supplementary group too; the same uid outside it is kept out.
    let supplementary = shell_as(member, member, &[team], &format!("cat {}", note.display()));
    assert_eq!(String::from_utf8_lossy(&supplementary.stdout), "shared\n", "{}", text(&supplementary));
    let outside = shell_as(member, member, &[], &format!("ls {}", mine.display()));
    assert!(!outside.status.success() && text(&outside).contains("Permission denied"), "{}", text(&outside));
    let meta = std::fs::metadata(&note).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (member, team), "what a member makes is the member's");
    // A stage the member's job asks the reservation for would run as its owner: refused.
    let input = m.dir.join("pfs").join("input");
    std::fs::write(&input, "in").unwrap();
    let home = m.dir.join("jobs/201/home");
    let staged = shell_as(
        member,
        team,
        &[],
        &format!("SURGE_HOME={} {} stage in {} {}/staged", home.display(), binary("surge").display(), input.display(), mine.display()),
    );
    assert!(!staged.status.success() && text(&staged).contains("stages run as uid 4201"), "{}", text(&staged));

    // The listed user's job, on another node: reads and adds to what the member made (the
    // member's file inherited the root's default ACL).
    let theirs = m.persistent_mount(203, "team");
    let appended = shell_as(listed, listed, &[], &format!("echo more >> {0} && cat {0}", theirs.join("note").display()));
    assert_eq!(String::from_utf8_lossy(&appended.stdout), "shared\nmore\n", "{}", text(&appended));
    let again = shell_as(member, team, &[], &format!("cat {}", note.display()));
    assert_eq!(String::from_utf8_lossy(&again.stdout), "shared\nmore\n", "{}", text(&again));

    // In use: the administrator's destroy is refused without --hurry; once the jobs are done,
    // it goes.
    let busy = m.surge_as(None, &["reservation", "destroy", "team"]);
    assert!(!busy.status.success() && text(&busy).contains("in use by job(s) [201, 203]"), "{}", text(&busy));
    for (job, node) in [(201, "n1"), (203, "n2")] {
        m.node_hook("epilog", job, node);
        m.surge(&["bb", "teardown", "--job", &job.to_string()]);
    }
    m.jobs.clear();
    assert_eq!(m.surge(&["reservation", "destroy", "team"]), "reservation 'team' destroyed\n");
    let after: serde_json::Value = serde_json::from_str(&m.surge(&["reservation", "list", "--json"])).unwrap();
    assert_eq!(after, serde_json::json!([]));
}

/// One job through slurm/job_submit.lua as Slurm 22.05 runs it (Lua 5.1, a `slurm` table with
/// `log_user`, the job's fields in `job_desc`), `surge` found through SURGE_COMMAND: what the
/// script calls back, and the job's script and --bb text after it.
struct Submitted {
    rc: i64,
    script: Option<String>,
    burst_buffer: Option<String>,
    told: String,
}

/// Runs job_submit.lua's `slurm_job_submit` for a job of these fields (`min_nodes` as Slurm
/// passes it: 0 for -N0, else NO_VAL when not given).
fn job_submit(m: &LocalManager, surge_command: &std::path::Path, script: Option<&str>, bb: Option<&str>, min_nodes: u32) -> Submitted {
    let dir = m.dir.join("lua");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let field = |value: Option<&str>| value.map_or("nil".to_string(), |v| format!("[==[{v}]==]"));
    let driver = format!(
        r#"
local told = {{}}
slurm = {{ SUCCESS = 0, ERROR = -1,
          log_user = function(...) told[#told + 1] = string.format(...) end }}
dofile([==[{script_path}]==])
local job_desc = {{ script = {script}, burst_buffer = {bb}, min_nodes = {min_nodes} }}
local rc = slurm_job_submit(job_desc, {{}}, 65534)
local function put(name, value)
    if value ~= nil then
        local f = io.open([==[{dir}/]==] .. name, "wb")
        f:write(tostring(value))
        f:close()
    end
end
put("rc", rc)
put("script", job_desc.script)
put("burst_buffer", job_desc.burst_buffer)
put("told", table.concat(told, "\n"))
"#,
        script_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../slurm/job_submit.lua").display(),
        script = field(script),
        bb = field(bb),
        dir = dir.display(),
    );
    let out = Command::new("lua5.1")
        .arg("-e")
        .arg(&driver)
        .env("SURGE_COMMAND", surge_command)
        .env("SURGE_MANAGER_SOCKET", m.dir.join("manager.sock"))
        .env_remove("SURGE_MANAGER")
        .output()
        .expect("run lua5.1 (apt-get install lua5.1)");
    assert!(out.status.success(), "the Lua script failed: {}", text(&out));
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    Submitted {
        rc: read("rc").expect("an answer").parse().unwrap(),
        script: read("script"),
        burst_buffer: read("burst_buffer"),
        told: read("told").unwrap_or_default(),
    }
}

/// slurm/job_submit.lua: the default pool for `jobdw` and `create_persistent` lines without one,
/// in a batch script and in the --bb text of sbatch, salloc and srun (DataWarp's short form
/// too); Slurm's `#BB create_persistent`/`destroy_persistent` lines become Surge's `#DW` lines,
/// which the manager then accepts; a job without nodes that asks for a burst buffer refused,
/// saying what to do instead; DataWarp tuning warned about; jobs without directives passed on
/// without running anything.
#[test]
fn job_submit_lua_gives_the_default_pool_and_rewrites_slurms_bb_lines() {
    let m = LocalManager::up("cli-job-submit");
    let surge = binary("surge");
    let no_val = 0xffff_fffe;
    let submitted = |script: Option<&str>, bb: Option<&str>, min_nodes: u32| job_submit(&m, &surge, script, bb, min_nodes);

    // A batch script: pool added, #BB lines rewritten in place, the rest untouched.
    let script = "#!/bin/bash\n#SBATCH -N 1\n#DW jobdw capacity=64MiB access_mode=striped type=scratch\n\
                  #BB create_persistent name=shared capacity=64MiB access=striped type=scratch\nsrun hostname\n";
    let job = submitted(Some(script), None, no_val);
    assert_eq!(job.rc, 0, "{}", job.told);
    assert_eq!(
        job.script.as_deref(),
        Some(
            "#!/bin/bash\n#SBATCH -N 1\n#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=bb\n\
             #DW create_persistent name=shared capacity=64MiB access=striped type=scratch pool=bb\nsrun hostname\n"
        )
    );
    assert_eq!(job.told, "");
    // What it became passes Surge's own check at job_process; as it was, it is refused there
    // (the #BB line would otherwise be ignored).
    let rewritten = m.dir.join("rewritten.sh");
    std::fs::write(&rewritten, job.script.as_deref().unwrap()).unwrap();
    m.surge(&["bb", "job-process", rewritten.to_str().unwrap()]);
    let original = m.dir.join("original.sh");
    std::fs::write(&original, script).unwrap();
    let refused = m.surge_as(None, &["bb", "job-process", original.to_str().unwrap()]);
    assert!(
        !refused.status.success()
            && text(&refused).contains("line 4: '#BB create_persistent' is read by Slurm's burst_buffer/datawarp plugin"),
        "{}",
        text(&refused)
    );
    // Behind the datawarp plugin, which reads `#BB` lines itself, the same script is accepted.
    m.surge(&["dw-wlm-cli", "--function", "job_process", "--job", original.to_str().unwrap()]);

    // A script that is not all UTF-8 (a Latin-1 comment) keeps its bytes: only the directive
    // line changes.
    let latin1 = m.dir.join("latin1.sh");
    std::fs::write(&latin1, b"#!/bin/bash\n# caf\xe9\n#DW jobdw capacity=64MiB access_mode=striped type=scratch\n").unwrap();
    let rewritten_latin1 = m.dir.join("latin1.out");
    m.surge(&["bb", "job-submit", "--out", rewritten_latin1.to_str().unwrap(), latin1.to_str().unwrap()]);
    assert_eq!(
        std::fs::read(&rewritten_latin1).unwrap(),
        b"#!/bin/bash\n# caf\xe9\n#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=bb\n"
    );

    // salloc/srun --bb: #DW lines, or DataWarp's short form.
    let srun = submitted(None, Some("#DW jobdw capacity=64MiB access_mode=striped type=scratch"), 1);
    assert_eq!((srun.rc, srun.burst_buffer.as_deref()), (0, Some("#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=bb")));
    let short = submitted(None, Some("capacity=64MiB access=striped"), no_val);
    assert_eq!(short.burst_buffer.as_deref(), Some("#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=bb"));
    let named = submitted(Some("#!/bin/bash\nhostname\n"), Some("#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=bb"), 1);
    assert_eq!((named.rc, named.script.as_deref()), (0, Some("#!/bin/bash\nhostname\n")));
    let swap = submitted(None, Some("capacity=64MiB swap=1GiB"), 1);
    assert!(swap.rc != 0 && swap.told.contains("--bb swap=1GiB is not offered"), "{}", swap.told);

    // sbatch -N0 with a reservation to make: refused, saying what to do.
    let zero = submitted(Some("#!/bin/bash\n#BB create_persistent name=r capacity=64MiB\n"), None, 0);
    assert_ne!(zero.rc, 0);
    assert!(
        zero.told.starts_with("Surge: a job without nodes (-N0)") && zero.told.contains("surge reservation create NAME"),
        "{}",
        zero.told
    );

    // Tuning: accepted, with a word to the user.
    let tuned = submitted(
        Some("#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped type=scratch optimization_strategy=bandwidth\n"),
        None,
        1,
    );
    assert_eq!(tuned.rc, 0);
    assert_eq!(tuned.told, "Surge: warning: line 2: optimization_strategy=bandwidth is DataWarp tuning Surge does not have: ignored");

    // No directives: nothing is run (a `surge` that cannot run would fail the job).
    let plain = job_submit(&m, std::path::Path::new("/nonexistent/surge"), Some("#!/bin/bash\n# DW not one\nhostname\n"), None, 1);
    assert_eq!((plain.rc, plain.script.as_deref()), (0, Some("#!/bin/bash\n# DW not one\nhostname\n")));
    // A pool named: the manager is not asked. None named and no manager to ask: the job is
    // refused saying so (not passed on to be refused for want of a pool, without a reason).
    let mut m = m;
    let manager = m.children.last_mut().unwrap();
    manager.kill().unwrap();
    manager.wait().unwrap();
    let pooled = job_submit(&m, &surge, Some("#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=bb\n"), None, 1);
    assert_eq!(pooled.rc, 0, "{}", pooled.told);
    let down = job_submit(&m, &surge, Some("#!/bin/bash\n#DW jobdw capacity=64MiB access_mode=striped type=scratch\n"), None, 1);
    assert!(down.rc != 0 && down.told.starts_with("Surge's manager"), "{}", down.told);
}

/// `access_mode=private` in a standing pool: setup holds the room, pre-run (the job's nodes
/// known) gives each compute node a namespace of its own, a server on a burst-buffer node
/// (two on one node when the job has more nodes than the pool), the capacity shared equally;
/// each node's prolog mounts its own namespace, what one node writes the next does not see and
/// finds again when it comes back; a restarted manager keeps every server; teardown stops them
/// all.
#[test]
fn private_mode_in_a_standing_pool_gives_each_compute_node_its_own_namespace() {
    let user = 65534;
    let mut m = LocalManager::up("cli-private-standing");
    let script = m.dir.join("private.sh");
    std::fs::write(&script, "#!/bin/bash\n#DW jobdw capacity=192MiB access_mode=private type=scratch\n").unwrap();
    m.surge(&["bb", "job-process", "--uid", &user.to_string(), script.to_str().unwrap()]);
    m.setup(301, user, "#DW jobdw capacity=192MiB access_mode=private type=scratch");
    let instance = |m: &LocalManager| {
        m.status_as(None, &[])["instances"].as_array().unwrap().iter().find(|i| i["name"] == "job-301-private").cloned().unwrap()
    };
    let planned = instance(&m);
    assert_eq!(planned["state"], "planned", "waits for the job's nodes: {planned}");
    let held: u64 = planned["servers"].as_array().unwrap().iter().map(|s| s["share"].as_u64().unwrap()).sum();
    assert_eq!(held, 192 << 20, "setup holds the room: {planned}");

    m.surge(&["bb", "pre-run", "--job", "301", "--nodes", "n1,n2,n3"]);
    let ready = instance(&m);
    assert_eq!(ready["state"], "ready", "{ready}");
    let servers: Vec<(String, u64)> = ready["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["node"].as_str().unwrap().to_string(), s["share"].as_u64().unwrap()))
        .collect();
    let mib64 = 64 << 20;
    assert_eq!(servers, [("bb1".to_string(), mib64), ("bb2".to_string(), mib64), ("bb1".to_string(), mib64)], "one per compute node");
    let paths = m.dir.join("paths");
    m.surge(&["bb", "paths", "--job", "301", "--path-file", paths.to_str().unwrap()]);
    let private = m.dir.join("jobs/301/private");
    assert!(std::fs::read_to_string(&paths).unwrap().contains(&format!("DW_JOB_PRIVATE={}", private.display())));

    // Node by node (one host: one job directory at a time), each node sees its own namespace.
    let on_node = |m: &LocalManager, node: &str, script: &str| {
        m.node_hook("prolog", 301, node);
        let out = shell_as(user, user, &[], &format!("cd {} && {script}", private.display()));
        m.node_hook("epilog", 301, node);
        assert!(out.status.success(), "on {node}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(on_node(&m, "n1", "echo one > mine && ls"), "mine\n");
    assert_eq!(on_node(&m, "n3", "ls; echo three > mine; cat mine; stat -c %a ."), "three\n700\n", "n3's namespace starts empty");
    m.restart_manager();
    assert_eq!(instance(&m)["state"], "ready", "a restarted manager finds every server: {}", m.log());
    assert_eq!(on_node(&m, "n1", "cat mine"), "one\n", "n1 finds its own again");
    assert_eq!(on_node(&m, "n2", "ls | wc -l"), "0\n");

    m.surge(&["bb", "teardown", "--job", "301"]);
    m.jobs.clear();
    let left: Vec<String> = ["bb1", "bb2"]
        .iter()
        .flat_map(|bb| std::fs::read_dir(m.dir.join(bb)).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()))
        .filter(|name| name.starts_with("job-301"))
        .collect();
    assert!(left.is_empty(), "every server stopped and its directory removed: {left:?}");
}
