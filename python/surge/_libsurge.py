"""Loading libsurge (the C API, ``crates/surge-capi/include/surge.h``) for the ctypes
bindings :mod:`surge.staging` and :mod:`surge.workflow`, and the conventions they share.

The library is found through ``SURGE_LIB`` (a path to libsurge.so), else beside the ``surge``
command of this source tree (``target/release``), else on the system's library path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

_loaded = None

_int_p = ctypes.POINTER(ctypes.c_int)
_u64_p = ctypes.POINTER(ctypes.c_uint64)
_handle = ctypes.c_void_p                      # an opaque struct's pointer (surge_watch *, ...)


class QueueCounts(ctypes.Structure):
    """``surge_queue_counts``."""

    _fields_ = [("produced", ctypes.c_uint64), ("claimed", ctypes.c_uint64), ("done", ctypes.c_uint64),
                ("backlog", ctypes.c_uint64), ("expired", ctypes.c_uint64),
                ("production_per_s", ctypes.c_double), ("consumption_per_s", ctypes.c_double)]


_path_pair = [ctypes.c_char_p, ctypes.c_char_p]
_query = [ctypes.c_char_p, _int_p, _int_p, _int_p, _int_p]

#: Every call of surge.h: name -> (restype, argtypes), applied by :func:`load`. Enums are
#: C ints; opaque handles are void pointers; output buffers (``char *path``) are c_char_p,
#: to which ctypes passes a ``create_string_buffer``. python/tests/test_bindings.py checks this
#: table against the header and that every call the Python side makes is in it.
SIGNATURES: dict[str, tuple[object, list]] = {
    "surge_stage_file_in": (ctypes.c_int, _path_pair),
    "surge_stage_dir_in": (ctypes.c_int, _path_pair),
    "surge_stage_list_in": (ctypes.c_int, _path_pair),
    "surge_stage_file_out": (ctypes.c_int, _path_pair + [ctypes.c_int]),
    "surge_stage_dir_out": (ctypes.c_int, _path_pair + [ctypes.c_int]),
    "surge_stage_list_out": (ctypes.c_int, _path_pair + [ctypes.c_int]),
    "surge_query_file_stage": (ctypes.c_int, _query),
    "surge_query_dir_stage": (ctypes.c_int, _query),
    "surge_query_list_stage": (ctypes.c_int, _query),
    "surge_wait_file_stage": (ctypes.c_int, [ctypes.c_char_p]),
    "surge_wait_dir_stage": (ctypes.c_int, [ctypes.c_char_p]),
    "surge_wait_list_stage": (ctypes.c_int, [ctypes.c_char_p]),
    "surge_terminate_file_stage": (ctypes.c_int, [ctypes.c_char_p]),
    "surge_terminate_dir_stage": (ctypes.c_int, [ctypes.c_char_p]),
    "surge_terminate_list_stage": (ctypes.c_int, [ctypes.c_char_p]),
    "surge_open_failed_stage": (_handle, [ctypes.c_char_p]),
    "surge_next_failed_stage": (ctypes.c_int, [_handle, ctypes.c_char_p, ctypes.c_size_t]),
    "surge_close_failed_stage": (None, [_handle]),
    "surge_watch_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                                        ctypes.POINTER(_handle)]),
    "surge_watch_next": (ctypes.c_int, [_handle, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                        _u64_p, _u64_p]),
    "surge_watch_close": (None, [_handle]),
    "surge_queue_claim": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.c_double, ctypes.c_int, ctypes.c_char_p,
                                         ctypes.c_size_t, _u64_p]),
    "surge_queue_done": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64]),
    "surge_queue_status": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.POINTER(QueueCounts)]),
    "surge_last_error": (ctypes.c_char_p, []),
}


def _find_library() -> str:
    explicit = os.environ.get("SURGE_LIB")
    if explicit:
        return explicit
    # python/surge/_libsurge.py -> <repo>/target/release/libsurge.so
    built = Path(__file__).resolve().parents[2] / "target" / "release" / "libsurge.so"
    if built.exists():
        return str(built)
    found = ctypes.util.find_library("surge")
    if found:
        return found
    raise ImportError("libsurge not found: build it (make build) or set SURGE_LIB to libsurge.so")


def load() -> ctypes.CDLL:
    """The library, loaded once per process."""
    global _loaded
    if _loaded is None:
        lib = ctypes.CDLL(_find_library(), use_errno=True)
        for name, (restype, argtypes) in SIGNATURES.items():
            # A library older than this package may lack a call: it fails when used.
            function = getattr(lib, name, None)
            if function is not None:
                function.restype, function.argtypes = restype, argtypes
        _loaded = lib
    return _loaded


def path(p: str | os.PathLike) -> bytes:
    return os.fsencode(os.fspath(p))


#: The path buffer an output path starts in (PATH_MAX), and the most it grows to. A path that
#: does not fit answers -ERANGE, the library keeps its item (a failed stage, a publication, a
#: claim), and the call is made again with :func:`grown_path_buffer`.
PATH_BUFFER = 4096
MAX_PATH_BUFFER = 1 << 24


def path_buffer() -> ctypes.Array:
    """A buffer for an output path, of :data:`PATH_BUFFER` bytes."""
    return ctypes.create_string_buffer(PATH_BUFFER)


def grown_path_buffer(buffer: ctypes.Array, error: type[OSError]) -> ctypes.Array:
    """A buffer twice as large as ``buffer``, for a path that did not fit it; ``error(ERANGE)``
    past :data:`MAX_PATH_BUFFER`."""
    if len(buffer) >= MAX_PATH_BUFFER:
        raise error(errno.ERANGE, f"a path does not fit {MAX_PATH_BUFFER} bytes")
    return ctypes.create_string_buffer(2 * len(buffer))


def check(rc: int, error: type[OSError]) -> None:
    """A negative return raises ``error(errno, the library's message)``."""
    if rc < 0:
        message = (load().surge_last_error() or b"").decode(errors="replace")
        raise error(-rc, message or os.strerror(-rc))
