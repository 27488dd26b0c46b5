"""Walltime and node-allocation prediction for Surge (``surge predict``).

Learns job walltimes from batch history (:mod:`.traces`, :mod:`.features`, :mod:`.models`,
evaluated time-ordered in :mod:`.evaluate`), simulates the batch scheduler to measure how early
each job's node list is known (:mod:`.simulate`), and advises whether a job's input can be
staged onto its nodes before it starts (:mod:`.advise`). The command line is :mod:`.cli`.
"""

import sys

# What the predictor imports beyond the standard library: the 'predict' extra.
_EXTRA_MODULES = {"numpy", "pandas", "sklearn", "threadpoolctl", "flaml", "matplotlib"}


def main(argv: list[str] | None = None) -> int:
    """The ``surge-predict`` command: :func:`.cli.main`, or a one-line error naming the extra to
    install when the base package was installed without it."""
    try:
        from .cli import main as cli_main

        return cli_main(argv)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in _EXTRA_MODULES:
            raise
        print(f"surge predict: error: {error.name} is not installed (pip install 'surge[predict]')",
              file=sys.stderr)
        return 2
