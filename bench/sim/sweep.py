"""The seed study's single-job experiment (Figs. 6-8): every example application on the three
example systems and all three placements, then plots and a table of I/O phase lengths.

Usage: python bench/sim/sweep.py [--plots bench/sim/plots]
"""

import argparse
import sys

from common import EXAMPLES, OUT, REPO, markdown_table, run

sys.path.insert(0, str(REPO / "python"))
from surge import sim_plots  # noqa: E402

SYSTEMS = {"fat-tree": "summit-fat-tree", "tapered-fat-tree": "summit-fat-tree-tapered", "dragonfly": "edison-dragonfly"}
WORKLOADS = {"GTC": "gtc-like", "LAMMPS": "lammps-like", "S3D": "s3d-like", "HACC": "hacc-like", "LAMMPS+IOR": "lammps-ior"}
PLACEMENTS = ["node_local", "grouped", "global"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plots", default=str(REPO / "bench" / "sim" / "plots"))
    args = ap.parse_args()
    root = OUT / "sweep"
    rows = []
    for sname, sfile in SYSTEMS.items():
        for wname, wfile in WORKLOADS.items():
            cells = []
            for p in PLACEMENTS:
                s = run(EXAMPLES / f"{sfile}.toml", EXAMPLES / f"{wfile}.toml", p, root / sname / wname / p)
                job = s["jobs"][0]
                cells.append(f"{job['io_time']:.2f} s / {job['avg_hops']:.1f} hops" + (f" / {100 * job['nonminimal_fraction']:.0f}% non-min" if job["nonminimal_fraction"] > 0 else ""))
            rows.append([sname, wname, *cells])
            print(rows[-1], flush=True)
    print()
    print(markdown_table(["system", "workload (first job)", "node-local", "grouped", "global"], rows))
    for made in sim_plots.plot_all(str(root), args.plots, "png"):
        print(made)


if __name__ == "__main__":
    main()
