"""HDF5 under the interception library: a Python process started by `surge run` writes an HDF5
file with h5py (served in the process: the library's report says so), and this process reads
it back through the mount, dataset by dataset; then the reverse."""

import os
import subprocess
import sys

import h5py
import numpy as np

from conftest import SURGE

WRITE = """
import sys, h5py, numpy as np
rng = np.random.default_rng(11)
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("field", data=rng.random((48, 48, 48)), chunks=(16, 16, 16), compression="gzip")
    f.create_dataset("ids", data=np.arange(200_000, dtype=np.int64))
    f.attrs["step"] = 7
"""

READ = """
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert (f["counts"][...] == np.arange(10_000) * 3).all()
    assert f.attrs["origin"] == "mount"
print("read")
"""


def served(report):
    counts = {}
    for line in report.read_text().splitlines():
        for field in line.split()[2:]:
            key, _, value = field.partition("=")
            counts[key] = counts.get(key, 0) + int(value)
    return counts


def test_h5py_through_the_library_reads_the_same_through_the_mount(surge_mount, tmp_path):
    report = tmp_path / "report"
    env = dict(os.environ)
    path = surge_mount / "written-by-library.h5"
    run = [str(SURGE), "run", "--report", str(report), "--", sys.executable, "-c"]
    subprocess.run(run + [WRITE, str(path)], env=env, check=True, capture_output=True)
    counts = served(report)
    # HDF5 locks its files with flock: served too, so nothing is handed to the kernel.
    assert counts["open"] >= 1 and counts["write"] >= 10 and counts["flock"] >= 1, str(counts)
    assert counts["handed-to-kernel"] == 0, str(counts)
    rng = np.random.default_rng(11)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["field"][...], rng.random((48, 48, 48)))
        np.testing.assert_array_equal(f["ids"][...], np.arange(200_000, dtype=np.int64))
        assert f.attrs["step"] == 7

    other = surge_mount / "written-by-mount.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("counts", data=np.arange(10_000) * 3)
        f.attrs["origin"] = "mount"
    done = subprocess.run(run + [READ, str(other)], env=env, check=True, capture_output=True, text=True)
    assert done.stdout.strip() == "read"
    assert served(report)["read"] > counts["read"], "the second process read through the library"
