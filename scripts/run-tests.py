#!/usr/bin/env python3
"""Runs Surge's whole test suite with its parts side by side: `make test` calls it.

The suite is a few dozen test executables (one per crate's unit tests and per file under a
crate's tests/; a package's `suite` executable, one per module in it) and the Python tests. Most of their time is waiting (servers starting, timeouts
running out, Slurm daemons), so they run several at a time: the longest first (as the last
run measured them), each executable with a few test threads. Four parts of two threads each
end in 0.9x the time of three of three on 2 cores (237 s against 260 s), with as many
threads in all. Each part's output goes to
target/test-logs/<part>.log; a failing part's log is printed in full, and the run fails.
At the end a table gives each part's time, slowest first (kept in target/test-times.json
for the next run's order).

Every test executable is found from cargo's own build output, so a new test file needs no
change here. `--only NAME` (repeatable) runs just the parts whose names contain NAME.

Usage: scripts/run-tests.py [--jobs N] [--test-threads N] [--only NAME] [--list]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "target" / "test-logs"
TIMES = ROOT / "target" / "test-times.json"
# Seconds each long part took on a 2-core machine, for the order of a first run (a fresh clone
# has no target/test-times.json yet): the longest must not start last.
FIRST_RUN_SECONDS = {"surge-tests:slurm": 100, "python": 105, "python:long": 70, "surge-tests:faults": 72,
                     "surge-tests:cluster": 70, "surge-tests:campaign": 64, "surge-tests:fuse": 70, "surge-sim:model": 35,
                     "surge-tests:soak": 26, "surge-tests:data_plane": 22, "surge-tests:nodes": 21, "surge-tests:workflow": 15,
                     "surge-tests:staging": 17, "surge-tests:fsck": 14, "surge-tests:namespace": 12, "surge-tests:preload": 8,
                     "surge-tests:fsx_mounts": 7, "surge-tests:fsstress_mounts": 8}


def rust_parts():
    """(name, argv) of every test executable of the workspace, built (release) if needed."""
    build = subprocess.run(
        ["cargo", "test", "--release", "--workspace", "--no-run", "--message-format=json-render-diagnostics"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if build.returncode != 0:
        sys.exit("run-tests: building the tests failed (see above)")
    parts = []
    for line in build.stdout.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message.get("profile", {}).get("test"):
            continue
        target = message["target"]
        # "path+file:///…/crates/surge-fuse#0.1.0", or "…/tests#surge-tests@0.1.0" when the
        # folder is not named after the package.
        location, _, version = message["package_id"].partition("#")
        package = version.split("@")[0] if "@" in version else location.rsplit("/", 1)[-1]
        kind = "lib" if target["kind"] in (["lib"], ["rlib"], ["cdylib"], ["cdylib", "rlib"]) else target["kind"][0]
        if kind == "test" and target["name"] == "suite":
            parts += suite_parts(package, message["executable"])
            continue
        name = f"{package}:{target['name']}" if kind == "test" else f"{package}:{kind}:{target['name']}"
        parts.append((name, [message["executable"]]))
    return parts


def suite_parts(package, executable):
    """A package's `suite` test executable holds one module per subject (one executable
    links faster than one per file): each module is a part of its own, `package:module`."""
    listed = subprocess.run([executable, "--list", "--format", "terse"], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    modules = {}
    for line in listed.stdout.splitlines():
        test, _, what = line.rpartition(": ")
        if what == "test":
            modules.setdefault(test.split("::")[0], []).append(test)
    return [(f"{package}:{module}", [executable, "--exact"] + tests) for module, tests in sorted(modules.items())]


# The Python tests that take most of its time, run as a part of their own beside the rest.
PYTHON_LONG = ["test_in_transit.py", "test_sim_replay.py"]


def python_parts():
    pytest = [str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "--durations=10"]
    tests = ROOT / "python" / "tests"
    return [("python:long", pytest + [str(tests / name) for name in PYTHON_LONG]),
            ("python", pytest + [f"--ignore={tests / name}" for name in PYTHON_LONG] + [str(tests)])]


def run_part(name, argv, test_threads):
    log = LOGS / (name.replace(":", "-").replace("/", "-") + ".log")
    if not name.startswith("python"):
        argv = argv + [f"--test-threads={test_threads}"]
    started = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.run(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    return name, code, time.monotonic() - started, log


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("SURGE_TEST_JOBS", "4")),
                        help="parts run at once (default 4, or SURGE_TEST_JOBS)")
    parser.add_argument("--test-threads", type=int, default=int(os.environ.get("SURGE_TEST_THREADS", "2")),
                        help="test threads of each Rust executable (default 2, or SURGE_TEST_THREADS)")
    parser.add_argument("--only", action="append", default=[], help="run only the parts whose names contain this")
    parser.add_argument("--list", action="store_true", help="list the parts and stop")
    args = parser.parse_args()

    parts = rust_parts() + python_parts()
    if args.only:
        parts = [p for p in parts if any(o in p[0] for o in args.only)]
        if not parts:
            sys.exit(f"run-tests: no part matches {args.only}")
    previous = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    # Longest first, so that the last to finish is a short one; a part never timed counts as
    # long unless it is known to be short (a crate's own unit tests take under a second).
    def expected(name):
        return previous.get(name, FIRST_RUN_SECONDS.get(name, 1 if ":lib:" in name or ":bin:" in name else 10))
    parts.sort(key=lambda p: -expected(p[0]))
    if args.list:
        for name, argv in parts:
            print(f"{name}\t{' '.join(argv)}")
        return 0
    LOGS.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    results = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        running = [pool.submit(run_part, name, argv, args.test_threads) for name, argv in parts]
        for done in as_completed(running):
            name, code, seconds, log = done.result()
            results.append((name, code, seconds, log))
            verdict = "ok" if code == 0 else f"FAILED (exit {code})"
            print(f"[{time.monotonic() - started:6.0f} s] {name}: {verdict} in {seconds:.1f} s", flush=True)
            if code != 0:
                print(f"---- {log} ----\n{log.read_text()}---- end of {name} ----", flush=True)

    previous.update({name: round(seconds, 1) for name, _, seconds, _ in results})
    TIMES.write_text(json.dumps(previous, indent=1, sort_keys=True) + "\n")
    print(f"\n{'part':<50} {'seconds':>8}  result")
    for name, code, seconds, _ in sorted(results, key=lambda r: -r[2]):
        print(f"{name:<50} {seconds:8.1f}  {'ok' if code == 0 else 'FAILED'}")
    failed = [name for name, code, _, _ in results if code != 0]
    print(f"\n{len(results) - len(failed)} of {len(results)} parts passed in {time.monotonic() - started:.0f} s"
          f" ({args.jobs} at a time, {args.test_threads} test threads each)")
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
