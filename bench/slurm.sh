#!/usr/bin/env bash
# Surge under Slurm, timed (same sitting, runs interleaved):
#   * start-up: a job's buffer of 3, 8 and 32 servers on burst-buffer nodes, from setup to
#     mounted on all three compute nodes (the hooks Slurm runs, called as Slurm calls them:
#     `surge bb setup`, then `surge bb prolog` on every node at once), and its teardown
#     (epilog on every node, `surge bb teardown`);
#   * submit to first step: a job with a 1 GiB stage-in against the same job with a buffer and
#     no stage-in (Slurm's own latency for a burst-buffer job: it schedules such a job in
#     passes), without a buffer, and against `cp` of the file by hand into node storage.
#
#   bench/slurm.sh [RUNS]      (root; slurm-wlm, munge; `make build` first)
#
# Targets (issue): mounted everywhere < 1 s with 8 servers, < 2 s with 32; submit-to-start
# with a stage-in no more than Slurm's latency + 1.1 x the copy.
set -euo pipefail
runs=${1:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
surge=$here/target/release/surge
dir=${SURGE_BENCH_DIR:-/var/tmp/surge-bench-slurm}
user=65534

SURGE_TESTBED_BB_NODES=32 SURGE_TESTBED_BB_STORAGE=2G SURGE_COMMAND=$surge "$here/slurm/testbed" up "$dir" >/dev/null
trap '"$here/slurm/testbed" down "$dir" >/dev/null' EXIT
export SLURM_CONF=$dir/etc/slurm.conf SURGE_MANAGER_SOCKET=$dir/run/manager.sock
mkdir -p "$dir/pfs"
chown "$user:$user" "$dir/pfs"
chmod 0755 "$dir"

now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc; }

hook_on_node() { # NODE JOB HOOK
    nsenter --mount="$dir/ns/$1" env SLURM_JOB_ID="$2" SLURMD_NODENAME="$1" SLURM_JOB_NODELIST="n[1-3]" \
        SLURM_CONF="$SLURM_CONF" SURGE_MANAGER_SOCKET="$SURGE_MANAGER_SOCKET" "$surge" bb "$3"
}

# ----- start-up and teardown -----
startup_rows=()
job=900000
for run in $(seq "$runs"); do
    for servers in 3 8 32; do
        job=$((job + 1))
        script=$dir/pfs/startup-$job.sh
        printf '#!/bin/bash\n#DW jobdw capacity=%dMiB access_mode=striped type=scratch pool=bb\n' $((servers * 256)) >"$script"
        t0=$(now)
        "$surge" bb setup --job "$job" --uid "$user" --gid "$user" "$script"
        t1=$(now)
        for node in n1 n2 n3; do hook_on_node "$node" "$job" prolog & done
        wait
        t2=$(now)
        count=$("$surge" status --json | python3 -c "import json,sys; print(sum(len(i['servers']) for i in json.load(sys.stdin)['instances']))")
        for node in n1 n2 n3; do
            nsenter --mount="$dir/ns/$node" mountpoint -q "$dir/jobs/$job/striped" || { echo "not mounted on $node" >&2; exit 1; }
        done
        t3=$(now)
        for node in n1 n2 n3; do hook_on_node "$node" "$job" epilog & done
        wait
        "$surge" bb teardown --job "$job"
        t4=$(now)
        startup_rows+=("$servers $run $count $(elapsed "$t0" "$t1") $(elapsed "$t0" "$t2") $(elapsed "$t3" "$t4")")
        echo "start-up: $servers servers, run $run: mounted on 3 nodes in $(elapsed "$t0" "$t2") s" >&2
    done
done

# ----- submit to first step -----
head -c 1G /dev/urandom >"$dir/pfs/restart.h5"
chown "$user:$user" "$dir/pfs/restart.h5"
cat "$dir/pfs/restart.h5" >/dev/null # the same (warm) page cache for every variant
submit_and_time() { # NAME SCRIPT-BODY -> seconds from submit to the first step's start
    local name=$1 out=$dir/pfs/$1.start
    rm -f "$out"
    printf '#!/bin/bash\n#SBATCH -o /dev/null\n%s\nsrun -N1 date +%%s.%%N > %s\n' "$2" "$out" >"$dir/pfs/$name.sh"
    local t0 jobid
    t0=$(now)
    jobid=$(setpriv --reuid=$user --regid=$user --clear-groups sbatch --parsable "$dir/pfs/$name.sh")
    while [ -n "$(squeue -h -j "$jobid" 2>/dev/null)" ]; do sleep 0.05; done
    [ -s "$out" ] || { echo "$name: job $jobid did not run its step" >&2; exit 1; }
    elapsed "$t0" "$(cat "$out")"
}
latency_rows=()
stage='#DW jobdw capacity=2GiB access_mode=striped type=scratch
#DW stage_in type=file source='"$dir"'/pfs/restart.h5 destination=$DW_JOB_STRIPED/restart.h5'
for run in $(seq "$runs"); do
    plain=$(submit_and_time plain "")
    buffer=$(submit_and_time buffer "#DW jobdw capacity=2GiB access_mode=striped type=scratch")
    with=$(submit_and_time staged "$stage")
    mkdir -p /dev/shm/surge-bench-cp
    t0=$(now)
    cp "$dir/pfs/restart.h5" /dev/shm/surge-bench-cp/restart.h5
    t1=$(now)
    rm -rf /dev/shm/surge-bench-cp
    latency_rows+=("$run $plain $buffer $with $(elapsed "$t0" "$t1")")
    echo "submit to first step, run $run: plain $plain s, buffer $buffer s, with 1 GiB stage-in $with s" >&2
done

echo
echo "Start-up to mounted on 3 compute nodes, and teardown (seconds; $runs runs)"
printf '%-8s %-4s %-8s %-10s %-16s %-10s\n' servers run started setup mounted-on-all teardown
for row in "${startup_rows[@]}"; do
    read -r servers run count setup mounted teardown <<<"$row"
    printf '%-8s %-4s %-8s %-10.3f %-16.3f %-10.3f\n' "$servers" "$run" "$count" "$setup" "$mounted" "$teardown"
done
echo
echo "Submit to first step (seconds): no buffer, a buffer without stage-in (Slurm's latency for"
echo "a burst-buffer job), a buffer with a 1 GiB stage-in; cp of the file; the target"
printf '%-4s %-10s %-10s %-14s %-8s %-24s\n' run no-buffer buffer with-stage-in cp "target (buffer+1.1cp)"
for row in "${latency_rows[@]}"; do
    read -r run plain buffer with cp <<<"$row"
    printf '%-4s %-10.3f %-10.3f %-14.3f %-8.3f %-24.3f\n' "$run" "$plain" "$buffer" "$with" "$cp" "$(echo "$buffer + 1.1 * $cp" | bc)"
done
