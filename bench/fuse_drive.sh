#!/usr/bin/env bash
# How the mount takes the kernel's requests, and what each way costs per create and unlink:
# one process creating (open O_CREAT|O_EXCL, close) then unlinking ITEMS files through
#   runtime   /dev/fuse read by a task on the mount's tokio runtime, where the requests' work
#             runs (the mount's way without io_uring),
#   thread    /dev/fuse read by a thread of its own that hands each request to the runtime
#             (surge-fuse --session-thread),
#   uring     FUSE over io_uring, one ring queue per CPU and a thread kept on that CPU (the
#             default where the kernel offers it: Linux 6.14+, the fuse module's enable_uring,
#             which this script turns on),
# three mounts of one 2-server instance (node-local layout) on the first server's node. Besides
# the time per file, `perf stat` counts the context switches and CPU time of the mount and its
# node's server during each run: the thread wake-ups are what these modes differ in, and they
# stay countable on a busy machine where times swing. Rounds are interleaved over the modes;
# each cell is the median of the rounds and their range.
#
#   bench/fuse_drive.sh [ITEMS] [ROUNDS]        defaults: 3000 3
#
# Needs perf. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
ITEMS=${1:-3000}
ROUNDS=${2:-3}
source bench/lib.sh
command -v perf >/dev/null || { echo "bench/fuse_drive.sh needs perf" >&2; exit 2; }
URING_PARAM=/sys/module/fuse/parameters/enable_uring
[ -w "$URING_PARAM" ] && echo Y >"$URING_PARAM"
WORK=/dev/shm/surge-fuse-drive-$$
NAME=fusedrive$$
SYSTEMS="runtime thread uring"
trap "unmount_all_and_clean $WORK runtime thread uring" EXIT
for m in $SYSTEMS; do mkdir -p "$WORK/$m"; done
$SURGE up --name "$NAME" --capacity 4G --root "$WORK/servers" --hosts 127.0.0.31,127.0.0.32 --layout node-local >/dev/null
SURGE_FUSE_IO_URING=0 $SURGE mount "$NAME" "$WORK/runtime" --node 127.0.0.31 >/dev/null
SURGE_FUSE_IO_URING=0 SURGE_FUSE_SESSION_THREAD=1 $SURGE mount "$NAME" "$WORK/thread" --node 127.0.0.31 >/dev/null
SURGE_FUSE_IO_URING=1 $SURGE mount "$NAME" "$WORK/uring" --node 127.0.0.31 >/dev/null
server=$(pgrep -f "surge-server --listen 127.0.0.31:" | head -1)

# run MODE -> "CREATE_US UNLINK_US SWITCHES_PER_FILE CPU_US_PER_FILE" (per file: one create and
# one unlink; switches and CPU of the mount and the server together)
run() {
    local dir=$WORK/$1/serial mount stats
    mount=$(pgrep -f "surge-fuse $NAME $WORK/$1 " | head -1)
    mkdir -p "$dir"
    stats=$(mktemp)
    local times
    times=$(perf stat -x, -e context-switches,task-clock -p "$mount,$server" -o "$stats" -- python3 bench/serial_create_unlink.py "$dir" "$ITEMS")
    rmdir "$dir"
    awk -F, -v n="$ITEMS" -v times="$times" '
        $3 == "context-switches" {cs = $1} $3 == "task-clock" {ms = $1}
        END {printf "%s %d %d\n", times, cs / n, ms * 1000 / n}' "$stats"
    rm -f "$stats"
}

declare -A results
for round in $(seq "$ROUNDS"); do
    for m in $SYSTEMS; do
        read -r c u s t <<<"$(run "$m")"
        results[$m,create]+="$c "; results[$m,unlink]+="$u "; results[$m,switches]+="$s "; results[$m,cpu]+="$t "
    done
    echo "round $round of $ROUNDS done" >&2
done

table_header "one process, $ITEMS files (median of $ROUNDS, range)" "thread / runtime" "uring / runtime"
for row in create unlink switches cpu; do
    case $row in
        create) line="| create + close, us per file |" ;;
        unlink) line="| unlink, us per file |" ;;
        switches) line="| context switches of mount + server per file (create and unlink) |" ;;
        cpu) line="| CPU of mount + server per file (create and unlink), us |" ;;
    esac
    for m in $SYSTEMS; do line+=" $(cell "${results[$m,$row]}") |"; done
    for m in thread uring; do line+=" $(ratio "${results[$m,$row]}" "${results[runtime,$row]}") |"; done
    echo "$line"
done
