#!/usr/bin/env python3
"""Runs the in-transit reference workflow twice, on a throttled PFS and on Surge, and compares.

The workflow is the seed paper's Chombo-Crunch + VisIt + encoder pipeline at laptop scale:
`simulation.py` writes a plot file every step and a checkpoint every few steps, `visualize.py`
renders each published plot file into a PNG frame, `encode.py` turns the frames into a movie.
They run concurrently and couple only through files in a shared working directory.

(a) PFS run: the working directory is on the throttled PFS (`throttled_pfs.py`), the restart
    file is read from there, checkpoints are written there.
(b) Burst-buffer run: a 4-server Surge instance is started and mounted; the restart file is
    staged in from the PFS before the job (`#DW stage_in`), the working directory is on the
    Surge mount, every checkpoint is staged out to the PFS by the simulation right after it is
    written, and the movie is staged out at the end (`#DW stage_out`).

Then it checks the results (same physics bit for bit, staged-out checkpoints complete on the PFS,
movie frame count), prints the rows of the paper's Table III for both runs, and writes
`table.txt`, `results.json` and `comparison.png` into `--out`, with the raw timing files.

It needs root (loop device, mount, blkio throttle). Everything it sets up - the PFS image,
loop device, mount and throttle rule, the Surge instance with its private SURGE_HOME, the
child processes - is torn down on exit, also on failure or Ctrl-C; nothing else is touched.

    sudo nice .venv/bin/python examples/in-transit/run.py            # full run, a few minutes
    sudo nice .venv/bin/python examples/in-transit/run.py --quick    # < 1 minute
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conventions as cv  # noqa: E402
import report  # noqa: E402
import stageio  # noqa: E402
from throttled_pfs import MIB, PFSSetupError, ThrottledPFS  # noqa: E402

REPO = HERE.parents[1]
SURGE = REPO / "target" / "release" / "surge"
PY = sys.executable

# --quick: small enough for a test (< 1 minute for both runs), big enough to exercise everything.
QUICK = {"steps": 20, "grid": 64, "plot_every": 1, "checkpoint_every": 5, "probe_mib": 64}
FULL = {"steps": 100, "grid": 128, "plot_every": 1, "checkpoint_every": 10, "probe_mib": 256}


class WorkflowError(RuntimeError):
    pass


class Placement:
    """Which CPUs the simulation gets and which everything else gets.

    In the paper the simulation, the visualization and the burst buffer ran on separate nodes.
    Here they share one machine; by default the simulation gets the first CPU to itself and the
    visualization, the encoder and Surge's servers and FUSE daemon share the others, so that
    both runs compute at the same speed and the comparison is about I/O. (`--no-pin`: no pinning.)
    """

    def __init__(self, pin: bool):
        cpus = sorted(os.sched_getaffinity(0))
        if pin and len(cpus) >= 2:
            self.simulation, self.services = {cpus[0]}, set(cpus[1:])
        else:
            self.simulation = self.services = None

    @staticmethod
    def _preexec(cpus):
        # Set in the child before exec: every thread and process it starts inherits it.
        return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))

    def for_simulation(self):
        return self._preexec(self.simulation)

    def for_services(self):
        return self._preexec(self.services)

    def describe(self) -> str:
        if self.simulation is None:
            return "not pinned"
        return f"simulation on CPU {sorted(self.simulation)}, visualization/encoder/Surge on CPUs {sorted(self.services)}"


# ---- Surge ------------------------------------------------------------------------------------

class SurgeInstance(cv.SetUpTornDown):
    """A Surge instance of our own: private SURGE_HOME, data under /dev/shm, FUSE-mounted."""

    def __init__(self, surge: Path, capacity: int, mount: Path, placement: Placement, servers: int = 4,
                 up_args: tuple[str, ...] = ()):
        self.surge, self.capacity, self.mount, self.servers, self.placement = surge, capacity, mount, servers, placement
        self.up_args = up_args
        self.name = f"intransit{os.getpid()}"
        self.server_pids: list[int] = []

    def _setup(self) -> None:
        home = tempfile.mkdtemp(prefix="surge-home-")
        self._stack.callback(shutil.rmtree, home, ignore_errors=True)
        root = tempfile.mkdtemp(prefix="surge-intransit-", dir="/dev/shm")
        self._stack.callback(shutil.rmtree, root, ignore_errors=True)
        # The staging API (in this process and in the simulation) finds the instance through SURGE_HOME.
        self._stack.callback(_restore_env, "SURGE_HOME", os.environ.get("SURGE_HOME"))
        os.environ["SURGE_HOME"] = home
        self.mount.mkdir(parents=True, exist_ok=True)
        self._stack.callback(self._down)
        # Servers and FUSE daemon are children of `surge up`: they inherit its CPU placement.
        self._surge("up", "--name", self.name, "--servers", str(self.servers), "--capacity", f"{self.capacity // MIB}M",
                    "--root", root, "--mount", str(self.mount), *self.up_args, preexec=self.placement.for_services())
        desc = json.loads((Path(home) / "instances" / f"{self.name}.json").read_text())
        self.server_pids = [s["pid"] for s in desc["servers"] if s.get("pid")]

    def cli(self, *args: str) -> str:
        """`surge ARGS...` (paths on this instance's mount name it); its output, or WorkflowError."""
        return self._surge(*args)

    def _surge(self, *args: str, preexec=None) -> str:
        p = subprocess.run([str(self.surge), *args], capture_output=True, text=True, preexec_fn=preexec)
        if p.returncode != 0:
            raise WorkflowError(f"`surge {' '.join(args)}` failed: {p.stderr.strip()}")
        return p.stdout

    def stages(self) -> list[dict]:
        """Every stage of the instance with its bytes and elapsed time (`surge stage status --json`)."""
        return json.loads(self._surge("stage", "status", "--json", "--instance", self.name))

    def _down(self) -> None:
        """Stops the instance; never raises, so a failure here cannot hide the error that led here."""
        try:
            # --force: by now run.py has waited for every stage it needs (and checked the results);
            # after a failure the instance must go, not be kept for a stage.
            self._surge("down", "--force", self.name)
            return
        except Exception as e:  # noqa: BLE001 - fall back to stopping what we started, by pid
            print(f"warning: {e}; stopping its servers and mount directly", file=sys.stderr)
        if os.path.ismount(self.mount):
            subprocess.run(["umount", "--lazy", str(self.mount)], check=False)
        for pid in self.server_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def snapshot_build(bindir: Path) -> Path:
    """Copies Surge's programs and libsurge.so into `bindir`; returns the `surge` to use.

    `surge` starts the `surge-server` and `surge-fuse` beside it, and the staging API loads the
    library named by SURGE_LIB: a private copy keeps one consistent build for the whole run,
    even if target/release is rebuilt meanwhile.
    """
    bindir.mkdir(parents=True, exist_ok=True)
    for name in ("surge", "surge-server", "surge-fuse", "libsurge.so"):
        if SURGE.with_name(name).exists():
            shutil.copy2(SURGE.with_name(name), bindir / name)
    if (bindir / "libsurge.so").exists():
        os.environ["SURGE_LIB"] = str(bindir / "libsurge.so")  # read when surge.staging is imported
    return bindir / "surge"


def _restore_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


# ---- one workflow run -------------------------------------------------------------------------

def run_workflow(label: str, workdir: Path, restart: Path, out: Path, args, placement: Placement,
                 stage_out_dir: Path | None = None) -> float:
    """Runs simulation, visualization and encoder concurrently; returns the wall time until the movie is out."""
    workdir.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    sim = [PY, HERE / "simulation.py", "run", "--restart", restart, "--workdir", workdir, "--steps", args.steps,
           "--plot-every", args.plot_every, "--checkpoint-every", args.checkpoint_every,
           "--timings", out / f"{label}-simulation.json"]
    if stage_out_dir:
        sim += ["--stage-out-dir", stage_out_dir]
    vis = [PY, HERE / "visualize.py", "--watch", workdir, "--frames", workdir / "frames",
           "--timings", out / f"{label}-visualize.json"] + ([] if args.keep_plots else ["--delete"])
    enc = [PY, HERE / "encode.py", "--frames", workdir / "frames", "--done", workdir / cv.VIS_DONE,
           "--out", workdir / "movie.mp4"]
    procs: dict[str, subprocess.Popen] = {}
    t0 = time.perf_counter()
    try:
        # Consumers first, so they are already watching when the first plot file is published.
        for name, cmd, cpus in (("visualize", vis, placement.for_services()), ("encode", enc, placement.for_services()),
                                ("simulation", sim, placement.for_simulation())):
            log = open(logs / f"{label}-{name}.log", "w")
            procs[name] = subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT, cwd=HERE,
                                           preexec_fn=cpus)
            log.close()
        while procs:
            for name, p in list(procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del procs[name]
                if rc != 0:
                    tail = (logs / f"{label}-{name}.log").read_text().strip().splitlines()[-15:]
                    raise WorkflowError(f"{label} run: {name} exited with {rc}:\n  " + "\n  ".join(tail))
            time.sleep(0.1)
        return time.perf_counter() - t0
    finally:
        for p in procs.values():  # only reached with survivors on failure
            p.terminate()
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---- checks -------------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def movie_frames(path: Path) -> int:
    p = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
                        "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", str(path)],
                       capture_output=True, text=True, check=True)
    return int(p.stdout.strip())


