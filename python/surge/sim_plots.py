"""Plots of ``surge sim run`` outputs in the style of the seed study's Figs. 6-8.

A *sweep directory* holds one run per configuration: ``SWEEP/<system>/<workload>/<placement>/``
with the files ``surge sim run --out`` writes (summary.json, jobs.csv, ranks.csv ...).

* ``hops.png``          average network hops of each job's I/O traffic (Fig. 6)
* ``rank_phases_*.png`` I/O phase of every rank over time, one panel per configuration (Fig. 7)
* ``phase_lengths.png`` I/O phase length of each job per configuration (Fig. 8)

Usage: ``python -m surge.sim_plots SWEEP [--out DIR] [--format png|svg]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys

try:
    # Figures are matplotlib.figure.Figure objects saved straight to files: no pyplot, and
    # the program's matplotlib backend is left as it was.
    import pandas as pd
    from matplotlib.figure import Figure
except ModuleNotFoundError as error:
    # The 'sim' extra: as a command, name it instead of a traceback.
    if __name__ != "__main__":
        raise
    sys.exit(f"python -m surge.sim_plots: error: {error.name} is not installed (pip install 'surge[sim]')")

PLACEMENTS = ["node_local", "grouped", "global"]
COLOURS = {"node_local": "#4c72b0", "grouped": "#55a868", "global": "#c44e52"}


def load_sweep(sweep: str) -> pd.DataFrame:
    """One row per (system, workload, placement, job) with the job summary fields."""
    rows = []
    for system in sorted(os.listdir(sweep)):
        for workload in sorted(os.listdir(os.path.join(sweep, system))) if os.path.isdir(os.path.join(sweep, system)) else []:
            for placement in PLACEMENTS:
                path = os.path.join(sweep, system, workload, placement, "summary.json")
                if not os.path.isfile(path):
                    continue
                with open(path) as fh:
                    s = json.load(fh)
                for job in s["jobs"]:
                    rows.append(
                        {
                            "system": system,
                            "workload": workload,
                            "placement": placement,
                            "job": job["job"],
                            "ranks": job["ranks"],
                            "io_time": job["io_time"],
                            "mean_rank_time": job["mean_rank_time"],
                            "avg_hops": job["avg_hops"],
                            "nonminimal_fraction": job["nonminimal_fraction"],
                            "wall_seconds": s["wall_seconds"],
                            "events": s["events"],
                            "dir": os.path.dirname(path),
                        }
                    )
    if not rows:
        raise FileNotFoundError(f"no <system>/<workload>/<placement>/summary.json under {sweep}")
    return pd.DataFrame(rows)


def _grouped_bars(df: pd.DataFrame, value: str, ylabel: str, title: str, out: str, log: bool = False) -> str:
    systems = sorted(df["system"].unique())
    fig = Figure(figsize=(4.5 * len(systems), 3.6))
    axes = fig.subplots(1, len(systems), sharey=True, squeeze=False)
    for ax, system in zip(axes[0], systems):
        sub = df[df["system"] == system]
        # One bar group per job (a co-scheduled workload shows each of its jobs), never an
        # average over jobs, which would hide the one a placement slows down.
        pairs = sorted(set(zip(sub["workload"], sub["job"])))
        multi = {w for w, _ in pairs if sum(1 for x, _ in pairs if x == w) > 1}
        labels = [f"{w}: {j}" if w in multi else w for w, j in pairs]
        width = 0.8 / len(PLACEMENTS)
        for i, p in enumerate(PLACEMENTS):
            rows = sub[sub["placement"] == p].set_index(["workload", "job"])[value]
            vals = [rows.get(pair, float("nan")) for pair in pairs]
            ax.bar([x + i * width for x in range(len(labels))], vals, width, label=p.replace("_", "-"), color=COLOURS[p])
        ax.set_xticks([x + width for x in range(len(labels))])
        ax.set_xticklabels(labels, rotation=20, ha="right")
        ax.set_title(system)
        if log:
            # Jobs whose phases differ by orders of magnitude (0.2 s next to 80 s) all visible.
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out)
    return out


def plot_hops(df: pd.DataFrame, out: str) -> str:
    """Fig. 6: bytes-weighted average hops of I/O traffic per application and placement."""
    return _grouped_bars(df, "avg_hops", "average hops of I/O traffic", "Network hops of I/O traffic", out)


def plot_phase_lengths(df: pd.DataFrame, out: str) -> str:
    """Fig. 8: I/O phase length (sum over phases) per application and configuration."""
    return _grouped_bars(df, "io_time", "I/O phase length (s, log scale)", "I/O phase length per configuration", out, log=True)


def plot_rank_phases(df: pd.DataFrame, workload: str, out: str, phase: int = 0, max_ranks: int = 4000) -> str:
    """Fig. 7: one horizontal segment per rank from its phase start to end (highest rank on top)."""
    sub = df[df["workload"] == workload].drop_duplicates(["system", "placement"])
    systems = sorted(sub["system"].unique())
    fig = Figure(figsize=(11, 2.6 * len(systems)))
    axes = fig.subplots(len(systems), len(PLACEMENTS), squeeze=False, sharex=True)
    for i, system in enumerate(systems):
        for j, p in enumerate(PLACEMENTS):
            ax = axes[i][j]
            row = sub[(sub["system"] == system) & (sub["placement"] == p)]
            if row.empty:
                ax.set_visible(False)
                continue
            ranks = pd.read_csv(os.path.join(row.iloc[0]["dir"], "ranks.csv"))
            ranks = ranks[(ranks["job"] == ranks["job"].iloc[0]) & (ranks["phase"] == phase)]
            if len(ranks) > max_ranks:
                ranks = ranks.iloc[:: len(ranks) // max_ranks + 1]
            ax.hlines(ranks["rank"], ranks["start"], ranks["end"], color=COLOURS[p], linewidth=0.6)
            ax.set_title(f"{system} / {p.replace('_', '-')}", fontsize=9)
            if j == 0:
                ax.set_ylabel("rank")
            if i == len(systems) - 1:
                ax.set_xlabel("time (s)")
    fig.suptitle(f"I/O phase of each rank: {workload}")
    fig.tight_layout()
    fig.savefig(out)
    return out


def plot_all(sweep: str, out_dir: str, fmt: str = "png") -> list:
    df = load_sweep(sweep)
    os.makedirs(out_dir, exist_ok=True)
    made = [
        plot_hops(df, os.path.join(out_dir, f"hops.{fmt}")),
        plot_phase_lengths(df, os.path.join(out_dir, f"phase_lengths.{fmt}")),
    ]
    for workload in sorted(df["workload"].unique()):
        made.append(plot_rank_phases(df, workload, os.path.join(out_dir, f"rank_phases_{workload}.{fmt}")))
    return made


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m surge.sim_plots", description="Plot a sweep of surge sim runs")
    ap.add_argument("sweep", help="directory SWEEP/<system>/<workload>/<placement>/")
    ap.add_argument("--out", default=None, help="directory for the plots (default: SWEEP/plots)")
    ap.add_argument("--format", default="png", choices=["png", "svg"])
    args = ap.parse_args(argv)
    try:
        made = plot_all(args.sweep, args.out or os.path.join(args.sweep, "plots"), args.format)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for m in made:
        print(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
