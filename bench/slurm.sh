#!/usr/bin/env bash
# Surge under Slurm, through real jobs on the test cluster of separate nodes (slurm/testbed: 32
# compute nodes and 4 burst-buffer nodes, in memory). Each job is submitted by a user (65534)
# with sbatch on the login node, its first step is `srun -N<n>` over all its nodes (one task a
# node, each stamping its start and checking that the buffer is mounted there); one job at a
# time, every kind and size in turn in each round, RUNS rounds. Per job:
#   * submit to first step: just before sbatch (on login) to the step's earliest task;
#   * submit to Prolog: to the earliest start of the Prolog on the job's nodes;
#   * mounted on all: from the Prolog's earliest start to the last node's "buffers mounted"
#     (each compute node's /var/log/surge-prolog.log: the testbed's Prolog logs its start, then
#     Surge's prolog logs the mount; the nodes share the host's clock); for an on-demand buffer
#     also from the first of the Prolog's start and its servers' start (the manager starts them
#     at the job's pre-run or its first node's Prolog, whichever comes first; its log says when);
#   * teardown: the job's end (its script's last command, after the step) to its instance gone
#     from `surge status --json` (an admin's, asked on login every 50 ms).
# Jobs: on-demand buffers (`pool=local`: a server on each of the job's nodes, 128 MiB each) on
# jobs of 4, 8, 16 and 32 nodes; standing buffers (`pool=bb`: 1, 2, 3 and 4 units of 256 MiB,
# spread one per burst-buffer node) on jobs of 4 nodes; and the same jobs without a buffer,
# Slurm's own submit-to-first-step latency on this testbed (the baseline).
#
#   bench/slurm.sh [RUNS]      (root; slurm-wlm, munge, fuse3; `make build` first; RUNS
#                              default 3, or the RUNS variable)
#
# SURGE_BENCH_QUICK=1: only jobs of 4 nodes and a standing buffer on one node, on a testbed of
# 4 compute and 2 burst-buffer nodes (its `safe` pool needs two), to check the script. SURGE_BENCH_DIR:
# the testbed's directory (default /var/tmp/surge-bench-slurm; removed at the end, or kept with
# what the jobs wrote when a run fails). SURGE_BIN: another build's `surge`.
#
# Targets (issue): an on-demand buffer on 16 nodes mounted everywhere < 1 s from the Prolog's
# start (BeeOND: 10 s on 8 nodes), on 32 nodes < 2 s.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/slurm.sh needs root (the testbed's nodes are namespaces)" >&2; exit 1; }
runs=${1:-${RUNS:-3}}
surge=$(realpath "${SURGE_BIN:-target/release/surge}")
testbed=$PWD/slurm/testbed
dir=$(realpath -m "${SURGE_BENCH_DIR:-/var/tmp/surge-bench-slurm}")
pfs=$dir/pfs
user=65534
bb_job_nodes=4 # the compute nodes of a job with a standing buffer
if [ "${SURGE_BENCH_QUICK:-0}" = 1 ]; then
    node_sizes="4" bb_sizes="1" compute_nodes=4 bb_nodes=2
else
    node_sizes="4 8 16 32" bb_sizes="1 2 3 4" compute_nodes=32 bb_nodes=4
fi

on() { # NODE CMD...: as root on the node
    local node=$1
    shift
    "$testbed" run "$dir" "$node" -- "$@"
}
as_user() { "$testbed" run "$dir" login --user "$user" -- "$@"; }

# What went wrong, from the queue and the logs, while the testbed is still up.
logs() {
    echo "--- squeue"
    on login squeue -a -o '%i %T %r %M %N' || true
    for log in head:/var/log/surge-manager.log head:/var/log/slurm/slurmctld.log n1:/var/log/surge-prolog.log \
        n1:/var/log/surge-epilog.log; do
        echo "--- $log"
        on "${log%%:*}" tail -n 30 "${log#*:}" || true
    done
}
finished=0
cleanup() {
    [ -f "$dir/etc/testbed.env" ] || return 0
    [ "$finished" = 1 ] || logs >&2
    if ! "$testbed" down "$dir" >/dev/null; then
        echo "bench/slurm.sh: slurm/testbed down $dir failed" >&2
    elif [ "$finished" = 1 ]; then
        rm -rf --one-file-system "$dir"
    else
        echo "bench/slurm.sh: the jobs, their stamps and the records are left in $dir" >&2
    fi
}
fail() {
    echo "bench/slurm.sh: $*" >&2
    exit 1
}

