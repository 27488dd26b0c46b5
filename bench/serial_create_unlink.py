"""One process creates (open O_CREAT|O_EXCL, close) then unlinks ITEMS files in DIR, one
after another; prints the microseconds per create and per unlink.

    python3 bench/serial_create_unlink.py DIR ITEMS
"""
import os
import sys
import time

d, n = sys.argv[1], int(sys.argv[2])
names = [os.path.join(d, f"f{i}") for i in range(n)]
t0 = time.perf_counter()
for p in names:
    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
t1 = time.perf_counter()
for p in names:
    os.unlink(p)
t2 = time.perf_counter()
print(round((t1 - t0) / n * 1e6), round((t2 - t1) / n * 1e6))
