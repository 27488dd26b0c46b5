"""``surge predict`` / ``surge-predict``: the predictor's command line.

Subcommands
-----------
``evaluate TRACE``   time-ordered evaluation of all walltime models: metrics table + CDF plot.
``simulate TRACE``   scheduler simulation (FCFS / EASY / conservative) with refined walltimes:
                     how early each job's node list is known (seed 002 Fig. 6) + bar plot.
``advise``           pre-staging advice for one job of a trace.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from .traces import TraceFormatError, read_trace


def _add_trace_arguments(parser: argparse.ArgumentParser, outputs: bool = False) -> None:
    parser.add_argument("trace", type=Path, help="SWF trace (.swf[.gz]) or sacct --parsable2 output")
    parser.add_argument("--layout", default="auto", choices=["auto", "swf", "argonne", "alea", "sacct"],
                        help="trace layout (default: detect)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="use only the first N jobs in submit order (0 = all)")
    parser.add_argument("--tz", default=None, metavar="ZONE",
                        help="time zone of sacct's Submit/Start/End, which sacct prints as "
                             "local times without an offset: an IANA name such as "
                             "Europe/Berlin (default: this machine's local zone). SWF traces "
                             "hold Unix times and name their zone in the header")
    if outputs:
        parser.add_argument("--out", type=Path, default=Path("predict-out"),
                            help="output directory for tables and plots")
        parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")


def _load(args):
    trace = read_trace(args.trace, args.layout, args.tz)
    if args.jobs:
        trace = trace.head(args.jobs)
    print(trace.summary(), file=sys.stderr)
    return trace


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".swf", ".txt", ".sacct"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return name


def cmd_evaluate(args) -> int:
    from .evaluate import MIN_USER_JOBS, format_table, rerun_spread
    from .models import default_models
    from .plots import error_cdf

    trace = _load(args)
    known = [m.name for m in default_models(args.automl_budget, args.user_budget,
                                            args.automl_users)]
    wanted = args.models.split(",") if args.models else known
    unknown = set(wanted) - set(known)
    if unknown:
        raise SystemExit(f"unknown model(s): {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(known)}")
    # automl-user predicts through the global automl model: keep it when asked for; the
    # request is every gain's reference.
    needed = set(wanted) | ({"automl"} if "automl-user" in wanted else set()) | {"request"}

    def make_models(seed: int):
        return [m for m in default_models(args.automl_budget, args.user_budget,
                                          args.automl_users, seed) if m.name in needed]

    if args.seeds < 1:
        raise ValueError("--seeds must be >= 1")
    progress = (lambda msg: print(msg, file=sys.stderr)) if args.verbose else None
    evaluation, table, per_seed = rerun_spread(trace, make_models, args.seeds, args.folds,
                                               progress)
    print(f"# {_stem(args.trace)}: {len(evaluation.jobs)} jobs predicted, time-ordered "
          f"({args.folds} rolling folds); errors in minutes; per-user figures over the "
          f"'users' users with >= {MIN_USER_JOBS} predicted jobs"
          + (f"; user_gain_min/max/sd over {args.seeds} seeds of the random models"
             if args.seeds > 1 else ""))
    print(format_table(table))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = _stem(args.trace)
    table.to_csv(args.out / f"{stem}-metrics.csv")
    per_seed.to_csv(args.out / f"{stem}-metrics-seeds.csv", index=False)
    job_errors = evaluation.predictions.sub(evaluation.jobs["run"], axis=0).abs() / 60.0
    plot = error_cdf(evaluation.user_median_errors(), job_errors,
                     f"{stem}: walltime prediction error (time-ordered)",
                     args.out / f"{stem}-error-cdf.png")
    print(f"wrote {args.out / (stem + '-metrics.csv')} and {plot}", file=sys.stderr)
    return 0


def walltime_for(trace, spec: str, folds: int = 4):
    """Scheduler walltimes from ``request``, ``lambda=X`` or a model name (time-ordered)."""
    from .simulate import refined_walltime
    from .study import learned_walltime

    if spec == "request":
        return refined_walltime(trace.jobs, 1.0)
    if spec.startswith("lambda="):
        return refined_walltime(trace.jobs, float(spec.split("=", 1)[1]))
    return learned_walltime(trace, spec, folds)


def uses_true_runtime(spec: str) -> bool:
    """``lambda=X`` with X < 1 mixes in the job's real runtime: an oracle, not a prediction."""
    return spec.startswith("lambda=") and float(spec.split("=", 1)[1]) < 1.0


