#!/usr/bin/env bash
# Node-list lead-time simulations (FCFS / EASY / conservative x lambda x learned predictor)
# on the first jobs of each shared trace (results: RESULTS.md). Slices keep the 21
# simulations per trace to minutes on a shared 2-core machine; RESULTS.md gives the cost.
# Usage: bench/predict/run_simulate.sh [OUT_DIR] [JOBS]   (default bench/predict/out, 8000)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${SURGE_SHARED_DATA:-../shared/data}
OUT=${1:-bench/predict/out}
JOBS=${2:-8000}
mkdir -p "$OUT"
run() {
    local trace=$1
    local start=$(date +%s)
    nice -n 10 .venv/bin/surge-predict simulate "$DATA/swf/$trace.swf.gz" --jobs "$JOBS" \
        --out "$OUT" -v > "$OUT/$trace-simulate.txt"
    echo "elapsed: $(( $(date +%s) - start )) s" >> "$OUT/$trace-simulate.txt"
}
# Two traces at a time: one per core.
(run alea_wagap-2013; run theta_argonne) &
(run mira; run RICC-2010-2) &
wait
