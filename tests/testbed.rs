//! A test's view of `slurm/testbed`: a Slurm cluster with Surge whose nodes share nothing but
//! the network, the shared file system and the configuration. Everything a test does to it goes
//! where a user or an admin would do it: jobs are submitted and followed from the login node
//! as a user, admins' commands run on the head node, and what is on a node is looked at on that
//! node. The cluster is stopped when the value is dropped, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::{binary, text};

/// Seed 000's workflow in the shape of its batch script, on `nodes` nodes with a buffer from
/// `pool`: a restart file (`restart.h5` in the shared file system, 6 MiB) staged in; three
/// components at once in `$DW_JOB_STRIPED`, one on each node of `on`: a simulation writing
/// a plot file a step (each published by a rename), a visualization rendering each as it
/// appears (here: its checksum), an encoder making the "movie" from the frames in order;
/// the movie staged out to `movie.txt` after the commands. [`seed_movie`] is what it must be.
pub fn seed_workflow(pfs: &Path, nodes: usize, pool: &str, on: [&str; 3]) -> String {
    let p = pfs.display();
    let [simulation, visualization, encoder] = on;
    format!(
        r#"#!/bin/bash
#SBATCH -N {nodes}
#SBATCH -o {p}/seed.out
#DW jobdw capacity=1GiB access_mode=striped type=scratch pool={pool}
#DW stage_in type=file source={p}/restart.h5 destination=$DW_JOB_STRIPED/restart.h5
cd $DW_JOB_STRIPED && mkdir plt png
srun -N1 -n1 -w {simulation} bash -c 'for i in 0 1 2 3 4 5; do dd if=restart.h5 of=plt/.p$i bs=1M skip=$i count=1 status=none; mv plt/.p$i plt/p$i; done' &
srun -N1 -n1 -w {visualization} bash -c 'for i in 0 1 2 3 4 5; do until [ -e plt/p$i ]; do sleep 0.05; done; sha256sum < plt/p$i > png/.f$i; mv png/.f$i png/f$i; done' &
srun -N1 -n1 -w {encoder} bash -c 'for i in 0 1 2 3 4 5; do until [ -e png/f$i ]; do sleep 0.05; done; cat png/f$i >> .movie; done; mv .movie movie.txt' &
wait
ls -l $DW_JOB_STRIPED/movie.txt
#DW stage_out type=file source=$DW_JOB_STRIPED/movie.txt destination={p}/movie.txt
"#
    )
}

/// The movie [`seed_workflow`] makes from `restart`: each 1 MiB frame's checksum line.
pub fn seed_movie(restart: &[u8]) -> String {
    restart.chunks(1 << 20).map(sha256_line).collect()
}

/// `sha256sum`'s line for `data` read from its standard input.
pub fn sha256_line(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), data).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
}

/// The user jobs run as (`nobody`: in every node's user database).
pub const USER: &str = "65534";

pub struct Testbed {
    pub dir: PathBuf,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../slurm/testbed")
}

