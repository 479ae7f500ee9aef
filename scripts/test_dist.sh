#!/bin/sh
# test_dist.sh — kiln_dist's tests (tests/dist/, built by make MPI=1) under
# mpirun -np 2 and -np 3 on this machine (scripts/mpirun.sh: oversubscribed,
# shared memory). Each run prints rank 0's lines; the last line sums them:
# "N passed, N failed". A run that does not finish counts as one failure.
# Usage: scripts/test_dist.sh BUILD_DIR [test name filters...]
set -u
build=$1
shift
here=$(dirname "$0")
passed=0 failed=0
for np in 2 3; do
    echo "-- mpirun -np $np $build/tests/kiln_dist_tests $*"
    out=$(KILN_THREADS=1 timeout 120 "$here/mpirun.sh" -np "$np" "$build/tests/kiln_dist_tests" "$@" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    last=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
    f=$(printf '%s\n' "$last" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    if [ -z "$p" ] || [ -z "$f" ]; then
        echo "-- mpirun -np $np: the tests did not finish (exit status $rc)"
        failed=$((failed + 1))
        continue
    fi
    passed=$((passed + p)) failed=$((failed + f))
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || failed=$((failed + 1))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
