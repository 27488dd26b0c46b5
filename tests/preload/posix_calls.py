"""Run under LD_PRELOAD=libsurge_preload.so with a directory on a Surge mount: exercises the
calls the library serves (and the ones it hands to the kernel) and checks each result as POSIX
and Linux define it. `tests/suite/preload.rs` then checks the same files through the mount
and on another node. Usage: posix_calls.py DIR COPY_DIR (COPY_DIR: off the mount)."""
import ctypes
import fcntl
import mmap
import os
import pathlib
import random
import shutil
import subprocess
import sys
import threading

d, off_mount = sys.argv[1], sys.argv[2]


def at(name):
    return os.path.join(d, name)


def raises(error, call, *args):
    try:
        call(*args)
    except error:
        return
    raise AssertionError(f"{call.__name__}{args} did not raise {error.__name__}")


# A new file: written, its size seen at once in this process, read back, rewritten in place.
fd = os.open(at("f"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o640)
assert os.write(fd, b"hello ") == 6
assert os.fstat(fd).st_size == 6, "fstat sees this process's unpublished write"
assert os.stat(at("f")).st_size == 6, "stat sees it too"
assert os.writev(fd, [b"wor", b"ld"]) == 5
assert os.lseek(fd, 0, os.SEEK_CUR) == 11
assert os.pread(fd, 5, 6) == b"world"
assert os.lseek(fd, 0, os.SEEK_END) == 11
os.lseek(fd, 0, os.SEEK_SET)
assert os.read(fd, 100) == b"hello world"
assert os.pwrite(fd, b"W", 6) == 1
assert os.lseek(fd, 0, os.SEEK_CUR) == 11, "pwrite leaves the offset"
raises(FileExistsError, os.open, at("f"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)

# What the library changed, the kernel (the mount of this node, asked past the library by a
# raw system call) reports at once after the call returns, though it held the old size.
libc = ctypes.CDLL(None, use_errno=True)
SYS_NEWFSTATAT = {"x86_64": 262, "aarch64": 79}[os.uname().machine]


def kernel_size(path):
    buf = ctypes.create_string_buffer(256)
    assert libc.syscall(SYS_NEWFSTATAT, -100, path.encode(), buf, 0) == 0, os.strerror(ctypes.get_errno())
    return int.from_bytes(buf.raw[48:56], "little", signed=True)  # st_size on both ABIs


os.close(os.open(at("sizes"), os.O_CREAT | os.O_WRONLY, 0o644))
assert kernel_size(at("sizes")) == 0
for n in range(1, 200):
    sized = os.open(at("sizes"), os.O_WRONLY | os.O_TRUNC)
    os.write(sized, b"s" * n)
    os.close(sized)
    assert kernel_size(at("sizes")) == n, f"the kernel says {kernel_size(at('sizes'))} after a close at {n}"
    os.truncate(at("sizes"), n // 2) if n % 7 == 0 else None
    assert n % 7 != 0 or kernel_size(at("sizes")) == n // 2
os.unlink(at("sizes"))

# A second description sees the first's writes; dup shares an offset, dup2 lands on a number.
fd2 = os.open(at("f"), os.O_RDONLY)
assert os.read(fd2, 100) == b"hello World"
fd3 = os.dup(fd2)
os.lseek(fd2, 2, os.SEEK_SET)
assert os.read(fd3, 3) == b"llo", "a dup shares the offset"
assert os.dup2(fd2, 100) == 100
assert os.lseek(100, 0, os.SEEK_CUR) == 5
raises(OSError, os.write, fd2, b"x")  # EBADF: read-only
for n in (100, fd3, fd2):
    os.close(n)

flags = fcntl.fcntl(fd, fcntl.F_GETFL)
assert flags & os.O_ACCMODE == os.O_RDWR and not flags & os.O_APPEND
assert not os.get_inheritable(fd), "Python opens close-on-exec"
assert not os.isatty(fd)
os.ftruncate(fd, 5)
assert os.fstat(fd).st_size == 5
os.ftruncate(fd, 8)
os.lseek(fd, 0, os.SEEK_SET)
assert os.read(fd, 100) == b"hello\0\0\0"
os.fsync(fd)
os.close(fd)
assert pathlib.Path(at("f")).read_bytes() == b"hello\0\0\0"
assert os.stat(at("f")).st_mode & 0o777 == 0o640 & ~os.umask(0o022)

# Times and mode set through the descriptor (cp -a, tar x) stay after the writes' close.
fd = os.open(at("timed"), os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"timed")
os.utime(fd, ns=(1_000_000_123, 2_000_000_456))
os.chmod(fd, 0o600)
os.close(fd)
timed = os.stat(at("timed"))
assert (timed.st_atime_ns, timed.st_mtime_ns, timed.st_mode & 0o777, timed.st_size) == (1_000_000_123, 2_000_000_456, 0o600, 5), timed
os.unlink(at("timed"))

# O_APPEND and O_TRUNC.
with open(at("log"), "ab") as f:
    f.write(b"one\n")
with open(at("log"), "ab") as f:
    f.write(b"two\n")
    assert fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_APPEND
assert pathlib.Path(at("log")).read_bytes() == b"one\ntwo\n"
with open(at("log"), "wb") as f:
    f.write(b"x")
assert os.stat(at("log")).st_size == 1

# A file of several chunks, in uneven pieces; the same bytes kept off the mount.
big = random.Random(42).randbytes(5 << 20 | 12345)
with open(at("big"), "wb") as f:
    for start in range(0, len(big), 700_001):
        f.write(big[start:start + 700_001])
pathlib.Path(off_mount, "big").write_bytes(big)
assert pathlib.Path(at("big")).read_bytes() == big
with open(at("big"), "rb") as f:
    f.seek(3 << 20)
    assert f.read(4096) == big[3 << 20:(3 << 20) + 4096]
    # mmap is the kernel's: the descriptor is handed over at its offset and reads on.
    with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        assert m[:] == big
    assert f.read(10) == big[(3 << 20) + 4096:(3 << 20) + 4106]

# fork: parent and child share the offset of what was open before.
fd = os.open(at("forked"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"parent1 ")
child = os.fork()
if child == 0:
    os.write(fd, b"child ")
    os._exit(0)
assert os.waitpid(child, 0)[1] == 0
os.write(fd, b"parent2")
os.close(fd)
assert pathlib.Path(at("forked")).read_bytes() == b"parent1 child parent2"

# exec: another program writes through an inherited descriptor, at the shared offset.
fd = os.open(at("inherited"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"before ")
subprocess.run(["bash", "-c", f"printf 'from-child ' >&{fd}"], pass_fds=[fd], check=True)
os.write(fd, b"after")
os.close(fd)
assert pathlib.Path(at("inherited")).read_bytes() == b"before from-child after"

# Threads writing disjoint ranges of one file through one descriptor.
fd = os.open(at("threads"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)


def writer(i):
    for k in range(20):
        os.pwrite(fd, bytes([65 + i]) * 1000, (i * 20 + k) * 1000)


threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
os.close(fd)
assert pathlib.Path(at("threads")).read_bytes() == b"".join(bytes([65 + i]) * 20_000 for i in range(4))

# Errors as the kernel gives them; symbolic links followed (by the kernel), or refused.
raises(FileNotFoundError, os.open, at("missing"), os.O_RDONLY)
os.mkdir(at("dir"))
raises(IsADirectoryError, os.open, at("dir"), os.O_WRONLY)
os.symlink("f", at("link"))
assert pathlib.Path(at("link")).read_bytes() == b"hello\0\0\0"
raises(OSError, os.open, at("link"), os.O_RDONLY | os.O_NOFOLLOW)  # ELOOP
assert os.lstat(at("link")).st_size == 1 and os.stat(at("link")).st_size == 8

# Directories made and removed, names removed, with the kernel's errors.
os.mkdir(at("made"), 0o750)
assert os.stat(at("made")).st_mode & 0o777 == 0o750 & ~os.umask(0o022)
for i in range(20):
    os.close(os.open(at(f"made/{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
assert len(os.listdir(at("made"))) == 20, "the mount lists what the library made"
raises(OSError, os.rmdir, at("made"))  # ENOTEMPTY
raises(IsADirectoryError, os.unlink, at("made"))
raises(FileExistsError, os.mkdir, at("made"))
for i in range(20):
    os.unlink(at(f"made/{i}"))
raises(FileNotFoundError, os.unlink, at("made/0"))
assert os.listdir(at("made")) == []
os.rmdir(at("made"))
assert not os.path.exists(at("made"))

# The standard library's copies (sendfile and read/write) and pathlib.
shutil.copyfile(at("big"), at("big.copy"))
assert pathlib.Path(at("big.copy")).read_bytes() == big
shutil.copy2(at("f"), at("f.copy"))
assert os.stat(at("f.copy")).st_mtime_ns == os.stat(at("f")).st_mtime_ns
assert sorted(p.name for p in pathlib.Path(d).iterdir()) == sorted(
    ["f", "log", "big", "forked", "inherited", "threads", "dir", "link", "big.copy", "f.copy"])

# flock: served at the file's home, so it excludes a process using the mount, and is given
# back by unlock and by close.
import fcntl
fd = os.open(at("f"), os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
probe = ["python3", "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", at("f")]
kernel_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
assert subprocess.run(probe, env=kernel_env, capture_output=True).returncode != 0, "flock did not exclude the mount"
fcntl.flock(fd, fcntl.LOCK_UN)
assert subprocess.run(probe, env=kernel_env).returncode == 0, "unlock did not give the lock back"
fcntl.flock(fd, fcntl.LOCK_SH)
os.close(fd)
assert subprocess.run(probe, env=kernel_env).returncode == 0, "close did not give the lock back"

print(os.getpid())
