#!/bin/sh
# run.sh — make fuzz's driver: write the seed corpora, run each fuzz
# target for SECONDS, print its executions and crashes.
#
# Usage: tests/fuzz/run.sh FUZZ_BUILD SECONDS TARGET...
# The corpus each run grows is kept in FUZZ_BUILD/corpus/<target> (the
# next run starts from it); the seeds are rewritten each time into
# FUZZ_BUILD/seeds. A crash's input is saved as
# FUZZ_BUILD/crashes/<target>/crash-<sha1> (or leak-, oom-, timeout-):
# copy it to tests/fuzz/regress/<target>/ once fixed, so the regular suite
# replays it (tests/test_fuzz_regress.c). Runs under nice: the fuzzers
# share the machine. FUZZ_ARGS adds libFuzzer options.
set -u
build=$1
seconds=$2
shift 2
"$build/bin/make_seeds" "$build/seeds" || { echo "fuzz: writing the seeds failed" >&2; exit 1; }
# one kiln thread: the inputs are small and the machine is shared
export KILN_THREADS=1
# a leak counts as a crash; a failed allocation must come back as NULL
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
total_crashes=0
summary=""
for t in "$@"; do
    corpus="$build/corpus/$t"
    crashes="$build/crashes/$t"
    mkdir -p "$corpus" "$crashes" "$build/seeds/$t"
    log="$build/logs/$t.log"
    mkdir -p "$build/logs"
    before=$(find "$crashes" -type f | wc -l)
    # -rss_limit_mb: more than any valid small input needs; a header that
    # makes the loader allocate gigabytes is a finding (oom-*)
    nice -n 10 "$build/bin/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -timeout=20 -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" ${FUZZ_ARGS:-} \
        "$corpus" "$build/seeds/$t" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    after=$(find "$crashes" -type f | wc -l)
    new=$((after - before))
    total_crashes=$((total_crashes + new))
    line=$(printf '%-16s %10s execs in %ss, corpus %4s files, %d new crash(es)%s' "$t" "${execs:-?}" "$seconds" \
        "$(find "$corpus" -type f | wc -l)" "$new" "$([ $rc -ne 0 ] && echo " (exit $rc, see $log)")")
    echo "fuzz: $line"
    summary="$summary$line
"
done
echo "fuzz: summary"
printf '%s' "$summary"
if [ "$total_crashes" -gt 0 ]; then
    echo "fuzz: $total_crashes crash(es): inputs under $build/crashes/" >&2
    exit 1
fi
