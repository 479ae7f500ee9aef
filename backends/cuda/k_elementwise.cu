// k_elementwise.cu — the CUDA backend's element-wise and reduce kernels
// (launchers declared in cu_kernels.h). One thread per output element in
// grid-stride loops; every operand is read through a cu_walk, so views of
// any strides and broadcasts need no copy. Values are computed in double
// (the CPU's reference formulas, backends/cpu/vecmath.h) and rounded once
// to the output's dtype, as the CPU's set functions do (core/dtype.c).
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"

__global__ void copy_k(int xt, const void *x, int yt, void *y, int64_t n, cu_walk w) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = walk_off(w, 0, i);
        if (xt == yt && xt == CU_F32) ((float *)y)[i] = ((const float *)x)[o];
        else if (xt == yt && xt == CU_I32) ((int32_t *)y)[i] = ((const int32_t *)x)[o];
        else if (xt == yt && xt == CU_F64) ((double *)y)[i] = ((const double *)x)[o];
        else if (xt == yt) ((uint16_t *)y)[i] = ((const uint16_t *)x)[o]; // 16-bit: bits moved as they are
        // i32 converts through f32 (the CPU's to_f32 rows), but to f64 exactly (its get/set)
        else if (xt == CU_I32 && yt != CU_F64) store(yt, y, i, (double)(float)((const int32_t *)x)[o]);
        else store(yt, y, i, load(xt, x, o));
    }
}

__device__ double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

const double GELU_K = 0.7978845608028654; // sqrt(2/pi)

// backends/cpu/vecmath.h's kiln__unary_ref, op numbered from KILN_OP_NEG.
__device__ double unary_ref(int op, double x, double p) {
    switch (op) {
    case 0: return -x;
    case 1: return x * p;
    case 2: return x + p;
    case 3: return exp(x);
    case 4: return log(x);
    case 5: return sqrt(x);
    case 6: return 1.0 / sqrt(x);
    case 7: return fabs(x);
    case 8: return (double)((x > 0) - (x < 0));
    case 9: return p == 2.0 ? x * x : p == 3.0 ? x * x * x : pow(x, p);
    case 10: return tanh(x);
    case 11: return sigmoid(x);
    case 12: return x < 0 ? 0 : x; // NaN stays NaN
    case 13: return x > 0 ? x : x * p;
    case 14: return 0.5 * x * erfc(-x * M_SQRT1_2);
    case 15: return x * sigmoid(2 * GELU_K * (x + 0.044715 * x * x * x));
    case 16: return x * sigmoid(x);
    case 17: return x > 20 ? x : log1p(exp(x));
    case 18: return 0.5 * erfc(-x * M_SQRT1_2) + x * exp(-0.5 * x * x) * 0.3989422804014327;
    case 19: {
        double u2 = 2 * GELU_K * (x + 0.044715 * x * x * x), s = sigmoid(u2), sm = sigmoid(-u2);
        return s + 2 * x * s * sm * GELU_K * (1.0 + 3 * 0.044715 * x * x);
    }
    default: return NAN;
    }
}

__global__ void unary_k(int op, double p, int dt, const void *x, void *y, int64_t n, cu_walk w) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store(dt, y, i, unary_ref(op, load(dt, x, walk_off(w, 0, i)), p));
}

// kiln_cmp_op: EQ NE LT LE GT GE (include/kiln.h), checked on the host.
__device__ double binary_ref(int op, int cmp, double a, double b) {
    switch (op) {
    case CU_ADD: return a + b;
    case CU_SUB: return a - b;
    case CU_MUL: return a * b;
    case CU_DIV: return a / b;
    default:
        switch (cmp) {
        case 0: return a == b;
        case 1: return a != b;
        case 2: return a < b;
        case 3: return a <= b;
        case 4: return a > b;
        default: return a >= b;
        }
    }
}

__global__ void binary_k(int op, int cmp, int dt, const void *a, const void *b, void *y, int64_t n, cu_walk w) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double va = load(dt, a, walk_off(w, 0, i)), vb = load(dt, b, walk_off(w, 1, i));
        // f32 operands: one f32 rounding of the exact result, as the CPU's f32 arithmetic
        if (dt == CU_F32 && op != CU_CMP) {
            float fa = (float)va, fb = (float)vb;
            float r = op == CU_ADD ? fa + fb : op == CU_SUB ? fa - fb : op == CU_MUL ? fa * fb : fa / fb;
            ((float *)y)[i] = r;
        } else {
            store(dt, y, i, binary_ref(op, cmp, va, vb));
        }
    }
}

