#!/usr/bin/env bash
# The interception library's correctness list (issue 42, item 3) that needs programs the test
# suite cannot install from the package registries in its time: IOR with write verification,
# mdtest, a parallel HDF5 program and ADIOS2, each run with the library loaded on node a of a
# 2-server instance, and what they wrote checked through the mount of node b. Prints one line
# per check, PASS or FAIL with the reason, and exits non-zero if any failed. Not timed.
#
#   bench/preload-verify.sh
#
# Needs: the IO500 build of bench/io500.sh (its ior and mdtest: `bench/io500.sh --build`),
# mpirun (openmpi-bin); optional, skipped with a SKIP line when missing: h5pcc
# (libhdf5-openmpi-dev) for the parallel HDF5 program, a python with `adios2` (PyPI) as
# VERIFY_PYTHON for ADIOS2 BP5. Run as root from a built tree (cargo build --release).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BUILD=${IO500_BUILD_DIR:-$HOME/.cache/surge-bench/io500}/io500/bin
LIB=$(dirname "$SURGE")/libsurge_preload.so
for need in "$BUILD/ior" "$BUILD/mdtest" "$LIB"; do
    [ -e "$need" ] || { echo "bench/preload-verify.sh needs $need (bench/io500.sh --build; cargo build --release)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "bench/preload-verify.sh needs mpirun (openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d /dev/shm/surge-verify.XXXX)
trap 'fusermount3 -u "$WORK/b" 2>/dev/null; unmount_all_and_clean "$WORK"' EXIT
$SURGE up --name verify --servers 2 --capacity 12G --root "$WORK/servers" \
    --hosts 127.0.13.1,127.0.13.2 --mount "$WORK/surge" >/dev/null || exit 1
$SURGE mount verify "$WORK/b" --node 127.0.13.5 >/dev/null || exit 1
A=$WORK/surge B=$WORK/b
export SURGE_NODE=127.0.13.1
MPI=(mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD="$LIB" -x SURGE_NODE -x SURGE_HOME -x SURGE_PRELOAD_REPORT)
failed=0
result() {  # result NAME STATUS [WHY]
    if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1 ${3:-}"; failed=1; fi
}
served() {  # served REPORT CALL -> the total count of CALL in the report
    python3 -c 'import sys
t = 0
for line in open(sys.argv[1]):
    for f in line.split()[2:]:
        k, _, v = f.partition("=")
        t += int(v) if k == sys.argv[2] else 0
print(t)' "$1" "$2" 2>/dev/null || echo 0
}

# IOR: write then read back with verification (-w -r -W -R, -e fsync), POSIX and MPIIO,
# file per process and shared; the bytes read back through node b's mount by a second IOR
# without the library (-r -R only).
for api in POSIX MPIIO; do
    for layout in shared fpp; do
        name="ior-$api-$layout"; dir=$A/$name; mkdir -p "$dir"
        flags=(-a "$api" -b 7991360 -t 47008 -s 4 -G 4242 -e -w -r -W -R -k -o "$dir/data")
        [ "$layout" = fpp ] && flags+=(-F)
        export SURGE_PRELOAD_REPORT=$WORK/$name.report
        out=$("${MPI[@]}" "$BUILD/ior" "${flags[@]}" 2>&1); status=$?
        grep -q "WARNING: Incorrect data\|ERROR" <<<"$out" && status=1
        read_b=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$BUILD/ior" -a POSIX -b 7991360 -t 47008 -s 4 -G 4242 -r -R \
            $([ "$layout" = fpp ] && echo -F) -o "$B/$name/data" 2>&1); [ $? = 0 ] || status=1
        grep -q "WARNING: Incorrect data\|ERROR" <<<"$read_b" && status=1
        writes=$(served "$SURGE_PRELOAD_REPORT" write)
        [ "$writes" -gt 0 ] || status=1
        result "$name (library writes $writes, verified on a and through b's mount)" $status "$(grep -m1 -i "error\|incorrect" <<<"$out$read_b")"
    done
done

# mdtest: files and directories made, stat'ed, read and removed by 2 ranks, each rank in its own
# directory (-u) and all in one (mdtest-hard's shape), 3,901 bytes written and read back (-w
# -e); then nothing must be left, as node b lists it.
for shape in unique shared; do
    name="mdtest-$shape"; dir=$A/$name; mkdir -p "$dir"
    export SURGE_PRELOAD_REPORT=$WORK/$name.report
    flags=(-n 2000 -w 3901 -e 3901 -N 1 -d "$dir/t")
    [ "$shape" = unique ] && flags+=(-u -L)
    out=$("${MPI[@]}" "$BUILD/mdtest" "${flags[@]}" 2>&1); status=$?
    grep -qi "error\|failed" <<<"$out" && status=1
    left=$(find "$B/$name" -type f | wc -l); [ "$left" = 0 ] || status=1
    result "$name (answered in-process $(served "$SURGE_PRELOAD_REPORT" answered-here), left $left files)" $status "$(grep -m1 -i "error\|failed" <<<"$out")"
done

# A parallel HDF5 program: 2 ranks write one shared dataset through MPI-IO, then the file is
# read back whole through node b's mount and checked value by value.
if command -v h5pcc >/dev/null; then
    cat > "$WORK/phdf5.c" <<'EOF'
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#define N 1000000
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hsize_t dims = (hsize_t)N * size, count = N, start = (hsize_t)N * rank;
    hid_t space = H5Screate_simple(1, &dims, NULL);
    hid_t set = H5Dcreate(file, "values", H5T_NATIVE_LONG, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t mine = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, NULL, &count, NULL);
    long *v = malloc(sizeof(long) * N);
    for (long i = 0; i < N; i++) v[i] = (long)start + i;
    hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
    herr_t written = H5Dwrite(set, H5T_NATIVE_LONG, mine, space, xfer, v);
    H5Dclose(set); H5Sclose(mine); H5Sclose(space); H5Pclose(xfer); H5Fclose(file); H5Pclose(fapl);
    MPI_Finalize();
    return written < 0;
}
EOF
    # h5pcc leaves its object file in the current directory: build from $WORK.
    (cd "$WORK" && HDF5_CC=mpicc h5pcc -o phdf5 phdf5.c 2>phdf5.build) || true
    if [ -x "$WORK/phdf5" ]; then
        export SURGE_PRELOAD_REPORT=$WORK/phdf5.report
        "${MPI[@]}" "$WORK/phdf5" "$A/shared.h5" >"$WORK/phdf5.out" 2>&1; status=$?
        python3 - "$B/shared.h5" <<'EOF' || status=1
