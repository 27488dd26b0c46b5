#!/usr/bin/env bash
# The cautious walltime model in the scheduler simulation, and the simulated waits against the
# real ones on every trace (results: RESULTS.md sections 2-3). Conservative and EASY
# backfilling with user requests (lambda 1), exact runtimes (lambda 0, an oracle bound) and
# the time-ordered gboost and cautious predictions, on the same slices as run_simulate.sh.
# Usage: bench/predict/run_simulate_cautious.sh [OUT_DIR]   (default bench/predict/out/cautious)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${SURGE_SHARED_DATA:-../shared/data}
OUT=${1:-bench/predict/out/cautious}
mkdir -p "$OUT"
for slice in alea_wagap-2013:8000 theta_argonne:3000 mira:2000 RICC-2010-2:2000; do
    trace=${slice%%:*} jobs=${slice##*:}
    start=$(date +%s)
    nice -n 19 .venv/bin/surge-predict simulate "$DATA/swf/$trace.swf.gz" --jobs "$jobs" \
        --policies conservative,easy --lambdas 1,0 --learned gboost,cautious \
        --out "$OUT" -v > "$OUT/$trace-simulate.txt"
    echo "elapsed: $(( $(date +%s) - start )) s" >> "$OUT/$trace-simulate.txt"
done
