// k_attention_flash.cu — f32 attention forward and backward in the
// FlashAttention-2 style, head sizes D, Dv <= 128 (cu_attention.c sends
// the rest, and f64, to k_attention.cu's row kernels). Semantics as
// k_attention.cu: q [B, Hq, T, D], k [B, Hk, S, D], v [B, Hk, S, Dv], query
// head h reads kv head h / (Hq / Hk); query i sees keys j < kend(i) =
// i + S - T + 1 when causal; O [B, Hq, T, Dv] then L [B, Hq, T] (+inf, O = 0
// for a row that sees no key).
//
// The query rows of one kv head's group of query heads are contiguous
// (rows (h, i) of heads h = kh * group ...), so a tile of BR of them takes
// all the group's heads together: each K/V tile is read once per group.
// A block of NT threads takes a tile of BR query rows (forward, dq) or BC
// keys (dk, dv), with the other side staged BC (BR) rows at a time in
// shared memory, scores only BR x BC at once, never T x S:
//   forward: online softmax (running max m, sum l per row, the output
//            rescaled when m grows), L = m + log l saved for the backward;
//            causal tiles above the diagonal are never visited;
//   dk, dv:  per key tile, over the group's query tiles that see it,
//            P = exp(s scale - L) recomputed, dS = P (dO . v - delta),
//            dv += P^T dO, dk += dS^T q scale;
//   dq:      per query tile over its key tiles, dq += dS k scale;
// delta = rowsum(dO * O) is computed first. dq and dk/dv are two passes,
// not one pass with atomics: each output element has one writer, so no
// zero-fill, no float atomics, and the same sums every run; the price is
// computing P and dO v^T twice.
// Decoding (few query rows, T = 1) splits the keys over more blocks
// (nsplit), each writing its rows' normalized partial O and logsumexp to
// scratch, merged after by their logsumexps.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"
#include "k_flash.cuh"
#include "k_flash_train.cuh"

// Forward: a tile of BR rows of kv head bkh's group, keys of split `sp`
// (chunk keys each); writes O and L of the rows at o + sp * osplit,
// lse + sp * lsplit (partials to merge when nsplit > 1).
template <typename C>
__global__ void flash_fwd_k(fgeom g, int nsplit, int64_t chunk, const float *q, const float *k, const float *v,
                            float *o, float *lse, int64_t osplit, int64_t lsplit) {
    const int HD = C::HD, BR = C::BR, BC = C::BC;
    static_assert(NT % BC == 0 && NT % HD == 0, "a thread's scores share a key, its outputs a column");
    __shared__ float qs[BR][HD + 1], ks[BC][HD + 1], vs[BC][HD], ps[BR][BC + 1];
    __shared__ float m_s[BR], l_s[BR], c_s[BR];
    const int SE = BR * BC / NT, OE = BR * HD / NT; // score and output entries per thread
    const int tid = threadIdx.x, sc = tid % BC;     // a thread's scores all share key column sc
    int64_t qtiles = (g.nq + BR - 1) / BR, tiles = g.b * g.hk * qtiles * nsplit;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t sp = tile % nsplit, qt = tile / nsplit, bkh = qt / qtiles, x0 = qt % qtiles * BR;
        int nr = (int)(g.nq - x0 < BR ? g.nq - x0 : BR);
        int64_t row0 = bkh * g.nq + x0, jend = tile_kend(g, x0, nr), j1 = (sp + 1) * chunk;
        jend = jend < j1 ? jend : j1;
        const float *kh = k + bkh * g.s * g.d, *vh = v + bkh * g.s * g.dv;
        stage<BR, HD, 1>(qs, q + row0 * g.d, nr, g.d);
        if (tid < BR) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
        float acc[OE];
#pragma unroll
        for (int e = 0; e < OE; e++) acc[e] = 0.0f;
        __syncthreads();
        for (int64_t j0 = sp * chunk; j0 < jend; j0 += BC) {
            int nc = (int)(g.s - j0 < BC ? g.s - j0 : BC);
            stage<BC, HD, 1>(ks, kh + j0 * g.d, nc, g.d);
            stage<BC, HD, 0>(vs, vh + j0 * g.dv, nc, g.dv);
            __syncthreads();
            float s[SE];
            dots<SE, BC, HD + 1>(s, qs, ks[sc], g.d);
#pragma unroll
            for (int m = 0; m < SE; m++) { // scaled scores, -inf where masked
                int r = tid / BC + m * (NT / BC);
                bool vis = r < nr && j0 + sc < kend(g, (x0 + r) % g.t);
                ps[r][sc] = vis ? s[m] * g.scale : -INFINITY;
            }
            softmax_tile<BR, BC, HD>(ps, m_s, l_s, c_s, vs, nc, acc);
        }
        float *ot = o + sp * osplit + row0 * g.dv, *lt = lse + sp * lsplit + row0;
#pragma unroll
        for (int e = 0; e < OE; e++) {
            int r = tid / HD + e * (NT / HD), col = tid % HD;
            if (r < nr && col < g.dv) ot[(int64_t)r * g.dv + col] = l_s[r] > 0.0f ? acc[e] / l_s[r] : 0.0f;
        }
        if (tid < nr) lt[tid] = l_s[tid] > 0.0f ? m_s[tid] + logf(l_s[tid]) : INFINITY;
        __syncthreads(); // m_s, l_s are reset next tile
    }
}

