"""Trace readers of surge.predict: the shared SWF traces, the Argonne and Alea layouts, sacct."""

import gzip

import numpy as np
import pytest

from surge.predict.traces import (TraceFormatError, detect_layout, expand_hostlist, read_sacct_text,
                                  read_swf_text, read_trace)
from surge.predict.shared_data import swf_trace


def _first_lines(name: str, count: int) -> str:
    with gzip.open(swf_trace(name), "rt") as handle:
        return "".join(next(handle) for _ in range(count))


def test_ricc_slice_is_standard_swf_with_8_cores_per_node():
    text = _first_lines("RICC-2010-2.swf.gz", 520)
    trace = read_swf_text(text, "ricc", detect_layout(text))
    assert trace.layout == "swf"
    assert trace.machine.size == 1024 and set(trace.machine.cores) == {8}
    jobs = trace.jobs
    assert len(jobs) + sum(trace.dropped.values()) == 500
    first = jobs.iloc[0]
    # Job 1: 80 processors, 14400 s requested, ran 222 s -> 10 whole nodes.
    assert (first.procs, first.req_time, first.run, first.nodes, first.ppn) == (80, 14400, 222, 10, 8)
    assert (jobs["submit"].diff().dropna() >= 0).all()


def test_theta_uses_the_argonne_columns():
    trace = read_trace(swf_trace("theta_argonne.swf.gz"))
    assert trace.layout == "argonne"
    jobs = trace.jobs
    assert len(jobs) == 23387
    # First data line of the file: job 639487 requested 3600 s (column 6) for 8 nodes.
    row = jobs[jobs.job_id == 639487].iloc[0]
    assert (row.req_time, row.run, row.nodes, row.ppn) == (3600, 3632, 8, 1)
    assert trace.machine.size == 4392


def test_mira_is_simulated_in_512_node_blocks():
    trace = read_trace(swf_trace("mira.swf.gz"))
    assert trace.machine.unit == 512 and trace.machine.size == 96
    assert trace.jobs["nodes"].max() <= 96


def test_alea_node_lists_match_the_requested_shape():
    trace = read_trace(swf_trace("alea_wagap-2013.swf.gz"))
    assert trace.layout == "alea" and trace.node_lists is not None
    assert trace.dropped["unknown runtime"] == 2
    assert len(trace.node_lists) == len(trace.jobs)
    # Every real allocation uses exactly the job's number of distinct nodes.
    sizes = np.array([len(lst) for lst in trace.node_lists])
    assert (sizes == trace.jobs["nodes"].to_numpy()).all()
    # zewura nodes have 80 cores, zegox 12 (from the .machines file).
    assert set(trace.machine.cores) == {80, 12}
    assert (trace.jobs["ppn"].to_numpy() <= trace.machine.cores.max()).all()


def test_malformed_line_names_its_line_number():
    text = _first_lines("RICC-2010-2.swf.gz", 30)
    lines = text.splitlines(keepends=True)
    lines[24] = lines[24].replace("1024000", "10x4000", 1)
    with pytest.raises(TraceFormatError, match=r":25: field 10 is not a number"):
        read_swf_text("".join(lines), "ricc")
    lines[24] = "3 4 5\n"
    with pytest.raises(TraceFormatError, match=r":25: expected at least 18 fields, found 3"):
        read_swf_text("".join(lines), "ricc")


def test_unusable_jobs_are_counted_not_silently_dropped():
    text = _first_lines("RICC-2010-2.swf.gz", 40)
    lines = text.splitlines(keepends=True)
    fields = lines[30].split()
    fields[3] = "-1"                     # runtime unknown
    lines[30] = " ".join(fields) + "\n"
    trace = read_swf_text("".join(lines), "ricc")
    assert trace.dropped["unknown runtime"] == 1
    assert len(trace.jobs) == 19
    assert "1 unknown runtime" in trace.summary()


SACCT = """JobID|User|Group|Partition|Submit|Start|End|Elapsed|Timelimit|NNodes|NCPUS|State|NodeList
100|alice|lab|batch|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T11:05:00|01:00:00|02:00:00|2|64|COMPLETED|cn[01-02]
100.batch|alice|lab|batch|2024-03-01T10:05:00|2024-03-01T10:05:00|2024-03-01T11:05:00|01:00:00||1|32|COMPLETED|cn01
101|bob|lab|batch|2024-03-01T10:10:00|Unknown|Unknown|00:00:00|1-00:00:00|1|32|PENDING|None assigned
102|bob|lab|batch|2024-03-01T10:20:00|2024-03-01T11:05:00|2024-03-01T11:35:30|00:30:30|1-00:00:00|1|32|CANCELLED by 5|cn03
"""


