#!/usr/bin/env bash
# IO500 (the benchmark suite: IOR's ior-easy and ior-hard, mdtest's mdtest-easy and mdtest-hard,
# pfind's find), every phase of a standard run, 2 MPI ranks, in one sitting on
#   tmpfs          a fresh directory in /dev/shm (the ceiling),
#   bindfs         bindfs of such a directory (a FUSE file system over tmpfs; -o big_writes
#                  --multithreaded, as the other scripts run it),
#   surge          a 2-server Surge instance on loopback (127.0.10.1, .2; tmpfs underneath,
#                  default striped layout) mounted with `surge up --mount` (FUSE),
#   surge+preload  the same on a fresh instance, the ranks under the interception library
#                  (libsurge_preload.so as LD_PRELOAD: opens, reads, writes, stats, truncates
#                  and syncs, mkdir, rmdir and unlink served in the process; readdir through the mount,
#                  docs/preload.md); the library's report (what it served, what it left to the
#                  kernel) is totalled after the table.
# Prints one Markdown table: each phase's score under IO500's name and unit (GiB/s or kIOPS)
# and, in brackets, the phase's seconds; then the bandwidth, metadata and total scores; then
# surge+preload's ratios to the other three for the phases the interception library is meant
# to speed up (mdtest-easy write/stat/delete, ior-easy write/read, ior-hard write).
#
#   bench/io500.sh            build IO500 if need be, then run the four targets
#   bench/io500.sh --build    only build IO500 (no Surge build needed, no benchmark run)
#
# Settings (environment):
#   IO500_STONEWALL    stonewall seconds of the write phases (20; IO500's rules ask for 300, so
#                      IO500 marks every run here [INVALID]: these are comparisons between the
#                      columns of one sitting, not IO500 results)
#   IO500_EASY_BLOCK   ior-easy's blockSize, the most one rank writes (3072m, a multiple of 2m)
#   IO500_HARD_SEGMENTS  ior-hard's segmentCount, 47008 bytes per rank each (40000)
#   IO500_MDEASY_N, IO500_MDHARD_N  mdtest-easy's and mdtest-hard's files per rank (1000000, 200000)
#       These four bound what a phase writes, so that all of it (held in memory by every target)
#       fits this 2-core, 24 GiB machine; a phase that reaches its bound before the stonewall
#       ends early (IO500 adds a note) and its rate is still a rate.
#   IO500_TARGETS      which of the four to run, in order (all four; a subset is for a quick
#                      look, not for RESULTS.md, whose figures come from one sitting of all)
#   IO500_SKIP         IO500 phases not to run, by IO500's names (none), e.g. the bandwidth
#                      phases for a quick look at the metadata score:
#                      "ior-easy-write ior-hard-write ior-easy-read ior-hard-read ior-rnd4K-easy-read";
#                      scores then count only what ran (not for RESULTS.md's tables)
#   IO500_TIMEOUT      seconds one target's IO500 may take before it is stopped as hung
#                      (60 x stonewall + 600)
#   IO500_PREFAULT     tmpfs written and dropped before each target's run (8G; 0 for none): this
#                      VM's first touch of fresh pages costs 3-6x, and it hands freed memory back
#                      to its host, so a target run after others have freed theirs would pay it
#                      where the first did not
#   IO500_BUILD_DIR    where IO500 is built and kept (~/.cache/surge-bench/io500); a finished
#                      build is reused (delete the directory to rebuild)
#   IO500_RESULTS      where each target's IO500 result directory, output and logs are kept
#                      (IO500_BUILD_DIR/results/DATE-TIME; printed at the end)
#   IO500_GIT, IOR_GIT, PFIND_GIT, SCHEMA_GIT  the four repositories (default: their public
#                      GitHub addresses); IO500_REF the io500 commit (default: its default branch)
#   SURGE_BIN          another build's `surge` (lib.sh); its surge-server, surge-fuse and
#                      libsurge_preload.so beside it. They are copied to a temporary directory
#                      at the start, so the tree can be rebuilt while the benchmark runs.
#
# The build follows io500's prepare.sh, outside this repository: io500's own clone, IOR at
# the commit prepare.sh pins (IOR_HASH; bootstrap, configure, make install into the io500
# directory), pfind at PFIND_HASH (or its newest commit if that one is not in PFIND_GIT: said
# so) compiled without LZ4 (pfind's prepare.sh would download it; it only compresses job
# stealing between ranks), cdcl-schema-tools, then io500's make, with -lefence dropped through
# the local.mk its Makefile includes. Installs with apt-get what is missing: git make gcc
# openmpi-bin libopenmpi-dev autoconf automake pkg-config, and bindfs fuse3 for the run.
# Run as root (the mounts; mpirun gets --allow-run-as-root), with a release build (make build).
set -uo pipefail
cd "$(dirname "$0")/.."

