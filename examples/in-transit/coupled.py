"""Reference workflow v2 (`run.py --coupled`): the in-transit workflow when the simulation
outruns its visualization, coupled through Surge's workflow features (docs/workflow.md).

Seed 001 found what the burst buffer lacked for in-transit work: with the simulation kappa
times faster than the visualization (kappa = R_sim / R_vis > 1), two thirds of the plot files
went unprocessed, processed files had to leave the buffer on the fly, and checkpoints needed a
manager outside the simulation's code. This runs the same simulation twice on a Surge instance,
with one visualization consumer kappa times slower than the simulation (`--kappa`, default 3):

(v1) as the seed ran it: one consumer that stops with the simulation, plot files kept, the
     simulation staging its own checkpoints out, no limit on the buffer but its size;
(v2) a consumer group (`surge queue`), to which this driver adds consumers while the backlog
     grows (up to `MAX_CONSUMERS`); a retention policy that removes each plot file once the
     group acknowledged it; back-pressure at a high-water mark, on a buffer sized at a fifth of
     what the run writes; the drain manager (`surge drain`) staging checkpoints out and keeping
     the newest one, so that the simulation makes no staging call.

It samples buffer use, backlog, consumers and kappa over time, prints a table and writes
`coupled.txt`, `coupled.json` and `coupled.png` into `--out`. It checks only what holds
whatever the machine's speed (`add_checks`): v1 renders no plot file twice and its group's
counts match its frames; v2 renders every published plot file exactly once, its group
acknowledges them all, its buffer stays under a capacity the run writes 5x over, every
checkpoint reaches the PFS whole (the size written, the same bytes as v1's) without a staging
call in the simulation. How many plot files v1 leaves unprocessed, how many consumers v2
grows to and kappa depend on how fast this shared machine runs at the moment: they are
measurements (`measurements` in `coupled.json`, and the summary), not checks.

The visualization's slowness is a stand-in: each frame is rendered for real, then the
consumer waits until kappa times the simulation's step time has passed (measured before the
run), as a visualization on other nodes would take. On this 2-core machine the simulation has
one CPU and everything else the other, so more consumers gain by overlapping those waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import conventions as cv
import run as v1
import simulation
import stageio
from throttled_pfs import MIB, PFSSetupError, ThrottledPFS

MAX_CONSUMERS = 4
# --quick: enough steps for the backlog to build up (and the run to write 5x the v2 buffer).
QUICK_STEPS = 60
# A consumer is added once the backlog is past this many plot files per consumer, at most
# once every `ADD_EVERY` seconds (the new one needs a moment to take its share).
BACKLOG_PER_CONSUMER = 2
ADD_EVERY = 2.0
SAMPLE_EVERY = 0.25


def step_seconds(bb: v1.SurgeInstance, restart: Path, placement: v1.Placement, steps: int = 6) -> float:
    """The simulation's time per step (compute and plot write, median) on `bb`, as it will run."""
    work = bb.mount / "calibration"
    timings = work / "timings.json"
    cmd = [v1.PY, v1.HERE / "simulation.py", "run", "--restart", restart, "--workdir", work, "--steps", steps,
           "--checkpoint-every", 10 * steps, "--timings", timings]
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True, cwd=v1.HERE, preexec_fn=placement.for_simulation())
    per_step = [s["compute_s"] + s["plot_write_s"] for s in json.loads(timings.read_text())["steps"]]
    shutil.rmtree(work)
    return statistics.median(per_step)


class Sampler(threading.Thread):
    """Buffer use (statfs of the mount), backlog, consumers and kappa every SAMPLE_EVERY seconds;
    with `grow`, starts another consumer while the backlog grows."""

    def __init__(self, bb: v1.SurgeInstance, plot_dir: Path, consumers: list, start_consumer, grow: bool):
        super().__init__(daemon=True)
        self.bb, self.plot_dir, self.grow = bb, plot_dir, grow
        self.consumers, self.start_consumer = consumers, start_consumer
        self.samples: list[dict] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        last_added = -ADD_EVERY
        while not self.stop.is_set():
            st = os.statvfs(self.bb.mount)
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            try:
                groups = json.loads(self.bb.cli("queue", "status", str(self.plot_dir), "--json"))
            except (v1.WorkflowError, json.JSONDecodeError):
                groups = []
            vis = next((g for g in groups if g["group"] == "vis"), None)
            now = time.monotonic() - self.t0
            consumers = len(self.consumers)
            sample = {"t": now, "used": used, "consumers": consumers,
                      "backlog": vis["backlog"] if vis else 0, "kappa": vis["kappa"] if vis else None,
                      "produced": vis["produced"] if vis else 0, "done": vis["done"] if vis else 0}
            self.samples.append(sample)
            crowded = vis and vis["backlog"] > BACKLOG_PER_CONSUMER * consumers
            if self.grow and crowded and consumers < MAX_CONSUMERS and now - last_added >= ADD_EVERY:
                self.start_consumer(f"backlog {vis['backlog']} at {now:.1f} s")
                last_added = now
            self.stop.wait(SAMPLE_EVERY)