def test_sacct_parsable2_jobs_steps_and_pending():
    trace = read_sacct_text(SACCT, "sacct.txt")
    assert detect_layout(SACCT) == "sacct"
    assert trace.dropped["job steps (not jobs)"] == 1
    assert trace.dropped["never started (no Start time)"] == 1
    jobs = trace.jobs
    assert list(jobs["job_id"]) == [100, 102]
    assert list(jobs["run"]) == [3600, 1830]
    assert list(jobs["req_time"]) == [7200, 86400]
    assert list(jobs["wait"]) == [300, 2700]
    assert list(jobs["status"]) == [1, 0]
    assert [trace.machine.names[i] for i in trace.node_lists[0]] == ["cn01", "cn02"]


def test_sacct_bad_time_and_missing_columns():
    bad = SACCT.replace("2024-03-01T10:20:00", "yesterday")
    with pytest.raises(TraceFormatError, match=r":5: Submit is not a time"):
        read_sacct_text(bad, "sacct.txt")
    with pytest.raises(TraceFormatError, match="lacks Timelimit"):
        read_sacct_text("JobID|User|Submit|Start\n1|a|2024-01-01T00:00:00|\n", "s")


@pytest.mark.parametrize("text,seconds", [
    ("60", 3600),                    # minutes
    ("5:30", 330),                   # minutes:seconds
    ("01:02:03", 3723),              # hours:minutes:seconds
    ("2-12", 2 * 86400 + 12 * 3600),                 # days-hours
    ("1-02:30", 86400 + 2 * 3600 + 30 * 60),         # days-hours:minutes, not minutes:seconds
    ("1-02:03:04", 86400 + 2 * 3600 + 3 * 60 + 4),   # days-hours:minutes:seconds
    ("12:34.567", 754.567),          # a fraction of a second (TotalCPU)
    (" 7 ", 420),
])
def test_slurm_durations_in_every_form(text, seconds):
    from surge.predict.traces import _slurm_duration

    assert _slurm_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["UNLIMITED", "Partition_Limit", "INVALID", "NONE", "Unknown", "", "  "])
def test_slurm_durations_without_a_value_are_nan(text):
    from surge.predict.traces import _slurm_duration

    assert np.isnan(_slurm_duration(text))


@pytest.mark.parametrize("text", ["1:2:3:4", "1-2-3", "1-", "1.5:30", "1-2.5", "2.5", "abc:1", "-5"])
def test_malformed_slurm_durations_are_refused(text):
    from surge.predict.traces import _slurm_duration

    with pytest.raises(ValueError, match="not a Slurm duration"):
        _slurm_duration(text)


def test_sacct_day_limits_and_unlimited_jobs():
    text = SACCT.replace("|1-00:00:00|1|32|CANCELLED", "|1-02:30|1|32|CANCELLED")
    assert list(read_sacct_text(text, "s").jobs["req_time"]) == [7200, 86400 + 2 * 3600 + 30 * 60]
    # No limit is no requested time: the job is dropped and counted, not planned with.
    trace = read_sacct_text(SACCT.replace("|02:00:00|2|64|", "|UNLIMITED|2|64|"), "s")
    assert list(trace.jobs["job_id"]) == [102] and trace.dropped["no requested time"] == 1
    with pytest.raises(TraceFormatError, match=r"s:5: Timelimit: not a Slurm duration: '1-2-3'"):
        read_sacct_text(SACCT.replace("|1-00:00:00|1|32|CANCELLED", "|1-2-3|1|32|CANCELLED"), "s")


DST = """JobID|User|Submit|Start|End|Elapsed|Timelimit|NNodes|NCPUS|State
1|a|2024-03-31T01:30:00|2024-03-31T03:30:00|2024-03-31T04:30:00|01:00:00|02:00:00|1|1|COMPLETED
2|a|2024-10-27T01:30:00|2024-10-27T02:30:00|2024-10-27T03:30:00|01:00:00|02:00:00|1|1|COMPLETED
"""


def _utc(seconds: float) -> str:
    import pandas as pd

    return str(pd.Timestamp(seconds, unit="s", tz="UTC"))


