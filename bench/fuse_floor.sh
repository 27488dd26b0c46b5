#!/usr/bin/env bash
# How fast can any FUSE file system create and remove files on this machine? mdtest's file rows
# (2 ranks, -F -n ITEMS each, one shared directory), and what one create (open O_CREAT|O_EXCL,
# close) and one unlink take for a single process, one after another (a round trip each, no
# overlap: the latency a serial tool such as tar or cp sees), and one stat of a missing name
# (a request each file system answers from what it holds: the per-request floor), through
#   bindfs        a FUSE file system over tmpfs (the issue's yardstick),
#   memfs         libfuse's in-memory example (example/memfs_ll), which answers every request
#                 from its own memory, with entries and attributes cached for good (no_timeout):
#                 the floor of a FUSE file system answering from memory over /dev/fuse,
#   memfs-uring   the same over FUSE-over-io_uring (Linux 6.14+; the fuse module's
#                 enable_uring parameter, which this script turns on),
#   memfs-uring-perm  the same with default_permissions, as Surge mounts: the kernel checks
#                 permissions itself, and asks for a directory's attributes again after every
#                 change in it (the floor of a file system that leaves the checks to the kernel),
#   surge         a 2-server Surge instance on loopback, node-local layout, mounted on the first
#                 server's node, as mounts run by default: requests over FUSE-over-io_uring,
#                 each CPU's queue served by a thread kept on that CPU,
#   surge-devfuse the same instance mounted a second time on that node, the mount reading the
#                 kernel's requests from /dev/fuse (SURGE_FUSE_IO_URING=0: the mount on a
#                 kernel without io_uring).
# Rounds are interleaved over the systems; each cell is the median of the rounds and their range.
#
#   bench/fuse_floor.sh [ITEMS] [ROUNDS]        defaults: 3000 3
#
# Needs mdtest (github.com/hpc/ior) and Open MPI's mpirun on PATH (or IOR_BIN=DIR), bindfs, and
# libfuse's example/memfs_ll built with io_uring support (libfuse >= 3.19 with liburing-dev;
# MEMFS_LL=PATH). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
ITEMS=${1:-3000}
ROUNDS=${2:-3}
source bench/lib.sh
[ -n "${IOR_BIN:-}" ] && PATH=$IOR_BIN:$PATH
MEMFS=${MEMFS_LL:-$(command -v memfs_ll || true)}
for tool in mdtest mpirun bindfs "$MEMFS"; do
    command -v "$tool" >/dev/null || { echo "bench/fuse_floor.sh needs ${tool:-memfs_ll} (see the notes at the top)" >&2; exit 2; }
done
URING_PARAM=/sys/module/fuse/parameters/enable_uring
[ -w "$URING_PARAM" ] || { echo "bench/fuse_floor.sh needs $URING_PARAM (Linux 6.14+, as root)" >&2; exit 2; }
echo Y >"$URING_PARAM"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=/dev/shm/surge-fuse-floor-$$
NAME=fusefloor$$
SYSTEMS="bindfs memfs memfs-uring memfs-uring-perm surge surge-devfuse"
trap "unmount_all_and_clean $WORK bindfs memfs memfs-uring memfs-uring-perm surge-devfuse" EXIT
for t in $SYSTEMS; do mkdir -p "$WORK/$t"; done
mkdir -p "$WORK/bindfs-src"

bindfs -o big_writes --multithreaded "$WORK/bindfs-src" "$WORK/bindfs"
"$MEMFS" -o no_timeout "$WORK/memfs"
"$MEMFS" -o no_timeout,io_uring "$WORK/memfs-uring"
"$MEMFS" -o no_timeout,io_uring,default_permissions "$WORK/memfs-uring-perm"
$SURGE up --name "$NAME" --capacity 4G --root "$WORK/servers" --hosts 127.0.0.31,127.0.0.32 --layout node-local >/dev/null
$SURGE mount "$NAME" "$WORK/surge" --node 127.0.0.31 >/dev/null
SURGE_FUSE_IO_URING=0 $SURGE mount "$NAME" "$WORK/surge-devfuse" --node 127.0.0.31 >/dev/null

# files DIR SYSTEM -> "CREATE REMOVE" files/s (mdtest's summary). Each system its own directory:
# the two surge mounts share one instance, and a directory whose names another mount's kernel
# holds is not delegated (docs/delegation.md).
files() {
    mpirun -np 2 --oversubscribe mdtest -F -n "$ITEMS" -d "$1/md-$2" 2>&1 |
        awk '$1 == "File" && $2 == "creation" {c = $5} $1 == "File" && $2 == "removal" {r = $5}
             END {printf "%d %d\n", c, r}'
}

# serial DIR -> "CREATE UNLINK LOOKUP" microseconds per file, for ITEMS files made then removed
# by one process, and per stat of a name that is not there
serial() {
    mkdir -p "$1/serial"
    python3 bench/serial_create_unlink.py "$1/serial" "$ITEMS" --lookups
    rmdir "$1/serial"
}

declare -A results
for round in $(seq "$ROUNDS"); do
    for t in $SYSTEMS; do
        read -r c r <<<"$(files "$WORK/$t" "$t")"
        results[$t,create]+="$c "; results[$t,remove]+="$r "
        read -r c r l <<<"$(serial "$WORK/$t")"
        results[$t,serial-create]+="$c "; results[$t,serial-unlink]+="$r "; results[$t,serial-lookup]+="$l "
    done
    echo "round $round of $ROUNDS done" >&2
done

OTHERS="memfs memfs-uring memfs-uring-perm surge surge-devfuse"
ratios=(); for t in $OTHERS; do ratios+=("$t / bindfs"); done
table_header "files/s, 2 ranks x $ITEMS (median of $ROUNDS, range)" "${ratios[@]}"
for row in create remove serial-create serial-unlink serial-lookup; do
    case $row in
        serial-create) line="| one process, create + close, us per file (lower is better) |" ;;
        serial-unlink) line="| one process, unlink, us per file (lower is better) |" ;;
        serial-lookup) line="| one process, stat of a name that is not there, us (lower is better) |" ;;
        *) line="| mdtest file $row |" ;;
    esac
    for t in $SYSTEMS; do line+=" $(cell "${results[$t,$row]}") |"; done
    for t in $OTHERS; do line+=" $(ratio "${results[$t,$row]}" "${results[bindfs,$row]}") |"; done
    echo "$line"
done
