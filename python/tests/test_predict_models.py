"""Walltime models and their time-ordered evaluation (surge.predict.features/models/evaluate)."""

import numpy as np
import pandas as pd
import pytest

from surge.predict.evaluate import metrics_table, prepare, rolling_evaluate
from surge.predict.features import history_features
from surge.predict.models import AleaPercentage, AutoML, AutoMLPerUser, Batch, Cautious, LastSame, \
    LastTwo, LinearModel, SameJobChoice, UserRequest, GradientBoosting, enforced_limit_grace
from surge.predict.shared_data import swf_trace
from surge.predict.traces import Machine, Trace, read_trace


@pytest.fixture(scope="module")
def wagap():
    return read_trace(swf_trace("alea_wagap-2013.swf.gz")).head(3000)


def test_history_uses_only_jobs_that_ended_before_submission():
    jobs = pd.DataFrame({
        "user": ["a", "a", "a", "b", "a"],
        "submit": [0.0, 10.0, 20.0, 25.0, 500.0],
        "wait": [0.0, 0.0, 0.0, 0.0, 0.0],
        "run": [5.0, 400.0, 30.0, 1.0, 7.0],
        "req_time": [10.0, 800.0, 60.0, 2.0, 10.0],
    })
    hist = history_features(jobs)
    # Job 2 (t=20): only job 0 (ended t=5) is known; job 1 ends at t=410.
    assert hist.loc[2, "hist_count"] == 1 and hist.loc[2, "last1"] == 5.0
    assert np.isnan(hist.loc[2, "last2"])
    # Job 4 (t=500): jobs 0, 2 (end 50) and 1 (end 410) are known; last = job 1, then job 2.
    assert hist.loc[4, "hist_count"] == 3
    assert (hist.loc[4, "last1"], hist.loc[4, "last2"]) == (400.0, 30.0)
    assert hist.loc[4, "ratio_last5_max"] == pytest.approx(0.5)
    assert hist.loc[3, "hist_count"] == 0           # user b has no history


def test_heuristics_on_a_real_slice(wagap):
    batch = prepare(wagap)
    request = UserRequest().predict(batch)
    last2 = LastTwo().predict(batch)
    alea = AleaPercentage().predict(batch)
    np.testing.assert_array_equal(request, wagap.jobs["req_time"])
    assert (last2 <= request).all() and (alea <= request).all() and (last2 >= 1).all()
    hist = batch.history
    both = (hist["hist_count"] >= 2).to_numpy()
    expected = np.minimum((hist["last1"] + hist["last2"]) / 2, wagap.jobs["req_time"])[both]
    np.testing.assert_allclose(last2[both], expected.clip(lower=1))
    # Without history the heuristics fall back to the request.
    none = (hist["hist_count"] == 0).to_numpy()
    np.testing.assert_array_equal(last2[none], request[none])


def test_rolling_evaluation_never_trains_on_the_future(wagap):
    seen = []

    class Spy(UserRequest):
        name = "spy"

        def fit(self, train):
            seen.append((train.history["end"].max(), train.jobs.index.max()))
            return self

    evaluation = rolling_evaluate(wagap, [UserRequest(), Spy()], folds=3)
    bounds = np.linspace(0, len(wagap.jobs), 5).astype(int)
    submit = wagap.jobs["submit"].to_numpy()
    for fold, (latest_end, last_index) in enumerate(seen, start=1):
        assert latest_end <= submit[bounds[fold]]
        assert last_index < bounds[fold]
    assert len(evaluation.jobs) == len(wagap.jobs) - bounds[1]


def test_learned_models_beat_the_request_time_ordered(wagap):
    models = [UserRequest(), LastTwo(), LinearModel(), GradientBoosting()]
    table = rolling_evaluate(wagap, models, folds=2).metrics()
    assert table.loc["request", "gain_vs_request"] == pytest.approx(1.0)
    for name in ("linear", "gboost"):
        assert table.loc[name, "median_AE_min"] < table.loc["request", "median_AE_min"] / 2
    assert 0 <= table.loc["gboost", "under_rate"] <= 1
    # A walltime request is an upper bound: users under-estimate only when the job overran.
    overrun = (wagap.jobs["run"] > wagap.jobs["req_time"]).mean()
    assert table.loc["request", "under_rate"] <= overrun + 1e-9


