//! Surge under Slurm on a cluster whose nodes share nothing but the network, the shared file
//! system and the configuration (`slurm/testbed`): slurmctld and the manager on the head node
//! as the non-root `slurm` user, jobs submitted by a user from the login node, the Prolog and
//! Epilog on the compute nodes reaching the manager over TCP with MUNGE credentials; the
//! Epilog without a manager, DataWarp's job-end stages.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use surge_tests::testbed::{seed_movie, seed_workflow, Testbed, USER};
use surge_tests::text;

/// A job of a user, submitted on the login node, with a buffer on its own two compute nodes
/// (on-demand) and then one on the burst-buffer node (standing): its input staged in from the
/// shared file system, seen by a step on each node, its output staged out; afterwards nothing
/// of the job is left on the compute nodes.
#[test]
fn a_dw_job_from_the_login_node_runs_across_separate_nodes() {
    let cluster = Testbed::up("job", &[]);
    let pfs = cluster.pfs().display().to_string();
    std::fs::write(cluster.pfs().join("in.txt"), "hello cluster\n").unwrap();
    for pool in ["local", "bb"] {
        let (job, state) = cluster.submit_and_wait(
            &format!("{pool}.sh"),
            &format!(
                "#!/bin/bash\n#SBATCH -N 2 -o {pfs}/{pool}-%j.out\n\
                 #DW jobdw type=scratch access_mode=striped capacity=256MiB pool={pool}\n\
                 #DW stage_in source={pfs}/in.txt destination=$DW_JOB_STRIPED/in.txt type=file\n\
                 #DW stage_out source=$DW_JOB_STRIPED/out.txt destination={pfs}/out-{pool}.txt type=file\n\
                 srun -N2 bash -c 'echo $(hostname) $(cat $DW_JOB_STRIPED/in.txt)' | sort\n\
                 tr a-z A-Z < $DW_JOB_STRIPED/in.txt > $DW_JOB_STRIPED/out.txt\n"
            ),
        );
        assert_eq!(state, "COMPLETED", "pool {pool}: {}", cluster.logs());
        let output = std::fs::read_to_string(cluster.pfs().join(format!("{pool}-{job}.out"))).unwrap();
        assert_eq!(output, "n1 hello cluster\nn2 hello cluster\n", "pool {pool}: each node's step reads the staged-in file");
        assert_eq!(
            std::fs::read_to_string(cluster.pfs().join(format!("out-{pool}.txt"))).unwrap(),
            "HELLO CLUSTER\n",
            "pool {pool}: staged out"
        );
        for node in ["n1", "n2"] {
            let left = cluster.ok(
                node,
                None,
                &format!(
                    "grep -c ' /var/spool/surge/jobs/' /proc/self/mounts || true; ls /var/spool/surge/jobs | grep -c -x {job} || true"
                ),
            );
            assert_eq!(left, "0\n0", "pool {pool}: on {node} after job {job}: fuse mounts, job directories");
        }
    }
}

