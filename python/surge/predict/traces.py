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

sacct times
-----------
sacct prints Submit, Start and End as the local time of the machine it ran on, with no
offset (``2024-03-31T03:30:00``). They are read as local times of the zone given
(``read_trace(..., timezone=)``, ``surge-predict --tz Europe/Berlin``; an IANA name), by
default the local zone of the machine reading them (``TZ``, else ``/etc/localtime``): run the
reader where sacct ran, or name that machine's zone. Across a change to daylight saving time
the hour that does not exist is moved forward; in the hour that occurs twice, a time is read
as its first occurrence (daylight saving time), as ``datetime``'s ``fold=0`` does. The zone
becomes ``Trace.timezone``, so hours and weekdays are the site's. Durations (Elapsed,
Timelimit) are read as :func:`_slurm_duration` says.

SWF header
----------
The comment lines at the top of an SWF file (``; Key: value``) are read into
:class:`SwfHeader`. ``UnixStartTime`` is added to the submit times (SWF times are seconds
since that moment, so without it RICC's jobs would seem to start in January 1970),
``TimeZoneString`` sets the local time the hour/weekday features use, and ``MaxNodes`` /
``MaxProcs`` set the machine. Where the header and a ``.machines`` file beside the trace
describe different machines, the header wins and a warning says so
(``Trace.warnings``, printed with the trace summary).
"""

from __future__ import annotations

import gzip
import io
import math
import os
import re
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import hostlist
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
    #: Time zone of the site (SWF ``TimeZoneString``, the zone sacct's times were read in):
    #: an IANA name or a tzinfo; None = UTC.
    timezone: str | tzinfo | None = None
    #: Things the reader noticed and the user should know (header vs .machines file, ...).
    warnings: list[str] = field(default_factory=list)

    def head(self, n: int) -> "Trace":
        """The first ``n`` jobs (in submit order): small, time-contiguous slices for tests."""
        lists = None if self.node_lists is None else self.node_lists[:n]
        return Trace(self.jobs.iloc[:n].reset_index(drop=True), self.machine, self.source,
                     self.layout, dict(self.dropped), lists, self.timezone, list(self.warnings))

    @property
    def has_waits(self) -> bool:
        """Whether the trace records how long its jobs really waited."""
        return bool(self.jobs["wait"].notna().any())

    def local_time(self, seconds) -> pd.DatetimeIndex:
        """Unix seconds as the site's local time (UTC when the trace names no time zone)."""
        stamps = pd.to_datetime(np.atleast_1d(np.asarray(seconds, dtype=np.float64)), unit="s",
                                utc=True)
        return stamps.tz_convert(self.timezone) if self.timezone else stamps

    def summary(self) -> str:
        dropped = ", ".join(f"{n} {why}" for why, n in self.dropped.items() if n) or "none"
        first, last = self.local_time(self.jobs["submit"].iloc[[0, -1]].to_numpy())
        text = (f"{self.source}: {len(self.jobs)} jobs ({self.layout} layout), "
                f"{self.machine.size} nodes, submitted {first:%Y-%m-%d} to {last:%Y-%m-%d} "
                f"({self.timezone or 'UTC'}), dropped: {dropped}")
        return "\n".join([text] + [f"warning: {w}" for w in self.warnings])


def _open_text(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        return handle.read()


def read_trace(path: str | Path, layout: str = "auto",
               timezone: str | tzinfo | None = None) -> Trace:
    """Read a trace file (``.gz`` is decompressed); ``layout`` is auto-detected unless given.

    ``timezone``: the zone sacct's local times are in (None: this machine's, see the module
    notes). SWF times are Unix seconds and the header names the zone, so it is not used there
    (a warning says so)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trace not found: {path}")
    text = _open_text(path)
    if layout == "auto":
        layout = detect_layout(text)
    if layout == "sacct":
        return read_sacct_text(text, str(path), timezone)
    if layout in ("swf", "argonne", "alea"):
        trace = read_swf_text(text, str(path), layout, machines_file=_machines_file(path))
        if timezone is not None:
            trace.warnings.append(f"time zone {timezone} not used: SWF times are Unix seconds, "
                                  "and the header's TimeZoneString names the site's zone")
        return trace
    raise ValueError(f"unknown trace layout {layout!r} (swf, argonne, alea, sacct)")


def local_timezone() -> tzinfo:
    """This machine's local time zone: ``TZ`` when it names an IANA zone or a zone file, else
    ``/etc/localtime`` (by the zone name it links to, else ``/etc/timezone``, else its
    contents), else UTC."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            if os.path.isabs(name):
                with open(name, "rb") as handle:
                    return ZoneInfo.from_file(handle, key=name)
            return ZoneInfo(name)
        except (OSError, ValueError, ZoneInfoNotFoundError):
            pass             # e.g. a POSIX rule such as "CET-1CEST": fall back to the system's
    target = os.path.realpath("/etc/localtime")
    candidates = [target.split("/zoneinfo/", 1)[1]] if "/zoneinfo/" in target else []
    try:
        candidates.append(Path("/etc/timezone").read_text().strip())
    except OSError:
        pass
    for candidate in candidates:
        try:
            return ZoneInfo(candidate)
        except (ValueError, ZoneInfoNotFoundError):
            continue
    try:
        with open("/etc/localtime", "rb") as handle:
            return ZoneInfo.from_file(handle, key="localtime")
    except (OSError, ValueError):
        return ZoneInfo("UTC")


def time_zone(zone: str | tzinfo | None) -> tzinfo:
    """``zone`` as a tzinfo: an IANA name (``Europe/Berlin``), a tzinfo, or None for this
    machine's local zone; an unknown name raises ValueError."""
    if zone is None:
        return local_timezone()
    if isinstance(zone, tzinfo):
        return zone
    try:
        return ZoneInfo(zone)
    except (ValueError, ZoneInfoNotFoundError):
        raise ValueError(f"unknown time zone {zone!r} (an IANA name such as Europe/Berlin or "
                         "UTC)") from None


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


@dataclass
class SwfHeader:
    """The ``; Key: value`` comment lines of an SWF file (the Parallel Workloads Archive's
    header). Repeated keys (``Queue``, ``Partition``, ``Note``) keep every value."""

    fields: dict[str, list[str]] = field(default_factory=dict)

    def text(self, key: str) -> str | None:
        values = self.fields.get(key.lower())
        return values[0] if values else None

    def number(self, key: str) -> float | None:
        """The leading number of a field; None when absent or not a number (e.g. ``-1``)."""
        match = re.match(r"\s*(\d+(?:\.\d*)?)", self.text(key) or "")
        return float(match.group(1)) if match else None


def parse_swf_header(text: str) -> SwfHeader:
    """Read the header comments that come before the first job line."""
    header = SwfHeader()
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith(";"):
            break                      # the header ends at the first job line
        key, colon, value = stripped[1:].partition(":")
        if colon and key.strip() and " " not in key.strip():
            header.fields.setdefault(key.strip().lower(), []).append(value.strip())
    return header


def read_machines_file(path: Path) -> list[tuple[str, int, int]]:
    """Alea's ``.machines`` file: one cluster per line, ``id name nodes cores ...``."""
    clusters = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        try:
            clusters.append((parts[1], int(parts[2]), int(parts[3])))
        except (IndexError, ValueError):
            raise TraceFormatError(str(path), number,
                                   "expected 'id name nodes cores ...'") from None
    return clusters


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
    header = parse_swf_header(text)
    warnings: list[str] = []
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
    start = header.number("UnixStartTime")
    if start is not None:
        # SWF submit times count from UnixStartTime; traces without it (Theta, Mira) already
        # hold Unix times.
        jobs["submit"] = jobs["submit"] + start
    declared = header.number("MaxRecords") or header.number("MaxJobs")
    if declared is not None and int(declared) != len(rows):
        warnings.append(f"the header declares {int(declared)} records, the file has "
                        f"{len(rows)} job lines (truncated or concatenated trace?)")
    clusters = read_machines_file(machines_file) if machines_file else None
    node_lists = None
    if layout == "alea":
        machine, node_lists, jobs = _alea_allocations(rows, numbers, source, jobs, clusters,
                                                      header, warnings)
    else:
        machine, jobs = _swf_machine(header, jobs, layout, clusters, warnings)
    trace = _finish(jobs, machine, source, layout, node_lists)
    trace.timezone = _timezone(header.text("TimeZoneString"), warnings)
    trace.warnings = warnings
    return trace


def _timezone(name: str | None, warnings: list[str]) -> str | None:
    if not name:
        return None
    try:
        pd.Timestamp(0, tz=name)
    except Exception:  # noqa: BLE001 - pandas raises several types for unknown zones
        warnings.append(f"unknown TimeZoneString {name!r}: local times are shown in UTC")
        return None
    return name


def _named(zone: tzinfo) -> bool:
    """Whether ``zone`` is a ZoneInfo that its key loads again (an IANA name to show)."""
    key = getattr(zone, "key", None)
    try:
        return bool(key) and ZoneInfo(key) == zone
    except (ValueError, ZoneInfoNotFoundError):
        return False


def _machines_text(clusters: list[tuple[str, int, int]]) -> str:
    return " + ".join(f"{nodes} {name} nodes x {cores} cores" for name, nodes, cores in clusters)


def _swf_machine(header: SwfHeader, jobs: pd.DataFrame, layout: str,
                 clusters: list[tuple[str, int, int]] | None,
                 warnings: list[str]) -> tuple[Machine, pd.DataFrame]:
    """Nodes and cores per node from the SWF header (else the ``.machines`` file, else the
    largest job); jobs get a (nodes, ppn) shape."""
    max_nodes = header.number("MaxNodes")
    max_procs = header.number("MaxProcs")
    if clusters:
        file_nodes = sum(nodes for _, nodes, _ in clusters)
        file_procs = sum(nodes * cores for _, nodes, cores in clusters)
        if max_nodes is None and max_procs is None:
            max_nodes, max_procs = float(file_nodes), float(file_procs)
        elif (max_nodes is not None and int(max_nodes) != file_nodes) or \
                (max_procs is not None and int(max_procs) != file_procs):
            warnings.append(
                f"the SWF header says MaxNodes {_int_or_dash(max_nodes)}, MaxProcs "
                f"{_int_or_dash(max_procs)}; the .machines file says {file_nodes} nodes, "
                f"{file_procs} cores ({_machines_text(clusters)}): using the header")
    if max_nodes is None:
        if max_procs is None:
            max_procs = float(jobs["procs"].max())
            warnings.append(f"no MaxNodes/MaxProcs in the header and no .machines file: the "
                            f"machine is taken to be the largest job, {int(max_procs)} processors")
        max_nodes = max_procs
    cores = 1 if layout == "argonne" or not max_procs else max(1, int(max_procs // max_nodes))
    if layout != "argonne" and max_procs and int(max_procs) != cores * int(max_nodes):
        warnings.append(f"MaxProcs {int(max_procs)} is not a multiple of MaxNodes "
                        f"{int(max_nodes)}: simulating {int(max_nodes)} nodes x {cores} cores")
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


def _int_or_dash(value: float | None) -> str:
    return "-" if value is None else str(int(value))


def _allocation_unit(nodes: np.ndarray, max_nodes: int) -> int:
    """Largest power-of-two block that 95% of jobs use whole multiples of (Mira: 512)."""
    unit = 1
    while unit * 2 <= max_nodes and max_nodes % (unit * 2) == 0 and \
            np.mean(nodes % (unit * 2) == 0) >= 0.95:
        unit *= 2
    return unit


def _alea_allocations(rows, numbers, source, jobs, clusters, header, warnings):
    """Real per-job node lists of the Alea variant, and the machine they define.

    The node IDs in the trace are site IDs; the machine is the set of IDs that occur, each
    sized by the smallest cluster in the ``.machines`` file whose nodes can hold the largest
    per-node CPU count seen on it. Nodes that no job ever used cannot be placed on real node
    IDs, so they are left out, and a warning says how many that is.
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
    sizes = sorted(cores for _, _, cores in clusters) if clusters else []
    cores = np.array([next((s for s in sizes if s >= m), m) for m in max_per_node], dtype=np.int64)
    described = header.number("MaxNodes") or \
        (sum(nodes for _, nodes, _ in clusters) if clusters else None)
    if described is not None and int(described) != len(site_ids):
        where = "the SWF header" if header.number("MaxNodes") else \
            f"the .machines file ({_machines_text(clusters)})"
        warnings.append(f"{where} describes {int(described)} nodes, the trace's node lists "
                        f"name {len(site_ids)}: simulating the {len(site_ids)} nodes jobs used")
    jobs = jobs.assign(nodes=shapes[:, 0], ppn=shapes[:, 1],
                       queue=[row[19] for row in rows])
    return Machine(cores, [str(i) for i in site_ids]), lists, jobs


_SACCT_REQUIRED = {"JobID", "User", "Submit", "Start", "Timelimit"}


_NUMBER = r"(\d+(?:\.\d*)?)"
_DURATION = re.compile(rf"(?:(\d+)-)?{_NUMBER}(?::{_NUMBER})?(?::{_NUMBER})?")


def _slurm_duration(value: str) -> float:
    """A Slurm duration (sbatch ``--time``, sacct ``Elapsed`` / ``Timelimit``) -> seconds.

    The forms are Slurm's:

    ==========================  =====================================================
    ``M``                       minutes (Timelimit ``60``: one hour)
    ``M:S``                     minutes and seconds
    ``H:M:S``                   hours, minutes, seconds (sacct's ``Elapsed`` form)
    ``D-H``                     days and hours
    ``D-H:M``                   days, hours, minutes (not minutes:seconds)
    ``D-H:M:S``                 days, hours, minutes, seconds
    ==========================  =====================================================

    A field of seconds may have a fraction (``MM:SS.mmm``, as in TotalCPU). Where there
    is no value the result is NaN: an empty field, and the words sacct prints instead of a
    time - ``UNLIMITED`` (no limit: nothing a scheduler can plan with), ``Partition_Limit``
    (the partition's limit, which sacct does not show), ``INVALID``, ``NONE``, ``Unknown``,
    or any other word. A job whose Timelimit or Elapsed is NaN is dropped and counted
    (``Trace.dropped``). Anything else (``1:2:3:4``, ``1-2-3``) raises ValueError.
    """
    text = value.strip()
    if not text or re.fullmatch(r"[A-Za-z_]+", text):
        return math.nan
    match = _DURATION.fullmatch(text)
    days, *parts = match.groups() if match else (None,)
    parts = [f for f in parts if f is not None]
    # Only a field of seconds, the last, may have a fraction.
    seconds_last = len(parts) == 3 or (days is None and len(parts) == 2)
    if not match or any("." in f for f in parts[:-1]) or ("." in parts[-1] and not seconds_last):
        raise ValueError(f"not a Slurm duration: {value!r} (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)")
    fields = [float(f) for f in parts]
    if days is not None:
        # After "D-" the fields are hours, minutes, seconds.
        hours, minutes, seconds = (fields + [0.0, 0.0])[:3]
        return int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    if len(fields) == 1:
        return fields[0] * 60                       # bare minutes
    if len(fields) == 2:
        return fields[0] * 60 + fields[1]           # minutes:seconds
    return fields[0] * 3600 + fields[1] * 60 + fields[2]


#: What sacct prints in NodeList for a job that has no nodes.
_NO_NODES = {"", "None assigned", "(null)"}


def expand_hostlist(text: str) -> list[str]:
    """Slurm hostlist -> host names, in order: ``node[01-03,07],gpu1`` -> ``node01 node02
    node03 node07 gpu1``, ``n[1-2]-ib`` -> ``n1-ib n2-ib``, ``r[1-2]n[01-02]`` -> ``r1n01
    r1n02 r2n01 r2n02``; no host for sacct's "None assigned" and "(null)".

    Expanded by python-hostlist (``hostlist.expand_hostlist``); a list it cannot read raises
    ValueError naming the list."""
    text = text.strip()
    if text in _NO_NODES:
        return []
    try:
        return hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as error:
        raise ValueError(f"not a Slurm hostlist: {text!r} ({error})") from None


def read_sacct_text(text: str, source: str = "<sacct>",
                    timezone: str | tzinfo | None = None) -> Trace:
    """Parse ``sacct --parsable2`` output (header line, ``|`` separators, job steps skipped).

    Submit/Start/End are local times of ``timezone`` (None: this machine's local zone; see
    the module notes)."""
    zone = time_zone(timezone)
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

    epoch = pd.Timestamp(0, tz="UTC")

    def times(column: str) -> pd.Series:
        parsed = pd.to_datetime(frame[column], format="%Y-%m-%dT%H:%M:%S", errors="coerce")
        # Local times without an offset (see the module notes): the repeated hour of a change
        # from daylight saving time is read as its first occurrence, a missing one moved on.
        local = parsed.dt.tz_localize(zone, ambiguous=np.ones(len(parsed), dtype=bool),
                                      nonexistent="shift_forward")
        return (local - epoch).dt.total_seconds()

    submit, start = times("Submit"), times("Start")
    bad_submit = submit.isna()
    if bad_submit.any():
        first = frame.loc[bad_submit, "line"].iloc[0]
        raise TraceFormatError(source, int(first),
                               f"Submit is not a time: {frame.loc[bad_submit, 'Submit'].iloc[0]!r}")
    def durations(column: str) -> pd.Series:
        values = []
        for text, number in zip(frame[column], frame["line"]):
            try:
                values.append(_slurm_duration(text))
            except ValueError as error:
                raise TraceFormatError(source, int(number), f"{column}: {error}") from None
        return pd.Series(values, index=frame.index, dtype=np.float64)

    if "Elapsed" in frame:
        run = durations("Elapsed")
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
        "req_time": durations("Timelimit"), "procs": ncpus,
        "user": frame["User"], "group": frame.get("Group", frame["User"]).astype("category")
        .cat.codes.astype(np.int64),
        "queue": frame.get("Partition", pd.Series("", index=frame.index)),
        "status": frame.get("State", pd.Series("", index=frame.index)).str.split().str[0]
        .map(lambda s: 1 if s == "COMPLETED" else 0),
        "nodes": nnodes, "ppn": np.ceil(ncpus / nnodes.clip(lower=1)), "line": frame["line"],
    })[~never_started.to_numpy()]
    node_lists = None
    hosts_by_job = None
    if "NodeList" in frame:
        started = frame.loc[~never_started]
        hosts = []
        for text, number in zip(started["NodeList"], started["line"]):
            try:
                hosts.append(expand_hostlist(text))
            except ValueError as error:
                raise TraceFormatError(source, int(number), f"NodeList: {error}") from None
        hosts_by_job = pd.Series(hosts, index=started.index, dtype=object)
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
    trace.timezone = zone.key if _named(zone) else zone
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
    # SWF writes -1 for "not recorded": such waits stay unknown (NaN), not zero, so that a
    # comparison with the real schedule never counts them as jobs that started at once.
    jobs["wait"] = jobs["wait"].where(jobs["wait"] >= 0)
    for name in ("nodes", "ppn"):
        jobs[name] = jobs[name].clip(lower=1).astype(np.int64)
    jobs["user"] = jobs["user"].astype(str)
    jobs["queue"] = jobs["queue"].astype(str)
    return Trace(jobs, machine, source, layout, dropped, node_lists)
