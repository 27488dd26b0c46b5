"""Staging between the PFS and a Surge instance, from Python.

A ctypes binding of libsurge (the C API in ``crates/surge-capi/include/surge.h``), with the
same calls and semantics as Cray DataWarp's libdatawarp::

    from surge import staging
    staging.stage_file_out("/mnt/bb/chk0010.h5", "/pfs/run/chk0010.h5")   # immediate, in the background
    staging.wait_file_stage("/mnt/bb/chk0010.h5")                          # raises StageError if it failed
    staging.query_file_stage("/mnt/bb/chk0010.h5")  # StageCounts(complete=1, pending=0, deferred=0, failed=0)

Burst-buffer paths are paths on a Surge mount, or paths inside the instance named by
``SURGE_INSTANCE``. Failures raise :class:`StageError`, an ``OSError`` with the errno and the
library's message.

The library is found as :mod:`surge._libsurge` says.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import NamedTuple

from . import _libsurge as libsurge

IMMEDIATE = 0
AT_JOB_END = 1
REVOKE = 2


class StageError(OSError):
    """A staging call failed; ``errno`` says how, ``strerror`` is libsurge's message."""


class StageCounts(NamedTuple):
    complete: int
    pending: int
    deferred: int
    failed: int


_lib = libsurge.load()      # every call's argtypes and restype: libsurge.SIGNATURES


_path = libsurge.path


def _check(rc: int) -> None:
    libsurge.check(rc, StageError)


def _stage_in(function, bb_path, pfs_path) -> None:
    _check(function(_path(bb_path), _path(pfs_path)))


def _stage_out(function, bb_path, pfs_path, when: int) -> None:
    _check(function(_path(bb_path), _path(pfs_path), ctypes.c_int(when)))


def _query(function, bb_path) -> StageCounts:
    counts = [ctypes.c_int(0) for _ in range(4)]
    _check(function(_path(bb_path), *(ctypes.byref(c) for c in counts)))
    return StageCounts(*(c.value for c in counts))


def stage_file_in(bb_path, pfs_path) -> None:
    """PFS file -> burst buffer, in the background (a missing source raises at once)."""
    _stage_in(_lib.surge_stage_file_in, bb_path, pfs_path)


def stage_dir_in(bb_dir, pfs_dir) -> None:
    _stage_in(_lib.surge_stage_dir_in, bb_dir, pfs_dir)


def stage_list_in(bb_dir, pfs_list) -> None:
    """``pfs_list``: lines of ``PFS_SOURCE BB_DESTINATION`` (relative destinations under bb_dir)."""
    _stage_in(_lib.surge_stage_list_in, bb_dir, pfs_list)


def stage_file_out(bb_path, pfs_path, when: int = IMMEDIATE) -> None:
    """Burst buffer -> PFS: now (IMMEDIATE), at job end (AT_JOB_END), or drop a job-end request (REVOKE)."""
    _stage_out(_lib.surge_stage_file_out, bb_path, pfs_path, when)


def stage_dir_out(bb_dir, pfs_dir, when: int = IMMEDIATE) -> None:
    _stage_out(_lib.surge_stage_dir_out, bb_dir, pfs_dir, when)


def stage_list_out(bb_dir, pfs_list, when: int = IMMEDIATE) -> None:
    _stage_out(_lib.surge_stage_list_out, bb_dir, pfs_list, when)


def query_file_stage(bb_path) -> StageCounts:
    return _query(_lib.surge_query_file_stage, bb_path)


def query_dir_stage(bb_dir) -> StageCounts:
    return _query(_lib.surge_query_dir_stage, bb_dir)


def query_list_stage(bb_dir) -> StageCounts:
    return _query(_lib.surge_query_list_stage, bb_dir)


def wait_file_stage(bb_path) -> None:
    """Blocks until no stage of the path is pending; raises StageError if the last one failed."""
    _check(_lib.surge_wait_file_stage(_path(bb_path)))


def wait_dir_stage(bb_dir) -> None:
    _check(_lib.surge_wait_dir_stage(_path(bb_dir)))


def wait_list_stage(bb_dir) -> None:
    _check(_lib.surge_wait_list_stage(_path(bb_dir)))


def terminate_file_stage(bb_path) -> None:
    _check(_lib.surge_terminate_file_stage(_path(bb_path)))


def terminate_dir_stage(bb_dir) -> None:
    _check(_lib.surge_terminate_dir_stage(_path(bb_dir)))


def terminate_list_stage(bb_dir) -> None:
    _check(_lib.surge_terminate_list_stage(_path(bb_dir)))


def failed_stages(bb_dir) -> list[str]:
    """Burst-buffer paths of the failed stages at or below ``bb_dir``, whole whatever their
    length: a path longer than the buffer (the library answers -ERANGE and keeps it) is asked
    for again with a buffer twice as large."""
    handle = _lib.surge_open_failed_stage(_path(bb_dir))
    if not handle:
        _check(-(ctypes.get_errno() or errno.EIO))
    paths = []
    buffer = libsurge.path_buffer()
    try:
        while True:
            rc = _lib.surge_next_failed_stage(handle, buffer, len(buffer))
            if rc == 0:
                break
            if rc == -errno.ERANGE:
                buffer = libsurge.grown_path_buffer(buffer, StageError)
                continue
            _check(rc)
            paths.append(os.fsdecode(buffer.value))
    finally:
        _lib.surge_close_failed_stage(handle)
    return paths
