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

# The seed paper's Table III, its dolomite case (Chombo-Crunch on NERSC Cori: Lustre, and the
# Cray DataWarp burst buffer), beside which the measured rows are printed.
PAPER = {
    "# of timesteps": ("20000", "20000"),
    "plot file size": ("7.46 GiB", "7.46 GiB"),
    "checkpoint size": ("6.12 GiB", "6.12 GiB"),
    "compute time per ts": ("9.87 s", "9.87 s"),
    "checkpoint write time": ("47.28 s", "1.47 s"),
    "plot file write time": ("14.45 s", "0.62 s"),
    "I/O time, pattern (a) ckpt/10 plot/1": ("66%", "13.8%"),
    "I/O time, pattern (b) ckpt/100 plot/10": ("16.3%", "0.77%"),
    "I/O time, pattern (c) ckpt/500 plot/100": ("2.36%", "0.126%"),
}
PAPER_COLUMNS = ("paper: Lustre", "paper: BB")


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


def headline(runs: dict[str, dict]) -> str:
    """One sentence of result: what the burst buffer changed, and what the paper measured."""
    pfs, bb = runs.get("PFS"), runs.get("Surge")
    if not (pfs and bb):
        only = next(iter(runs))
        return (f"Result ({only} run only): {_pct(runs[only]['io_share_a'])} of the run time in I/O under pattern (a), "
                f"checkpoint write {runs[only]['checkpoint_write_s']:.3f} s, plot file write {runs[only]['plot_write_s']:.3f} s.")
    return (f"Result: writing through Surge instead of the throttled PFS, the simulation spent "
            f"{_pct(bb['io_share_a'])} instead of {_pct(pfs['io_share_a'])} of its run time in I/O under pattern (a) "
            f"(checkpoint writes {pfs['checkpoint_write_s'] / bb['checkpoint_write_s']:.1f}x, plot file writes "
            f"{pfs['plot_write_s'] / bb['plot_write_s']:.1f}x faster), with the same physics to the bit; "
            f"the paper measured {PAPER['I/O time, pattern (a) ckpt/10 plot/1'][0]} on Lustre against "
            f"{PAPER['I/O time, pattern (a) ckpt/10 plot/1'][1]} on Cori's burst buffer.")


def contention_note(runs: dict[str, dict], load: dict[str, float]) -> str | None:
    """Why the compute time per step may differ between two runs of the same computation."""
    pfs, bb = runs.get("PFS"), runs.get("Surge")
    if not (pfs and bb):
        return None
    mean_gap = bb["compute_s_per_step"] / pfs["compute_s_per_step"] - 1
    if abs(mean_gap) < 0.10:
        return None
    loads = ", ".join(f"{name} run {value:.1f}" for name, value in load.items())
    return (f"note: the computation is the same in both runs, yet its mean time per step differs by {100 * mean_gap:+.0f}%: "
            f"the machine was shared (load average at the start: {loads}); the fastest steps "
            f"({pfs['compute_s_min']:.3f} s vs {bb['compute_s_min']:.3f} s) show the uncontended compute time.")


def table(runs: dict[str, dict]) -> str:
    """The Table III rows, one column per run (`runs` maps column title -> summarize() + extras),
    and the paper's dolomite case beside them."""
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
    titles = list(runs) + list(PAPER_COLUMNS)
    cells = [[cell(runs[t]) for t in runs] + list(PAPER.get(label, ("-", "-"))) for label, cell in rows]
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(len(t), *(len(row[i]) for row in cells)) + 3 for i, t in enumerate(titles)]
    lines = ["".ljust(width) + "".join(t.rjust(c) for t, c in zip(titles, cols))]
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


def figure(runs: dict[str, dict], timings: dict[str, dict], path: Path, setup: str) -> None:
    """Per-step times of both runs (checkpoint steps marked), mean times per operation, and the
    I/O share per pattern against the paper's, each bar labelled; the set-up as a caption."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    ax = axes[0]
    for title, t in timings.items():
        steps = t["steps"]
        x = [s["step"] for s in steps]
        y = [s["compute_s"] + s["plot_write_s"] + s["checkpoint_write_s"] + s["stage_call_s"] for s in steps]
        line, = ax.plot(x, y, marker=".", lw=1, label=title)
        ckpt = [(s["step"], yy) for s, yy in zip(steps, y) if s["checkpoint_bytes"]]
        if ckpt:
            ax.scatter(*zip(*ckpt), marker="s", s=40, facecolors="none", edgecolors=line.get_color(), zorder=3)
    ax.scatter([], [], marker="s", facecolors="none", edgecolors="gray", label="step writing a checkpoint")
    ax.set(xlabel="time step", ylabel="step time as the simulation sees it [s]", title="per-step time")
    ax.legend(fontsize=8)

    ax = axes[1]
    keys = [("compute_s_per_step", "compute / ts"), ("plot_write_s", "plot write"), ("checkpoint_write_s", "ckpt write")]
    x = np.arange(len(keys))
    w = 0.8 / len(runs)
    for i, (title, r) in enumerate(runs.items()):
        bars = ax.bar(x + i * w, [r[k] for k, _ in keys], w, label=title)
        ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.set_xticks(x + w * (len(runs) - 1) / 2, [label for _, label in keys])
    ax.set(ylabel="seconds", title="mean times (Table III)")
    ax.legend(fontsize=8)

    ax = axes[2]
    pats = list(PATTERNS)
    paper = {"paper: Lustre": [], "paper: BB": []}
    for p in pats:
        lustre, bb = next(v for k, v in PAPER.items() if k.startswith(f"I/O time, pattern ({p})"))
        paper["paper: Lustre"].append(float(lustre.rstrip("%")))
        paper["paper: BB"].append(float(bb.rstrip("%")))
    series = {title: [100 * r[f"io_share_{p}"] for p in pats] for title, r in runs.items()} | paper
    x = np.arange(len(pats))
    w = 0.8 / len(series)
    for i, (title, vals) in enumerate(series.items()):
        bars = ax.bar(x + i * w, vals, w, label=title, hatch="//" if title.startswith("paper") else None,
                      alpha=0.6 if title.startswith("paper") else 1.0)
        ax.bar_label(bars, labels=[f"{v:.2g}" for v in vals], fontsize=7, rotation=90, padding=2)
    ax.set_xticks(x + w * (len(series) - 1) / 2, [f"pattern ({p})\nckpt/{PATTERNS[p][0]} plot/{PATTERNS[p][1]}" for p in pats])
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 4)
    ax.set(ylabel="share of run time in I/O [%] (log scale)", title="I/O share: measured and the paper's")
    ax.legend(fontsize=8)
    fig.suptitle("In-transit workflow (simulation + visualization + movie): PFS vs Surge burst buffer, seed paper Table III")
    fig.text(0.01, 0.01, setup, fontsize=8, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=1, default=str))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())
