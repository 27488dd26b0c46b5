#!/usr/bin/env bash
# Time-ordered walltime-model evaluation on every shared SWF trace (results: RESULTS.md).
# Usage: bench/predict/run_evaluate.sh [OUT_DIR]   (default bench/predict/out)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${SURGE_SHARED_DATA:-../shared/data}
OUT=${1:-bench/predict/out}
mkdir -p "$OUT"
for trace in RICC-2010-2 alea_wagap-2013 theta_argonne mira; do
    start=$(date +%s)
    nice -n 10 .venv/bin/surge-predict evaluate "$DATA/swf/$trace.swf.gz" --out "$OUT" \
        | tee "$OUT/$trace-evaluate.txt"
    echo "elapsed: $(( $(date +%s) - start )) s" | tee -a "$OUT/$trace-evaluate.txt"
done
