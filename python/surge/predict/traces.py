"""Batch-history readers: Standard Workload Format traces and Slurm accounting output.

Every reader returns a :class:`Trace`: one row per job in a pandas DataFrame with the same
columns whatever the source, plus a description of the machine (cores per node) for the
scheduler simulation. Readers never drop a line silently: a line that cannot be parsed raises
:class:`TraceFormatError` with its line number, and jobs that parse but cannot be used (no
runtime, no requested time, ...) are removed and counted in ``Trace.dropped``.

Supported layouts
-----------------
``swf``      the 18-column Standard Workload Format (Parallel Workloads Archive).
``argonne``  the ALCF Theta/Mira conversion: requested time in column 6, user in column 12,
             allocated nodes in column 5 (columns 8-9 are -1).
``alea``     the Alea simulator's SWF variant: 18 SWF columns, then the node-ID list of every
             allocated CPU (``{1240,1240,...}``), the queue name and the resource request.
``sacct``    ``sacct --parsable2`` output with a header line (``|``-separated).
"""

from __future__ import annotations

import gzip
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

#: Columns of ``Trace.jobs``. Times are seconds (submit is absolute, the rest are durations).
JOB_COLUMNS = [
    "job_id", "submit", "wait", "run", "req_time", "procs", "nodes", "ppn",
    "user", "group", "queue", "status",
]


class TraceFormatError(ValueError):
    """A trace line that cannot be parsed; the message names the file and line number."""

    def __init__(self, source: str, line_number: int, message: str):
        super().__init__(f"{source}:{line_number}: {message}")
        self.source = source
        self.line_number = line_number


@dataclass
class Machine:
    """The resources the simulator allocates: ``cores[i]`` schedulable cores on node ``i``.

    ``unit`` > 1 means each simulated node stands for ``unit`` real nodes (Mira allocates in
    512-node blocks; simulating 49,152 single nodes would be needlessly slow).
    """

    cores: np.ndarray
    names: list[str]
    unit: int = 1

    @property
    def size(self) -> int:
        return len(self.cores)


@dataclass
class Trace:
    """Jobs in submit order (columns :data:`JOB_COLUMNS`), the machine, and what was dropped."""

    jobs: pd.DataFrame
    machine: Machine
    source: str
    layout: str
    dropped: dict[str, int] = field(default_factory=dict)
    #: Real allocations (list of machine node indices per job) when the trace records them.
    node_lists: list[np.ndarray] | None = None

    def head(self, n: int) -> "Trace":
        """The first ``n`` jobs (in submit order): small, time-contiguous slices for tests."""
        lists = None if self.node_lists is None else self.node_lists[:n]
        return Trace(self.jobs.iloc[:n].reset_index(drop=True), self.machine, self.source,
                     self.layout, dict(self.dropped), lists)

    def summary(self) -> str:
        dropped = ", ".join(f"{n} {why}" for why, n in self.dropped.items() if n) or "none"
        return (f"{self.source}: {len(self.jobs)} jobs ({self.layout} layout), "
                f"{self.machine.size} nodes, dropped: {dropped}")


