#!/usr/bin/env bash
# All of Surge's benchmarks (`make bench`): bench/dataplane.sh, bench/fuse.sh, bench/staging.sh,
# one after another, never in parallel, as each measures the whole machine. Prerequisites are
# checked before the first one starts, so a long run does not stop half-way for a missing tool.
#
#   bench/run-all.sh [SIZE] [FILES]
#
# Without arguments each benchmark runs with its documented defaults (dataplane, fuse: 1G 20000;
# staging: 4G 20000). SIZE and FILES, when given, go to all three: the data per process / per
# fio job / of the staged large file, and the number of small files (e.g. `256M 2000`: quick).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -gt 2 ]; then
    echo "usage: bench/run-all.sh [SIZE] [FILES]" >&2
    exit 2
fi

missing=()
[ "$(id -u)" = 0 ] || missing+=("root (bench/staging.sh drops page caches)")
for bin in surge surge-server surge-fuse; do
    [ -x "target/release/$bin" ] || missing+=("target/release/$bin (run \`make build\`)")
done
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$1 (for $2)"); }
need python3 "all three"
need fio "bench/fuse.sh, bench/staging.sh"
need bindfs "bench/fuse.sh"
need fusermount3 "bench/fuse.sh"
[ -c /dev/fuse ] || missing+=("/dev/fuse (for the FUSE mounts)")
if [ ${#missing[@]} -gt 0 ]; then
    echo "bench/run-all.sh: missing prerequisites:" >&2
    printf '  %s\n' "${missing[@]}" >&2
    exit 1
fi

for bench in dataplane fuse staging; do
    printf '\n## bench/%s.sh %s(%s)\n\n' "$bench" "${*:+$* }" "$(date '+%F %T')"
    "bench/$bench.sh" "$@" || { echo "bench/run-all.sh: bench/$bench.sh failed" >&2; exit 1; }
done
