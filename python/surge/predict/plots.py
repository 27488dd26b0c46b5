"""Figures for the predictor: error CDFs (seed 002 Fig. 5) and node-list lead time (Fig. 6).

Figures are ``matplotlib.figure.Figure`` objects saved straight to PNG files: no pyplot, no
window, and the program's matplotlib backend is left as it was.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

#: Fig. 6 colours: instant (blue), < 1 s (orange), 1 s - 10 min (green), > 10 min (red).
CLASS_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red"]


def _cdf(ax, values: np.ndarray, label: str) -> None:
    values = np.sort(values[np.isfinite(values)])
    if len(values):
        ax.step(np.maximum(values, 1e-2), np.arange(1, len(values) + 1) / len(values),
                where="post", label=label)


def error_cdf(user_median_errors: pd.DataFrame, job_errors: pd.DataFrame, title: str,
              path: Path) -> Path:
    """Left: CDF over users of each model's per-user median AE (Fig. 5); right: over jobs."""
    fig = Figure(figsize=(11, 4.2))
    left, right = fig.subplots(1, 2, sharey=True)
    for name in user_median_errors.columns:
        _cdf(left, user_median_errors[name].to_numpy(), name)
        _cdf(right, job_errors[name].to_numpy(), name)
    left.set_title(f"per-user median AE ({len(user_median_errors)} users)")
    right.set_title(f"per-job AE ({len(job_errors)} jobs)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("absolute error [min]")
        ax.axvline(10, color="grey", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
    left.set_ylabel("cumulative distribution")
    right.legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def lead_time_bars(shares: pd.DataFrame, title: str, path: Path) -> Path:
    """Stacked bars, one per (policy, walltime setting): share of jobs per lead-time class.

    ``shares`` has a (policy, estimate) row index and the four class columns, values in [0, 1].
    """
    policies = list(dict.fromkeys(shares.index.get_level_values(0)))
    fig = Figure(figsize=(4.2 * len(policies), 4.2))
    axes = fig.subplots(1, len(policies), sharey=True, squeeze=False)
    for ax, policy in zip(axes[0], policies):
        part = shares.loc[policy]
        bottom = np.zeros(len(part))
        for column, colour in zip(part.columns, CLASS_COLOURS):
            ax.bar(range(len(part)), part[column].to_numpy() * 100, bottom=bottom,
                   color=colour, label=column)
            bottom += part[column].to_numpy() * 100
        ax.set_xticks(range(len(part)), [str(x) for x in part.index], rotation=45, ha="right")
        ax.set_title(policy)
        ax.set_xlabel("walltime used by the scheduler")
    axes[0][0].set_ylabel("jobs [%]")
    axes[0][-1].legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
