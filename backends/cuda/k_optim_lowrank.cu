// k_optim_lowrank.cu — the element-wise and reduction parts of the
// low-rank optimizer steps on the CUDA backend; their projections are
// cuBLAS GEMMs queued by cu_optim_lowrank.c.
//   GaLore (backends/cpu/optim_galore.c): the step's scalars from the hyper
//   leaf, Adam on the low-rank gradient with f32 moments or 8-bit states
//   (R becomes N in place), the decoupled weight decay after the update.
//   APOLLO (backends/cpu/optim_apollo.c): the random projector from the
//   seed (core/rng.c's hash and Box-Muller), the moments with the
//   per-channel sums of squares (double), the scaling factors with the
//   norm-growth limiter on the f64 prev_norm, the update of p.
// f32 arithmetic is written as the CPU's, operation for operation (the
// build passes -fmad=false; sqrtf and '/' are IEEE-rounded); the scalars
// the CPU derives in double are derived here in double.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"
#include "k_q8.cuh"

// ---- GaLore ----

// sc[0] = alpha = -(lr sqrt(bc2) / bc1) * scale (the back projection's
// factor), sc[1] = 1 (its beta, read through the device pointer mode),
// sc[2] = the Adam eps: eps, or eps sqrt(bc2) when bnb (8-bit GaLore).
__global__ void galore_scalars_k(const float *h, double scale, int bnb, float *sc) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double lr = h[0], b1 = h[1], b2 = h[2], step = (double)h[5] * 65536.0 + (double)h[6];
    double bc2s = sqrt(1.0 - pow(b2, step));
    double step_size = lr * bc2s / (1.0 - pow(b1, step));
    sc[0] = (float)(-step_size * scale);
    sc[1] = 1.0f;
    sc[2] = bnb ? (float)((double)h[3] * bc2s) : h[3];
}

// lowrank_adam: R becomes N = m / (sqrt(v) + eps), eps = sc[2].
__global__ void lowrank_adam_k(float *r, float *m, float *v, int64_t n, const float *h, const float *sc) {
    const float b1 = h[1], b2 = h[2], eps = sc[2];
    const float one_b1 = (float)(1.0 - (double)b1), one_b2 = (float)(1.0 - (double)b2);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = r[i];
        float mi = m[i] * b1 + g * one_b1;
        float vi = v[i] * b2 + one_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        r[i] = mi / (sqrtf(vi) + eps);
    }
}

// lowrank_adam8: one block of THREADS per block of 256 elements of R; m
// (signed map, absmax ma) and v (unsigned map, absmax va) dequantized,
// updated where R is finite (elsewhere N is 0 and the state kept),
// requantized with the block's fresh absmax.
__global__ void lowrank_adam8_k(float *r, unsigned char *mq, unsigned char *vq, float *ma, float *va,
                                const float *maps, int64_t n, const float *h, const float *sc) {
    __shared__ float map[512], thr[512], red[2][THREADS];
    const int l = threadIdx.x;
    q8_load_maps(maps, map, thr);
    const float b1 = h[1], b2 = h[2], eps = sc[2];
    const float one_b1 = (float)(1.0 - (double)b1), one_b2 = (float)(1.0 - (double)b2);
    const int64_t nb = (n + 255) / 256;
    for (int64_t b = blockIdx.x; b < nb; b += gridDim.x) {
        const int64_t i = b * 256 + l;
        const bool live = i < n;
        float mi = 0, vi = 0;
        if (live) {
            mi = map[mq[i]] * ma[b];
            vi = map[256 + vq[i]] * va[b];
            float g = r[i], x = 0.0f;
            if (isfinite(g)) {
                mi = mi * b1 + g * one_b1;
                vi = vi * b2 + one_b2 * g * g;
                x = mi / (sqrtf(vi) + eps);
            }
            r[i] = x;
        }
        float am0, am1;
        q8_block_absmax2(red, mi, vi, &am0, &am1);
        if (live) {
            mq[i] = (unsigned char)code_of(thr, am0 == 0.0f ? 0.0f : mi / am0);
            vq[i] = (unsigned char)code_of(thr + 256, am1 == 0.0f ? 0.0f : vi / am1);
        }
        if (l == 0) {
            ma[b] = am0;
            va[b] = am1;
        }
        __syncthreads(); // red is reused by the next block
    }
}