import sys
try:
    import h5py, numpy
except ImportError:
    sys.exit(0)  # checked by size below
with h5py.File(sys.argv[1], "r") as f:
    assert (f["values"][...] == numpy.arange(2_000_000)).all(), "values differ"
EOF
        [ "$(stat -c %s "$B/shared.h5" 2>/dev/null || echo 0)" -ge 16000000 ] || status=1
        result "parallel HDF5, 2 ranks, one shared file (library writes $(served "$WORK/phdf5.report" write))" $status "$(tail -1 "$WORK/phdf5.out")"
    else
        result "parallel HDF5 (build)" 1 "$(tail -1 "$WORK/phdf5.build")"
    fi
else
    echo "SKIP parallel HDF5: no h5pcc (apt install libhdf5-openmpi-dev)"
fi

# ADIOS2 BP5: a writer under the library writes its output into the buffer, and a reader
# without it reads every step back through node b's mount. (BP5's BurstBufferPath, which
# would write to the buffer and drain to another path, is ignored by PyPI's serial adios2
# 2.12: nothing reached the path it named, with or without the library.)
PY=${VERIFY_PYTHON:-python3}
if "$PY" -c "import adios2" 2>/dev/null; then
    export SURGE_PRELOAD_REPORT=$WORK/adios.report
    LD_PRELOAD=$LIB "$PY" - "$A/out.bp" <<'EOF' >"$WORK/adios.out" 2>&1; status=$?
import sys, numpy as np, adios2
io = adios2.Adios().declare_io("w")
io.set_engine("BP5")
values = np.arange(1_000_000, dtype=np.float64)
with adios2.Stream(io, sys.argv[1], "w") as s:
    for step in range(3):
        s.begin_step()
        s.write("values", values + step, values.shape, [0], values.shape)
        s.end_step()
EOF
    "$PY" - "$B/out.bp" <<'EOF' >>"$WORK/adios.out" 2>&1 || status=1
import sys, numpy as np, adios2
with adios2.FileReader(sys.argv[1]) as r:
    for step in range(3):
        got = r.read("values", step_selection=[step, 1])
        assert (got == np.arange(1_000_000, dtype=np.float64) + step).all(), f"step {step} differs"
EOF
    writes=$(served "$WORK/adios.report" write); [ "$writes" -gt 0 ] || status=1
    result "ADIOS2 BP5 written into the buffer, 3 steps read back through b (library writes $writes)" $status "$(tail -1 "$WORK/adios.out")"
else
    echo "SKIP ADIOS2: no adios2 in $PY (VERIFY_PYTHON=a python with PyPI's adios2)"
fi
exit $failed