impl Testbed {
    /// A testbed named `name` (its directory under the temporary directory), with
    /// `slurm/testbed`'s settings `env` (e.g. `SURGE_TESTBED_BB_PLUGIN=datawarp`).
    pub fn up(name: &str, env: &[(&str, &str)]) -> Testbed {
        // SAFETY: geteuid(2) has no preconditions.
        assert!(unsafe { libc::geteuid() } == 0, "the testbed's nodes are namespaces: run this test as root");
        let dir = std::env::temp_dir().join(format!("surge-testbed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bed = Testbed { dir };
        let out = Command::new(script())
            .args(["up", bed.dir.to_str().unwrap()])
            .env("SURGE_COMMAND", binary("surge"))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "slurm/testbed up: {}", text(&out));
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(printed.contains(&format!("PFS={}", bed.pfs().display())), "{}", text(&out));
        assert!(printed.contains(&format!("SLURM_CONF={}", bed.dir.join("etc/slurm/slurm.conf").display())), "{}", text(&out));
        // Jobs write their output into the shared file system as the user.
        std::os::unix::fs::chown(bed.pfs(), Some(65534), Some(65534)).unwrap();
        bed
    }

    /// The shared file system: the same path on the host and every node.
    pub fn pfs(&self) -> PathBuf {
        self.dir.join("pfs")
    }

    /// `slurm/testbed ARGS...` for this testbed.
    pub fn testbed(&self, action: &str, args: &[&str]) -> Output {
        Command::new(script()).arg(action).arg(&self.dir).args(args).output().unwrap()
    }

    /// `sh -c CMD` on `node`, as `user` when given (with that user's groups), else as root.
    pub fn run(&self, node: &str, user: Option<&str>, cmd: &str) -> Output {
        let mut command = Command::new(script());
        command.args(["run", self.dir.to_str().unwrap(), node]);
        if let Some(user) = user {
            command.args(["--user", user]);
        }
        command.args(["--", "sh", "-c", cmd]).output().unwrap()
    }

    /// [`Testbed::run`] that must succeed; its output, trimmed.
    pub fn ok(&self, node: &str, user: Option<&str>, cmd: &str) -> String {
        let out = self.run(node, user, cmd);
        assert!(out.status.success(), "on {node}: {cmd}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `surge ARGS` on the login node, as `user` (root when `None`).
    pub fn surge(&self, user: Option<&str>, args: &str) -> Output {
        self.run("login", user, &format!("{} {args}", binary("surge").display()))
    }

    /// Writes `script` into the shared file system and submits it as the user from the login
    /// node: the job's id, or what sbatch said.
    pub fn submit(&self, name: &str, script: &str) -> Result<u64, String> {
        let path = self.pfs().join(name);
        std::fs::write(&path, script).unwrap();
        let out = self.run("login", Some(USER), &format!("sbatch --parsable {}", path.display()));
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse().expect("job id"))
    }

    /// The job's state and reason as squeue shows them on the login node; `None` once it
    /// left the queue.
    pub fn queued(&self, job: u64) -> Option<(String, String)> {
        let line = self.ok("login", Some(USER), &format!("squeue -h -o '%T|%r' -j {job} 2>/dev/null || true"));
        line.split_once('|').map(|(s, r)| (s.to_string(), r.to_string()))
    }

    /// The job's final state (`scontrol show job`), once it has one; `None` while it is not
    /// done (stage-out included).
    pub fn final_state(&self, job: u64) -> Option<String> {
        let state = self.ok("login", Some(USER), &format!("scontrol show job {job} | grep -o 'JobState=[A-Z_]*'"));
        let state = state.trim_start_matches("JobState=").to_string();
        (!["PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "STAGE_OUT"].contains(&state.as_str())).then_some(state)
    }

    pub fn wait_until(&self, what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not after {timeout:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the job left the queue.
    pub fn wait_gone(&self, job: u64) {
        self.wait_until(&format!("job {job} finished"), Duration::from_secs(120), || self.queued(job).is_none());
    }

    /// Submits and waits for the job's final state.
    pub fn submit_and_wait(&self, name: &str, script: &str) -> (u64, String) {
        let job = self.submit(name, script).unwrap_or_else(|e| panic!("sbatch {name}: {e}"));
        let mut state = None;
        self.wait_until(&format!("job {job} done"), Duration::from_secs(120), || {
            state = self.final_state(job);
            state.is_some()
        });
        (job, state.unwrap())
    }

    /// Surge's status as an admin sees it (root, from the login node).
    pub fn status(&self) -> serde_json::Value {
        let out = self.surge(None, "status --json");
        assert!(out.status.success(), "surge status: {}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Waits until Surge holds no instance (every buffer released).
    pub fn wait_all_released(&self, what: &str) {
        self.wait_until(what, Duration::from_secs(60), || self.status()["instances"].as_array().unwrap().is_empty());
    }

    /// What the node's buffers left in its storage, besides the agent's (empty) records.
    pub fn storage_left(&self, node: &str) -> String {
        let storage = self.dir.join("nodes").join(node).join("local/storage");
        self.ok(node, None, &format!("ls -A {s} | grep -v -x .agent; ls -A {s}/.agent; true", s = storage.display()))
    }

    /// Jobs' mounts, job directories, mount daemons and servers left on a node.
    pub fn jobs_left(&self, node: &str) -> String {
        self.ok(
            node,
            None,
            "grep ' /var/spool/surge/jobs/' /proc/self/mounts; ls /var/spool/surge/jobs; \
             for p in $(pgrep -x 'surge-fuse|surge-server'); do [ \"$(readlink /proc/$p/ns/mnt)\" = \"$(readlink /proc/self/ns/mnt)\" ] && echo $(cat /proc/$p/comm) $p; done; true",
        )
    }

    /// The manager's pid on the head node, while it runs.
    pub fn manager_pid(&self) -> Option<i32> {
        let pid = self.ok("head", None, "p=$(cat /run/surge/manager.pid 2>/dev/null) && kill -0 \"$p\" 2>/dev/null && echo $p; true");
        pid.parse().ok()
    }

    /// kill -9 of the manager.
    pub fn kill_manager(&self) {
        let out = self.testbed("manager", &["kill"]);
        assert!(out.status.success(), "slurm/testbed manager kill: {}", text(&out));
    }

    /// Starts the manager again: `program` (with `args`) instead of the testbed's when given.
    pub fn start_manager(&self, program: Option<(&str, &[&str])>) {
        let mut args = vec!["start"];
        if let Some((program, rest)) = program {
            args.push(program);
            args.extend(rest);
        }
        let out = self.testbed("manager", &args);
        assert!(out.status.success(), "slurm/testbed manager start: {}", text(&out));
        self.wait_until("the manager started", Duration::from_secs(10), || self.manager_pid().is_some());
    }

    /// The tails of the logs that say what went wrong.
    pub fn logs(&self) -> String {
        let queue = self.run("login", None, "squeue -a -o '%i %T %r %M'");
        let mut out = format!("--- squeue\n{}", String::from_utf8_lossy(&queue.stdout));
        for (node, log) in [
            ("head", "/var/log/surge-manager.log"),
            ("head", "/var/log/slurm/slurmctld.log"),
            ("n1", "/var/log/surge-prolog.log"),
            ("n1", "/var/log/surge-epilog.log"),
        ] {
            let tail = self.run(node, None, &format!("tail -n 40 {log}"));
            out += &format!("\n--- {node}:{log}\n{}", String::from_utf8_lossy(&tail.stdout));
        }
        out
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let out = self.testbed("down", &[]);
        if !std::thread::panicking() {
            assert!(out.status.success(), "slurm/testbed down: {}", text(&out));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
