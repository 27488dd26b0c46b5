#!/usr/bin/env python3
"""The visualization consumer of the in-transit workflow (VisIt's role in the seed paper).

It polls the simulation's working directory for *published* plot files (`pltNNNNN.h5`; the
temporary names the simulation writes under never match), renders one PNG movie frame per plot
file with matplotlib (a mid-plane slice and a maximum projection of species V, plus the
reaction rate on the slice), publishes the frame with the same write-then-rename step, and,
with `--delete`, removes each plot file once its frame is out. Deleting processed files on the
fly is what keeps a burst buffer from filling up when every step writes a plot file (the
capacity problem the paper names).

It stops when the simulation's `sim.done` marker is published and every plot file it
announces has been rendered, then publishes its own `vis.done` marker (read by the encoder)
and writes per-frame timings to `--timings`.

With `--group NAME` (the coupled workflow, `run.py --coupled`) it is instead one consumer of
a Surge consumer group: it claims the next published plot file no other consumer of the group
has (`surge.workflow.claim`, waiting on the instance, no scanning), renders it and
acknowledges it; the instance's retention policy removes the file once every group is done
with it. Any number of such consumers share the work, each file rendered once. It stops when
the simulation is done and nothing is left to claim (with `--stop-with-simulation`: as soon as
the simulation is done, leaving what it did not get to, as VisIt did in seed 001).
`--frame-seconds` makes each frame take at least that long: a visualization slower than the
simulation (kappa > 1), as on the seed's separate nodes.

Usage:
    visualize.py --watch WORKDIR --frames WORKDIR/frames [--delete] [--timings vis.json]
    visualize.py --group vis --watch PLOTDIR --frames FRAMEDIR --sim-done WORKDIR/sim.done [--frame-seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import h5py
import matplotlib

matplotlib.use("Agg")  # no display on compute nodes
import matplotlib.pyplot as plt  # noqa: E402

import conventions as cv  # noqa: E402

# Fixed colour ranges, so that frames of one movie are comparable with each other.
V_RANGE = (0.0, 0.65)
RATE_RANGE = (0.0, 0.1)


class Renderer:
    """One matplotlib figure reused for every frame (creating a figure costs more than drawing it)."""

    def __init__(self) -> None:
        # 9.6 x 3.2 in at 100 dpi: 960 x 320 pixels, even sizes as H.264 (yuv420p) requires.
        self.fig, axes = plt.subplots(1, 3, figsize=(9.6, 3.2), dpi=100)
        self.images = []
        titles = ["V, mid-plane slice", "V, max. projection", "reaction rate U V^2, slice"]
        for ax, title, (lo, hi) in zip(axes, titles, [V_RANGE, V_RANGE, RATE_RANGE]):
            ax.set_title(title, fontsize=9)
            ax.set_axis_off()
            self.images.append(ax.imshow([[0.0]], vmin=lo, vmax=hi, cmap="viridis", origin="lower"))
        self.label = self.fig.suptitle("", fontsize=9)
        self.fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.84, wspace=0.04)

    def render(self, plot_file: Path, frame: Path) -> tuple[float, float]:
        """Draws `plot_file` into `frame` (published atomically); returns (read, draw) seconds."""
        t0 = time.perf_counter()
        with h5py.File(plot_file, "r") as f:
            v = f["V"][...]  # the whole species: the projection needs all of it
            mid = v.shape[2] // 2
            rate = f["reaction_rate"][:, :, mid]
            step, sim_time = int(f.attrs["step"]), float(f.attrs["time"])
        t1 = time.perf_counter()
        for image, data in zip(self.images, [v[:, :, mid], v.max(axis=2), rate]):
            image.set_data(data.T)
            image.set_extent((0, data.shape[0], 0, data.shape[1]))
        self.label.set_text(f"step {step}   t = {sim_time:.2f}")
        with cv.publishing(frame) as tmp:
            self.fig.savefig(tmp, format="png")
        return t1 - t0, time.perf_counter() - t1


def consume_group(args, renderer: Renderer, watch: Path, frames: Path) -> None:
    """One consumer of a Surge consumer group (see the module notes)."""
    from surge import workflow  # only the coupled workflow needs Surge's Python binding

    sim_done = Path(args.sim_done) if args.sim_done else watch / cv.SIM_DONE
    records = []
    while True:
        # The marker is read before the claim: a plot file published before it is claimable
        # by then, so "marker seen and nothing to claim" means this consumer is finished.
        finished = cv.read_marker(sim_done) is not None
        if finished and args.stop_with_simulation:
            break
        claim = workflow.claim(watch, args.group, pattern="plt*.h5", lease=args.lease, timeout=0.5)
        if claim is None:
            if finished:
                break
            continue
        t0 = time.perf_counter()
        path = Path(claim.path)
        step = int(cv.PLOT_RE.match(path.name).group(1))
        read_s, draw_s = renderer.render(path, frames / cv.frame_name(step))
        spare = args.frame_seconds - (time.perf_counter() - t0)
        if spare > 0:
            time.sleep(spare)  # the slower visualization this consumer stands for
        workflow.done(claim.path, group=args.group, token=claim.token)
        records.append({"step": step, "read_s": read_s, "render_s": draw_s, "finished_epoch": time.time()})
    if args.timings:
        Path(args.timings).write_text(json.dumps({"frames": records}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--watch", required=True, help="directory the simulation publishes plot files into")
    ap.add_argument("--frames", required=True, help="directory to publish PNG frames into")
    ap.add_argument("--delete", action="store_true", help="delete each plot file once rendered")
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between directory scans")
    ap.add_argument("--timings", help="per-frame timing file (JSON)")
    ap.add_argument("--group", help="be one consumer of this Surge consumer group instead of scanning")
    ap.add_argument("--sim-done", help="the simulation's done marker (default: WATCH/sim.done)")
    ap.add_argument("--stop-with-simulation", action="store_true", help="with --group: stop when the simulation is done")
    ap.add_argument("--frame-seconds", type=float, default=0.0, help="with --group: least time per frame")
    ap.add_argument("--lease", type=float, default=60.0, help="with --group: seconds a claimed plot file is this consumer's")
    args = ap.parse_args()
    cv.exit_on_sigterm()

    watch, frames = Path(args.watch), Path(args.frames)
    frames.mkdir(parents=True, exist_ok=True)
    renderer = Renderer()
    if args.group:
        consume_group(args, renderer, watch, frames)
        return
    done_steps: set[int] = set()
    records = []
    peak_backlog = 0
    while True:
        # Read the marker *before* scanning: a file published before the marker is then
        # guaranteed to be in this scan, so "marker seen and nothing new" really means finished.
        marker = cv.read_marker(watch / cv.SIM_DONE)
        todo = sorted((s, p) for s, p in cv.numbered(watch, cv.PLOT_RE).items() if s not in done_steps)
        peak_backlog = max(peak_backlog, len(todo))
        if not todo:
            if marker is not None:
                break
            time.sleep(args.poll)
            continue
        for step, path in todo:
            read_s, draw_s = renderer.render(path, frames / cv.frame_name(step))
            if args.delete:
                os.unlink(path)
            done_steps.add(step)
            records.append({"step": step, "read_s": read_s, "render_s": draw_s, "finished_epoch": time.time()})

    if len(done_steps) != marker["plots"]:
        raise SystemExit(f"visualize: rendered {len(done_steps)} plot files, the simulation announced {marker['plots']}")
    if args.timings:
        Path(args.timings).write_text(json.dumps({"frames": records, "peak_backlog": peak_backlog}, indent=1))
    cv.write_marker(watch / cv.VIS_DONE, {"frames": len(done_steps)})


if __name__ == "__main__":
    main()