class Checks:
    def __init__(self) -> None:
        self.items: list[tuple[str, bool, str]] = []

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.items.append((name, bool(ok), detail))

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.items)

    def text(self) -> str:
        return "\n".join(f"  [{'ok' if ok else 'FAILED'}] {name}" + (f": {d}" if d else "") for name, ok, d in self.items)


def check_outputs(label: str, workdir: Path, movie: Path, expected_frames: int, checks: Checks, keep: Path) -> dict:
    """Frames and movie of one run; keeps the movie and the last frame in `keep` (the run's files go at teardown)."""
    frames = cv.numbered(workdir / "frames", cv.FRAME_RE)
    checks.add(f"{label}: one frame per plot file", len(frames) == expected_frames, f"{len(frames)} frames, {expected_frames} plot files")
    n = movie_frames(movie) if movie.exists() else -1
    # (Details name files by what they are: the run's directories are gone when this is read.)
    checks.add(f"{label}: movie has every frame (ffprobe)", n == expected_frames, f"{n} frames in its {movie.name}")
    kept = {"frames": len(frames), "movie_frames": n}
    if movie.exists():
        kept["movie"] = str(shutil.copyfile(movie, keep / f"{label.lower()}-movie.mp4"))
    if frames:
        kept["last_frame"] = str(shutil.copyfile(frames[max(frames)], keep / f"{label.lower()}-last-frame.png"))
    return kept


