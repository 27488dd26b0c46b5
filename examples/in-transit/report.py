"""Turns the workflow's measured timings into the seed paper's Table III, a JSON and a figure.

The paper reports per case: grid, number of time steps, plot file and checkpoint sizes, compute
time per step, checkpoint and plot file write times, and the share of run time spent in I/O
for three I/O patterns, computed from those times:

    share = (t_ckpt / n_ckpt + t_plot / n_plot) / (t_compute + t_ckpt / n_ckpt + t_plot / n_plot)

with (n_ckpt, n_plot) = (10, 1) for pattern (a), (100, 10) for (b), (500, 100) for (c).
(That formula reproduces the paper's Lustre column and its (b) burst-buffer figures exactly;
its (a) and (c) burst-buffer figures come out higher than the formula gives, which the paper
does not explain.) Besides those computed shares, the share measured in the run itself is
reported, for the run's own plot / checkpoint intervals.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

PATTERNS = {"a": (10, 1), "b": (100, 10), "c": (500, 100)}
MIB = 1 << 20


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def io_share(compute: float, ckpt: float, plot: float, ckpt_every: int, plot_every: int) -> float:
    io = ckpt / ckpt_every + plot / plot_every
    return io / (compute + io)


def summarize(timings: dict) -> dict:
    """Table III figures of one run, from the simulation's timing file."""
    steps = timings["steps"]
    plots = [s for s in steps if s["plot_bytes"]]
    ckpts = [s for s in steps if s["checkpoint_bytes"]]
    compute = _mean([s["compute_s"] for s in steps])
    plot_w = _mean([s["plot_write_s"] for s in plots])
    # The checkpoint write time as the application sees it: writing the file plus the call
    # that starts its stage-out (zero on the PFS run).
    ckpt_w = _mean([s["checkpoint_write_s"] + s["stage_call_s"] for s in ckpts])
    io_total = sum(s["plot_write_s"] + s["checkpoint_write_s"] + s["stage_call_s"] for s in steps)
    total = io_total + sum(s["compute_s"] for s in steps)
    out = {
        "grid": timings["grid"],
        "steps": len(steps),
        "plot_every": timings["plot_every"],
        "checkpoint_every": timings["checkpoint_every"],
        "plot_files": len(plots),
        "checkpoints": len(ckpts),
        "plot_file_mib": plots[0]["plot_bytes"] / MIB if plots else 0.0,
        "checkpoint_mib": ckpts[0]["checkpoint_bytes"] / MIB if ckpts else 0.0,
        "compute_s_per_step": compute,
        # The machine is shared: the fastest step shows the compute time without contention.
        "compute_s_min": min(s["compute_s"] for s in steps),
        "checkpoint_write_s": ckpt_w,
        "stage_call_s": _mean([s["stage_call_s"] for s in ckpts]),
        "plot_write_s": plot_w,
        "io_share_measured": io_total / total,
        "restart_read_s": timings["restart_read_s"],
        "simulation_s": timings["run_s"],
    }
    for name, (ce, pe) in PATTERNS.items():
        out[f"io_share_{name}"] = io_share(compute, ckpt_w, plot_w, ce, pe)
    out["stall"] = stall(steps)
    return out


def stall(steps: list[dict]) -> dict:
    """Step time while a checkpoint was staging out vs without.

    Step time here is compute + plot write: the checkpoint write itself is left out because
    the steps that write one are exactly those that start a stage-out. The first step is left
    out too (it pays for first-touch allocations).
    """
    rest = steps[1:]
    busy = [s["compute_s"] + s["plot_write_s"] for s in rest if s["staging_active"]]
    idle = [s["compute_s"] + s["plot_write_s"] for s in rest if not s["staging_active"]]
    out = {"steps_staging": len(busy), "steps_not_staging": len(idle),
           "step_s_staging": _mean(busy), "step_s_not_staging": _mean(idle)}
    out["growth"] = out["step_s_staging"] / out["step_s_not_staging"] - 1 if busy and idle else None
    return out


def _pct(x: float) -> str:
    return f"{100 * x:#.3g}%"