// The backward's query side of a tile: q, dO, L and delta of rows
// [row0, row0 + nr) (L = +inf past nr: no probability).
template <int BR, int HD>
__device__ void stage_rows(const fgeom &g, int64_t row0, int nr, const float *q, const float *dout, const float *lse,
                           const double *di, float (*qs)[HD + 1], float (*dos)[HD + 1], float *l_s, float *d_s) {
    stage<BR, HD, 1>(qs, q + row0 * g.d, nr, g.d);
    stage<BR, HD, 1>(dos, dout + row0 * g.dv, nr, g.dv);
    int r = threadIdx.x;
    if (r < BR) l_s[r] = r < nr ? lse[row0 + r] : INFINITY, d_s[r] = r < nr ? (float)di[row0 + r] : 0.0f;
}

// P (into ps unless NULL) and dS = P (dO . v - delta) of the backward's
// tile: rows x0 + r of a kv head's group (staged by stage_rows), keys
// j0 + c, c < nc (staged in ks, vs).
template <int BR, int BC, int HD>
__device__ void grad_scores(const fgeom &g, int64_t x0, int64_t j0, int nc, const float (*qs)[HD + 1],
                            const float (*dos)[HD + 1], const float (*ks)[HD + 1], const float (*vs)[HD + 1],
                            const float *l_s, const float *d_s, float (*ps)[BC + 1], float (*dss)[BC + 1]) {
    const int SE = BR * BC / NT, sc = threadIdx.x % BC;
    float s[SE], dp[SE];
    dots<SE, BC, HD + 1>(s, qs, ks[sc], g.d);
    dots<SE, BC, HD + 1>(dp, dos, vs[sc], g.dv);
#pragma unroll
    for (int m = 0; m < SE; m++) {
        int r = threadIdx.x / BC + m * (NT / BC);
        bool vis = sc < nc && l_s[r] != INFINITY && j0 + sc < kend(g, (x0 + r) % g.t);
        float p = vis ? expf(s[m] * g.scale - l_s[r]) : 0.0f;
        if (ps) ps[r][sc] = p;
        dss[r][sc] = vis ? p * (dp[m] - d_s[r]) : 0.0f;
    }
}

