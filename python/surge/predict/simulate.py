"""Event-driven batch-scheduler simulation: how early is a queued job's node list known?

Seed 002 (section 4.1) asks how long before a job starts the scheduler's *predicted* node list
for it is already the final one (T_NAP). This module replays a trace through FCFS, EASY or
conservative backfilling, where the scheduler plans with a walltime estimate per job (the
refined request T~ = T_run + lambda (T_req - T_run), or a learned prediction) while jobs really
end after T_run. At every scheduling event each queued job in the planning window gets a
predicted start and node list; a job's lead time is how long before its start the node list it
finally got had been predicted without interruption.

Design, for speed on 10^5-job traces:

* Events (arrivals, completions) are processed in time order with a heap; all events at the
  same instant are one scheduling pass.
* The plan is an availability *profile*: breakpoint times x free cores per node (a numpy
  matrix). Placing a job scans breakpoints from the earliest allowed one and takes the first
  window in which enough nodes stay free for the job's whole estimated duration; nodes are
  chosen best-fit (fullest first, then lowest index), which on single-core-node machines is
  plain first-fit by index.
* The plan is rebuilt only when reality departs from it: a job ends before its estimate, a
  job outlives its estimate (its estimate then becomes the request: the hard limit is the
  next thing the scheduler knows), or EASY backfills a job the plan did not start. Otherwise
  new arrivals are simply added to the existing plan. With exact estimates (lambda = 0) there
  are almost no rebuilds.
* Only the first ``depth`` queued jobs are planned, like Slurm's ``bf_max_job_test``; a job
  further back has no prediction yet (so its lead time can only start once it is in the
  window).

The prediction shown to users is always the conservative plan (what ``squeue --start`` shows
under Slurm's backfill scheduler). FCFS plans with start times that never overtake an earlier
job; EASY starts additional jobs that fit now and do not delay the *first* queued job.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .traces import Machine, Trace

POLICIES = ("fcfs", "easy", "conservative")
#: Seed 002 Fig. 6 classes of the node-list lead time.
LEAD_CLASSES = ["instant", "< 1 s", "1 s - 10 min", "> 10 min"]
LAMBDAS = (1.0, 0.5, 0.25, 0.1, 0.05, 0.0)


def refined_walltime(jobs: pd.DataFrame, lam: float) -> np.ndarray:
    """T~ = T_run + lambda (T_req - T_run); requests below the runtime count as the runtime."""
    run = jobs["run"].to_numpy(np.float64)
    req = np.maximum(jobs["req_time"].to_numpy(np.float64), run)
    return np.maximum(run + lam * (req - run), 1.0)


class Profile:
    """Planned free cores per node over time: ``free[r]`` holds from ``times[r]`` to ``times[r+1]``.

    The last row lasts forever. Rows are only ever added at reservation ends, so a placement
    found at a row start stays valid until the plan is rebuilt.
    """

    def __init__(self, now: float, free_now: np.ndarray, ends: list[tuple[float, np.ndarray, int]]):
        ends = [e for e in ends if e[0] > now]
        if ends:
            end_times = np.array([e[0] for e in ends])
            times = np.unique(end_times)
            delta = np.zeros((len(times) + 1, len(free_now)), dtype=np.int16)
            rows = np.searchsorted(times, end_times) + 1
            sizes = [len(e[1]) for e in ends]
            np.add.at(delta, (np.repeat(rows, sizes), np.concatenate([e[1] for e in ends])),
                      np.repeat(np.array([e[2] for e in ends], dtype=np.int16), sizes))
            self.times = np.concatenate([[now], times])
            self.free = free_now.astype(np.int16) + np.cumsum(delta, axis=0, dtype=np.int16)
        else:
            self.times = np.array([now])
            self.free = free_now.astype(np.int16)[None, :].copy()
        # On machines of single-core nodes (Theta, Mira) the free-node count per row does not
        # depend on the job, so it is kept up to date instead of recounted on every search.
        self.single_core = int(self.free.max(initial=0)) <= 1
        self.free_nodes = np.count_nonzero(self.free, axis=1) if self.single_core else None

    def advance(self, now: float) -> None:
        """Drop the past: the row in force at ``now`` becomes the first row."""
        row = int(np.searchsorted(self.times, now, side="right")) - 1
        if row > 0:
            self.times = self.times[row:].copy()
            self.free = self.free[row:]
            if self.single_core:
                self.free_nodes = self.free_nodes[row:]
        self.times[0] = now

    def find(self, count: int, cores: int, duration: float, not_before: float):
        """Earliest (row, nodes) where ``count`` nodes keep ``cores`` free for ``duration``."""
        times, free = self.times, self.free
        first = max(int(np.searchsorted(times, not_before, side="right")) - 1, 0)
        if self.single_core:
            usable = free[first:]                 # 0/1 per node: usable as a mask already
            usable_count = self.free_nodes[first:]
        else:
            usable = free[first:] >= cores
            usable_count = np.count_nonzero(usable, axis=1)
        # Necessary condition, checked for all rows at once: every row of the window has
        # enough usable nodes. Only rows passing it get the exact per-node check.
        short = np.concatenate([[0], np.cumsum(usable_count < count)])
        last = np.searchsorted(times, times[first:] + duration, side="left") - first
        for row in np.flatnonzero(short[last] == short[:-1]):
            end = last[row]
            fits = usable[row] if end <= row + 1 else usable[row:end].all(axis=0)
            nodes = np.flatnonzero(fits)
            if len(nodes) >= count:
                if not self.single_core:
                    # Best fit: fullest nodes first, which packs small jobs together. On the
                    # wagap trace this reproduces 31% of the real node lists in a replay of
                    # the real schedule, first-fit only 0.6% (see study.replay_node_choice).
                    nodes = np.sort(nodes[np.argsort(free[first + row, nodes], kind="stable")[:count]])
                return first + row, nodes[:count]
        return None

    def reserve(self, row: int, nodes: np.ndarray, cores: int, duration: float) -> None:
        end = self.times[row] + duration
        last = int(np.searchsorted(self.times, end, side="left"))
        if last >= len(self.times) or self.times[last] != end:
            # Split the row in force at `end` so the reservation stops exactly there.
            self.times = np.concatenate((self.times[:last], [end], self.times[last:]))
            self.free = np.concatenate((self.free[:last], self.free[last - 1:last],
                                        self.free[last:]))
            if self.single_core:
                self.free_nodes = np.concatenate((self.free_nodes[:last],
                                                  self.free_nodes[last - 1:last],
                                                  self.free_nodes[last:]))
        if nodes[-1] - nodes[0] + 1 == len(nodes):
            self.free[row:last, nodes[0]:nodes[-1] + 1] -= cores   # contiguous: cheap slice
        else:
            self.free[row:last, nodes] -= cores
        if self.single_core:
            self.free_nodes[row:last] -= len(nodes)


@dataclass
class Simulation:
    """Per-job outcome of one simulated schedule (columns below) plus run statistics."""

    policy: str
    label: str
    jobs: pd.DataFrame        # submit, start, wait, lead, lead_class, real_wait
    nodes: list[np.ndarray]   # simulated allocation per job
    rebuilds: int
    seconds: float
    #: (time made, predicted start, predicted nodes) for the ``watch`` job, if any.
    first_prediction: tuple[float, float, np.ndarray] | None = None

    def class_shares(self) -> pd.Series:
        counts = self.jobs["lead_class"].value_counts(normalize=True)
        return counts.reindex(LEAD_CLASSES, fill_value=0.0)


def lead_class(wait: np.ndarray, lead: np.ndarray) -> pd.Categorical:
    codes = np.where(wait <= 0, 0, np.where(lead < 1, 1, np.where(lead < 600, 2, 3)))
    return pd.Categorical.from_codes(codes, LEAD_CLASSES)


def simulate(trace: Trace, walltime: np.ndarray, policy: str = "conservative",
             depth: int = 100, label: str = "", watch: int | None = None) -> Simulation:
    """Replay ``trace`` under ``policy`` with the scheduler's walltime estimates ``walltime``.

    Estimates below the real runtime are allowed (learned predictors under-estimate): such a
    job is not killed, the scheduler just falls back to its request once the estimate passed.
    ``watch`` names a job (row index) whose first prediction (made when it was submitted, or
    when it entered the planning window) is kept in ``Simulation.first_prediction``.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    started_clock = time.perf_counter()
    jobs, machine = trace.jobs, trace.machine
    n = len(jobs)
    submit = jobs["submit"].to_numpy(np.float64).tolist()
    run = jobs["run"].to_numpy(np.float64).tolist()
    request = np.maximum(jobs["req_time"].to_numpy(np.float64), jobs["run"].to_numpy(np.float64))
    estimate = np.asarray(walltime, dtype=np.float64).tolist()
    count = jobs["nodes"].to_numpy().tolist()
    cores = jobs["ppn"].to_numpy().tolist()
    _check_fits(machine, jobs)

    free_now = machine.cores.astype(np.int16).copy()
    running: dict[int, np.ndarray] = {}
    predicted_end: dict[int, float] = {}
    completions: list[tuple[float, int]] = []
    queue: list[int] = []
    plan: dict[int, tuple[float, np.ndarray]] = {}     # job -> (planned start, nodes)
    guess: dict[int, bytes] = {}                        # job -> predicted node list
    guess_since: dict[int, float] = {}
    estimated_ends: list[tuple[float, int]] = []       # heap, stale entries skipped
    start_list: list[float | None] = [None] * n
    lead = np.zeros(n)
    allocation: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * n
    profile = Profile(submit[0] if n else 0.0, free_now, [])
    dirty = False
    rebuilds = 0
    arrival = 0
    first_prediction = None

    def place(job: int, not_before: float) -> float:
        nonlocal first_prediction
        found = profile.find(count[job], cores[job], estimate[job], not_before)
        row, nodes = found
        profile.reserve(row, nodes, cores[job], estimate[job])
        when = float(profile.times[row])
        plan[job] = (when, nodes)
        if job == watch and first_prediction is None:
            first_prediction = (now, when, nodes)
        key = nodes.tobytes()
        if guess.get(job) != key:
            guess[job] = key
            guess_since[job] = now
        return when

    def plan_window(first: int) -> None:
        """Plan queue[first:depth]; queue[:first] is planned already (planned jobs are a prefix)."""
        not_before = profile.times[0]
        if policy == "fcfs" and first > 0:
            not_before = plan[queue[first - 1]][0]    # FCFS: never before an earlier job
        for job in queue[first:depth]:
            when = place(job, not_before)
            if policy == "fcfs":
                not_before = when

    def launch(job: int, nodes: np.ndarray) -> None:
        free_now[nodes] -= cores[job]
        running[job] = nodes
        predicted_end[job] = now + estimate[job]
        heapq.heappush(estimated_ends, (predicted_end[job], job))
        heapq.heappush(completions, (now + run[job], job))
        start_list[job] = now
        allocation[job] = nodes
        lead[job] = now - guess_since[job] if guess.get(job) == nodes.tobytes() else 0.0
        plan.pop(job, None)

    while arrival < n or completions:
        now = min(submit[arrival] if arrival < n else np.inf,
                  completions[0][0] if completions else np.inf)
        while completions and completions[0][0] <= now:
            _, job = heapq.heappop(completions)
            free_now[running.pop(job)] += cores[job]
            if predicted_end.pop(job) != now:
                dirty = True      # ended before its estimate: the plan can move up
        # "<=": a job still running when its estimate runs out *now* has outlived it too. With
        # "<" its end stayed at `now`, which the rebuilt profile drops as past, so its nodes
        # were never freed in the plan and a job needing them could not be placed at all.
        while estimated_ends and estimated_ends[0][0] <= now:
            end, job = heapq.heappop(estimated_ends)
            if predicted_end.get(job) == end:
                # Outlived its estimate: the scheduler now assumes the hard limit.
                estimate[job] = max(request[job], now - start_list[job] + 1.0)
                predicted_end[job] = start_list[job] + estimate[job]
                heapq.heappush(estimated_ends, (predicted_end[job], job))
                dirty = True
        while arrival < n and submit[arrival] <= now:
            queue.append(arrival)
            arrival += 1

        while True:
            if dirty:
                rebuilds += 1
                profile = Profile(now, free_now, [(predicted_end[j], nodes, cores[j])
                                                  for j, nodes in running.items()])
                plan.clear()
                plan_window(0)
                dirty = False
            else:
                profile.advance(now)
                plan_window(sum(1 for j in queue[:depth] if j in plan))
            starting = [j for j in queue[:depth] if plan[j][0] <= now]
            for job in starting:
                launch(job, plan[job][1])
            if starting:
                queue = [j for j in queue[:depth] if start_list[j] is None] + queue[depth:]
                continue         # jobs that became visible may start now too
            if policy != "easy" or len(queue) < 2:
                break
            if not _easy_backfill(queue[:depth], plan, free_now, now, estimate, count, cores,
                                  launch):
                break
            queue = [j for j in queue[:depth] if start_list[j] is None] + queue[depth:]
            dirty = True          # backfilled jobs took nodes the plan had promised

    start = np.array([np.nan if s is None else s for s in start_list])
    result = _result(trace, policy, label, submit, start, lead, allocation, rebuilds,
                     time.perf_counter() - started_clock)
    result.first_prediction = first_prediction
    return result


