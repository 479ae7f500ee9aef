// k_attention.cu — scaled dot-product attention on the CUDA backend, f32
// or f64 (a template on T, picked by the launcher's dt), forward and backward, in the CPU's semantics (backends/cpu/
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

template <typename T> __device__ double dot(const T *a, const T *b, int64_t n) {
    double s = 0;
    for (int64_t e = 0; e < n; e++) s += (double)a[e] * b[e];
    return s;
}

// Query qi's softmax over keys kh and values vh (nv rows of d, dv), online
// as the CPU's: the running max m and sum l, and this thread's element of
// the unnormalized output (threads < dv). sh, p: the block's shared scratch.
template <typename T>
__device__ void online_softmax(const T *qi, const T *kh, const T *vh, int64_t nv, int64_t d, int64_t dv, double scale,
                               double softcap, double *sh, double *p, double &m, double &l, double &acc) {
    m = -INFINITY, l = 0, acc = 0;
    for (int64_t j0 = 0; j0 < nv; j0 += THREADS) {
        int64_t j = j0 + threadIdx.x;
        double sc = j < nv ? dot(qi, kh + j * d, d) * scale : -INFINITY;
        if (softcap > 0 && j < nv) sc = tanh(sc / softcap) * softcap;
        double mnew = fmax(m, block_max(sc, sh));
        double pj = j < nv ? exp(sc - mnew) : 0.0;
        p[threadIdx.x] = pj;
        double sum = block_sum(pj, sh); // its barriers publish p
        double corr = m == -INFINITY ? 0.0 : exp(m - mnew);
        l = l * corr + sum;
        acc *= corr;
        if ((int64_t)threadIdx.x < dv) {
            int64_t n = nv - j0 < THREADS ? nv - j0 : THREADS;
            for (int64_t c = 0; c < n; c++) acc += p[c] * vh[(j0 + c) * dv + threadIdx.x];
        }
        m = mnew;
        __syncthreads(); // p is rewritten next round
    }
}

template <typename T>
__global__ void attn_fwd_k(geom g, const void *qv, const void *kv, const void *vv, void *ov, void *lsev) {
    __shared__ double sh[THREADS], p[THREADS];
    const T *q = (const T *)qv, *k = (const T *)kv, *v = (const T *)vv;
    T *o = (T *)ov, *lse = (T *)lsev;
    int64_t rows = g.b * g.hq * g.t, group = g.hq / g.hk;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t i = row % g.t, bh = row / g.t, bb = bh / g.hq, h = bh % g.hq;
        const T *qi = q + row * g.d;
        const T *kh = k + (bb * g.hk + h / group) * g.s * g.d, *vh = v + (bb * g.hk + h / group) * g.s * g.dv;
        int64_t nv = keys_seen(g, i);
        double m, l, acc;
        online_softmax(qi, kh, vh, nv, g.d, g.dv, g.scale, 0.0, sh, p, m, l, acc);
        if ((int64_t)threadIdx.x < g.dv) o[row * g.dv + threadIdx.x] = l > 0 ? (T)(acc / l) : (T)0;
        if (threadIdx.x == 0) lse[row] = l > 0 ? (T)(m + log(l)) : (T)INFINITY;
    }
}

// di[row] = sum_e dO * O
template <typename T>
__global__ void attn_di_k(int64_t rows, int64_t dv, const void *ov, const void *doutv, double *di) {
    const T *o = (const T *)ov, *dout = (const T *)doutv;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x)
        di[r] = dot(o + r * dv, dout + r * dv, dv);
}

// dq_i = scale sum_j P_ij (dP_ij - D_i) k_j, P_ij = exp(s_ij - L_i), dP_ij = dO_i . v_j
template <typename T>
__global__ void attn_dq_k(geom g, const void *qv, const void *kv, const void *vv, const void *lsev, const void *doutv,
                          const double *di, void *dqv) {
    __shared__ double ds[THREADS];
    const T *q = (const T *)qv, *k = (const T *)kv, *v = (const T *)vv, *lse = (const T *)lsev, *dout = (const T *)doutv;
    T *dq = (T *)dqv;
    int64_t rows = g.b * g.hq * g.t, group = g.hq / g.hk;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t i = row % g.t, bh = row / g.t, bb = bh / g.hq, h = bh % g.hq;
        const T *qi = q + row * g.d, *doi = dout + row * g.dv;
        const T *kh = k + (bb * g.hk + h / group) * g.s * g.d, *vh = v + (bb * g.hk + h / group) * g.s * g.dv;
        int64_t nv = lse[row] == (T)INFINITY ? 0 : keys_seen(g, i);
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
        if ((int64_t)threadIdx.x < g.d) dq[row * g.d + threadIdx.x] = (T)(acc * g.scale);
    }
}