// The value ref r names: the previous step's (prev) or input r - 1's.
template <typename T> __device__ T chain_ref(const T *v, T prev, int r) {
    T x = prev;
#pragma unroll
    for (int k = 0; k < CU_CHAIN_IN; k++)
        if (r == k + 1) x = v[k]; // a select, so v stays in registers
    return x;
}

template <typename T> __global__ void chain_k(cu_chain c, T *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.n; i += (int64_t)gridDim.x * blockDim.x) {
        T v[CU_CHAIN_IN];
#pragma unroll
        for (int k = 0; k < CU_CHAIN_IN; k++) {
            if (k >= c.n_in) break;
            int64_t at = c.kind[k] == 0 ? i : c.kind[k] == 1 ? 0 : c.kind[k] == 2 ? i % c.c : i / c.inner % c.chans;
            v[k] = ((const T *)c.in[k])[at];
        }
        T r = 0;
        for (int s = 0; s < c.n_steps; s++) {
            T a = chain_ref(v, r, c.a[s]);
            int op = c.op[s];
            if (op < 32) {
                r = (T)unary_ref(op, a, c.p[s]);
                continue;
            }
            T b = chain_ref(v, r, c.b[s]);
            op -= 32;
            // binary_k's rules: f32 arithmetic in f32, the rest through binary_ref
            if (sizeof(T) == 4 && op != CU_CMP) {
                float fa = (float)a, fb = (float)b;
                r = (T)(op == CU_ADD ? fa + fb : op == CU_SUB ? fa - fb : op == CU_MUL ? fa * fb : fa / fb);
            } else {
                r = (T)binary_ref(op, c.cmp[s], a, b);
            }
        }
        y[i] = r;
    }
}

__global__ void where_k(int ct, const void *c, int dt, const void *a, const void *b, void *y, int64_t n, cu_walk w) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t oc = walk_off(w, 0, i);
        bool on = load(ct, c, oc) != 0;
        int64_t o = on ? walk_off(w, 1, i) : walk_off(w, 2, i);
        const void *s = on ? a : b;
        if (dt == CU_F32) ((float *)y)[i] = ((const float *)s)[o];
        else if (dt == CU_F64) ((double *)y)[i] = ((const double *)s)[o];
        else ((uint16_t *)y)[i] = ((const uint16_t *)s)[o];
    }
}

__global__ void acc_k(int dt, void *g, const void *d, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (dt == CU_F32) ((float *)g)[i] += ((const float *)d)[i];
        else if (dt == CU_F64) ((double *)g)[i] += ((const double *)d)[i];
        else store(dt, g, i, (float)load(dt, g, i) + (float)load(dt, d, i));
    }
}

// MAX/MIN keeping the CPU's rule: a NaN, once seen, wins.
__device__ double pick(bool is_max, double best, double v) {
    if (best != best) return best;
    if (v != v) return v;
    return is_max ? (v > best ? v : best) : (v < best ? v : best);
}

__global__ void reduce_k(int op, int xt, const void *x, int yt, void *y, int64_t nout, cu_walk w, int64_t len,
                         int64_t step) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nout; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = walk_off(w, 0, i);
        if (op == CU_RED_SUM) {
            double s = 0;
            for (int64_t j = 0; j < len; j++) s += load(xt, x, o + j * step);
            store(yt, y, i, s);
        } else if (op == CU_RED_ARGMAX) {
            int64_t at = 0;
            double best = load(xt, x, o);
            for (int64_t j = 1; j < len && best == best; j++) {
                double v = load(xt, x, o + j * step);
                if (v != v || v > best) at = j, best = v;
            }
            ((int32_t *)y)[i] = (int32_t)at;
        } else {
            double best = load(xt, x, o);
            for (int64_t j = 1; j < len && best == best; j++) best = pick(op == CU_RED_MAX, best, load(xt, x, o + j * step));
            store(yt, y, i, best);
        }
    }
}

