#!/bin/sh
# test.sh — the whole test run behind `make test`: the suite in every build and the checks,
# then one summary line.
#   native        the default build (OpenBLAS), best SIMD level of this CPU
#   isa           scripts/isa_check.sh: no object of the library holds an
#                 instruction above its file's SIMD level (objdump), in the
#                 default, no-blas and arm64 builds; and its self-test, which
#                 plants such faults in objects compiled on the fly
#   house         scripts/house_check.sh: the code's includes and the names its
#                 objects take (nm) keep every "never" of docs/house.json, and
#                 no two parts but Core and Ops reach each other in a loop
#   avx2-cpu      the SIMD kernel tests under qemu-x86_64 -cpu Haswell-noTSX (x86-64
#                 hosts with qemu-user): a CPU with AVX2 and no AVX-512 or
#                 VNNI, where a kernel run above the caps faults as on a laptop
#   scalar        the same binary with KILN_SIMD=scalar (portable paths end to end)
#   no-blas       make BLAS=0 VULKAN=0: every matmul on kiln's own GEMM, and
#                 the build without the Vulkan backend
#   examples      the training examples' --help and tiny runs (scripts/test_examples.sh),
#                 and in the no-blas build GaLore's clean failure without LAPACK
#   serve         examples/serve for real (scripts/test_serve.sh): its request
#                 parser fuzzed, curl and an OpenAI client in Python, the chat
#                 page in headless Chromium, 16 streaming clients under load
#   install       make install into a temporary prefix, and the README's example
#                 built through pkg-config as the README says (scripts/test_install.sh)
#   cuda          make CUDA=1 VULKAN=0 when nvcc is found ($CUDA_HOME, default
#                 /usr/local/cuda, or on PATH): the CUDA backend must compile
#                 (CI has nvcc, no GPU); its device and runtime tests run, as
#                 skipped where there is no GPU
#   sanitize      make SANITIZE=address,undefined VULKAN=0: the suite and the
#                 examples under ASan, UBSan (every report fails) and
#                 LeakSanitizer (each test's process is checked for leaks);
#                 reports from outside kiln are suppressed by scripts/lsan.supp
#                 and scripts/ubsan.supp, each entry saying why. Vulkan is left
#                 out here: lavapipe under ASan is slow (its tests run in the
#                 native pass). The server's curl, client and logprobs checks
#                 run again on the sanitized serve (serve-sanitize).
#                 KILN_SANITIZE=0 skips this pass.
#   arm64         make CC=aarch64-linux-gnu-gcc BLAS=0 ZLIB=0 VULKAN=0, run under
#                 qemu-aarch64 (NEON paths), when the cross tools are installed
#   mpi           make MPI=1 of kiln_dist's tests in the default build (only dist/ and
#                 tests/dist/ compile again), run under mpirun -np 2 and 3
#                 (scripts/test_dist.sh), when Open MPI's mpicc and mpirun are installed
# The arm64 stage (a serial cross build, then qemu: one core) runs in the
# background from the start, beside the others, and is reported at the end.
# With SANITIZE set (`make test SANITIZE=address,undefined`) only the
# sanitize stage runs, with those sanitizers.
# The whole run takes 9 to 15 minutes on a 2-core machine (on the shared
# 2-core AMD VM at load 1-2: 571 s with every build there to update, 868 s
# from a fresh clone); it says so first, and each
# stage shows its progress while it runs (its full output is kept in
# BUILD_DIR/test-STAGE.log).
# Usage: scripts/test.sh BUILD_DIR [test name filters...]
# The last line is "N passed, N failed[, N skipped]"; exit status 1 on any failure.
set -u
build=$1
shift
make=${MAKE:-make}
passed=0 failed=0 skipped=0
tty=
[ -t 1 ] && tty=1
progress=1

# mm:ss since the epoch second $1
since() {
    t=$(($(date +%s) - $1))
    printf '%d:%02d' $((t / 60)) $((t % 60))
}

