"""How tight can a model that under-estimates <= 5% of the jobs be? Hindsight bounds.

For every trace evaluated into OUT_DIR (its <trace>-metrics.csv), the test jobs of the same
rolling folds as `surge-predict evaluate` (every job after the first of folds + 1 chunks) are
grouped by "same job" (user, requested time, node count). With hindsight, i.e. knowing each
group's test runtimes, two bounds are computed:

* each group's own 95% runtime quantile (a perfect quantile for every same-job group);
* each group's quantile level chosen from 0.5-1.0 so that at most 5% of all jobs are
  under-estimated with the least total absolute error (the 5% spent optimally).

Neither is a predictor (both use the test runtimes); they bound what conditioning on the
same job could reach. The MAE of each is compared with the best real median model's.

Usage: .venv/bin/python bench/predict/hindsight_bounds.py [OUT_DIR] [FOLDS]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from surge.predict.shared_data import swf_trace
from surge.predict.traces import read_trace

TRACES = ["RICC-2010-2", "alea_wagap-2013", "theta_argonne", "mira"]
LEVELS = np.array([0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0])


def bounds(jobs: pd.DataFrame) -> tuple[float, float, float]:
    """(MAE of the per-group 95% quantile, its under-estimated share, MAE of the optimal
    levels), minutes."""
    run = jobs["run"].to_numpy(np.float64)
    groups = jobs.groupby(["user", "req_time", "nodes"])["run"]
    q95 = groups.transform(lambda s: s.quantile(0.95, interpolation="higher")).to_numpy()
    errors, unders = [], []
    for _, runs in groups:
        values = runs.to_numpy(np.float64)
        quantiles = np.quantile(values, LEVELS, method="higher")
        errors.append([np.abs(q - values).sum() for q in quantiles])
        unders.append([(values > q).sum() for q in quantiles])
    errors, unders = np.array(errors), np.array(unders)
    rows = np.arange(len(errors))
    optimal = np.nan
    for lam in np.geomspace(1e2, 1e9, 141):          # Lagrangian sweep: least lambda that fits
        choice = np.argmin(errors + lam * unders, axis=1)
        if unders[rows, choice].sum() <= 0.05 * len(run):
            optimal = errors[rows, choice].sum() / len(run) / 60
            break
    return np.abs(q95 - run).mean() / 60, float(np.mean(q95 < run)), optimal


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("bench/predict/out")
    folds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    print("| trace | best median model (MAE) | hindsight per-group 95% quantile: MAE, under-estimated, ratio | hindsight optimal levels (<= 5%): MAE, ratio |")
    print("|---|---|---|---|")
    for trace in TRACES:
        metrics = out / f"{trace}-metrics.csv"
        if not metrics.exists():
            continue
        table = pd.read_csv(metrics, index_col="model")
        median = table.drop(index=[m for m in ("request", "cautious") if m in table.index])
        best = median["MAE_min"].idxmin()
        best_mae = median.loc[best, "MAE_min"]
        jobs = read_trace(swf_trace(f"{trace}.swf.gz")).jobs
        first = np.linspace(0, len(jobs), folds + 2).astype(int)[1]
        q95_mae, q95_under, optimal = bounds(jobs.iloc[first:])
        print(f"| {trace} | {best}, {best_mae:.0f} min | {q95_mae:.0f} min, {100 * q95_under:.1f}%, "
              f"{q95_mae / best_mae:.2f}x | {optimal:.0f} min, {optimal / best_mae:.2f}x |")


if __name__ == "__main__":
    main()
