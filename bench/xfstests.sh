#!/usr/bin/env bash
# xfstests' quick group (its generic tests) through mount(8) and Surge's `mount.fuse.surge`
# helper, as xfstests' README.fuse sets a FUSE file system up: TEST and SCRATCH are two 4-server
# instances, each mounted on a node of its own (127.0.2.25, 127.0.3.25; network reads). One
# test at a time: the scratch instance is made anew before each test (xfstests' mkfs does
# nothing for FUSE), and after each test `surge fsck` checks both instances (a finding is
# recorded against the test, then repaired so the next test starts clean). Needs root, a
# release build and an xfstests tree built with `make` (its users fsgqa, fsgqa2 and
# 123456-fsgqa are added when missing).
#   bench/xfstests.sh XFSTESTS_DIR [TEST...]     (default: every generic test of -g quick)
# Writes target/tmp/xfstests/: summary.md (passed / failed / not run, the reasons for not
# running, the fsck findings), results/ (xfstests' own: a failed test's .out.bad and .full)
# and log.txt (each test's line). About an hour for the quick group.
set -uo pipefail
cd "$(dirname "$0")/.."
XFSTESTS=$(realpath "${1:?usage: bench/xfstests.sh XFSTESTS_DIR [TEST...]}")
shift
[ -x "$XFSTESTS/check" ] && [ -x "$XFSTESTS/ltp/fsstress" ] || { echo "$XFSTESTS: not a built xfstests tree" >&2; exit 1; }
cargo build --release --workspace -q || exit 1
. bench/lib.sh

OUT=$PWD/target/tmp/xfstests
rm -rf "$OUT" && mkdir -p "$OUT/results"
WORK=$(mktemp -d /tmp/surge-xfstests.XXXX)
# The tests' users (fsgqa) reach TEST_DIR and SCRATCH_MNT through it.
chmod 755 "$WORK"
TEST_SERVERS=127.0.2.21,127.0.2.22,127.0.2.23,127.0.2.24 TEST_NODE=127.0.2.25
SCRATCH_SERVERS=127.0.3.21,127.0.3.22,127.0.3.23,127.0.3.24 SCRATCH_NODE=127.0.3.25
CAPACITY=${XFSTESTS_CAPACITY:-8G}
PER_TEST_TIMEOUT=${XFSTESTS_TIMEOUT:-900}

# mount(8) finds the helper in /sbin; a link to this build's `surge` unless one is installed.
HELPER_LINKED=
if [ ! -e /sbin/mount.fuse.surge ]; then
    ln -s "$SURGE" /sbin/mount.fuse.surge && HELPER_LINKED=1
fi
# Each in a group of its own name, as its primary group (the set-id tests count on it).
for user in fsgqa fsgqa2 123456-fsgqa; do
    getent group "$user" >/dev/null || groupadd "$user"
    id "$user" >/dev/null 2>&1 || useradd -m -g "$user" -s /bin/bash "$user"
done

unmount_if_mounted() { mountpoint -q "$1" && umount "$1"; }
cleanup() {
    unmount_if_mounted "$WORK/test"; unmount_if_mounted "$WORK/scratch"
    down_all_instances
    [ -n "$HELPER_LINKED" ] && rm -f /sbin/mount.fuse.surge
    rm -rf "$WORK" "$SURGE_HOME"
}
trap cleanup EXIT

instance_up() { # NAME SERVERS
    $SURGE up --name "$1" --capacity "$CAPACITY" --root "$WORK/$1-servers" --servers 4 --hosts "$2" >/dev/null
}
instance_up xtest "$TEST_SERVERS" || exit 1
mkdir -p "$WORK/test" "$WORK/scratch"

cat >"$WORK/local.config" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.surge
export TEST_DEV=surge:xtest
export TEST_DIR=$WORK/test
export SCRATCH_DEV=surge:xscratch
export SCRATCH_MNT=$WORK/scratch
export TEST_FS_MOUNT_OPTS="-o node=$TEST_NODE,home=$SURGE_HOME"
export MOUNT_OPTIONS="-o node=$SCRATCH_NODE,home=$SURGE_HOME"
export RESULT_BASE=$OUT/results
EOF
export HOST_OPTIONS=$WORK/local.config
# xfstests checks that TEST_DEV is mounted with type "fuse" (df -T); the kernel names Surge's
# mounts "fuse.surge", as it does any FUSE mount that gives a subtype (xfstests itself maps
# fuse.glusterfs and fuse.ceph-fuse the same way).
mkdir -p "$WORK/bin"
printf '#!/bin/sh\n%s "$@" | sed "s/ fuse\\.surge / fuse /"\n' "$(type -P df)" >"$WORK/bin/df"
chmod +x "$WORK/bin/df"
export PATH=$WORK/bin:$PATH

TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then
    # The groups `make` gathered from each test's _begin_fstest line.
    mapfile -t TESTS < <(awk '!/^#/ && / quick( |$)/ { print "generic/" $1 }' "$XFSTESTS/tests/generic/group.list" | sort -u)
fi
[ ${#TESTS[@]} -gt 0 ] || { echo "no tests to run" >&2; exit 1; }

# fsck_findings NAME -> the findings of `surge fsck NAME` (nothing when clean); repairs them.
fsck_findings() {
    local report
    report=$($SURGE fsck "$1" --json 2>&1)
    if python3 -c 'import json,sys; sys.exit(any(d["report"]["findings"] for d in json.loads(sys.argv[1])))' "$report" 2>/dev/null; then
        return
    fi
    $SURGE fsck "$1" 2>&1 | grep -v '^ *$' | tr '\n' ';' | head -c 600
    $SURGE fsck "$1" --repair >/dev/null 2>&1
}

passed=() failed=() notrun=() fsck_lines=()
for t in "${TESTS[@]}"; do
    unmount_if_mounted "$WORK/scratch"
    if [ -e "$SURGE_HOME/instances/xscratch.json" ]; then
        $SURGE down xscratch --force >"$WORK/down.out" 2>&1 || cat "$WORK/down.out" >&2
    fi
    rm -rf "$WORK/xscratch-servers"
    instance_up xscratch "$SCRATCH_SERVERS" || { echo "scratch instance did not start" >&2; exit 1; }
    started=$(date +%s)
    (cd "$XFSTESTS" && timeout -k 30 "$PER_TEST_TIMEOUT" ./check "$t") >"$WORK/check.out" 2>&1
    code=$?
    seconds=$(($(date +%s) - started))
    if [ -e "$OUT/results/$t.notrun" ]; then
        notrun+=("$t"); result="not run: $(head -1 "$OUT/results/$t.notrun")"
    elif [ $code -eq 0 ] && grep -q "^Passed all" "$WORK/check.out"; then
        passed+=("$t"); result=passed
    else
        failed+=("$t"); result="FAILED (exit $code)"
        if [ $code -eq 124 ] || [ $code -eq 137 ]; then
            # Timed out: a mount that stopped answering would fail every test after it, so
            # both are detached (the next test's check mounts TEST again).
            result+=", timed out after $PER_TEST_TIMEOUT s"
            for m in test scratch; do mountpoint -q "$WORK/$m" && $SURGE umount "$WORK/$m" --force >/dev/null 2>&1; done
        fi
        mkdir -p "$OUT/results/$(dirname "$t")" && cp "$WORK/check.out" "$OUT/results/$t.check.txt"
    fi
    for instance in xtest xscratch; do
        findings=$(fsck_findings $instance)
        [ -n "$findings" ] && fsck_lines+=("| $t | $instance | $findings |")
    done
    echo "$t: $result ($seconds s)" | tee -a "$OUT/log.txt"
done

ran=$((${#passed[@]} + ${#failed[@]}))
{
    echo "| tests | run | passed | failed | not run | passed of those run |"
    echo "|---|---|---|---|---|---|"
    echo "| ${#TESTS[@]} | $ran | ${#passed[@]} | ${#failed[@]} | ${#notrun[@]} | $(python3 -c "import sys; r, p = map(int, sys.argv[1:]); print(f'{100 * p / r:.1f}%' if r else '-')" $ran ${#passed[@]}) |"
    echo
    echo "Failed: ${failed[*]:-none}"
    echo
    echo "| not run because | tests |"
    echo "|---|---|"
    for t in "${notrun[@]}"; do echo "$(head -1 "$OUT/results/$t.notrun")|${t#generic/}"; done |
        sort | awk -F'|' '{ n[$1]++; l[$1] = l[$1] " " $2 } END { for (r in n) printf "| %s | %d:%s |\n", r, n[r], l[r] }' | sort -t: -k1,1 -rn
    echo
    if [ ${#fsck_lines[@]} -eq 0 ]; then
        echo "surge fsck after every test: clean"
    else
        echo "| test | instance | surge fsck found |"
        echo "|---|---|---|"
        printf '%s\n' "${fsck_lines[@]}"
    fi
} | tee "$OUT/summary.md"
echo
[ ${#failed[@]} -eq 0 ] && [ ${#fsck_lines[@]} -eq 0 ]
