// emu.h — just enough of the CUDA runtime to run this backend's kernels on
// the host, for checking them against the CPU backend on a machine with no
// GPU (run.sh). A launch is one block: `threads` host threads (threadIdx.x
// thread-local, blockIdx.x = 0, gridDim.x = 1, so every grid-stride loop
// covers its whole range), `__shared__` arrays are statics shared by those
// threads, `__syncthreads()` is a barrier. Host float/double arithmetic is
// IEEE like the device's with -fmad=false; libm's exp/log may differ from
// CUDA's by an ulp or two, so the transcendental kernels are compared with
// a tolerance and the integer/exact ones (conv, DFP) bit for bit.
//
//     namespace {
//     #include "k_dfp.body"   // the kernels of k_dfp.cu (run.sh extracts them)
//     }
//     emu_launch(256, [&] { amax_k(x, n, &amax); });
#ifndef KILN_CUDA_EMU_H
#define KILN_CUDA_EMU_H

#include "cu_kernels.h"

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

struct emu_dim {
    unsigned x;
};
static thread_local emu_dim threadIdx{0};
static emu_dim blockIdx{0}, blockDim{256}, gridDim{1};
static std::barrier<> *emu_barrier;
static std::mutex emu_atomics;

#define __global__
#define __device__
#define __shared__ static
#define __syncthreads() emu_barrier->arrive_and_wait()

// the 16-bit types are not exercised here: f32 and f64 paths only
struct __half {
    uint16_t x;
};
struct __nv_bfloat16 {
    uint16_t x;
};
static inline float __half2float(__half) { return NAN; }
static inline float __bfloat162float(__nv_bfloat16) { return NAN; }
static inline __half __float2half_rn(float) { return {}; }
static inline __nv_bfloat16 __float2bfloat16_rn(float) { return {}; }
static inline int __double2int_rn(double v) { return (int)lrint(v); }
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline uint32_t atomicMax(uint32_t *p, uint32_t v) {
    std::lock_guard<std::mutex> lock(emu_atomics);
    uint32_t old = *p;
    if (v > old) *p = v;
    return old;
}

// One block of `threads` threads running f (the kernel call), to completion.
template <typename F> static void emu_launch(unsigned threads, F f) {
    std::barrier<> bar(threads);
    emu_barrier = &bar;
    blockDim.x = threads;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; t++) ts.emplace_back([&, t] {
        threadIdx.x = t;
        f();
    });
    for (auto &t : ts) t.join();
}

#endif
