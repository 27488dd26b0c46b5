#!/usr/bin/env bash
# Time-ordered walltime-model evaluation on every shared SWF trace (results: RESULTS.md).
# Writes <trace>-evaluate.txt (table + wall-clock and CPU seconds), -metrics.csv,
# -metrics-seeds.csv (the random models rerun with SEEDS seeds, default 3), -error-cdf.png.
# Usage: [SEEDS=3] [EVALUATE_ARGS="--automl-budget 15 ..."] bench/predict/run_evaluate.sh [OUT_DIR] [TRACE ...]
#   default: bench/predict/out, all four shared traces
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${SURGE_SHARED_DATA:-../shared/data}
OUT=${1:-bench/predict/out}
shift || true
TRACES=("$@")
[ ${#TRACES[@]} -gt 0 ] || TRACES=(RICC-2010-2 alea_wagap-2013 theta_argonne mira)
mkdir -p "$OUT"
for trace in "${TRACES[@]}"; do
    start=$(date +%s)
    cpu_before=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
    nice -n 19 .venv/bin/surge-predict evaluate "$DATA/swf/$trace.swf.gz" --out "$OUT" --seeds "${SEEDS:-3}" ${EVALUATE_ARGS:-} \
        > "$OUT/$trace-evaluate.txt"
    ticks=$(( $(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat) - cpu_before ))
    echo "elapsed: $(( $(date +%s) - start )) s wall clock, $(( ticks / $(getconf CLK_TCK) )) s CPU" \
        >> "$OUT/$trace-evaluate.txt"
done
