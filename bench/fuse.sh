#!/usr/bin/env bash
# FUSE benchmark: the same fio jobs and metadata run on (1) a Surge mount of a 4-server
# instance (tmpfs-backed, loopback), (2) a local tmpfs directory, (3) a bindfs FUSE
# passthrough of tmpfs — all in one run — and a table of Surge's ratios to both.
# The servers run on this node, so the mount reads and writes their chunks in their data
# directories (local I/O); the "network I/O" column runs the same jobs through a second mount
# with local I/O off (SURGE_LOCAL_IO=0), as on a node without a server of the instance.
#
#   bench/fuse.sh [SEQ_SIZE_PER_JOB] [META_FILES]      defaults: 1G 20000
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1G}
FILES=${2:-20000}
source bench/lib.sh
WORK=/dev/shm/surge-fuse-bench-$$
NAME=fusebench$$
mkdir -p "$WORK/tmpfs" "$WORK/bind-src" "$WORK/bind" "$WORK/surge" "$WORK/surge-net"
cleanup() {
    fusermount3 -u "$WORK/bind" 2>/dev/null || true
    $SURGE umount "$WORK/surge-net" >/dev/null 2>&1 || true
    down_all_instances
    rm -rf "$WORK" "$SURGE_HOME"
}
trap cleanup EXIT

$SURGE up --name "$NAME" --capacity 16G --root "$WORK/servers" --servers 4 --mount "$WORK/surge" >/dev/null
SURGE_LOCAL_IO=0 $SURGE mount "$NAME" "$WORK/surge-net" >/dev/null
bindfs -o big_writes --multithreaded "$WORK/bind-src" "$WORK/bind" 2>/dev/null || bindfs --multithreaded "$WORK/bind-src" "$WORK/bind"

printf '| benchmark | Surge mount | Surge, network I/O | tmpfs | bindfs | Surge/tmpfs | Surge/bindfs |\n|---|---|---|---|---|---|---|\n'
# row NAME SURGE TMPFS BINDFS [SURGE_NETWORK_READS]
row() { printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "${5:--}" "$3" "$4" \
    "$(python3 -c "print(f'{$2/$3:.2f}')")" "$(python3 -c "print(f'{$2/$4:.2f}')")"; }
for jobs in 1 2; do
    declare -A w r
    for t in surge surge-net tmpfs bind; do
        w[$t]=$(fio_run "$WORK/$t" write 1M "$SIZE" $jobs --end_fsync=1)
        r[$t]=$(fio_run "$WORK/$t" read 1M "$SIZE" $jobs)
        rm -f "$WORK/$t"/b.*
    done
    row "fio seq write 1 MiB, $jobs job(s), MiB/s" "${w[surge]}" "${w[tmpfs]}" "${w[bind]}" "${w[surge-net]}"
    row "fio seq read 1 MiB, $jobs job(s), MiB/s" "${r[surge]}" "${r[tmpfs]}" "${r[bind]}" "${r[surge-net]}"
done
declare -A rw rr
for t in surge surge-net tmpfs bind; do
    rw[$t]=$(fio_run "$WORK/$t" randwrite 4k 256M 1 "--time_based --runtime=10")
    rr[$t]=$(fio_run "$WORK/$t" randread 4k 256M 1 "--time_based --runtime=10")
    rm -f "$WORK/$t"/b.*
done
row "fio rand write 4 KiB, IOPS" "${rw[surge]}" "${rw[tmpfs]}" "${rw[bind]}" "${rw[surge-net]}"
row "fio rand read 4 KiB, IOPS" "${rr[surge]}" "${rr[tmpfs]}" "${rr[bind]}" "${rr[surge-net]}"
declare -A mc ms mu
for t in surge tmpfs bind; do
    out=$($SURGE bench meta --dir "$WORK/$t" --files "$FILES" --json)
    mc[$t]=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['create_per_s']))" "$out")
    ms[$t]=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['stat_per_s']))" "$out")
    mu[$t]=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['unlink_per_s']))" "$out")
done
row "create $FILES files in one dir, /s" "${mc[surge]}" "${mc[tmpfs]}" "${mc[bind]}"
row "stat $FILES files, /s" "${ms[surge]}" "${ms[tmpfs]}" "${ms[bind]}"
row "unlink $FILES files, /s" "${mu[surge]}" "${mu[tmpfs]}" "${mu[bind]}"