# follow NAME PID LOG PATTERN WHAT SHOW : wait for the job PID writing LOG;
# while it runs, say how many lines of LOG match PATTERN ("N WHAT so far":
# in place on a terminal, else a line every 30 s) and, if SHOW is 1, show
# the other lines as they come. Its exit status is the job's.
follow() {
    wname=$1 pid=$2 wlog=$3 pattern=$4 what=$5 show=$6
    start=$(date +%s)
    shown=0 said=$start
    while :; do
        running=0
        kill -0 "$pid" 2>/dev/null && running=1
        # only whole lines: the last may still be being written
        lines=$(wc -l <"$wlog")
        if [ "$show" -eq 1 ] && [ "$lines" -gt "$shown" ]; then
            [ -n "$tty" ] && printf '\r\033[K'
            sed -n "$((shown + 1)),${lines}p" "$wlog" | grep -v "$pattern"
            shown=$lines
        fi
        [ "$running" -eq 1 ] || break
        if [ "$progress" -eq 1 ]; then
            now=$(date +%s)
            if [ -n "$tty" ]; then
                printf '\r   %s: %d %s so far, %s' "$wname" "$(grep -c "$pattern" "$wlog")" "$what" "$(since "$start")"
            elif [ $((now - said)) -ge 30 ]; then
                echo "   $wname: $(grep -c "$pattern" "$wlog") $what so far, $(since "$start")"
                said=$now
            fi
        fi
        sleep 1
    done
    [ -n "$tty" ] && printf '\r\033[K'
    wait "$pid"
}

# run_suite NAME CMD... : run one suite, add its counts from its last line.
# Its output goes to $build/test-NAME.log; failures and skips are shown as
# they come, passes as a running count.
run_suite() {
    name=$1
    shift
    echo "== $name: $*"
    log=$build/test-$name.log
    t0=$(date +%s)
    : >"$log" # before the background job opens it
    "$@" >"$log" 2>&1 &
    follow "$name" $! "$log" '^ok ' passed 1
    rc=$?
    last=$(tail -n 1 "$log")
    p=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
    f=$(printf '%s\n' "$last" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    s=$(printf '%s\n' "$last" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
    if [ -z "$p" ] || [ -z "$f" ]; then
        echo "== $name: the runner did not finish (exit status $rc; $log)"
        failed=$((failed + 1))
        return
    fi
    echo "== $name: done in $(since "$t0")"
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + ${s:-0}))
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || failed=$((failed + 1))
}

# wanted NAME FILTERS...: no filter given, or one that is part of NAME
wanted() {
    name=$1
    shift
    [ $# -eq 0 ] && return 0
    for f in "$@"; do
        case $name in *"$f"*) return 0 ;; esac
    done
    return 1
}

# build NAME ARGS... : make the test binary, its one-line-per-file output
# into a log and counted while it runs; a failed build counts as a failure
build() {
    name=$1
    shift
    blog=$build/$name-build.log
    echo "== $name: building ($make $*; log in $blog)"
    : >"$blog"
    "$make" --no-print-directory "$@" >"$blog" 2>&1 &
    if ! follow "$name" $! "$blog" '^  [A-Z]' built 0; then
        echo "== $name: build failed; see $blog"
        tail -n 20 "$blog"
        failed=$((failed + 1))
        return 1
    fi
}

# sanitize SANITIZERS: the suite and the examples in a sanitized build
sanitize() {
    sanitizers=$1
    shift
    if build sanitize SANITIZE="$sanitizers" BLAS=1 VULKAN=0 BUILD="$build/sanitize" all; then
        here=$(pwd)
        export ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1
        export LSAN_OPTIONS=suppressions=$here/scripts/lsan.supp:print_suppressions=0
        export UBSAN_OPTIONS=suppressions=$here/scripts/ubsan.supp:print_stacktrace=1:halt_on_error=1
        run_suite sanitize "$build/sanitize/tests/kiln_tests" "$@"
        run_suite examples-sanitize scripts/test_examples.sh "$build/sanitize" "$@"
        KILN_SERVE_QUICK=1 run_suite serve-sanitize scripts/test_serve.sh "$build/sanitize" "$@"
        unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
    fi
}

mkdir -p "$build"
if [ -n "${SANITIZE:-}" ]; then
    san=$SANITIZE
    unset SANITIZE
    sanitize "$san" "$@"
    echo "== only the sanitize stage ran (SANITIZE=$san)"
    if [ "$skipped" -gt 0 ]; then
        echo "$passed passed, $failed failed, $skipped skipped"
    else
        echo "$passed passed, $failed failed"
    fi
    [ "$failed" -eq 0 ]
    exit
fi