// dk, dv of a tile of BC keys of kv head bkh, over every query of its
// group's heads that sees one of them.
template <typename C>
__global__ void flash_dkv_k(fgeom g, const float *q, const float *k, const float *v, const float *lse,
                            const float *dout, const double *di, float *dk, float *dvo) {
    const int HD = C::HD, BR = C::BR, BC = C::BC;
    static_assert(NT % BC == 0 && NT % HD == 0, "a thread's scores share a key, its outputs a column");
    __shared__ float ks[BC][HD + 1], vs[BC][HD + 1], qs[BR][HD + 1], dos[BR][HD + 1];
    __shared__ float ps[BR][BC + 1], dss[BR][BC + 1], l_s[BR], d_s[BR];
    const int OE = BC * HD / NT, tid = threadIdx.x;
    int64_t ktiles = (g.s + BC - 1) / BC, tiles = g.b * g.hk * ktiles;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t bkh = tile / ktiles, j0 = tile % ktiles * BC;
        int nc = (int)(g.s - j0 < BC ? g.s - j0 : BC);
        stage<BC, HD, 1>(ks, k + (bkh * g.s + j0) * g.d, nc, g.d);
        stage<BC, HD, 1>(vs, v + (bkh * g.s + j0) * g.dv, nc, g.dv);
        float ak[OE], av[OE];
#pragma unroll
        for (int e = 0; e < OE; e++) ak[e] = av[e] = 0.0f;
        // query i sees key j iff i >= j - (S - T): none before i_first
        int64_t ifirst = g.causal ? j0 - (g.s - g.t) : 0;
        ifirst = ifirst < 0 ? 0 : ifirst;
        for (int64_t hh = 0; hh < g.group; hh++)
            for (int64_t i0 = ifirst; i0 < g.t; i0 += BR) {
                int nr = (int)(g.t - i0 < BR ? g.t - i0 : BR);
                int64_t row0 = bkh * g.nq + hh * g.t + i0;
                __syncthreads(); // the previous tile's reads are done
                stage_rows<BR, HD>(g, row0, nr, q, dout, lse, di, qs, dos, l_s, d_s);
                __syncthreads();
                grad_scores<BR, BC, HD>(g, hh * g.t + i0, j0, nc, qs, dos, ks, vs, l_s, d_s, ps, dss);
                __syncthreads();
                for (int r = 0; r < nr; r++) { // entry e: key tid / HD + e * (NT / HD), column tid % HD
                    float x = qs[r][tid % HD], y = dos[r][tid % HD];
#pragma unroll
                    for (int e = 0; e < OE; e++) {
                        int c = tid / HD + e * (NT / HD);
                        ak[e] += dss[r][c] * x;
                        av[e] += ps[r][c] * y;
                    }
                }
            }
#pragma unroll
        for (int e = 0; e < OE; e++) {
            int c = tid / HD + e * (NT / HD), col = tid % HD;
            int64_t kr = bkh * g.s + j0 + c;
            if (c < nc && col < g.d) dk[kr * g.d + col] = ak[e] * g.scale;
            if (c < nc && col < g.dv) dvo[kr * g.dv + col] = av[e];
        }
        __syncthreads(); // ks, vs are rewritten next tile
    }
}

// dq of a tile of BR rows of kv head bkh's group, over the key tiles they see.
template <typename C>
__global__ void flash_dq_k(fgeom g, const float *q, const float *k, const float *v, const float *lse,
                           const float *dout, const double *di, float *dq) {
    const int HD = C::HD, BR = C::BR, BC = C::BC;
    static_assert(NT % BC == 0 && NT % HD == 0, "a thread's scores share a key, its outputs a column");
    __shared__ float qs[BR][HD + 1], dos[BR][HD + 1], ks[BC][HD + 1], vs[BC][HD + 1];
    __shared__ float dss[BR][BC + 1], l_s[BR], d_s[BR];
    const int OE = BR * HD / NT, tid = threadIdx.x;
    int64_t qtiles = (g.nq + BR - 1) / BR, tiles = g.b * g.hk * qtiles;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t bkh = tile / qtiles, x0 = tile % qtiles * BR;
        int nr = (int)(g.nq - x0 < BR ? g.nq - x0 : BR);
        int64_t row0 = bkh * g.nq + x0, jend = tile_kend(g, x0, nr);
        const float *kh = k + bkh * g.s * g.d, *vh = v + bkh * g.s * g.dv;
        stage_rows<BR, HD>(g, row0, nr, q, dout, lse, di, qs, dos, l_s, d_s);
        float acc[OE];
#pragma unroll
        for (int e = 0; e < OE; e++) acc[e] = 0.0f;
        for (int64_t j0 = 0; j0 < jend; j0 += BC) {
            int nc = (int)(g.s - j0 < BC ? g.s - j0 : BC);
            __syncthreads(); // the previous tile's reads are done (and qs, l_s staged)
            stage<BC, HD, 1>(ks, kh + j0 * g.d, nc, g.d);
            stage<BC, HD, 1>(vs, vh + j0 * g.dv, nc, g.dv);
            __syncthreads();
            grad_scores<BR, BC, HD>(g, x0, j0, nc, qs, dos, ks, vs, l_s, d_s, (float (*)[BC + 1])NULL, dss);
            __syncthreads();
            for (int c = 0; c < nc; c++) { // entry e: row tid / HD + e * (NT / HD), column tid % HD
                float x = ks[c][tid % HD];
#pragma unroll
                for (int e = 0; e < OE; e++) acc[e] += dss[tid / HD + e * (NT / HD)][c] * x;
            }
        }
#pragma unroll
        for (int e = 0; e < OE; e++) {
            int r = tid / HD + e * (NT / HD), col = tid % HD;
            if (r < nr && col < g.d) dq[(row0 + r) * g.d + col] = acc[e] * g.scale;
        }
        __syncthreads(); // qs, dos, l_s, d_s are rewritten next tile
    }
}

