"""Where the shared test and benchmark data lives (SWF traces, Darshan logs).

``SURGE_SHARED_DATA`` names the folder; by default it is ``../shared/data`` relative to the
repository root (the repository is cloned beside a ``shared`` folder). Missing data is an error
with a message saying what to set, never a silent skip.
"""

from __future__ import annotations

import os
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]


def shared_data_dir() -> Path:
    configured = os.environ.get("SURGE_SHARED_DATA")
    path = Path(configured) if configured else REPOSITORY_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        raise FileNotFoundError(
            f"shared data folder not found: {path} (set SURGE_SHARED_DATA to the folder that "
            "holds swf/ and darshan/)")
    return path


def swf_trace(name: str) -> Path:
    """Path of a trace in ``<shared data>/swf/``, e.g. ``swf_trace('RICC-2010-2.swf.gz')``."""
    path = shared_data_dir() / "swf" / name
    if not path.exists():
        raise FileNotFoundError(f"trace {name} not found in {path.parent}")
    return path