if [ $# -eq 0 ]; then
    echo "make test: the suite in every build (native, isa, house, avx2-cpu, scalar, examples, serve, install, no-blas, sanitize," \
         "cuda, mpi, and arm64 in the background): 9 to 15 minutes on a 2-core machine"
fi
# arm64 in the background: its output and counts come back through files
arm64_pid=
rm -f "$build/arm64.counts"
if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; then
    (
        passed=0 failed=0 skipped=0 tty= progress=0
        if build arm64 CC=aarch64-linux-gnu-gcc BLAS=0 ZLIB=0 VULKAN=0 BUILD="$build/arm64" "$build/arm64/tests/kiln_tests"; then
            run_suite arm64 qemu-aarch64 -L /usr/aarch64-linux-gnu "$build/arm64/tests/kiln_tests" "$@"
            wanted isa "$@" && run_suite isa-arm64 scripts/isa_check.sh "$build/arm64"
        fi
        echo "$passed $failed $skipped" >"$build/arm64.counts"
    ) >"$build/arm64.out" 2>&1 &
    arm64_pid=$!
fi

run_suite native "$build/tests/kiln_tests" "$@"
if wanted isa "$@"; then
    run_suite isa-self-test scripts/isa_check.sh --self-test
    run_suite isa scripts/isa_check.sh "$build"
fi
wanted house "$@" && run_suite house scripts/house_check.sh "$build"
# the tests that run kernels per SIMD level (KT_FOR_EACH_SIMD and the like), about 25 s emulated
simd_tests="simd_ cpu_ gemm_i8 dfp_gemm_simd qmatmul_row_pairs qmatmul_gemm qmatmul_ggml qmatmul_kq qmatmul_few_rows ggml_types kernels_match nn_vec_tables
            nn_attention_loops opt8bit_vector pool_ conv_simd"
if wanted avx2-cpu "$@" && [ "$(uname -m)" = x86_64 ] && command -v qemu-x86_64 >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    run_suite avx2-cpu qemu-x86_64 -cpu Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid "$build/tests/kiln_tests" $simd_tests
fi
run_suite scalar env KILN_SIMD=scalar "$build/tests/kiln_tests" "$@"
run_suite examples scripts/test_examples.sh "$build" "$@"
run_suite serve scripts/test_serve.sh "$build" "$@"
run_suite install scripts/test_install.sh "$build" "$@"
# all: the library, every example (test_examples.sh runs them) and the tests
if build no-blas BLAS=0 VULKAN=0 BUILD="$build/no-blas" all; then
    run_suite no-blas "$build/no-blas/tests/kiln_tests" "$@"
    wanted isa "$@" && run_suite isa-no-blas scripts/isa_check.sh "$build/no-blas"
    run_suite examples-no-blas env KILN_NO_LAPACK=1 scripts/test_examples.sh "$build/no-blas" "$@"
fi
if [ "${KILN_SANITIZE:-1}" != 0 ]; then
    sanitize address,undefined "$@"
fi
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$nvcc" ] || nvcc=$(command -v nvcc 2>/dev/null || true)
if [ -n "$nvcc" ] && [ -x "$nvcc" ]; then
    cuda_home=$(dirname "$(dirname "$nvcc")")
    # one real architecture and its PTX, which newer GPUs compile at load:
    # half of nvcc's time of the default sm_80 + sm_90 + compute_90
    if build cuda CUDA=1 CUDA_HOME="$cuda_home" VULKAN=0 BUILD="$build/cuda" \
        CUDA_ARCH="-gencode arch=compute_80,code=[sm_80,compute_80]" "$build/cuda/tests/kiln_tests"; then
        if [ $# -gt 0 ]; then
            run_suite cuda "$build/cuda/tests/kiln_tests" "$@"
        else
            run_suite cuda "$build/cuda/tests/kiln_tests" cuda backend_
        fi
    fi
else
    echo "== cuda: skipped (no nvcc; the CUDA backend is built with make CUDA=1)"
fi
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
    if build mpi MPI=1 BUILD="$build" "$build/tests/kiln_dist_tests"; then
        run_suite mpi scripts/test_dist.sh "$build" "$@"
    fi
else
    echo "== mpi: skipped (no mpicc or mpirun; scripts/deps.sh mpi installs Open MPI)"
fi
if [ -n "$arm64_pid" ]; then
    wait "$arm64_pid"
    cat "$build/arm64.out"
    if [ -r "$build/arm64.counts" ]; then
        read -r p f s <"$build/arm64.counts"
        passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    else
        echo "== arm64: the stage did not finish"
        failed=$((failed + 1))
    fi
else
    echo "== arm64: skipped (no aarch64-linux-gnu-gcc or qemu-aarch64; scripts/deps.sh cross installs them)"
fi
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
