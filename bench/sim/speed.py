"""How simulation time grows with ranks: LAMMPS-like job on the Summit-like fat-tree with
global BB servers (the placement whose flows all share one connected component, the worst
case for the max-min recomputation), random node placement so ranks are not symmetric.

The machine grows with the job (6 ranks per node, 18 nodes per edge switch, one BB server per
18 nodes) so that 100k ranks fit. Usage: python bench/sim/speed.py [--ranks 1000,5000,21600,100000]
[--unmerged]  (--unmerged also runs every op as its own flow with a 0.1 ms rate quantum)
"""

import argparse
import math
import re
import time

from common import EXAMPLES, OUT, markdown_table, run


def system_text(nodes: int, unmerged: bool) -> str:
    text = (EXAMPLES / "summit-fat-tree.toml").read_text()
    switches = max(270, math.ceil(nodes / 18))
    text = re.sub(r"compute_switches = \d+", f"compute_switches = {switches}", text)
    text = re.sub(r"servers = 270", f"servers = {switches}", text)
    text = text.replace('prices = "prices-seed004.toml"\n', "")
    if unmerged:
        text = text.replace("[network]", '[sim]\nmerge_due_ops = false\nrate_quantum = "0.1 ms"\n\n[network]', 1)
    return text


def workload_text(ranks: int) -> str:
    text = (EXAMPLES / "lammps-like.toml").read_text()
    return text.replace("ranks = 21600", f"ranks = {ranks}").replace('placement = "contiguous"', 'placement = "random"')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="1000,5000,21600,100000")
    ap.add_argument("--unmerged", action="store_true")
    args = ap.parse_args()
    rows = []
    modes = [False, True] if args.unmerged else [False]
    for unmerged in modes:
        for ranks in [int(r) for r in args.ranks.split(",")]:
            d = OUT / "speed" / f"{ranks}{'-unmerged' if unmerged else ''}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "system.toml").write_text(system_text(math.ceil(ranks / 6), unmerged))
            (d / "workload.toml").write_text(workload_text(ranks))
            t0 = time.time()
            s = run(d / "system.toml", d / "workload.toml", "global", d / "out")
            wall = time.time() - t0
            rows.append(
                [
                    f"{ranks:,}",
                    "per op, 0.1 ms quantum" if unmerged else "merged due ops, exact",
                    f"{s['flows']:,}",
                    f"{s['events']:,}",
                    f"{s['recomputations']:,}",
                    f"{s['wall_seconds']:.2f}",
                    f"{wall:.2f}",
                    f"{s['events_per_second']:,.0f}",
                    f"{s['jobs'][0]['io_time']:.3f}",
                ]
            )
            print(rows[-1], flush=True)
    print()
    print(markdown_table(["ranks", "flow granularity", "flows", "events", "recomputations", "engine s", "total wall s", "events/s", "simulated I/O phase s"], rows))


if __name__ == "__main__":
    main()