// For key j of k/v head kh: dv_j = sum P_ij dO_i, dk_j = scale sum dS_ij q_i over
// the group's q heads and the queries that see j.
template <typename T>
__global__ void attn_dkv_k(geom g, const void *qv, const void *kv, const void *vv, const void *lsev, const void *doutv,
                           const double *di, void *dkv, void *dvov) {
    const T *q = (const T *)qv, *k = (const T *)kv, *v = (const T *)vv, *lse = (const T *)lsev, *dout = (const T *)doutv;
    T *dk = (T *)dkv, *dvo = (T *)dvov;
    __shared__ double ps[THREADS], dss[THREADS];
    __shared__ int64_t qrow[THREADS];
    int64_t rows = g.b * g.hk * g.s, group = g.hq / g.hk, nq = group * g.t;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t j = row % g.s, bkh = row / g.s, bb = bkh / g.hk, kh = bkh % g.hk;
        const T *kj = k + row * g.d, *vj = v + row * g.dv;
        double ak = 0, av = 0;
        for (int64_t c0 = 0; c0 < nq; c0 += THREADS) {
            int64_t c = c0 + threadIdx.x;
            double pc = 0, dsc = 0;
            int64_t r = -1;
            if (c < nq) {
                int64_t h = kh * group + c / g.t, i = c % g.t;
                r = (bb * g.hq + h) * g.t + i;
                if (lse[r] != (T)INFINITY && j < keys_seen(g, i)) {
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
        if ((int64_t)threadIdx.x < g.dv) dvo[row * g.dv + threadIdx.x] = (T)av;
        if ((int64_t)threadIdx.x < g.d) dk[row * g.d + threadIdx.x] = (T)(ak * g.scale);
    }
}

// kiln_attention_cached (backends/cpu/nn_attention.c): q [N, Hq, D], the
// rows' new k [N, Hkv, D] and v [N, Hkv, Dv], caches [B, Hkv, S, D/Dv];
// seq and pos are read here, from device memory, so a graph replayed for
// the next token reads the next position (core/graph_replay.c).
struct cgeom {
    int64_t n, hq, hk, b, s, d, dv, window;
    double scale, softcap;
};

// Row i's cache slot, or -1 when seq[i], pos[i] lie outside the caches.
__device__ int64_t cache_slot(const cgeom &g, const int32_t *seq, const int32_t *pos, int64_t i) {
    int64_t sq = seq[i], p = pos[i];
    return sq < 0 || sq >= g.b || p < 0 || p >= g.s ? -1 : sq * g.hk * g.s + p;
}

// Every row's key and value into its slot, a thread per element: one
// launch before the reads, since rows of a sequence read each other's keys.
// A row outside the caches writes nothing and is noted in err (flag, row,
// seq, pos, B, S; the first noted stays) for the host's error after the
// compute (kiln__cu_rows_error).
template <typename T>
__global__ void attn_cache_write_k(cgeom g, const int32_t *seq, const int32_t *pos, const void *kv, const void *vv,
                                   void *kcv, void *vcv, int32_t *err) {
    const T *k = (const T *)kv, *v = (const T *)vv;
    T *kc = (T *)kcv, *vc = (T *)vcv;
    int64_t w = g.d + g.dv, n = g.n * g.hk * w;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
        int64_t e = x % w, rh = x / w, i = rh / g.hk, h = rh % g.hk, at = cache_slot(g, seq, pos, i);
        if (at < 0) { // writes nothing; the attention gives NaN for the row
            if (x == rh * w && atomicCAS(err, 0, 1) == 0)
                err[1] = (int32_t)i, err[2] = seq[i], err[3] = pos[i], err[4] = (int32_t)g.b, err[5] = (int32_t)g.s;
            continue;
        }
        at += h * g.s;
        if (e < g.d) kc[at * g.d + e] = k[rh * g.d + e];
        else vc[at * g.dv + e - g.d] = v[rh * g.dv + e - g.d];
    }
}

// One block per (row, query head) over keys first .. pos[i] of its
// sequence (the last window of them when window > 0), by online_softmax:
// head sizes over k_attention_cached.cu's tiles, decoding and prompt rows alike.
template <typename T>
__global__ void attn_cached_k(cgeom g, const int32_t *seq, const int32_t *pos, const void *qv, const void *kcv,
                              const void *vcv, void *ov) {
    __shared__ double sh[THREADS], p[THREADS];
    const T *q = (const T *)qv, *kc = (const T *)kcv, *vc = (const T *)vcv;
    T *o = (T *)ov;
    int64_t rows = g.n * g.hq, group = g.hq / g.hk;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t i = row / g.hq, h = row % g.hq, at = cache_slot(g, seq, pos, i);
        if (at < 0) { // uniform over the block
            if ((int64_t)threadIdx.x < g.dv) o[row * g.dv + threadIdx.x] = (T)NAN;
            continue;
        }
        int64_t last = pos[i] + 1, first = g.window > 0 && last > g.window ? last - g.window : 0;
        int64_t base = (at - pos[i]) + (h / group) * g.s + first; // key `first` of this kv head
        const T *qi = q + row * g.d, *kh = kc + base * g.d, *vh = vc + base * g.dv;
        double m, l, acc;
        online_softmax(qi, kh, vh, last - first, g.d, g.dv, g.scale, g.softcap, sh, p, m, l, acc);
        if ((int64_t)threadIdx.x < g.dv) o[row * g.dv + threadIdx.x] = (T)(acc / l);
    }
}

