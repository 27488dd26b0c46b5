#!/usr/bin/env bash
# Node-list lead-time simulations (FCFS / EASY / conservative x lambda x learned predictor)
# on the first jobs of each shared trace (results: RESULTS.md). Slices keep the 21
# simulations per trace to minutes on a shared 2-core machine; RESULTS.md gives the cost.
# Usage: bench/predict/run_simulate.sh [OUT_DIR] [TRACE:JOBS ...]
#   default: bench/predict/out alea_wagap-2013:8000 theta_argonne:3000 mira:2000, then RICC
#   (2,000 jobs, FCFS and conservative, lambda 1, 0.1, 0 only).
# Deep queues (Mira, RICC, Theta under FCFS) make every plan rebuild cost --depth placements,
# so those traces get smaller slices.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${SURGE_SHARED_DATA:-../shared/data}
OUT=${1:-bench/predict/out}
shift || true
SLICES=("$@")
DEFAULT=0
[ ${#SLICES[@]} -gt 0 ] || { SLICES=(alea_wagap-2013:8000 theta_argonne:3000 mira:2000); DEFAULT=1; }
mkdir -p "$OUT"
run() {
    local trace=${1%%:*} jobs=${1##*:}
    shift
    local start=$(date +%s)
    nice -n 10 .venv/bin/surge-predict simulate "$DATA/swf/$trace.swf.gz" --jobs "$jobs" \
        --out "$OUT" -v "$@" > "$OUT/$trace-simulate.txt"
    echo "elapsed: $(( $(date +%s) - start )) s" >> "$OUT/$trace-simulate.txt"
}
# Two traces at a time: one per core.
for i in "${!SLICES[@]}"; do
    run "${SLICES[$i]}" &
    if (( i % 2 == 1 )); then wait; fi
done
wait
if (( DEFAULT )); then
    run RICC-2010-2:2000 --policies fcfs,conservative --lambdas 1,0.1,0 --learned none
fi
