"""Creates, writes and removes many files in directories of its own, under the interception
library (run by tests/suite/preload.rs): enough steps in one directory for the library to hold
it under a delegation and answer them in the process.

    delegated.py DIR MODE

MODE `recalled`: fills DIR/held, says `ready` on stdout and waits for a line on stdin while
another process reads the directory through a mount (which recalls the delegation); then
makes more files and says `done`. MODE `exit`: fills DIR/at-exit and ends at once (what it
answered must be written back at exit). MODE `exec`: fills DIR/at-exec and becomes /bin/true.
"""

import os
import sys

FILES = 300


def content(name):
    return (name * 40).encode()[: 100 + len(name) * 7]


def fill(d, first, count):
    """Files first..first+count in d; every third removed again; one with its times set."""
    for i in range(first, first + count):
        name = f"f{i}"
        fd = os.open(os.path.join(d, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
        os.write(fd, content(name))
        if i == first + 5:
            os.utime(fd, ns=(1_000_000_000, 2_000_000_000))
        os.close(fd)
    for i in range(first, first + count, 3):
        os.unlink(os.path.join(d, f"f{i}"))
    # An exclusive create of a name that exists fails as it must.
    try:
        os.open(os.path.join(d, f"f{first + 1}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
        sys.exit("an exclusive create of an existing name succeeded")
    except FileExistsError:
        pass
    # The listing (served: opendir/readdir) has every name made and not removed, at once.
    listed = {e.name: e.is_dir() for e in os.scandir(d)}
    made = {f"f{i}" for i in range(0, first + count) if i % 3 != 0}
    if {n for n in listed if n.startswith("f")} != made:
        sys.exit(f"the listing differs from what was made: {sorted(set(listed) ^ made)[:10]}")
    if any(listed[n] for n in made):
        sys.exit("a file listed as a directory")
    # And a removed name is gone for this process at once.
    try:
        os.stat(os.path.join(d, f"f{first}"))
        sys.exit("a removed name is still there")
    except FileNotFoundError:
        pass


def main():
    base, mode = sys.argv[1], sys.argv[2]
    d = os.path.join(base, {"recalled": "held", "exit": "at-exit", "exec": "at-exec"}[mode])
    os.mkdir(d)
    fill(d, 0, FILES)
    os.mkdir(os.path.join(d, "sub"))
    with open(os.path.join(d, "sub", "inner"), "wb") as f:
        f.write(b"inner")
    if mode == "exit":
        os._exit(0)
    if mode == "exec":
        os.execv("/bin/true", ["true"])
    print("ready", flush=True)
    sys.stdin.readline()
    fill(d, FILES, 100)
    print("done", flush=True)


main()