def cmd_simulate(args) -> int:
    from .plots import lead_time_bars
    from .study import compare_to_real, format_shares, lead_time_study, replay_node_choice

    trace = _load(args)
    lambdas = [float(x) for x in args.lambdas.split(",")] if args.lambdas else []
    names = [] if args.learned == "none" else args.learned.split(",")
    learned = [(name, walltime_for(trace, name)) for name in names]
    progress = (lambda msg: print(msg, file=sys.stderr)) if args.verbose else None
    table, runs = lead_time_study(trace, args.policies.split(","), lambdas, learned,
                                  depth=args.depth, progress=progress)
    stem = _stem(args.trace)
    print(f"# {stem}: node-list lead time (share of jobs per class), {len(trace.jobs)} jobs, "
          f"planning depth {args.depth}")
    print(format_shares(table))
    if any(lam < 1 for lam in lambdas):
        print("note: lambda < 1 plans with each job's true runtime (T_run + lambda (T_req - "
              "T_run)): an oracle bound, not something a scheduler can know")
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / f"{stem}-leadtime.csv")
    from .simulate import LEAD_CLASSES
    plot = lead_time_bars(table[LEAD_CLASSES], f"{stem}: how long before the start the node "
                          "list was known", args.out / f"{stem}-leadtime.png")
    if trace.has_waits or trace.node_lists is not None:
        what = "waits and node lists" if trace.node_lists is not None and trace.has_waits else \
            "node lists" if trace.node_lists is not None else "waits"
        print(f"\n# simulated vs real schedule ({stem} records the real {what})")
        checks = {f"{r.policy} {r.label}": compare_to_real(trace, r) for r in runs
                  if r.label == "lambda=1" or r.label in names}
        comparison = pd.DataFrame(checks)
        print(comparison.to_string(float_format=lambda v: f"{v:.3f}"))
        comparison.to_csv(args.out / f"{stem}-vs-real.csv")
    if trace.node_lists is not None:
        print(f"\n# node-selection rule replayed on the real schedule")
        print(replay_node_choice(trace).to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {args.out / (stem + '-leadtime.csv')} and {plot}", file=sys.stderr)
    return 0


def cmd_advise(args) -> int:
    from ..units import parse_rate, parse_size
    from .advise import advise

    oracle = uses_true_runtime(args.estimate)
    if oracle and not args.oracle:
        raise ValueError(f"--estimate {args.estimate} plans with each job's true runtime "
                         "(T_run + lambda (T_req - T_run)), which nobody knows when a job is "
                         "submitted: an oracle. Add --oracle to run it as a what-if")
    stage_bytes, bandwidth = parse_size(args.stage_bytes), parse_rate(args.bandwidth)
    trace = _load(args)
    walltime = walltime_for(trace, args.estimate)
    advice = advise(trace, args.job, stage_bytes, bandwidth,
                    walltime, policy=args.policy, margin=args.margin, depth=args.depth,
                    min_confidence=args.min_confidence, estimate=args.estimate, oracle=oracle)
    print(advice.render())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="surge predict",
        description="Walltime and node-allocation prediction from batch history, and "
                    "pre-staging advice (see docs/predictor.md).")
    sub = parser.add_subparsers(dest="command", required=True)

    evaluate = sub.add_parser("evaluate", help="evaluate walltime models on a trace, time-ordered")
    _add_trace_arguments(evaluate, outputs=True)
    evaluate.add_argument("--folds", type=int, default=4, help="rolling folds (default 4)")
    evaluate.add_argument("--models", default="", help="comma-separated subset of models")
    evaluate.add_argument("--automl-budget", type=float, default=30.0,
                          help="FLAML seconds per fold for the global model (0 = no AutoML)")
    evaluate.add_argument("--automl-users", type=int, default=10,
                          help="users with their own AutoML model per fold (0 = none)")
    evaluate.add_argument("--user-budget", type=float, default=3.0,
                          help="FLAML seconds per user model")
    evaluate.add_argument("--seeds", type=int, default=1,
                          help="rerun the models whose fits are random (gboost, cautious, "
                               "AutoML) with this many seeds and show the per-user gain's "
                               "spread (default 1)")
    evaluate.set_defaults(func=cmd_evaluate)

    simulate = sub.add_parser("simulate", help="scheduler simulation: how early node lists are known")
    _add_trace_arguments(simulate, outputs=True)
    simulate.add_argument("--policies", default="fcfs,easy,conservative",
                          help="comma-separated: fcfs, easy, conservative")
    simulate.add_argument("--lambdas", default="1,0.5,0.25,0.1,0.05,0",
                          help="refined walltime T~ = T_run + lambda (T_req - T_run)")
    simulate.add_argument("--learned", default="gboost,cautious",
                          help="also simulate with these models' time-ordered predictions, "
                               "comma-separated (last-2, alea, linear, gboost, cautious, "
                               "automl; none = skip)")
    simulate.add_argument("--depth", type=int, default=100,
                          help="queued jobs planned per pass (like Slurm's bf_max_job_test)")
    simulate.set_defaults(func=cmd_simulate)

    advise = sub.add_parser("advise", help="should a job's input be pre-staged, and when?")
    _add_trace_arguments(advise)
    advise.add_argument("--job", type=int, required=True, help="job ID in the trace")
    advise.add_argument("--stage-bytes", required=True,
                        help="bytes to stage, by the size rule of docs/units.md: 200G = 200GiB "
                             "= 200 x 2^30, 200GB = 200 x 10^9, a bare number is bytes")
    advise.add_argument("--bandwidth", required=True,
                        help="staging bandwidth, a size per second: 2GB/s = 2 x 10^9 bytes/s, "
                             "2G/s = 2GiB/s = 2 x 2^30 bytes/s")
    advise.add_argument("--policy", default="conservative", choices=["fcfs", "easy", "conservative"])
    advise.add_argument("--estimate", default="cautious",
                        help="scheduler walltimes: a model name (default cautious: the upper-"
                             "quantile model, under-estimates <= 5%%), request, or lambda=X")
    advise.add_argument("--oracle", action="store_true",
                        help="allow --estimate lambda=X with X < 1, which uses each job's true "
                             "runtime (a what-if, not something a scheduler can know)")
    advise.add_argument("--margin", type=float, default=0.1,
                        help="safety margin as a fraction of the staging time (default 0.1)")
    advise.add_argument("--min-confidence", type=float, default=0.5,
                        help="advise pre-staging only at this confidence or above (default 0.5)")
    advise.add_argument("--depth", type=int, default=100, help="planning depth")
    advise.set_defaults(func=cmd_advise)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for model fitting (default 1: on a shared machine "
                             "OpenMP spin-waiting made 2-thread fits 4x slower than 1 thread)")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    try:
        with threadpool_limits(args.threads):
            return args.func(args)
    except (TraceFormatError, FileNotFoundError, ValueError) as error:
        print(f"surge predict: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
