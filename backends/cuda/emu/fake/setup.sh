#!/bin/sh
# setup.sh — make a fake CUDA_HOME in which `make CUDA=1` builds the CUDA
# backend to run on the host: bin/nvcc compiles the kernels with g++
# (prelude.h: a launch is one block of host threads; mma.h: wmma), lib64 holds a fake
# CUDA runtime and cuBLAS (runtime.cpp), include/ is the real toolkit's
# headers (needed: cuda_runtime_api.h, cublas_v2.h, cuda_fp16.h).
#
#     backends/cuda/emu/fake/setup.sh /tmp/fakecuda          # [REAL_CUDA_HOME]
#     make -j2 CUDA=1 CUDA_HOME=/tmp/fakecuda VULKAN=0 BUILD=/tmp/kb-emu
#     /tmp/kb-emu/tests/kiln_tests backend_ cuda             # the op table on "cuda"
#
# What it cannot see: real parallelism across blocks and warps, device
# math (libm stands in), launch limits, memory errors that host memory
# forgives. A GPU run is the test; this runs the backend's host code and
# kernels end to end before one is available.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dst=${1:?usage: setup.sh FAKE_CUDA_HOME [REAL_CUDA_HOME]}
real=${2:-${CUDA_HOME:-/usr/local/cuda}}
[ -f "$real/include/cuda_runtime_api.h" ] || { echo "setup.sh: no CUDA headers in $real/include" >&2; exit 1; }
mkdir -p "$dst/bin" "$dst/lib64" "$dst/emu"
ln -sfn "$real/include" "$dst/include"
cp "$here/prelude.h" "$here/mma.h" "$here/nvcc" "$dst/emu/"
ln -sf ../emu/nvcc "$dst/bin/nvcc"
${CXX:-g++} -std=c++20 -O1 -fPIC -shared -I"$real/include" "$here/runtime.cpp" -o "$dst/lib64/libcudart.so"
cp "$dst/lib64/libcudart.so" "$dst/lib64/libcublas.so"
${CXX:-g++} -std=c++20 -O1 -I"$here" -I"$real/include" "$here/mma_check.cpp" -o "$dst/emu/mma_check" -lpthread
"$dst/emu/mma_check"
echo "fake CUDA_HOME ready: $dst"
