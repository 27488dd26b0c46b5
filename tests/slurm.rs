//! Real Slurm: `slurm/testbed` brings up munged, slurmctld and three slurmd nodes on this host,
//! a job submitted as an unprivileged user runs a step on all three, a script with bad `#DW`
//! lines is refused at submit with every problem shown by sbatch, and `slurm/testbed down`
//! leaves no daemon behind. The base the Slurm integration's tests build on.

use std::path::PathBuf;
use std::process::Command;

use surge_tests::text;

fn testbed(action: &str, dir: &std::path::Path) -> std::process::Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../slurm/testbed");
    // Its own controller port: several test runs on one machine must not meet.
    let port = 20_000 + std::process::id() % 20_000;
    Command::new(script).args([action, dir.to_str().unwrap()]).env("SURGE_TESTBED_PORT", port.to_string()).output().unwrap()
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn a_job_of_an_unprivileged_user_runs_on_three_slurm_nodes() {
    let dir = std::env::temp_dir().join(format!("surge-test-slurm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let up = testbed("up", &dir);
    assert!(up.status.success(), "{}", text(&up));
    let conf = dir.join("etc/slurm.conf");
    assert!(String::from_utf8_lossy(&up.stdout).contains(&format!("export SLURM_CONF={}", conf.display())), "{}", text(&up));
    let pids: Vec<(&str, i32)> = ["slurmctld", "slurmd-n1", "slurmd-n2", "slurmd-n3", "munged"]
        .into_iter()
        .map(|daemon| {
            let pid = std::fs::read_to_string(dir.join(format!("run/{daemon}.pid"))).unwrap_or_default();
            (daemon, pid.trim().parse().unwrap_or_else(|_| panic!("no pid file for {daemon}")))
        })
        .collect();
    for &(daemon, pid) in &pids {
        assert!(alive(pid), "{daemon} (pid {pid}) not running");
    }

    let script = dir.join("job.sh");
    let output = dir.join("job.out");
    std::fs::write(
        &script,
        format!("#!/bin/bash\n#SBATCH -N 3\n#SBATCH -o {}\nsrun -N3 bash -c 'echo $SLURMD_NODENAME $(id -u)'\n", output.display()),
    )
    .unwrap();
    // The job writes its output into the testbed's directory as that user.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let submit = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sbatch", "--parsable"])
        .arg(&script)
        .env("SLURM_CONF", &conf)
        .output()
        .unwrap();
    let job = String::from_utf8_lossy(&submit.stdout).trim().to_string();
    // Polled rather than `sbatch --wait`, whose own polling backs off to seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while submit.status.success() && std::time::Instant::now() < deadline {
        let queued = Command::new("squeue").args(["-h", "-j", &job]).env("SLURM_CONF", &conf).output().unwrap();
        if queued.stdout.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let lines = std::fs::read_to_string(&output).unwrap_or_default();

    // A script with bad #DW lines is refused at submit, and sbatch says why, line by line.
    let bad = dir.join("bad.sh");
    std::fs::write(
        &bad,
        "#!/bin/bash\n#DW persistentdw name=9lives\n\
         #DW stage_in type=file source=input.h5 destination=$DW_PERSISTENT_STRIPED_results/input.h5\n#DW swap 10G\nhostname\n",
    )
    .unwrap();
    let refused = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sbatch"])
        .arg(&bad)
        .env("SLURM_CONF", &conf)
        .output()
        .unwrap();
    let down = testbed("down", &dir);
    assert!(submit.status.success(), "{}\njob output: {lines}", text(&submit));
    let mut seen: Vec<&str> = lines.lines().collect();
    seen.sort();
    assert_eq!(seen, ["n1 65534", "n2 65534", "n3 65534"], "one step task per node, as the submitting user");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a script with bad #DW lines was accepted: {}", text(&refused));
    for problem in ["line 2: name '9lives' must start with a letter", "line 3: source=input.h5", "line 4: unknown directive 'swap'"] {
        assert!(said.contains(problem), "sbatch does not show {problem:?}: {said}");
    }

    assert!(down.status.success(), "{}", text(&down));
    for &(daemon, pid) in &pids {
        assert!(!alive(pid), "{daemon} (pid {pid}) still running after down");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
