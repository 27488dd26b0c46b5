#!/usr/bin/env bash
# One directory of N entries (100,000 by default): made, listed with `ls -l` on a node that
# did not make it, then removed with `rm -rf`, through tmpfs, bindfs of tmpfs and a Surge
# mount (a 4-server instance; the directory made through the mount on a server's node,
# listed and removed through the mount of a node of its own), ROUNDS rounds interleaved.
# Also an open+close of every entry (`cat` of N empty files) on the listing node, twice: the
# first open of each file after the listing, then again (as a build or a Python import opens
# files it has opened before). Prints a Markdown table of seconds,
# median (min-max), and Surge's ratio to tmpfs and bindfs. Needs root and a release build.
#   bench/bigdir.sh [N] [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace -q || exit 1
. bench/lib.sh

N=${1:-100000}
ROUNDS=${2:-3}
WORK=$(mktemp -d /tmp/surge-bigdir.XXXX)
NAME=bigdir-$$
SERVERS=127.0.8.11,127.0.8.12,127.0.8.13,127.0.8.14
NODE_A=127.0.8.11 NODE_B=127.0.8.15
trap 'fusermount3 -u "$WORK/bindfs" 2>/dev/null; for m in a b; do $SURGE umount "$WORK/$m" >/dev/null 2>&1; done; down_all_instances; umount "$WORK/tmpfs" 2>/dev/null; rm -rf "$WORK" "$SURGE_HOME"' EXIT

mkdir -p "$WORK/tmpfs" "$WORK/bindfs" "$WORK/a" "$WORK/b" "$WORK/names"
mount -t tmpfs -o size=2G none "$WORK/tmpfs" || exit 1
mkdir -p "$WORK/tmpfs/under-bindfs"
bindfs "$WORK/tmpfs/under-bindfs" "$WORK/bindfs" || exit 1
$SURGE up --name "$NAME" --capacity 4G --root "$WORK/servers" --servers 4 --hosts "$SERVERS" >/dev/null || exit 1
SURGE_NODE=$NODE_A $SURGE mount "$NAME" "$WORK/a" --node "$NODE_A" >/dev/null || exit 1
SURGE_NODE=$NODE_B $SURGE mount "$NAME" "$WORK/b" --node "$NODE_B" >/dev/null || exit 1
# The names, in files of 1,000 for xargs (no command line too long, no shell loop timed).
seq -f "f%07g" 1 "$N" | split -l 1000 - "$WORK/names/part."

seconds() { # seconds COMMAND... -> wall seconds of one run, 3 decimals
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || echo "failed: $*" >&2
    t1=$(date +%s.%N)
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$t0" "$t1"
}
make_in() { cd "$1" && cat "$WORK"/names/part.* | xargs touch; }
open_all() { cd "$1" && cat "$WORK"/names/part.* | xargs cat; }

declare -A T
for round in $(seq 1 "$ROUNDS"); do
    for sys in tmpfs bindfs surge; do
        case $sys in
            tmpfs) maker=$WORK/tmpfs lister=$WORK/tmpfs ;;
            bindfs) maker=$WORK/bindfs lister=$WORK/bindfs ;;
            surge) maker=$WORK/a lister=$WORK/b ;;
        esac
        mkdir "$maker/d"
        T[$sys,create]+=" $(seconds make_in "$maker/d")"
        T[$sys,ls -l]+=" $(seconds ls -l "$lister/d")"
        T[$sys,open+close]+=" $(seconds open_all "$lister/d")"
        T[$sys,open+close again]+=" $(seconds open_all "$lister/d")"
        T[$sys,rm -rf]+=" $(seconds rm -rf "$lister/d")"
        echo "round $round $sys:$(for p in create 'ls -l' open+close 'open+close again' 'rm -rf'; do echo -n " $p ${T[$sys,$p]##* }"; done)" >&2
    done
done

median() { python3 -c 'import statistics,sys; v=sorted(map(float,sys.argv[1:])); print(f"{statistics.median(v):.3f} ({v[0]:.3f}-{v[-1]:.3f})")' $1; }
ratio() { python3 -c 'import statistics,sys; a,b=(statistics.median(map(float,x.split())) for x in sys.argv[1:]); print(f"{a/b:.2f}")' "$1" "$2"; }
echo "| $N entries, seconds | tmpfs | bindfs | surge | surge / tmpfs | surge / bindfs |"
echo "|---|---|---|---|---|---|"
for p in create 'ls -l' open+close 'open+close again' 'rm -rf'; do
    echo "| $p | $(median "${T[tmpfs,$p]}") | $(median "${T[bindfs,$p]}") | $(median "${T[surge,$p]}") | $(ratio "${T[surge,$p]}" "${T[tmpfs,$p]}") | $(ratio "${T[surge,$p]}" "${T[bindfs,$p]}") |"
done
