#!/usr/bin/env bash
# Short-lived processes under the interception library beside a mount that holds many names:
# what a process costs the servers when it comes and goes. A 2-server instance on /dev/shm;
# N files made in one directory through the library; `ls -l` of it through the mount (its
# servers then note the mount holds N files' attributes); then ROUNDS processes under the
# library that each stat one file and exit (each one a watching connection that registers,
# then leaves), and as many without it, for scale. Prints a Markdown table.
#
#   bench/churn.sh                  N=400000 ROUNDS=30
#   SURGE_BIN=/other/build/surge bench/churn.sh     another build, for an A/B comparison
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${N:-400000}
ROUNDS=${ROUNDS:-30}
PRELOAD=$(dirname "$SURGE")/libsurge_preload.so
WORK=$(mktemp -d /dev/shm/surge-churn.XXXX)
trap 'unmount_all_and_clean "$WORK"' EXIT
mkdir -p "$WORK/servers" "$WORK/surge"
$SURGE up --name churn --servers 2 --capacity 8G --root "$WORK/servers" --hosts 127.0.10.41,127.0.10.42 \
    --mount "$WORK/surge" >/dev/null
mkdir "$WORK/surge/d"
LD_PRELOAD=$PRELOAD python3 -c '
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))' "$WORK/surge/d" "$N"
seconds() { local t0=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $t0" | bc; }
listing=$(seconds ls -l "$WORK/surge/d")
each() { for _ in $(seq "$ROUNDS"); do "$@" stat -c %s "$WORK/surge/d/f0" >/dev/null; done; }
with=$(seconds each env LD_PRELOAD="$PRELOAD")
without=$(seconds each env)
echo "| names the mount holds | ls -l through the mount (s) | $ROUNDS processes under the library (s) | $ROUNDS without it (s) |"
echo "|---|---|---|---|"
printf '| %d | %.2f | %.3f | %.3f |\n' "$N" "$listing" "$with" "$without"
