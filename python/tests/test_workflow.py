"""surge.workflow (a ctypes binding of libsurge) against a live instance and its mount: a watch
iterator sees files as they are published (not while written, not temporary names) and
resumes from a cursor; a consumer group hands each file to one consumer."""

import errno
import math
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
