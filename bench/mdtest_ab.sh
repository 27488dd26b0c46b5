#!/usr/bin/env bash
# mdtest through the mount, two builds side by side: per round and build, interleaved, a fresh
# 2-server instance on loopback (node-local layout, tmpfs underneath) mounted on this node, and
# `mdtest -n ITEMS` with 2 ranks in one shared directory (directories, then files: creation,
# stat, removal). Prints each row's median and range for A and B, and B / A.
#
#   BUILD_A=DIR BUILD_B=DIR bench/mdtest_ab.sh [ROUNDS] [ITEMS]
#       defaults: 3 10000; DIR holds `surge` with its surge-server and surge-fuse (e.g. the
#       target/release of a worktree at each commit); BUILD_B defaults to this tree's build.
#       Each build runs its own servers and mount (protocols may differ).
#
# Needs root (the mount), and IOR's `mdtest` with Open MPI's `mpirun` on PATH (or IOR_BIN=DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
ITEMS=${2:-10000}
A=${BUILD_A:?BUILD_A=DIR: the build to compare against (surge, surge-server, surge-fuse)}
B=${BUILD_B:-$PWD/target/release}
source bench/lib.sh
[ -n "${IOR_BIN:-}" ] && PATH=$IOR_BIN:$PATH
for tool in mdtest mpirun; do
    command -v $tool >/dev/null || { echo "bench/mdtest_ab.sh needs $tool on PATH (see the notes at the top)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=/dev/shm/surge-mdtest-ab-$$
trap 'for b in "$A" "$B"; do SURGE=$b/surge down_all_instances; done; rm -rf "$WORK" "$SURGE_HOME"' EXIT
ROWS="Directory_creation Directory_stat Directory_rename Directory_removal File_creation File_stat File_removal"

# one_round BUILD -> "ROW RATE" lines, one per row of ROWS
one_round() {
    local surge=$1/surge name=mdab$$
    rm -rf "$WORK" && mkdir -p "$WORK"
    $surge up --name $name --capacity 4G --root "$WORK/servers" --hosts 127.0.6.11,127.0.6.12 \
        --layout node-local --mount "$WORK/m" >/dev/null
    mpirun -np 2 --oversubscribe mdtest -n "$ITEMS" -d "$WORK/m/md" 2>&1 |
        awk '/^ *(Directory|File) (creation|stat|rename|removal)/ { printf "%s_%s %d\n", $1, $2, $4 }'
    $surge umount "$WORK/m" >/dev/null 2>&1 || true
    $surge down $name >/dev/null 2>&1 || true
}

declare -A results
for round in $(seq "$ROUNDS"); do
    for build in A B; do
        dir=$A; [ $build = B ] && dir=$B
        while read -r row rate; do results[$build,$row]+=" $rate"; done < <(one_round "$dir")
        echo "round $round of $ROUNDS: $build done" >&2
    done
done
SYSTEMS="A B"
table_header "mdtest, 2 ranks x $ITEMS, ops/s: median of $ROUNDS (range)" "B / A"
for row in $ROWS; do
    echo "| ${row//_/ } | $(cell "${results[A,$row]:-0}") | $(cell "${results[B,$row]:-0}") | $(ratio "${results[B,$row]:-0}" "${results[A,$row]:-0}") |"
done
