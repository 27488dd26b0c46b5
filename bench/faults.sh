#!/usr/bin/env bash
# The fault-injection suite (tests/suite/faults.rs) run on its own, then its table: per fault, what
# the application saw and how soon, bytes lost (must be 0), and what came back. Needs root
# (network namespaces, a tmpfs mount) and a release build.
#   bench/faults.sh            # once
#   bench/faults.sh 5          # five times, every row of every run
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
cargo build --release --workspace -q
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for run in $(seq "$runs"); do
    rm -rf target/tmp/faults
    cargo test --release -q -p surge-tests --test suite faults:: >/dev/null 2>&1 || {
        echo "run $run: the fault suite failed; rerun: cargo test --release -p surge-tests --test suite faults::" >&2
        exit 1
    }
    cat target/tmp/faults/*.row >>"$rows"
done
echo "| fault | during | application sees | seconds to error | bytes lost | after |"
echo "|---|---|---|---|---|---|"
sort "$rows"