# A testbed left by a run that was killed outright.
if [ -e "$dir" ]; then
    [ -f "$dir/etc/testbed.env" ] || fail "$dir exists and is not a testbed's (SURGE_BENCH_DIR)"
    "$testbed" down "$dir" >/dev/null
    rm -rf --one-file-system "$dir"
fi
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
echo "testbed: $compute_nodes compute nodes, $bb_nodes burst-buffer nodes in $dir ..." >&2
SURGE_TESTBED_NODES=$compute_nodes SURGE_TESTBED_BB_NODES=$bb_nodes SURGE_TESTBED_NODE_STORAGE=512M \
    SURGE_TESTBED_BB_STORAGE=2G SURGE_COMMAND=$surge "$testbed" up "$dir" >/dev/null
# Jobs write their stamps into the shared file system as the user.
chown "$user:$user" "$pfs"

# Surge's status as an admin sees it, on the login node: `servers JOB` prints the server count
# of the job's instance; `gone JOB` asks every 50 ms until the job has no instance and prints
# when the answer said so.
cat >"$pfs/bench-status.py" <<'EOF'
import json, subprocess, sys, time
surge, what, job = sys.argv[1], sys.argv[2], int(sys.argv[3])
def instances():
    out = subprocess.run([surge, "status", "--json"], check=True, capture_output=True).stdout
    return [i for i in json.loads(out)["instances"] if i.get("job") == job]
if what == "servers":
    print("/".join(str(len(i["servers"])) for i in instances()) or "0")
else:
    deadline = time.time() + 120
    while instances():
        if time.time() > deadline:
            sys.exit(f"job {job}'s instance still there after 120 s")
        time.sleep(0.05)
    print(f"{time.time():.6f}")
EOF

# The job NAME on NODES nodes, with the #DW line when given. Its first step stamps its start on
# every node (NAME.step); a job with a buffer then waits for NAME.go (its instance has been
# looked at); the last thing it does is to stamp its end (NAME.end).
write_job() { # NAME NODES [DW-LINE]
    local name=$1 n=$2 dw=${3:-}
    {
        echo '#!/bin/bash'
        echo "#SBATCH -N $n"
        echo "#SBATCH --ntasks-per-node=1"
        echo "#SBATCH -o $pfs/$name.out"
        [ -z "$dw" ] || echo "$dw"
        # shellcheck disable=SC2016
        echo "srun -N $n --ntasks-per-node=1 sh -c 'date +%s.%N; [ -z \"\$DW_JOB_STRIPED\" ] || mountpoint -q \"\$DW_JOB_STRIPED\" || echo \"not mounted on \$(hostname)\"' >$pfs/$name.step.part"
        echo "mv $pfs/$name.step.part $pfs/$name.step"
        [ -z "$dw" ] || echo "while [ ! -e $pfs/$name.go ]; do sleep 0.02; done"
        echo "date +%s.%N >$pfs/$name.end"
    } >"$pfs/$name.sh"
}

# Waits for FILE, written by job JOB; fails if the job left the queue without writing it.
wait_file() { # FILE JOB
    local file=$1 job=$2 i=0
    until [ -e "$file" ]; do
        sleep 0.05
        i=$((i + 1))
        [ $((i % 40)) = 0 ] || continue
        if [ -z "$(on login squeue -h -j "$job" 2>/dev/null)" ] && [ ! -e "$file" ]; then
            fail "job $job left the queue without writing $file: $(cat "${file%.*}.out" 2>/dev/null)"
        fi
        [ "$i" -lt 12000 ] || fail "job $job: no $file after 600 s"
    done
}

