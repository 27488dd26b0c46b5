"""One process creates (open O_CREAT|O_EXCL, close) then unlinks ITEMS files in DIR, one
after another; prints the microseconds per create and per unlink. With --lookups it first
stats ITEMS names that are not there, in a directory just listed, and prints the microseconds
per stat third: a request the file system answers from what it holds (a kernel that caches
no missing names asks every time), the floor of one round trip through it.

    python3 bench/serial_create_unlink.py DIR ITEMS [--lookups]
"""
import os
import sys
import time

d, n = sys.argv[1], int(sys.argv[2])
lookups = "--lookups" in sys.argv[3:]
names = [os.path.join(d, f"f{i}") for i in range(n)]
if lookups:
    os.listdir(d)
    t = time.perf_counter()
    for p in names:
        try:
            os.stat(p)
        except FileNotFoundError:
            pass
    per_lookup = round((time.perf_counter() - t) / n * 1e6)
t0 = time.perf_counter()
for p in names:
    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
t1 = time.perf_counter()
for p in names:
    os.unlink(p)
t2 = time.perf_counter()
print(round((t1 - t0) / n * 1e6), round((t2 - t1) / n * 1e6), *([per_lookup] if lookups else []))
