"""The plotting modules (surge.sim_plots, surge.predict.plots) are libraries: importing them
leaves the program's matplotlib backend alone, and they still write PNG files without one.

Run in a fresh interpreter: in this one another test may have imported the modules already,
and an import's side effect would not show a second time."""

import subprocess
import sys
import textwrap

PNG = b"\x89PNG\r\n\x1a\n"

SCRIPT = textwrap.dedent('''
    import os, sys
    import matplotlib
    matplotlib.use("svg")                      # the program's choice, made before the import
    import numpy as np
    import pandas as pd
    import surge.sim_plots as sim_plots
    from surge.predict import plots
    print("backend", matplotlib.get_backend())
    print("pyplot", "matplotlib.pyplot" in sys.modules)

    out = sys.argv[1]
    rng = np.random.default_rng(1)
    errors = pd.DataFrame({"request": rng.exponential(60, 50), "gboost": rng.exponential(20, 50)})
    plots.error_cdf(errors, errors, "errors", os.path.join(out, "cdf.png"))
    index = pd.MultiIndex.from_tuples([("fcfs", "lambda=1"), ("fcfs", "lambda=0"),
                                       ("easy", "lambda=1")])
    shares = pd.DataFrame(0.25, index=index, columns=["instant", "< 1 s", "1 s - 10 min", "> 10 min"])
    plots.lead_time_bars(shares, "lead", os.path.join(out, "lead.png"))

    run = os.path.join(out, "run")
    os.makedirs(run)
    pd.DataFrame({"job": 0, "phase": 0, "rank": range(8), "start": 0.0,
                  "end": np.arange(8) + 1.0}).to_csv(os.path.join(run, "ranks.csv"), index=False)
    rows = [{"system": "s", "workload": "w", "placement": p, "job": "j", "avg_hops": h,
             "io_time": h + 1.0, "dir": run} for p, h in zip(sim_plots.PLACEMENTS, (0.0, 1.5, 3.0))]
    frame = pd.DataFrame(rows)
    sim_plots.plot_hops(frame, os.path.join(out, "hops.png"))
    sim_plots.plot_phase_lengths(frame, os.path.join(out, "phases.png"))
    sim_plots.plot_rank_phases(frame, "w", os.path.join(out, "ranks.png"))
    print("backend", matplotlib.get_backend())
''')


def test_importing_the_plot_modules_keeps_the_backend_and_they_write_pngs(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["backend svg", "pyplot False", "backend svg"]
    for name in ("cdf.png", "lead.png", "hops.png", "phases.png", "ranks.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == PNG and len(data) > 5_000, name
