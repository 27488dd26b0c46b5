"""Loading libsurge (the C API, ``crates/surge-capi/include/surge.h``) for the ctypes
bindings :mod:`surge.staging` and :mod:`surge.workflow`, and the conventions they share.

The library is found through ``SURGE_LIB`` (a path to libsurge.so), else beside the ``surge``
command of this source tree (``target/release``), else on the system's library path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

_loaded = None


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
        _loaded = ctypes.CDLL(_find_library(), use_errno=True)
        _loaded.surge_last_error.restype = ctypes.c_char_p
    return _loaded


def path(p: str | os.PathLike) -> bytes:
    return os.fsencode(os.fspath(p))


def check(rc: int, error: type[OSError]) -> None:
    """A negative return raises ``error(errno, the library's message)``."""
    if rc < 0:
        message = (load().surge_last_error() or b"").decode(errors="replace")
        raise error(-rc, message or os.strerror(-rc))