def one_run(label: str, bb: v1.SurgeInstance, pfs_dir: Path, restart: Path, out: Path, args, frame_seconds: float,
            coupled: bool) -> dict:
    """The simulation and its consumers on `bb`; what happened, as figures."""
    work = bb.mount / label
    plot_dir, chk_dir, frames = work / "plt", work / "chk", work / "frames"
    for d in (plot_dir, chk_dir, frames):
        d.mkdir(parents=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    if coupled:
        bb.cli("retention", str(plot_dir), "--pattern", "plt*.h5", "--after-groups")
        bb.cli("drain", str(chk_dir), "--pattern", "chk*.h5", "--every", "1", "--to", str(pfs_dir), "--keep", "1")
    sim = [v1.PY, v1.HERE / "simulation.py", "run", "--restart", restart, "--workdir", work, "--steps", args.steps,
           "--plot-every", args.plot_every, "--checkpoint-every", args.checkpoint_every, "--plot-dir", plot_dir,
           "--checkpoint-dir", chk_dir, "--timings", out / f"{label}-simulation.json"]
    if not coupled:
        sim += ["--stage-out-dir", pfs_dir]  # v1: the simulation stages its checkpoints itself
    consumers: list[subprocess.Popen] = []
    placement = v1.Placement(not args.no_pin)

    def start_consumer(reason: str) -> None:
        n = len(consumers)
        cmd = [v1.PY, v1.HERE / "visualize.py", "--group", "vis", "--watch", plot_dir, "--frames", frames,
               "--sim-done", work / cv.SIM_DONE, "--frame-seconds", f"{frame_seconds:.4f}",
               "--timings", out / f"{label}-visualize-{n}.json"]
        if not coupled:
            cmd.append("--stop-with-simulation")
        log = open(logs / f"{label}-visualize-{n}.log", "w")
        consumers.append(subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT, cwd=v1.HERE,
                                          preexec_fn=placement.for_services()))
        log.close()
        print(f"  {label}: consumer {n + 1} started ({reason})", flush=True)

    start_consumer("the first")
    sampler = Sampler(bb, plot_dir, consumers, start_consumer, grow=coupled)
    sampler.start()
    t0 = time.perf_counter()
    with open(logs / f"{label}-simulation.log", "w") as log:
        p = subprocess.run([str(c) for c in sim], stdout=log, stderr=subprocess.STDOUT, cwd=v1.HERE,
                           preexec_fn=placement.for_simulation())
    sim_s = time.perf_counter() - t0
    if p.returncode != 0:
        tail = (logs / f"{label}-simulation.log").read_text().strip().splitlines()[-10:]
        raise v1.WorkflowError(f"{label}: the simulation exited with {p.returncode}:\n  " + "\n  ".join(tail))
    for c in consumers:
        if c.wait(timeout=600) != 0:
            raise v1.WorkflowError(f"{label}: a consumer failed (see {logs})")
    workflow_s = time.perf_counter() - t0
    timings = json.loads((out / f"{label}-simulation.json").read_text())
    if coupled:
        bb.cli("drain", str(chk_dir), "--wait", "--timeout", "300")
    else:
        # The job's end: v1's simulation started each checkpoint's stage-out; they all land.
        for name in timings["checkpoints"]:
            stageio.wait(chk_dir / name)
    sampler.stop.set()
    sampler.join()
    # The group's counts once every consumer is gone (nothing can change them any more).
    groups = json.loads(bb.cli("queue", "status", str(plot_dir), "--json"))
    vis = next((g for g in groups if g["group"] == "vis"), {})
    group = {k: vis.get(k) for k in ("produced", "done", "claimed", "backlog", "expired")}

    written = sum(s["plot_bytes"] + s["checkpoint_bytes"] for s in timings["steps"])
    plot_steps = [s["step"] for s in timings["steps"] if s["plot_bytes"]]
    # Every frame a consumer rendered (and acknowledged), from each consumer's own record:
    # a plot file rendered twice shows here twice.
    rendered_steps = sorted(f["step"] for n in range(len(consumers))
                            for f in json.loads((out / f"{label}-visualize-{n}.json").read_text())["frames"])
    frames_out = len(cv.numbered(frames, cv.FRAME_RE))
    kappas = [s["kappa"] for s in sampler.samples if s["kappa"]]
    on_pfs = sorted(p.name for p in pfs_dir.iterdir()) if pfs_dir.exists() else []
    return {
        "label": label, "coupled": coupled, "simulation_s": sim_s, "workflow_s": workflow_s,
        "plot_files": len(plot_steps), "rendered": frames_out, "unprocessed": len(plot_steps) - frames_out,
        "plot_steps": plot_steps, "rendered_steps": rendered_steps, "group": group,
        "consumers": len(consumers), "written": written, "capacity": bb.capacity,
        "peak_used": max(s["used"] for s in sampler.samples), "peak_backlog": max(s["backlog"] for s in sampler.samples),
        "kappa": statistics.median(kappas) if kappas else None,
        "stage_calls": sum(1 for s in timings["steps"] if s["stage_call_s"] > 0),
        "checkpoints": timings["checkpoints"], "on_pfs": on_pfs,
        # What the simulation wrote of each checkpoint, and what reached the PFS (read back
        # while the PFS is there): whole copies have the same size and, across v1 and v2
        # (same physics, same restart), the same bytes.
        "checkpoint_bytes": {cv.checkpoint_name(s["step"]): s["checkpoint_bytes"] for s in timings["steps"] if s["checkpoint_bytes"]},
        "pfs_bytes": {n: (pfs_dir / n).stat().st_size for n in on_pfs},
        "pfs_sha256": {n: v1.sha256(pfs_dir / n) for n in on_pfs},
        "samples": sampler.samples,
    }