def _easy_backfill(window, plan, free_now, now, estimate, count, cores, launch) -> bool:
    """EASY: start later jobs that fit now unless they would delay the first queued job."""
    head = window[0]
    head_start, head_nodes = plan[head]
    reserved = np.zeros_like(free_now)
    reserved[head_nodes] = cores[head]
    backfilled = False
    for job in window[1:]:
        available = free_now - reserved if now + estimate[job] > head_start else free_now
        nodes = np.flatnonzero(available >= cores[job])
        if len(nodes) >= count[job]:
            launch(job, nodes[: count[job]])
            backfilled = True
    return backfilled


def _check_fits(machine: Machine, jobs: pd.DataFrame) -> None:
    capable = (machine.cores[None, :] >= jobs["ppn"].to_numpy()[:, None]).sum(axis=1)
    impossible = np.flatnonzero(capable < jobs["nodes"].to_numpy())
    if len(impossible):
        first = jobs.iloc[impossible[0]]
        raise ValueError(f"{len(impossible)} jobs can never fit the machine, e.g. job "
                         f"{first.job_id} ({first.nodes} nodes x {first.ppn} cores)")


def _result(trace, policy, label, submit, start, lead, allocation, rebuilds, seconds):
    submit = np.asarray(submit)
    wait = start - submit
    frame = pd.DataFrame({
        "job_id": trace.jobs["job_id"].to_numpy(), "submit": submit, "start": start,
        "wait": wait, "lead": lead, "lead_class": lead_class(wait, lead),
        "real_wait": trace.jobs["wait"].to_numpy(),
    })
    return Simulation(policy, label, frame, allocation, rebuilds, seconds)
