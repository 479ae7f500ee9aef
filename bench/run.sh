#!/bin/sh
# run.sh — `make bench`: PyTorch's reference figures first, then kiln's bench.
#
# Usage: bench/run.sh BUILD/bench/kiln_bench [kiln_bench options]
#   (make bench BENCH_ARGS="--quick" passes options through; --only serve
#   runs bench/serve.sh alone: the server's tokens/s at 1, 4 and 16 clients)
# bench/torch_ref.py runs with Debian's /usr/bin/python3 when PyTorch is
# importable; its lines go to a temporary file given to kiln_bench --torch.
# Without PyTorch the bench says so and prints no PyTorch ratios.
# KILN_LLAMA_BENCH=/path/to/llama-bench: the generation lines also run
# llama.cpp's llama-bench on the same GGUF files (bench/generate.c) and
# print kiln's tok/s against its.
# In a `make MPI=1` build (kiln_dist_bench beside kiln_bench) the data-parallel
# line (bench/dist.sh) comes last; `--only dist` runs only that.
set -eu

bin=${1:?usage: bench/run.sh path/to/kiln_bench [options]}
shift
dir=$(dirname "$0")
dist_bin=$(dirname "$bin")/kiln_dist_bench
prev=""
only=""
for a in "$@"; do
    if [ "$prev" = --only ] && [ "$a" = dist ]; then
        [ -x "$dist_bin" ] || { echo "bench: no $dist_bin (make MPI=1 builds it)" >&2; exit 1; }
        exec "$dir/dist.sh" "$dist_bin"
    fi
    [ "$prev" = --only ] && [ "$a" = serve ] && exec "$dir/serve.sh" "$(dirname "$(dirname "$bin")")"
    [ "$prev" = --only ] && only=1
    prev=$a
done

# options that torch_ref.py shares with kiln_bench; --only other than train, sizes, qlora or the devices skips it
torch_args=""
need_torch=1
prev=""
for a in "$@"; do
    case "$prev" in
        --threads) torch_args="$torch_args --threads $a" ;;
        --qlora-layers) torch_args="$torch_args --qlora-layers $a" ;;
        --only) case "$a" in
                    train|sizes|qlora) torch_args="$torch_args --only $a" ;;
                    cuda|vulkan) torch_args="$torch_args --only gpu" ;;
                    *) need_torch=0 ;;
                esac ;;
    esac
    [ "$a" = --quick ] && torch_args="$torch_args --quick"
    prev=$a
done

ref=$(mktemp "${TMPDIR:-/tmp}/kiln-torch-ref.XXXXXX")
trap 'rm -f "$ref"' EXIT
trap 'exit 130' INT TERM # an interrupt ends the bench (EXIT then removes $ref), not just the running step
if [ "$need_torch" = 1 ]; then
    if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        echo "bench: measuring PyTorch's figures (bench/torch_ref.py)..." >&2
        # shellcheck disable=SC2086
        /usr/bin/python3 "$dir/torch_ref.py" $torch_args > "$ref" ||
            echo "note bench/torch_ref.py failed: no PyTorch ratios" > "$ref"
    else
        echo "note PyTorch is not importable by /usr/bin/python3 (scripts/deps.sh fixtures installs it): no PyTorch ratios" > "$ref"
    fi
fi
"$bin" --torch "$ref" "$@"

# OpenBLAS 0.3.21 does not know some newer CPUs (this project's Sapphire
# Rapids VM gets its 2004 "Prescott" kernels, a quarter of the speed): on an
# AVX-512 CPU, measure the GEMMs again against its AVX-512 (SkylakeX) kernels.
gemm_part=1
prev=""
for a in "$@"; do
    [ "$prev" = --only ] && [ "$a" != gemm ] && gemm_part=0
    prev=$a
done
if [ "$gemm_part" = 1 ] && grep -q avx512f /proc/cpuinfo 2>/dev/null; then
    echo "# the GEMMs again, OpenBLAS forced to its AVX-512 kernels (OPENBLAS_CORETYPE=SkylakeX):"
    OPENBLAS_CORETYPE=SkylakeX "$bin" "$@" --only gemm | grep -v '^#'
fi
if [ -x "$dist_bin" ] && command -v mpirun >/dev/null 2>&1; then
    echo "# data parallel (bench/dist.sh):"
    "$dir/dist.sh" "$dist_bin"
fi
# the server: generated tokens/s at 1, 4 and 16 streaming clients (bench/serve.sh;
# `--only serve` runs only that)
if [ -z "$only" ]; then
    echo "# the server (bench/serve.sh):"
    quick=""
    for a in "$@"; do [ "$a" = --quick ] && quick="--seconds 5"; done
    # shellcheck disable=SC2086
    "$dir/serve.sh" "$(dirname "$(dirname "$bin")")" $quick
fi
