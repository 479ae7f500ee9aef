// prelude.h — included first by the fake nvcc (fake/nvcc) into each .cu it
// compiles for the host: the block's threads as host threads (one block per
// launch, gridDim = 1, so grid-stride loops cover their whole range),
// __syncthreads as a barrier (__syncwarp one per 32 threads), and the
// intrinsics the kernels use (mma.h: the warp matrix functions). A launch
// made while a stream capture is open is kept, with copies of its
// arguments, and runs when the graph is launched (runtime.cpp). The .cu
// text is rewritten to these names (threadIdx -> emu_threadIdx, ...).
#ifndef KILN_CUDA_EMU_PRELUDE_H
#define KILN_CUDA_EMU_PRELUDE_H

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>

struct emu_dim3 {
    unsigned x, y, z;
};
static thread_local emu_dim3 emu_threadIdx{0, 0, 0};
static thread_local emu_dim3 emu_blockDim{1, 1, 1};
static const emu_dim3 emu_blockIdx{0, 0, 0}, emu_gridDim{1, 1, 1};
static std::barrier<> *emu_bar;
static std::deque<std::barrier<>> *emu_warps;
static std::mutex emu_mu;

static inline void emu_sync() { emu_bar->arrive_and_wait(); }
static inline void emu_syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask; // kiln's kernels sync whole warps
    (*emu_warps)[emu_threadIdx.x / 32].arrive_and_wait();
}
static inline float emu_uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t emu_float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline int emu_double2int_rn(double v) { return (int)nearbyint(v); }
static inline int emu_float2int_rn(float v) { return (int)nearbyintf(v); }
// c + the four signed bytes of a times those of b (sm_61's __dp4a)
static inline int __dp4a(int a, int b, int c) {
    for (int j = 0; j < 32; j += 8) c += (int)(int8_t)(a >> j) * (int)(int8_t)(b >> j);
    return c;
}
static inline unsigned emu_atomicMax(unsigned *p, unsigned v) {
    std::lock_guard<std::mutex> lock(emu_mu);
    unsigned old = *p;
    if (v > old) *p = v;
    return old;
}
static inline int emu_atomicCAS(int *p, int compare, int v) {
    std::lock_guard<std::mutex> lock(emu_mu);
    int old = *p;
    if (old == compare) *p = v;
    return old;
}

// runtime.cpp: while a stream capture is open it keeps f for the graph
// (true); else false, and the caller runs it now.
bool emu_capture(std::function<void()> f);

// One block of `threads` host threads running f to completion.
template <typename F> static void emu_go(unsigned threads, F f) {
    if (threads < 1) threads = 1;
    std::barrier<> bar(threads);
    emu_bar = &bar;
    std::deque<std::barrier<>> warps;
    for (unsigned w = 0; w < threads; w += 32) warps.emplace_back(threads - w < 32 ? threads - w : 32);
    emu_warps = &warps;
    std::vector<std::thread> ts;
    ts.reserve(threads);
    for (unsigned t = 0; t < threads; t++) ts.emplace_back([&, t] {
        emu_threadIdx = {t, 0, 0};
        emu_blockDim = {threads, 1, 1};
        f();
    });
    for (auto &t : ts) t.join();
}

// A launch: run now, or kept (with copies of its arguments) by an open capture.
template <typename F> static void emu_run(unsigned threads, F f) {
    if (!emu_capture([threads, f] { emu_go(threads, f); })) emu_go(threads, f);
}

#endif