def test_sacct_times_are_local_times_of_the_given_zone():
    # Berlin moved its clocks 02:00 CET -> 03:00 CEST on 2024-03-31 and 03:00 CEST -> 02:00
    # CET on 2024-10-27: job 1 waited one hour (not two), job 2 starts in the hour that occurs
    # twice, read as its first occurrence (CEST).
    trace = read_sacct_text(DST, "s", timezone="Europe/Berlin")
    jobs = trace.jobs
    assert [_utc(t) for t in jobs["submit"]] == ["2024-03-31 00:30:00+00:00",
                                                 "2024-10-26 23:30:00+00:00"]
    assert list(jobs["wait"]) == [3600, 3600]
    assert trace.timezone == "Europe/Berlin" and "(Europe/Berlin)" in trace.summary()
    assert str(trace.local_time(jobs["submit"].iloc[0])[0]) == "2024-03-31 01:30:00+01:00"
    # The same text in another zone is another moment.
    tokyo = read_sacct_text(DST, "s", timezone="Asia/Tokyo").jobs
    assert list(jobs["submit"] - tokyo["submit"]) == [8 * 3600, 7 * 3600]
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        read_sacct_text(DST, "s", timezone="Mars/Olympus")


def test_sacct_times_default_to_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    trace = read_sacct_text(DST, "s")
    assert trace.timezone == "America/New_York"
    assert _utc(trace.jobs["submit"].iloc[0]) == "2024-03-31 05:30:00+00:00"    # EDT, UTC-4


def test_the_cli_reads_sacct_in_the_zone_given(tmp_path, capsys):
    from surge.predict.cli import main

    path = tmp_path / "jobs.sacct"
    path.write_text(SACCT)
    assert main(["advise", str(path), "--job", "102", "--stage-bytes", "1K", "--bandwidth", "1K/s",
                 "--estimate", "request", "--tz", "Europe/Berlin"]) == 0
    captured = capsys.readouterr()
    assert "(Europe/Berlin)" in captured.err
    assert "job                      102 (submitted 2024-03-01 10:20 CET)" in captured.out
    assert main(["advise", str(path), "--job", "102", "--stage-bytes", "1K", "--bandwidth", "1K/s",
                 "--estimate", "request", "--tz", "Nowhere/Special"]) == 2
    assert "unknown time zone 'Nowhere/Special'" in capsys.readouterr().err


def test_hostlist_expansion():
    assert expand_hostlist("cn[01-03,07],gpu1") == ["cn01", "cn02", "cn03", "cn07", "gpu1"]
    # A suffix after the brackets, and more than one bracket in a name.
    assert expand_hostlist("n[1-2]-ib") == ["n1-ib", "n2-ib"]
    assert expand_hostlist("r[1-2]n[01-02]") == ["r1n01", "r1n02", "r2n01", "r2n02"]
    # Commas inside brackets do not split the list.
    assert expand_hostlist("n[1,3-4],m5") == ["n1", "n3", "n4", "m5"]
    assert expand_hostlist("None assigned") == [] and expand_hostlist("(null)") == []
    for bad in ("n[1-", "n[3-1]", "n1]"):
        with pytest.raises(ValueError, match=r"not a Slurm hostlist: '.*'"):
            expand_hostlist(bad)


def test_sacct_node_lists_with_suffixes_and_a_bad_one():
    text = SACCT.replace("|cn[01-02]\n", "|r[1-2]n[01-02]-ib\n").replace("|cn03\n", "|r1n01-ib\n")
    trace = read_sacct_text(text, "sacct.txt")
    assert [trace.machine.names[i] for i in trace.node_lists[0]] == \
        ["r1n01-ib", "r1n02-ib", "r2n01-ib", "r2n02-ib"]
    assert [trace.machine.names[i] for i in trace.node_lists[1]] == ["r1n01-ib"]
    with pytest.raises(TraceFormatError, match=r"sacct.txt:5: NodeList: not a Slurm hostlist"):
        read_sacct_text(SACCT.replace("|cn03\n", "|cn[03\n"), "sacct.txt")


HEADER = """; Version: 2.2
; Computer: Test cluster
; UnixStartTime: 1272639895
; TimeZoneString: Asia/Tokyo
; MaxJobs: 3
; MaxRecords: 3
; MaxNodes: 4
; MaxProcs: 32
; Queue: 1 batch
; Queue: 2 debug
;
"""
JOBS = """1 0 10 100 8 -1 -1 8 600 -1 1 1 1 -1 1 -1 -1 -1
2 3600 0 50 16 -1 -1 16 120 -1 1 2 1 -1 2 -1 -1 -1
3 7200 5 20 4 -1 -1 4 60 -1 1 1 1 -1 1 -1 -1 -1
"""