# ---- main ---------------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"small run for tests: {QUICK}")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--grid", type=int, help="cells per side")
    ap.add_argument("--plot-every", type=int)
    ap.add_argument("--checkpoint-every", type=int)
    ap.add_argument("--pfs-mib-s", type=float, default=100.0, help="PFS bandwidth limit, read and write (MiB/s)")
    ap.add_argument("--no-pin", action="store_true", help="do not give the simulation a CPU of its own")
    ap.add_argument("--keep-plots", action="store_true", help="do not delete plot files once rendered")
    ap.add_argument("--bb-capacity-mib", type=int, help="Surge instance capacity (default: sized from the run)")
    ap.add_argument("--pfs-only", action="store_true", help="run only the PFS half (the baseline)")
    ap.add_argument("--out", default="in-transit-results", help="directory for the table, JSON, figure and raw timings")
    ap.add_argument("--coupled", action="store_true",
                    help="workflow v2 (coupled.py): kappa = 3, one consumer vs a consumer group that grows with the backlog, "
                         "retention, back-pressure and the drain manager")
    ap.add_argument("--kappa", type=float, default=3.0, help="with --coupled: how much slower one consumer is than the simulation")
    args = ap.parse_args()
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def preflight(args) -> None:
    if os.geteuid() != 0:
        sys.exit("run.py needs root: the PFS is a throttled loop-device file system (losetup, mount, blkio cgroup)")
    for tool in ("ffmpeg", "ffprobe", "losetup", "mkfs.ext4", "mount", "dd", "lsblk"):
        if shutil.which(tool) is None:
            sys.exit(f"run.py needs `{tool}` (Debian: ffmpeg, mount, util-linux, e2fsprogs, coreutils)")
    if not args.pfs_only and not SURGE.exists():
        sys.exit(f"{SURGE} is missing: run `make build` first")


def _raise_exit(signum, _frame):
    # SIGTERM unwinds like Ctrl-C, so every `with` below tears down what it set up.
    raise SystemExit(128 + signum)