def table(runs: list[dict], kappa: float) -> str:
    rows = [
        ("plot files published", lambda r: f"{r['plot_files']}"),
        ("rendered", lambda r: f"{r['rendered']}"),
        ("left unprocessed", lambda r: f"{r['unprocessed']} ({100 * r['unprocessed'] / max(r['plot_files'], 1):.0f}%)"),
        ("consumers (at most)", lambda r: f"{r['consumers']}"),
        ("kappa (median of samples)", lambda r: "-" if r["kappa"] is None else f"{r['kappa']:.2f}"),
        ("peak backlog (plot files)", lambda r: f"{r['peak_backlog']}"),
        ("data written", lambda r: f"{r['written'] / MIB:.0f} MiB"),
        ("buffer capacity", lambda r: f"{r['capacity'] / MIB:.0f} MiB"),
        ("written / capacity", lambda r: f"{r['written'] / r['capacity']:.1f}x"),
        ("peak buffer use", lambda r: f"{r['peak_used'] / MIB:.0f} MiB ({100 * r['peak_used'] / r['capacity']:.0f}%)"),
        ("checkpoints on the PFS", lambda r: f"{len(r['on_pfs'])} of {len(r['checkpoints'])}"),
        ("staging calls by the simulation", lambda r: f"{r['stage_calls']}"),
        ("simulation run time", lambda r: f"{r['simulation_s']:.1f} s"),
        ("until the last frame", lambda r: f"{r['workflow_s']:.1f} s"),
    ]
    head = ["", "v1: one consumer, no policy", "v2: group, retention, back-pressure, drain"]
    lines = [[name] + [fmt(r) for r in runs] for name, fmt in rows]
    widths = [max(len(str(x[i])) for x in [head] + lines) for i in range(3)]
    out = [f"In-transit workflow v2: a visualization {kappa:g}x slower than the simulation"]
    out.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))) for line in lines]
    return "\n".join(out)