def test_swf_header_fields_are_read_and_honoured(tmp_path):
    from surge.predict.features import model_frame
    from surge.predict.traces import parse_swf_header

    header = parse_swf_header(HEADER + JOBS + "; Note: after the jobs, not header\n")
    assert header.number("UnixStartTime") == 1272639895
    assert header.text("TimeZoneString") == "Asia/Tokyo"
    assert header.fields["queue"] == ["1 batch", "2 debug"]
    assert header.text("Note") is None
    path = tmp_path / "small.swf"
    path.write_text(HEADER + JOBS)
    trace = read_trace(path)
    assert trace.warnings == []
    # Submit times are relative to UnixStartTime: job 1 was submitted at 2010-05-01 00:04:55 JST.
    assert trace.jobs["submit"].iloc[0] == 1272639895
    assert str(trace.local_time(trace.jobs["submit"].iloc[0])[0]) == "2010-05-01 00:04:55+09:00"
    features = model_frame(trace.jobs, timezone=trace.timezone)
    assert list(features["hour"]) == [0, 1, 2]          # local hours, not UTC's 15, 16, 17
    assert trace.machine.size == 4 and set(trace.machine.cores) == {8}
    assert "2010-05-01" in trace.summary() and "Asia/Tokyo" in trace.summary()
    # A zone given for an SWF trace is not used (its times are Unix seconds), and it says so.
    other = read_trace(path, timezone="Europe/Berlin")
    assert other.timezone == "Asia/Tokyo" and list(other.jobs["submit"]) == list(trace.jobs["submit"])
    assert any("time zone Europe/Berlin not used" in w for w in other.warnings)


def test_header_disagreeing_with_machines_file_warns_and_wins(tmp_path):
    path = tmp_path / "small.swf"
    path.write_text(HEADER.replace("MaxRecords: 3", "MaxRecords: 5") + JOBS)
    (tmp_path / "small.swf.machines").write_text("0 alpha 2 8 1 100\n1 beta 4 12 1 100\n")
    trace = read_trace(path)
    assert trace.machine.size == 4 and set(trace.machine.cores) == {8}      # the header's
    text = trace.summary()
    assert "warning: the header declares 5 records, the file has 3 job lines" in text
    assert ("warning: the SWF header says MaxNodes 4, MaxProcs 32; the .machines file says "
            "6 nodes, 64 cores (2 alpha nodes x 8 cores + 4 beta nodes x 12 cores): using "
            "the header") in text
    # Without a header the .machines file sets the machine, and nothing needs a warning.
    bare = tmp_path / "bare.swf"
    bare.write_text(JOBS)
    (tmp_path / "bare.swf.machines").write_text("0 alpha 4 8 1 100\n")
    trace = read_trace(bare)
    assert trace.machine.size == 4 and set(trace.machine.cores) == {8} and not trace.warnings
    assert trace.jobs["submit"].iloc[0] == 0


def test_wagap_says_its_machines_file_names_more_nodes_than_the_jobs_used():
    trace = read_trace(swf_trace("alea_wagap-2013.swf.gz"))
    assert any("describes 68 nodes, the trace's node lists name 44" in w for w in trace.warnings)


def test_unrecorded_waits_stay_unknown(tmp_path):
    from surge.predict.simulate import refined_walltime, simulate
    from surge.predict.study import compare_to_real

    path = tmp_path / "nowait.swf"
    path.write_text(HEADER + JOBS.replace("1 0 10 100", "1 0 -1 100").replace("3 7200 5", "3 7200 -1"))
    trace = read_trace(path)
    assert trace.jobs["wait"].isna().tolist() == [True, False, True]
    assert trace.has_waits
    check = compare_to_real(trace, simulate(trace, refined_walltime(trace.jobs, 1.0)))
    assert check["jobs with a recorded wait"] == 1 and "same node list" not in check
    none = tmp_path / "none.swf"
    none.write_text(HEADER + JOBS.replace(" 10 100", " -1 100").replace(" 0 50", " -1 50")
                    .replace(" 5 20", " -1 20"))
    trace = read_trace(none)
    assert not trace.has_waits
    with pytest.raises(ValueError, match="records neither real waits nor real node lists"):
        compare_to_real(trace, simulate(trace, refined_walltime(trace.jobs, 1.0)))