def main() -> int:
    args = parse_args()
    preflight(args)
    if args.coupled:
        import coupled

        signal.signal(signal.SIGTERM, _raise_exit)
        return coupled.main(args)
    signal.signal(signal.SIGTERM, _raise_exit)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    n3 = args.grid ** 3
    plot_bytes, ckpt_bytes = 3 * 8 * n3 + MIB, 2 * 8 * n3 + MIB
    n_ckpt = args.steps // args.checkpoint_every + 1
    backlog = args.steps if args.keep_plots else min(args.steps, 40)  # plot files the consumer may lag behind
    pfs_size = (2 * n_ckpt + 2) * ckpt_bytes + backlog * plot_bytes + 1024 * MIB
    bb_capacity = (args.bb_capacity_mib or 0) * MIB or (n_ckpt + 2) * ckpt_bytes + backlog * plot_bytes + 256 * MIB

    placement = Placement(not args.no_pin)
    checks = Checks()
    runs: dict[str, dict] = {}
    timings: dict[str, dict] = {}
    load: dict[str, float] = {}  # load average as each run starts (a shared machine slows compute)
    with contextlib.ExitStack() as stack:
        scratch = Path(tempfile.mkdtemp(prefix="in-transit-"))
        stack.callback(shutil.rmtree, scratch, ignore_errors=True)
        if not args.pfs_only:
            stack.callback(_restore_env, "SURGE_LIB", os.environ.get("SURGE_LIB"))
            surge = snapshot_build(scratch / "bin")
            reason = stageio.unavailable_reason()
            if reason:
                sys.exit(f"{reason}\n(--pfs-only runs the PFS half alone)")
        try:
            pfs = stack.enter_context(ThrottledPFS(pfs_size, args.pfs_mib_s, probe_mib=args.probe_mib))
        except PFSSetupError as e:
            sys.exit(f"cannot set up the throttled PFS: {e}")
        print(f"PFS: {pfs.describe()}\nCPUs: {placement.describe()}", flush=True)

        # The "previous run" whose checkpoint this job restarts from.
        restart = pfs.root / "restart.h5"
        subprocess.run([PY, HERE / "simulation.py", "init", "--grid", str(args.grid), "--out", str(restart)], check=True)

        load["PFS"] = os.getloadavg()[0]
        runs["PFS"], timings["PFS"] = pfs_run(pfs, restart, out, args, placement, checks)
        if not args.pfs_only:
            bb = stack.enter_context(SurgeInstance(surge, bb_capacity, scratch / "bb", placement))
            load["Surge"] = os.getloadavg()[0]
            runs["Surge"], timings["Surge"] = burst_buffer_run(pfs, bb, restart, out, args, placement, checks)
            final = cv.checkpoint_name(timings["PFS"]["last_step"])
            same = sha256(pfs.root / "run-pfs" / final) == sha256(bb.mount / "run" / final)
            checks.add("same physics: final checkpoints of both runs bitwise identical", same, final)

    first = next(iter(runs.values()))
    setup = (f"Set-up: {first['grid']}^3 grid, {first['steps']} steps, a plot file every {first['plot_every']} and a checkpoint "
             f"every {first['checkpoint_every']} steps; PFS: {pfs.describe()}; CPUs: {placement.describe()}.")
    text = report.headline(runs) + "\n" + setup + "\n\n" + report.table(runs)
    note = report.contention_note(runs, load)
    if note:
        text += "\n" + note
    text += "\n\nchecks:\n" + checks.text()
    stall = runs.get("Surge", {}).get("stall", {}).get("growth")
    if stall is not None:
        text += f"\n\nstaging stall: step time {100 * stall:+.1f}% while a checkpoint stages out (target <= +10%): " \
                f"{'met' if stall <= 0.10 else 'NOT met'}"
    print("\n" + text)
    (out / "table.txt").write_text(text + "\n")
    report.write_json(out / "results.json", {
        "parameters": {k: getattr(args, k) for k in ("steps", "grid", "plot_every", "checkpoint_every", "pfs_mib_s", "keep_plots")},
        "pfs": {"limit_mib_s": args.pfs_mib_s, "measured_write_mib_s": pfs.measured_write_mib_s,
                "measured_read_mib_s": pfs.measured_read_mib_s, "method": pfs.describe()},
        "bb_capacity_mib": bb_capacity // MIB,
        "cpus": placement.describe(),
        "runs": runs,
        "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks.items],
        "checks_passed": checks.passed,
    })
    report.figure(runs, timings, out / "comparison.png", setup)
    print(f"\nwrote {out / 'table.txt'}, {out / 'results.json'}, {out / 'comparison.png'}")
    return 0 if checks.passed else 1


