"""Per-job features known at submission time, computed for a whole trace at once.

A job's runtime is only known once it has *ended*, so every history feature of job ``i`` uses
only the same user's jobs whose end (submit + wait + run) is at or before ``i``'s submit time.
This is what keeps the evaluation honest (no look-ahead) and it is done with sorted arrays and
``searchsorted`` rather than a Python loop, so the 447,794-job RICC trace takes about a second.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

#: Columns the learned models are trained on (all available at submit time).
MODEL_FEATURES = [
    "log_req_time", "log_procs", "log_nodes", "hour", "weekday",
    "hist_count", "log_last1", "log_last2", "log_user_mean", "user_ratio_mean",
    "user_ratio_last5_max", "user_ratio_last20_max", "user_ratio_max",
    "log_user_median_req_ratio", "queue_code", "user_code",
    "same_count", "log_same_last1", "log_same_last2", "log_same_median3", "log_samereq_last1",
]

#: The cautious model's features: those of the models before the same-job features existed.
CAUTIOUS_FEATURES = [f for f in MODEL_FEATURES if not f.endswith(("same_count", "same_last1",
                     "same_last2", "same_median3", "samereq_last1"))]

#: A job's "same job" is one of the user's earlier jobs with the same requested time and node
#: count (the traces record no job names or scripts; a user resubmitting a job script
#: resubmits its request). ``samereq`` matches on the requested time alone.
SAME_JOB_KEYS = ("user", "req_time", "nodes")
SAME_REQUEST_KEYS = ("user", "req_time")


def _log(values: np.ndarray) -> np.ndarray:
    return np.log1p(np.maximum(values, 0.0))


def _ended_lags(submit: np.ndarray, end: np.ndarray, run: np.ndarray, group: np.ndarray,
                lags: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """For every job: how many jobs of its ``group`` had ended by its submission, and the
    runtimes of the ``lags`` most recently ended ones (NaN where there are fewer)."""
    scale = np.int64(1) << np.int64(36)            # > any trace duration in seconds
    t0 = min(submit.min(), end.min())
    end_key = group * scale + (end - t0).astype(np.int64)
    order = np.argsort(end_key, kind="stable")
    sorted_key = end_key[order]
    pos = np.searchsorted(sorted_key, group * scale + np.floor(submit - t0).astype(np.int64),
                          side="right")
    count = pos - np.searchsorted(sorted_key, group * scale, side="left")
    run_sorted = run[order]
    out = []
    for k in range(1, lags + 1):
        lag = np.full(len(submit), np.nan)
        has = count >= k
        lag[has] = run_sorted[pos[has] - k]
        out.append(lag)
    return count, out


def _group_codes(jobs: pd.DataFrame, keys) -> np.ndarray:
    columns = [c for c in keys if c in jobs]
    return jobs.groupby(columns, sort=False, dropna=False).ngroup().to_numpy(np.int64)


def history_features(jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per job (same order as ``jobs``) with the user's completed-job history.

    ``last1``/``last2`` are the runtimes of the user's two most recently *ended* jobs,
    ``user_mean`` their mean runtime, ``ratio_mean`` the mean of run/request, and
    ``ratio_last5_max`` the largest run/request among the last five (NaN without history).
    """
    n = len(jobs)
    user = pd.factorize(jobs["user"])[0].astype(np.int64)
    submit = jobs["submit"].to_numpy(np.float64)
    run = jobs["run"].to_numpy(np.float64)
    # Where the trace does not record the wait, the job is taken to have started at once:
    # the earliest it can have ended (the only choice, and the same for every model).
    end = submit + np.nan_to_num(jobs["wait"].to_numpy(np.float64), nan=0.0) + run
    ratio = np.minimum(run / jobs["req_time"].to_numpy(np.float64), 1.0)

    # Sort every job by (user, end); a job's history is the prefix of its user's block
    # whose end <= its submit. Composite int64 keys keep it one searchsorted call.
    scale = np.int64(1) << np.int64(36)            # > any trace duration in seconds
    t0 = min(submit.min(), end.min())
    end_key = user * scale + (end - t0).astype(np.int64)
    order = np.argsort(end_key, kind="stable")
    sorted_key = end_key[order]
    submit_key = user * scale + np.floor(submit - t0).astype(np.int64)
    pos = np.searchsorted(sorted_key, submit_key, side="right")      # one past last ended
    first = np.searchsorted(sorted_key, user * scale, side="left")   # user's block start
    count = pos - first

    run_sorted, ratio_sorted = run[order], ratio[order]
    cum_run = np.concatenate([[0.0], np.cumsum(run_sorted)])
    cum_ratio = np.concatenate([[0.0], np.cumsum(ratio_sorted)])
    with np.errstate(invalid="ignore", divide="ignore"):
        user_mean = (cum_run[pos] - cum_run[first]) / count
        ratio_mean = (cum_ratio[pos] - cum_ratio[first]) / count

    def lag(k: int, values: np.ndarray) -> np.ndarray:
        out = np.full(n, np.nan)
        has = count >= k
        out[has] = values[pos[has] - k]
        return out

    def last_max(k: int, values: np.ndarray) -> np.ndarray:
        lags = np.vstack([lag(i, values) for i in range(1, k + 1)])
        return np.where(count > 0, np.nanmax(np.where(np.isnan(lags), -1, lags), axis=0), np.nan)

    # Largest used/requested ratio over the user's whole ended history: the user's own
    # evidence of how close to the limit their jobs can get (the cautious model's input).
    ratio_cummax = pd.Series(ratio_sorted).groupby(user[order]).cummax().to_numpy()
    ratio_max = np.where(count > 0, ratio_cummax[np.maximum(pos - 1, 0)], np.nan)
    # The same user's earlier runs of the "same job" (SAME_JOB_KEYS), ended before submission.
    same_count, (same1, same2, same3) = _ended_lags(submit, end, run,
                                                    _group_codes(jobs, SAME_JOB_KEYS), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)          # all-NaN rows: no history
        same_median3 = np.nanmedian(np.vstack([same1, same2, same3]), axis=0)
    _, (samereq1,) = _ended_lags(submit, end, run, _group_codes(jobs, SAME_REQUEST_KEYS), 1)
    return pd.DataFrame({
        "same_count": same_count, "same_last1": same1, "same_last2": same2,
        "same_median3": same_median3, "samereq_last1": samereq1,
        "hist_count": count, "last1": lag(1, run_sorted), "last2": lag(2, run_sorted),
        "user_mean": user_mean, "ratio_mean": ratio_mean,
        "ratio_last5_max": last_max(5, ratio_sorted), "ratio_last20_max": last_max(20, ratio_sorted),
        "ratio_max": ratio_max, "end": end,
    }, index=jobs.index)