int tile_rows(const fgeom &g) { return g.d <= 64 && g.dv <= 64 ? 32 : 16; } // BR = BC of FLASH_BY_HD's tiles

// Tiles of k_flash.cuh's shapes.
#define FLASH_BY_HD(g, KERNEL, grid, stream, ...)                                                                  \
    do {                                                                                                               \
        if ((g).d <= 64 && (g).dv <= 64) KERNEL<tiles64><<<(grid), NT, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__);      \
        else KERNEL<tiles128><<<(grid), NT, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__);                                \
    } while (0)

} // namespace

extern "C" {

int kiln__cu_flash_splits(const int64_t *shape) {
    int64_t nq = shape[1] / shape[2] * shape[3];
    // a block per (kv head, split)
    return nq > DECODE_ROWS ? 1 : key_splits(shape[0] * shape[2], shape[4], DECODE_KEYS);
}

int kiln__cu_flash_attention(void *stream, const int64_t *shape, int causal, double scale, const float *q,
                             const float *k, const float *v, float *o, float *lse, int nsplit, float *scratch) {
    fgeom g = make_fgeom(shape, causal, scale);
    int64_t rows = g.b * g.hk * g.nq;
    cudaStream_t st = (cudaStream_t)stream;
    if (g.nq > DECODE_ROWS) {
        int64_t tiles = g.b * g.hk * ((g.nq + tile_rows(g) - 1) / tile_rows(g));
        FLASH_BY_HD(g, flash_fwd_k, tile_blocks(tiles), st, g, 1, g.s, q, k, v, o, lse, 0, 0);
        return (int)cudaGetLastError();
    }
    int64_t chunk = (g.s + nsplit - 1) / nsplit;
    chunk = (chunk + DECODE_KEYS - 1) / DECODE_KEYS * DECODE_KEYS;
    float *po = nsplit > 1 ? scratch : o, *pl = nsplit > 1 ? scratch + nsplit * rows * g.dv : lse;
    unsigned grid = tile_blocks(g.b * g.hk * nsplit);
    if (g.d <= 64 && g.dv <= 64)
        flash_fwd_k<decode64><<<grid, NT, 0, st>>>(g, nsplit, chunk, q, k, v, po, pl, rows * g.dv, rows);
    else
        flash_fwd_k<decode128><<<grid, NT, 0, st>>>(g, nsplit, chunk, q, k, v, po, pl, rows * g.dv, rows);
    int e = (int)cudaGetLastError();
    if (e || nsplit == 1) return e;
    flash_merge_k<float><<<blocks_for(rows * (g.dv + 1)), THREADS, 0, st>>>(rows, g.dv, nsplit, po, pl, o, lse, 0.0f);
    return (int)cudaGetLastError();
}

int kiln__cu_flash_attention_grad(void *stream, const int64_t *shape, int causal, double scale, const float *q,
                                  const float *k, const float *v, const float *o, const float *lse, const float *dout,
                                  float *dq, float *dk, float *dv, double *di) {
    fgeom g = make_fgeom(shape, causal, scale);
    int64_t rows = g.b * g.hk * g.nq;
    cudaStream_t st = (cudaStream_t)stream;
    flash_delta_k<<<blocks_for(rows), THREADS, 0, st>>>(rows, g.dv, o, dout, di);
    int e = (int)cudaGetLastError();
    if (e) return e;
    int br = tile_rows(g);
    FLASH_BY_HD(g, flash_dkv_k, tile_blocks(g.b * g.hk * ((g.s + br - 1) / br)), st, g, q, k, v, lse, dout, di, dk, dv);
    if ((e = (int)cudaGetLastError())) return e;
    FLASH_BY_HD(g, flash_dq_k, tile_blocks(g.b * g.hk * ((g.nq + br - 1) / br)), st, g, q, k, v, lse, dout, di, dq);
    return (int)cudaGetLastError();
}

} // extern "C"
