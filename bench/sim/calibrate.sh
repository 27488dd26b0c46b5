#!/usr/bin/env bash
# Calibration of the simulator against Surge itself.
#
# A Surge instance whose servers each live in a network namespace of their own, behind a veth
# link shaped with `tc tbf` in both directions (this kernel has no netem: rate only), runs N-N
# (file per process) and N-1 (one shared file) write and read patterns from client processes
# on this host (`surge bench seq`, the native client). Configurations, rounds interleaved:
#
#   A     2 servers, 200 Mbit/s links   (the calibration)
#   B4    4 servers, 200 Mbit/s links   (more servers)
#   B400  2 servers, 400 Mbit/s links   (faster links)
#
# One measurement file per configuration (OUT/NAME.json); then `surge sim calibrate` turns
# A into OUT/calibration.json (and OUT/system.toml, the instance as a system file pointing at
# it) and predicts B4 and B400 with the simulator, printing measured vs predicted (exit
# status 1 if a prediction is off by more than 15%).
#
#   sudo bench/sim/calibrate.sh [OUT]        default OUT: target/surgecal
#   ROUNDS=2 PROCS=4 MIB_PER_PROC=32 CONFIGS="A:2:200 B4:4:200" bench/sim/calibrate.sh
#
# Needs root (namespaces, tc) and a release build. Everything it makes (namespaces
# surgecal-PID-*, veths, servers, /dev/shm directory) goes away on exit, failed or not.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
OUT=${1:-target/surgecal}
ROUNDS=${ROUNDS:-3}
PROCS=${PROCS:-4}
MIB_PER_PROC=${MIB_PER_PROC:-32}
CONFIGS=${CONFIGS:-"A:2:200 B4:4:200 B400:2:400"}
CALIBRATE_FROM=${CALIBRATE_FROM:-A}
SURGE=$REPO/target/release/surge
[ "$(id -u)" = 0 ] || { echo "calibrate.sh: needs root (network namespaces, tc)" >&2; exit 2; }
[ -x "$SURGE" ] && [ -x "$REPO/target/release/surge-server" ] && [ -x "$REPO/target/release/surge-sim" ] ||
    { echo "calibrate.sh: build first: cargo build --release --workspace" >&2; exit 2; }
command -v tc >/dev/null && command -v ip >/dev/null || { echo "calibrate.sh: needs ip and tc (iproute2)" >&2; exit 2; }

MAX_SERVERS=0
for c in $CONFIGS; do
    s=$(echo "$c" | cut -d: -f2)
    [ "$s" -gt "$MAX_SERVERS" ] && MAX_SERVERS=$s
done

TAG=$$
WORK=$(mktemp -d /tmp/surgecal-work.XXXX)
export SURGE_HOME=$WORK/home
# The namespaces separate the servers' network only: their data directories are still this
# node's, and the client would read and write them directly (local I/O, short-circuiting the
# links under test). Off, as it is for servers on other nodes.
export SURGE_LOCAL_IO=0
ROOT=/dev/shm/surgecal-$TAG
mkdir -p "$OUT" "$SURGE_HOME" "$WORK/bin"
NS=()      # namespaces made
HOSTIF=()  # host ends of the veth pairs
INSTANCE=""

