#!/usr/bin/env bash
# The standard HPC suites through each file system a user could run instead, in one sitting:
# IOR file-per-process and shared-file (1 MiB transfers, fsync after writing, 2 ranks) and
# mdtest (-n ITEMS per rank: directories and files in one shared directory; then the same items
# in a tree of 585 directories, -b 8 -z 3, for the tree rows: the default tree is one
# directory, whose creation and removal time is one call plus MPI's barrier, about 12 ms with
# two busy-polling ranks on two cores, whatever the file system), on
#   tmpfs                the local file system itself (the ceiling),
#   bindfs               a FUSE file system over tmpfs,
#   passthrough_hp       libfuse's high-performance example over tmpfs, with kernel passthrough,
#   passthrough_hp-nopt  the same with --nopassthrough,
#   surge                a 2-server Surge instance on loopback, node-local layout, mounted on
#                        the first server's node (its files pass through to the kernel; requests
#                        over FUSE-over-io_uring, whose enable_uring parameter this script turns
#                        on); IOR's shared file goes in a directory set back to striped (both
#                        servers).
# Rounds are interleaved over the systems (the machine is noisy); each cell is the median of the
# rounds and their range.
#
#   bench/posix.sh [BLOCK_PER_RANK] [MDTEST_ITEMS] [ROUNDS]     defaults: 1g 10000 3
#
# Needs IOR's `ior` and `mdtest` (built from github.com/hpc/ior: ./bootstrap && ./configure &&
# make) and Open MPI's `mpirun` on PATH (or IOR_BIN=DIR), and for its columns libfuse's
# example/passthrough_hp (libfuse >= 3.17 for passthrough; PASSTHROUGH_HP=PATH). Run as root:
# kernel passthrough needs CAP_SYS_ADMIN.
set -euo pipefail
cd "$(dirname "$0")/.."
BLOCK=${1:-1g}
ITEMS=${2:-10000}
ROUNDS=${3:-3}
source bench/lib.sh
[ -n "${IOR_BIN:-}" ] && PATH=$IOR_BIN:$PATH
for tool in ior mdtest mpirun bindfs; do
    command -v $tool >/dev/null || { echo "bench/posix.sh needs $tool on PATH (see the notes at the top)" >&2; exit 2; }
done
PTHP=${PASSTHROUGH_HP:-$(command -v passthrough_hp || true)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
URING_PARAM=/sys/module/fuse/parameters/enable_uring
[ -w "$URING_PARAM" ] && echo Y >"$URING_PARAM"
WORK=/dev/shm/surge-posix-bench-$$
NAME=posixbench$$
SYSTEMS="tmpfs bindfs"
[ -n "$PTHP" ] && SYSTEMS+=" passthrough_hp passthrough_hp-nopt"
SYSTEMS+=" surge"
trap "unmount_all_and_clean $WORK bindfs passthrough_hp passthrough_hp-nopt" EXIT
for t in $SYSTEMS; do mkdir -p "$WORK/$t" "$WORK/$t-src"; done

bindfs -o big_writes --multithreaded "$WORK/bindfs-src" "$WORK/bindfs"
if [ -n "$PTHP" ]; then
    "$PTHP" "$WORK/passthrough_hp-src" "$WORK/passthrough_hp"
    "$PTHP" --nopassthrough "$WORK/passthrough_hp-nopt-src" "$WORK/passthrough_hp-nopt"
fi
$SURGE up --name "$NAME" --capacity 12G --root "$WORK/servers" --hosts 127.0.0.31,127.0.0.32 --layout node-local >/dev/null
SURGE_LOG=info $SURGE mount "$NAME" "$WORK/surge" --node 127.0.0.31 >/dev/null
grep -q "passthrough on" "$SURGE_HOME/instances/$NAME.fuse.log" ||
    echo "note: the Surge mount did not turn passthrough on (needs root and Linux 6.9+)" >&2
for t in $SYSTEMS; do mkdir -p "$WORK/$t/shared"; done
$SURGE layout "$WORK/surge/shared" striped >/dev/null

# ior DIR EXTRA... -> "WRITE READ" MiB/s (IOR's summary, one repetition; files removed after)
ior_run() {
    local dir=$1; shift
    mpirun -np 2 --oversubscribe ior -a POSIX -w -r -e -t 1m -b "$BLOCK" -i 1 -o "$dir/ior" "$@" 2>&1 |
        awk '/^Summary of all tests/ {s=1} s && $1=="write" {w=$2} s && $1=="read" {r=$2} END {printf "%d %d\n", w, r}'
}
MD_ROWS="Directory_creation Directory_stat Directory_rename Directory_removal File_creation File_stat File_removal Tree_creation Tree_removal"
# mdtest DIR [EXTRA...] -> one rate (ops/s) per row of MD_ROWS, in that order
md_run() {
    local dir=$1; shift
    mpirun -np 2 --oversubscribe mdtest -n "$ITEMS" -d "$dir/md" "$@" 2>&1 | awk -v rows="$MD_ROWS" '
        { line = $1 "_" $2 } $3 ~ /^[0-9.]+$/ { rate[line] = $5 }
        END { n = split(rows, r, " "); for (i = 1; i <= n; i++) printf "%d ", rate[r[i]]; print "" }'
    # passthrough_hp's rm -rf leaves directories "not empty": clear what is left from beneath.
    rm -rf "$dir/md" 2>/dev/null || rm -rf "$dir-src/md"
}

declare -A results
for round in $(seq "$ROUNDS"); do
    for t in $SYSTEMS; do
        read -r w r <<<"$(ior_run "$WORK/$t" -F)"
        results[$t,fpp-write]+="$w "; results[$t,fpp-read]+="$r "
        read -r w r <<<"$(ior_run "$WORK/$t/shared")"
        results[$t,shared-write]+="$w "; results[$t,shared-read]+="$r "
        i=0
        for rate in $(md_run "$WORK/$t"); do
            row=$(echo $MD_ROWS | cut -d' ' -f$((i + 1)))
            [[ $row != Tree_* ]] && results[$t,$row]+="$rate "
            i=$((i + 1))
        done
        i=0
        for rate in $(md_run "$WORK/$t" -b 8 -z 3); do
            row=$(echo $MD_ROWS | cut -d' ' -f$((i + 1)))
            [[ $row == Tree_* ]] && results[$t,$row]+="$rate "
            i=$((i + 1))
        done
        echo "round $round of $ROUNDS: $t done" >&2
    done
done

table_header "2 ranks (median of $ROUNDS, range)" "surge / tmpfs" "surge / bindfs"
for row in fpp-write fpp-read shared-write shared-read $MD_ROWS; do
    case $row in
        fpp-*) label="IOR file-per-process ${row#fpp-}, MiB/s" ;;
        shared-*) label="IOR shared file ${row#shared-}, MiB/s" ;;
        Tree_*) label="mdtest ${row//_/ } (585-directory tree), ops/s" ;;
        *) label="mdtest ${row//_/ }, ops/s" ;;
    esac
    line="| $label |"
    for t in $SYSTEMS; do line+=" $(cell "${results[$t,$row]}") |"; done
    echo "$line $(ratio "${results[surge,$row]}" "${results[tmpfs,$row]}") | $(ratio "${results[surge,$row]}" "${results[bindfs,$row]}") |"
done
