"""Workflow coupling from Python: the files published in a directory of a Surge instance, as
they are published, and consumer groups that hand each one to a single consumer (a ctypes
binding of libsurge; see docs/workflow.md)::

    from surge import workflow
    for f in workflow.watch("/mnt/bb/out", pattern="plt*.h5"):     # blocks for the next one
        render(f.path)                                               # f.cursor: resume point

    while (claim := workflow.claim("/mnt/bb/out", "vis", pattern="plt*.h5", timeout=60)):
        render(claim.path)
        workflow.done(claim.path, token=claim.token)

A file is published when a handle that wrote it is closed, or when it is renamed or linked
into the directory: never while it is being written. Failures raise :class:`WorkflowError`,
an ``OSError`` with the errno and the library's message.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
from typing import Iterator, NamedTuple, Optional

from . import _libsurge as libsurge

_lib = libsurge.load()      # every call's argtypes and restype: libsurge.SIGNATURES
_Counts = libsurge.QueueCounts

_UNKNOWN_SIZE = 2**64 - 1
# What a wait is cut into, so that Ctrl-C reaches Python between the library's waits.
_SLICE_MS = 1000


class WorkflowError(OSError):
    """A workflow call failed; ``errno`` says how, ``strerror`` is libsurge's message."""


class Published(NamedTuple):
    path: str
    cursor: int
    size: Optional[int]


class Claim(NamedTuple):
    path: str
    token: int


class QueueStatus(NamedTuple):
    produced: int
    claimed: int
    done: int
    backlog: int
    expired: int
    production_per_s: float
    consumption_per_s: float

    @property
    def kappa(self) -> Optional[float]:
        """Production over consumption (seed 001's R_sim / R_vis); None while nothing was consumed lately."""
        return self.production_per_s / self.consumption_per_s if self.consumption_per_s > 0 else None


def _wait_ms(deadline_left: Optional[float]) -> int:
    if deadline_left is None:
        return _SLICE_MS
    return max(0, min(_SLICE_MS, int(deadline_left * 1000)))


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else deadline - time.monotonic()


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


def watch(directory, pattern: Optional[str] = None, from_cursor: int = 0,
          timeout: Optional[float] = None) -> Iterator[Published]:
    """The files published in ``directory`` after ``from_cursor`` (0: from the oldest the log
    holds) whose names match the glob ``pattern`` (None: every name not starting with '.'),
    in publication order, their paths whole whatever their length; waits for the next one,
    and ends once none came for ``timeout`` seconds (None: never)."""
    handle = ctypes.c_void_p()
    libsurge.check(_lib.surge_watch_open(libsurge.path(directory), pattern.encode() if pattern else None,
                                         ctypes.c_uint64(from_cursor), ctypes.byref(handle)), WorkflowError)
    # A longer path than the buffer: the library keeps the publication (-ERANGE) and the
    # next call, with a buffer twice as large, gets it.
    path = libsurge.path_buffer()
    cursor, size = ctypes.c_uint64(0), ctypes.c_uint64(0)
    try:
        deadline = _deadline(timeout)
        while True:
            left = _left(deadline)
            rc = _lib.surge_watch_next(handle, _wait_ms(left), path, len(path), ctypes.byref(cursor), ctypes.byref(size))
            if rc == -errno.ETIMEDOUT:
                if left is not None and left <= _SLICE_MS / 1000:
                    return
                continue
            if rc == -errno.ERANGE:
                path = libsurge.grown_path_buffer(path, WorkflowError)
                continue
            libsurge.check(rc, WorkflowError)
            yield Published(os.fsdecode(path.value), cursor.value, None if size.value == _UNKNOWN_SIZE else size.value)
            deadline = _deadline(timeout)
    finally:
        _lib.surge_watch_close(handle)


def claim(directory, group: str, pattern: Optional[str] = None, lease: float = 300.0,
          timeout: Optional[float] = None) -> Optional[Claim]:
    """The next file of ``directory`` for consumer group ``group`` (made with ``pattern`` by its
    first claim), held for ``lease`` seconds, its path whole whatever its length; waits for
    one up to ``timeout`` seconds (None: for ever) and answers None if none came."""
    # A longer path than the buffer: the library keeps the claim for this process (-ERANGE)
    # and the next call, with a buffer twice as large, gets the same file at once.
    path = libsurge.path_buffer()
    token = ctypes.c_uint64(0)
    deadline = _deadline(timeout)
    while True:
        left = _left(deadline)
        rc = _lib.surge_queue_claim(libsurge.path(directory), group.encode(), pattern.encode() if pattern else None,
                                    ctypes.c_double(lease), _wait_ms(left), path, len(path), ctypes.byref(token))
        if rc == -errno.ETIMEDOUT:
            if left is not None and left <= _SLICE_MS / 1000:
                return None
            continue
        if rc == -errno.ERANGE:
            path = libsurge.grown_path_buffer(path, WorkflowError)
            continue
        libsurge.check(rc, WorkflowError)
        return Claim(os.fsdecode(path.value), token.value)


def done(path, group: Optional[str] = None, token: Optional[int] = None) -> None:
    """The consumer is done with ``path``, claimed in ``group`` (None: the one group holding it);
    with ``token``, only that claim (WorkflowError ENOENT if its lease ran out and it went to
    another consumer)."""
    libsurge.check(_lib.surge_queue_done(libsurge.path(path), group.encode() if group else None,
                                         ctypes.c_uint64(token or 0)), WorkflowError)


def status(directory, group: str) -> QueueStatus:
    """Consumer group ``group`` of ``directory``: counts, and rates over the last minute."""
    counts = _Counts()
    libsurge.check(_lib.surge_queue_status(libsurge.path(directory), group.encode(), ctypes.byref(counts)), WorkflowError)
    return QueueStatus(*(getattr(counts, name) for name, _ in _Counts._fields_))
