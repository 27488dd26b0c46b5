#!/usr/bin/env bash
# The mount's write path, two builds side by side: a 2-server instance on loopback (both
# servers on this node, so their chunks are written locally), mounted on the first server's
# node, files striped over both servers. Per round and build, interleaved:
#   * IOR shared file, 2 ranks, 1 MiB transfers, fsync (bench/posix.sh's row), with bindfs
#     over tmpfs in the same round as the baseline;
#   * one `dd` of SIZE MiB with fsync, and two at once (SIZE/2 each, two files), with the CPU
#     time of the mount and the servers over the single stream (`perf stat`), which stays
#     countable when elapsed times swing on a busy machine; then the single stream's file read
#     back at once on the node (from the kernel's pages, or through the mount when the writes
#     went around them).
#
#   BUILD_A=DIR BUILD_B=DIR bench/write_path.sh [ROUNDS] [IOR_BLOCK_PER_RANK] [SIZE_MIB]
#       defaults: 3 1g 2048; DIR holds `surge` with its surge-server and surge-fuse (e.g. a
#       copy of target/release from each commit); BUILD_B defaults to this tree's build. The
#       servers are build A's in both (what is compared is the mount and the client library).
#
# Needs root, bindfs, perf, and IOR's `ior` with Open MPI's `mpirun` on PATH (or IOR_BIN=DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BLOCK=${2:-1g}
SIZE=${3:-2048}
A=${BUILD_A:?BUILD_A=DIR: the build to compare against (surge, surge-server, surge-fuse)}
B=${BUILD_B:-$PWD/target/release}
SURGE_BIN=$A/surge
source bench/lib.sh
[ -n "${IOR_BIN:-}" ] && PATH=$IOR_BIN:$PATH
for tool in ior mpirun bindfs perf; do
    command -v $tool >/dev/null || { echo "bench/write_path.sh needs $tool on PATH (see the notes at the top)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=/dev/shm/surge-write-path-$$
NAME=writepath$$
mkdir -p "$WORK/surge" "$WORK/bindfs" "$WORK/bindfs-src"
trap "unmount_all_and_clean $WORK bindfs" EXIT
bindfs -o big_writes --multithreaded "$WORK/bindfs-src" "$WORK/bindfs"
$SURGE up --name "$NAME" --capacity 12G --root "$WORK/servers" --hosts 127.0.0.31,127.0.0.32 >/dev/null

ior_write() {
    mpirun -np 2 --oversubscribe ior -a POSIX -w -e -t 1m -b "$BLOCK" -i 1 -o "$1/ior" 2>&1 |
        awk '/^Summary of all tests/ {s=1} s && $1=="write" {printf "%d\n", $2}'
    rm -f "$1/ior"
}
# now_ms: a clock in milliseconds.
now_ms() { echo $(($(date +%s%N) / 1000000)); }

declare -A results
for round in $(seq "$ROUNDS"); do
    results[bindfs,ior]+="$(ior_write "$WORK/bindfs") "
    for build in A B; do
        dir=$A; [ $build = B ] && dir=$B
        "$dir/surge" mount "$NAME" "$WORK/surge" --node 127.0.0.31 >/dev/null
        results[$build,ior]+="$(ior_write "$WORK/surge") "
        pids=$( (pgrep -f "$dir/surge-fuse"; pgrep -f "surge-server.*$WORK") | paste -sd,)
        start=$(now_ms)
        perf stat -x, -e task-clock -p "$pids" -o "$WORK/perf.txt" -- \
            dd if=/dev/zero of="$WORK/surge/one" bs=1M count="$SIZE" conv=fsync 2>/dev/null
        elapsed=$(($(now_ms) - start))
        results[$build,one]+="$((SIZE * 1000 / elapsed)) "
        results[$build,cpu]+="$(awk -F, -v size="$SIZE" '/task-clock/ {printf "%d", $1 * 1024 / size}' "$WORK/perf.txt") "
        start=$(now_ms)
        dd if="$WORK/surge/one" of=/dev/null bs=1M 2>/dev/null
        results[$build,back]+="$((SIZE * 1000 / ($(now_ms) - start))) "
        start=$(now_ms)
        for f in two-a two-b; do dd if=/dev/zero of="$WORK/surge/$f" bs=1M count=$((SIZE / 2)) conv=fsync 2>/dev/null & done
        wait
        results[$build,two]+="$((SIZE * 1000 / ($(now_ms) - start))) "
        rm -f "$WORK/surge"/one "$WORK/surge"/two-*
        "$dir/surge" umount "$WORK/surge" >/dev/null
    done
    echo "round $round of $ROUNDS done" >&2
done

SYSTEMS="bindfs A B"
table_header "median of $ROUNDS (range)" "B / A" "B / bindfs"
for row in ior one two cpu back; do
    case $row in
        ior) label="IOR shared file write, 2 ranks, MiB/s" ;;
        one) label="one dd stream with fsync, MiB/s" ;;
        two) label="two dd streams at once, MiB/s in all" ;;
        cpu) label="CPU of mount and servers per GiB of the one stream, ms (lower is better)" ;;
        back) label="the one stream read back at once on the node, MiB/s" ;;
    esac
    base="-"; [ $row = ior ] && base=$(cell "${results[bindfs,$row]}")
    ratio_b="-"; [ $row = ior ] && ratio_b=$(ratio "${results[B,$row]}" "${results[bindfs,$row]}")
    echo "| $label | $base | $(cell "${results[A,$row]}") | $(cell "${results[B,$row]}") | $(ratio "${results[B,$row]}" "${results[A,$row]}") | $ratio_b |"
done
