#!/usr/bin/env python3
"""The simulation of the in-transit workflow (Chombo-Crunch's role in the seed paper).

A real, small reactive-transport code: two chemical species U and V react (Gray-Scott kinetics,
U + 2V -> 3V, U fed and V removed at fixed rates), diffuse, and are carried by a steady
3-D Arnold-Beltrami-Childress flow, on a periodic N^3 grid. Explicit forward Euler in time,
first-order upwind advection, 7-point Laplacian, with the largest time step the scheme is
stable for (times a safety factor).

Its I/O is the paper's:
* it starts from a restart file, an HDF5 checkpoint of a previous run (staged into the burst
  buffer before the job, or read straight from the PFS);
* every `--plot-every` steps it writes a plot file (U, V and the reaction rate) under a
  temporary name and renames it to `pltNNNNN.h5`: the rename is what tells the visualization
  the file is complete;
* every `--checkpoint-every` steps (and at the last step) it writes a checkpoint `chkNNNNN.h5`
  with the full state and, on the burst buffer (`--stage-out-dir`), immediately starts an
  asynchronous stage-out of it to the PFS and goes back to computing;
* when it is done it publishes the `sim.done` marker.

It records per step the compute time and the plot / checkpoint write times as the application
sees them, and writes them to `--timings` (JSON).

Usage:
    simulation.py init --grid 64 --out restart.h5          # the "previous run": a step-0 checkpoint
    simulation.py run --restart restart.h5 --workdir DIR --steps 100 [--stage-out-dir PFSDIR]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np

import conventions as cv


@dataclass(frozen=True)
class Physics:
    """Model parameters, in grid units (cell size 1): they travel inside every checkpoint."""

    grid: int
    diff_u: float = 0.16  # diffusivities (cells^2 / time)
    diff_v: float = 0.08
    feed: float = 0.035  # Gray-Scott feed rate of U
    kill: float = 0.060  # Gray-Scott removal rate of V
    flow: float = 0.10  # amplitude of each ABC flow component (cells / time)
    safety: float = 0.9  # fraction of the stable time step used

    def stable_dt(self) -> float:
        # Forward Euler + upwind in 3-D is stable (and positivity-preserving) when
        # dt * (sum_i max|u_i| + 2 * 3 * D_max) <= 1, with dx = 1. Each ABC component is a sum
        # of two unit sinusoids scaled by `flow`, so max|u_i| <= 2 * flow.
        return self.safety / (3 * 2 * self.flow + 6 * max(self.diff_u, self.diff_v))


class Model:
    """The state (U, V, step, time) and one explicit time step."""

    def __init__(self, phys: Physics, u: np.ndarray, v: np.ndarray, step: int, time_: float):
        self.phys, self.u, self.v, self.step, self.time = phys, u, v, step, time_
        self.dt = phys.stable_dt()
        n = phys.grid
        x = 2 * np.pi * (np.arange(n) + 0.5) / n
        X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
        a = phys.flow
        # ABC flow (A = B = C): divergence-free, so the advective form is conservative enough.
        vel = (a * (np.sin(Z) + np.cos(Y)), a * (np.sin(X) + np.cos(Z)), a * (np.sin(Y) + np.cos(X)))
        # Upwind needs the positive and negative parts separately; precomputed once.
        self._vel = [(np.maximum(c, 0.0), np.minimum(c, 0.0)) for c in vel]

    @classmethod
    def initial(cls, phys: Physics, seed: int = 2016) -> "Model":
        """Fresh state: U = 1, V = 0, with a few random spherical seeds of V to react."""
        n = phys.grid
        rng = np.random.default_rng(seed)
        u = np.ones((n, n, n))
        v = np.zeros((n, n, n))
        idx = np.arange(n)
        for _ in range(8):
            c = rng.uniform(0, n, size=3)
            r = n * rng.uniform(0.05, 0.12)
            # periodic distance to the seed's centre
            d = [np.minimum(abs(idx - ci), n - abs(idx - ci)) for ci in c]
            inside = d[0][:, None, None] ** 2 + d[1][None, :, None] ** 2 + d[2][None, None, :] ** 2 < r * r
            u[inside] = 0.5
            v[inside] = 0.25
        v += 0.01 * rng.random((n, n, n))
        return cls(phys, u, v, 0, 0.0)

    def _rhs(self, c: np.ndarray, diff: float) -> np.ndarray:
        """Diffusion minus upwind advection of one species (periodic boundaries via roll)."""
        out = -6.0 * diff * c
        for axis, (vp, vn) in enumerate(self._vel):
            back = np.roll(c, 1, axis)
            fwd = np.roll(c, -1, axis)
            out += diff * (back + fwd)
            out -= vp * (c - back) + vn * (fwd - c)
        return out

    def reaction_rate(self) -> np.ndarray:
        return self.u * self.v * self.v

    def advance(self) -> None:
        p, dt = self.phys, self.dt
        r = self.reaction_rate()
        du = self._rhs(self.u, p.diff_u) - r + p.feed * (1.0 - self.u)
        dv = self._rhs(self.v, p.diff_v) + r - (p.feed + p.kill) * self.v
        self.u += dt * du
        self.v += dt * dv
        self.step += 1
        self.time += dt


# ---- HDF5 files ---------------------------------------------------------------------------
# track_times=False: no creation timestamps in the files, so two runs of the same physics
# produce bitwise identical checkpoints (run.py checks that).

def _dataset(f: h5py.File, name: str, data: np.ndarray) -> None:
    f.create_dataset(name, data=data, track_times=False)


def _stamp(f: h5py.File, model: Model) -> None:
    f.attrs["step"] = model.step
    f.attrs["time"] = model.time
    f.attrs["dt"] = model.dt


def write_checkpoint(model: Model, path: Path) -> None:
    """Full state, published atomically: enough to restart bit-for-bit."""
    with cv.publishing(path) as tmp, h5py.File(tmp, "w") as f:
        _stamp(f, model)
        for key, value in asdict(model.phys).items():
            f.attrs[f"physics.{key}"] = value
        _dataset(f, "U", model.u)
        _dataset(f, "V", model.v)


def read_checkpoint(path: Path) -> tuple[Physics, np.ndarray, np.ndarray, int, float]:
    """The checkpoint's contents: Model(*read_checkpoint(path)) restarts from it."""
    with h5py.File(path, "r") as f:
        fields = {k.split(".", 1)[1]: v.item() for k, v in f.attrs.items() if k.startswith("physics.")}
        return Physics(**fields), f["U"][...], f["V"][...], int(f.attrs["step"]), float(f.attrs["time"])