geom make_geom(const int64_t *shape, int causal, double scale) {
    geom g;
    g.b = shape[0], g.hq = shape[1], g.hk = shape[2], g.t = shape[3], g.s = shape[4], g.d = shape[5], g.dv = shape[6];
    g.causal = causal != 0;
    g.scale = scale;
    return g;
}

cgeom make_cgeom(const int64_t *shape, int64_t window, double scale, double softcap) {
    cgeom g;
    g.n = shape[0], g.hq = shape[1], g.hk = shape[2], g.b = shape[3], g.s = shape[4], g.d = shape[5], g.dv = shape[6];
    g.window = window, g.scale = scale, g.softcap = softcap;
    return g;
}

} // namespace

// A launch of KERNEL<float> or KERNEL<double> as dt says.
#define LAUNCH(dt, KERNEL, grid, stream, ...)                                                          \
    do {                                                                                               \
        if ((dt) == CU_F64) KERNEL<double><<<(grid), THREADS, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__); \
        else KERNEL<float><<<(grid), THREADS, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__);                 \
    } while (0)

extern "C" {

int kiln__cu_attention(void *stream, int dt, const int64_t *shape, int causal, double scale, const void *q, const void *k,
                       const void *v, void *o, void *lse) {
    geom g = make_geom(shape, causal, scale);
    LAUNCH(dt, attn_fwd_k, row_blocks(g.b * g.hq * g.t), stream, g, q, k, v, o, lse);
    return (int)cudaGetLastError();
}

int kiln__cu_attention_grad(void *stream, int dt, const int64_t *shape, int causal, double scale, const void *q,
                            const void *k, const void *v, const void *o, const void *lse, const void *dout, void *dq,
                            void *dk, void *dv, double *di) {
    geom g = make_geom(shape, causal, scale);
    int64_t rows = g.b * g.hq * g.t;
    LAUNCH(dt, attn_di_k, blocks_for(rows), stream, rows, g.dv, o, dout, di);
    int e = (int)cudaGetLastError();
    if (e) return e;
    LAUNCH(dt, attn_dq_k, row_blocks(rows), stream, g, q, k, v, lse, dout, di, dq);
    if ((e = (int)cudaGetLastError())) return e;
    LAUNCH(dt, attn_dkv_k, row_blocks(g.b * g.hk * g.s), stream, g, q, k, v, lse, dout, di, dk, dv);
    return (int)cudaGetLastError();
}

int kiln__cu_attention_cache_write(void *stream, int dt, const int64_t *shape, const int32_t *seq,
                                   const int32_t *pos, const void *k, const void *v, void *k_cache, void *v_cache,
                                   int32_t *err) {
    cgeom g = make_cgeom(shape, 0, 0, 0);
    LAUNCH(dt, attn_cache_write_k, blocks_for(g.n * g.hk * (g.d + g.dv)), stream, g, seq, pos, k, v, k_cache, v_cache, err);
    return (int)cudaGetLastError();
}

int kiln__cu_attention_cached(void *stream, int dt, const int64_t *shape, int64_t window, double scale,
                              double softcap, const int32_t *seq, const int32_t *pos, const void *q,
                              const void *k_cache, const void *v_cache, void *o) {
    cgeom g = make_cgeom(shape, window, scale, softcap);
    LAUNCH(dt, attn_cached_k, row_blocks(g.n * g.hq), stream, g, seq, pos, q, k_cache, v_cache, o);
    return (int)cudaGetLastError();
}

} // extern "C"
