"""Large reads and writes through the library, on a file whose chunks sit on servers of this
node (then the library reads and writes their data files itself, straight from and into the
program's buffers): writes crossing chunk boundaries, an overwrite, a write past the end
leaving a hole, and reads of every shape are checked against what was written. The expected
bytes are left in the file named by the second argument (off the mount) for the test to
compare with what another node reads.
"""

import os
import sys

path, expected_path = sys.argv[1], sys.argv[2]
size = 8 << 20
data = bytearray(os.urandom(size))
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
# Writes of a chunk and an odd part: the first goes over the network, the rest local.
step = (1 << 20) + 4097
for offset in range(0, size, step):
    assert os.pwrite(fd, data[offset:offset + step], offset) == len(data[offset:offset + step])
patch = os.urandom(3 << 20)
at = (2 << 20) - 12345
assert os.pwrite(fd, patch, at) == len(patch)
data[at:at + len(patch)] = patch
# Past the end: a hole, then a tail.
assert os.pwrite(fd, b"tail", size + (1 << 20)) == 4
data += bytes(1 << 20) + b"tail"
assert os.fstat(fd).st_size == len(data)
for offset, length in [(0, len(data)), ((1 << 20) - 7, (2 << 20) + 14), (size - 100, 1 << 21), (len(data) - 2, 100), (len(data), 10)]:
    got = os.pread(fd, length, offset)
    assert got == bytes(data[offset:offset + length]), f"pread of {length} at {offset} differs"
# Sequential reads through the descriptor's offset, in odd sizes.
os.lseek(fd, 0, os.SEEK_SET)
read = bytearray()
while chunk := os.read(fd, (1 << 20) + 333):
    read += chunk
assert read == data, "sequential reads differ"
os.close(fd)
with open(expected_path, "wb") as f:
    f.write(data)
