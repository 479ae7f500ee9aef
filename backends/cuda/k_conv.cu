// k_conv.cu — the CUDA backend's convolution primitives (launchers in
// cu_kernels.h), in backends/cpu/conv.c's semantics: IM2COL (either cols
// layout) and its adjoint COL2IM, and the fused max-pool and its backward
// (ip[10] = 1). One thread per output element; COL2IM and the pool's
// backward gather, per pixel, the taps that land on it in the order the
// CPU adds them (no atomics: the same sums every run).
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"

// Where tap (ki, kj) of window (oi, oj) of image plane (b, ci) lies in cols.
__device__ int64_t cols_at(const cu_conv &g, int64_t b, int64_t ci, int64_t ki, int64_t kj, int64_t oi, int64_t oj) {
    int64_t grid = (oi * g.ow + oj);
    if (g.cn) return (((ci * g.kh + ki) * g.kw + kj) * g.n + b) * g.oh * g.ow + grid;
    return (((b * g.c + ci) * g.kh + ki) * g.kw + kj) * g.oh * g.ow + grid;
}

template <typename T> __global__ void im2col_k(cu_conv g, const T *x, T *cols, T pad, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, oj = r % g.ow;
        r /= g.ow;
        int64_t oi = r % g.oh;
        r /= g.oh;
        int64_t b, ci, ki, kj;
        if (g.cn) { // [c, kh, kw, n, oh, ow]
            b = r % g.n, r /= g.n;
            kj = r % g.kw, r /= g.kw;
            ki = r % g.kh, ci = r / g.kh;
        } else { // [n, c, kh, kw, oh, ow]
            kj = r % g.kw, r /= g.kw;
            ki = r % g.kh, r /= g.kh;
            ci = r % g.c, b = r / g.c;
        }
        int64_t ii = oi * g.sh - g.ph + ki * g.dh, jj = oj * g.sw - g.pw + kj * g.dw;
        bool in = ii >= 0 && ii < g.h && jj >= 0 && jj < g.w;
        cols[i] = in ? x[((b * g.c + ci) * g.h + ii) * g.w + jj] : pad;
    }
}

// The window rows oi whose tap ki lands on image row ii: ii = oi s - p + ki d.
__device__ bool window_of(int64_t ii, int64_t k, int64_t s, int64_t p, int64_t d, int64_t o, int64_t *oi) {
    int64_t t = ii + p - k * d;
    if (t < 0 || t % s) return false;
    *oi = t / s;
    return *oi < o;
}

// Pixel (b, ci, ii, jj) = sum over (ki, kj) in order of the tap landing on
// it (the CPU's loop adds them to the zeroed image in that order).
template <typename T> __global__ void col2im_k(cu_conv g, const T *cols, T *img, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t jj = i % g.w, r = i / g.w, ii = r % g.h;
        r /= g.h;
        int64_t ci = r % g.c, b = r / g.c;
        T acc = 0;
        for (int64_t ki = 0; ki < g.kh; ki++) {
            int64_t oi;
            if (!window_of(ii, ki, g.sh, g.ph, g.dh, g.oh, &oi)) continue;
            for (int64_t kj = 0; kj < g.kw; kj++) {
                int64_t oj;
                if (!window_of(jj, kj, g.sw, g.pw, g.dw, g.ow, &oj)) continue;
                acc += cols[cols_at(g, b, ci, ki, kj, oi, oj)];
            }
        }
        img[i] = acc;
    }
}

// The max-pool with g.cn: pooled plane p = b c + ci lies at plane ci n + b
// of x (and gx), stored [c, n, h, w]; pooled_plane is the inverse.
__device__ inline int64_t image_plane(const cu_conv &g, int64_t p) { return g.cn ? p % g.c * g.n + p / g.c : p; }
__device__ inline int64_t pooled_plane(const cu_conv &g, int64_t q) { return g.cn ? q % g.n * g.c + q / g.n : q; }

// y[b, ci, oi, oj] = max of the window's taps (pad outside the image); a NaN wins.
template <typename T> __global__ void pool_max_k(cu_conv g, const T *x, T *y, T pad, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t oj = i % g.ow, r = i / g.ow, oi = r % g.oh, plane = r / g.oh;
        const T *img = x + image_plane(g, plane) * g.h * g.w;
        int64_t i0 = oi * g.sh - g.ph, j0 = oj * g.sw - g.pw;
        T best = pad;
        bool first = true;
        for (int64_t ki = 0; ki < g.kh && best == best; ki++)
            for (int64_t kj = 0; kj < g.kw; kj++) {
                int64_t ii = i0 + ki * g.dh, jj = j0 + kj * g.dw;
                T v = ii >= 0 && ii < g.h && jj >= 0 && jj < g.w ? img[ii * g.w + jj] : pad;
                if (first || v > best || v != v) best = v, first = false;
                if (best != best) break;
            }
        y[i] = best == best ? best : (T)NAN;
    }
}

// How many taps of window (oi, oj) equal m (pad taps read -inf).
template <typename T> __device__ int64_t ties(const cu_conv &g, const T *img, int64_t oi, int64_t oj, T m) {
    int64_t i0 = oi * g.sh - g.ph, j0 = oj * g.sw - g.pw, count = 0;
    for (int64_t ki = 0; ki < g.kh; ki++)
        for (int64_t kj = 0; kj < g.kw; kj++) {
            int64_t ii = i0 + ki * g.dh, jj = j0 + kj * g.dw;
            bool in = ii >= 0 && ii < g.h && jj >= 0 && jj < g.w;
            count += (in ? img[ii * g.w + jj] : (T)-INFINITY) == m;
        }
    return count;
}