def model_frame(jobs: pd.DataFrame, history: pd.DataFrame | None = None,
                timezone: str | None = None) -> pd.DataFrame:
    """The :data:`MODEL_FEATURES` matrix (NaN = no history yet; the models impute).

    ``timezone`` (the trace's ``TimeZoneString``) makes hour and weekday the site's local
    ones; without it they are UTC.
    """
    if history is None:
        history = history_features(jobs)
    req = jobs["req_time"].to_numpy(np.float64)
    # Submit times are Unix seconds (the SWF reader adds UnixStartTime). Users work by the
    # local clock, so hour and weekday are local where the trace names its time zone.
    stamp = pd.to_datetime(jobs["submit"], unit="s", utc=True)
    if timezone:
        stamp = stamp.dt.tz_convert(timezone)
    user_median_req = jobs.groupby("user")["req_time"].transform(
        lambda s: s.expanding().median())  # requests are known at submit: no leakage
    return pd.DataFrame({
        "log_req_time": _log(req),
        "log_procs": _log(jobs["procs"].to_numpy(np.float64)),
        "log_nodes": _log(jobs["nodes"].to_numpy(np.float64)),
        "hour": stamp.dt.hour.to_numpy(),
        "weekday": stamp.dt.day_of_week.to_numpy(),
        "hist_count": _log(history["hist_count"].to_numpy(np.float64)),
        "log_last1": _log(history["last1"].to_numpy()),
        "log_last2": _log(history["last2"].to_numpy()),
        "log_user_mean": _log(history["user_mean"].to_numpy()),
        "user_ratio_mean": history["ratio_mean"].to_numpy(),
        "user_ratio_last5_max": history["ratio_last5_max"].to_numpy(),
        "user_ratio_last20_max": history["ratio_last20_max"].to_numpy(),
        "user_ratio_max": history["ratio_max"].to_numpy(),
        "log_user_median_req_ratio": _log(req) - _log(user_median_req.to_numpy(np.float64)),
        "queue_code": pd.factorize(jobs["queue"])[0],
        "user_code": pd.factorize(jobs["user"])[0],
        "same_count": _log(history["same_count"].to_numpy(np.float64)),
        "log_same_last1": _log(history["same_last1"].to_numpy()),
        "log_same_last2": _log(history["same_last2"].to_numpy()),
        "log_same_median3": _log(history["same_median3"].to_numpy()),
        "log_samereq_last1": _log(history["samereq_last1"].to_numpy()),
    }, index=jobs.index)