def pfs_run(pfs: ThrottledPFS, restart: Path, out: Path, args, placement: Placement, checks: Checks) -> tuple[dict, dict]:
    """(a) Everything on the PFS: restart read from it, plot files, checkpoints, frames, movie written to it."""
    pfs.remount()  # cold cache: the restart read comes from the throttled device
    print(f"(a) PFS run: {args.grid}^3, {args.steps} steps ...", flush=True)
    workdir = pfs.root / "run-pfs"
    t = run_workflow("pfs", workdir, restart, out, args, placement)
    timings = report.read_json(out / "pfs-simulation.json")
    figures = report.summarize(timings) | {"workflow_s": t, "job_s": t, "stage_in_s": None}
    figures |= check_outputs("PFS", workdir, workdir / "movie.mp4", figures["plot_files"], checks, out)
    return figures, timings


def burst_buffer_run(pfs: ThrottledPFS, bb: SurgeInstance, restart: Path, out: Path, args, placement: Placement,
                     checks: Checks) -> tuple[dict, dict]:
    """(b) On Surge: stage-in before, checkpoints staged out as written, movie staged out after (the paper's job)."""
    pfs.remount()
    print(f"(b) burst-buffer run: Surge, {bb.servers} servers, {bb.capacity // MIB} MiB ...", flush=True)
    workdir, pfs_dir = bb.mount / "run", pfs.root / "run-bb"
    staged_ckpts = pfs_dir / "checkpoints"
    job0 = time.perf_counter()
    stageio.stage_in(bb.mount / "restart.h5", restart)
    stage_in_s = time.perf_counter() - job0
    t = run_workflow("bb", workdir, bb.mount / "restart.h5", out, args, placement, stage_out_dir=staged_ckpts)
    timings = report.read_json(out / "bb-simulation.json")
    # Job end: the movie goes out, and the job is over once every stage-out has landed.
    stageio.stage_out_now(workdir / "movie.mp4", pfs_dir / "movie.mp4")
    for name in timings["checkpoints"]:
        stageio.wait(workdir / name)
    stageio.wait(workdir / "movie.mp4")
    job_s = time.perf_counter() - job0
    figures = report.summarize(timings) | {"workflow_s": t, "job_s": job_s, "stage_in_s": stage_in_s,
                                           "staging": stage_bandwidth(bb.stages())}
    figures |= check_outputs("Surge", workdir, pfs_dir / "movie.mp4", figures["plot_files"], checks, out)
    check_staging(timings["checkpoints"], workdir, staged_ckpts, workdir / "movie.mp4", pfs_dir / "movie.mp4", checks)
    return figures, timings


def stage_bandwidth(stages: list[dict]) -> dict:
    """Throughput of the stage copies Surge's servers did, per direction: shows they met the PFS limit."""
    out = {}
    for direction in ("In", "Out"):
        done = [s for s in stages if s["direction"] == direction and s["state"] == "Done" and s["elapsed"] > 0]
        if done:
            mib = sum(s["bytes_total"] for s in done) / MIB
            out[direction.lower()] = {"stages": len(done), "mib": mib, "busy_s": sum(s["elapsed"] for s in done),
                                      "mean_mib_s": statistics.fmean(s["bytes_total"] / MIB / s["elapsed"] for s in done)}
    return out


def check_staging(names: list[str], bb_dir: Path, pfs_dir: Path, movie_bb: Path, movie_pfs: Path, checks: Checks) -> None:
    """Every staged-out file is on the PFS under its final name, byte for byte what the simulation wrote."""
    on_pfs = sorted(p.name for p in pfs_dir.iterdir()) if pfs_dir.exists() else []
    checks.add("staged-out checkpoints on the PFS under final names (no leftovers)", on_pfs == sorted(names),
               f"{len(on_pfs)} files, {len(names)} expected")
    bad = [n for n in names if not (pfs_dir / n).exists() or sha256(pfs_dir / n) != sha256(bb_dir / n)]
    checks.add("staged-out checkpoints match the burst buffer copies (sha256)", not bad, ", ".join(bad))
    ok = movie_pfs.exists() and sha256(movie_pfs) == sha256(movie_bb)
    checks.add("movie staged out to the PFS intact", ok, f"{movie_pfs.name}, sha256 against the burst buffer's copy")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (WorkflowError, PFSSetupError, stageio.StagingUnavailable) as e:
        sys.exit(f"run.py: {e}")
