#!/usr/bin/env bash
# Staging benchmark: stage-in and stage-out of one large file and of a tree of many small files
# between a "PFS" on the local disk and a 4-server instance on tmpfs, against, in the same run,
#   * cp / cp -r into a plain tmpfs directory (and into the instance's FUSE mount),
#   * raw fio throughput of the slower side (the disk: read for stage-in, write+fsync for stage-out).
# Page caches are dropped before every read of the disk (root needed), and every stage-out or
# copy to the disk is followed by `sync`, whose time counts: the data must be on the disk.
#
#   bench/staging.sh [LARGE_SIZE] [SMALL_FILES]       defaults: 4G 20000
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-4G}
FILES=${2:-20000}
# SURGE_BIN: another build's `surge` (with its surge-server and surge-fuse beside it), for A/B runs.
SURGE=${SURGE_BIN:-$PWD/target/release/surge}
[ "$(id -u)" = 0 ] || { echo "bench/staging.sh needs root (it drops page caches)" >&2; exit 1; }
export SURGE_HOME=$(mktemp -d /tmp/surge-bench-home.XXXX)
PFS=/var/tmp/surge-stage-bench-$$
SHM=/dev/shm/surge-stage-bench-$$
NAME=stagebench$$
mkdir -p "$PFS" "$SHM/tmpfs" "$SHM/mnt"
cleanup() {
    $SURGE down "$NAME" --force >/dev/null 2>&1 || true
    rm -rf "$PFS" "$SHM" "$SURGE_HOME"
}
trap cleanup EXIT

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# seconds SECONDS_EXPRESSION... : wall time of a command line, in seconds
seconds() { local t0=$(date +%s.%N); "$@" >/dev/null; python3 -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.3f}')" "$t0"; }
rate() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2])/2**20:.0f}')" "$1" "$2"; }
bytes_of() { du -sb "$1" | cut -f1; }

echo "preparing: $SIZE file and $FILES small files on $PFS" >&2
fio --name=make --filename="$PFS/large.bin" --rw=write --bs=1M --size="$SIZE" --refill_buffers --end_fsync=1 >/dev/null
python3 - "$PFS/tree" "$FILES" <<'EOF'
import os, random, sys
root, count = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for i in range(count):
    d = os.path.join(root, f"dir{i % 200:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"file{i:06d}.dat"), "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 32) * 1024))
EOF
LARGE=$(bytes_of "$PFS/large.bin")
TREE=$(bytes_of "$PFS/tree")

# Capacity must fit the free space of /dev/shm (checked by `surge up`): the large file twice
# (in, then out) and the tree, with room to spare.
$SURGE up --name "$NAME" --servers 4 --capacity 16G --root "$SHM/servers" --mount "$SHM/mnt" >/dev/null

# Raw disk, the slower side.
drop_caches
raw_read=$(fio --name=r --filename="$PFS/large.bin" --rw=read --bs=1M --output-format=json 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw"]/1024))')
raw_write=$(fio --name=w --filename="$PFS/raw-write.bin" --rw=write --bs=1M --size="$SIZE" --end_fsync=1 --output-format=json 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["bw"]/1024))')
rm -f "$PFS/raw-write.bin"

# Large file in.
drop_caches; t_stage_in=$(seconds $SURGE stage in "$PFS/large.bin" /large.bin --wait -i "$NAME")
drop_caches; t_cp_in=$(seconds cp "$PFS/large.bin" "$SHM/tmpfs/large.bin")
drop_caches; t_cpm_in=$(seconds cp "$PFS/large.bin" "$SHM/mnt/large-cp.bin")
rm -f "$SHM/mnt/large-cp.bin"
# Large file out (+ sync: on the disk).
t_stage_out=$(seconds bash -c "$SURGE stage out /large.bin $PFS/out/large.bin --wait -i $NAME && sync")
t_cp_out=$(seconds bash -c "cp $SHM/tmpfs/large.bin $PFS/large-cp.bin && sync")
t_cpm_out=$(seconds bash -c "cp $SHM/mnt/large.bin $PFS/large-cpm.bin && sync")
cmp -s "$PFS/large.bin" "$PFS/out/large.bin" || { echo "staged-out large file differs" >&2; exit 1; }
rm -f "$SHM/tmpfs/large.bin" "$PFS/large-cp.bin" "$PFS/large-cpm.bin" "$PFS/out/large.bin"
$SURGE rm /large.bin -i "$NAME"

# Tree in.
drop_caches; t_tree_in=$(seconds $SURGE stage in "$PFS/tree" /tree --wait -i "$NAME")
drop_caches; t_cpr_in=$(seconds cp -r "$PFS/tree" "$SHM/tmpfs/tree")
drop_caches; t_cprm_in=$(seconds cp -r "$PFS/tree" "$SHM/mnt/tree-cp")
# Tree out.
t_tree_out=$(seconds bash -c "$SURGE stage out /tree $PFS/out/tree --wait -i $NAME && sync")
t_cpr_out=$(seconds bash -c "cp -r $SHM/tmpfs/tree $PFS/tree-cp && sync")
t_cprm_out=$(seconds bash -c "cp -r $SHM/mnt/tree-cp $PFS/tree-cpm && sync")
diff -r "$PFS/tree" "$PFS/out/tree" >/dev/null || { echo "staged-out tree differs" >&2; exit 1; }

ratio() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.2f}')" "$1" "$2"; }
printf '| operation | Surge stage | cp, plain tmpfs side | cp through the Surge mount | raw disk (fio) | stage / raw | speed-up vs cp (tmpfs) | speed-up vs cp (mount) |\n|---|---|---|---|---|---|---|---|\n'
printf '| %s file in, MiB/s | %s | %s | %s | %s (read) | %s | %s | %s |\n' "$SIZE" "$(rate $LARGE $t_stage_in)" "$(rate $LARGE $t_cp_in)" "$(rate $LARGE $t_cpm_in)" "$raw_read" \
    "$(ratio "$(rate $LARGE $t_stage_in)" "$raw_read")" "$(ratio $t_cp_in $t_stage_in)" "$(ratio $t_cpm_in $t_stage_in)"
printf '| %s file out + sync, MiB/s | %s | %s | %s | %s (write+fsync) | %s | %s | %s |\n' "$SIZE" "$(rate $LARGE $t_stage_out)" "$(rate $LARGE $t_cp_out)" "$(rate $LARGE $t_cpm_out)" "$raw_write" \
    "$(ratio "$(rate $LARGE $t_stage_out)" "$raw_write")" "$(ratio $t_cp_out $t_stage_out)" "$(ratio $t_cpm_out $t_stage_out)"
printf '| %s small files in (%s MiB), seconds | %s | %s | %s | - | - | %s | %s |\n' "$FILES" "$((TREE >> 20))" "$t_tree_in" "$t_cpr_in" "$t_cprm_in" "$(ratio $t_cpr_in $t_tree_in)" "$(ratio $t_cprm_in $t_tree_in)"
printf '| %s small files out + sync, seconds | %s | %s | %s | - | - | %s | %s |\n' "$FILES" "$t_tree_out" "$t_cpr_out" "$t_cprm_out" "$(ratio $t_cpr_out $t_tree_out)" "$(ratio $t_cprm_out $t_tree_out)"
