"""A bandwidth-limited stand-in for the parallel file system, made from a directory on local disk.

Comparing a burst buffer in RAM with an unthrottled local SSD would say little about a PFS, so
the workflow's "PFS" is an ext4 file system whose block device is throttled to a fixed
bandwidth. How, and why this way:

* An image file on local disk, attached to a loop device with ``--direct-io=on`` (the loop
  device's reads and writes bypass the host page cache, so the image does not occupy RAM
  twice and the disk really is touched).
* ext4 on it, mounted with ``-o sync``: every write returns only once it reached the device.
  A PFS client cannot absorb a multi-GiB checkpoint in its cache either; without ``sync`` a
  few hundred MiB would land in this machine's page cache at memory speed and the throttle
  would only delay the background writeback, which the application never sees.
* A cgroup-v1 ``blkio`` throttle (``blkio.throttle.{read,write}_bps_device``) for that loop
  device, set in the *root* blkio group. cgroup v1 charges I/O to the group of the task that
  submits it, so a rule in a child group would miss I/O submitted by kernel threads
  (writeback) and by processes outside the group; in the root group it acts as a device-level
  limit that every process meets: the simulation, the visualization, and Surge's servers
  when they write staged-out checkpoints. The rule names only the loop device this module
  attached, so nothing else on the machine is affected, and it is removed on teardown.

`ThrottledPFS` measures the limit (a dd write, then a cold read after remounting) and refuses
to continue if it does not bite: an unthrottled comparison would be silently wrong.
All of it needs root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conventions import SetUpTornDown

BLKIO = Path("/sys/fs/cgroup/blkio")
MIB = 1 << 20


class PFSSetupError(RuntimeError):
    pass


def _quietly(fn, *args) -> None:
    """Runs a teardown step; a failure is reported, not raised, so it cannot mask the error being unwound."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        print(f"warning: PFS teardown: {e}", file=sys.stderr)


def _run(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
    except FileNotFoundError as e:
        raise PFSSetupError(f"`{cmd[0]}` is not installed: {e}") from e
    except subprocess.CalledProcessError as e:
        raise PFSSetupError(f"`{' '.join(cmd)}` failed: {e.stderr.strip() or e}") from e


class ThrottledPFS(SetUpTornDown):
    """Sets up the throttled file system on enter (mounted at `.root`), removes all of it on exit."""

    def __init__(self, size_bytes: int, limit_mib_s: float, parent: str | None = None, probe_mib: int = 256):
        self.size = size_bytes
        self.limit_bps = int(limit_mib_s * MIB)
        self.parent = parent
        self.probe_mib = probe_mib
        self.measured_write_mib_s = self.measured_read_mib_s = None

    # -- setup ------------------------------------------------------------------------------

    def _setup(self) -> None:
        if os.geteuid() != 0:
            raise PFSSetupError("the throttled PFS needs root (loop device, mount, blkio cgroup)")
        for f in ("blkio.throttle.write_bps_device", "blkio.throttle.read_bps_device"):
            if not (BLKIO / f).exists():
                raise PFSSetupError(f"no cgroup-v1 blkio throttle here ({BLKIO / f} missing): cannot limit the PFS bandwidth")
        self.dir = Path(tempfile.mkdtemp(prefix="pfs-", dir=self.parent))
        self._stack.callback(shutil.rmtree, self.dir, ignore_errors=True)
        image = self.dir / "pfs.img"
        with open(image, "wb") as f:
            f.truncate(self.size)  # sparse: disk space is used only as data is written
        self.device = _run("losetup", "--find", "--show", "--direct-io=on", str(image))
        self._stack.callback(_quietly, _run, "losetup", "--detach", self.device)
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.device)
        self.root = self.dir / "mnt"
        self.root.mkdir()
        self._mount()
        self._stack.callback(_quietly, self._umount)
        self.majmin = _run("lsblk", "--nodeps", "--noheadings", "--output", "MAJ:MIN", self.device).strip()
        self._set_limit(self.limit_bps)
        self._stack.callback(_quietly, self._set_limit, 0)
        self._measure()

    def _mount(self) -> None:
        _run("mount", "-o", "sync", self.device, str(self.root))

    def _umount(self) -> None:
        for _ in range(5):
            try:
                _run("umount", str(self.root))
                return
            except PFSSetupError:
                time.sleep(1)  # something still closing its files
        _run("umount", "--lazy", str(self.root))

    def _set_limit(self, bps: int) -> None:
        # "MAJ:MIN 0" removes the rule.
        for f in ("blkio.throttle.write_bps_device", "blkio.throttle.read_bps_device"):
            (BLKIO / f).write_text(f"{self.majmin} {bps}\n")

    def remount(self) -> None:
        """Drops this file system's page cache (and only its own), so reads come from the device.

        A mount namespace made while the file system is mounted (another program's "node", as
        the test suite's running beside it make) holds a copy of the mount, which keeps the file
        system and its cache alive past our unmount: so every file's cached pages are dropped
        as well (they are clean, the mount is synchronous)."""
        self._umount()
        self._mount()
        for path in self.root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)

    def _measure(self) -> None:
        """Writes and then cold-reads a probe file with dd; fails if the limit does not bite."""
        probe = self.root / ".bandwidth-probe"
        t0 = time.perf_counter()
        _run("dd", "if=/dev/zero", f"of={probe}", "bs=1M", f"count={self.probe_mib}", "status=none")
        self.measured_write_mib_s = self.probe_mib / (time.perf_counter() - t0)
        self.remount()
        t0 = time.perf_counter()
        _run("dd", f"if={probe}", "of=/dev/null", "bs=1M", "status=none")
        self.measured_read_mib_s = self.probe_mib / (time.perf_counter() - t0)
        probe.unlink()
        limit = self.limit_bps / MIB
        for what, got in (("write", self.measured_write_mib_s), ("read", self.measured_read_mib_s)):
            # The throttle lets a short burst through; more than 25% above the limit means it is not working.
            if got > 1.25 * limit:
                raise PFSSetupError(
                    f"the PFS {what} throttle does not bite: dd measured {got:.0f} MiB/s against a "
                    f"{limit:.0f} MiB/s limit on {self.device}; refusing to compare against an unthrottled PFS"
                )

    def describe(self) -> str:
        return (
            f"ext4 on {self.device} (image on local disk, direct I/O), mounted -o sync at {self.root}; "
            f"blkio throttle {self.limit_bps / MIB:.0f} MiB/s read+write on {self.majmin} (root group: every process); "
            f"dd measured write {self.measured_write_mib_s:.0f} MiB/s, cold read {self.measured_read_mib_s:.0f} MiB/s"
        )
