#!/usr/bin/env bash
# Kernel passthrough benchmark: file-per-process 1 MiB sequential write (fsync at the end) and
# read, IOR's file-per-process pattern run with fio, 1 and 2 jobs, on (1) tmpfs, (2) a Surge
# mount of a one-server instance whose files are passed through to the kernel, (3) the same
# instance mounted with --no-passthrough, (4) bindfs over tmpfs. Rounds are interleaved (the
# machine is noisy); the table gives the median of the rounds and their range, and Surge's
# ratio to tmpfs.
#
#   bench/passthrough.sh [SIZE_PER_JOB] [ROUNDS]      defaults: 1G 3
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1G}
ROUNDS=${2:-3}
source bench/lib.sh
WORK=/dev/shm/surge-passthrough-bench-$$
NAME=ptbench$$
mkdir -p "$WORK/tmpfs" "$WORK/bind-src" "$WORK/bind" "$WORK/surge" "$WORK/surge-nopt"
cleanup() {
    fusermount3 -u "$WORK/bind" 2>/dev/null || true
    $SURGE umount "$WORK/surge" >/dev/null 2>&1 || true
    $SURGE umount "$WORK/surge-nopt" >/dev/null 2>&1 || true
    down_all_instances
    rm -rf "$WORK" "$SURGE_HOME"
}
trap cleanup EXIT

$SURGE up --name "$NAME" --capacity 8G --root "$WORK/servers" --servers 1 >/dev/null
# At info level the mount's log says whether the kernel took passthrough.
SURGE_LOG=info $SURGE mount "$NAME" "$WORK/surge" >/dev/null
SURGE_FUSE_NO_PASSTHROUGH=1 $SURGE mount "$NAME" "$WORK/surge-nopt" >/dev/null
bindfs -o big_writes --multithreaded "$WORK/bind-src" "$WORK/bind"
grep -q "passthrough on" "$SURGE_HOME/instances/$NAME.fuse.log" ||
    echo "note: the mount did not turn passthrough on (needs root and Linux 6.9+)" >&2

SYSTEMS="tmpfs surge surge-nopt bind"
declare -A results
for round in $(seq "$ROUNDS"); do
    for jobs in 1 2; do
        for t in $SYSTEMS; do
            results[$t,write,$jobs]+="$(fio_run "$WORK/$t" write 1M "$SIZE" $jobs --end_fsync=1) "
            results[$t,read,$jobs]+="$(fio_run "$WORK/$t" read 1M "$SIZE" $jobs) "
            rm -f "$WORK/$t"/b.*
        done
    done
    echo "round $round of $ROUNDS done" >&2
done

printf '| fio file-per-process, 1 MiB, MiB/s (median of %s, range) | tmpfs | Surge, passthrough | Surge, no passthrough | bindfs | passthrough / tmpfs |\n|---|---|---|---|---|---|\n' "$ROUNDS"
for jobs in 1 2; do
    for rw in write read; do
        printf '| %s, %s job(s) | %s | %s | %s | %s | %s |\n' "$rw" "$jobs" \
            "$(cell "${results[tmpfs,$rw,$jobs]}")" "$(cell "${results[surge,$rw,$jobs]}")" \
            "$(cell "${results[surge-nopt,$rw,$jobs]}")" "$(cell "${results[bind,$rw,$jobs]}")" \
            "$(ratio "${results[surge,$rw,$jobs]}" "${results[tmpfs,$rw,$jobs]}")"
    done
done
