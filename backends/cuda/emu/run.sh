#!/bin/sh
# run.sh — check the CUDA backend's kernels on a machine without a GPU:
# each emu_*.cpp compiles the kernels of one k_*.cu for the host (emu.h
# stands in for the CUDA runtime) and compares them with the CPU backend
# of an existing kiln build on the same inputs.
#
#     make -j2 VULKAN=0 BLAS=0 BUILD=/tmp/kb
#     backends/cuda/emu/run.sh /tmp/kb        # [check ...]: conv dfp rows attention elementwise
#
# Needs a C++20 compiler (std::barrier). Not part of `make test`: a real GPU
# run (tests/kiln_tests backend_ cuda) is the test; this catches indexing
# and arithmetic mistakes before one is available.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:?usage: run.sh BUILD [conv dfp rows attention elementwise]}
shift
checks=${*:-conv dfp rows attention elementwise}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# the libraries the build linked (vulkan, blas, zlib), from its archive's symbols
libs="-lm -lpthread"
nm "$build/libkiln.a" 2>/dev/null | grep -q " U vkCreateInstance" && libs="$libs -lvulkan"
nm "$build/libkiln.a" 2>/dev/null | grep -q " U LAPACKE_" && libs="$libs -llapacke"
nm "$build/libkiln.a" 2>/dev/null | grep -q " U cblas_" && libs="$libs -lopenblas"
nm "$build/libkiln.a" 2>/dev/null | grep -q " U inflate" && libs="$libs -lz"
status=0
for c in $checks; do
    case $c in
    conv) k=k_conv ;; dfp) k=k_dfp ;; rows) k=k_nn ;; attention) k=k_attention ;; elementwise) k=k_elementwise ;;
    *) echo "run.sh: no check $c" >&2; exit 2 ;;
    esac
    # the kernels: the body of the .cu file's anonymous namespace
    sed -n '/^namespace {/,/^} \/\/ namespace/p' "$root/backends/cuda/$k.cu" | sed '1d;$d' > "$out/$k.body"
    ${CXX:-g++} -std=c++20 -O1 -I"$out" -I"$here" -I"$root/backends/cuda" -I"$root/include" -I"$root/core" \
        "$here/emu_$c.cpp" "$build/libkiln.a" $libs -o "$out/emu_$c"
    "$out/emu_$c" || status=1
done
exit $status
