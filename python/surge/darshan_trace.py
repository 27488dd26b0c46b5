"""Convert Darshan logs into traces for the Surge provisioning simulator (``surge sim``).

A trace lists, per rank, the I/O operations to replay: kind (write/read), file, offset, size,
start and end time (seconds from job start) and I/O phase. The simulator keeps only the compute
gap before each operation (its start minus the previous operation's end) and lets the simulated
system decide how long the operation takes, so the recorded end times matter as much as the
starts. DXT segments are used when the log has them (exact offsets and times); otherwise
operations are reconstructed from the POSIX counters: a record's bytes and operation count are
spread evenly over its first-to-last timestamp window, and each operation lasts its share of the
record's measured I/O time (POSIX_F_WRITE_TIME / POSIX_F_READ_TIME), the rest of the window
being time the rank spent outside I/O. Records that Darshan reduced into rank -1 (files shared
by all ranks) are expanded into one contiguous region per rank, with each rank's I/O time taken
as the summed time divided by the ranks, capped by the slowest rank's time.

Usage::

    python -m surge.darshan_trace LOG.darshan -o trace.json [--phase-gap 5] [--max-ops 256]

The output ("surge-trace" version 2) is read by ``surge sim run`` through a workload entry
``trace = "trace.json"``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field

FORMAT = "surge-trace"
VERSION = 2


class DarshanTraceError(Exception):
    """A log that cannot be read or converted."""


@dataclass
class _Op:
    rank: int
    kind: str
    file: int
    offset: int
    size: int
    start: float
    end: float
    # End of the stretch of the record's window this operation stands for: phases are cut on
    # the windows the log recorded, not on the reconstructed I/O time inside them.
    window_end: float = -1.0

    def __post_init__(self):
        if self.window_end < self.end:
            self.window_end = self.end


@dataclass
class _Builder:
    files: dict = field(default_factory=dict)
    names: list = field(default_factory=list)
    ops: list = field(default_factory=list)

    def file_index(self, record_id: int, name: str) -> int:
        if record_id not in self.files:
            self.files[record_id] = len(self.names)
            self.names.append(name)
        return self.files[record_id]


def _open(path: str):
    if not os.path.isfile(path):
        raise DarshanTraceError(f"Darshan log not found: {path}")
    try:
        import darshan  # pydarshan
    except ImportError as e:  # pragma: no cover - installed with the 'sim' extra
        raise DarshanTraceError("pydarshan (the 'darshan' package) is required: pip install 'surge[sim]'") from e
    try:
        report = darshan.DarshanReport(path, read_all=True)
        nprocs = int(report.metadata["job"]["nprocs"])
    except Exception as e:  # pydarshan raises a variety of errors on corrupt input
        raise DarshanTraceError(f"cannot read Darshan log {path}: {e}") from e
    if nprocs <= 0:
        raise DarshanTraceError(f"Darshan log {path} reports {nprocs} processes")
    return report, nprocs


def _dxt_ops(report, builder: _Builder) -> set:
    """Adds DXT_POSIX segments; returns the (record id, rank) pairs they cover."""
    covered = set()
    if "DXT_POSIX" not in report.records or len(report.records["DXT_POSIX"]) == 0:
        return covered
    for rec in report.records["DXT_POSIX"].to_df():
        fidx = builder.file_index(rec["id"], report.name_records.get(rec["id"], str(rec["id"])))
        rank = int(rec["rank"])
        for kind, key in (("w", "write_segments"), ("r", "read_segments")):
            seg = rec[key]
            if len(seg) == 0:
                continue
            covered.add((rec["id"], rank))
            for off, length, t0, t1 in zip(seg["offset"], seg["length"], seg["start_time"], seg["end_time"]):
                builder.ops.append(_Op(rank, kind, fidx, int(off), int(length), float(t0), float(t1)))
    return covered


def _counter_ops(report, builder: _Builder, nprocs: int, covered: set, max_ops: int) -> int:
    """Reconstructs operations from POSIX counters for records DXT did not cover."""
    if "POSIX" not in report.records or len(report.records["POSIX"]) == 0:
        return 0
    df = report.records["POSIX"].to_df()
    counters = df["counters"].set_index(["id", "rank"])
    fcounters = df["fcounters"].set_index(["id", "rank"])
    added = 0
    for (rid, rank), c in counters.iterrows():
        f = fcounters.loc[(rid, rank)]
        if (rid, rank) in covered:
            continue
        for kind, nops_key, bytes_key, start_key, end_key, time_key in (
            ("w", "POSIX_WRITES", "POSIX_BYTES_WRITTEN", "POSIX_F_WRITE_START_TIMESTAMP", "POSIX_F_WRITE_END_TIMESTAMP", "POSIX_F_WRITE_TIME"),
            ("r", "POSIX_READS", "POSIX_BYTES_READ", "POSIX_F_READ_START_TIMESTAMP", "POSIX_F_READ_END_TIMESTAMP", "POSIX_F_READ_TIME"),
        ):
            total_bytes, total_ops = int(c[bytes_key]), int(c[nops_key])
            if total_bytes <= 0 or total_ops <= 0:
                continue
            t0, t1 = float(f[start_key]), float(f[end_key])
            span = max(t1 - t0, 0.0)
            io_time = max(float(f.get(time_key, 0.0)), 0.0)
            fidx = builder.file_index(rid, report.name_records.get(rid, str(rid)))
            if rank >= 0:
                _spread(builder, int(rank), kind, fidx, 0, total_bytes, total_ops, t0, span, min(io_time, span), max_ops)
                added += 1
                continue
            # Shared record reduced into rank -1: every rank wrote its own share. Summed times
            # would overstate the duration; the slowest rank's time bounds each rank's window
            # and its I/O time, which is otherwise the summed time shared out evenly.
            slowest = float(f.get("POSIX_F_SLOWEST_RANK_TIME", 0.0))
            window = min(span, slowest) if slowest > 0 else span
            rank_io = min(io_time / nprocs, window)
            per_rank = total_bytes // nprocs
            ops_per_rank = max(1, math.ceil(total_ops / nprocs))
            for r in range(nprocs):
                size = per_rank + (total_bytes % nprocs if r == nprocs - 1 else 0)
                if size > 0:
                    _spread(builder, r, kind, fidx, r * per_rank, size, ops_per_rank, t0, window, rank_io, max_ops)
            added += 1
    return added


def _spread(builder, rank, kind, fidx, base, nbytes, nops, t0, span, io_time, max_ops):
    """Splits nbytes into min(nops, max_ops) contiguous operations evenly spread over span, each
    lasting its share of io_time (the record's measured time inside reads or writes)."""
    n = max(1, min(nops, max_ops, nbytes))
    step = span / n
    duration = min(io_time, span) / n
    size, extra = divmod(nbytes, n)
    offset = base
    for i in range(n):
        s = size + (1 if i < extra else 0)
        start = t0 + i * step
        builder.ops.append(_Op(rank, kind, fidx, offset, s, start, start + duration, start + step))
        offset += s


def _assign_phases(ops: list, gap: float) -> list:
    """Phase ids on the job's timeline: a new phase starts after `gap` seconds without I/O."""
    order = sorted(range(len(ops)), key=lambda i: ops[i].start)
    phases = [0] * len(ops)
    phase, busy_until = 0, None
    for i in order:
        op = ops[i]
        if busy_until is not None and op.start - busy_until > gap:
            phase += 1
        busy_until = op.window_end if busy_until is None else max(busy_until, op.window_end)
        phases[i] = phase
    return phases


def convert(path: str, phase_gap: float | None = None, max_ops: int = 256) -> dict:
    """Reads a Darshan log and returns a surge-trace v2 dictionary."""
    if max_ops < 1:
        raise DarshanTraceError("max_ops must be at least 1")
    report, nprocs = _open(path)
    builder = _Builder()
    covered = _dxt_ops(report, builder)
    reconstructed = _counter_ops(report, builder, nprocs, covered, max_ops)
    if not builder.ops:
        raise DarshanTraceError(f"Darshan log {path} has no POSIX reads or writes to replay")
    method = "dxt" if covered and not reconstructed else "counters" if not covered else "dxt+counters"
    runtime = float(report.metadata["job"].get("run_time", 0.0)) or max(o.end for o in builder.ops)
    gap = phase_gap if phase_gap is not None else max(1.0, 0.05 * runtime)
    phases = _assign_phases(builder.ops, gap)
    ops = builder.ops
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": os.path.basename(path),
        "nprocs": nprocs,
        "method": method,
        "runtime": runtime,
        "phase_gap": gap,
        "files": builder.names,
        "ops": {
            "rank": [o.rank for o in ops],
            "kind": [o.kind for o in ops],
            "file": [o.file for o in ops],
            "offset": [o.offset for o in ops],
            "size": [o.size for o in ops],
            "start": [round(o.start, 9) for o in ops],
            "end": [round(max(o.end, o.start), 9) for o in ops],
            "phase": phases,
        },
    }