// p *= 1 - lr wd, as the CPU's p + p * -(lr wd), when wd > 0.
__global__ void galore_decay_k(float *w, int64_t n, const float *h) {
    const double lr = h[0], wd = h[4];
    if (!(wd > 0)) return;
    const float decay = (float)(-lr * wd);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        w[i] += w[i] * decay;
}

// ---- APOLLO ----

__device__ uint64_t hash64(uint64_t x) { // core/rng.c's kiln__hash64
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// kiln__uniform01(seed, counter) with hs = kiln__hash64(seed) (hashed once on the host).
__device__ double uniform01(uint64_t hs, uint64_t counter) {
    uint64_t h = hash64(hs ^ (counter * 0xd1b54a32d192ed03ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

// P[j] = (float)(kiln__normal(seed, j) * inv). CUDA's double log and cos
// are within 1 and 2 ulp of the correctly rounded results the CPU's libm
// gives, so P matches the CPU's f32 bits but where the double lies that
// close to a rounding boundary of float.
__global__ void apollo_proj_k(float *P, int64_t np, uint64_t hs, double inv) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < np; j += (int64_t)gridDim.x * blockDim.x) {
        double u1 = uniform01(hs, 2 * (uint64_t)j), u2 = uniform01(hs, 2 * (uint64_t)j + 1);
        if (u1 < 1e-300) u1 = 1e-300;
        double x = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        P[j] = (float)(x * inv);
    }
}

// One block per channel c (row c of R when right, else column c): the
// moments of R's rank elements in place, and S[c] = |Rt_c|^2,
// S[nch + c] = |R_c|^2, S[2 nch + c] = |G_c|^2 (G's row or column), in double.
__global__ void apollo_moments_k(const float *G, const float *R, float *em, float *ev, const float *h, double *S,
                                 int64_t m, int64_t n, int64_t rank, int right) {
    __shared__ double sh[THREADS];
    const float b1 = h[1], b2 = h[2], eps = h[3];
    const float one_b1 = (float)(1.0 - (double)b1), one_b2 = (float)(1.0 - (double)b2);
    const int64_t nch = right ? m : n, len = right ? n : m;
    for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
        double a = 0, b = 0, gs = 0;
        for (int64_t r = threadIdx.x; r < rank; r += THREADS) {
            int64_t k = right ? c * rank + r : r * n + c;
            float g = R[k], mi = em[k] * b1 + g * one_b1, vi = ev[k] * b2 + one_b2 * g * g;
            em[k] = mi;
            ev[k] = vi;
            float rt = mi / (sqrtf(vi) + eps);
            a += (double)rt * rt;
            b += (double)g * g;
        }
        for (int64_t j = threadIdx.x; j < len; j += THREADS) {
            double g = G[right ? c * n + j : j * n + c];
            gs += g * g;
        }
        a = block_sum(a, sh);
        b = block_sum(b, sh);
        gs = block_sum(gs, sh);
        if (threadIdx.x == 0) {
            S[c] = a;
            S[nch + c] = b;
            S[2 * nch + c] = gs;
        }
    }
}

// One block: the scaling factor of each channel (sqrt(scale) folded in,
// one for all with mini), |u| = sqrt(sum_c s_c^2 |G_c|^2), the limiter on
// prev_norm (f64, updated), F[c] = -step_size s_c / limit and
// F[nch] = 1 - lr wd (the CPU's order of operations).
__global__ void apollo_norm_k(const double *S, int64_t nch, const float *h, double *prev, float *F, double sq,
                              int mini) {
    const double step = (double)h[5] * 65536.0 + (double)h[6]; // the step number (optim/optim.c)
    __shared__ double sh[THREADS];
    __shared__ double s_mini, s_step, s_limit;
    const int l = threadIdx.x;
    if (mini) {
        double a = 0, b = 0;
        for (int64_t c = l; c < nch; c += THREADS) a += S[c], b += S[nch + c];
        a = block_sum(a, sh);
        b = block_sum(b, sh);
        if (l == 0) s_mini = sq * sqrt(a) / (sqrt(b) + 1e-8);
        __syncthreads();
    }
    double u2 = 0;
    for (int64_t c = l; c < nch; c += THREADS) {
        double s = mini ? s_mini : sq * sqrt(S[c]) / (sqrt(S[nch + c]) + 1e-8);
        u2 += s * s * S[2 * nch + c];
    }
    u2 = block_sum(u2, sh);
    if (l == 0) {
        double norm = sqrt(u2), limit = 1.0;
        if (step > 1) {
            double f = norm / (prev[0] + 1e-8);
            limit = (f > 1.01 ? f : 1.01) / 1.01;
        }
        prev[0] = norm / limit;
        double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4];
        s_step = lr * sqrt(1.0 - pow(b2, step)) / (1.0 - pow(b1, step));
        s_limit = limit;
        F[nch] = (float)(1.0 - lr * wd);
    }
    __syncthreads();
    for (int64_t c = l; c < nch; c += THREADS) {
        double s = mini ? s_mini : sq * sqrt(S[c]) / (sqrt(S[nch + c]) + 1e-8);
        F[c] = (float)(-s_step * s / s_limit);
    }
}

