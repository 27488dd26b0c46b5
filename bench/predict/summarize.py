"""Markdown tables for bench/predict/RESULTS.md from the CSV files the bench scripts write.

Usage: .venv/bin/python bench/predict/summarize.py [OUT_DIR]   (default bench/predict/out)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

def markdown(frame: pd.DataFrame) -> str:
    """A DataFrame as a GitHub table (pandas' to_markdown needs tabulate, not installed)."""
    index_names = [str(n or "") for n in frame.index.names]
    header = index_names + [str(c) for c in frame.columns]
    rows = []
    for key, values in zip(frame.index, frame.itertuples(index=False)):
        keys = list(key) if isinstance(key, tuple) else [key]
        rows.append([str(k) for k in keys] + [str(v) for v in values])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


TRACES = ["RICC-2010-2", "alea_wagap-2013", "theta_argonne", "mira"]
CLASSES = ["instant", "< 1 s", "1 s - 10 min", "> 10 min"]
TARGET = 8.9  # seed 002's per-user gain


def metrics_tables(out: Path):
    """(trace, its metrics table by model) for every trace evaluated into `out`."""
    for trace in TRACES:
        path = out / f"{trace}-metrics.csv"
        if path.exists():
            yield trace, pd.read_csv(path, index_col="model")


def median_models(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the models that estimate a median: not the request, not the cautious one."""
    return table.drop(index=[m for m in ("request", "cautious") if m in table.index])


def evaluation_tables(out: Path) -> str:
    parts = []
    for trace, table in metrics_tables(out):
        shown = pd.DataFrame({
            "median AE [min]": table["median_AE_min"].map("{:.1f}".format),
            "gain vs request": table["gain_vs_request"].map("{:.2f}x".format),
            "per-user median AE [min]": table["user_median_AE_min"].map("{:.1f}".format),
            "per-user gain": table["user_gain_vs_request"].map("{:.2f}x".format),
            **({"per-user gain over seeds (min-max)": [
                f"{lo:.2f}-{hi:.2f}x" if n > 1 else "-" for lo, hi, n in
                zip(table["user_gain_min"], table["user_gain_max"], table["seeds"])]}
               if "seeds" in table else {}),
            **({"users": table["users"].astype(int)} if "users" in table else {}),
            "MAE [min]": table["MAE_min"].map("{:.0f}".format),
            "under-estimated": (100 * table["under_rate"]).map("{:.1f}%".format),
            **({"worst fold": (100 * table["under_rate_worst_fold"]).map("{:.1f}%".format)}
               if "under_rate_worst_fold" in table else {}),
            "within 10 min": (100 * table["within_10min"]).map("{:.1f}%".format),
            "fit+predict [s]": table["fit_s"].map("{:.0f}".format),
        })
        jobs = int(table["jobs"].iloc[0])
        parts.append(f"#### {trace} ({jobs:,} jobs predicted)\n\n{markdown(shown)}\n")
    return "\n".join(parts)


def lead_time_tables(out: Path) -> str:
    parts = []
    for trace in TRACES:
        path = out / f"{trace}-leadtime.csv"
        if not path.exists():
            continue
        table = pd.read_csv(path, index_col=["policy", "estimate"])
        shown = (100 * table[CLASSES]).round(1).astype(str) + "%"
        shown["mean wait [min]"] = table["mean_wait_min"].map("{:.0f}".format)
        shown["sim [s]"] = table["seconds"].map("{:.0f}".format)
        parts.append(f"#### {trace}\n\n{markdown(shown)}\n")
    return "\n".join(parts)


def seed_range(out: Path, trace: str, model: str) -> str:
    """The min-max of a model's under-estimated share over the seeds it was fitted with."""
    path = out / f"{trace}-metrics-seeds.csv"
    if not path.exists():
        return "-"
    rates = pd.read_csv(path).query("model == @model")["under_rate"]
    if len(rates) < 2:
        return "-"
    return f"{100 * rates.min():.1f}-{100 * rates.max():.1f}% ({len(rates)} seeds)"


def cautious_table(out: Path) -> str:
    """The cautious model against the best median model (by MAE) on every trace."""
    rows = []
    for trace, table in metrics_tables(out):
        if "cautious" not in table.index:
            continue
        best = median_models(table)["MAE_min"].idxmin()
        cautious = table.loc["cautious"]
        rows.append({
            "trace": trace,
            "cautious under-estimated": f"{100 * cautious['under_rate']:.1f}%",
            **({"worst fold": f"{100 * cautious['under_rate_worst_fold']:.1f}%"}
               if "under_rate_worst_fold" in table else {}),
            "under-estimated over seeds (min-max)": seed_range(out, trace, "cautious"),
            "cautious MAE [min]": f"{cautious['MAE_min']:.0f}",
            "best median model (MAE)": best,
            "its MAE [min]": f"{table.loc[best, 'MAE_min']:.0f}",
            "MAE ratio": f"{cautious['MAE_min'] / table.loc[best, 'MAE_min']:.2f}x",
            "request MAE [min]": f"{table.loc['request', 'MAE_min']:.0f}",
            "request under-estimated": f"{100 * table.loc['request', 'under_rate']:.1f}%",
        })
    return markdown(pd.DataFrame(rows).set_index("trace")) if rows else ""


def user_bootstrap(out: Path, trace: str) -> pd.DataFrame | None:
    """The bootstrap over users that per_user_spread.py wrote for `trace`, by model."""
    path = out / f"{trace}-user-bootstrap.csv"
    return pd.read_csv(path, index_col="model") if path.exists() else None


def target_verdict(gain: float, boot: pd.Series | None) -> str:
    """Whether a per-user gain is shown to reach the target. A "yes" needs the lower bound of
    the bootstrap over users, its 5th percentile, at or above the target; a "no" from the
    bootstrap needs its 95th percentile below it; in between it is "not shown", whatever the
    point estimate. Without a bootstrap a point estimate at or above the target is "not shown"."""
    if boot is None:
        return "no" if gain < TARGET else "not shown (no bootstrap over users)"
    if boot["p5"] >= TARGET:
        return f"yes (5th percentile {boot['p5']:.1f}x)"
    if boot["p95"] < TARGET:
        return f"no (95th percentile {boot['p95']:.1f}x)"
    return (f"not shown (5th percentile {boot['p5']:.1f}x; "
            f"{boot['share_at_target']:.0%} of draws reach {TARGET}x)")


def target_table(out: Path) -> str:
    """Per-user gain against seed 002's 8.9x: the best median model per trace, the number of
    users the figure rests on, its spread over seeds where the model is random, and whether the
    bootstrap over users (per_user_spread.py) shows the target met."""
    def gain(row) -> str:
        text = f"{row['user_gain_vs_request']:.1f}x"
        if row.get("seeds", 1) > 1:
            text += f" ({row['user_gain_min']:.2f}-{row['user_gain_max']:.2f}x, {int(row['seeds'])} seeds)"
        return text

    rows = []
    for trace, table in metrics_tables(out):
        best = median_models(table)["user_gain_vs_request"].idxmax()
        boot = user_bootstrap(out, trace)
        rows.append({
            "trace": trace,
            "users": int(table.loc["request", "users"]) if "users" in table else "?",
            "request per-user median AE": f"{table.loc['request', 'user_median_AE_min']:.1f} min",
            "best model (per-user)": f"{best}, {table.loc[best, 'user_median_AE_min']:.1f} min",
            "its per-user gain": f"**{gain(table.loc[best])}**",
            "AutoML global / per user": (f"{gain(table.loc['automl'])} / "
                                         f"{gain(table.loc['automl-user'])}"
                                         if "automl-user" in table.index else "-"),
            f">= {TARGET}x (5th percentile of the user bootstrap)": target_verdict(
                table.loc[best, "user_gain_vs_request"],
                boot.loc[best] if boot is not None and best in boot.index else None),
        })
    return markdown(pd.DataFrame(rows).set_index("trace")) if rows else ""


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("bench/predict/out")
    print("### Walltime models\n")
    print(evaluation_tables(out))
    print("### Per-user gain against seed 002's 8.9x\n")
    print(target_table(out) + "\n")
    print("### Cautious model against the best median model\n")
    print(cautious_table(out) + "\n")
    print("### Node-list lead time\n")
    print(lead_time_tables(out))
    for trace in TRACES:
        real = out / f"{trace}-vs-real.csv"
        if real.exists():
            print(f"### Simulated vs real schedule ({trace})\n")
            print(markdown(pd.read_csv(real, index_col=0).round(3)) + "\n")


if __name__ == "__main__":
    main()
