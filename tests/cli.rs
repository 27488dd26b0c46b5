//! The `surge` command as a newcomer and a job script use it: what guards their data and their
//! allocation (a closed stdout, a relative root, a capacity the device cannot hold).

use std::process::Command;

use surge_tests::{binary, scratch, text};

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
