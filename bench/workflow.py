#!/usr/bin/env python3
"""How fast the workflow service couples a producer to its consumers, through a real mount.

* publication latency: a producer writes and closes small files through a Surge mount, a
  watcher (`surge.workflow.watch`, a libsurge client of its own) receives each; the time from
  the producer's close returning to the watcher holding the publication, per file (median,
  p90, p99, max), against inotify's on tmpfs (what a watcher on the same node sees: the floor);
* hand-out rate: N files published, taken by 1 and by 4 consumer threads of one group (claim,
  acknowledge), files per second, against a directory scan + rename-to-claim on tmpfs (the
  usual ad-hoc work queue on a shared file system).

Rounds alternate between the systems (the machine is noisy); every round's figure is printed.

    sudo .venv/bin/python bench/workflow.py [FILES] [ROUNDS]     defaults: 300 3

Needs `make build` (surge, surge-fuse, libsurge.so) and root (the mount).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
SURGE = REPO / "target" / "release" / "surge"
HOSTS = ["127.0.0.27", "127.0.0.28"]  # servers; the mount (the producer) is node .27, consumers are libsurge clients here


def surge(*args: str, env=None) -> str:
    return subprocess.run([str(SURGE), *args], check=True, capture_output=True, text=True, env=env).stdout


def percentiles(values: list[float]) -> str:
    v = sorted(values)
    at = lambda q: v[min(len(v) - 1, int(q * len(v)))]  # noqa: E731
    return f"median {1e3 * statistics.median(v):.2f} ms, p90 {1e3 * at(0.9):.2f}, p99 {1e3 * at(0.99):.2f}, max {1e3 * v[-1]:.2f}"


def publish(directory: Path, n: int, closed: dict[str, float], pause: float) -> None:
    for i in range(n):
        name = f"f{i:05d}.dat"
        with open(directory / name, "wb") as f:
            f.write(b"x" * 4096)
        closed[name] = time.perf_counter()
        time.sleep(pause)  # one file at a time: latency, not queueing


def surge_latency(directory: Path, n: int) -> list[float]:
    from surge import workflow

    closed: dict[str, float] = {}
    seen: dict[str, float] = {}
    ready = threading.Event()

    def watch():
        reader = workflow.watch(directory, timeout=5)
        ready.set()
        for p in reader:
            seen[Path(p.path).name] = time.perf_counter()
            if len(seen) == n:
                return

    t = threading.Thread(target=watch)
    t.start()
    ready.wait()
    time.sleep(0.2)
    publish(directory, n, closed, 0.002)
    t.join()
    return [seen[k] - closed[k] for k in closed]


def inotify_latency(directory: Path, n: int) -> list[float]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = libc.inotify_init1(0)
    IN_CLOSE_WRITE = 0x8
    libc.inotify_add_watch(fd, str(directory).encode(), IN_CLOSE_WRITE)
    closed: dict[str, float] = {}
    seen: dict[str, float] = {}

    def watch():
        while len(seen) < n:
            buf = os.read(fd, 65536)
            at = time.perf_counter()
            off = 0
            while off < len(buf):
                _, _, _, length = struct.unpack_from("iIII", buf, off)
                name = buf[off + 16: off + 16 + length].rstrip(b"\0").decode()
                seen[name] = at
                off += 16 + length

    t = threading.Thread(target=watch)
    t.start()
    publish(directory, n, closed, 0.002)
    t.join()
    os.close(fd)
    return [seen[k] - closed[k] for k in closed]


def surge_handout(directory: Path, n: int, consumers: int, group: str) -> float:
    from surge import workflow

    for i in range(n):
        (directory / f"q{i:05d}").write_bytes(b"q")
    done = []

    def consume():
        while (c := workflow.claim(directory, group, timeout=0.5)) is not None:
            workflow.done(c.path, group=group, token=c.token)
            done.append(c.path)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=consume) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0 - 0.5  # the last claim's timeout is not work
    assert sorted(done) == sorted(str(directory / f"q{i:05d}") for i in range(n)), "each file once"
    return n / elapsed


def scan_handout(directory: Path, n: int, consumers: int) -> float:
    """The ad-hoc queue: scan the directory, claim a file by renaming it away, 'acknowledge' by unlinking."""
    for i in range(n):
        (directory / f"q{i:05d}").write_bytes(b"q")
    claimed = directory / "claimed"
    claimed.mkdir()
    done = []

    def consume(me: int):
        while True:
            names = sorted(e.name for e in os.scandir(directory) if e.name.startswith("q"))
            if not names:
                return
            for name in names:
                try:
                    os.rename(directory / name, claimed / f"{name}.{me}")
                except FileNotFoundError:
                    continue  # another consumer took it
                os.unlink(claimed / f"{name}.{me}")
                done.append(name)
                break

    t0 = time.perf_counter()
    threads = [threading.Thread(target=consume, args=(i,)) for i in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(done) == [f"q{i:05d}" for i in range(n)]
    return n / (time.perf_counter() - t0)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    home = tempfile.mkdtemp(prefix="surge-bench-wf-")
    os.environ["SURGE_HOME"] = home
    name = f"wfbench{os.getpid()}"
    root = tempfile.mkdtemp(prefix="surge-bench-wf-", dir="/dev/shm")
    mnt = Path(tempfile.mkdtemp(prefix="surge-bench-wf-mnt-"))
    tmpfs = Path(tempfile.mkdtemp(prefix="surge-bench-wf-tmpfs-", dir="/dev/shm"))
    surge("up", "--name", name, "--capacity", "2G", "--root", root, "--hosts", ",".join(HOSTS))
    surge("mount", name, str(mnt), "--node", HOSTS[0])
    try:
        rows: dict[str, list[str]] = {}
        for r in range(rounds):
            for system in ("tmpfs", "surge"):
                base = (mnt if system == "surge" else tmpfs) / f"r{r}"
                lat_dir, q1, q4 = base / "lat", base / "q1", base / "q4"
                for d in (lat_dir, q1, q4):
                    d.mkdir(parents=True)
                if system == "surge":
                    lat = surge_latency(lat_dir, n)
                    one, four = surge_handout(q1, n, 1, "g"), surge_handout(q4, n, 4, "g")
                else:
                    lat = inotify_latency(lat_dir, n)
                    one, four = scan_handout(q1, n, 1), scan_handout(q4, n, 4)
                rows.setdefault(f"{system}: close -> watcher", []).append(percentiles(lat))
                rows.setdefault(f"{system}: files/s, 1 consumer", []).append(f"{one:.0f}")
                rows.setdefault(f"{system}: files/s, 4 consumers", []).append(f"{four:.0f}")
                print(f"round {r + 1} of {rounds}: {system} done", file=sys.stderr, flush=True)
        print(f"\n{n} files per measurement, {rounds} rounds (tmpfs: inotify IN_CLOSE_WRITE and a rename-to-claim queue)")
        for key, values in rows.items():
            print(f"| {key} | " + " | ".join(values) + " |")
    finally:
        surge("umount", str(mnt))
        surge("down", name, "--force")
        for d in (home, root, tmpfs):
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(mnt, ignore_errors=True)


if __name__ == "__main__":
    main()