// One block: each thread reduces a strided share, then a tree in shared memory.
__global__ void reduce_all_k(int op, int xt, const void *x, int yt, void *y, int64_t n, cu_walk w) {
    __shared__ double part[THREADS];
    bool sum = op == CU_RED_SUM, is_max = op == CU_RED_MAX;
    double acc = sum ? 0.0 : load(xt, x, walk_off(w, 0, 0));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double v = load(xt, x, walk_off(w, 0, i));
        acc = sum ? acc + v : pick(is_max, acc, v);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] = sum ? part[threadIdx.x] + part[threadIdx.x + h] : pick(is_max, part[threadIdx.x], part[threadIdx.x + h]);
        __syncthreads();
    }
    if (threadIdx.x == 0) store(yt, y, 0, part[0]);
}

// y at walk source 1 = x at walk source 0, es-byte elements moved as bits.
__global__ void move_k(int es, const void *x, void *y, int64_t n, cu_walk w) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t xo = walk_off(w, 0, i), yo = walk_off(w, 1, i);
        if (es == 2) ((uint16_t *)y)[yo] = ((const uint16_t *)x)[xo];
        else if (es == 4) ((uint32_t *)y)[yo] = ((const uint32_t *)x)[xo];
        else ((uint64_t *)y)[yo] = ((const uint64_t *)x)[xo];
    }
}

__global__ void fill_k(int es, void *y, int64_t n, uint64_t bits) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (es == 2) ((uint16_t *)y)[i] = (uint16_t)bits;
        else if (es == 4) ((uint32_t *)y)[i] = (uint32_t)bits;
        else ((uint64_t *)y)[i] = bits;
    }
}

} // namespace

extern "C" {

int kiln__cu_move(void *stream, int es, const void *x, void *y, int64_t n, const cu_walk *w) {
    move_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(es, x, y, n, *w);
    return (int)cudaGetLastError();
}

int kiln__cu_fill(void *stream, int es, void *y, int64_t n, uint64_t bits) {
    fill_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(es, y, n, bits);
    return (int)cudaGetLastError();
}

int kiln__cu_copy(void *stream, int xt, const void *x, int yt, void *y, int64_t n, const cu_walk *w) {
    copy_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(xt, x, yt, y, n, *w);
    return (int)cudaGetLastError();
}

int kiln__cu_unary(void *stream, int op, double p, int dt, const void *x, void *y, int64_t n, const cu_walk *w) {
    unary_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(op, p, dt, x, y, n, *w);
    return (int)cudaGetLastError();
}

int kiln__cu_binary(void *stream, int op, int cmp, int dt, const void *a, const void *b, void *y, int64_t n,
                    const cu_walk *w) {
    binary_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(op, cmp, dt, a, b, y, n, *w);
    return (int)cudaGetLastError();
}

int kiln__cu_chain(void *stream, const cu_chain *c, void *y) {
    unsigned grid = blocks_for(c->n);
    if (c->dt == CU_F64) chain_k<double><<<grid, THREADS, 0, (cudaStream_t)stream>>>(*c, (double *)y);
    else chain_k<float><<<grid, THREADS, 0, (cudaStream_t)stream>>>(*c, (float *)y);
    return (int)cudaGetLastError();
}

int kiln__cu_where(void *stream, int ct, const void *c, int dt, const void *a, const void *b, void *y, int64_t n,
                   const cu_walk *w) {
    where_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(ct, c, dt, a, b, y, n, *w);
    return (int)cudaGetLastError();
}

int kiln__cu_acc(void *stream, int dt, void *g, const void *d, int64_t n) {
    acc_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(dt, g, d, n);
    return (int)cudaGetLastError();
}

int kiln__cu_reduce(void *stream, int op, int xt, const void *x, int yt, void *y, int64_t nout, const cu_walk *w,
                    int64_t len, int64_t step) {
    reduce_k<<<blocks_for(nout), THREADS, 0, (cudaStream_t)stream>>>(op, xt, x, yt, y, nout, *w, len, step);
    return (int)cudaGetLastError();
}

int kiln__cu_reduce_all(void *stream, int op, int xt, const void *x, int yt, void *y, int64_t n, const cu_walk *w) {
    reduce_all_k<<<1, THREADS, 0, (cudaStream_t)stream>>>(op, xt, x, yt, y, n, *w);
    return (int)cudaGetLastError();
}

} // extern "C"