def figure(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    for r, style in zip(runs, ("--", "-")):
        t = [s["t"] for s in r["samples"]]
        name = "v1" if not r["coupled"] else "v2"
        axes[0].plot(t, [s["used"] / MIB for s in r["samples"]], style, label=f"{name} buffer use")
        axes[1].plot(t, [s["backlog"] for s in r["samples"]], style, label=f"{name} backlog")
        axes[1].step(t, [s["consumers"] for s in r["samples"]], style, where="post", alpha=0.6, label=f"{name} consumers")
        axes[2].plot(t, [s["kappa"] if s["kappa"] is not None else float("nan") for s in r["samples"]], style, label=f"{name} kappa")
    v2 = runs[-1]
    axes[0].axhline(v2["capacity"] / MIB, color="k", lw=0.8, label="v2 capacity")
    axes[0].set_ylabel("MiB")
    axes[1].set_ylabel("plot files / consumers")
    axes[2].set_ylabel("production / consumption")
    axes[2].axhline(1.0, color="k", lw=0.8)
    axes[2].set_xlabel("seconds since the simulation started")
    for ax in axes:
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.3)
    fig.suptitle("Buffer use, backlog and kappa over time (kappa over the last minute)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_checks(checks: v1.Checks, first: dict, second: dict) -> None:
    """What the two runs must show whatever this machine's speed: counts, sizes and bytes, never
    a time, a rate or a ratio of them. (How many plot files v1's lone consumer left, how many
    consumers v2 grew to, kappa: `measurements`.)"""
    def counts(r: dict) -> str:
        g = r["group"]
        return f"produced {g['produced']}, done {g['done']}, claimed {g['claimed']}, waiting {g['backlog']}"

    steps = first["rendered_steps"]
    checks.add("v1: one consumer, never more", first["consumers"] == 1, f"{first['consumers']}")
    checks.add("v1: no plot file rendered twice, none that was not published",
               len(set(steps)) == len(steps) == first["rendered"] and set(steps) <= set(first["plot_steps"]),
               f"{len(steps)} frames of {first['plot_files']} plot files")
    g = first["group"]
    # (No group at all: the consumer stopped before its first claim, and rendered nothing.)
    checks.add("v1: the group's counts match what its consumer did (every plot file produced, done = rendered, none held)",
               (g["produced"] is None and first["rendered"] == 0)
               or (g["produced"] == first["plot_files"] and g["done"] == first["rendered"] and g["claimed"] == 0
                   and g["backlog"] == first["plot_files"] - first["rendered"]), counts(first))
    checks.add("v1: every checkpoint staged out by the simulation, under its final name",
               first["on_pfs"] == sorted(first["checkpoints"]), f"{len(first['on_pfs'])} of {len(first['checkpoints'])}")
    checks.add("v2: every published plot file rendered exactly once",
               second["rendered_steps"] == sorted(second["plot_steps"]) and second["rendered"] == second["plot_files"],
               f"{len(second['rendered_steps'])} frames rendered ({len(set(second['rendered_steps']))} distinct) "
               f"for {second['plot_files']} plot files")
    g = second["group"]
    checks.add("v2: the group acknowledged every plot file, nothing held or waiting",
               g["produced"] == g["done"] == second["plot_files"] and g["claimed"] == 0 and g["backlog"] == 0, counts(second))
    checks.add("v2: the run wrote at least 5x the buffer's capacity", second["written"] >= 5 * second["capacity"],
               f"{second['written'] / second['capacity']:.1f}x")
    checks.add("v2: buffer use stayed under its capacity", second["peak_used"] <= second["capacity"],
               f"peak {second['peak_used'] / MIB:.0f} of {second['capacity'] / MIB:.0f} MiB")
    checks.add("v2: every checkpoint drained to the PFS, under its final name", second["on_pfs"] == sorted(second["checkpoints"]),
               f"{len(second['on_pfs'])} of {len(second['checkpoints'])}")
    cut = [f"{r['label']} {n} is {r['pfs_bytes'][n]} bytes, not {r['checkpoint_bytes'].get(n)}"
           for r in (first, second) for n in r["on_pfs"] if r["pfs_bytes"][n] != r["checkpoint_bytes"].get(n)]
    differ = [f"{n} differs" for n in second["on_pfs"] if first["pfs_sha256"].get(n) != second["pfs_sha256"][n]]
    checks.add("checkpoints staged out whole: the size the simulation wrote, v1's and v2's copies bitwise identical",
               not cut and not differ and first["on_pfs"] == second["on_pfs"], "; ".join(cut + differ))
    checks.add("v2: the simulation made no staging call", second["stage_calls"] == 0)


def measurements(first: dict, second: dict) -> dict:
    """What depends on how fast this machine ran the two runs (a shared machine, a slow moment):
    reported, not checked."""
    return {
        "v1_unprocessed": first["unprocessed"], "v1_plot_files": first["plot_files"], "v1_kappa": first["kappa"],
        "v1_peak_backlog": first["peak_backlog"],
        "v2_consumers": second["consumers"], "v2_consumers_added": second["consumers"] - 1, "v2_kappa": second["kappa"],
        "v2_peak_backlog": second["peak_backlog"],
        "v1_simulation_s": first["simulation_s"], "v2_simulation_s": second["simulation_s"],
    }


def measurements_text(m: dict) -> str:
    def kappa(k):
        return "-" if k is None else f"{k:.2f}"

    return "\n".join([
        "measured (depends on this machine's speed; reported, not checked):",
        f"  v1: the lone consumer left {m['v1_unprocessed']} of {m['v1_plot_files']} plot files unprocessed "
        f"(kappa {kappa(m['v1_kappa'])}, peak backlog {m['v1_peak_backlog']})",
        f"  v2: consumers added to the first as the backlog grew: {m['v2_consumers_added']} "
        f"(kappa {kappa(m['v2_kappa'])}, peak backlog {m['v2_peak_backlog']})",
    ])


def main(args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    placement = v1.Placement(not args.no_pin)
    n3 = args.grid ** 3
    plot_bytes, ckpt_bytes = 3 * 8 * n3, 2 * 8 * n3
    if args.quick:
        args.steps = QUICK_STEPS
    n_plots, n_ckpt = args.steps // args.plot_every, args.steps // args.checkpoint_every + 1
    written = n_plots * plot_bytes + n_ckpt * ckpt_bytes
    # v2's buffer: a sixth of what the run writes (so that it writes over 5x its capacity),
    # with room for a few plot files and checkpoints; v1's holds everything.
    small = max(written // 6, 5 * plot_bytes + 2 * ckpt_bytes)
    large = written + 256 * MIB
    print(f"coupled workflow: {args.grid}^3, {args.steps} steps; v2 buffer {small // MIB} MiB for {written // MIB} MiB written",
          flush=True)
    frame_seconds = 0.0
    checks = v1.Checks()
    runs = []
    with contextlib.ExitStack() as stack:
        scratch = Path(tempfile.mkdtemp(prefix="in-transit-v2-"))
        stack.callback(shutil.rmtree, scratch, ignore_errors=True)
        stack.callback(v1._restore_env, "SURGE_LIB", os.environ.get("SURGE_LIB"))
        surge = v1.snapshot_build(scratch / "bin")
        try:
            pfs = stack.enter_context(ThrottledPFS(written + 1024 * MIB, args.pfs_mib_s, probe_mib=args.probe_mib))
        except PFSSetupError as e:
            sys.exit(f"cannot set up the throttled PFS: {e}")
        restart = pfs.root / "restart.h5"
        subprocess.run([v1.PY, v1.HERE / "simulation.py", "init", "--grid", str(args.grid), "--out", str(restart)], check=True)
        for label, coupled, capacity, up in (
            ("v1", False, large, ()),
            ("v2", True, small, ("--high-water", "0.8", "--low-water", "0.6", "--pressure-wait", "120")),
        ):
            with v1.SurgeInstance(surge, capacity, scratch / f"bb-{label}", placement, up_args=up) as bb:
                if not frame_seconds:
                    frame_seconds = args.kappa * step_seconds(bb, restart, placement)
                    print(f"one frame takes {frame_seconds:.2f} s: kappa {args.kappa:g} x the simulation's step", flush=True)
                print(f"({label}) {'consumer group' if coupled else 'one consumer'} on a {capacity // MIB} MiB buffer ...",
                      flush=True)
                runs.append(one_run(label, bb, pfs.root / f"checkpoints-{label}", restart, out, args, frame_seconds, coupled))
    first, second = runs
    add_checks(checks, first, second)
    measured = measurements(first, second)
    text = table(runs, args.kappa) + "\n\n" + measurements_text(measured) + "\n\nchecks:\n" + checks.text()
    print("\n" + text)
    (out / "coupled.txt").write_text(text + "\n")
    (out / "coupled.json").write_text(json.dumps({"kappa": args.kappa, "frame_seconds": frame_seconds, "runs": runs,
                                                  "measurements": measured,
                                                  "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks.items],
                                                  "checks_passed": checks.passed}, indent=1))
    figure(runs, out / "coupled.png")
    print(f"\nwrote {out / 'coupled.txt'}, {out / 'coupled.json'}, {out / 'coupled.png'}")
    return 0 if checks.passed else 1