/// Seed 000's workflow on an on-demand buffer over the job's own 8 compute nodes (a server on
/// each, mounted on each by the Prolog): its restart file staged in, its three components
/// on three different nodes sharing the buffer, its movie staged out; afterwards nothing of
/// the job is left on any of the 8 nodes.
#[test]
fn seed_000s_workflow_on_an_on_demand_buffer_over_eight_nodes() {
    let bed = Testbed::up("seed8", &[("SURGE_TESTBED_NODES", "8")]);
    let restart = surge_tests::pattern(11, 6 << 20);
    std::fs::write(bed.pfs().join("restart.h5"), &restart).unwrap();
    std::os::unix::fs::chown(bed.pfs().join("restart.h5"), Some(65534), Some(65534)).unwrap();
    let (job, state) = bed.submit_and_wait("seed.sh", &seed_workflow(&bed.pfs(), 8, "local", ["n1", "n5", "n8"]));
    let output = std::fs::read_to_string(bed.pfs().join("seed.out")).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{output}{}", bed.logs());
    let movie = std::fs::read_to_string(bed.pfs().join("movie.txt")).unwrap_or_default();
    assert_eq!(movie, seed_movie(&restart), "the movie on the PFS is every frame, in order: {output}");
    bed.wait_all_released("the job's buffer torn down");
    for node in (1..=8).map(|n| format!("n{n}")) {
        let mounted = bed.ok(&node, None, &format!("grep -c 'buffers mounted job={job} ' /var/log/surge-prolog.log || true"));
        assert_eq!(mounted, "1", "{node}: the Prolog mounted the job's buffer");
        bed.wait_until(&format!("{node} clean (mounts, job directories, daemons, servers, storage)"), Duration::from_secs(30), || {
            bed.jobs_left(&node).is_empty() && bed.storage_left(&node).is_empty()
        });
    }
}

/// Burst buffers asked for outside `#DW` lines, through Slurm and Surge's job_submit.lua:
/// Slurm's own `#BB create_persistent` / `#BB destroy_persistent` in jobs with nodes, the
/// `sbatch -N0` form of them refused saying what to do instead, and `--bb` on `srun` and
/// `salloc` (DataWarp's short form and a `#DW` line) giving interactive jobs a buffer from
/// the default pool, shared by their nodes.
#[test]
fn bb_lines_and_interactive_jobs_get_buffers_through_slurm() {
    let bed = Testbed::up("bblines", &[]);
    let pfs = bed.pfs().display().to_string();
    let reservations = |bed: &Testbed| -> Vec<String> {
        bed.status()["instances"].as_array().unwrap().iter().filter_map(|i| i["persistent"].as_str().map(String::from)).collect()
    };

    std::fs::write(
        bed.pfs().join("zero.sh"),
        "#!/bin/bash\n#BB create_persistent name=zero capacity=256MiB access=striped type=scratch\nhostname\n",
    )
    .unwrap();
    let zero = bed.run("login", Some(USER), &format!("sbatch -N0 {pfs}/zero.sh"));
    assert!(
        !zero.status.success()
            && text(&zero).contains("a job without nodes (-N0) cannot make")
            && text(&zero).contains("surge reservation create"),
        "sbatch -N0 with #BB create_persistent: {}",
        text(&zero)
    );

    let (_, state) = bed.submit_and_wait(
        "create.sh",
        &format!("#!/bin/bash\n#SBATCH -o {pfs}/create-%j.out\n#BB create_persistent name=keep capacity=256MiB access=striped type=scratch\nhostname\n"),
    );
    assert_eq!(state, "COMPLETED", "{}", bed.logs());
    assert_eq!(reservations(&bed), ["keep"], "#BB create_persistent made the reservation");

    let srun = bed.run(
        "login",
        Some(USER),
        "cd /tmp && srun -N2 --bb 'capacity=256MiB access=striped' bash -c 'touch $DW_JOB_STRIPED/$(hostname) && timeout 30 sh -c \"until [ \\$(ls $DW_JOB_STRIPED | wc -l) = 2 ]; do sleep 0.1; done\" && echo $(hostname) $(ls $DW_JOB_STRIPED)' | sort",
    );
    assert_eq!(String::from_utf8_lossy(&srun.stdout), "n1 n1 n2\nn2 n1 n2\n", "srun --bb: {}", text(&srun));
    let salloc = bed.run(
        "login",
        Some(USER),
        "cd /tmp && salloc -N1 --bb '#DW jobdw capacity=256MiB access_mode=striped type=scratch' srun bash -c 'df --output=source $DW_JOB_STRIPED | tail -1'",
    );
    assert!(String::from_utf8_lossy(&salloc.stdout).starts_with("surge:job-"), "salloc --bb: {}", text(&salloc));

    let (_, state) = bed.submit_and_wait(
        "destroy.sh",
        &format!("#!/bin/bash\n#SBATCH -o {pfs}/destroy-%j.out\n#BB destroy_persistent name=keep\nhostname\n"),
    );
    assert_eq!(state, "COMPLETED", "{}", bed.logs());
    bed.wait_all_released("the reservation destroyed and the interactive jobs' buffers released");
}

