#!/usr/bin/env bash
# The long form of tests/suite/fsx_mounts.rs: surge-fsx (tests/fsx.rs) on two mounts of a 4-server
# instance, one on a server's node (local reads, FUSE over io_uring) and one on a node of its
# own (network reads, /dev/fuse), each close checked through the other mount; xfstests
# generic/127's six mixes, 100,000 operations each. Prints a Markdown table (also in
# target/tmp/fsx-two-mounts.md); a failing mix's report goes to target/tmp/fsx-<mix>.txt and
# its expected and actual contents and operation log to target/tmp/fsx-saved/. Goes on after
# a failing mix; exits non-zero if any failed. Needs root (the mounts) and a release build.
#   bench/fsx-two-mounts.sh [OPS] [SEED] [MIX...]
# FSX_EXTRA adds arguments to every run (e.g. FSX_EXTRA="--close-every 3").
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace -q || exit 1
. bench/lib.sh

OPS=${1:-100000}
SEED=${2:-191110531}
shift $(($# < 2 ? $# : 2))
MIXES=${*:-lite-nommap lite-mmap std-nommap std-mmap std-nommap-flush std-mmap-flush}
FSX=$PWD/target/release/surge-fsx
OUT=$PWD/target/tmp
mkdir -p "$OUT/fsx-saved"
WORK=$(mktemp -d /tmp/surge-fsx.XXXX)
NAME=fsx-long-$$
# Addresses of their own, so that the suite's short form (127.0.1.11-15) can run beside it.
SERVERS=127.0.1.21,127.0.1.22,127.0.1.23,127.0.1.24
NODE_A=127.0.1.21 NODE_B=127.0.1.25

cleanup() {
    for m in a b; do $SURGE umount "$WORK/$m" >/dev/null 2>&1 || true; done
    down_all_instances
    rm -rf "$WORK" "$SURGE_HOME"
}
trap cleanup EXIT

$SURGE up --name "$NAME" --capacity 4G --root "$WORK/servers" --servers 4 --hosts "$SERVERS" >/dev/null || exit 1
mkdir -p "$WORK/a" "$WORK/b"
# The two mounts take different FUSE transports, as the suite's two-node tests do: io_uring
# for a (where the kernel offers it), /dev/fuse for b.
SURGE_NODE=$NODE_A SURGE_LOCAL_IO=1 SURGE_FUSE_IO_URING=1 $SURGE mount "$NAME" "$WORK/a" --node "$NODE_A" >/dev/null || exit 1
SURGE_NODE=$NODE_B SURGE_LOCAL_IO=0 SURGE_FUSE_IO_URING=0 $SURGE mount "$NAME" "$WORK/b" --node "$NODE_B" >/dev/null || exit 1

table="| mix | operations | seed | result | seconds |"$'\n'"|---|---|---|---|---|"
failed=0
for mix in $MIXES; do
    started=$(date +%s.%N)
    # shellcheck disable=SC2086 # FSX_EXTRA is a list of arguments
    "$FSX" --a "$WORK/a" --b "$WORK/b" --mix "$mix" --ops "$OPS" --seed "$SEED" --name "$mix" \
        --save-dir "$OUT/fsx-saved" ${FSX_EXTRA:-} >"$OUT/fsx-$mix.txt" 2>&1
    code=$?
    seconds=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$started" "$(date +%s.%N)")
    if [ $code -eq 0 ]; then result=clean; else result="FAILED (exit $code)"; failed=1; fi
    echo "$mix: $result in $seconds s: $(head -c 2000 "$OUT/fsx-$mix.txt")" >&2
    table+=$'\n'"| $mix | $OPS | $SEED | $result | $seconds |"
done
echo "$table" | tee "$OUT/fsx-two-mounts.md"
exit $failed