def test_automl_with_a_small_budget(wagap):
    base = AutoML(budget=3)
    per_user = AutoMLPerUser(base, users=2, user_budget=1)
    table = rolling_evaluate(wagap.head(1500), [UserRequest(), base, per_user], folds=1).metrics()
    assert len(per_user.user_models) + per_user.failed == 2
    assert table.loc["automl", "median_AE_min"] < table.loc["request", "median_AE_min"]


def test_metrics_by_hand():
    jobs = pd.DataFrame({"run": [600.0, 1200.0, 60.0], "user": ["a", "a", "b"]})
    predictions = pd.DataFrame({"request": [3600.0, 3600.0, 120.0], "m": [300.0, 1200.0, 600.0]})
    table = metrics_table(jobs, predictions)
    assert table.loc["m", "median_AE_min"] == pytest.approx(5.0)
    assert table.loc["m", "MAE_min"] == pytest.approx((5 + 0 + 9) / 3)
    assert table.loc["m", "under_rate"] == pytest.approx(1 / 3)
    assert table.loc["m", "within_10min"] == pytest.approx(1.0)
    assert table.loc["request", "median_AE_min"] == pytest.approx(40.0)
    assert table.loc["m", "gain_vs_request"] == pytest.approx(8.0)
    assert table.loc["m", "users"] == 0          # nobody has 5 jobs here


SCATTER = 0.5


