//! Real Slurm driving Surge on a cluster of separate nodes (`slurm/testbed`: head, login,
//! three compute nodes, two burst-buffer nodes, each its own network, mount and UTS
//! namespaces and munged): jobs are submitted from the login node as an unprivileged user with
//! unmodified DataWarp `#DW` lines, and what the user would see is checked: refusals at submit,
//! the seed 000 workflow's shape from `$DW_JOB_STRIPED` with stage-in and stage-out, private and
//! striped buffers on the job's own nodes that no other user can enter, a persistent
//! reservation across four jobs and a manager restart (kill -9), a job waiting for capacity,
//! stage failures as the job's reason, servers killed under jobs. `slurm/testbed down` must
//! leave nothing behind.
//!
//! A second test runs a job through Slurm's burst_buffer/datawarp plugin instead, with Surge
//! answering as Cray's `dw_wlm_cli` and `dwstat`.

use std::time::{Duration, Instant};

use surge_tests::testbed::{seed_movie, seed_workflow, sha256_line, Testbed, USER};

/// The user's uid, for the files the test hands them.
const UID: u32 = 65534;
use surge_tests::{binary, pattern, text};

/// One testbed at a time: each is a dozen daemons on a small machine.
static ONE_TESTBED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The pid Surge's agent on `node` recorded for the instance's server there.
fn server_pid(bed: &Testbed, node: &str, instance: &str) -> Option<i32> {
    let record = bed.dir.join("nodes").join(node).join(format!("local/storage/.agent/{instance}.json"));
    let seen = bed.run(node, None, &format!("cat {}", record.display()));
    serde_json::from_slice::<serde_json::Value>(&seen.stdout).ok().and_then(|r| r["pid"].as_i64()).map(|pid| pid as i32)
}

