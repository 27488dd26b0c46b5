#!/usr/bin/env bash
# Two builds side by side on the data and metadata paths: per round and build, interleaved, a
# fresh 4-server instance on loopback (tmpfs underneath) and
#   * the native client: `surge bench seq` (1 process, 1 MiB requests, write then read) and
#     `surge bench meta` (create, stat, unlink of FILES files, 1 and 16 in flight);
#   * a mount of it: one process creating then unlinking FILES files one after another
#     (bench/serial_create_unlink.py), and `dd` of a 512 MiB file in and out.
# Memory is written once before the first round (this VM's first touch of fresh pages costs
# 3-6x). Prints each row's median and range for A and B, and B / A of the medians.
#
#   BUILD_A=DIR [BUILD_B=DIR] bench/server_ab.sh [ROUNDS] [FILES] [SIZE]
#       defaults: 5 20000 1G; DIR holds `surge` with its surge-server and surge-fuse (the
#       target/release of a worktree at each commit); BUILD_B defaults to this tree's build.
#
# Needs root (the mount).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
FILES=${2:-20000}
SIZE=${3:-1G}
A=${BUILD_A:?BUILD_A=DIR: the build to compare against (surge, surge-server, surge-fuse)}
B=${BUILD_B:-$PWD/target/release}
source bench/lib.sh
WORK=/dev/shm/surge-server-ab-$$
RESULTS=$(mktemp)
trap 'for b in "$A" "$B"; do SURGE=$b/surge down_all_instances; done; rm -rf "$WORK" "$SURGE_HOME" "$RESULTS"' EXIT

# Pre-fault: write and drop 2 GiB of tmpfs, so no build pays for the first touch.
mkdir -p "$WORK" && dd if=/dev/zero of="$WORK/warm" bs=1M count=2048 status=none && rm -f "$WORK/warm"

field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# one_round LABEL BUILD -> appends "LABEL ROW VALUE" lines to $RESULTS
one_round() {
    local label=$1 surge=$2/surge name=srvab$$
    rm -rf "$WORK" && mkdir -p "$WORK"
    $surge up --name $name --capacity 8G --root "$WORK/servers" --hosts 127.0.6.21,127.0.6.22,127.0.6.23,127.0.6.24 \
        --mount "$WORK/m" >/dev/null
    local s m
    s=$($surge bench seq --instance $name --size "$SIZE" --block 1M --procs 1 --json)
    echo "$label seq_write_MiB/s $(field "$s" write_mib_s)" >>"$RESULTS"
    echo "$label seq_read_MiB/s $(field "$s" read_mib_s)" >>"$RESULTS"
    for conc in 1 16; do
        m=$($surge bench meta --instance $name --files "$FILES" --concurrency $conc --json)
        for op in create stat unlink; do
            echo "$label ${op}_${conc}_in_flight/s $(field "$m" ${op}_per_s)" >>"$RESULTS"
        done
    done
    mkdir "$WORK/m/serial"
    python3 bench/serial_create_unlink.py "$WORK/m/serial" "$FILES" |
        awk -v l="$label" '{ printf "%s mount_create_us %s\n%s mount_unlink_us %s\n", l, $1, l, $2 }' >>"$RESULTS"
    local t0 t1
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$WORK/m/big" bs=1M count=512 conv=fsync status=none
    t1=$(date +%s.%N)
    echo "$label mount_dd_write_MiB/s $(python3 -c "print(512 / ($t1 - $t0))")" >>"$RESULTS"
    sync; echo 1 >/proc/sys/vm/drop_caches
    t0=$(date +%s.%N)
    dd if="$WORK/m/big" of=/dev/null bs=1M status=none
    t1=$(date +%s.%N)
    echo "$label mount_dd_read_MiB/s $(python3 -c "print(512 / ($t1 - $t0))")" >>"$RESULTS"
    $surge umount "$WORK/m" >/dev/null 2>&1 || true
    $surge down $name >/dev/null 2>&1 || true
}

for round in $(seq "$ROUNDS"); do
    # Alternate which build goes first, so neither always meets a warmer machine.
    if [ $((round % 2)) -eq 1 ]; then one_round A "$A"; one_round B "$B"; else one_round B "$B"; one_round A "$A"; fi
    echo "round $round of $ROUNDS done" >&2
done

python3 - "$RESULTS" <<'EOF'
import statistics, sys
from collections import defaultdict
rows = defaultdict(lambda: defaultdict(list))
order = []
for line in open(sys.argv[1]):
    label, row, value = line.split()
    if row not in order:
        order.append(row)
    rows[row][label].append(float(value))
print("| row | A median (range) | B median (range) | B / A |\n|---|---|---|---|")
for row in order:
    a, b = rows[row]["A"], rows[row]["B"]
    ma, mb = statistics.median(a), statistics.median(b)
    cell = lambda v, m: f"{m:.0f} ({min(v):.0f}-{max(v):.0f})"
    print(f"| {row} | {cell(a, ma)} | {cell(b, mb)} | {mb / ma:.2f} |")
EOF