# Runs one job to its end (its instance gone, the job out of the queue): prints
# "JOB SUBMIT STEP END GONE SERVERS", times in seconds since the epoch ("-" without a buffer).
run_job() { # NAME NODES [DW-LINE]
    local name=$1 n=$2 dw=${3:-} out submit job step gone=- servers=-
    write_job "$name" "$n" "$dw"
    # shellcheck disable=SC2016
    out=$(as_user sh -c 'date +%s.%N; exec sbatch --parsable "$1"' sh "$pfs/$name.sh") || fail "sbatch $name: $out"
    submit=${out%%$'\n'*}
    job=${out##*$'\n'}
    job=${job%%;*}
    wait_file "$pfs/$name.step" "$job"
    ! grep -q 'not mounted' "$pfs/$name.step" || fail "job $job: $(grep 'not mounted' "$pfs/$name.step" | tr '\n' ' ')"
    [ "$(grep -c . "$pfs/$name.step")" = "$n" ] || fail "job $job: the first step ran on $(grep -c . "$pfs/$name.step") of $n nodes"
    step=$(sort -n "$pfs/$name.step" | head -n 1)
    if [ -n "$dw" ]; then
        servers=$(on login python3 "$pfs/bench-status.py" "$surge" servers "$job")
        touch "$pfs/$name.go"
        gone=$(on login python3 "$pfs/bench-status.py" "$surge" gone "$job") || fail "job $job: its instance was not torn down"
    fi
    wait_file "$pfs/$name.end" "$job"
    # shellcheck disable=SC2016
    on login sh -c 'i=0; while [ -n "$(squeue -h -j "$1" 2>/dev/null)" ]; do sleep 0.1; i=$((i + 1)); [ $i -lt 1200 ] || exit 1; done' sh "$job" ||
        fail "job $job still in the queue 120 s after its end"
    echo "$job $submit $step $(cat "$pfs/$name.end") $gone $servers"
}

local_dw() { echo "#DW jobdw capacity=$(($1 * 128))MiB access_mode=striped type=scratch pool=local"; }
bb_dw() { echo "#DW jobdw capacity=$(($1 * 256))MiB access_mode=striped type=scratch pool=bb"; }
records=$dir/records # KIND SIZE NODES ROUND JOB SUBMIT STEP END GONE SERVERS
: >"$records"
progress() { # KIND SIZE NODES ROUND RECORD
    echo "$*" >>"$records"
    # shellcheck disable=SC2086 # the record's words
    python3 -c '
import sys
kind, size, nodes, rnd, job, submit, step, end, gone, servers = sys.argv[1:]
what = {"plain": f"no buffer, {nodes} nodes", "local": f"on-demand, {nodes} nodes",
        "bb": f"standing on {size} bb node(s), {nodes} nodes"}[kind]
line = f"round {rnd}: {what} (job {job}): submit to first step {float(step) - float(submit):.3f} s"
if gone != "-":
    line += f", teardown {float(gone) - float(end):.3f} s, {servers} server(s)"
print(line, file=sys.stderr)' "$1" "$2" "$3" "$4" $5
}

echo "warming up (a job of each kind, not counted) ..." >&2
run_job warm-plain "$bb_job_nodes" >/dev/null
run_job warm-local "$bb_job_nodes" "$(local_dw "$bb_job_nodes")" >/dev/null
run_job warm-bb "$bb_job_nodes" "$(bb_dw 1)" >/dev/null
for round in $(seq "$runs"); do
    for n in $node_sizes; do
        record=$(run_job "plain-$n-$round" "$n")
        progress plain "$n" "$n" "$round" "$record"
        record=$(run_job "local-$n-$round" "$n" "$(local_dw "$n")")
        progress local "$n" "$n" "$round" "$record"
    done
    for k in $bb_sizes; do
        record=$(run_job "bb-$k-$round" "$bb_job_nodes" "$(bb_dw "$k")")
        progress bb "$k" "$bb_job_nodes" "$round" "$record"
    done
done

# Every compute node's Prolog log: when it started, and when the buffers were mounted; the
# manager's: when it started each instance's servers.
for i in $(seq "$compute_nodes"); do
    on "n$i" cat /var/log/surge-prolog.log >"$dir/prolog-n$i.log"
done
on head cat /var/log/surge-manager.log >"$dir/manager.log"

python3 - "$records" "$runs" "$compute_nodes" "$bb_nodes" "$bb_job_nodes" "$dir/manager.log" "$dir"/prolog-n*.log <<'EOF'
import datetime, re, statistics, sys
records, runs, compute_nodes, bb_nodes, bb_job_nodes, manager_log = sys.argv[1:7]
def epoch(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
starts, mounted = {}, {}  # job -> [epoch seconds] over its nodes
for log in sys.argv[7:]:
    for line in open(log):
        m = re.match(r'(\S+) prolog start job=(\d+) ', line) or re.match(r'(\S+)\s+INFO \S+ buffers mounted job=(\d+) ', line)
        if m:
            (starts if " prolog start " in line else mounted).setdefault(int(m[2]), []).append(epoch(m[1]))
# An on-demand instance's servers start at the job's pre-run or its first node's Prolog,
# whichever comes first: "instance up ... seconds=S" logged when they answer, S after the start.
servers_start = {}
for line in open(manager_log):
    m = re.match(r'(\S+)\s+INFO \S+ instance up .*instance="?job-(\d+)"? .*seconds=([0-9.]+)', line)
    if m:
        servers_start[int(m[2])] = epoch(m[1]) - float(m[3])
rows = {}  # (kind, size) -> {figure: [values]}
for line in open(records):
    kind, size, nodes, _, job, submit, step, end, gone, servers = line.split()
    job, nodes, submit, step = int(job), int(nodes), float(submit), float(step)
    row = rows.setdefault((kind, int(size)), {})
    add = lambda k, v: row.setdefault(k, []).append(v)
    add("first step", step - submit)
    if kind == "plain":
        continue
    add("servers", servers)
    add("teardown", float(gone) - float(end))
    if len(mounted.get(job, [])) != nodes or job not in starts:
        sys.exit(f"job {job}: 'buffers mounted' on {len(mounted.get(job, []))} of {nodes} nodes")
    add("prolog", min(starts[job]) - submit)
    add("mounted", max(mounted[job]) - min(starts[job]))
    if kind == "local":
        if job not in servers_start:
            print(f"job {job}: no 'instance up' in the manager's log", file=sys.stderr)
        add("start-up", max(mounted[job]) - min(starts[job] + [servers_start.get(job, float("inf"))]))

def cell(values):
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
def servers(row):
    return "/".join(sorted(set(row["servers"]), key=lambda s: [int(x) for x in s.split("/")]))
targets = {16: 1.0, 32: 2.0}
def target(n, row):
    if n not in targets:
        return "-"
    met = max(row["mounted"]) < targets[n]
    return f"< {targets[n]:.0f} s: {'met' if met else 'not met'}"

print()
print(f"Surge under Slurm on slurm/testbed ({compute_nodes} compute nodes, {bb_nodes} burst-buffer nodes),"
      f" {runs} rounds; seconds, median (min-max)")
print()
print("On-demand buffers (pool=local, a server on each of the job's nodes); target: Prolog to mounted on all, every")
print("round; start-up: from the first of the Prolog's start and the servers' start (at pre-run, if it came first)")
print("| job nodes | servers | no buffer: submit to first step | buffer: submit to first step | submit to Prolog | "
      "Prolog to mounted on all | target | start-up to mounted on all | teardown |")
print("|---:|---:|---:|---:|---:|---:|---|---:|---:|")
for (kind, n), row in sorted(rows.items()):
    if kind == "local":
        plain = rows.get(("plain", n), {}).get("first step", [])
        print(f"| {n} | {servers(row)} | {cell(plain)} | {cell(row['first step'])} | {cell(row['prolog'])} | "
              f"{cell(row['mounted'])} | {target(n, row)} | {cell(row['start-up'])} | {cell(row['teardown'])} |")
print()
plain = rows.get(("plain", int(bb_job_nodes)), {}).get("first step", [])
print(f"Standing buffers (pool=bb, units of 256 MiB spread over the bb nodes) on jobs of {bb_job_nodes} nodes;"
      f" no buffer on {bb_job_nodes} nodes: {cell(plain)}")
print("| bb units | servers | submit to first step | submit to Prolog | Prolog to mounted on all | teardown |")
print("|---:|---:|---:|---:|---:|---:|")
for (kind, k), row in sorted(rows.items()):
    if kind == "bb":
        print(f"| {k} | {servers(row)} | {cell(row['first step'])} | {cell(row['prolog'])} | "
              f"{cell(row['mounted'])} | {cell(row['teardown'])} |")
EOF
finished=1
