// k_attention.cu — scaled dot-product attention on the CUDA backend, f32,
// forward and backward, in the CPU's semantics (backends/cpu/
// nn_attention_flash.h): q [B, Hq, T, D], k [B, Hk, S, D], v [B, Hk, S, Dv]
// with q head h reading k/v head h / (Hq / Hk); query i sees keys
// j <= i + S - T when causal; the forward writes O [B, Hq, T, Dv] then
// L [B, Hq, T] (log-sum-exp of the scaled scores, +inf for a row that sees
// nothing, whose O is 0). One block per query row (forward, dq) or key row
// (dk, dv), THREADS keys or queries at a time in shared memory, the
// softmax online as the CPU's; sums in double. Head sizes D, Dv <= THREADS.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"

struct geom {
    int64_t b, hq, hk, t, s, d, dv;
    bool causal;
    double scale;
};

unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows > 65535 * 8 ? 65535 * 8 : rows); }

// Keys query i sees.
__device__ int64_t keys_seen(const geom &g, int64_t i) {
    if (!g.causal) return g.s;
    int64_t nv = i + g.s - g.t + 1;
    return nv < 0 ? 0 : nv > g.s ? g.s : nv;
}

__device__ double dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t e = 0; e < n; e++) s += (double)a[e] * b[e];
    return s;
}

__global__ void attn_fwd_k(geom g, const float *q, const float *k, const float *v, float *o, float *lse) {
    __shared__ double sh[THREADS], p[THREADS];
    int64_t rows = g.b * g.hq * g.t, group = g.hq / g.hk;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t i = row % g.t, bh = row / g.t, bb = bh / g.hq, h = bh % g.hq;
        const float *qi = q + row * g.d;
        const float *kh = k + (bb * g.hk + h / group) * g.s * g.d, *vh = v + (bb * g.hk + h / group) * g.s * g.dv;
        int64_t nv = keys_seen(g, i);
        double m = -INFINITY, l = 0, acc = 0;
        for (int64_t j0 = 0; j0 < nv; j0 += THREADS) {
            int64_t j = j0 + threadIdx.x;
            double sc = j < nv ? dot(qi, kh + j * g.d, g.d) * g.scale : -INFINITY;
            double mnew = fmax(m, block_max(sc, sh));
            double pj = j < nv ? exp(sc - mnew) : 0.0;
            p[threadIdx.x] = pj;
            double sum = block_sum(pj, sh); // its barriers publish p
            double corr = m == -INFINITY ? 0.0 : exp(m - mnew);
            l = l * corr + sum;
            acc *= corr;
            if ((int64_t)threadIdx.x < g.dv) {
                int64_t n = nv - j0 < THREADS ? nv - j0 : THREADS;
                for (int64_t c = 0; c < n; c++) acc += p[c] * vh[(j0 + c) * g.dv + threadIdx.x];
            }
            m = mnew;
            __syncthreads(); // p is rewritten next round
        }
        if ((int64_t)threadIdx.x < g.dv) o[row * g.dv + threadIdx.x] = l > 0 ? (float)(acc / l) : 0.0f;
        if (threadIdx.x == 0) lse[row] = l > 0 ? (float)(m + log(l)) : INFINITY;
    }
}

// di[row] = sum_e dO * O
__global__ void attn_di_k(int64_t rows, int64_t dv, const float *o, const float *dout, double *di) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x)
        di[r] = dot(o + r * dv, dout + r * dv, dv);
}

// dq_i = scale sum_j P_ij (dP_ij - D_i) k_j, P_ij = exp(s_ij - L_i), dP_ij = dO_i . v_j
__global__ void attn_dq_k(geom g, const float *q, const float *k, const float *v, const float *lse, const float *dout,
                          const double *di, float *dq) {
    __shared__ double ds[THREADS];
    int64_t rows = g.b * g.hq * g.t, group = g.hq / g.hk;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t i = row % g.t, bh = row / g.t, bb = bh / g.hq, h = bh % g.hq;
        const float *qi = q + row * g.d, *doi = dout + row * g.dv;
        const float *kh = k + (bb * g.hk + h / group) * g.s * g.d, *vh = v + (bb * g.hk + h / group) * g.s * g.dv;
        int64_t nv = lse[row] == INFINITY ? 0 : keys_seen(g, i);
        double acc = 0;
        for (int64_t j0 = 0; j0 < nv; j0 += THREADS) {
            int64_t j = j0 + threadIdx.x;
            double dsj = 0;
            if (j < nv) {
                double pj = exp(dot(qi, kh + j * g.d, g.d) * g.scale - (double)lse[row]);
                dsj = pj * (dot(doi, vh + j * g.dv, g.dv) - di[row]);
            }
            ds[threadIdx.x] = dsj;
            __syncthreads();
            if ((int64_t)threadIdx.x < g.d) {
                int64_t n = nv - j0 < THREADS ? nv - j0 : THREADS;
                for (int64_t c = 0; c < n; c++) acc += ds[c] * kh[(j0 + c) * g.d + threadIdx.x];
            }
            __syncthreads();
        }
        if ((int64_t)threadIdx.x < g.d) dq[row * g.d + threadIdx.x] = (float)(acc * g.scale);
    }
}

