"""The surge-predict command line (evaluate, simulate, advise) on small slices of real traces."""

import gzip

import numpy as np
import pytest

import pandas as pd

from surge.predict.advise import _duration, advise
from surge.predict.cli import main
from surge.predict.shared_data import swf_trace
from surge.predict.simulate import refined_walltime, simulate
from surge.predict.traces import Machine, Trace, read_trace
from surge.units import parse_rate, parse_size


def test_evaluate_prints_one_row_per_model_and_writes_the_plot(tmp_path, capsys):
    code = main(["evaluate", str(swf_trace("alea_wagap-2013.swf.gz")), "--jobs", "1500",
                 "--folds", "2", "--automl-budget", "0", "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    lines = [ln.split()[0] for ln in out.splitlines()[3:]]
    assert lines == ["request", "last-2", "last-same", "same-choice", "alea", "linear", "gboost",
                     "cautious"]
    assert (tmp_path / "alea_wagap-2013-error-cdf.png").stat().st_size > 10_000
    assert "under_rate" in out and "gain_vs_request" in out


def test_simulate_writes_table_plot_and_real_comparison(tmp_path, capsys):
    code = main(["simulate", str(swf_trace("alea_wagap-2013.swf.gz")), "--jobs", "600",
                 "--policies", "conservative,fcfs", "--lambdas", "1,0", "--learned", "last-2",
                 "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "lambda=0" in out and "last-2" in out and "same node list" in out
    assert "best-fit picks the real list" in out
    assert (tmp_path / "alea_wagap-2013-leadtime.png").stat().st_size > 10_000
    assert (tmp_path / "alea_wagap-2013-vs-real.csv").exists()


def test_simulate_compares_real_waits_without_node_lists(tmp_path, capsys):
    code = main(["simulate", str(swf_trace("theta_argonne.swf.gz")), "--jobs", "300",
                 "--policies", "conservative", "--lambdas", "1", "--learned", "none",
                 "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "simulated vs real schedule (theta_argonne records the real waits)" in out
    assert "real mean wait [min]" in out and "same node list" not in out
    assert (tmp_path / "theta_argonne-vs-real.csv").exists()


def test_bad_trace_line_is_reported_with_its_number(tmp_path, capsys):
    with gzip.open(swf_trace("RICC-2010-2.swf.gz"), "rt") as handle:
        lines = [next(handle) for _ in range(40)]
    lines[29] = lines[29].rstrip("\n") + " oops extra\n"
    lines[32] = "1 2 3\n"
    bad = tmp_path / "bad.swf"
    bad.write_text("".join(lines))
    assert main(["evaluate", str(bad), "--out", str(tmp_path)]) == 2
    assert "bad.swf:33: expected at least 18 fields, found 3" in capsys.readouterr().err


@pytest.fixture(scope="module")
def theta():
    return read_trace(swf_trace("theta_argonne.swf.gz")).head(900)


def test_advice_follows_the_predicted_wait(theta):
    walltime = refined_walltime(theta.jobs, 1.0)
    result = simulate(theta, walltime, "conservative")
    # A job the simulation kept waiting for hours, and one that started at once.
    waited = int(np.flatnonzero(result.jobs["wait"].to_numpy() > 4 * 3600)[-1])
    instant = int(np.flatnonzero(result.jobs["wait"].to_numpy() == 0)[-1])
    small = advise(theta, int(theta.jobs["job_id"].iloc[waited]), parse_size("100GiB"),
                   parse_rate("1GB/s"), walltime, min_confidence=0.0)
    assert small.can_stage and small.advised and small.begin_at < small.predicted_start
    assert small.begin_at >= small.submit
    assert 0.0 <= small.confidence <= 1.0 and small.confidence_jobs > 0
    assert "advice                   PRE-STAGE" in small.render()
    doubtful = advise(theta, int(theta.jobs["job_id"].iloc[waited]), parse_size("100GiB"),
                      parse_rate("1GB/s"), walltime, min_confidence=1.01)
    assert doubtful.can_stage and not doubtful.advised
    assert "rarely known that early" in doubtful.render()
    huge = advise(theta, int(theta.jobs["job_id"].iloc[waited]), parse_size("1PB"),
                  parse_rate("1GB/s"), walltime)
    assert not huge.can_stage and "DO NOT PRE-STAGE" in huge.render()
    # No staging can finish in time: no "confidence 0%", but what is the case.
    assert "confidence               none needed: staging (" in huge.render()
    assert "0%" not in huge.render()
    now = advise(theta, int(theta.jobs["job_id"].iloc[instant]), 1e9, 1e9, walltime)
    assert not now.can_stage
    # Theta records the real waits: the advice shows the job's.
    real = theta.jobs["wait"].iloc[waited]
    assert f"what really happened     started at submit + {_duration(real)} (the trace's wait)" \
        in small.render()


def test_advice_when_no_earlier_job_waited_that_long():
    # One node. A runs 10,000 s from t=0; B (submitted at t=1) has to wait for it. Staging
    # B's input takes 1,000 s: there is time, but the only earlier job (A) never waited, so
    # nothing says how often node lists hold that long.
    jobs = pd.DataFrame({"job_id": [1, 2], "submit": [0.0, 1.0], "wait": [0.0, 9999.0],
                         "run": [10000.0, 50.0], "req_time": [10000.0, 100.0],
                         "procs": [1, 1], "nodes": [1, 1], "ppn": [1, 1], "user": ["a", "b"],
                         "group": [0, 0], "queue": ["q", "q"], "status": [1, 1]})
    trace = Trace(jobs, Machine(np.array([1]), ["n0"]), "two-jobs", "swf")
    advice = advise(trace, 2, 1000.0, 1.0, refined_walltime(jobs, 1.0), estimate="request")
    assert advice.can_stage and not advice.advised and advice.confidence_jobs == 0
    text = advice.render()
    assert "no earlier job waited that long" in text
    assert "confidence               unknown: none of the 1 earlier jobs with a known outcome " \
           "waited 16.7 min + margin or longer" in text
    assert "0%" not in text


def test_oracle_estimates_need_the_flag_and_say_so(capsys):
    trace = str(swf_trace("theta_argonne.swf.gz"))
    base = ["advise", trace, "--jobs", "300", "--job", "639487", "--stage-bytes", "1GB",
            "--bandwidth", "1GB/s", "--estimate", "lambda=0.1"]
    assert main(base) == 2
    assert "true runtime" in capsys.readouterr().err
    assert main(base + ["--oracle"]) == 0
    assert "ORACLE: each job's true runtime" in capsys.readouterr().out
    assert main(base[:-2] + ["--estimate", "request"]) == 0
    assert "ORACLE" not in capsys.readouterr().out


def test_advise_defaults_to_the_cautious_model(capsys):
    trace = str(swf_trace("theta_argonne.swf.gz"))
    assert main(["advise", trace, "--jobs", "400", "--job", "639487", "--stage-bytes", "1GB",
                 "--bandwidth", "1GB/s"]) == 0
    assert "walltimes planned with   cautious\n" in capsys.readouterr().out


def test_advise_command_and_its_errors(capsys):
    trace = str(swf_trace("theta_argonne.swf.gz"))
    assert main(["advise", trace, "--jobs", "300", "--job", "1", "--stage-bytes", "1GB",
                 "--bandwidth", "1GB/s", "--estimate", "request"]) == 2
    assert "job 1 is not in" in capsys.readouterr().err
    assert main(["advise", trace, "--jobs", "300", "--job", "639487", "--stage-bytes", "ten",
                 "--bandwidth", "1GB/s", "--estimate", "request"]) == 2
    assert "cannot read a size from 'ten'" in capsys.readouterr().err


def test_advise_reads_sizes_by_the_one_rule(capsys):
    # docs/units.md: 1G is 2^30 bytes (as in #DW capacity=), 1MB/s is 10^6 bytes/s: staging
    # takes 1073.7 s = 17.9 min (it took 16.7 min when 1G was read as 10^9).
    trace = str(swf_trace("theta_argonne.swf.gz"))
    assert main(["advise", trace, "--jobs", "300", "--job", "639487", "--stage-bytes", "1G",
                 "--bandwidth", "1MB/s", "--estimate", "request"]) == 0
    assert "staging time             17.9 min\n" in capsys.readouterr().out
    # A rate is a size per second; an exponent is not a size.
    assert main(["advise", trace, "--jobs", "300", "--job", "639487", "--stage-bytes", "1G",
                 "--bandwidth", "1GB", "--estimate", "request"]) == 2
    assert "a rate is a size followed by /s" in capsys.readouterr().err
    assert main(["advise", trace, "--jobs", "300", "--job", "639487", "--stage-bytes", "2.5e9",
                 "--bandwidth", "1GB/s", "--estimate", "request"]) == 2
    assert "exponent" in capsys.readouterr().err


def test_advice_with_too_few_comparable_jobs():
    # One node. B and C wait ~2,000 s behind A; L starts at 2,500 s and runs 5,000 s; D,
    # submitted at 3,000 s, waits for L. Staging D's input takes 1,000 s: there is time, and
    # only B and C (already started when D is submitted) waited that long - too few to tell.
    rows = [(0.0, 2000.0), (1.0, 10.0), (2.0, 10.0), (2500.0, 5000.0), (3000.0, 50.0)]
    jobs = pd.DataFrame(rows, columns=["submit", "run"]).assign(
        req_time=lambda f: f["run"], wait=0.0, job_id=range(5), procs=1, nodes=1, ppn=1,
        user="u", group=0, queue="q", status=1)
    trace = Trace(jobs, Machine(np.array([1]), ["n0"]), "few", "swf")
    advice = advise(trace, 4, 1000.0, 1.0, refined_walltime(jobs, 1.0), estimate="request",
                    min_confidence=0.0)
    assert advice.can_stage and advice.confidence_jobs == 2 and not advice.advised
    text = advice.render()
    assert "only 2 earlier jobs waited that long: too few to tell" in text
    assert "confidence               too few jobs to tell: 2 of the 2 earlier jobs" in text