cleanup() {
    set +e
    if [ -n "$INSTANCE" ]; then
        "$SURGE" down "$INSTANCE" >/dev/null 2>&1
    fi
    # Servers the launcher started (their pid is the launcher's: it execs them), should `down`
    # have missed one.
    for f in "$WORK"/pids/*; do
        [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null; done
    for h in "${HOSTIF[@]}"; do ip link del "$h" 2>/dev/null; done
    rm -rf "$ROOT" "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- nodes: namespace surgecal-TAG-i, veth pair, 10.78.i.1 (host) <-> 10.78.i.2 (node) ---
for i in $(seq 1 "$MAX_SERVERS"); do
    ns=surgecal-$TAG-$i h=sc${TAG}h$i n=sc${TAG}n$i
    ip netns add "$ns"
    NS+=("$ns")
    ip link add "$h" type veth peer name "$n"
    HOSTIF+=("$h")
    ip link set "$n" netns "$ns"
    ip addr add "10.78.$i.1/24" dev "$h"
    ip link set "$h" up
    ip netns exec "$ns" ip addr add "10.78.$i.2/24" dev "$n"
    ip netns exec "$ns" ip link set "$n" up
    ip netns exec "$ns" ip link set lo up
done

# Both directions of node i's link at RATE: the host side shapes what clients send (writes),
# the node side what the server sends (reads).
shape() {
    local i=$1 rate=$2
    tc qdisc replace dev "sc${TAG}h$i" root tbf rate "$rate" burst 256kb latency 50ms
    ip netns exec "surgecal-$TAG-$i" tc qdisc replace dev "sc${TAG}n$i" root tbf rate "$rate" burst 256kb latency 50ms
}

# `surge up` starts a server on a host that is not this one through the batch system's
# launcher (`srun --nodelist HOST surge-server ...`). Here a launcher of our own stands in
# for it: the "host" 10.78.i.2 is namespace i, and the server runs there (`ip netns exec`
# execs it: the pid `surge up` records is the server's).
mkdir -p "$WORK/pids"
cat >"$WORK/bin/srun" <<EOF
#!/usr/bin/env bash
while [ \$# -gt 0 ]; do
    case "\$1" in
        --nodelist) host=\$2; shift 2 ;;
        --*) shift ;;
        *) break ;;
    esac
done
case "\$host" in
    10.78.*.2) i=\${host#10.78.}; i=\${i%.2} ;;
    *) echo "surgecal srun: unknown node \$host" >&2; exit 1 ;;
esac
echo \$\$ >"$WORK/pids/\$i"
exec ip netns exec "surgecal-$TAG-\$i" nice "\$@" 2>>"$WORK/server-\$i.log"
EOF
chmod +x "$WORK/bin/srun"

bytes=$((MIB_PER_PROC * 1024 * 1024))
# One configuration, one round: N-N and N-1, write then read, each a `surge bench seq` run.
run_config() {
    local name=$1 servers=$2 mbit=$3 round=$4
    local hosts=""
    for i in $(seq 1 "$servers"); do
        shape "$i" "${mbit}mbit"
        hosts+="${hosts:+,}10.78.$i.2"
    done
    INSTANCE=surgecal$TAG$name
    PATH=$WORK/bin:$PATH "$SURGE" up --name "$INSTANCE" --servers "$servers" --hosts "$hosts" \
        --capacity $((servers * 512))M --chunk-size 1M --root "$ROOT" >/dev/null
    for pattern in nn n1; do
        local flag=""
        [ "$pattern" = n1 ] && flag=--shared
        local line
        line=$(nice "$SURGE" bench seq --instance "$INSTANCE" --size "$bytes" --block 1M --procs "$PROCS" $flag --json)
        python3 - "$line" "$pattern" "$round" >>"$WORK/$name.jsonl" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
for phase in ("write", "read"):
    print(json.dumps({"round": int(sys.argv[3]), "pattern": sys.argv[2], "phase": phase, "mib_s": r[phase + "_mib_s"]}))
PY
        echo "  round $round $name ($servers x $mbit Mbit/s) $pattern: write $(python3 -c "import json,sys;r=json.loads(sys.argv[1]);print(f\"{r['write_mib_s']:.1f} MiB/s, read {r['read_mib_s']:.1f} MiB/s\")" "$line")"
    done
    "$SURGE" down "$INSTANCE" >/dev/null
    INSTANCE=""
}

echo "== measuring: $CONFIGS; $ROUNDS rounds, $PROCS client processes x $MIB_PER_PROC MiB, 1 MiB requests"
for round in $(seq 1 "$ROUNDS"); do
    for c in $CONFIGS; do
        IFS=: read -r name servers mbit <<<"$c"
        run_config "$name" "$servers" "$mbit" "$round"
    done
done

# Measurement files: the configuration and every round's figures.
for c in $CONFIGS; do
    IFS=: read -r name servers mbit <<<"$c"
    python3 - "$WORK/$name.jsonl" "$OUT/$name.json" "$name" "$servers" "$mbit" "$PROCS" "$bytes" <<'PY'
import json, sys, datetime, platform
src, dst, name, servers, mbit, procs, size = sys.argv[1:]
doc = {
    "source": f"bench/sim/calibrate.sh, configuration {name}, {platform.node()}, "
              + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "config": name,
    "servers": int(servers),
    "link_mbit_s": float(mbit),
    "chunk_size": 1 << 20,
    "procs": int(procs),
    "bytes_per_proc": int(size),
    "block": 1 << 20,
    "results": [json.loads(l) for l in open(src)],
}
json.dump(doc, open(dst, "w"), indent=1)
PY
done
echo "== measurements in $OUT/*.json"

predict=()
for c in $CONFIGS; do
    name=${c%%:*}
    [ "$name" != "$CALIBRATE_FROM" ] && predict+=(--predict "$OUT/$name.json")
done
"$SURGE" sim calibrate "$OUT/$CALIBRATE_FROM.json" -o "$OUT/calibration.json" --system "$OUT/system.toml" "${predict[@]}"