// p = p * F[nch] + F[channel] * g over p [m, n] (channel: the row when right, else the column).
__global__ void apollo_update_k(float *p, const float *G, const float *F, int64_t m, int64_t n, int right) {
    const int64_t nch = right ? m : n;
    const float decay = F[nch];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / n, j = e - i * n;
        p[e] = p[e] * decay + F[right ? i : j] * G[e];
    }
}

unsigned channel_blocks(int64_t nch) { return (unsigned)(nch < 1 ? 1 : nch > 65535 * 8 ? 65535 * 8 : nch); }

} // namespace

extern "C" {

int kiln__cu_galore_scalars(void *stream, const float *h, double scale, int bnb, float *sc) {
    galore_scalars_k<<<1, 32, 0, (cudaStream_t)stream>>>(h, scale, bnb, sc);
    return (int)cudaGetLastError();
}

int kiln__cu_lowrank_adam(void *stream, float *r, float *m, float *v, int64_t n, const float *h, const float *sc) {
    lowrank_adam_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(r, m, v, n, h, sc);
    return (int)cudaGetLastError();
}

int kiln__cu_lowrank_adam8(void *stream, float *r, void *mq, void *vq, float *ma, float *va, const float *maps,
                           int64_t n, const float *h, const float *sc) {
    lowrank_adam8_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(r, (unsigned char *)mq, (unsigned char *)vq,
                                                                         ma, va, maps, n, h, sc);
    return (int)cudaGetLastError();
}

int kiln__cu_galore_decay(void *stream, float *w, int64_t n, const float *h) {
    galore_decay_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(w, n, h);
    return (int)cudaGetLastError();
}

int kiln__cu_apollo_projector(void *stream, float *P, int64_t np, uint64_t hashed_seed, double inv) {
    apollo_proj_k<<<blocks_for(np), THREADS, 0, (cudaStream_t)stream>>>(P, np, hashed_seed, inv);
    return (int)cudaGetLastError();
}

int kiln__cu_apollo_moments(void *stream, const float *G, const float *R, float *em, float *ev, const float *h,
                            double *S, int64_t m, int64_t n, int64_t rank, int right) {
    apollo_moments_k<<<channel_blocks(right ? m : n), THREADS, 0, (cudaStream_t)stream>>>(G, R, em, ev, h, S, m, n,
                                                                                          rank, right);
    return (int)cudaGetLastError();
}

int kiln__cu_apollo_norm(void *stream, const double *S, int64_t nch, const float *h, double *prev, float *F,
                         double sqrt_scale, int mini) {
    apollo_norm_k<<<1, THREADS, 0, (cudaStream_t)stream>>>(S, nch, h, prev, F, sqrt_scale, mini);
    return (int)cudaGetLastError();
}

int kiln__cu_apollo_update(void *stream, float *p, const float *G, const float *F, int64_t m, int64_t n, int right) {
    apollo_update_k<<<blocks_for(m * n), THREADS, 0, (cudaStream_t)stream>>>(p, G, F, m, n, right);
    return (int)cudaGetLastError();
}

} // extern "C"
