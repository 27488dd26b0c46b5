"""Time-ordered (rolling) evaluation of walltime predictors, and the error metrics.

The trace is cut, in submit order, into ``folds + 1`` equal chunks. Chunk 0 is only ever
training data. For fold ``k`` the models are refitted on every earlier job that had *ended*
by the first submit of chunk ``k`` (its runtime was known then) and predict chunk ``k``.
No job is ever predicted by a model that saw its future: this is the split seed 002 and the
data README ask for, and random splits overstate accuracy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .features import history_features, model_frame
from .models import Batch, WalltimeModel, default_models
from .traces import Trace

#: A job counts as "within 10 minutes" when |prediction - runtime| <= this many seconds.
WITHIN_SECONDS = 600.0
#: Users need this many test jobs to enter the per-user median-AE distribution (Fig. 5).
MIN_USER_JOBS = 5


@dataclass
class Evaluation:
    """Predictions for the evaluated jobs (one column per model) and the timing of each model."""

    trace: Trace
    jobs: pd.DataFrame                       # the evaluated (test) jobs
    predictions: pd.DataFrame                # seconds, columns = model names
    fit_seconds: dict[str, float] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    #: The rolling fold (1..folds) each evaluated job was predicted in.
    folds: np.ndarray | None = None

    def metrics(self) -> pd.DataFrame:
        return metrics_table(self.jobs, self.predictions, self.fit_seconds, self.folds)

    def user_median_errors(self) -> pd.DataFrame:
        """Per-user median absolute error in minutes (users with >= MIN_USER_JOBS test jobs)."""
        errors = (self.predictions.sub(self.jobs["run"], axis=0)).abs() / 60.0
        counts = self.jobs.groupby("user")["run"].transform("size")
        keep = (counts >= MIN_USER_JOBS).to_numpy()
        return errors[keep].groupby(self.jobs["user"][keep]).median()


def metrics_table(jobs: pd.DataFrame, predictions: pd.DataFrame,
                  fit_seconds: dict[str, float] | None = None,
                  folds: np.ndarray | None = None) -> pd.DataFrame:
    """One row per model: error figures (minutes) with the under-estimation rate beside them
    (and, given each job's ``folds``, the highest rate of any one fold)."""
    run = jobs["run"].to_numpy(np.float64)
    users = jobs["user"].to_numpy()
    request_col = "request" if "request" in predictions else None
    rows = []
    for name in predictions.columns:
        pred = predictions[name].to_numpy(np.float64)
        error = np.abs(pred - run) / 60.0
        per_user = pd.Series(error).groupby(users).agg(["median", "size"])
        per_user = per_user.loc[per_user["size"] >= MIN_USER_JOBS, "median"]
        rows.append({
            "model": name,
            "jobs": len(run),
            "MAE_min": error.mean(),
            "median_AE_min": np.median(error),
            "user_median_AE_min": per_user.median() if len(per_user) else np.nan,
            # How many users the per-user figures rest on (a few users can swing them).
            "users": len(per_user),
            "under_rate": np.mean(pred < run),
            **({"under_rate_worst_fold": pd.Series(pred < run).groupby(folds).mean().max()}
               if folds is not None else {}),
            "within_10min": np.mean(error * 60.0 <= WITHIN_SECONDS),
            "fit_s": (fit_seconds or {}).get(name, 0.0),
        })
    table = pd.DataFrame(rows).set_index("model")
    if request_col:
        # Seed 002's headline figure: median AE of the user requests / median AE of the model.
        table["gain_vs_request"] = table.loc[request_col, "median_AE_min"] / table["median_AE_min"]
        table["user_gain_vs_request"] = (table.loc[request_col, "user_median_AE_min"]
                                         / table["user_median_AE_min"])
    return table


def prepare(trace: Trace) -> Batch:
    """All jobs of a trace with their history and model features (computed once)."""
    history = history_features(trace.jobs)
    return Batch(trace.jobs, history, model_frame(trace.jobs, history, trace.timezone))


def rolling_evaluate(trace: Trace, models: list[WalltimeModel] | None = None,
                     folds: int = 4, progress=None) -> Evaluation:
    """Refit every model on each expanding window and predict the next chunk (see module doc)."""
    if folds < 1:
        raise ValueError("folds must be >= 1")
    models = default_models() if models is None else models
    everything = prepare(trace)
    n = len(trace.jobs)
    if n < 2 * (folds + 1):
        raise ValueError(f"{trace.source}: {n} jobs are too few for {folds} rolling folds")
    bounds = np.linspace(0, n, folds + 2).astype(int)
    submit = trace.jobs["submit"].to_numpy()
    end = everything.history["end"].to_numpy()
    columns: dict[str, list[np.ndarray]] = {m.name: [] for m in models}
    fold_of = np.repeat(np.arange(1, folds + 1), np.diff(bounds[1:]))
    fit_seconds = {m.name: 0.0 for m in models}
    for fold in range(1, folds + 1):
        lo, hi = bounds[fold], bounds[fold + 1]
        cut = submit[lo]
        known = np.zeros(n, dtype=bool)
        known[:lo] = end[:lo] <= cut
        train = everything.subset(known)
        test = everything.subset(slice(lo, hi))
        for model in models:
            started = time.perf_counter()
            model.fit(train)
            columns[model.name].append(model.predict(test))
            fit_seconds[model.name] += time.perf_counter() - started
            if progress:
                progress(f"fold {fold}/{folds}: {model.name} done "
                         f"({int(known.sum())} training jobs, {hi - lo} predicted)")
    tested = trace.jobs.iloc[bounds[1]:].reset_index(drop=True)
    predictions = pd.DataFrame({name: np.concatenate(parts) for name, parts in columns.items()})
    return Evaluation(trace, tested, predictions, fit_seconds,
                      {m.name: m.description for m in models}, fold_of)


def rerun_spread(trace: Trace, make_models, seeds: int, folds: int = 4,
                 progress=None) -> tuple[Evaluation, pd.DataFrame, pd.DataFrame]:
    """Evaluate with seed 0, then rerun the models whose fits are random with seeds 1..N-1.

    ``make_models(seed)`` returns the model list for a seed. Returns the seed-0 evaluation,
    its metrics table with the spread of the per-user gain over the seeds beside it
    (``user_gain_min``/``_max``/``_sd``; deterministic models get their single value), and
    the per-seed metrics (long format, for the CSV).
    """
    first = rolling_evaluate(trace, make_models(0), folds=folds, progress=progress)
    tables = [first.metrics().assign(seed=0)]
    for seed in range(1, seeds):
        models = [m for m in make_models(seed) if m.random]
        if not models:
            break
        if progress:
            progress(f"rerun with seed {seed}: {', '.join(m.name for m in models)}")
        rerun = rolling_evaluate(trace, models, folds=folds, progress=progress)
        # The gain needs the request's per-user error: the same for every seed.
        table = metrics_table(rerun.jobs, rerun.predictions.assign(
            request=first.predictions["request"]), rerun.fit_seconds,
            rerun.folds).drop(index="request")
        tables.append(table.assign(seed=seed))
    per_seed = pd.concat(tables).reset_index()
    spread = per_seed.groupby("model", sort=False)["user_gain_vs_request"].agg(
        user_gain_min="min", user_gain_max="max", user_gain_sd="std", seeds="size")
    spread["user_gain_sd"] = spread["user_gain_sd"].fillna(0.0)
    table = first.metrics().join(spread)
    return first, table, per_seed


def format_table(table: pd.DataFrame) -> str:
    """The metrics table as aligned text, the way the CLI prints it."""
    shown = table.copy()
    percent = [c for c in ("under_rate", "under_rate_worst_fold", "within_10min") if c in shown]
    for column in percent:
        shown[column] = (100 * shown[column]).map("{:.1f}%".format)
    for column in ("MAE_min", "median_AE_min", "user_median_AE_min", "fit_s"):
        shown[column] = shown[column].map("{:.1f}".format)
    for column in ("gain_vs_request", "user_gain_vs_request", "user_gain_min", "user_gain_max"):
        if column in shown:
            shown[column] = shown[column].map("{:.2f}x".format)
    if "user_gain_sd" in shown:
        shown["user_gain_sd"] = shown["user_gain_sd"].map("{:.2f}".format)
    return shown.to_string()