def _open_text(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        return handle.read()


def read_trace(path: str | Path, layout: str = "auto") -> Trace:
    """Read a trace file (``.gz`` is decompressed); ``layout`` is auto-detected unless given."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trace not found: {path}")
    text = _open_text(path)
    if layout == "auto":
        layout = detect_layout(text)
    if layout == "sacct":
        return read_sacct_text(text, str(path))
    if layout in ("swf", "argonne", "alea"):
        return read_swf_text(text, str(path), layout, machines_file=_machines_file(path))
    raise ValueError(f"unknown trace layout {layout!r} (swf, argonne, alea, sacct)")


def _machines_file(path: Path) -> Path | None:
    stem = path.name[:-3] if path.name.endswith(".gz") else path.name
    candidate = path.with_name(stem + ".machines")
    return candidate if candidate.exists() else None


def detect_layout(text: str) -> str:
    """Guess the layout from the first data lines (see the module docstring)."""
    lines = [ln for ln in text.splitlines()[:2000] if ln.strip() and not ln.startswith(";")]
    if not lines:
        raise ValueError("trace has no job lines")
    if "|" in lines[0]:
        return "sacct"
    fields = [ln.split() for ln in lines[:500]]
    if any(len(f) > 18 and f[18].startswith("{") for f in fields):
        return "alea"
    # Argonne's conversion leaves the SWF request columns (8, 9) at -1 and puts the
    # requested time in column 6 (the SWF "average CPU time"), which is then >= 1.
    if all(len(f) >= 12 and f[8] == "-1" and f[7] == "-1" for f in fields) and \
            sum(float(f[5]) > 0 for f in fields) > len(fields) / 2:
        return "argonne"
    return "swf"


def _header_value(text: str, key: str) -> float | None:
    match = re.search(rf"^;\s*{key}:\s*(\d+)", text, flags=re.MULTILINE)
    return float(match.group(1)) if match else None


def _split_swf(text: str, source: str, min_fields: int) -> tuple[list[list[str]], list[int]]:
    rows, numbers = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(";"):
            continue
        parts = stripped.split()
        if len(parts) < min_fields:
            raise TraceFormatError(source, number,
                                   f"expected at least {min_fields} fields, found {len(parts)}")
        rows.append(parts)
        numbers.append(number)
    if not rows:
        raise TraceFormatError(source, 1, "no job lines")
    return rows, numbers


def _numeric_block(rows: list[list[str]], numbers: list[int], source: str, width: int) -> np.ndarray:
    """The first ``width`` fields of every row as float64; names the first bad line."""
    try:
        return np.array([r[:width] for r in rows], dtype=np.float64)
    except ValueError:
        for row, number in zip(rows, numbers):
            for column, value in enumerate(row[:width], start=1):
                try:
                    float(value)
                except ValueError:
                    raise TraceFormatError(source, number,
                                           f"field {column} is not a number: {value!r}") from None
        raise


def read_swf_text(text: str, source: str = "<swf>", layout: str = "swf",
                  machines_file: Path | None = None) -> Trace:
    """Parse SWF text in one of the ``swf``/``argonne``/``alea`` layouts."""
    rows, numbers = _split_swf(text, source, 21 if layout == "alea" else 18)
    values = _numeric_block(rows, numbers, source, 18)
    col = {name: values[:, i] for i, name in enumerate(
        ["job_id", "submit", "wait", "run", "alloc", "cpu", "mem", "req_procs", "req_time",
         "req_mem", "status", "user", "group", "exe", "queue", "partition", "prev", "think"])}
    if layout == "argonne":
        req_time = col["cpu"]          # requested time lives in column 6 here
        procs = col["alloc"]           # allocated nodes; one "core" per node
    else:
        req_time = col["req_time"]
        procs = np.where(col["alloc"] > 0, col["alloc"], col["req_procs"])
    jobs = pd.DataFrame({
        "job_id": col["job_id"].astype(np.int64), "submit": col["submit"], "wait": col["wait"],
        "run": col["run"], "req_time": req_time, "procs": procs,
        "user": col["user"].astype(np.int64).astype(str), "group": col["group"].astype(np.int64),
        "queue": col["queue"].astype(np.int64).astype(str), "status": col["status"].astype(np.int64),
    })
    jobs["line"] = numbers
    node_lists = None
    if layout == "alea":
        machine, node_lists, jobs = _alea_allocations(rows, numbers, source, jobs, machines_file)
    else:
        machine, jobs = _swf_machine(text, jobs, layout)
    return _finish(jobs, machine, source, layout, node_lists)


def _swf_machine(text: str, jobs: pd.DataFrame, layout: str) -> tuple[Machine, pd.DataFrame]:
    """Nodes and cores per node from the SWF header; jobs get a (nodes, ppn) shape."""
    max_nodes = _header_value(text, "MaxNodes")
    max_procs = _header_value(text, "MaxProcs")
    if max_nodes is None:
        max_nodes = max_procs if max_procs is not None else float(jobs["procs"].max())
    cores = 1 if layout == "argonne" or not max_procs else max(1, int(max_procs // max_nodes))
    procs = jobs["procs"].clip(lower=1).to_numpy()
    # Jobs smaller than a node share it; larger ones take whole nodes (the usual cluster
    # policy, and the only one the SWF record lets us infer).
    nodes = np.ceil(procs / cores)
    ppn = np.where(procs < cores, procs, cores)
    unit = _allocation_unit(nodes, int(max_nodes)) if cores == 1 else 1
    jobs = jobs.assign(nodes=np.ceil(nodes / unit).astype(np.int64), ppn=ppn.astype(np.int64))
    count = int(max_nodes) // unit
    names = [f"n{i * unit}" if unit == 1 else f"n{i * unit}-{(i + 1) * unit - 1}" for i in range(count)]
    return Machine(np.full(count, cores, dtype=np.int64), names, unit), jobs


def _allocation_unit(nodes: np.ndarray, max_nodes: int) -> int:
    """Largest power-of-two block that 95% of jobs use whole multiples of (Mira: 512)."""
    unit = 1
    while unit * 2 <= max_nodes and max_nodes % (unit * 2) == 0 and \
            np.mean(nodes % (unit * 2) == 0) >= 0.95:
        unit *= 2
    return unit


def _alea_allocations(rows, numbers, source, jobs, machines_file):
    """Real per-job node lists of the Alea variant, and the machine they define.

    The node IDs in the trace are site IDs; the machine is the set of IDs that occur, each
    sized by the smallest cluster in the ``.machines`` file whose nodes can hold the largest
    per-node CPU count seen on it.
    """
    per_job = []
    for row, number in zip(rows, numbers):
        text = row[18]
        if not (text.startswith("{") and text.endswith("}")):
            raise TraceFormatError(source, number, f"field 19 is not a node list: {text[:40]!r}")
        try:
            ids = np.array([int(x) for x in text[1:-1].split(",") if x], dtype=np.int64)
        except ValueError:
            raise TraceFormatError(source, number, f"bad node ID in {text[:40]!r}") from None
        per_job.append(ids)
    all_ids = np.concatenate(per_job)
    site_ids = np.unique(all_ids)
    max_per_node = np.zeros(len(site_ids), dtype=np.int64)
    shapes = np.zeros((len(per_job), 2), dtype=np.int64)
    lists = []
    for j, ids in enumerate(per_job):
        idx, counts = np.unique(np.searchsorted(site_ids, ids), return_counts=True)
        np.maximum.at(max_per_node, idx, counts)
        shapes[j] = (len(idx), counts.max() if len(counts) else 0)
        lists.append(idx)
    sizes = sorted(int(line.split()[3]) for line in machines_file.read_text().splitlines()
                   if line.strip()) if machines_file else []
    cores = np.array([next((s for s in sizes if s >= m), m) for m in max_per_node], dtype=np.int64)
    jobs = jobs.assign(nodes=shapes[:, 0], ppn=shapes[:, 1],
                       queue=[row[19] for row in rows])
    return Machine(cores, [str(i) for i in site_ids]), lists, jobs


_SACCT_REQUIRED = {"JobID", "User", "Submit", "Start", "Timelimit"}


def _slurm_duration(value: str) -> float:
    """``[D-]HH:MM:SS`` / ``MM:SS`` / minutes -> seconds; NaN for UNLIMITED and the like."""
    value = value.strip()
    if not value or not value[0].isdigit():
        return math.nan
    days = 0
    if "-" in value:
        day_text, value = value.split("-", 1)
        days = int(day_text)
    parts = [float(p) for p in value.split(":")]
    if len(parts) == 1:      # bare minutes, as in Timelimit "60"
        seconds = parts[0] * 60
    else:
        seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return days * 86400 + seconds


def expand_hostlist(text: str) -> list[str]:
    """Slurm hostlist (``node[01-03,07],gpu1``) -> ``['node01', 'node02', ...]``."""
    hosts = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", text):
        prefix, ranges = match.group(1), match.group(2)
        if not ranges:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            hi = hi or lo
            hosts.extend(f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
    return [h for h in hosts if h and h not in ("None assigned", "(null)")]


def read_sacct_text(text: str, source: str = "<sacct>") -> Trace:
    """Parse ``sacct --parsable2`` output (header line, ``|`` separators, job steps skipped)."""
    lines = text.splitlines()
    header = lines[0].split("|") if lines else []
    missing = _SACCT_REQUIRED - set(header)
    if missing:
        raise TraceFormatError(source, 1, f"sacct header lacks {', '.join(sorted(missing))} "
                                          "(use sacct --parsable2 --format=...)")
    try:
        frame = pd.read_csv(io.StringIO(text), sep="|", dtype=str, keep_default_na=False,
                            engine="python")
    except pd.errors.ParserError as error:
        found = re.search(r"line (\d+)", str(error))
        raise TraceFormatError(source, int(found.group(1)) if found else 0,
                               f"wrong number of '|' fields ({error})") from None
    frame["line"] = np.arange(2, len(frame) + 2)
    steps = frame["JobID"].str.contains(r"\.", regex=True)
    dropped = {"job steps (not jobs)": int(steps.sum())}
    frame = frame[~steps]

    def times(column: str) -> pd.Series:
        parsed = pd.to_datetime(frame[column], format="%Y-%m-%dT%H:%M:%S", errors="coerce")
        return (parsed - pd.Timestamp(0)).dt.total_seconds()

    submit, start = times("Submit"), times("Start")
    bad_submit = submit.isna()
    if bad_submit.any():
        first = frame.loc[bad_submit, "line"].iloc[0]
        raise TraceFormatError(source, int(first),
                               f"Submit is not a time: {frame.loc[bad_submit, 'Submit'].iloc[0]!r}")
    if "Elapsed" in frame:
        run = frame["Elapsed"].map(_slurm_duration)
    else:
        run = times("End") - start
    nnodes = pd.to_numeric(frame.get("NNodes", pd.Series("1", index=frame.index)), errors="coerce")
    ncpus = pd.to_numeric(frame.get("NCPUS", nnodes.astype(str)), errors="coerce")
    never_started = start.isna()
    dropped["never started (no Start time)"] = int(never_started.sum())
    jobs = pd.DataFrame({
        "job_id": frame["JobID"].str.extract(r"^(\d+)", expand=False).astype(float).fillna(-1)
        .astype(np.int64),
        "submit": submit, "wait": start - submit, "run": run,
        "req_time": frame["Timelimit"].map(_slurm_duration), "procs": ncpus,
        "user": frame["User"], "group": frame.get("Group", frame["User"]).astype("category")
        .cat.codes.astype(np.int64),
        "queue": frame.get("Partition", pd.Series("", index=frame.index)),
        "status": frame.get("State", pd.Series("", index=frame.index)).str.split().str[0]
        .map(lambda s: 1 if s == "COMPLETED" else 0),
        "nodes": nnodes, "ppn": np.ceil(ncpus / nnodes.clip(lower=1)), "line": frame["line"],
    })[~never_started.to_numpy()]
    node_lists = None
    hosts_by_job = frame.loc[~never_started, "NodeList"].map(expand_hostlist) \
        if "NodeList" in frame else None
    if hosts_by_job is not None and hosts_by_job.map(len).sum() > 0:
        names = sorted({h for hosts in hosts_by_job for h in hosts})
        index = {h: i for i, h in enumerate(names)}
        node_lists = [np.array(sorted(index[h] for h in hosts), dtype=np.int64)
                      for hosts in hosts_by_job]
        max_cores = int(np.nanmax(jobs["ppn"])) if len(jobs) else 1
        machine = Machine(np.full(len(names), max_cores, dtype=np.int64), names)
    else:
        count = int(np.nansum(jobs.groupby(jobs["submit"] // 60)["nodes"].sum().max()) or 1)
        machine = Machine(np.full(count, int(np.nanmax(jobs["ppn"]) or 1), dtype=np.int64),
                          [f"n{i}" for i in range(count)])
    trace = _finish(jobs, machine, source, "sacct", node_lists)
    trace.dropped = {**dropped, **trace.dropped}
    return trace


def _finish(jobs: pd.DataFrame, machine: Machine, source: str, layout: str,
            node_lists: list[np.ndarray] | None) -> Trace:
    """Drop (and count) unusable jobs, sort by submit time, and tidy the dtypes."""
    reasons = {
        "unknown runtime": ~(jobs["run"] >= 0),
        "no requested time": ~(jobs["req_time"] > 0),
        "no processor count": ~(jobs["procs"] > 0),
        "unknown submit time": ~(jobs["submit"] >= 0),
        "larger than the machine": (jobs["ppn"] > machine.cores.max())
        | (jobs["nodes"] > machine.size),
    }
    keep = np.ones(len(jobs), dtype=bool)
    dropped = {}
    for why, mask in reasons.items():
        mask = mask.to_numpy() & keep
        dropped[why] = int(mask.sum())
        keep &= ~mask
    if not keep.any():
        raise ValueError(f"{source}: no usable jobs ({', '.join(f'{n} {w}' for w, n in dropped.items() if n)})")
    jobs = jobs[keep]
    if node_lists is not None:
        node_lists = [lst for lst, k in zip(node_lists, keep) if k]
    order = np.argsort(jobs["submit"].to_numpy(), kind="stable")
    jobs = jobs.iloc[order].reset_index(drop=True)
    if node_lists is not None:
        node_lists = [node_lists[i] for i in order]
    jobs["wait"] = jobs["wait"].clip(lower=0)
    for name in ("nodes", "ppn"):
        jobs[name] = jobs[name].clip(lower=1).astype(np.int64)
    jobs["user"] = jobs["user"].astype(str)
    jobs["queue"] = jobs["queue"].astype(str)
    return Trace(jobs, machine, source, layout, dropped, node_lists)
