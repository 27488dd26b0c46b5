"""HDF5 through a FUSE mount of a real Surge instance: h5py writes and reads several datasets,
and a file published with tempfile + os.replace is seen complete under its final name."""

import os
import tempfile

import h5py
import numpy as np

def test_h5py_datasets_round_trip(surge_mount):
    rng = np.random.default_rng(7)
    field = rng.random((64, 64, 64))
    ids = np.arange(100_000, dtype=np.int64)
    path = surge_mount / "plot_0001.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("density", data=field, chunks=(16, 16, 16), compression="gzip")
        f.create_dataset("ids", data=ids)
        g = f.create_group("meta")
        g.attrs["step"] = 1
        g.create_dataset("time", data=np.array([0.5]))
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["density"][...], field)
        np.testing.assert_array_equal(f["ids"][...], ids)
        assert f["meta"].attrs["step"] == 1
        assert f["meta/time"][0] == 0.5


def test_tempfile_and_os_replace_publish(surge_mount):
    final = surge_mount / "latest.h5"
    for step in range(5):
        fd, tmp = tempfile.mkstemp(dir=surge_mount, suffix=".tmp")
        os.close(fd)
        with h5py.File(tmp, "w") as f:
            f.create_dataset("step", data=np.full(50_000, step))
        os.replace(tmp, final)
        with h5py.File(final, "r") as f:
            assert (f["step"][...] == step).all()
    assert sorted(p.name for p in surge_mount.iterdir()) == ["latest.h5"]