def _synthetic_trace(jobs=3000, users=30, seed=1):
    """Users with a typical runtime each, lognormal scatter around it, fixed requests; 2% of
    the jobs hit their limit and are killed 30 s after it. Returns the trace and each job's
    true 95% runtime quantile (what an ideal cautious model would predict)."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, jobs)
    typical = np.exp(rng.uniform(np.log(300), np.log(20000), users))
    run = typical[user] * np.exp(rng.normal(0, SCATTER, jobs))
    request = np.ceil(typical * 4 / 3600)[user] * 3600
    killed = rng.random(jobs) < 0.02
    run = np.where(killed | (run > request), request + 30, run).round()
    frame = pd.DataFrame({"job_id": np.arange(jobs), "submit": np.arange(jobs) * 600.0,
                          "wait": 0.0, "run": run, "req_time": request, "procs": 1, "nodes": 1,
                          "ppn": 1, "user": user.astype(str), "group": 0, "queue": "q",
                          "status": 1})
    ideal = np.minimum(typical[user] * np.exp(1.645 * SCATTER), request + 30)
    return Trace(frame, Machine(np.ones(64, dtype=np.int64), [f"n{i}" for i in range(64)]),
                 "synthetic", "swf"), ideal


def test_cautious_model_under_estimates_at_most_5_percent_of_later_jobs():
    trace, ideal = _synthetic_trace()
    cautious = Cautious()
    evaluation = rolling_evaluate(trace, [UserRequest(), GradientBoosting(), cautious], folds=2)
    table = evaluation.metrics()
    # The median model under-estimates about half of the jobs, the cautious one <= 5%...
    assert table.loc["gboost", "under_rate"] > 0.3
    assert table.loc["cautious", "under_rate"] <= 0.05
    # ...and is nearly as tight as the true 95% quantile (which knows each user's typical
    # runtime and the scatter): within 1.3x of its MAE, and far tighter than the request.
    # (Even the true quantile has 2.8x the MAE of the true median at this scatter.)
    tested = ideal[len(trace.jobs) - len(evaluation.jobs):]
    ideal_mae = np.abs(tested - evaluation.jobs["run"].to_numpy()).mean() / 60
    assert table.loc["cautious", "MAE_min"] <= 1.3 * ideal_mae
    assert table.loc["cautious", "MAE_min"] < 0.5 * table.loc["request", "MAE_min"]
    # The 30 s the batch system allowed past the request is learned, and no prediction
    # goes beyond request + grace.
    assert cautious.grace == 30
    jobs = evaluation.jobs
    assert (evaluation.predictions["cautious"] <= jobs["req_time"] + 30).all()


def test_enforced_limit_grace():
    jobs = pd.DataFrame({"run": [100.0] * 95 + [3660.0] * 4 + [9000.0],
                         "req_time": [3600.0] * 100, "user": "u"})
    batch = Batch(jobs, jobs, jobs)
    # 1% of the jobs may run past request + grace: the 99th percentile of run - request.
    assert enforced_limit_grace(batch) == pytest.approx(60.0 + 0.01 * (5400 - 60), rel=0.05)
    assert enforced_limit_grace(Batch(jobs.assign(run=10.0), jobs, jobs)) == 0.0


def test_per_user_figures_name_their_users_and_spread_over_seeds(wagap):
    from surge.predict.evaluate import rerun_spread

    def make(seed):
        return [UserRequest(), LastTwo(), GradientBoosting(seed)]

    first, table, per_seed = rerun_spread(wagap.head(1500), make, seeds=3, folds=1)
    counts = first.jobs.groupby("user").size()
    assert (table["users"] == (counts >= 5).sum()).all()
    assert table.loc["last-2", "seeds"] == 1 and table.loc["last-2", "user_gain_sd"] == 0
    assert table.loc["gboost", "seeds"] == 3
    gains = per_seed.loc[per_seed["model"] == "gboost", "user_gain_vs_request"]
    assert table.loc["gboost", "user_gain_min"] == gains.min()
    assert table.loc["gboost", "user_gain_max"] == gains.max()
    assert table.loc["gboost", "user_gain_min"] <= table.loc["gboost", "user_gain_vs_request"] \
        <= table.loc["gboost", "user_gain_max"]


def test_same_job_history_uses_only_ended_runs_of_the_same_request_and_size():
    jobs = pd.DataFrame({
        "user": ["a", "a", "a", "a", "a", "b"],
        "submit": [0.0, 10.0, 20.0, 1000.0, 1010.0, 1020.0],
        "wait": 0.0,
        "run": [50.0, 70.0, 900.0, 60.0, 5.0, 8.0],
        "req_time": [100.0, 100.0, 1000.0, 100.0, 100.0, 100.0],
        "nodes": [1, 1, 1, 1, 2, 1],
    })
    hist = history_features(jobs)
    # Job 1 (t=10): job 0 is still running (ends at t=50): no same-job history yet.
    assert hist.loc[1, "same_count"] == 0 and np.isnan(hist.loc[1, "same_last1"])
    # Job 3 (t=1000): jobs 0 and 1 are the same job (request 100 s, 1 node); job 2 is not.
    assert hist.loc[3, "same_count"] == 2
    assert (hist.loc[3, "same_last1"], hist.loc[3, "same_last2"]) == (70.0, 50.0)
    assert hist.loc[3, "same_median3"] == 60.0
    # Job 4 asks for 2 nodes: no same job, but the same request (job 3 ended at 1060 > 1010).
    assert hist.loc[4, "same_count"] == 0 and hist.loc[4, "samereq_last1"] == 70.0
    # User b has no history of their own, whatever user a ran.
    assert hist.loc[5, "same_count"] == 0 and np.isnan(hist.loc[5, "samereq_last1"])
    batch = Batch(jobs, hist, jobs)
    # last-same: same job, else same request, else last job, else the request.
    np.testing.assert_array_equal(LastSame().predict(batch), [100, 100, 1000, 70, 70, 100])


def _limit_and_repeating_users(jobs_per_user: int = 40) -> Trace:
    """User "limit" resubmits a job that runs into its 1,000 s limit twice, then ends after
    300 s, and so on; user "rep" one that runs 500 s every time; user "new" only appears
    late, three times. Jobs are an hour apart: every earlier run has ended by the next
    submission."""
    rows = []
    for i in range(jobs_per_user):
        rows.append(("limit", 2 * i * 3600.0, 300.0 if i % 3 == 2 else 1000.0, 1000.0))
        rows.append(("rep", (2 * i + 1) * 3600.0, 500.0, 900.0))
    for i in range(3):
        rows.append(("new", (2 * jobs_per_user + i) * 3600.0, 200.0, 1000.0))
    jobs = pd.DataFrame(rows, columns=["user", "submit", "run", "req_time"]).assign(
        job_id=np.arange(len(rows)), wait=0.0, procs=1, nodes=1, ppn=1, group=0, queue="q",
        status=1)
    return Trace(jobs, Machine(np.ones(4, dtype=np.int64), [f"n{i}" for i in range(4)]),
                 "synthetic", "swf")


def test_same_choice_picks_per_user_on_the_training_window():
    batch = prepare(_limit_and_repeating_users())
    train, test = batch.subset(slice(0, 60)), batch.subset(slice(60, None))
    model = SameJobChoice().fit(train)
    candidates = list(SameJobChoice.CANDIDATES)
    # Two runs into the limit, one short one: the longer of the last two (and the median of
    # the last three, which ties with it and comes later) is wrong on a third of the jobs,
    # the last run on two thirds.
    assert model.choice["limit"] == candidates.index("same_max2")
    # Repeating runs: all candidates are exact; the tie goes to the last run.
    assert model.choice["rep"] == candidates.index("same_last1")
    # "new" has no training jobs: it gets the window's choice (lowest per-user median AE).
    assert "new" not in model.choice and model.default == candidates.index("same_max2")
    predicted = model.predict(test)
    run = test.jobs["run"].to_numpy()
    limit, rep, new = ((test.jobs["user"] == u).to_numpy() for u in ("limit", "rep", "new"))
    np.testing.assert_array_equal(predicted[limit], 1000.0)
    np.testing.assert_array_equal(predicted[rep], 500.0)
    np.testing.assert_array_equal(predicted[new], SameJobChoice.candidates(test)[model.default][new])
    assert np.mean(predicted[limit] != run[limit]) < 0.4
    assert np.mean(LastSame().predict(test)[limit] != run[limit]) > 0.6


def test_same_choice_sees_no_test_job():
    trace = _limit_and_repeating_users()
    choices = []

    class Recorder(SameJobChoice):
        def fit(self, train):
            super().fit(train)
            choices.append((self.default, dict(self.choice), train.jobs["job_id"].max()))
            return self

    bounds = np.linspace(0, len(trace.jobs), 3).astype(int)
    first = rolling_evaluate(trace, [Recorder()], folds=1).predictions["same-choice"]
    # The test jobs of user "limit" now all end after 300 s: the choice, made before any of
    # them ended, must not change (predictions from history that ended later may).
    changed = trace.jobs.copy()
    changed.loc[bounds[1]:, "run"] = np.where(changed.loc[bounds[1]:, "user"] == "limit", 300.0,
                                              changed.loc[bounds[1]:, "run"])
    second = rolling_evaluate(Trace(changed, trace.machine, "synthetic", "swf"), [Recorder()],
                              folds=1).predictions["same-choice"]
    assert choices[0] == choices[1]
    assert choices[0][2] < bounds[1]
    assert first.iloc[0] == second.iloc[0]


def test_cautious_calibration_sees_no_test_job():
    trace, _ = _synthetic_trace(jobs=2000)
    calibrations = []

    class Recorder(Cautious):
        def fit(self, train):
            super().fit(train)
            calibrations.append((self.grace, self.rule, train.jobs["job_id"].max()))
            return self

    bounds = np.linspace(0, len(trace.jobs), 3).astype(int)
    first = rolling_evaluate(trace, [Recorder()], folds=1).predictions["cautious"]
    # Make every test job (the second half) run ten times longer: the calibration, fitted
    # before any of them ended, must not change, and neither may the first test job's bound.
    longer = trace.jobs.copy()
    longer.loc[bounds[1]:, "run"] *= 10
    second = rolling_evaluate(Trace(longer, trace.machine, "synthetic", "swf"), [Recorder()],
                              folds=1).predictions["cautious"]
    assert calibrations[0] == calibrations[1]
    assert calibrations[0][2] < bounds[1]          # trained on jobs before the test chunk only
    assert first.iloc[0] == second.iloc[0]


def test_cautious_under_estimates_near_its_target_on_a_synthetic_trace():
    trace, _ = _synthetic_trace(jobs=6000, seed=2)
    table = rolling_evaluate(trace, [UserRequest(), Cautious()], folds=2).metrics()
    # Calibrated to leave target - safety = 4% under-estimated: near it, not far below
    # (which would mean a looser bound than needed) and not above the 5% target. With short
    # windows it scatters more: 3 folds of 1,000 jobs on this trace gave 5.6%.
    assert 0.02 <= table.loc["cautious", "under_rate"] <= 0.05