def write_plot(model: Model, path: Path) -> None:
    """What the visualization needs: both species and the derived reaction rate."""
    with cv.publishing(path) as tmp, h5py.File(tmp, "w") as f:
        _stamp(f, model)
        _dataset(f, "U", model.u)
        _dataset(f, "V", model.v)
        _dataset(f, "reaction_rate", model.reaction_rate())


# ---- the run ------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    plot_dir = Path(args.plot_dir) if args.plot_dir else workdir
    checkpoint_dir = Path(args.checkpoint_dir) if args.checkpoint_dir else workdir
    tracker = None
    if args.stage_out_dir:
        import stageio  # only the burst-buffer run needs Surge's staging API

        tracker = stageio.StageOutTracker()
        Path(args.stage_out_dir).mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    state = read_checkpoint(Path(args.restart))
    restart_read_s = time.perf_counter() - t0  # the I/O only, not the set-up of the model below
    model = Model(*state)
    first = model.step
    last = first + args.steps
    steps = []
    checkpoints = []
    plots = 0
    run_start = time.time()
    for _ in range(args.steps):
        # Was a checkpoint still staging out when this step began? (Queried outside the timed parts.)
        staging_before = tracker.busy() if tracker else False
        t0 = time.perf_counter()
        model.advance()
        compute = time.perf_counter() - t0

        plot_write = 0.0
        plot_bytes = 0
        if model.step % args.plot_every == 0:
            path = plot_dir / cv.plot_name(model.step)
            t0 = time.perf_counter()
            write_plot(model, path)
            plot_write = time.perf_counter() - t0
            plot_bytes = path.stat().st_size
            plots += 1

        # Still staging when the timed compute + plot part ended? Asked before this step's own
        # checkpoint starts a new stage-out, which did not overlap that part.
        staging_after = tracker.busy() if tracker else False

        ckpt_write = stage_call = 0.0
        ckpt_bytes = 0
        if model.step % args.checkpoint_every == 0 or model.step == last:
            path = checkpoint_dir / cv.checkpoint_name(model.step)
            t0 = time.perf_counter()
            write_checkpoint(model, path)
            ckpt_write = time.perf_counter() - t0
            ckpt_bytes = path.stat().st_size
            if tracker:
                # As in the paper: start the asynchronous stage-out right after close, go on computing.
                t0 = time.perf_counter()
                tracker.stage_out(path, Path(args.stage_out_dir) / path.name)
                stage_call = time.perf_counter() - t0
            checkpoints.append(path.name)

        steps.append({
            "step": model.step,
            "compute_s": compute,
            "plot_write_s": plot_write,
            "checkpoint_write_s": ckpt_write,
            "stage_call_s": stage_call,
            "plot_bytes": plot_bytes,
            "checkpoint_bytes": ckpt_bytes,
            "staging_active": staging_before or staging_after,
        })
        if args.verbose:
            print(f"step {model.step}: compute {compute:.3f}s plot {plot_write:.3f}s ckpt {ckpt_write:.3f}s", flush=True)

    timings = {
        "grid": model.phys.grid,
        "first_step": first,
        "last_step": model.step,
        "plot_every": args.plot_every,
        "checkpoint_every": args.checkpoint_every,
        "dt": model.dt,
        "restart_read_s": restart_read_s,
        "run_start_epoch": run_start,
        "run_s": time.time() - run_start,
        "checkpoints": checkpoints,
        "staged_out_to": args.stage_out_dir,
        "steps": steps,
    }
    Path(args.timings).write_text(json.dumps(timings, indent=1))
    # Last: the marker tells the visualization how many plot files to expect in all.
    cv.write_marker(workdir / cv.SIM_DONE, {"plots": plots, "last_step": model.step})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ini = sub.add_parser("init", help="write a step-0 checkpoint to start from")
    ini.add_argument("--grid", type=int, required=True, help="cells per side")
    ini.add_argument("--out", required=True)
    r = sub.add_parser("run", help="run from a restart file, writing plot files and checkpoints")
    r.add_argument("--restart", required=True, help="checkpoint to start from")
    r.add_argument("--workdir", required=True, help="where plot files and checkpoints go")
    r.add_argument("--steps", type=int, default=100)
    r.add_argument("--plot-every", type=int, default=1)
    r.add_argument("--checkpoint-every", type=int, default=10)
    r.add_argument("--stage-out-dir", help="PFS directory to stage every checkpoint out to (burst-buffer run)")
    r.add_argument("--plot-dir", help="where plot files go (default: the workdir)")
    r.add_argument("--checkpoint-dir", help="where checkpoints go (default: the workdir)")
    r.add_argument("--timings", default="timings.json", help="per-step timing file (JSON)")
    r.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    cv.exit_on_sigterm()
    if args.cmd == "init":
        write_checkpoint(Model.initial(Physics(grid=args.grid)), Path(args.out))
    else:
        run(args)


if __name__ == "__main__":
    main()
