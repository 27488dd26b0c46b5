"""The workflow's only contact with Surge's staging service (`surge.staging`).

Everything that moves data between the burst buffer and the PFS goes through the few functions
here: the job's stage-in of the restart file, the simulation's asynchronous stage-out of each
checkpoint right after it is written (the seed paper's `dw_stage_file_out(..., IMMEDIATE)`
call in Chombo-Crunch), and the job's stage-out of the movie at the end. Keeping them in one
place is what the paper asks for when it regrets tying the simulation to one burst buffer's
API: porting the workflow means rewriting this file only.

The copies are done server-side by Surge, asynchronously; a staged-out file appears on the PFS
under its final name only once it is complete.
"""

from __future__ import annotations

from pathlib import Path


class StagingUnavailable(RuntimeError):
    """The staging API is not installed (python/surge/staging.py or libsurge.so missing)."""


def _staging():
    try:
        from surge import staging
    except (ImportError, OSError) as e:  # OSError: the module exists but libsurge.so does not load
        raise StagingUnavailable(
            f"Surge's staging API cannot be loaded ({e}); the burst-buffer run needs "
            "surge.staging (python/surge/staging.py) and libsurge.so (`make build`)"
        ) from e
    return staging


def unavailable_reason() -> str | None:
    """None when staging can be used, else why not."""
    try:
        _staging()
    except StagingUnavailable as e:
        return str(e)
    return None


def _check(bb_path: Path, counts) -> None:
    if counts.failed:
        staging = _staging()
        detail = "; ".join(staging.failed_stages(str(bb_path.parent))) or "no detail"
        raise RuntimeError(f"staging of {bb_path} failed: {detail}")


def stage_in(bb_path: Path, pfs_path: Path) -> None:
    """Stages a PFS file into the burst buffer and waits for it (what `#DW stage_in` does before a job)."""
    staging = _staging()
    staging.stage_file_in(str(bb_path), str(pfs_path))
    staging.wait_file_stage(str(bb_path))
    _check(bb_path, staging.query_file_stage(str(bb_path)))


def wait(bb_path: Path) -> None:
    """Blocks until every stage of `bb_path` is finished; raises if one failed."""
    staging = _staging()
    staging.wait_file_stage(str(bb_path))
    _check(bb_path, staging.query_file_stage(str(bb_path)))


def stage_out_now(bb_path: Path, pfs_path: Path) -> None:
    """Starts an immediate, asynchronous stage-out and returns at once."""
    staging = _staging()
    staging.stage_file_out(str(bb_path), str(pfs_path), when=staging.IMMEDIATE)


class StageOutTracker:
    """The stage-outs one process started, so it can tell whether any is still copying.

    The simulation uses it to label each time step "a checkpoint was staging out meanwhile"
    or not, which is how the workflow shows whether staging stalls the simulation.
    """

    def __init__(self) -> None:
        self._pending: list[Path] = []

    def stage_out(self, bb_path: Path, pfs_path: Path) -> None:
        stage_out_now(bb_path, pfs_path)
        self._pending.append(bb_path)

    def busy(self) -> bool:
        """True while one of the stage-outs is still pending; forgets finished ones, raises on failures."""
        if not self._pending:
            return False
        staging = _staging()
        still = []
        for bb_path in self._pending:
            counts = staging.query_file_stage(str(bb_path))
            _check(bb_path, counts)
            if counts.pending or counts.deferred:
                still.append(bb_path)
        self._pending = still
        return bool(still)
