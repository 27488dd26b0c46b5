#!/usr/bin/env bash
# The interception library against the kernel's paths, one process (bench/preload/ops.c): a
# serial create (open O_CREAT|O_EXCL, write, close), stat, read (open, read, close) and unlink
# of FILES files of SIZE bytes, then a STREAM_MIB MiB file written in 1 MiB writes and read
# back, through
#   tmpfs      a directory in /dev/shm (the yardstick),
#   bindfs     a FUSE file system over that tmpfs directory (the kernel's FUSE floor),
#   surge      a 2-server Surge instance on loopback (its servers on /dev/shm), through its
#              mount on the first server's node,
#   surge-lib  the same directory under `LD_PRELOAD=libsurge_preload.so` (what `surge run`
#              does): the same calls served in the process.
# Rounds are interleaved over the systems; each cell is the median of the rounds and their
# range; the last columns are surge-lib's median over the others'.
#
#   bench/preload.sh [FILES] [SIZE] [STREAM_MIB] [ROUNDS]       defaults: 2000 3901 512 3
#
# Needs a C compiler and bindfs. Run as root from a built tree (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-2000}
SIZE=${2:-3901}
STREAM=${3:-512}
ROUNDS=${4:-3}
source bench/lib.sh
for tool in cc bindfs; do
    command -v "$tool" >/dev/null || { echo "bench/preload.sh needs $tool" >&2; exit 2; }
done
LIB=$(dirname "$SURGE")/libsurge_preload.so
[ -e "$LIB" ] || { echo "no $LIB: cargo build --release first" >&2; exit 2; }
WORK=$(mktemp -d /dev/shm/surge-bench-preload.XXXX)
trap 'unmount_all_and_clean "$WORK" bindfs' EXIT
cc -O2 -Wall -o "$WORK/ops" bench/preload/ops.c
mkdir -p "$WORK/tmpfs" "$WORK/bindfs" "$WORK/surge"
bindfs "$WORK/tmpfs" "$WORK/bindfs"
$SURGE up --name preload-bench --servers 2 --capacity 8G --root "$WORK/servers" \
    --hosts 127.0.12.1,127.0.12.2 --mount "$WORK/surge" >/dev/null
export SURGE_NODE=127.0.12.1
# Pre-faults memory the runs will use (this VM hands freed memory back to its host).
dd if=/dev/zero of="$WORK/tmpfs/prefault" bs=1M count=$((STREAM * 3)) status=none && rm "$WORK/tmpfs/prefault"

SYSTEMS="tmpfs bindfs surge surge-lib"
declare -A RESULT
PHASES="create stat read unlink write read-stream"
for round in $(seq "$ROUNDS"); do
    for system in $SYSTEMS; do
        case $system in
            tmpfs) dir=$WORK/tmpfs/r$round; pre= ;;
            bindfs) dir=$WORK/bindfs/rb$round; pre= ;;
            surge) dir=$WORK/surge/r$round; pre= ;;
            surge-lib) dir=$WORK/surge/rl$round; pre=$LIB ;;
        esac
        # Each made as its program would make it: under the library for surge-lib (a
        # directory the mount made is one whose names the mount holds, so the library could
        # not hold it under a delegation).
        LD_PRELOAD=$pre mkdir "$dir"
        out=$(LD_PRELOAD=$pre "$WORK/ops" "$dir" "$FILES" "$SIZE" "$STREAM") || { echo "$system round $round failed" >&2; out=; }
        for phase in $PHASES; do
            value=$(awk -v p="$phase" '$1 == p { print $2 }' <<<"$out")
            RESULT[$system.$phase]+="${value:-0} "
        done
        rmdir "$dir" 2>/dev/null || true
    done
done

echo "One process, $FILES files of $SIZE bytes, a $STREAM MiB stream; $ROUNDS rounds: median (range)"
table_header "phase" "lib/tmpfs" "lib/bindfs" "lib/mount"
for phase in $PHASES; do
    unit=ops/s; [[ $phase == write || $phase == read-stream ]] && unit=MiB/s
    row="| $phase ($unit) |"
    for system in $SYSTEMS; do row+=" $(cell "${RESULT[$system.$phase]}") |"; done
    for other in tmpfs bindfs surge; do row+=" $(ratio "${RESULT[surge-lib.$phase]}" "${RESULT[$other.$phase]}") |"; done
    echo "$row"
done
