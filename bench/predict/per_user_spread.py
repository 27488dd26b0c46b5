"""How much the per-user gain of the history models moves with the period and the users.

The per-user gain is the median over a few dozen users (35 on Theta) of each user's median
absolute error, so a handful of users near the median decide it. For the deterministic
history models (request, last-same, same-choice) this prints, per trace, the per-user gain
over the whole test period (the figure of section 1) and over its two halves (folds 1-2
and 3-4 of the same rolling evaluation), and a bootstrap over users (users drawn with
replacement, the same draw for every model): the 5-95% range of the gain, how often it
reaches 8.9x, and how often same-choice beats last-same.

The bootstrap of each trace is also written to OUT_DIR/<trace>-user-bootstrap.csv (per model:
the gain, its 5th and 95th percentiles, the share of draws at or above 8.9x), which
summarize.py reads for its verdict on the 8.9x target: "yes" only when the 5th percentile is
at or above it.

Usage: .venv/bin/python bench/predict/per_user_spread.py [--out OUT_DIR] [TRACE ...]
       (default: the four shared traces in $SURGE_SHARED_DATA/swf, default ../shared/data;
       OUT_DIR default bench/predict/out)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from surge.predict.evaluate import MIN_USER_JOBS, rolling_evaluate
from surge.predict.models import LastSame, SameJobChoice, UserRequest
from surge.predict.traces import read_trace

TRACES = ["RICC-2010-2", "alea_wagap-2013", "theta_argonne", "mira"]
MODELS = ["last-same", "same-choice"]
TARGET = 8.9
DRAWS = 4000


def user_medians(jobs: pd.DataFrame, predictions: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """Per-user median AE (minutes) over ``rows``, users with >= MIN_USER_JOBS of them."""
    jobs, predictions = jobs[rows], predictions[rows]
    errors = predictions.sub(jobs["run"], axis=0).abs() / 60.0
    counts = jobs.groupby("user")["run"].transform("size")
    keep = (counts >= MIN_USER_JOBS).to_numpy()
    return errors[keep].groupby(jobs["user"][keep]).median()


def gain(medians: pd.DataFrame, model: str) -> float:
    return medians["request"].median() / medians[model].median()


def main() -> None:
    data = Path(os.environ.get("SURGE_SHARED_DATA", "../shared/data")) / "swf"
    args = sys.argv[1:]
    out = Path("bench/predict/out")
    if "--out" in args:
        at = args.index("--out")
        out = Path(args[at + 1])
        del args[at:at + 2]
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in args or TRACES:
        trace = read_trace(data / f"{name}.swf.gz")
        evaluation = rolling_evaluate(trace, [UserRequest(), LastSame(), SameJobChoice()])
        jobs, predictions, folds = evaluation.jobs, evaluation.predictions, evaluation.folds
        periods = {"all folds": folds >= 1, "folds 1-2": folds <= 2, "folds 3-4": folds >= 3}
        medians = {p: user_medians(jobs, predictions, rows) for p, rows in periods.items()}
        users = len(medians["all folds"])
        print(f"{name}: per-user gain over the request ({users} users with >= "
              f"{MIN_USER_JOBS} predicted jobs over all folds)")
        for model in MODELS:
            halves = ", ".join(f"{p} {gain(m, model):.2f}x ({len(m)} users)"
                               for p, m in medians.items() if p != "all folds")
            print(f"  {model:12s} all folds {gain(medians['all folds'], model):.2f}x; {halves}")
        every = medians["all folds"]
        draws = {m: np.empty(DRAWS) for m in MODELS}
        for i in range(DRAWS):
            sample = every.iloc[rng.integers(0, users, users)]
            for model in MODELS:
                draws[model][i] = gain(sample, model)
        rows = []
        for model in MODELS:
            low, high = np.percentile(draws[model], [5, 95])
            share = np.mean(draws[model] >= TARGET)
            print(f"  {model:12s} users resampled: 5-95% {low:.1f}-{high:.1f}x, "
                  f">= {TARGET}x in {share:.0%} of {DRAWS} draws")
            rows.append({"model": model, "users": users, "gain": gain(every, model),
                         "p5": low, "p95": high, "share_at_target": share,
                         "target": TARGET, "draws": DRAWS})
        better = np.mean(draws["same-choice"] > draws["last-same"])
        print(f"  same-choice above last-same in {better:.0%} of the draws")
        pd.DataFrame(rows).to_csv(out / f"{name}-user-bootstrap.csv", index=False)


if __name__ == "__main__":
    main()
