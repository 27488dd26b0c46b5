"""`stat` answered from what the interception library keeps is never stale (run by
tests/suite/preload.rs): the files of a directory are stated over and over through the library
(which then lists the directory once and answers from what it keeps), then each is changed
through another node's mount and stated again at once through the library: every change must
show, whatever the library kept.

    kept_stats.py DIR OTHER

DIR: a directory on the mount the library serves; OTHER: the same directory through another
node's mount, which the library leaves to the kernel (SURGE_PRELOAD_MOUNTS names DIR's only).
"""

import os
import sys

FILES = 200


def main():
    here, there = sys.argv[1], sys.argv[2]
    at = lambda d, name: os.path.join(d, name)
    for i in range(FILES):
        with open(at(here, f"f{i}"), "wb") as f:
            f.write(b"x" * i)
    for _ in range(3):
        for i in range(FILES):
            st = os.stat(at(here, f"f{i}"))
            assert st.st_size == i and st.st_nlink == 1, (i, st)
            assert os.stat(at(here, f"f{i}")).st_ino == st.st_ino

    for i in range(0, FILES, 10):
        name, mine, theirs = f"f{i}", at(here, f"f{i}"), at(there, f"f{i}")
        before = os.stat(mine)
        with open(theirs, "ab") as f:
            f.write(b"y" * 7)
        assert os.stat(mine).st_size == i + 7, f"{name}: a size published on another node"
        os.chmod(theirs, 0o600)
        assert os.stat(mine).st_mode & 0o777 == 0o600, f"{name}: a mode set on another node"
        os.link(theirs, at(there, f"h{i}"))
        assert os.stat(mine).st_nlink == 2, f"{name}: a link made on another node"
        os.unlink(theirs)
        try:
            os.stat(mine)
            raise AssertionError(f"{name}: removed on another node, still stated here")
        except FileNotFoundError:
            pass
        assert os.stat(at(here, f"h{i}")).st_nlink == 1, f"h{i}: its other name went"
        with open(theirs, "wb") as f:
            f.write(b"z" * 3)
        again = os.stat(mine)
        assert (again.st_size, again.st_ino != before.st_ino) == (3, True), f"{name}: made anew on another node"
        os.rename(at(there, f"f{i + 1}"), at(there, f"g{i + 1}"))
        try:
            os.stat(at(here, f"f{i + 1}"))
            raise AssertionError(f"f{i + 1}: renamed on another node, still stated here")
        except FileNotFoundError:
            pass
        assert os.stat(at(here, f"g{i + 1}")).st_size == i + 1
    print("ok")


main()
