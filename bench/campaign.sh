#!/usr/bin/env bash
# The randomized fault campaign's long form (`surge-campaign`, tests/campaign/): three worker
# processes on a 4-server instance for SECS seconds (default 3600) while servers are killed
# and restarted, stopped, cut off, silenced and slowed behind a veth link and workers are
# killed, then every history and the tree checked against docs/consistency.md and
# `surge fsck`. Prints the operations, the faults, what was judged, and every violation;
# exits 1 on any. Histories, faults and workers' logs stay in target/tmp/campaign-SEED/.
# Needs root (network namespaces) and a release build. The suite runs a 2-minute form.
#   bench/campaign.sh [SECS] [SEED] [MOUNTS]    (MOUNTS of the 3 workers through FUSE mounts; default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3600}
seed=${2:-48}
mounts=${3:-1}
cargo build --release --workspace -q
# Pauses of up to 5 ms between a worker's operations: most of the time is spent in them, so
# faults and worker kills land mid-operation.
exec target/release/surge-campaign run --secs "$secs" --seed "$seed" --pause-ms 5 --mounts "$mounts" --out "target/tmp/campaign-$seed"
