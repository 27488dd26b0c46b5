"""Darshan -> surge-trace conversion against the shared real logs."""

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from surge import darshan_trace
from surge.darshan_trace import DarshanTraceError, convert, summarize

REPO = Path(__file__).resolve().parents[2]


def shared_log(name: str) -> str:
    root = Path(os.environ.get("SURGE_SHARED_DATA", REPO.parent / "shared" / "data"))
    path = root / "darshan" / name
    if not path.is_file():
        pytest.fail(f"shared Darshan log {path} is missing: set SURGE_SHARED_DATA to the directory holding darshan/")
    return str(path)


def posix_totals(path):
    import darshan

    report = darshan.DarshanReport(path, read_all=True)
    c = report.records["POSIX"].to_df()["counters"]
    return int(c["POSIX_BYTES_WRITTEN"].sum()), int(c["POSIX_BYTES_READ"].sum())


def test_dxt_log_keeps_segments_exactly():
    path = shared_log("mpi-io-test-32ranks-dxt.darshan")
    trace = convert(path)
    s = summarize(trace)
    assert trace["method"] == "dxt"
    assert s["nprocs"] == 32 and s["ranks_with_io"] == 32
    written, read = posix_totals(path)
    assert s["bytes_written"] == written and s["bytes_read"] == read
    # 16 MiB blocks as the log documents, start times within the run.
    sizes = set(trace["ops"]["size"])
    assert 16 * 2**20 in sizes
    assert all(0 <= t <= trace["runtime"] + 1 for t in trace["ops"]["start"])


def test_shared_rank_minus_one_record_is_expanded_per_rank():
    path = shared_log("ior-autobench-2048ranks.darshan")
    trace = convert(path, max_ops=4)
    ops = trace["ops"]
    assert trace["method"] == "counters"
    assert min(ops["rank"]) == 0 and len(set(ops["rank"])) == 2048
    written, read = posix_totals(path)
    s = summarize(trace)
    assert s["bytes_written"] == written and s["bytes_read"] == read
    # Each rank reads its own contiguous region of the shared file: no overlaps.
    regions = defaultdict(lambda: [float("inf"), 0])
    for r, off, size in zip(ops["rank"], ops["offset"], ops["size"]):
        regions[r][0] = min(regions[r][0], off)
        regions[r][1] = max(regions[r][1], off + size)
    spans = sorted(regions.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_counter_reconstruction_respects_totals_and_phases(tmp_path):
    path = shared_log("imbalanced-io-496ranks.darshan")
    out = tmp_path / "t.json"
    assert darshan_trace.main([path, "-o", str(out), "--max-ops", "8"]) == 0
    trace = json.loads(out.read_text())
    assert trace["format"] == "surge-trace" and trace["version"] == 2
    written, read = posix_totals(path)
    s = summarize(trace)
    assert (s["bytes_written"], s["bytes_read"]) == (written, read)
    n = len(trace["ops"]["rank"])
    assert all(len(col) == n for col in trace["ops"].values())
    assert s["phases"] >= 1 and max(trace["ops"]["phase"]) == s["phases"] - 1


def test_counter_operations_last_the_measured_io_time():
    """Recorded durations are the log's own I/O time, not the whole first-to-last window: the
    simulator keeps only the gaps between operations, so a window counted as I/O would vanish."""
    path = shared_log("e3sm-io-512ranks.darshan")
    trace = convert(path)
    ops = trace["ops"]
    busy = defaultdict(float)
    for r, k, t0, t1 in zip(ops["rank"], ops["kind"], ops["start"], ops["end"]):
        assert t1 >= t0
        if k == "w":
            busy[r] += t1 - t0
    import darshan

    report = darshan.DarshanReport(path, read_all=True)
    df = report.records["POSIX"].to_df()
    per_rank = defaultdict(float)
    for rank, t in zip(df["counters"]["rank"], df["fcounters"]["POSIX_F_WRITE_TIME"]):
        if rank >= 0:
            per_rank[int(rank)] += float(t)
    # Ranks with private records only: the trace's write time is Darshan's, to rounding.
    for r in sorted(per_rank)[:50]:
        assert busy[r] == pytest.approx(per_rank[r], rel=1e-4, abs=1e-6)
    # The aggregators wrote for about 55 s of a 690 s window: most of the window is not I/O.
    top = max(per_rank, key=per_rank.get)
    window = max(t for r, t in zip(ops["rank"], ops["end"]) if r == top) - min(t for r, t in zip(ops["rank"], ops["start"]) if r == top)
    assert busy[top] < 0.2 * window


def test_phase_gap_splits_the_timeline():
    path = shared_log("nonmpi-1rank-dxt.darshan")
    coarse = summarize(convert(path, phase_gap=1e9))["phases"]
    fine = summarize(convert(path, phase_gap=0.001))["phases"]
    assert coarse == 1 and fine > coarse


def test_unreadable_and_missing_logs_fail_clearly(tmp_path, capsys):
    junk = tmp_path / "junk.darshan"
    junk.write_bytes(b"this is not a darshan log" * 10)
    with pytest.raises(DarshanTraceError, match="cannot read Darshan log"):
        convert(str(junk))
    with pytest.raises(DarshanTraceError, match="not found"):
        convert(str(tmp_path / "absent.darshan"))
    assert darshan_trace.main([str(junk)]) == 2
    assert "error:" in capsys.readouterr().err