/// kill -9 of a process of a node (the nodes share the host's process ids).
fn kill_9(pid: i32) {
    // SAFETY: kill(2) of a server process of the testbed, by the pid its agent recorded.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Checks that the burst-buffer nodes' storage holds nothing but the agents' (empty) records.
/// Waits until a stage of `job` is copying.
fn wait_stage_running(bed: &Testbed, job: u64) {
    bed.wait_until("the stage running", Duration::from_secs(60), || {
        bed.status()["stages"].as_array().unwrap().iter().any(|s| s["job"] == job && s["state"] == "running")
    });
}

/// kill -9 of the manager, and a start of `surge-manager-crashing`, which kills itself when it
/// gets to `point`.
fn restart_manager_crashing_at(bed: &Testbed, point: &str) {
    bed.kill_manager();
    let crashing = binary("surge-manager-crashing").display().to_string();
    let out = bed.testbed("manager", &["start", &crashing, "--crash-at", point]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Waits for the manager started by [`restart_manager_crashing_at`] to have killed itself.
fn wait_manager_crashed(bed: &Testbed) {
    bed.wait_until("the manager killed at its crash point", Duration::from_secs(60), || {
        bed.ok("head", None, "p=$(cat /run/surge/manager.pid 2>/dev/null) && ! kill -0 \"$p\" 2>/dev/null && echo crashed; true")
            == "crashed"
    });
}

fn assert_bb_storage_empty(bed: &Testbed, after: &str) {
    for node in ["bb1", "bb2"] {
        assert_eq!(bed.storage_left(node), "", "{node}'s storage after {after}");
    }
}

/// Stops the testbed and checks that nothing of it is left: no process in its nodes, no
/// namespace, no bridge.
fn down_leaving_nothing(bed: Testbed) {
    let dir = bed.dir.clone();
    drop(bed);
    let leftovers = std::process::Command::new("pgrep").args(["-f", &dir.display().to_string()]).output().unwrap();
    assert!(leftovers.stdout.is_empty(), "processes left: {}", String::from_utf8_lossy(&leftovers.stdout));
    // The nodes' network namespaces are named after a tag of the directory's path.
    let tag = surge_tests::sh(&format!("printf '%s' '{}' | sha256sum | cut -c1-4", dir.display()));
    let namespaces = surge_tests::sh("ip netns list");
    assert!(!namespaces.contains(&format!("sg{}-", tag.trim())), "network namespaces left: {namespaces}");
}

#[test]
fn slurm_drives_surge_burst_buffers_for_unprivileged_jobs() {
    let _one = ONE_TESTBED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let bed = Testbed::up("lua", &[]);
    let started = Instant::now();
    let mut lap = Instant::now();
    let mut section = |name: &str| {
        println!("{name}: {:.1} s", lap.elapsed().as_secs_f64());
        lap = Instant::now();
    };

    // ----- refused at submit, with what is wrong -----
    let refused = bed
        .submit(
            "bad.sh",
            "#!/bin/bash\n#DW persistentdw name=9lives\n\
             #DW stage_in type=file source=input.h5 destination=$DW_PERSISTENT_STRIPED_results/input.h5\n#DW swap 10G\nhostname\n",
        )
        .expect_err("a script with bad #DW lines was accepted");
    for problem in ["line 2: name '9lives' must start with a letter", "line 3: source=input.h5", "line 4: '#DW swap 10G' is not offered"] {
        assert!(refused.contains(problem), "sbatch does not show {problem:?}: {refused}");
    }
    let too_big = bed.submit("big.sh", "#!/bin/bash\n#DW jobdw capacity=10GiB access_mode=striped type=scratch\nhostname\n").unwrap_err();
    assert!(too_big.contains("capacity 10.0 GiB is more than pool 'bb' holds in all (4.0 GiB)"), "{too_big}");
    // Pool "safe" is the same 4 GiB kept twice: 3 GiB would take 6.
    let too_big_twice =
        bed.submit("big2.sh", "#!/bin/bash\n#DW jobdw capacity=3GiB access_mode=striped type=scratch pool=safe\nhostname\n").unwrap_err();
    assert!(
        too_big_twice
            .contains("capacity 3.0 GiB takes 6.0 GiB in pool 'safe' (it keeps two copies), more than the pool holds in all (4.0 GiB)"),
        "{too_big_twice}"
    );
    let unknown = bed.submit("unknown.sh", "#!/bin/bash\n#DW persistentdw name=nosuch\nhostname\n").unwrap_err();
    assert!(unknown.contains("persistentdw nosuch: no persistent reservation of that name"), "{unknown}");

    section("refusals at submit");
    // ----- seed 000's shape on the standing pool -----
    let restart = pattern(0, 6 << 20);
    std::fs::write(bed.pfs().join("restart.h5"), &restart).unwrap();
    std::os::unix::fs::chown(bed.pfs().join("restart.h5"), Some(UID), Some(UID)).unwrap();
    let job = bed.submit("seed.sh", &seed_workflow(&bed.pfs(), 3, "bb", ["n1", "n2", "n3"])).unwrap();
    bed.wait_gone(job);
    let movie = std::fs::read_to_string(bed.pfs().join("movie.txt")).unwrap_or_else(|e| {
        panic!("movie not staged out ({e}); job output: {}", std::fs::read_to_string(bed.pfs().join("seed.out")).unwrap_or_default())
    });
    assert_eq!(movie, seed_movie(&restart), "the movie on the PFS is every frame, in order");
    // Slurm tears down just after the job leaves the queue.
    bed.wait_all_released("torn down after the job");
    let status = bed.status();
    assert_eq!(status["pools"][0]["free"], status["pools"][0]["quantity"], "capacity released: {status}");

    section("seed 000 workflow");
    // ----- on the job's own nodes: striped and private; nobody else gets in -----
    let p = bed.pfs();
    let job = bed
        .submit(
            "local.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -N 3\n#SBATCH -o {p}/local.out\n\
                 #DW jobdw capacity=768MiB access_mode=striped,private type=scratch pool=local\n\
                 stat -c '%U %a' $DW_JOB_STRIPED $DW_JOB_PRIVATE\n\
                 srun -N3 bash -c 'echo $SLURMD_NODENAME > $DW_JOB_PRIVATE/who; echo $SLURMD_NODENAME > $DW_JOB_STRIPED/$SLURMD_NODENAME || (date +%T.%N; stat $DW_JOB_STRIPED; id; grep -h striped /proc/self/mountinfo; echo retry; echo again > $DW_JOB_STRIPED/$SLURMD_NODENAME.2 && echo retry-ok; ls -la $DW_JOB_STRIPED; tail -n 20 $SURGE_HOME/*.fuse.log {storage}/job-*/server.log; cat /proc/$$/status | grep -i -E \"uid|gid|groups|cap\")'\n\
                 srun -N3 bash -c 'echo $SLURMD_NODENAME sees $(cat $DW_JOB_PRIVATE/who) and $(ls $DW_JOB_STRIPED | tr \"\\n\" \" \")'\n\
                 sleep 4\n",
                p = p.display(),
                storage = "/var/spool/surge"
            ),
        )
        .unwrap();
    bed.wait_until("the on-demand job running", Duration::from_secs(60), || {
        std::fs::read_to_string(bed.pfs().join("local.out")).is_ok_and(|out| out.lines().count() >= 5)
    });
    let striped = format!("/var/spool/surge/jobs/{job}/striped");
    let stranger = bed.run("n1", None, &format!("setpriv --reuid=4242 --regid=4242 --clear-groups ls {striped}"));
    assert!(!stranger.status.success(), "another user listed the job's buffer: {}", text(&stranger));
    let owner = bed.run("n1", Some(USER), &format!("ls {striped}"));
    assert!(owner.status.success(), "{}", text(&owner));
    let elsewhere = bed.ok("login", None, &format!("ls {striped} 2>/dev/null | wc -l"));
    assert_eq!(elsewhere, "0", "a node that is not the job's does not have its mount");
    bed.wait_gone(job);
    let out = std::fs::read_to_string(bed.pfs().join("local.out")).unwrap();
    assert!(out.starts_with("nobody 700\nnobody 700\n"), "buffers owned by the user, mode 0700: {out}");
    for node in ["n1", "n2", "n3"] {
        assert!(out.contains(&format!("{node} sees {node} and n1 n2 n3")), "{node}: own private namespace, one striped: {out}");
        assert_eq!(bed.jobs_left(node), "", "{node}: the epilog removed the job's mounts, daemons and directory");
    }

    section("on-demand striped and private");
    // ----- a persistent reservation across four jobs and a manager restart -----
    let with = |name: &str, directive: &str, body: &str| {
        format!(
            "#!/bin/bash\n#SBATCH -o {}/{name}.out\n#DW jobdw capacity=256MiB access_mode=striped type=scratch\n{directive}\n{body}\n",
            p.display()
        )
    };
    let a = bed
        .submit("a.sh", &with("a", "#DW create_persistent name=ckpt capacity=512MiB access_mode=striped type=scratch", "echo created"))
        .unwrap();
    bed.wait_gone(a);
    let b = bed.submit("b.sh", &with("b", "#DW persistentdw name=ckpt", "echo from-b > $DW_PERSISTENT_STRIPED_ckpt/note")).unwrap();
    bed.wait_gone(b);
    bed.kill_manager();
    bed.start_manager(None);
    let c = bed.submit("c.sh", &with("c", "#DW persistentdw name=ckpt", "cat $DW_PERSISTENT_STRIPED_ckpt/note")).unwrap();
    bed.wait_gone(c);
    assert_eq!(std::fs::read_to_string(bed.pfs().join("c.out")).unwrap_or_default(), "from-b\n", "{}", bed.logs());
    let reservations =
        |status: serde_json::Value| status["instances"].as_array().unwrap().iter().filter(|i| i["persistent"] == "ckpt").count();
    assert_eq!(reservations(bed.status()), 1);
    let d = bed.submit("d.sh", &with("d", "#DW destroy_persistent name=ckpt", "echo destroyed")).unwrap();
    bed.wait_gone(d);
    bed.wait_all_released("the reservation gone");

    section("persistent reservation, four jobs");
    // ----- the manager killed in the middle of a setup, then of a teardown: the hooks ask
    // again once it is back, and nothing is lost or left behind -----
    std::fs::write(bed.pfs().join("small.h5"), pattern(3, 1 << 20)).unwrap();
    restart_manager_crashing_at(&bed, "setup-servers-started");
    let crashing = bed
        .submit(
            "crash.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -o {p}/crash.out\n#DW jobdw capacity=512MiB access_mode=striped type=scratch\n\
                 #DW stage_in type=file source={p}/small.h5 destination=$DW_JOB_STRIPED/small.h5\nstat -c %s $DW_JOB_STRIPED/small.h5\n",
                p = p.display()
            ),
        )
        .unwrap();
    wait_manager_crashed(&bed);
    restart_manager_crashing_at(&bed, "teardown-instances-stopped");
    wait_manager_crashed(&bed);
    assert_eq!(std::fs::read_to_string(bed.pfs().join("crash.out")).unwrap_or_default(), "1048576\n", "{}", bed.logs());
    bed.kill_manager();
    bed.start_manager(None);
    bed.wait_gone(crashing);
    bed.wait_all_released("the crashed teardown finished");
    assert_bb_storage_empty(&bed, "the crashes");
    section("manager killed mid-setup and mid-teardown");
    // ----- a full pool: the second job waits for the first's capacity -----
    let x = bed
        .submit(
            "x.sh",
            &format!("#!/bin/bash\n#SBATCH -o {}/x.out\n#DW jobdw capacity=3GiB access_mode=striped type=scratch\nsleep 3\n", p.display()),
        )
        .unwrap();
    bed.wait_until("the first job running", Duration::from_secs(60), || bed.queued(x).is_some_and(|(state, _)| state == "RUNNING"));
    let y = bed
        .submit(
            "y.sh",
            &format!("#!/bin/bash\n#SBATCH -o {}/y.out\n#DW jobdw capacity=2GiB access_mode=striped type=scratch\necho ran\n", p.display()),
        )
        .unwrap();
    bed.wait_until("the second job waiting for capacity", Duration::from_secs(30), || {
        bed.queued(y).is_some_and(|(_, reason)| reason == "BurstBufferResources")
    });
    bed.wait_gone(y);
    assert_eq!(std::fs::read_to_string(bed.pfs().join("y.out")).unwrap_or_default(), "ran\n");

    section("full pool");

    // ----- Surge's view through Slurm -----
    let bbstat = bed.run("login", Some(USER), "scontrol show bbstat");
    let shown = String::from_utf8_lossy(&bbstat.stdout);
    assert!(shown.contains("POOLS") && shown.contains("bb     standing"), "scontrol show bbstat: {}", text(&bbstat));

    // ----- the same manager behind DataWarp's programs -----
    let surge = binary("surge").display().to_string();
    let dw = |args: &[&str]| {
        let out = bed.run("head", None, &format!("{surge} dw-wlm-cli {}", args.join(" ")));
        assert!(out.status.success(), "dw_wlm_cli {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pools: serde_json::Value = serde_json::from_str(&dw(&["--function", "pools"])).unwrap();
    assert_eq!(pools["pools"][0]["id"], "bb", "the default pool first: {pools}");
    assert_eq!(pools["pools"][0]["units"], "bytes");
    let created = dw(&[
        "--function",
        "create_persistent",
        "-c",
        "CLI",
        "-t",
        "dwres",
        "-u",
        USER,
        "-C",
        "bb:256MiB",
        "-a",
        "striped",
        "-T",
        "scratch",
    ]);
    assert!(created.contains("created"), "{created}");
    let sessions: serde_json::Value = serde_json::from_str(&dw(&["--function", "show_sessions"])).unwrap();
    assert_eq!(sessions["sessions"][0]["token"], "dwres", "{sessions}");
    let instances: serde_json::Value = serde_json::from_str(&dw(&["--function", "show_instances"])).unwrap();
    assert_eq!(instances["instances"][0]["capacity"]["bytes"], 256 << 20, "{instances}");
    let dwstat = bed.surge(Some(USER), "dwstat pools");
    assert!(String::from_utf8_lossy(&dwstat.stdout).contains("bb     bytes"), "{}", text(&dwstat));
    dw(&["--function", "teardown", "--token", "dwres"]);
    assert_eq!(bed.status()["instances"].as_array().unwrap().len(), 0, "dw_wlm_cli teardown of a reservation");
    section("DataWarp's programs");
    // ----- stage failures, as the user sees them -----
    let missing = bed
        .submit(
            "missing.sh",
            &format!("#!/bin/bash\n#DW jobdw capacity=256MiB access_mode=striped type=scratch\n#DW stage_in type=file source={}/nope.h5 destination=$DW_JOB_STRIPED/nope.h5\necho never\n", p.display()),
        )
        .unwrap();
    let lost = bed
        .submit(
            "lost.sh",
            &format!("#!/bin/bash\n#DW jobdw capacity=256MiB access_mode=striped type=scratch\n#DW stage_out type=file source=$DW_JOB_STRIPED/result.h5 destination={}/result.h5\necho ran\n", p.display()),
        )
        .unwrap();
    // A stage-out refused by the PFS (a directory the user may not write), run again by the
    // user once the directory is theirs.
    std::fs::create_dir_all(bed.pfs().join("locked")).unwrap();
    let retried = bed
        .submit(
            "retry.sh",
            &format!(
                "#!/bin/bash
#SBATCH -o {p}/retry.out
#DW jobdw capacity=256MiB access_mode=striped type=scratch
#DW stage_out type=file source=$DW_JOB_STRIPED/result.h5 destination={p}/locked/result.h5
head -c 3000000 /dev/urandom > $DW_JOB_STRIPED/result.h5
",
                p = p.display()
            ),
        )
        .unwrap();
    let mut reasons = (String::new(), String::new());
    bed.wait_until("both failures in the jobs' reasons", Duration::from_secs(60), || {
        reasons.0 = bed.queued(missing).map(|q| q.1).unwrap_or_default();
        reasons.1 = bed.queued(lost).map(|(s, r)| format!("{s} {r}")).unwrap_or_default();
        reasons.0.contains("slurm_bb_data_in") && reasons.1.contains("slurm_bb_data_out")
    });
    assert!(reasons.0.contains(&format!("stage_in {}/nope.h5", p.display())) && reasons.0.contains("No such file"), "{}", reasons.0);
    assert!(
        reasons.1.starts_with("STAGE_OUT") && reasons.1.contains("$DW_JOB_STRIPED/result.h5") && reasons.1.contains("no entry 'result.h5'"),
        "{}",
        reasons.1
    );
    let kept = bed.status()["instances"].as_array().unwrap().iter().any(|i| i["job"] == lost);
    assert!(kept, "a failed stage-out keeps the job's buffer");
    bed.wait_until("the locked stage-out failed", Duration::from_secs(60), || {
        bed.queued(retried).is_some_and(|(state, reason)| state == "STAGE_OUT" && reason.contains("slurm_bb_data_out"))
    });
    std::os::unix::fs::chown(bed.pfs().join("locked"), Some(UID), Some(UID)).unwrap();
    let again = bed.surge(Some(USER), &format!("bb data-out --job {retried}"));
    assert!(again.status.success(), "the owner's retry of the stage-out: {}", text(&again));
    assert_eq!(std::fs::metadata(bed.pfs().join("locked/result.h5")).map(|m| m.len()).unwrap_or(0), 3_000_000, "staged out on the retry");
    let stranger = bed.run("login", None, &format!("setpriv --reuid=4242 --regid=4242 --clear-groups {surge} bb teardown --job {retried}"));
    assert!(!stranger.status.success() && text(&stranger).contains("permission denied"), "{}", text(&stranger));
    let cancel = bed.run("head", None, &format!("scancel --hurry {missing} {lost} {retried}"));
    assert!(cancel.status.success(), "{}", text(&cancel));
    bed.wait_gone(missing);
    bed.wait_gone(lost);
    bed.wait_gone(retried);
    bed.wait_all_released("everything released");
    section("stage failures");

    // ----- the manager killed (-9) during a stage-in: the job goes on once it is back -----
    let huge = bed.pfs().join("huge.h5");
    std::fs::File::create(&huge).unwrap().set_len(2 << 30).unwrap();
    let survivor = bed
        .submit(
            "survivor.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -o {p}/survivor.out\n#DW jobdw capacity=3GiB access_mode=striped type=scratch\n\
                 #DW stage_in type=file source={} destination=$DW_JOB_STRIPED/huge.h5\nstat -c %s $DW_JOB_STRIPED/huge.h5\n",
                huge.display(),
                p = p.display()
            ),
        )
        .unwrap();
    wait_stage_running(&bed, survivor);
    bed.kill_manager();
    bed.start_manager(None);
    bed.wait_gone(survivor);
    assert_eq!(std::fs::read_to_string(bed.pfs().join("survivor.out")).unwrap_or_default(), format!("{}\n", 2u64 << 30), "{}", bed.logs());
    section("manager killed during a stage-in");

    // ----- scancel during a stage-in: torn down with hurry, nothing left on the nodes -----
    let staging = bed
        .submit(
            "cancel.sh",
            &format!("#!/bin/bash\n#DW jobdw capacity=3GiB access_mode=striped type=scratch\n#DW stage_in type=file source={} destination=$DW_JOB_STRIPED/huge.h5\necho never\n", huge.display()),
        )
        .unwrap();
    wait_stage_running(&bed, staging);
    let cancel = bed.run("head", None, &format!("scancel {staging}"));
    assert!(cancel.status.success(), "{}", text(&cancel));
    bed.wait_gone(staging);
    bed.wait_all_released("the cancelled job's buffer released");
    assert_bb_storage_empty(&bed, "the cancel");
    section("scancel during stage-in");

    // ----- a server killed under a running job: I/O errors within seconds, never a hang -----
    let writer = bed
        .submit(
            "writer.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -o {p}/writer.out\n#DW jobdw capacity=512MiB access_mode=striped type=scratch\n\
                 while dd if=/dev/zero of=$DW_JOB_STRIPED/out bs=1M count=4 oflag=append conv=notrunc status=none; do sleep 0.05; done\n\
                 echo writes stopped\n",
                p = p.display()
            ),
        )
        .unwrap();
    let mut pid = None;
    bed.wait_until("the writer writing", Duration::from_secs(60), || {
        pid = server_pid(&bed, "bb1", &format!("job-{writer}"));
        pid.is_some() && bed.queued(writer).is_some_and(|(state, _)| state == "RUNNING")
    });
    std::thread::sleep(Duration::from_millis(500));
    kill_9(pid.unwrap());
    let killed = Instant::now();
    bed.wait_gone(writer);
    let took = killed.elapsed();
    let out = std::fs::read_to_string(bed.pfs().join("writer.out")).unwrap_or_default();
    assert!(out.contains("writes stopped") && out.contains("dd: "), "the writer saw an error: {out}");
    assert!(!out.contains("No space left"), "the buffer filled before the server was killed: {out}");
    assert!(took < Duration::from_secs(30), "the job ended {took:?} after its server died");
    println!(
        "a server killed under a job: the job's dd failed and the job ended {:.1} s later: {}",
        took.as_secs_f64(),
        out.lines().next().unwrap_or("")
    );
    bed.wait_all_released("the writer's buffer released");
    section("server killed under a job");

    // ----- two copies (pool "safe"): a burst-buffer node lost under a job (every process of
    // it killed) loses nothing; once the node is back, nothing of the job is left on it -----
    let data = pattern(7, 8 << 20);
    std::fs::write(bed.pfs().join("safe.in"), &data).unwrap();
    let job = bed
        .submit(
            "safe.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -o {p}/safe.out\n#DW jobdw capacity=256MiB access_mode=striped type=scratch pool=safe\n\
                 dd if={p}/safe.in of=$DW_JOB_STRIPED/data bs=1M conv=fsync status=none && touch {p}/safe.ready\n\
                 until [ -e {p}/safe.go ]; do sleep 0.1; done\n\
                 sha256sum < $DW_JOB_STRIPED/data > {p}/safe.sum\n\
                 echo more | dd of=$DW_JOB_STRIPED/after status=none && cat $DW_JOB_STRIPED/after\n",
                p = p.display()
            ),
        )
        .unwrap();
    bed.wait_until("the copy written", Duration::from_secs(60), || bed.pfs().join("safe.ready").exists());
    let instance = format!("job-{job}");
    let servers: Vec<String> = bed.status()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["name"] == instance.as_str())
        .flat_map(|i| i["servers"].as_array().unwrap().iter().map(|s| s["node"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(servers, ["bb1", "bb2"], "two copies: one server on each burst-buffer node");
    let lost = bed.testbed("kill", &["bb1"]);
    assert!(lost.status.success(), "{}", text(&lost));
    // The failover, asked by the buffer's owner from bb2 with the descriptor and token its
    // agent keeps there (the token is the owner's alone).
    let home = bed.pfs().join("failover-home");
    let failover = format!(
        "mkdir -p {home}/instances && cp {storage}/{instance}/instance.json {home}/instances/{instance}.json && \
         SURGE_HOME={home} {surge} failover {instance} --server 0",
        home = home.display(),
        storage = bed.dir.join("nodes/bb2/local/storage").display(),
    );
    let failed_over = bed.run("bb2", Some(USER), &failover);
    assert!(failed_over.status.success(), "surge failover: {}", text(&failed_over));
    std::fs::write(bed.pfs().join("safe.go"), "").unwrap();
    bed.wait_gone(job);
    let out = std::fs::read_to_string(bed.pfs().join("safe.out")).unwrap_or_default();
    let sum = std::fs::read_to_string(bed.pfs().join("safe.sum")).unwrap_or_default();
    let expected = sha256_line(&data);
    assert_eq!(sum.split_whitespace().next(), expected.split_whitespace().next(), "the data after its server's loss; job output: {out}");
    assert!(out.contains("more"), "writes go on after the failover: {out}");
    bed.wait_all_released("the two-copy buffer released");
    let status = bed.status();
    let safe = status["pools"].as_array().unwrap().iter().find(|pool| pool["name"] == "safe").unwrap().clone();
    assert_eq!(safe["free"], safe["quantity"], "both copies' capacity released: {status}");
    let back = bed.testbed("start", &["bb1"]);
    assert!(back.status.success(), "{}", text(&back));
    bed.wait_until("the lost node's server and storage removed once it is back", Duration::from_secs(90), || {
        bed.storage_left("bb1").is_empty() && bed.jobs_left("bb1").is_empty()
    });
    assert_bb_storage_empty(&bed, "a node lost under a two-copy job");
    section("two copies, a burst-buffer node lost under a job");
    println!("scenarios ran in {:.1} s", started.elapsed().as_secs_f64());

    down_leaving_nothing(bed);
}

/// Sites that keep Slurm's burst_buffer/datawarp plugin: the same `#DW` lines, with Surge
/// behind the plugin as Cray's `dw_wlm_cli` and `dwstat` (no Lua script, no job_submit):
/// a job with stage-in and stage-out, a persistent reservation made and destroyed with `#BB`
/// lines and used with `#DW persistentdw`, and Surge's view in `scontrol show bbstat`.
#[test]
fn slurm_datawarp_plugin_drives_surge() {
    let _one = ONE_TESTBED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let bed = Testbed::up("datawarp", &[("SURGE_TESTBED_BB_PLUGIN", "datawarp")]);
    let mut lap = Instant::now();
    let mut section = |name: &str| {
        println!("{name}: {:.1} s", lap.elapsed().as_secs_f64());
        lap = Instant::now();
    };
    let p = bed.pfs();
    let input = pattern(7, 5 << 20);
    std::fs::write(bed.pfs().join("input.h5"), &input).unwrap();
    std::os::unix::fs::chown(bed.pfs().join("input.h5"), Some(UID), Some(UID)).unwrap();
    let job = bed
        .submit(
            "dw.sh",
            &format!(
                "#!/bin/bash
#SBATCH -N 2
#SBATCH -o {p}/dw.out
#DW jobdw capacity=256MiB access_mode=striped type=scratch
#DW stage_in type=file source={p}/input.h5 destination=$DW_JOB_STRIPED/input.h5
#DW stage_out type=file source=$DW_JOB_STRIPED/output.h5 destination={p}/output.h5
stat -c '%U %a' $DW_JOB_STRIPED
srun -N2 bash -c 'cat $DW_JOB_STRIPED/input.h5 > $DW_JOB_STRIPED/part-$SLURM_PROCID || (date +%T.%N; stat $DW_JOB_STRIPED; id; grep -h $SLURM_JOB_ID /proc/self/mountinfo; ls -la $DW_JOB_STRIPED)'
cat $DW_JOB_STRIPED/part-0 $DW_JOB_STRIPED/part-1 > $DW_JOB_STRIPED/output.h5
",
                p = p.display()
            ),
        )
        .unwrap();
    bed.wait_gone(job);
    let out = std::fs::read_to_string(bed.pfs().join("dw.out")).unwrap_or_default();
    assert!(out.starts_with("nobody 700\n"), "the buffer is the user's, mode 0700: {out}\n{}", bed.logs());
    let output = std::fs::read(bed.pfs().join("output.h5")).unwrap_or_default();
    assert!(output.len() == 2 * input.len() && output.chunks(input.len()).all(|c| c == input), "staged out whole: {out}");
    bed.wait_all_released("torn down after the job");
    section("datawarp: a job with stage-in and stage-out");

    // A persistent reservation the plugin creates and destroys from `#BB` lines.
    let create = bed
        .submit("mk.sh", "#!/bin/bash\n#BB create_persistent name=dwres capacity=256MiB access=striped type=scratch\nhostname\n")
        .unwrap();
    bed.wait_gone(create);
    let reservation = bed.status()["instances"].as_array().unwrap().iter().any(|i| i["persistent"] == "dwres");
    assert!(reservation, "#BB create_persistent made it: {}", bed.logs());
    let user = bed
        .submit(
            "use.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -o {p}/use.out\n#DW persistentdw name=dwres\necho kept > $DW_PERSISTENT_STRIPED_dwres/note && cat $DW_PERSISTENT_STRIPED_dwres/note\n",
                p = p.display()
            ),
        )
        .unwrap();
    bed.wait_gone(user);
    assert_eq!(std::fs::read_to_string(bed.pfs().join("use.out")).unwrap_or_default(), "kept\n", "{}", bed.logs());
    let bbstat = bed.run("login", Some(USER), "scontrol show bbstat");
    assert!(String::from_utf8_lossy(&bbstat.stdout).contains("bb "), "scontrol show bbstat: {}", text(&bbstat));
    let destroy = bed.submit("rm.sh", "#!/bin/bash\n#BB destroy_persistent name=dwres\nhostname\n").unwrap();
    bed.wait_gone(destroy);
    bed.wait_all_released("the reservation destroyed");
    section("datawarp: a persistent reservation over three jobs");
    down_leaving_nothing(bed);
}
