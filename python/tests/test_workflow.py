"""surge.workflow (a ctypes binding of libsurge) against a live instance and its mount: a watch
iterator sees files as they are published (not while written, not temporary names) and
resumes from a cursor; a consumer group hands each file to one consumer; paths longer than
the library's first buffer come back whole from both."""

import errno
import math
import os
import threading

import pytest

from surge import workflow


def test_watch_follows_publications_and_resumes(surge_mount):
    out = surge_mount / "out"
    out.mkdir()
    seen = []

    def consume():
        for f in workflow.watch(out, pattern="*.h5", timeout=3):
            seen.append(f)

    reader = threading.Thread(target=consume)
    reader.start()
    (out / "a.h5").write_bytes(b"a" * 1000)
    (out / ".b.h5.tmp").write_bytes(b"b" * 10)
    (out / ".b.h5.tmp").rename(out / "b.h5")
    with open(out / "c.h5", "wb") as writing:
        writing.write(b"c")
        (out / "d.h5").write_bytes(b"d")
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert [f.path for f in seen] == [str(out / n) for n in ("a.h5", "b.h5", "d.h5", "c.h5")]
    assert seen[0].size == 1000 and seen[3].size == 1
    assert [f.cursor for f in seen] == sorted(f.cursor for f in seen)
    resumed = list(workflow.watch(out, pattern="*.h5", from_cursor=seen[1].cursor, timeout=0.5))
    assert [f.path for f in resumed] == [str(out / "d.h5"), str(out / "c.h5")]
    with pytest.raises(workflow.WorkflowError) as missing:
        next(workflow.watch(surge_mount / "nowhere", timeout=0.1))
    assert missing.value.errno == errno.ENOENT


def test_a_group_hands_each_file_out_once(surge_mount):
    plots = surge_mount / "plots"
    plots.mkdir()
    for i in range(6):
        (plots / f"plt{i}.h5").write_bytes(bytes([i]))
    taken = []
    while (c := workflow.claim(plots, "vis", pattern="plt*", timeout=0.5)) is not None:
        taken.append(c.path)
        workflow.done(c.path, token=c.token)
        with pytest.raises(workflow.WorkflowError) as twice:
            workflow.done(c.path, group="vis", token=c.token)
        assert twice.value.errno == errno.ENOENT
    assert taken == [str(plots / f"plt{i}.h5") for i in range(6)]
    st = workflow.status(plots, "vis")
    assert (st.produced, st.done, st.backlog, st.claimed) == (6, 6, 0, 0)
    # Rates are measured (over the last minute): reported, not judged here. What kappa is made
    # of is tested without an instance (test_bindings.py).
    assert math.isfinite(st.production_per_s) and math.isfinite(st.consumption_per_s)
    with pytest.raises(workflow.WorkflowError) as nobody:
        workflow.status(plots, "nobody")
    assert nobody.value.errno == errno.ENOENT


def _make_tree(root, names, files):
    """Makes the directories ``names`` nested under ``root`` and writes ``files`` (name -> bytes)
    into the deepest, relative to open directories (a path past 4,096 bytes is past what one
    system call takes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            if name not in os.listdir(fd):
                os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        for name, data in files.items():
            out = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
            os.write(out, data)
            os.close(out)  # published here
    finally:
        os.close(fd)
    return os.path.join(str(root), *names)


def test_paths_longer_than_path_max_come_back_whole(surge_mount):
    # Directories (of 250 bytes, then one to make up the rest) whose path is 3,950 bytes: under
    # the 4,096 the calls start with, its files' (243-byte names) over it; one more directory,
    # whose own path is over it.
    names = []
    length = lambda: len(os.fsencode(os.path.join(str(surge_mount), *names)))  # noqa: E731
    while length() + 251 <= 3950:
        names.append(f"{len(names):02d}" + "d" * 248)
    if length() < 3949:
        names.append("f" * (3950 - length() - 1))
    files = {"a" * 240 + ".h5": b"a", "b" * 240 + ".h5": b"bb"}
    near = _make_tree(surge_mount, names, files)
    deeper = _make_tree(surge_mount, names + ["e" * 250], {"c" * 240 + ".h5": b"ccc"})
    assert len(os.fsencode(near)) + len("/x") < 4096 < len(os.fsencode(near)) + len("/") + 243
    assert len(os.fsencode(deeper)) > 4096
    expected = [os.path.join(near, n) for n in files]
    deep = os.path.join(deeper, "c" * 240 + ".h5")

    # A watch: neither skipped nor cut, in order, the one after a long path too.
    seen = list(workflow.watch(near, pattern="*.h5", timeout=1))
    assert [f.path for f in seen] == expected and [f.size for f in seen] == [1, 2]
    assert [f.path for f in workflow.watch(deeper, timeout=1)] == [deep]

    # A group: each long path claimed whole, in order; nothing is left claimed or lost.
    taken = []
    while (c := workflow.claim(near, "vis", pattern="*.h5", timeout=0.5)) is not None:
        taken.append(c.path)
        workflow.done(c.path, group="vis", token=c.token)
    assert taken == expected
    st = workflow.status(near, "vis")
    assert (st.produced, st.done, st.claimed, st.backlog) == (2, 2, 0, 0)
    c = workflow.claim(deeper, "vis", timeout=5)
    assert c is not None and c.path == deep
    workflow.done(c.path, token=c.token)
    assert workflow.claim(deeper, "vis", timeout=0.2) is None
