#!/usr/bin/env bash
# What replication costs: two 4-server instances side by side, one with one copy of each share
# and one with two (`surge up --replicas 2`), measured in turns (A, B, A, B ...) so that the
# machine's noise falls on both. Library streams and metadata rates (`surge bench`), and 1 MiB
# sequential writes and reads through a mount (fio). Prints median (min-max) of the rounds and
# the ratios of the medians. All servers share this machine, so clients read and write their
# data files themselves (local I/O) where they may: with two copies they may not write them
# (the mirror would not see those bytes); the middle column, one copy with local I/O off
# (SURGE_LOCAL_IO=0), tells that part of the cost from the mirror's.
#
#   bench/replication.sh [SIZE] [FILES] [ROUNDS]      defaults: 1G 10000 3
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1G}
FILES=${2:-10000}
ROUNDS=${3:-3}
source bench/lib.sh
WORK=/dev/shm/surge-replication-$$
mkdir -p "$WORK"
SYSTEMS="one-copy one-copy-net two-copies"
trap 'for s in $SYSTEMS; do $SURGE umount "$WORK/mnt-$s" >/dev/null 2>&1 || true; done; unmount_all_and_clean "$WORK"' EXIT

$SURGE up --name one-copy --capacity 8G --root "$WORK" --hosts 127.0.0.162,127.0.0.163,127.0.0.164,127.0.0.165 >/dev/null
$SURGE up --name two-copies --capacity 8G --root "$WORK" --replicas 2 \
    --hosts 127.0.0.166,127.0.0.167,127.0.0.168,127.0.0.169 >/dev/null
# one-copy-net is the one-copy instance, its clients (library, mount) with local I/O off.
surge() { local s=$1; shift; if [ "$s" = one-copy-net ]; then SURGE_LOCAL_IO=0 $SURGE "$@"; else $SURGE "$@"; fi; }
instance() { [ "$1" = one-copy-net ] && echo one-copy || echo "$1"; }
for s in $SYSTEMS; do
    mkdir -p "$WORK/mnt-$s"
    surge "$s" mount "$(instance "$s")" "$WORK/mnt-$s" >/dev/null
done

declare -A R
add() { R[$1]="${R[$1]:-} $2"; }

for round in $(seq "$ROUNDS"); do
    echo "round $round of $ROUNDS ..." >&2
    for s in $SYSTEMS; do
        for procs in 1 2; do
            j=$(surge "$s" bench seq --instance "$(instance "$s")" --size "$SIZE" --block 1M --procs $procs --json)
            add "lib write $procs $s" "$(field "$j" write_mib_s)"
            add "lib read $procs $s" "$(field "$j" read_mib_s)"
        done
        j=$(surge "$s" bench meta --instance "$(instance "$s")" --files "$FILES" --concurrency 16 --json)
        for op in create stat unlink; do add "meta $op $s" "$(field "$j" ${op}_per_s)"; done
        dir="$WORK/mnt-$s/fio"
        mkdir -p "$dir"
        add "mount write $s" "$(fio_run "$dir" write 1M "$SIZE" 1 --end_fsync=1)"
        # Small writes all over the file just written: each is a change the mirror is sent.
        add "mount randwrite $s" "$(fio_run "$dir" randwrite 4k "$SIZE" 1 "--runtime=10 --time_based")"
        sync
        echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
        add "mount read $s" "$(fio_run "$dir" read 1M "$SIZE" 1)"
        rm -rf "$dir"
    done
done

row() {
    local label=$1 key=$2
    printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$(cell "${R[$key one-copy]}")" "$(cell "${R[$key one-copy-net]}")" \
        "$(cell "${R[$key two-copies]}")" "$(ratio "${R[$key two-copies]}" "${R[$key one-copy]}")" \
        "$(ratio "${R[$key two-copies]}" "${R[$key one-copy-net]}")"
}
echo
table_header "4 servers, $ROUNDS rounds, median (min-max)" "2 / 1" "2 / 1-net"
for procs in 1 2; do
    row "library seq write $SIZE x $procs proc, MiB/s" "lib write $procs"
    row "library seq read $SIZE x $procs proc, MiB/s" "lib read $procs"
done
for op in create stat unlink; do row "library $op, $FILES files, 16 in flight, ops/s" "meta $op"; done
row "mount fio write 1 MiB $SIZE (end_fsync), MiB/s" "mount write"
row "mount fio randwrite 4 KiB in $SIZE, 10 s, IOPS" "mount randwrite"
row "mount fio read 1 MiB $SIZE (cold), MiB/s" "mount read"
