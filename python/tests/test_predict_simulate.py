"""Scheduler simulation and node-list lead time (surge.predict.simulate / study)."""

import numpy as np
import pandas as pd
import pytest

from surge.predict.shared_data import swf_trace
from surge.predict.simulate import lead_class, refined_walltime, simulate
from surge.predict.study import compare_to_real, lead_time_study, replay_node_choice
from surge.predict.traces import Machine, Trace, read_trace


def _tiny(rows, nodes=4, cores=1):
    jobs = pd.DataFrame(rows, columns=["submit", "run", "req_time", "nodes", "ppn"])
    jobs = jobs.assign(job_id=np.arange(len(jobs)), wait=0.0, procs=jobs["nodes"] * jobs["ppn"],
                       user="u", group=0, queue="q", status=1)
    machine = Machine(np.full(nodes, cores), [f"n{i}" for i in range(nodes)])
    return Trace(jobs, machine, "tiny", "swf")


def _overallocated(trace, result) -> bool:
    """True if some node ever has more cores in use than it owns."""
    start = result.jobs["start"].to_numpy()
    end = start + trace.jobs["run"].to_numpy()
    rows = []
    for job, nodes in enumerate(result.nodes):
        c = trace.jobs["ppn"].iloc[job]
        rows += [(n, start[job], c) for n in nodes] + [(n, end[job], -c) for n in nodes]
    events = pd.DataFrame(rows, columns=["node", "t", "delta"]).sort_values(["node", "t", "delta"])
    used = events.groupby("node")["delta"].cumsum()
    capacity = trace.machine.cores[events["node"].to_numpy()]
    return bool((used.to_numpy() > capacity).any())


def test_hand_made_schedule_and_lead_times():
    # A fills the machine until t=100; B (2 nodes, asks 200 s) and C (2 nodes) queue behind it.
    trace = _tiny([(0, 100, 100, 4, 1), (10, 50, 200, 2, 1), (20, 30, 30, 2, 1)])
    result = simulate(trace, refined_walltime(trace.jobs, 1.0), "conservative")
    assert list(result.jobs["start"]) == [0, 100, 100]
    assert [list(n) for n in result.nodes] == [[0, 1, 2, 3], [0, 1], [2, 3]]
    # Both node lists were predicted at submission and never changed.
    assert list(result.jobs["lead"]) == [0, 90, 80]
    assert list(result.jobs["lead_class"]) == ["instant", "1 s - 10 min", "1 s - 10 min"]


def test_early_end_moves_the_plan_and_resets_the_lead():
    # A asks 1000 s but runs 100: B's reservation moves from t=1000 to t=100.
    trace = _tiny([(0, 100, 1000, 4, 1), (10, 50, 50, 4, 1)])
    user = simulate(trace, refined_walltime(trace.jobs, 1.0), "conservative")
    assert user.jobs["start"].iloc[1] == 100 and user.rebuilds >= 1
    exact = simulate(trace, refined_walltime(trace.jobs, 0.0), "conservative")
    assert exact.jobs["start"].iloc[1] == 100 and exact.rebuilds == 0
    assert exact.jobs["lead"].iloc[1] == 90       # known from submission when estimates are exact


def test_easy_backfills_past_a_non_head_reservation():
    # At t=5 the queue is H (nodes 0-2 at t=100), X (all 4 nodes, planned at t=110) and
    # Y (1 node for 200 s). Y fits now on node 3 and does not touch H's nodes, so EASY starts
    # it - which delays X. Conservative keeps Y waiting until X is done.
    trace = _tiny([(0, 100, 100, 3, 1),     # A: nodes 0-2 until 100
                   (1, 10, 10, 3, 1),       # H: 3 nodes at 100
                   (2, 500, 500, 4, 1),     # X: whole machine after H
                   (5, 200, 200, 1, 1)],    # Y: 1 node, would overlap X
                  nodes=4)
    walltime = refined_walltime(trace.jobs, 0.0)
    conservative = simulate(trace, walltime, "conservative")
    easy = simulate(trace, walltime, "easy")
    assert conservative.jobs["start"].iloc[3] >= conservative.jobs["start"].iloc[2] + 500
    assert easy.jobs["start"].iloc[3] == 5
    assert easy.jobs["start"].iloc[2] > conservative.jobs["start"].iloc[2]


@pytest.fixture(scope="module")
def theta():
    return read_trace(swf_trace("theta_argonne.swf.gz")).head(700)


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_real_slice_invariants(theta, policy):
    result = simulate(theta, refined_walltime(theta.jobs, 0.5), policy)
    starts = result.jobs["start"].to_numpy()
    assert np.isfinite(starts).all()
    assert (starts >= theta.jobs["submit"].to_numpy()).all()
    assert not _overallocated(theta, result)
    assert all(len(n) == k for n, k in zip(result.nodes, theta.jobs["nodes"]))
    waited = result.jobs["wait"] > 0
    assert (result.jobs.loc[waited, "lead"] <= result.jobs.loc[waited, "wait"] + 1e-9).all()
    if policy == "fcfs":
        assert (np.diff(starts) >= 0).all()


def test_exact_estimates_make_node_lists_known_at_submission(theta):
    result = simulate(theta, refined_walltime(theta.jobs, 0.0), "conservative", depth=10**6)
    assert result.rebuilds == 0
    waited = result.jobs["wait"] > 0
    assert waited.sum() > 50
    np.testing.assert_allclose(result.jobs.loc[waited, "lead"], result.jobs.loc[waited, "wait"])


def test_underestimates_fall_back_to_the_request(theta):
    estimate = np.maximum(theta.jobs["run"].to_numpy() * 0.3, 1.0)
    result = simulate(theta, estimate, "conservative")
    assert not _overallocated(theta, result)
    assert result.rebuilds > 0


def test_study_table_and_real_node_lists():
    wagap = read_trace(swf_trace("alea_wagap-2013.swf.gz")).head(1200)
    table, runs = lead_time_study(wagap, ["conservative", "fcfs"], [1.0, 0.0])
    assert table.shape[0] == 4
    np.testing.assert_allclose(table[["instant", "< 1 s", "1 s - 10 min", "> 10 min"]].sum(axis=1), 1.0)
    check = compare_to_real(wagap, runs[0])
    assert 0 <= check["same node list"] <= 1 and check["jobs"] == 1200
    replay = replay_node_choice(wagap)
    assert replay["real list feasible in replay"] > 0.99
    assert replay["best-fit picks the real list"] > replay["a random feasible pick is the real list"]


def test_lead_classes():
    classes = lead_class(np.array([0, 5, 5, 900, 900]), np.array([0, 0.5, 1, 599, 600]))
    assert list(classes) == ["instant", "< 1 s", "1 s - 10 min", "1 s - 10 min", "> 10 min"]


@pytest.mark.parametrize("policy", ["conservative", "easy"])
def test_job_outliving_its_estimate_at_an_event_keeps_its_nodes(policy):
    # A is estimated at 50 s but runs 100 s; B arrives exactly when A's estimate runs out and
    # needs both nodes. B must wait for A's real end, not start on A's node at t=50.
    trace = _tiny([(0, 100, 200, 1, 1), (50, 10, 10, 2, 1)], nodes=2)
    result = simulate(trace, np.array([50.0, 10.0]), policy)
    assert result.jobs["start"].iloc[1] >= 100
    assert not _overallocated(trace, result)
