# Sourced by the benchmark scripts (from the repository's root): the `surge` to measure, a
# private SURGE_HOME, taking down what a run started, and one fio job's result as a number.

# SURGE_BIN: another build's `surge` (with its surge-server and surge-fuse beside it), for A/B runs.
SURGE=${SURGE_BIN:-$PWD/target/release/surge}
export SURGE_HOME=$(mktemp -d /tmp/surge-bench-home.XXXX)

# Takes down every instance this run created: call it from the script's EXIT trap, so that it
# happens whatever step failed.
down_all_instances() {
    for d in "$SURGE_HOME"/instances/*.json; do
        [ -e "$d" ] && $SURGE down "$(basename "$d" .json)" >/dev/null 2>&1
    done
}

# fio_run DIR RW BS SIZE JOBS [EXTRA] -> MiB/s, or IOPS for random patterns, from fio's JSON.
# The files are DIR/b.*.
fio_run() {
    local dir=$1 rw=$2 bs=$3 size=$4 jobs=$5 extra=${6:-}
    fio --name=b --directory="$dir" --rw="$rw" --bs="$bs" --size="$size" --numjobs="$jobs" --ioengine=psync \
        --group_reporting --output-format=json $extra 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
side = "write" if "write" in sys.argv[1] else "read"
print(round(j[side]["iops"]) if sys.argv[1].startswith("rand") else round(j[side]["bw"] / 1024))' "$rw"
}

# The EXIT trap of a script comparing FUSE file systems in WORK: unmounts WORK/NAME for each
# NAME given and the Surge mount at WORK/surge, takes down the instances, removes WORK and
# SURGE_HOME.
unmount_all_and_clean() {
    local work=$1; shift
    for m in "$@"; do fusermount3 -u "$work/$m" 2>/dev/null || true; done
    $SURGE umount "$work/surge" >/dev/null 2>&1 || true
    down_all_instances
    rm -rf "$work" "$SURGE_HOME"
}

# table_header TITLE [EXTRA...]: a Markdown table's first two lines, a column for each system
# in $SYSTEMS, then the EXTRA columns.
table_header() {
    local header="| $1 |" rule="|---|" t
    shift
    for t in $SYSTEMS "$@"; do header+=" $t |"; rule+="---|"; done
    printf '%s\n%s\n' "$header" "$rule"
}

# field JSON KEY -> the number under KEY in a JSON object (`surge bench ... --json`), rounded
# to an integer (what `cell` takes).
field() { python3 -c "import json,sys; print(round(json.loads(sys.argv[1])[sys.argv[2]]))" "$1" "$2"; }

# cell "V1 V2 ..." -> "median (min-max)" of the runs that gave a figure (a run that failed
# gives 0, and is counted as such); ratio A B -> median(A) / median(B)
cell() { python3 -c '
import statistics, sys
runs = list(map(int, sys.argv[1:])); v = sorted(x for x in runs if x > 0)
failed = f", {len(runs) - len(v)} failed" if len(v) < len(runs) else ""
print(f"{statistics.median(v):.0f} ({v[0]}-{v[-1]}{failed})" if v else "failed")' $1; }
ratio() { python3 -c '
import statistics, sys
a, b = ([x for x in map(float, s.split()) if x > 0] for s in sys.argv[1:3])
print(f"{statistics.median(a) / statistics.median(b):.2f}" if a and b else "-")' "$1" "$2"; }