/// DataWarp's job end: stage-outs a job's programs asked for "at job end" (with `surge stage`,
/// and from C through libdatawarp's `dw_stage_file_out`) run after the job's commands, the job is not done until they are, and a failed one keeps the job in stage-out
/// with the reason and its buffer kept, until the job is cancelled with hurry.
#[test]
fn stages_asked_for_at_job_end_run_before_the_job_is_done() {
    let cluster = Testbed::up("jobend", &[]);
    let pfs = cluster.pfs().display().to_string();
    let surge = surge_tests::binary("surge").display().to_string();
    // A C program of the job asks through DataWarp's own API (libdatawarp).
    let program = cluster.pfs().join("stage-at-end");
    let source = cluster.pfs().join("stage-at-end.c");
    std::fs::write(
        &source,
        "#include <datawarp.h>\n#include <stdio.h>\n\
         int main(int argc, char **argv) {\n\
             int rc = dw_stage_file_out(argv[1], argv[2], DW_STAGE_AT_JOB_END);\n\
             if (rc != 0) { fprintf(stderr, \"dw_stage_file_out: %d\\n\", rc); return 1; }\n\
             return 0;\n\
         }\n",
    )
    .unwrap();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let lib = repo.join("target/release");
    let compiled = Command::new("cc")
        .arg(&source)
        .arg("-o")
        .arg(&program)
        .arg(format!("-I{}", repo.join("crates/surge-datawarp/include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-ldatawarp")
        .output()
        .unwrap();
    assert!(compiled.status.success(), "cc: {}", text(&compiled));
    let program = program.display();
    let (job, state) = cluster.submit_and_wait(
        "jobend.sh",
        &format!(
            "#!/bin/bash\n#SBATCH -N 1 -o {pfs}/jobend-%j.out\n\
             #DW jobdw type=scratch access_mode=striped capacity=256MiB\n\
             head -c 5000000 /dev/urandom > $DW_JOB_STRIPED/result\n\
             {surge} stage out --when job-end $DW_JOB_STRIPED/result {pfs}/result\n\
             {surge} stage out --when job-end $DW_JOB_STRIPED/revoked {pfs}/revoked\n\
             {surge} stage revoke $DW_JOB_STRIPED/revoked\n\
             cp $DW_JOB_STRIPED/result $DW_JOB_STRIPED/c-result && {program} $DW_JOB_STRIPED/c-result {pfs}/c-result\n\
             sha256sum < $DW_JOB_STRIPED/result\n\
             test -e {pfs}/result && echo staged too early || true\n"
        ),
    );
    let output = std::fs::read_to_string(cluster.pfs().join(format!("jobend-{job}.out"))).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{output}{}", cluster.logs());
    assert!(!output.contains("too early"), "a job-end stage ran before the job's end: {output}");
    let staged = cluster.ok("login", Some(USER), &format!("sha256sum < {pfs}/result"));
    assert_eq!(
        output.lines().find(|l| l.ends_with("  -")),
        Some(staged.as_str()),
        "the result on the shared file system once the job is done: {output}"
    );
    let through_c = cluster.ok("login", Some(USER), &format!("sha256sum < {pfs}/c-result"));
    assert_eq!(through_c, staged, "libdatawarp's DW_STAGE_AT_JOB_END: on the shared file system once the job is done");
    assert!(!cluster.pfs().join("revoked").exists(), "a revoked job-end stage ran");

    let failing = format!(
        "#!/bin/bash\n#SBATCH -N 1 -o {pfs}/failing-%j.out\n\
         #DW jobdw type=scratch access_mode=striped capacity=256MiB\n\
         {surge} stage out --when job-end $DW_JOB_STRIPED/never-written {pfs}/never\n"
    );
    std::fs::write(cluster.pfs().join("failing.sh"), failing).unwrap();
    let job: u64 = cluster.ok("login", Some(USER), &format!("sbatch --parsable {pfs}/failing.sh")).parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let shown = cluster.ok("login", Some(USER), &format!("squeue -h -o '%T|%r' -j {job}"));
        if shown.starts_with("STAGE_OUT|") && shown.contains("slurm_bb_data_out") {
            assert!(shown.contains("never-written"), "the reason names the stage that failed: {shown}");
            break;
        }
        assert!(Instant::now() < deadline, "job {job}: {shown}: {}", cluster.logs());
        std::thread::sleep(Duration::from_millis(300));
    }
    let status = cluster.ok("login", Some(USER), &format!("{surge} status --json"));
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["instances"].as_array().unwrap().iter().any(|i| i["job"] == job), "a failed job-end stage keeps the buffer: {status}");
    cluster.ok("head", None, &format!("scancel --hurry {job}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.ok("login", Some(USER), &format!("squeue -h -j {job}")).is_empty() {
        assert!(Instant::now() < deadline, "job {job} not gone after scancel --hurry: {}", cluster.logs());
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The manager killed while jobs start and end: the running job's Epilog still cleans its
/// nodes (mounts detached, mount daemons stopped, job directories gone) from what the Prolog
/// noted there; a `#DW` submission is refused at once saying why, `squeue` answers, and a job
/// without a buffer is taken and runs; a queued job with a buffer waits to start. Once the
/// manager is back, the first job's teardown completes, the waiting job runs with its
/// buffer, and nothing of either is left.
#[test]
fn the_epilog_cleans_a_node_while_the_manager_is_down() {
    let cluster = Testbed::up("epilog", &[]);
    let pfs = cluster.pfs().display().to_string();
    let sleeper = format!(
        "#!/bin/bash\n#SBATCH -N 2 -o {pfs}/sleeper-%j.out\n\
         #DW jobdw type=scratch access_mode=striped capacity=256MiB pool=local\n\
         srun -N2 bash -c 'touch $DW_JOB_STRIPED/$(hostname); sleep 3'\n"
    );
    std::fs::write(cluster.pfs().join("sleeper.sh"), sleeper).unwrap();
    let job: u64 = cluster.ok("login", Some(USER), &format!("sbatch --parsable {pfs}/sleeper.sh")).parse().unwrap();
    // Queued behind it (it needs every compute node), to start while the manager is down.
    let waiting = cluster
        .submit(
            "waiting.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -N 3 -o {pfs}/waiting-%j.out\n\
                 #DW jobdw type=scratch access_mode=striped capacity=256MiB pool=bb\n\
                 srun -N3 bash -c 'touch $DW_JOB_STRIPED/$(hostname)'; ls $DW_JOB_STRIPED | tr '\\n' ' '\n"
            ),
        )
        .unwrap();
    let mounted = |node: &str| cluster.ok(node, None, "grep -c ' /var/spool/surge/jobs/' /proc/self/mounts || true") != "0";
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(mounted("n1") && mounted("n2")) {
        assert!(Instant::now() < deadline, "job {job} never mounted its buffer: {}", cluster.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    cluster.kill_manager();

    // The job's steps end, its Epilog runs on both nodes with no manager to ask.
    let deadline = Instant::now() + Duration::from_secs(60);
    for node in ["n1", "n2"] {
        loop {
            let left = cluster.ok(node, None, &format!("grep -c ' /var/spool/surge/jobs/' /proc/self/mounts || true; ls /var/spool/surge/jobs | grep -c -x {job} || true; for p in $(pgrep -x surge-fuse); do [ \"$(readlink /proc/$p/ns/mnt)\" = \"$(readlink /proc/self/ns/mnt)\" ] && echo daemon; done; true"));
            if left == "0\n0" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "on {node}, the manager down: {left:?} (fuse mounts, job directories, mount daemons): {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    // Meanwhile a #DW submission is refused at once, saying why, and the controller answers
    // (each bounded by `timeout`: a stall fails the test rather than hang it; the time is
    // printed, not asserted).
    let asked = Instant::now();
    let refused = cluster.run("login", Some(USER), &format!("timeout 30 sbatch {pfs}/sleeper.sh"));
    println!("sbatch with #DW, the manager down: refused after {:.1} s", asked.elapsed().as_secs_f64());
    assert!(refused.status.code() != Some(124), "sbatch stalled while the manager was down");
    assert!(!refused.status.success() && text(&refused).contains("manager"), "sbatch with #DW, the manager down: {}", text(&refused));
    let asked = Instant::now();
    assert!(cluster.run("login", Some(USER), "timeout 30 squeue").status.success(), "squeue while the manager was down");
    println!("squeue, the manager down: {:.1} s", asked.elapsed().as_secs_f64());
    let plain = cluster
        .submit("plain.sh", &format!("#!/bin/bash\n#SBATCH -N 1 -o {pfs}/plain-%j.out\necho no buffer\n"))
        .expect("a job without a buffer, submitted while the manager is down");

    // The manager back: the job's teardown completes and no instance is left.
    cluster.start_manager(None);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let state = cluster.ok("login", Some(USER), &format!("scontrol show job {job} | grep -o 'JobState=[A-Z_]*'"));
        if state == "JobState=COMPLETED" {
            break;
        }
        assert!(Instant::now() < deadline, "job {job} {state} after the manager came back: {}", cluster.logs());
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut state = None;
    cluster.wait_until("the waiting job done", Duration::from_secs(120), || {
        state = cluster.final_state(waiting);
        state.is_some()
    });
    let output = std::fs::read_to_string(cluster.pfs().join(format!("waiting-{waiting}.out"))).unwrap_or_default();
    assert_eq!((state.as_deref(), output.as_str()), (Some("COMPLETED"), "n1 n2 n3 "), "the waiting job: {}", cluster.logs());
    let mut state = None;
    cluster.wait_until("the job without a buffer done", Duration::from_secs(60), || {
        state = cluster.final_state(plain);
        state.is_some()
    });
    assert_eq!(state.as_deref(), Some("COMPLETED"), "the job without a buffer");
    cluster.wait_all_released("both jobs' buffers released");
    for node in ["n1", "n2", "n3", "bb1", "bb2"] {
        cluster.wait_until(&format!("{node} clean"), Duration::from_secs(30), || {
            cluster.jobs_left(node).is_empty() && cluster.storage_left(node).is_empty()
        });
    }
}

/// A compute node lost mid-job (every process of it killed, as a power loss): the job ends
/// with the node's failure, its buffer is torn down on the node that is left, and once the
/// lost node is back (a reboot: its storage as it was) nothing of the job is left on any
/// node: no mount, no mount daemon, no job directory, no server, no storage.
#[test]
fn a_compute_node_lost_mid_job_leaves_nothing_behind() {
    let bed = Testbed::up("nodeloss", &[]);
    let pfs = bed.pfs().display().to_string();
    let job = bed
        .submit(
            "lost.sh",
            &format!(
                "#!/bin/bash\n#SBATCH -N 2 -w n1,n2 --no-requeue -o {pfs}/lost-%j.out\n\
                 #DW jobdw type=scratch access_mode=striped capacity=256MiB pool=local\n\
                 srun -N2 bash -c 'head -c 4000000 /dev/urandom > $DW_JOB_STRIPED/$(hostname); sleep 300'\n"
            ),
        )
        .unwrap();
    bed.wait_until("the job's buffer used on both nodes", Duration::from_secs(60), || {
        ["n1", "n2"]
            .iter()
            .all(|node| bed.run(node, Some(USER), &format!("test -s /var/spool/surge/jobs/{job}/striped/{node}")).status.success())
    });
    let killed = bed.testbed("kill", &["n2"]);
    assert!(killed.status.success(), "{}", text(&killed));

    let mut state = None;
    bed.wait_until("the job ended by its node's loss", Duration::from_secs(120), || {
        state = bed.final_state(job);
        state.is_some()
    });
    assert_eq!(state.as_deref(), Some("NODE_FAIL"), "{}", bed.logs());
    bed.wait_all_released("the lost job's buffer released");
    bed.wait_until("n1 clean", Duration::from_secs(60), || bed.jobs_left("n1").is_empty() && bed.storage_left("n1").is_empty());

    let started = bed.testbed("start", &["n2"]);
    assert!(started.status.success(), "{}", text(&started));
    bed.wait_until("n2 clean once back", Duration::from_secs(90), || bed.jobs_left("n2").is_empty() && bed.storage_left("n2").is_empty());
}

/// A persistent reservation an admin makes on the head node for one user (`nobody`), shared
/// with a group: a job of another member of the group (`games`, a member through a
/// supplementary group) writes into it; the manager is killed (-9) and started again; a job of
/// the owner reads what the member wrote; the member may not destroy it, the admin does, and
/// nothing of it is left.
#[test]
fn a_reservation_shared_with_a_group_outlives_a_manager_restart() {
    let team = surge_tests::TempGroup::new("tb", &["games"]);
    let member = surge_tests::user("games").uid.to_string();
    let bed = Testbed::up("shared", &[]);
    let pfs = bed.pfs().display().to_string();
    let surge = surge_tests::binary("surge").display().to_string();
    bed.ok("head", None, &format!("{surge} reservation create proj --capacity 512MiB --owner nobody --group {}", team.name));

    let path = bed.pfs().join("member.sh");
    std::fs::write(
        &path,
        format!("#!/bin/bash\n#SBATCH -o {pfs}/member-%j.out\n#DW persistentdw name=proj\necho from-the-member > $DW_PERSISTENT_STRIPED_proj/note\n"),
    )
    .unwrap();
    let job: u64 = bed.ok("login", Some(&member), &format!("sbatch --parsable {}", path.display())).parse().unwrap();
    let mut state = None;
    bed.wait_until("the member's job done", Duration::from_secs(120), || {
        state = bed.final_state(job);
        state.is_some()
    });
    let output = std::fs::read_to_string(bed.pfs().join(format!("member-{job}.out"))).unwrap_or_default();
    assert_eq!(state.as_deref(), Some("COMPLETED"), "the member's job: {output}{}", bed.logs());

    bed.kill_manager();
    bed.start_manager(None);
    let (job, state) = bed.submit_and_wait(
        "owner.sh",
        &format!("#!/bin/bash\n#SBATCH -o {pfs}/owner-%j.out\n#DW persistentdw name=proj\ncat $DW_PERSISTENT_STRIPED_proj/note\n"),
    );
    let output = std::fs::read_to_string(bed.pfs().join(format!("owner-{job}.out"))).unwrap_or_default();
    assert_eq!((state.as_str(), output.as_str()), ("COMPLETED", "from-the-member\n"), "{}", bed.logs());

    let refused = bed.surge(Some(&member), "reservation destroy proj");
    assert!(!refused.status.success(), "a member destroyed the owner's reservation: {}", text(&refused));
    bed.ok("head", None, &format!("{surge} reservation destroy proj"));
    bed.wait_all_released("the reservation destroyed");
    for node in ["bb1", "bb2"] {
        assert_eq!(bed.storage_left(node), "", "{node}'s storage after the reservation");
    }
}
