"""Node-list lead-time study: seed 002 Fig. 6 over policies and walltime estimates.

Runs :func:`.simulate.simulate` for every policy with the refined walltime at each lambda and
with a learned predictor, collects the share of jobs per lead-time class, and, where the trace
records the real node lists (Alea's wagap trace, sacct with NodeList), checks the simulated
schedule against what really happened.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .evaluate import rolling_evaluate
from .models import default_models
from .simulate import LAMBDAS, LEAD_CLASSES, POLICIES, Simulation, refined_walltime, simulate
from .traces import Trace


def learned_walltime(trace: Trace, model_name: str = "gboost", folds: int = 4) -> np.ndarray:
    """Time-ordered predictions of ``model_name`` for every job of the trace.

    Jobs in the first chunk (before any model could be trained) keep their request, as a
    scheduler deploying the predictor would have to.
    """
    models = [m for m in default_models(automl_budget=30.0, automl_users=0) if m.name == model_name]
    if not models:
        raise ValueError(f"unknown model {model_name!r}")
    evaluation = rolling_evaluate(trace, models, folds=folds)
    estimate = trace.jobs["req_time"].to_numpy(np.float64).copy()
    estimate[len(trace.jobs) - len(evaluation.jobs):] = evaluation.predictions[model_name].to_numpy()
    return estimate


def lead_time_study(trace: Trace, policies=POLICIES, lambdas=LAMBDAS,
                    learned: list[tuple[str, np.ndarray]] = (), depth: int = 100,
                    progress=None) -> tuple[pd.DataFrame, list[Simulation]]:
    """One row per (policy, estimate): class shares, waits and simulation cost.

    ``learned`` holds (name, walltime per job) pairs of learned predictors to simulate too.
    """
    settings = [(f"lambda={lam:g}", refined_walltime(trace.jobs, lam)) for lam in lambdas]
    settings += list(learned)
    rows, runs = [], []
    for policy in policies:
        for label, walltime in settings:
            result = simulate(trace, walltime, policy, depth=depth, label=label)
            runs.append(result)
            shares = result.class_shares()
            rows.append({"policy": policy, "estimate": label, **shares.to_dict(),
                         "mean_wait_min": result.jobs["wait"].mean() / 60,
                         "queued_lead_median_min": _median_queued_lead(result),
                         "rebuilds": result.rebuilds, "seconds": result.seconds})
            if progress:
                progress(f"{policy} {label}: {result.seconds:.1f} s")
    table = pd.DataFrame(rows).set_index(["policy", "estimate"])
    return table, runs


def _median_queued_lead(result: Simulation) -> float:
    queued = result.jobs["wait"] > 0
    return float(result.jobs.loc[queued, "lead"].median() / 60) if queued.any() else 0.0


def compare_to_real(trace: Trace, result: Simulation) -> pd.Series:
    """How the simulated schedule relates to the real one.

    Waits are compared for every trace that records them (jobs whose wait is unknown are
    left out); node lists only where the trace records them too. Exact node-list agreement
    is a demanding test (the real scheduler had queues, fair-share and node properties the
    trace does not record), so the overlap and the wait statistics are reported next to it.
    """
    if not trace.has_waits and trace.node_lists is None:
        raise ValueError(f"{trace.source} records neither real waits nor real node lists")
    rows: dict[str, float] = {"jobs": len(result.jobs)}
    if trace.node_lists is not None:
        same = np.array([np.array_equal(np.sort(a), np.sort(b))
                         for a, b in zip(result.nodes, trace.node_lists)])
        overlap = np.array([len(np.intersect1d(a, b)) / len(np.union1d(a, b)) if len(b) else np.nan
                            for a, b in zip(result.nodes, trace.node_lists)])
        rows["same node list"] = same.mean()
        rows["mean node overlap (Jaccard)"] = np.nanmean(overlap)
    if trace.has_waits:
        known = trace.jobs["wait"].notna().to_numpy()
        real_wait = trace.jobs["wait"].to_numpy()[known]
        sim_wait = result.jobs["wait"].to_numpy()[known]
        rows.update({
            "jobs with a recorded wait": int(known.sum()),
            # The real scheduler works in cycles: a start within a minute counts as "at once".
            "real: started within 1 min": np.mean(real_wait <= 60),
            "simulated: started within 1 min": np.mean(sim_wait <= 60),
            "real mean wait [min]": real_wait.mean() / 60,
            "simulated mean wait [min]": sim_wait.mean() / 60,
            "real median wait [min]": np.median(real_wait) / 60,
            "simulated median wait [min]": np.median(sim_wait) / 60,
            # Undefined (NaN) when every simulated job started at once.
            "wait rank correlation": (pd.Series(real_wait).corr(pd.Series(sim_wait),
                                                                method="spearman")
                                      if np.ptp(sim_wait) > 0 else np.nan),
        })
    return pd.Series(rows)


def format_shares(table: pd.DataFrame) -> str:
    shown = table.copy()
    for column in LEAD_CLASSES:
        shown[column] = (100 * shown[column]).map("{:.1f}%".format)
    for column in ("mean_wait_min", "queued_lead_median_min", "seconds"):
        shown[column] = shown[column].map("{:.1f}".format)
    return shown.to_string()


def replay_node_choice(trace: Trace) -> pd.Series:
    """Check the node-selection rule alone against the real allocations.

    Replays the *real* starts and ends with the *real* node lists, and at every start asks
    which nodes first-fit (lowest index, the simulator's rule) and best-fit (fullest nodes
    first) would have picked given the real occupancy at that moment. If even this, with
    perfect knowledge of start times, rarely reproduces the real list, the real allocator
    follows rules the trace does not record, and exact node-list prediction on this system
    is bounded by that, not by walltime estimates.
    """
    if trace.node_lists is None:
        raise ValueError(f"{trace.source} records no real node lists")
    jobs = trace.jobs
    start = (jobs["submit"] + jobs["wait"]).to_numpy()
    end = start + jobs["run"].to_numpy()
    cores = jobs["ppn"].to_numpy()
    # Ends sort before starts at the same instant: nodes freed at t are reusable at t.
    events = sorted([(t, 0, j) for j, t in enumerate(end)] + [(t, 1, j) for j, t in enumerate(start)])
    free = trace.machine.cores.astype(np.int64).copy()
    first_fit = best_fit = feasible = 0
    chance = 0.0
    for _, kind, job in events:
        nodes = trace.node_lists[job]
        if kind == 0:
            free[nodes] += cores[job]
            continue
        candidates = np.flatnonzero(free >= cores[job])
        real = np.sort(nodes)
        chance += 1.0 / math.comb(max(len(candidates), len(real)), len(real))
        feasible += bool(np.isin(real, candidates).all())
        first_fit += np.array_equal(candidates[: len(real)], real)
        fullest = candidates[np.argsort(free[candidates], kind="stable")][: len(real)]
        best_fit += np.array_equal(np.sort(fullest), real)
        free[nodes] -= cores[job]
    n = len(jobs)
    return pd.Series({"jobs": n, "real list feasible in replay": feasible / n,
                      "first-fit picks the real list": first_fit / n,
                      "best-fit picks the real list": best_fit / n,
                      "a random feasible pick is the real list": chance / n})