STONEWALL=${IO500_STONEWALL:-20}
EASY_BLOCK=${IO500_EASY_BLOCK:-3072m}
HARD_SEGMENTS=${IO500_HARD_SEGMENTS:-40000}
MDEASY_N=${IO500_MDEASY_N:-1000000}
MDHARD_N=${IO500_MDHARD_N:-200000}
TIMEOUT=${IO500_TIMEOUT:-$((STONEWALL * 60 + 600))}
PREFAULT=${IO500_PREFAULT:-8G}
SKIP=${IO500_SKIP:-}
BUILD_DIR=${IO500_BUILD_DIR:-$HOME/.cache/surge-bench/io500}
IO500_GIT=${IO500_GIT:-https://github.com/IO500/io500.git}
IOR_GIT=${IOR_GIT:-https://github.com/hpc/ior.git}
PFIND_GIT=${PFIND_GIT:-https://github.com/VI4IO/pfind.git}
SCHEMA_GIT=${SCHEMA_GIT:-https://github.com/VI4IO/cdcl-schema-tools.git}
IO500_DIR=$BUILD_DIR/io500
STAMP=$IO500_DIR/.surge-bench-built
export DEBIAN_FRONTEND=noninteractive

say() { echo "io500.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# need_packages PKG... : apt-get installs those not installed yet.
need_packages() {
    local missing=() p
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    { apt-get update -q && apt-get install -y -q "${missing[@]}"; } >&2 || die "apt-get install ${missing[*]} failed"
}

# clone URL DIR [COMMIT] : a fresh clone of URL in DIR, at COMMIT if given and present; prints
# the commit checked out.
clone() {
    local url=$1 dir=$2 want=${3:-}
    rm -rf "$dir"
    git clone -q "$url" "$dir" >&2 || die "git clone $url failed"
    if [ -n "$want" ]; then
        if git -C "$dir" cat-file -e "$want^{commit}" 2>/dev/null; then
            git -C "$dir" checkout -q "$want" >&2 || die "git checkout $want in $dir failed"
        else
            say "NOTE: $url has no commit $want (pinned by io500's prepare.sh); using its newest, $(git -C "$dir" rev-parse --short=12 HEAD)"
        fi
    fi
    git -C "$dir" rev-parse --short=12 HEAD
}

# Builds IO500 into IO500_DIR as io500's prepare.sh does, unless a finished build is there.
build_io500() {
    if [ -f "$STAMP" ] && [ -x "$IO500_DIR/io500" ]; then
        say "reusing the IO500 build in $IO500_DIR ($(tr '\n' ' ' <"$STAMP"))"
        return 0
    fi
    need_packages git make gcc openmpi-bin libopenmpi-dev autoconf automake pkg-config
    mkdir -p "$BUILD_DIR"
    local log=$BUILD_DIR/build.log jobs
    jobs=$(nproc 2>/dev/null || echo 2)
    say "building IO500 in $IO500_DIR (log: $log)"
    : >"$log"
    local io500_commit ior_commit pfind_commit schema_commit ior_hash pfind_hash
    io500_commit=$(clone "$IO500_GIT" "$IO500_DIR" "${IO500_REF:-}") || exit 1
    ior_hash=$(sed -n 's/^IOR_HASH=//p' "$IO500_DIR/prepare.sh")
    pfind_hash=$(sed -n 's/^PFIND_HASH=//p' "$IO500_DIR/prepare.sh")
    mkdir -p "$IO500_DIR/build" "$IO500_DIR/bin"
    ior_commit=$(clone "$IOR_GIT" "$IO500_DIR/build/ior" "$ior_hash") || exit 1
    pfind_commit=$(clone "$PFIND_GIT" "$IO500_DIR/build/pfind" "$pfind_hash") || exit 1
    schema_commit=$(clone "$SCHEMA_GIT" "$IO500_DIR/build/cdcl-schema-tools") || exit 1
    ln -sfn "$IO500_DIR/build/cdcl-schema-tools" "$IO500_DIR/schema-tools"
    (
        set -e
        cd "$IO500_DIR/build/ior"
        ./bootstrap
        ./configure --prefix="$IO500_DIR"
        cd src
        make -j"$jobs" install
        cd "$IO500_DIR/build/pfind"
        ./compile.sh
        ln -sf "$IO500_DIR/build/pfind/pfind" "$IO500_DIR/bin/pfind"
        cd "$IO500_DIR"
        # The Makefile links nothing with CFLAGS, but asks for Electric Fence there; no need
        # for it (or for its package).
        echo 'CFLAGS := $(filter-out -lefence,$(CFLAGS))' >local.mk
        make -j"$jobs"
    ) >>"$log" 2>&1 || { tail -30 "$log" >&2; die "the IO500 build failed (log: $log)"; }
    [ -x "$IO500_DIR/io500" ] || die "the IO500 build made no io500 (log: $log)"
    printf 'io500=%s\nior=%s (pinned %s)\npfind=%s (pinned %s)\ncdcl-schema-tools=%s\n' \
        "$io500_commit" "$ior_commit" "$ior_hash" "$pfind_commit" "$pfind_hash" "$schema_commit" >"$STAMP"
    say "IO500 built: $(tr '\n' ' ' <"$STAMP")"
}

build_io500
[ "${1:-}" = --build ] && exit 0

need_packages bindfs fuse3 openmpi-bin
[ "$(id -u)" -eq 0 ] || die "run as root (the mounts)"
source bench/lib.sh

# Surge's binaries, copied once: the tree may be rebuilt while this runs.
SURGE_SRC=$(dirname "$SURGE")
SNAP=$(mktemp -d /tmp/surge-io500-bin.XXXX)
for f in surge surge-server surge-fuse libsurge_preload.so; do
    cp "$SURGE_SRC/$f" "$SNAP/$f" || { rm -rf "$SNAP" "$SURGE_HOME"; die "no $SURGE_SRC/$f: build Surge first (make build)"; }
done
SURGE=$SNAP/surge
PRELOAD=$SNAP/libsurge_preload.so

RESULTS=${IO500_RESULTS:-$BUILD_DIR/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
RESULTS=$(realpath "$RESULTS")
WORK=/dev/shm/surge-io500-$$
NAME=io500bench
HOSTS=127.0.10.1,127.0.10.2
TARGETS=${IO500_TARGETS:-tmpfs bindfs surge surge+preload}
IO500="$IO500_DIR/io500"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

BINDFS_PID= RUN_PID= MOUNTED=
cleanup() {
    [ -n "$RUN_PID" ] && kill "$RUN_PID" 2>/dev/null && sleep 2 && kill -9 "$RUN_PID" 2>/dev/null
    if [ -n "$BINDFS_PID" ]; then
        fusermount3 -u "$WORK/bindfs" 2>/dev/null
        kill "$BINDFS_PID" 2>/dev/null
    fi
    [ -n "$MOUNTED" ] && $SURGE umount "$MOUNTED" >/dev/null 2>&1
    down_all_instances
    rm -rf "$WORK" "$SURGE_HOME" "$SNAP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{
    echo "surge binaries from $SURGE_SRC (copied to $SNAP):"
    for f in surge surge-server surge-fuse libsurge_preload.so; do
        echo "  $f $(stat -c '%y' "$SURGE_SRC/$f" | cut -d. -f1) sha256 $(sha256sum "$SNAP/$f" | cut -c1-12)"
    done
    echo "tree: $(git rev-parse --short=12 HEAD 2>/dev/null)$(git status --porcelain --untracked-files=no crates 2>/dev/null | grep -q . && echo ' (crates/ modified)')"
    echo "IO500 build: $(tr '\n' ' ' <"$STAMP")"
    echo "kernel $(uname -r); fuse enable_uring: $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo absent)"
    echo "stonewall ${STONEWALL}s; bounds per rank: ior-easy blockSize $EASY_BLOCK, ior-hard $HARD_SEGMENTS segments, mdtest-easy n=$MDEASY_N, mdtest-hard n=$MDHARD_N"
} | tee "$RESULTS/setup.txt" >&2

mkdir -p "$WORK"
# prefault: PREFAULT of tmpfs written and dropped (see IO500_PREFAULT), before each target.
prefault() {
    [ "$PREFAULT" = 0 ] && return
    say "pre-faulting $PREFAULT of tmpfs"
    head -c "$PREFAULT" /dev/zero >"$WORK/warm"
    rm -f "$WORK/warm"
}

# write_ini DATADIR RESULTDIR > the target's IO500 configuration (options as `io500 --list` names them).
write_ini() {
    cat <<EOF
[global]
datadir = $1
timestamp-datadir = FALSE
resultdir = $2
timestamp-resultdir = FALSE
api = POSIX
drop-caches = FALSE
verbosity = 1

[debug]
stonewall-time = $STONEWALL

[ior-easy]
transferSize = 2m
blockSize = $EASY_BLOCK
filePerProc = TRUE
uniqueDir = FALSE

[mdtest-easy]
n = $MDEASY_N

[ior-hard]
segmentCount = $HARD_SEGMENTS

[mdtest-hard]
n = $MDHARD_N

[find]
nproc = 2
EOF
    local phase
    for phase in $SKIP; do printf '\n[%s]\nrun = FALSE\n' "$phase"; done
}

# keep_surge_logs DIR ROOT: the mount's and the servers' logs into DIR (before `surge down`).
keep_surge_logs() {
    mkdir -p "$1"
    cp "$SURGE_HOME/instances/$NAME.fuse.log" "$1/" 2>/dev/null
    local l
    for l in "$2/$NAME"/server-*/server.log; do [ -e "$l" ] && cp "$l" "$1/$(basename "$(dirname "$l")").log"; done
}

# run_io500 TARGET DIR [MPIRUN ARGS...]: IO500 in DIR/io500; output, result directory and
# command in RESULTS/TARGET. Fails if IO500 did.
run_io500() {
    local target=$1 dir=$2 out=$RESULTS/$1
    shift 2
    mkdir -p "$out"
    write_ini "$dir/io500" "$out/io500-results" >"$out/config.ini"
    local cmd=("${MPIRUN[@]}" "$@" "$IO500" "$out/config.ini")
    printf '%q ' "${cmd[@]}" >"$out/command.txt"; echo >>"$out/command.txt"
    say "$target: running IO500 in $dir (output: $out/io500.out)"
    local t0=$SECONDS rc
    timeout --kill-after=30 "$TIMEOUT" "${cmd[@]}" >"$out/io500.out" 2>"$out/io500.err" </dev/null &
    RUN_PID=$!
    wait "$RUN_PID"; rc=$?
    RUN_PID=
    echo "$rc" >"$out/exit-status"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        say "$target: IO500 stopped after ${TIMEOUT}s (hung?); last lines:"
    elif [ "$rc" -ne 0 ]; then
        say "$target: IO500 failed (exit status $rc) after $((SECONDS - t0))s; last lines:"
    else
        say "$target: done in $((SECONDS - t0))s"
        return 0
    fi
    tail -5 "$out/io500.out" "$out/io500.err" | sed 's/^/    /' >&2
    return 1
}

surge_up() { # ROOT MOUNTPOINT
    mkdir -p "$2"
    $SURGE up --name "$NAME" --servers 2 --capacity 16G --root "$1" --hosts "$HOSTS" --mount "$2" >/dev/null || return 1
    MOUNTED=$2
}
surge_down() { # ROOT LOGDIR
    keep_surge_logs "$2" "$1"
    $SURGE umount "$MOUNTED" >/dev/null 2>&1
    MOUNTED=
    $SURGE down "$NAME" >/dev/null || say "surge down $NAME failed"
}

for target in $TARGETS; do
    prefault
    case $target in
        tmpfs)
            mkdir -p "$WORK/tmpfs"
            run_io500 tmpfs "$WORK/tmpfs"
            rm -rf "$WORK/tmpfs"
            ;;
        bindfs)
            mkdir -p "$WORK/bindfs-src" "$WORK/bindfs"
            bindfs -f -o big_writes --multithreaded "$WORK/bindfs-src" "$WORK/bindfs" &
            BINDFS_PID=$!
            for _ in $(seq 50); do mountpoint -q "$WORK/bindfs" && break; sleep 0.1; done
            if mountpoint -q "$WORK/bindfs"; then
                run_io500 bindfs "$WORK/bindfs"
            else
                say "bindfs did not mount"
            fi
            fusermount3 -u "$WORK/bindfs" 2>/dev/null
            kill "$BINDFS_PID" 2>/dev/null; wait "$BINDFS_PID" 2>/dev/null
            BINDFS_PID=
            rm -rf "$WORK/bindfs-src" "$WORK/bindfs"
            ;;
        surge)
            if surge_up "$WORK/surge-servers" "$WORK/surge"; then
                run_io500 surge "$WORK/surge"
                surge_down "$WORK/surge-servers" "$RESULTS/surge/surge-logs"
            else
                say "surge up failed"
            fi
            rm -rf "$WORK/surge-servers" "$WORK/surge"
            ;;
        surge+preload)
            REPORT=$RESULTS/surge+preload/preload-report.txt
            mkdir -p "$RESULTS/surge+preload" && : >"$REPORT"
            if surge_up "$WORK/preload-servers" "$WORK/preload"; then
                run_io500 surge+preload "$WORK/preload" -x LD_PRELOAD="$PRELOAD" -x SURGE_HOME \
                    -x SURGE_PRELOAD_REPORT="$REPORT"
                surge_down "$WORK/preload-servers" "$RESULTS/surge+preload/surge-logs"
            else
                say "surge up failed"
            fi
            rm -rf "$WORK/preload-servers" "$WORK/preload"
            ;;
    esac
done

python3 - "$RESULTS" $TARGETS <<'EOF'
import os, re, sys
results, targets = sys.argv[1], sys.argv[2:]
PHASES = ["ior-easy-write", "mdtest-easy-write", "ior-hard-write", "mdtest-hard-write", "find",
          "ior-easy-read", "mdtest-easy-stat", "ior-hard-read", "mdtest-hard-stat",
          "mdtest-easy-delete", "mdtest-hard-read", "mdtest-hard-delete", "ior-rnd4K-easy-read"]
TARGETED = ["mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete",
            "ior-easy-write", "ior-easy-read", "ior-hard-write"]
score, secs, total, failed = {}, {}, {}, {}
for t in targets:
    try:
        out = open(os.path.join(results, t, "io500.out")).read()
    except OSError:
        out = ""
    for m in re.finditer(r"^\[(?:RESULT|      )\]\s+(\S+)\s+([\d.]+) (GiB/s|kIOPS) : time ([\d.]+) seconds", out, re.M):
        score[t, m[1]], secs[t, m[1]] = float(m[2]), float(m[4])
    m = re.search(r"^\[SCORE ?\] Bandwidth ([\d.]+) GiB/s : IOPS ([\d.]+) kiops : TOTAL ([\d.]+)", out, re.M)
    if m:
        total[t] = tuple(map(float, m.groups()))
    try:
        failed[t] = open(os.path.join(results, t, "exit-status")).read().strip() != "0"
    except OSError:
        failed[t] = True
def unit(p): return "GiB/s" if p.startswith("ior") else "kIOPS"
def fmt(v): return f"{v:.3f}" if v < 100 else f"{v:.1f}"
print("| phase |" + "".join(f" {t} |" for t in targets))
print("|---|" + "---|" * len(targets))
for p in PHASES:
    cells = [f"{fmt(score[t, p])} ({secs[t, p]:.0f} s)" if (t, p) in score else ("failed" if failed[t] else "-")
             for t in targets]
    note = " (not scored)" if p == "ior-rnd4K-easy-read" else ""
    print(f"| {p}, {unit(p)}{note} |" + "".join(f" {c} |" for c in cells))
for i, (label, u) in enumerate([("bandwidth score", "GiB/s"), ("metadata score", "kIOPS"), ("total score", "")]):
    cells = [fmt(total[t][i]) if t in total else "-" for t in targets]
    print(f"| {label}{', ' + u if u else ''} |" + "".join(f" {c} |" for c in cells))
print()
lib, others = "surge+preload", [t for t in targets if t != "surge+preload"]
if lib in targets:
    print(f"| phase | {lib} / " + f" | {lib} / ".join(others) + " |")
    print("|---|" + "---|" * len(others))
    for p in TARGETED:
        cells = [f"{score[lib, p] / score[o, p]:.2f}" if (lib, p) in score and score.get((o, p)) else "-" for o in others]
        print(f"| {p} |" + "".join(f" {c} |" for c in cells))
    print()
bad = [t for t in targets if failed[t]]
if bad:
    print("FAILED: " + ", ".join(f"{t} (see {os.path.join(results, t)})" for t in bad))
print("IO500 marks every run here [INVALID]: the stonewall is below its 300 s; phases with (s) below "
      "the stonewall reached the bounds set per rank (see the header of bench/io500.sh).")
EOF

REPORT=$RESULTS/surge+preload/preload-report.txt
if [ -s "$REPORT" ]; then
    python3 - "$REPORT" <<'EOF'
import sys
totals, procs = {}, 0
for line in open(sys.argv[1]):
    procs += 1
    for field in line.split()[1:]:
        k, _, v = field.partition("=")
        if k != "pid":
            totals[k] = totals.get(k, 0) + int(v)
print(f"interception library (surge+preload), {procs} processes reporting: " +
      " ".join(f"{k}={v}" for k, v in totals.items()))
EOF
else
    echo "interception library (surge+preload): no report written (no process served anything, or none exited normally)"
fi
echo "results: $RESULTS"