// For key j of k/v head kh: dv_j = sum P_ij dO_i, dk_j = scale sum dS_ij q_i over
// the group's q heads and the queries that see j.
__global__ void attn_dkv_k(geom g, const float *q, const float *k, const float *v, const float *lse, const float *dout,
                           const double *di, float *dk, float *dvo) {
    __shared__ double ps[THREADS], dss[THREADS];
    __shared__ int64_t qrow[THREADS];
    int64_t rows = g.b * g.hk * g.s, group = g.hq / g.hk, nq = group * g.t;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t j = row % g.s, bkh = row / g.s, bb = bkh / g.hk, kh = bkh % g.hk;
        const float *kj = k + row * g.d, *vj = v + row * g.dv;
        double ak = 0, av = 0;
        for (int64_t c0 = 0; c0 < nq; c0 += THREADS) {
            int64_t c = c0 + threadIdx.x;
            double pc = 0, dsc = 0;
            int64_t r = -1;
            if (c < nq) {
                int64_t h = kh * group + c / g.t, i = c % g.t;
                r = (bb * g.hq + h) * g.t + i;
                if (lse[r] != INFINITY && j < keys_seen(g, i)) {
                    pc = exp(dot(q + r * g.d, kj, g.d) * g.scale - (double)lse[r]);
                    dsc = pc * (dot(dout + r * g.dv, vj, g.dv) - di[r]);
                }
            }
            ps[threadIdx.x] = pc, dss[threadIdx.x] = dsc, qrow[threadIdx.x] = r;
            __syncthreads();
            int64_t n = nq - c0 < THREADS ? nq - c0 : THREADS;
            for (int64_t e = 0; e < n; e++) {
                if (ps[e] == 0 && dss[e] == 0) continue;
                if ((int64_t)threadIdx.x < g.dv) av += ps[e] * dout[qrow[e] * g.dv + threadIdx.x];
                if ((int64_t)threadIdx.x < g.d) ak += dss[e] * q[qrow[e] * g.d + threadIdx.x];
            }
            __syncthreads();
        }
        if ((int64_t)threadIdx.x < g.dv) dvo[row * g.dv + threadIdx.x] = (float)av;
        if ((int64_t)threadIdx.x < g.d) dk[row * g.d + threadIdx.x] = (float)(ak * g.scale);
    }
}

geom make_geom(const int64_t *shape, int causal, double scale) {
    geom g;
    g.b = shape[0], g.hq = shape[1], g.hk = shape[2], g.t = shape[3], g.s = shape[4], g.d = shape[5], g.dv = shape[6];
    g.causal = causal != 0;
    g.scale = scale;
    return g;
}

} // namespace

extern "C" {

int kiln__cu_attention(void *stream, const int64_t *shape, int causal, double scale, const float *q, const float *k,
                       const float *v, float *o, float *lse) {
    geom g = make_geom(shape, causal, scale);
    attn_fwd_k<<<row_blocks(g.b * g.hq * g.t), THREADS, 0, (cudaStream_t)stream>>>(g, q, k, v, o, lse);
    return (int)cudaGetLastError();
}

int kiln__cu_attention_grad(void *stream, const int64_t *shape, int causal, double scale, const float *q,
                            const float *k, const float *v, const float *o, const float *lse, const float *dout,
                            float *dq, float *dk, float *dv, double *di) {
    geom g = make_geom(shape, causal, scale);
    int64_t rows = g.b * g.hq * g.t;
    attn_di_k<<<blocks_for(rows), THREADS, 0, (cudaStream_t)stream>>>(rows, g.dv, o, dout, di);
    int e = (int)cudaGetLastError();
    if (e) return e;
    attn_dq_k<<<row_blocks(rows), THREADS, 0, (cudaStream_t)stream>>>(g, q, k, v, lse, dout, di, dq);
    if ((e = (int)cudaGetLastError())) return e;
    attn_dkv_k<<<row_blocks(g.b * g.hk * g.s), THREADS, 0, (cudaStream_t)stream>>>(g, q, k, v, lse, dout, di, dk, dv);
    return (int)cudaGetLastError();
}

} // extern "C"
