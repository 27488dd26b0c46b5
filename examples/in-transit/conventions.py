"""File conventions shared by the in-transit workflow's components.

The simulation, the visualization consumer and the encoder never talk to each other directly:
they couple through files in a shared working directory, exactly as Chombo-Crunch, VisIt and
the encoder did on the burst buffer in the seed paper. That only works if every component
agrees on three things, which live here so they are written once:

* names: a file is *published* under a final name (``plt00012.h5``, ``frame_00012.png``) and is
  written under a temporary name that no consumer pattern matches (``.plt00012.h5.tmp``);
* the publish step: write to the temporary name, then ``os.rename`` it to the final name.
  ``rename`` is atomic on POSIX file systems (and on a Surge mount), so a consumer that sees
  the final name sees a complete file;
* done markers: small JSON files published the same way, saying "I am finished, and here is
  how much I produced", so the next component knows when to stop waiting.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import contextlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

PLOT_RE = re.compile(r"^plt(\d{5,})\.h5$")
CHECKPOINT_RE = re.compile(r"^chk(\d{5,})\.h5$")
FRAME_RE = re.compile(r"^frame_(\d{5,})\.png$")

SIM_DONE = "sim.done"
VIS_DONE = "vis.done"


def plot_name(step: int) -> str:
    return f"plt{step:05d}.h5"


def checkpoint_name(step: int) -> str:
    return f"chk{step:05d}.h5"


def frame_name(step: int) -> str:
    return f"frame_{step:05d}.png"


def temp_name(final: Path) -> Path:
    """The name a file is written under before it is published (hidden, and matching no pattern)."""
    return final.with_name(f".{final.name}.tmp")


@contextmanager
def publishing(final: Path) -> Iterator[Path]:
    """Yields the temporary path to write; on success renames it to `final` (the publish step).

    On failure the temporary file is removed, so a crash never leaves a half-written file
    under a name a consumer would pick up.
    """
    tmp = temp_name(final)
    try:
        yield tmp
        os.rename(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def numbered(directory: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    """Published files in `directory` whose names match `pattern`, keyed by their number.

    A directory that does not exist yet is empty: consumers may start before their producer.
    """
    found = {}
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                m = pattern.match(entry.name)
                if m:
                    found[int(m.group(1))] = Path(entry.path)
    except FileNotFoundError:
        pass
    return found


def write_marker(path: Path, info: dict) -> None:
    """Publishes a done marker carrying `info`."""
    with publishing(path) as tmp:
        tmp.write_text(json.dumps(info))


def read_marker(path: Path) -> dict | None:
    """The marker's content, or None while it is not published yet."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def exit_on_sigterm() -> None:
    """Makes SIGTERM unwind like an exception, so temporary files and directories are removed.

    The driver stops the workflow's programs with SIGTERM when one of them fails.
    """
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


class SetUpTornDown(contextlib.AbstractContextManager):
    """A resource whose `_setup` registers an undo step on `self._stack` after each step; if the
    setup fails half-way, what it did is undone before the error goes on, and leaving the
    `with` block undoes everything, in reverse order."""

    def _setup(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        try:
            self._setup()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
