#!/usr/bin/env bash
# Node-list lead-time simulations (FCFS / EASY / conservative x lambda x learned predictor)
# on the shared traces (results: RESULTS.md). RICC is simulated on its first 20,000 jobs
# (about three weeks): see RESULTS.md for why.
# Usage: bench/predict/run_simulate.sh [OUT_DIR]   (default bench/predict/out)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${SURGE_SHARED_DATA:-../shared/data}
OUT=${1:-bench/predict/out}
mkdir -p "$OUT"
run() {
    local trace=$1; shift
    start=$(date +%s)
    nice -n 10 .venv/bin/surge-predict simulate "$DATA/swf/$trace.swf.gz" --out "$OUT" "$@" \
        | tee "$OUT/$trace-simulate.txt"
    echo "elapsed: $(( $(date +%s) - start )) s" | tee -a "$OUT/$trace-simulate.txt"
}
run alea_wagap-2013
run mira
run theta_argonne
run RICC-2010-2 --jobs 20000
