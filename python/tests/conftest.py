"""Fixtures shared by the tests that need a live Surge instance (built binaries required)."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SURGE = REPO / "target" / "release" / "surge"


@pytest.fixture
def surge_mount(tmp_path, monkeypatch):
    """Starts a 4-server instance mounted at a fresh directory; yields the mount point. The
    test process's SURGE_HOME points at the instance (for libsurge); it is torn down after."""
    assert SURGE.exists(), f"{SURGE} not built: run `make build` first"
    home = tmp_path / "home"
    monkeypatch.setenv("SURGE_HOME", str(home))
    monkeypatch.delenv("SURGE_INSTANCE", raising=False)
    env = dict(os.environ)
    name = f"py{os.getpid()}{abs(hash(tmp_path.name)) % 10000}"
    mnt = tmp_path / "mnt"
    # Distinct loopback addresses per test, so tests are "nodes" of their own.
    base = 10 + abs(hash(tmp_path.name)) % 200
    hosts = ",".join(f"127.0.3.{base + i}" for i in range(4))
    subprocess.run([SURGE, "up", "--name", name, "--capacity", "2G", "--root", f"/dev/shm/surge-pytest-{name}",
                    "--hosts", hosts, "--mount", str(mnt)], env=env, check=True, capture_output=True)
    try:
        yield mnt
    finally:
        subprocess.run([SURGE, "down", name, "--force"], env=env, check=True, capture_output=True)
