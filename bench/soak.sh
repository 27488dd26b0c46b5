#!/usr/bin/env bash
# The soak's long form (tests/suite/soak.rs): 16 small-file clients of 100,000 checked operations
# each (8 through the library, 8 through a mount) and 8 streams of 256 MiB, for at least 10
# minutes, with the servers' and the mount's memory sampled once a second. Prints the report
# (also in target/tmp/soak.txt). Needs root (the mount) and a release build.
#   bench/soak.sh [OPS] [SECS] [STREAM_MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace -q
SURGE_SOAK_OPS=${1:-100000} SURGE_SOAK_SECS=${2:-600} SURGE_SOAK_STREAM_MIB=${3:-256} \
    cargo test --release -q -p surge-tests --test suite soak:: -- --nocapture 2>&1 | grep -v " INFO "
