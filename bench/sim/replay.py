"""Replays of the shared real Darshan logs on the example systems, every placement, with I/O
durations from the simulated system (timing = "simulated") and with the recorded timeline
(timing = "recorded"), and a plot of each log's phase length and rank I/O time.

Usage: python bench/sim/replay.py [--data /work/shared/data] [--plot bench/sim/plots/darshan_replay.png]
"""

import argparse
import os
import sys
from pathlib import Path

from common import EXAMPLES, OUT, REPO, markdown_table, run

sys.path.insert(0, str(REPO / "python"))
import json  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from surge.darshan_trace import convert  # noqa: E402
from surge.sim_plots import COLOURS, PLACEMENTS  # noqa: E402

LOGS = ["e3sm-io-512ranks", "imbalanced-io-496ranks", "ior-autobench-2048ranks", "mpi-io-test-32ranks-dxt"]
SYSTEMS = {"fat-tree": "summit-fat-tree", "dragonfly": "edison-dragonfly"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("SURGE_SHARED_DATA", str(REPO.parent / "shared" / "data")))
    ap.add_argument("--plot", default=str(REPO / "bench" / "sim" / "plots" / "darshan_replay.png"))
    args = ap.parse_args()
    root = OUT / "replay"
    root.mkdir(parents=True, exist_ok=True)
    results = {}
    rows = []
    for log in LOGS:
        trace = root / f"{log}.json"
        if not trace.is_file():
            trace.write_text(json.dumps(convert(str(Path(args.data) / "darshan" / f"{log}.darshan"))))
        for timing in ["simulated", "recorded"]:
            # Six ranks per node, as the seed's jobs (Table III): a node's SSD serves six ranks.
            workload = root / f"{log}-{timing}.toml"
            workload.write_text(f'ranks_per_node = 6\n[[job]]\nname = "{log}"\ntrace = "{trace.name}"\ntiming = "{timing}"\n')
            for sname, sfile in SYSTEMS.items():
                cells = []
                for p in PLACEMENTS:
                    job = run(EXAMPLES / f"{sfile}.toml", workload, p, root / timing / sname / log / p)["jobs"][0]
                    results[(log, timing, sname, p)] = job
                    cells.append(f"{job['io_time']:.2f} s / {job['mean_rank_busy']:.3f} s")
                rows.append([log, timing, sname, *cells])
                print(rows[-1], flush=True)
    print()
    print(markdown_table(["log", "timing", "system", "node-local", "grouped", "global"], rows))
    fig, axes = plt.subplots(2, len(LOGS), figsize=(4.2 * len(LOGS), 6.4), squeeze=False)
    width = 0.8 / len(PLACEMENTS)
    for k, log in enumerate(LOGS):
        for row, (value, label) in enumerate([("io_time", "I/O phase length (s)"), ("mean_rank_busy", "mean rank time in I/O (s)")]):
            ax = axes[row][k]
            groups = [(t, s) for t in ["simulated", "recorded"] for s in SYSTEMS]
            for i, p in enumerate(PLACEMENTS):
                vals = [results[(log, t, s, p)][value] for t, s in groups]
                ax.bar([x + i * width for x in range(len(groups))], vals, width, color=COLOURS[p], label=p.replace("_", "-"))
            ax.set_xticks([x + width for x in range(len(groups))])
            ax.set_xticklabels([f"{s}\n{t}" for t, s in groups], fontsize=7)
            ax.grid(axis="y", alpha=0.3)
            if row == 0:
                ax.set_title(log, fontsize=9)
            if k == 0:
                ax.set_ylabel(label)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("Darshan replays: simulated vs recorded timing, every placement")
    fig.tight_layout()
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot)
    print(args.plot)


if __name__ == "__main__":
    main()
