"""The Python staging module (a ctypes binding of libsurge) against a live instance and its
mount: stage a checkpoint out and a restart file in, job-end deferral and revoke, failures."""

import errno
import os

import pytest

from surge import staging


def test_checkpoint_out_and_restart_in(surge_mount, tmp_path):
    pfs = tmp_path / "pfs"
    pfs.mkdir()
    checkpoint = surge_mount / "chk0010.h5"
    payload = os.urandom(3 * 1024 * 1024 + 5)
    checkpoint.write_bytes(payload)
    staging.stage_file_out(checkpoint, pfs / "chk0010.h5", staging.IMMEDIATE)
    staging.wait_file_stage(checkpoint)
    assert (pfs / "chk0010.h5").read_bytes() == payload
    assert staging.query_file_stage(checkpoint) == staging.StageCounts(complete=1, pending=0, deferred=0, failed=0)

    restart = pfs / "restart.h5"
    restart.write_bytes(payload[::-1])
    staging.stage_file_in(surge_mount / "restart.h5", restart)
    staging.wait_file_stage(surge_mount / "restart.h5")
    assert (surge_mount / "restart.h5").read_bytes() == payload[::-1]


def test_directory_out_and_job_end_revoke(surge_mount, tmp_path):
    plots = surge_mount / "plots"
    plots.mkdir()
    for i in range(30):
        (plots / f"plt{i:04d}.h5").write_bytes(bytes([i]) * (100 + i))
    staging.stage_dir_out(plots, tmp_path / "pfs" / "plots")
    staging.wait_dir_stage(plots)
    assert sorted(p.name for p in (tmp_path / "pfs" / "plots").iterdir()) == [f"plt{i:04d}.h5" for i in range(30)]

    movie = surge_mount / "movie.mp4"
    movie.write_bytes(b"not really a movie")
    staging.stage_file_out(movie, tmp_path / "pfs" / "movie.mp4", staging.AT_JOB_END)
    assert staging.query_file_stage(movie).deferred == 1
    staging.stage_file_out(movie, tmp_path / "pfs" / "movie.mp4", staging.REVOKE)
    assert staging.query_file_stage(movie).deferred == 0


def test_failures_raise_with_errno_and_are_listed(surge_mount, tmp_path):
    with pytest.raises(staging.StageError) as missing:
        staging.stage_file_in(surge_mount / "x.h5", tmp_path / "does-not-exist.h5")
    assert missing.value.errno == errno.ENOENT
    assert "does-not-exist.h5" in missing.value.strerror

    doomed = surge_mount / "doomed.h5"
    doomed.write_bytes(b"data")
    with pytest.raises(staging.StageError):
        staging.stage_file_out(doomed, "/proc/surge-cannot-write-here/doomed.h5")
        staging.wait_file_stage(doomed)
    # Both failed stages are listed, the one refused at submission too.
    assert staging.failed_stages(surge_mount) == [str(surge_mount / "x.h5"), str(doomed)]

    with pytest.raises(staging.StageError) as outside:
        staging.query_file_stage("/not/a/surge/path")
    assert outside.value.errno == errno.EINVAL


def test_failed_stage_paths_longer_than_path_max_are_listed_whole(surge_mount):
    # 20 directories of 250 bytes: the file's path is over 5,000 bytes, past the 4,096 that
    # failed_stages starts with. Made relative to open directories (a path that long is past
    # what one system call takes).
    names = [f"{i:02d}" + "d" * 248 for i in range(20)]
    fd = os.open(surge_mount, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open("doomed.h5", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
        os.write(out, b"data")
        os.close(out)
    finally:
        os.close(fd)
    deep = os.path.join(str(surge_mount), *names, "doomed.h5")
    assert len(os.fsencode(deep)) > 5000
    short = surge_mount / "short.h5"
    short.write_bytes(b"data")
    for bb in (deep, short):
        with pytest.raises(staging.StageError):
            staging.stage_file_out(bb, "/proc/surge-cannot-write-here/doomed.h5")
            staging.wait_file_stage(bb)
    # Neither skipped nor cut: the long path comes back whole, and the one after it too.
    assert sorted(staging.failed_stages(surge_mount)) == sorted([deep, str(short)])


def test_the_calls_are_reachable_from_the_package():
    import surge

    assert surge.stage_file_out is staging.stage_file_out
    assert surge.AT_JOB_END == staging.AT_JOB_END
    with pytest.raises(AttributeError):
        surge.no_such_call  # noqa: B018
