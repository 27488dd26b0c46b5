#!/usr/bin/env bash
# What checking identities costs (`surge up --check-identity`: a MUNGE credential per
# connection, a permission check per namespace step, a ticket per open, checked on every data
# request): the same 4-server instance on tmpfs with and without it, started and used by an
# unprivileged user (whose requests are all checked; root's data requests need no ticket),
# through the native client, runs interleaved.
#
#   bench/identity.sh [RUNS] [FILES] [SIZE]      defaults: 3 5000 512M
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
FILES=${2:-5000}
SIZE=${3:-512M}
SURGE=$PWD/target/release/surge
USER_ID=65534
[ "$(id -u)" = 0 ] || { echo "bench/identity.sh needs root (its own munged, a second user)" >&2; exit 1; }
command -v munged >/dev/null || { echo "bench/identity.sh needs munge (apt-get install munge)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/surge-bench-identity.XXXX)
SHM=/dev/shm/surge-bench-identity-$$
mkdir -p "$WORK/home" "$SHM"
chmod 755 "$WORK"
chown "$USER_ID:$USER_ID" "$WORK/home" "$SHM"
# As the user, with the bench's SURGE_HOME and munged.
as_user() {
    setpriv --reuid=$USER_ID --regid=$USER_ID --clear-groups \
        env SURGE_HOME="$WORK/home" SURGE_MUNGE_SOCKET="$WORK/munge.socket" "$SURGE" "$@"
}
cleanup() {
    for kind in plain checked; do as_user down "idb-$kind" --force >/dev/null 2>&1 || true; done
    [ -f "$WORK/munged.pid" ] && kill "$(cat "$WORK/munged.pid")" 2>/dev/null || true
    rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT
mungekey -c -k "$WORK/munge.key" >/dev/null 2>&1
munged --key-file="$WORK/munge.key" --socket="$WORK/munge.socket" --pid-file="$WORK/munged.pid" \
    --log-file="$WORK/munged.log" --seed-file="$WORK/munge.seed" --force

for kind in plain checked; do
    flag=()
    [ "$kind" = checked ] && flag=(--check-identity)
    as_user up --name "idb-$kind" --root "$SHM/$kind" --capacity 4G --servers 4 \
        --hosts 127.0.0.241,127.0.0.242,127.0.0.243,127.0.0.244 "${flag[@]}" >/dev/null
done

printf "%-8s %-4s %10s %10s %10s %12s %12s\n" mode run create/s stat/s unlink/s write-MiB/s read-MiB/s
for run in $(seq "$RUNS"); do
    for kind in plain checked; do
        meta=$(as_user bench meta --instance "idb-$kind" --files "$FILES" --json)
        seq=$(as_user bench seq --instance "idb-$kind" --size "$SIZE" --node 127.0.0.250 --json)
        python3 - "$kind" "$run" "$meta" "$seq" <<'PY'
import json, sys
kind, run, meta, seq = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"{kind:<8} {run:<4} {meta['create_per_s']:>10,.0f} {meta['stat_per_s']:>10,.0f} {meta['unlink_per_s']:>10,.0f}"
      f" {seq['write_mib_s']:>12,.0f} {seq['read_mib_s']:>12,.0f}")
PY
    done
done
