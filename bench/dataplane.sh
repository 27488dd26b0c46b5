#!/usr/bin/env bash
# Data-plane benchmark: a 4-server Surge instance (tmpfs-backed, loopback) against a local tmpfs
# directory, same access pattern, same run. Prints a table of ratios (Surge / tmpfs).
#
#   bench/dataplane.sh [SIZE_PER_PROC] [META_FILES]      defaults: 1G 20000
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1G}
FILES=${2:-20000}
source bench/lib.sh
ROOT=/dev/shm/surge-bench-$$
BASE=/dev/shm/surge-bench-baseline-$$
mkdir -p "$BASE"
NAME=bench$$
cleanup() {
    down_all_instances
    rm -rf "$ROOT" "$BASE" "$SURGE_HOME"
}
trap cleanup EXIT

echo "== start-up of an 8-server instance (5 runs)"
for i in 1 2 3 4 5; do
    out=$($SURGE up --name "start$i" --capacity 8G --root "$ROOT" --hosts 127.0.0.11,127.0.0.12,127.0.0.13,127.0.0.14,127.0.0.15,127.0.0.16,127.0.0.17,127.0.0.18)
    echo "${out%%$'\n'*}"
    $SURGE down "start$i" >/dev/null
done

$SURGE up --name "$NAME" --capacity 16G --root "$ROOT" --servers 4 >/dev/null

json() { "$SURGE" bench "$@" --json; }

printf '\n| benchmark | Surge (4 servers) | tmpfs | Surge / tmpfs |\n|---|---|---|---|\n'
for procs in 1 2; do
    s=$(json seq --instance "$NAME" --size "$SIZE" --block 1M --procs $procs)
    b=$(json seq --dir "$BASE" --size "$SIZE" --block 1M --procs $procs)
    for phase in write read; do
        sv=$(field "$s" ${phase}_mib_s); bv=$(field "$b" ${phase}_mib_s)
        printf '| seq %s 1 MiB, %s proc, MiB/s | %.0f | %.0f | %s |\n' $phase $procs "$sv" "$bv" "$(ratio "$sv" "$bv")"
    done
done
for conc in 1 16; do
    s=$(json meta --instance "$NAME" --files "$FILES" --concurrency $conc)
    b=$(json meta --dir "$BASE" --files "$FILES" --concurrency 1)
    for op in create stat unlink; do
        sv=$(field "$s" ${op}_per_s); bv=$(field "$b" ${op}_per_s)
        printf '| %s %s files, %s in flight (tmpfs: 1 thread), ops/s | %.0f | %.0f | %s |\n' $op "$FILES" $conc "$sv" "$bv" "$(ratio "$sv" "$bv")"
    done
done