def summarize(trace: dict) -> dict:
    """Totals for people: ranks with I/O, operations, bytes written/read, phases."""
    ops = trace["ops"]
    written = sum(s for k, s in zip(ops["kind"], ops["size"]) if k == "w")
    read = sum(s for k, s in zip(ops["kind"], ops["size"]) if k == "r")
    return {
        "source": trace["source"],
        "method": trace["method"],
        "nprocs": trace["nprocs"],
        "ranks_with_io": len(set(ops["rank"])),
        "operations": len(ops["rank"]),
        "bytes_written": written,
        "bytes_read": read,
        "phases": (max(ops["phase"]) + 1) if ops["phase"] else 0,
        "files": len(trace["files"]),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m surge.darshan_trace", description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="Darshan log (.darshan)")
    ap.add_argument("-o", "--output", help="trace file to write (JSON); default: print a summary only")
    ap.add_argument("--phase-gap", type=float, default=None, help="seconds without I/O that separate phases (default: max(1 s, 5%% of run time))")
    ap.add_argument("--max-ops", type=int, default=256, help="cap on operations reconstructed per counter record")
    args = ap.parse_args(argv)
    try:
        trace = convert(args.log, args.phase_gap, args.max_ops)
    except DarshanTraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(trace, fh, separators=(",", ":"))
    s = summarize(trace)
    width = max(len(k) for k in s)
    for k, v in s.items():
        print(f"{k:<{width}}  {v:,}" if isinstance(v, int) else f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