// gx at a pixel: the share gy / ties of every window whose max it equals,
// windows in row-major order (as the CPU adds them). Windows that tile the
// image without padding (the CPU's assign path) give share * (x == max),
// so a window whose max is NaN (no tap equals it) gives its taps NaN there,
// as on the CPU; elsewhere such a window adds nothing.
template <typename T>
__global__ void pool_max_grad_k(cu_conv g, const T *x, const T *y, const T *gy, T *gx, int64_t total) {
    bool tiled = g.ph == 0 && g.pw == 0 && g.sh == g.kh && g.sw == g.kw && g.dh == 1 && g.dw == 1;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t jj = i % g.w, r = i / g.w, ii = r % g.h, plane = r / g.h, p = pooled_plane(g, plane);
        const T *img = x + plane * g.h * g.w, *yp = y + p * g.oh * g.ow, *gp = gy + p * g.oh * g.ow;
        T v = img[ii * g.w + jj];
        if (tiled) {
            int64_t oi = ii / g.kh, oj = jj / g.kw;
            T out = 0;
            if (oi < g.oh && oj < g.ow) {
                T m = yp[oi * g.ow + oj];
                T share = gp[oi * g.ow + oj] / (T)ties(g, img, oi, oj, m);
                out = share * (T)(v == m);
            }
            gx[i] = out;
            continue;
        }
        // the CPU's order of the adds: windows by oi; along a row, with
        // padding, by oj; without (its interior path), 256 windows at a
        // time, taps (ki, kj) outer, so oj descending within each group
        bool interior = g.ph == 0 && g.pw == 0;
        T acc = 0;
        for (int64_t ki = g.kh - 1; ki >= 0; ki--) { // oi ascending
            int64_t oi;
            if (!window_of(ii, ki, g.sh, g.ph, g.dh, g.oh, &oi)) continue;
            int64_t b0 = 0, b1 = 0; // the groups of 256 windows the row's taps fall in
            if (interior) {
                b0 = INT64_MAX, b1 = -1;
                for (int64_t kj = 0; kj < g.kw; kj++) {
                    int64_t oj;
                    if (!window_of(jj, kj, g.sw, g.pw, g.dw, g.ow, &oj)) continue;
                    b0 = oj / 256 < b0 ? oj / 256 : b0;
                    b1 = oj / 256 > b1 ? oj / 256 : b1;
                }
            }
            for (int64_t blk = b0; blk <= b1; blk++)
                for (int64_t e = 0; e < g.kw; e++) {
                    int64_t kj = interior ? e : g.kw - 1 - e, oj;
                    if (!window_of(jj, kj, g.sw, g.pw, g.dw, g.ow, &oj) || (interior && oj / 256 != blk)) continue;
                    T m = yp[oi * g.ow + oj];
                    if (v != m) continue;
                    acc += gp[oi * g.ow + oj] / (T)ties(g, img, oi, oj, m);
                }
        }
        gx[i] = acc;
    }
}

} // namespace

extern "C" {

int kiln__cu_im2col(void *stream, int dt, const cu_conv *g, const void *x, void *cols, double pad) {
    int64_t total = g->n * g->c * g->kh * g->kw * g->oh * g->ow;
    if (dt == CU_F64)
        im2col_k<double><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(*g, (const double *)x, (double *)cols,
                                                                                  pad, total);
    else
        im2col_k<float><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(*g, (const float *)x, (float *)cols,
                                                                                 (float)pad, total);
    return (int)cudaGetLastError();
}

int kiln__cu_col2im(void *stream, int dt, const cu_conv *g, const void *cols, void *img) {
    int64_t total = g->n * g->c * g->h * g->w;
    if (dt == CU_F64)
        col2im_k<double><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(*g, (const double *)cols,
                                                                                  (double *)img, total);
    else
        col2im_k<float><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(*g, (const float *)cols, (float *)img,
                                                                                 total);
    return (int)cudaGetLastError();
}

int kiln__cu_pool_max(void *stream, int dt, const cu_conv *g, const void *x, void *y, double pad) {
    int64_t total = g->n * g->c * g->oh * g->ow;
    if (dt == CU_F64)
        pool_max_k<double><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(*g, (const double *)x, (double *)y,
                                                                                    pad, total);
    else
        pool_max_k<float><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(*g, (const float *)x, (float *)y,
                                                                                   (float)pad, total);
    return (int)cudaGetLastError();
}

int kiln__cu_pool_max_grad(void *stream, int dt, const cu_conv *g, const void *x, const void *y, const void *gy,
                           void *gx) {
    int64_t total = g->n * g->c * g->h * g->w;
    if (dt == CU_F64)
        pool_max_grad_k<double><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(
            *g, (const double *)x, (const double *)y, (const double *)gy, (double *)gx, total);
    else
        pool_max_grad_k<float><<<blocks_for(total), THREADS, 0, (cudaStream_t)stream>>>(
            *g, (const float *)x, (const float *)y, (const float *)gy, (float *)gx, total);
    return (int)cudaGetLastError();
}

} // extern "C"