def table(runs: dict[str, dict], pfs_note: str) -> str:
    """The Table III rows, one column per run (`runs` maps column title -> summarize() + extras)."""
    first = next(iter(runs.values()))
    rows = [
        ("grid cells", lambda r: f"{r['grid']}^3"),
        ("# of timesteps", lambda r: str(r["steps"])),
        ("plot file size", lambda r: f"{r['plot_file_mib']:.1f} MiB"),
        ("checkpoint size", lambda r: f"{r['checkpoint_mib']:.1f} MiB"),
        ("compute time per ts", lambda r: f"{r['compute_s_per_step']:.3f} s"),
        ("  fastest step", lambda r: f"{r['compute_s_min']:.3f} s"),
        ("checkpoint write time", lambda r: f"{r['checkpoint_write_s']:.3f} s"),
        ("  of which stage-out call", lambda r: f"{r['stage_call_s']:.4f} s"),
        ("plot file write time", lambda r: f"{r['plot_write_s']:.3f} s"),
        (f"I/O time, this run (plot/{first['plot_every']}, ckpt/{first['checkpoint_every']})",
         lambda r: _pct(r["io_share_measured"])),
        ("I/O time, pattern (a) ckpt/10 plot/1", lambda r: _pct(r["io_share_a"])),
        ("I/O time, pattern (b) ckpt/100 plot/10", lambda r: _pct(r["io_share_b"])),
        ("I/O time, pattern (c) ckpt/500 plot/100", lambda r: _pct(r["io_share_c"])),
        ("restart read time", lambda r: f"{r['restart_read_s']:.3f} s"),
        ("restart stage-in time", lambda r: f"{r['stage_in_s']:.2f} s" if r.get("stage_in_s") is not None else "-"),
        ("stage copies in / out (servers<->PFS)", lambda r: _staging_cell(r.get("staging"))),
        ("step time, staging / not", lambda r: _stall_cell(r["stall"])),
        ("simulation run time", lambda r: f"{r['simulation_s']:.1f} s"),
        ("workflow end-to-end", lambda r: f"{r['workflow_s']:.1f} s"),
        ("job end-to-end (with staging)", lambda r: f"{r['job_s']:.1f} s"),
        ("frames / movie frames", lambda r: f"{r['frames']} / {r['movie_frames']}"),
    ]
    titles = list(runs)
    cells = [[cell(runs[t]) for t in titles] for _, cell in rows]
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(len(t), *(len(row[i]) for row in cells)) + 3 for i, t in enumerate(titles)]
    lines = [f"PFS: {pfs_note}", "", "".ljust(width) + "".join(t.rjust(c) for t, c in zip(titles, cols))]
    lines.append("-" * (width + sum(cols)))
    for (label, _), row in zip(rows, cells):
        lines.append(label.ljust(width) + "".join(text.rjust(c) for text, c in zip(row, cols)))
    return "\n".join(lines)


def _staging_cell(staging: dict | None) -> str:
    if not staging:
        return "-"
    return " / ".join(f"{staging[d]['mean_mib_s']:.0f} MiB/s" if d in staging else "-" for d in ("in", "out"))


def _stall_cell(s: dict) -> str:
    if s["growth"] is None:
        return "-"
    return f"{s['step_s_staging']:.3f}/{s['step_s_not_staging']:.3f} ({100 * s['growth']:+.1f}%)"


def figure(runs: dict[str, dict], timings: dict[str, dict], path: Path) -> None:
    """Per-step times of both runs, mean times per operation, and the I/O share per pattern."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    for title, t in timings.items():
        steps = t["steps"]
        x = [s["step"] for s in steps]
        y = [s["compute_s"] + s["plot_write_s"] + s["checkpoint_write_s"] + s["stage_call_s"] for s in steps]
        ax.plot(x, y, marker=".", lw=1, label=title)
    ax.set(xlabel="time step", ylabel="step time as the simulation sees it [s]", title="per-step time")
    ax.legend()

    ax = axes[1]
    keys = [("compute_s_per_step", "compute / ts"), ("plot_write_s", "plot write"), ("checkpoint_write_s", "ckpt write")]
    x = np.arange(len(keys))
    w = 0.8 / len(runs)
    for i, (title, r) in enumerate(runs.items()):
        ax.bar(x + i * w, [r[k] for k, _ in keys], w, label=title)
    ax.set_xticks(x + w * (len(runs) - 1) / 2, [label for _, label in keys])
    ax.set(ylabel="seconds", title="mean times (Table III)")
    ax.legend()

    ax = axes[2]
    pats = ["measured"] + list(PATTERNS)
    x = np.arange(len(pats))
    for i, (title, r) in enumerate(runs.items()):
        vals = [r["io_share_measured"]] + [r[f"io_share_{p}"] for p in PATTERNS]
        ax.bar(x + i * w, [100 * v for v in vals], w, label=title)
    ax.set_xticks(x + w * (len(runs) - 1) / 2, ["this run"] + [f"pattern ({p})" for p in PATTERNS])
    ax.set_yscale("log")
    ax.set(ylabel="share of run time in I/O [%]", title="I/O share")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=1, default=str))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())
