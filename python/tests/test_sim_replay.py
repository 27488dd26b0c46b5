"""surge-sim end to end: a converted Darshan log replayed on the example systems, plots."""

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from surge import sim_plots
from surge.darshan_trace import convert
from test_darshan_trace import shared_log

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "sim"


def sim_binary() -> str:
    path = Path(os.environ.get("SURGE_SIM_BIN", REPO / "target" / "release" / "surge-sim"))
    if not path.is_file():
        pytest.fail(f"{path} not built: run `cargo build --release -p surge-sim` (or set SURGE_SIM_BIN)")
    return str(path)


def run_sim(*args, check=True):
    return subprocess.run([sim_binary(), *map(str, args)], capture_output=True, text=True, check=check, timeout=300)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Replays the mpi-io-test log (weakly scaled to 128 ranks) on two systems, all placements."""
    root = tmp_path_factory.mktemp("sweep")
    trace = root / "mpi-io-test.json"
    trace.write_text(json.dumps(convert(shared_log("mpi-io-test-32ranks-dxt.darshan"))))
    workload = root / "mpi.toml"
    workload.write_text(
        f"""ranks_per_node = 6
[[job]]
name = "mpi-io-test"
trace = "{trace.name}"
transforms = [{{ weak_scale = 4 }}, {{ coalesce = "64 MiB" }}]
"""
    )
    for system in ["summit-fat-tree", "edison-dragonfly"]:
        run_sim("run", EXAMPLES / f"{system}.toml", workload, "--placement", "all", "--out", root / "runs" / system / "mpi-io-test")
    return root / "runs"


def test_replay_produces_consistent_outputs(sweep):
    df = sim_plots.load_sweep(str(sweep))
    assert len(df) == 6
    assert set(df["ranks"]) == {128}
    local = df[df["placement"] == "node_local"]
    remote = df[df["placement"] != "node_local"]
    assert (local["avg_hops"] == 0).all() and (remote["avg_hops"] > 0).all()
    for d in df["dir"]:
        ranks = pd.read_csv(Path(d) / "ranks.csv")
        assert len(ranks["rank"].unique()) == 128
        assert (ranks["end"] >= ranks["start"]).all()
        # The log's 2 GiB written + 2 GiB read, four copies.
        assert ranks["bytes"].sum() == pytest.approx(4 * (2 * 2**31 + 2560), rel=1e-6)
        util = pd.read_csv(Path(d) / "utilisation.csv")
        assert (util["max"] <= 1.0 + 1e-6).all(), "no resource is used beyond its capacity"


def test_plots_are_written(sweep, tmp_path):
    made = sim_plots.plot_all(str(sweep), str(tmp_path), "png")
    assert {Path(m).name for m in made} >= {"hops.png", "phase_lengths.png", "rank_phases_mpi-io-test.png"}
    assert all(Path(m).stat().st_size > 10_000 for m in made)


def test_validate_reads_the_shipped_examples_and_reports_every_observation(tmp_path):
    out = run_sim("validate", "--examples", EXAMPLES, check=False)
    assert str(EXAMPLES) in out.stdout
    for obs in range(1, 8):
        assert f"obs{obs}-" in out.stdout
    # A failing case is shown as such, with its reason, and makes the command fail.
    failing = [line.split()[0] for line in out.stdout.splitlines() if line.rstrip().endswith("FAILING")]
    assert (out.returncode != 0) == bool(failing)
    for name in failing:
        assert f"{name}: seed:" in out.stdout
    assert "Table V arithmetic" in out.stdout and "not a validation" in out.stdout
    res = run_sim("validate", "--examples", tmp_path, check=False)
    assert res.returncode != 0 and "is missing" in res.stderr


def test_bad_inputs_exit_nonzero_with_a_message(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[network]\ninjection_bw = 'fast'\n")
    res = run_sim("run", bad, EXAMPLES / "gtc-like.toml", check=False)
    assert res.returncode != 0 and "invalid system file" in res.stderr
    res = run_sim("validate", "--case", "no-such-case", check=False)
    assert res.returncode != 0 and "unknown case" in res.stderr
