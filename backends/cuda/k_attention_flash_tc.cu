// k_attention_flash_tc.cu — the training attention of k_attention_flash.cu
// with its products on tensor cores (nvcuda::wmma), for
// kiln_set_matmul_precision's TF32 and BF16 modes: f32 tensors, D and Dv
// multiples of 16 up to 128; the forward when a kv head has more than
// DECODE_ROWS query rows (decoding keeps the FMA kernel). The same tiles
// (k_flash.cuh), passes and semantics: the forward's online softmax with L
// kept, delta, dk/dv per key tile over its queries, dq per query tile over
// its keys, never a T x S matrix. What changes is how the products run:
//   S = Q K^T and dP = dO V^T             (the scores of a tile)
//   O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K
// each a grid of 16 x 16 output tiles spread over the block's 4 warps, on
// operands staged in shared memory in the mode's input type: f32 read into
// fragments through __float_to_tf32 (m16n16k8), or rounded to bf16 as
// staged (m16n16k16); products summed in f32. Scores go to shared memory
// for the f32 softmax, as the FMA kernel's do, and P and dS come back in as
// inputs. dK, dV and dQ stay in each warp's accumulator fragments across
// their loop; the forward's O, rescaled at each key tile, stays in the FMA
// kernel's per-thread registers and adds the tile's P V read back from
// shared memory (a fragment's element layout is the hardware's).
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <type_traits>

namespace {

#include "k_common.cuh"
#include "k_flash.cuh"
#include "k_flash_train.cuh"

using namespace nvcuda;

const int WARPS = NT / 32;

// TF32: f32 in shared memory, rounded in the fragments (rows padded to
// keep a tile 32-byte aligned, as wmma wants, off the same banks).
struct tf32_in {
    typedef float T;
    typedef wmma::precision::tf32 F;
    static const int K = 8, PAD = 4;
    static __device__ T in(float x) { return x; }
    template <typename G> static __device__ void round(G &f) {
#pragma unroll
        for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma::__float_to_tf32(f.x[i]);
    }
};

// BF16: rounded to the nearest bf16 as staged, as cu_matmul.c's operands.
struct bf16_in {
    typedef __nv_bfloat16 T;
    typedef __nv_bfloat16 F;
    static const int K = 16, PAD = 8;
    static __device__ T in(float x) { return __float2bfloat16(x); }
    template <typename G> static __device__ void round(G &) {}
};

template <typename P> using acc_frag = wmma::fragment<wmma::accumulator, 16, 16, P::K, float>;

// Element (r, c) of a matrix held row-major, or transposed (col_major), ld a row.
template <typename L> __device__ int at(int r, int c, int ld) {
    return std::is_same<L, wmma::row_major>::value ? r * ld + c : c * ld + r;
}

// f += the 16 x 16 tile (i, j) of a b over k < kn: a is M x K, b K x N.
template <typename P, typename LA, typename LB>
__device__ void mma_tile(acc_frag<P> &f, const typename P::T *a, int lda, const typename P::T *b, int ldb, int i,
                         int j, int kn) {
    wmma::fragment<wmma::matrix_a, 16, 16, P::K, typename P::F, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, P::K, typename P::F, LB> fb;
    for (int k = 0; k < kn; k += P::K) {
        wmma::load_matrix_sync(fa, a + at<LA>(16 * i, k, lda), lda);
        wmma::load_matrix_sync(fb, b + at<LB>(k, 16 * j, ldb), ldb);
        P::round(fa);
        P::round(fb);
        wmma::mma_sync(f, fa, fb, f);
    }
}

// c = a b, m x n floats row-major (ldc), over k < kn.
template <typename P, typename LA, typename LB>
__device__ void product(float *c, int ldc, int m, int n, const typename P::T *a, int lda, const typename P::T *b,
                        int ldb, int kn) {
    for (int t = threadIdx.x / 32; t < m / 16 * (n / 16); t += WARPS) {
        int i = t / (n / 16), j = t % (n / 16);
        acc_frag<P> f;
        wmma::fill_fragment(f, 0.0f);
        mma_tile<P, LA, LB>(f, a, lda, b, ldb, i, j, kn);
        wmma::store_matrix_sync(c + 16 * i * ldc + 16 * j, f, ldc, wmma::mem_row_major);
    }
}

// A sum over a loop of products M x N (n of N's columns used): a warp's
// tiles t = warp + WARPS u kept in its fragments.
template <typename P, int M, int N> struct held {
    static const int U = (M / 16 * (N / 16) + WARPS - 1) / WARPS;
    acc_frag<P> f[U];
    __device__ void zero() {
#pragma unroll
        for (int u = 0; u < U; u++) wmma::fill_fragment(f[u], 0.0f);
    }
    template <typename LA, typename LB>
    __device__ void add(int n, const typename P::T *a, int lda, const typename P::T *b, int ldb, int kn) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int t = threadIdx.x / 32 + WARPS * u;
            if (t < M / 16 * (n / 16)) mma_tile<P, LA, LB>(f[u], a, lda, b, ldb, t / (n / 16), t % (n / 16), kn);
        }
    }
    // rows [0, nr) and columns [0, n) of the sum times scale into dst
    // (row length n) through o, a shared M x ldo scratch
    __device__ void write(int n, float *o, int ldo, float *dst, int nr, float scale) {
        __syncthreads(); // o may be an operand of the last add
#pragma unroll
        for (int u = 0; u < U; u++) {
            int t = threadIdx.x / 32 + WARPS * u;
            if (t < M / 16 * (n / 16))
                wmma::store_matrix_sync(o + t / (n / 16) * 16 * ldo + t % (n / 16) * 16, f[u], ldo, wmma::mem_row_major);
        }
        __syncthreads();
        for (int x = threadIdx.x; x < nr * n; x += NT) dst[x] = o[x / n * ldo + x % n] * scale;
        __syncthreads(); // o is rewritten next
    }
};

// Rows [0, n) of a tile of ROWS rows from src (row length len) into dst
// (LD elements a row) in the mode's input type, zeros past n and len.
template <typename P, int ROWS, int W, int LD>
__device__ void stage_in(typename P::T *dst, const float *src, int n, int len) {
    for (int x = threadIdx.x; x < ROWS * W; x += NT) {
        int r = x / W, e = x % W;
        dst[r * LD + e] = P::in(r < n && e < len ? src[(int64_t)r * len + e] : 0.0f);
    }
}

// 32-byte aligned regions of a block's shared words: the words of n elements of size es.
__host__ __device__ constexpr int words(int n, int es) { return (n * es + 31) / 32 * 8; }
template <typename T> __device__ T *carve(float *&p, int n) {
    T *r = (T *)p;
    p += words(n, (int)sizeof(T));
    return r;
}

// Query tile `tile` of BR rows: rows [x0, x0 + nr) of a kv head's
// group (row0 of all), which see keys [0, jend) of kh, vh.
template <int BR> struct qtile {
    int64_t x0, row0, jend;
    int nr;
    const float *kh, *vh;
    __device__ qtile(const fgeom &g, int64_t tile, int64_t qtiles, const float *k, const float *v) {
        int64_t bkh = tile / qtiles;
        x0 = tile % qtiles * BR;
        nr = (int)(g.nq - x0 < BR ? g.nq - x0 : BR);
        row0 = bkh * g.nq + x0, jend = tile_kend(g, x0, nr);
        kh = k + bkh * g.s * g.d, vh = v + bkh * g.s * g.dv;
    }
};

// Forward: a tile of BR rows of kv head bkh's group against all the keys they see.
template <typename C, typename P>
__global__ void tc_fwd_k(fgeom g, const float *q, const float *k, const float *v, float *o, float *lse) {
    typedef typename P::T T;
    const int HD = C::HD, BR = C::BR, BC = C::BC, LD = HD + P::PAD, LP = BC + 4, LB = BC + P::PAD, LO = HD + 4;
    const bool F = sizeof(T) == 4; // P read from the f32 probabilities themselves
    __shared__ __align__(32) float sm[words(BR * LD, sizeof(T)) + 2 * words(BC * LD, sizeof(T)) + words(BR * LP, 4) +
                                      words(BR * LO, 4) + (F ? 0 : words(BR * LB, sizeof(T)))];
    __shared__ float m_s[BR], l_s[BR], c_s[BR];
    float *p = sm;
    T *qs = carve<T>(p, BR * LD), *ks = carve<T>(p, BC * LD), *vs = carve<T>(p, BC * LD);
    float *ps = carve<float>(p, BR * LP), *os = carve<float>(p, BR * LO);
    T *pb = F ? (T *)ps : carve<T>(p, BR * LB);
    const int SE = BR * BC / NT, OE = BR * HD / NT; // score and output entries per thread
    const int tid = threadIdx.x, sc = tid % BC;     // a thread's scores all share key column sc
    int64_t qtiles = (g.nq + BR - 1) / BR, tiles = g.b * g.hk * qtiles;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const qtile<BR> a(g, tile, qtiles, k, v);
        const int64_t x0 = a.x0, row0 = a.row0;
        const int nr = a.nr;
        stage_in<P, BR, HD, LD>(qs, q + row0 * g.d, nr, g.d);
        if (tid < BR) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
        float acc[OE];
#pragma unroll
        for (int e = 0; e < OE; e++) acc[e] = 0.0f;
        for (int64_t j0 = 0; j0 < a.jend; j0 += BC) {
            int nc = (int)(g.s - j0 < BC ? g.s - j0 : BC);
            __syncthreads(); // the previous tile's reads are done
            stage_in<P, BC, HD, LD>(ks, a.kh + j0 * g.d, nc, g.d);
            stage_in<P, BC, HD, LD>(vs, a.vh + j0 * g.dv, nc, g.dv);
            __syncthreads();
            product<P, wmma::row_major, wmma::col_major>(ps, LP, BR, BC, qs, LD, ks, LD, g.d);
            __syncthreads();
#pragma unroll
            for (int m = 0; m < SE; m++) { // scaled scores, -inf where masked
                int r = tid / BC + m * (NT / BC);
                bool vis = r < nr && j0 + sc < kend(g, (x0 + r) % g.t);
                ps[r * LP + sc] = vis ? ps[r * LP + sc] * g.scale : -INFINITY;
            }
            __syncthreads();
            if (tid < BR) { // the running max, and the rescaling of what came before
                float mo = m_s[tid], mx = mo;
                for (int c = 0; c < BC; c++) mx = fmaxf(mx, ps[tid * LP + c]);
                c_s[tid] = mx == -INFINITY ? 1.0f : expf(mo - mx);
                m_s[tid] = mx;
            }
            __syncthreads();
#pragma unroll
            for (int m = 0; m < SE; m++) {
                int r = tid / BC + m * (NT / BC);
                float s = ps[r * LP + sc], pr = s == -INFINITY ? 0.0f : expf(s - m_s[r]);
                ps[r * LP + sc] = pr;
                if (!F) pb[r * LB + sc] = P::in(pr);
            }
            __syncthreads();
            if (tid < BR) {
                float s = 0.0f;
                for (int c = 0; c < BC; c++) s += ps[tid * LP + c];
                l_s[tid] = l_s[tid] * c_s[tid] + s;
            }
            product<P, wmma::row_major, wmma::row_major>(os, LO, BR, g.dv, pb, F ? LP : LB, vs, LD, BC);
            __syncthreads();
#pragma unroll
            for (int e = 0; e < OE; e++) { // entry e: row tid / HD + e * (NT / HD), column tid % HD
                int r = tid / HD + e * (NT / HD), col = tid % HD;
                acc[e] = acc[e] * c_s[r] + (col < g.dv ? os[r * LO + col] : 0.0f);
            }
        }
        __syncthreads();
        float *ot = o + row0 * g.dv, *lt = lse + row0;
#pragma unroll
        for (int e = 0; e < OE; e++) {
            int r = tid / HD + e * (NT / HD), col = tid % HD;
            if (r < nr && col < g.dv) ot[(int64_t)r * g.dv + col] = l_s[r] > 0.0f ? acc[e] / l_s[r] : 0.0f;
        }
        if (tid < nr) lt[tid] = l_s[tid] > 0.0f ? m_s[tid] + logf(l_s[tid]) : INFINITY;
        __syncthreads(); // m_s, l_s are reset next tile
    }
}

// The backward's query side of a tile: q, dO (input type), L and delta
// of rows [row0, row0 + nr) (L = +inf past nr: no probability).
template <typename P, int BR, int HD, int LD>
__device__ void stage_rows_in(const fgeom &g, int64_t row0, int nr, const float *q, const float *dout,
                              const float *lse, const double *di, typename P::T *qs, typename P::T *dos, float *l_s,
                              float *d_s) {
    stage_in<P, BR, HD, LD>(qs, q + row0 * g.d, nr, g.d);
    stage_in<P, BR, HD, LD>(dos, dout + row0 * g.dv, nr, g.dv);
    int r = threadIdx.x;
    if (r < BR) l_s[r] = r < nr ? lse[row0 + r] : INFINITY, d_s[r] = r < nr ? (float)di[row0 + r] : 0.0f;
}

// The backward's tile of rows x0 + r of a kv head's group (staged by
// stage_rows_in) against keys j0 + c, c < nc (staged in ks, vs): S into ps
// and dP into dss, then P (into ps and pb, unless pb is NULL) and
// dS = P (dP - delta) (into dss and db), in f32 as the FMA kernel's.
template <typename P, int BR, int BC, int LD, int LP, int LB>
__device__ void grad_scores(const fgeom &g, int64_t x0, int64_t j0, int nc, const typename P::T *qs,
                            const typename P::T *dos, const typename P::T *ks, const typename P::T *vs,
                            const float *l_s, const float *d_s, float *ps, float *dss, typename P::T *pb,
                            typename P::T *db) {
    product<P, wmma::row_major, wmma::col_major>(ps, LP, BR, BC, qs, LD, ks, LD, g.d);
    product<P, wmma::row_major, wmma::col_major>(dss, LP, BR, BC, dos, LD, vs, LD, g.dv);
    __syncthreads();
    const int SE = BR * BC / NT, sc = threadIdx.x % BC;
    const bool F = sizeof(typename P::T) == 4; // pb, db are ps, dss
#pragma unroll
    for (int m = 0; m < SE; m++) {
        int r = threadIdx.x / BC + m * (NT / BC);
        bool vis = sc < nc && l_s[r] != INFINITY && j0 + sc < kend(g, (x0 + r) % g.t);
        float pr = vis ? expf(ps[r * LP + sc] * g.scale - l_s[r]) : 0.0f;
        float ds = vis ? pr * (dss[r * LP + sc] - d_s[r]) : 0.0f;
        ps[r * LP + sc] = pr;
        dss[r * LP + sc] = ds;
        if (!F && pb) pb[r * LB + sc] = P::in(pr);
        if (!F) db[r * LB + sc] = P::in(ds);
    }
    __syncthreads();
}

// dk, dv of a tile of BC keys of kv head bkh, over every query of its
// group's heads that sees one of them.
template <typename C, typename P>
__global__ void tc_dkv_k(fgeom g, const float *q, const float *k, const float *v, const float *lse,
                         const float *dout, const double *di, float *dk, float *dvo) {
    typedef typename P::T T;
    const int HD = C::HD, BR = C::BR, BC = C::BC, LD = HD + P::PAD, LP = BC + 4, LB = BC + P::PAD, LO = HD + 4;
    const bool F = sizeof(T) == 4; // P, dS read from ps, dss; the outputs staged where q was
    static_assert(BR == BC, "q's rows hold the outputs' in the TF32 mode");
    __shared__ __align__(32) float sm[2 * words(BC * LD, sizeof(T)) + 2 * words(BR * LD, sizeof(T)) +
                                      2 * words(BR * LP, 4) + (F ? 0 : 2 * words(BR * LB, sizeof(T)) + words(BC * LO, 4))];
    __shared__ float l_s[BR], d_s[BR];
    float *p = sm;
    T *ks = carve<T>(p, BC * LD), *vs = carve<T>(p, BC * LD), *qs = carve<T>(p, BR * LD), *dos = carve<T>(p, BR * LD);
    float *ps = carve<float>(p, BR * LP), *dss = carve<float>(p, BR * LP);
    T *pb = F ? (T *)ps : carve<T>(p, BR * LB), *db = F ? (T *)dss : carve<T>(p, BR * LB);
    float *os = F ? (float *)qs : carve<float>(p, BC * LO);
    int64_t ktiles = (g.s + BC - 1) / BC, tiles = g.b * g.hk * ktiles;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t bkh = tile / ktiles, j0 = tile % ktiles * BC;
        int nc = (int)(g.s - j0 < BC ? g.s - j0 : BC);
        stage_in<P, BC, HD, LD>(ks, k + (bkh * g.s + j0) * g.d, nc, g.d);
        stage_in<P, BC, HD, LD>(vs, v + (bkh * g.s + j0) * g.dv, nc, g.dv);
        held<P, BC, HD> hk, hv;
        hk.zero();
        hv.zero();
        // query i sees key j iff i >= j - (S - T): none before i_first
        int64_t ifirst = g.causal ? j0 - (g.s - g.t) : 0;
        ifirst = ifirst < 0 ? 0 : ifirst;
        for (int64_t hh = 0; hh < g.group; hh++)
            for (int64_t i0 = ifirst; i0 < g.t; i0 += BR) {
                int nr = (int)(g.t - i0 < BR ? g.t - i0 : BR);
                int64_t row0 = bkh * g.nq + hh * g.t + i0;
                __syncthreads(); // the previous tile's reads are done
                stage_rows_in<P, BR, HD, LD>(g, row0, nr, q, dout, lse, di, qs, dos, l_s, d_s);
                __syncthreads();
                grad_scores<P, BR, BC, LD, LP, LB>(g, hh * g.t + i0, j0, nc, qs, dos, ks, vs, l_s, d_s, ps, dss, pb,
                                                   db);
                hv.template add<wmma::col_major, wmma::row_major>(g.dv, pb, F ? LP : LB, dos, LD, BR); // P^T dO
                hk.template add<wmma::col_major, wmma::row_major>(g.d, db, F ? LP : LB, qs, LD, BR);   // dS^T q
            }
        int64_t kr = bkh * g.s + j0;
        hk.write(g.d, os, LO, dk + kr * g.d, nc, g.scale);
        hv.write(g.dv, os, LO, dvo + kr * g.dv, nc, 1.0f);
    }
}

// dq of a tile of BR rows of kv head bkh's group, over the key tiles they see.
template <typename C, typename P>
__global__ void tc_dq_k(fgeom g, const float *q, const float *k, const float *v, const float *lse, const float *dout,
                        const double *di, float *dq) {
    typedef typename P::T T;
    const int HD = C::HD, BR = C::BR, BC = C::BC, LD = HD + P::PAD, LP = BC + 4, LB = BC + P::PAD, LO = HD + 4;
    const bool F = sizeof(T) == 4; // dS read from dss; the output staged where q was
    __shared__ __align__(32) float sm[2 * words(BR * LD, sizeof(T)) + 2 * words(BC * LD, sizeof(T)) +
                                      2 * words(BR * LP, 4) + (F ? 0 : words(BR * LB, sizeof(T)) + words(BR * LO, 4))];
    __shared__ float l_s[BR], d_s[BR];
    float *p = sm;
    T *qs = carve<T>(p, BR * LD), *dos = carve<T>(p, BR * LD), *ks = carve<T>(p, BC * LD), *vs = carve<T>(p, BC * LD);
    float *ps = carve<float>(p, BR * LP), *dss = carve<float>(p, BR * LP);
    T *db = F ? (T *)dss : carve<T>(p, BR * LB);
    float *os = F ? (float *)qs : carve<float>(p, BR * LO);
    int64_t qtiles = (g.nq + BR - 1) / BR, tiles = g.b * g.hk * qtiles;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const qtile<BR> a(g, tile, qtiles, k, v);
        const int64_t x0 = a.x0, row0 = a.row0;
        const int nr = a.nr;
        stage_rows_in<P, BR, HD, LD>(g, row0, nr, q, dout, lse, di, qs, dos, l_s, d_s);
        held<P, BR, HD> hq;
        hq.zero();
        for (int64_t j0 = 0; j0 < a.jend; j0 += BC) {
            int nc = (int)(g.s - j0 < BC ? g.s - j0 : BC);
            __syncthreads(); // the previous tile's reads are done (and qs, l_s staged)
            stage_in<P, BC, HD, LD>(ks, a.kh + j0 * g.d, nc, g.d);
            stage_in<P, BC, HD, LD>(vs, a.vh + j0 * g.dv, nc, g.dv);
            __syncthreads();
            grad_scores<P, BR, BC, LD, LP, LB>(g, x0, j0, nc, qs, dos, ks, vs, l_s, d_s, ps, dss, (T *)NULL, db);
            hq.template add<wmma::row_major, wmma::row_major>(g.d, db, F ? LP : LB, ks, LD, BC); // dS k
        }
        hq.write(g.d, os, LO, dq + row0 * g.d, nr, g.scale);
    }
}

// The kernel of the head sizes' tiles and the mode's inputs, a block per
// tile of `rows` rows (queries or keys) of each kv head.
#define TC_BY(g, mode, KERNEL, rows, stream, ...)                                                                    \
    do {                                                                                                               \
        bool small_ = (g).d <= 64 && (g).dv <= 64;                                                                     \
        int br_ = small_ ? tiles64::BR : tiles128::BR;                                                                 \
        unsigned grid_ = tile_blocks((g).b * (g).hk * (((rows) + br_ - 1) / br_));                                    \
        cudaStream_t st_ = (cudaStream_t)(stream);                                                                     \
        if ((mode) == CU_TC_BF16 && small_) KERNEL<tiles64, bf16_in><<<grid_, NT, 0, st_>>>(__VA_ARGS__);             \
        else if ((mode) == CU_TC_BF16) KERNEL<tiles128, bf16_in><<<grid_, NT, 0, st_>>>(__VA_ARGS__);                  \
        else if (small_) KERNEL<tiles64, tf32_in><<<grid_, NT, 0, st_>>>(__VA_ARGS__);                                 \
        else KERNEL<tiles128, tf32_in><<<grid_, NT, 0, st_>>>(__VA_ARGS__);                                            \
    } while (0)

} // namespace

extern "C" {

int kiln__cu_flash_tc_fits(const int64_t *shape, int grad) {
    int64_t d = shape[5], dv = shape[6], nq = shape[1] / shape[2] * shape[3];
    return d > 0 && dv > 0 && d % 16 == 0 && dv % 16 == 0 && d <= 128 && dv <= 128 && (grad || nq > DECODE_ROWS);
}

int kiln__cu_flash_attention_tc(void *stream, int mode, const int64_t *shape, int causal, double scale,
                                const float *q, const float *k, const float *v, float *o, float *lse) {
    fgeom g = make_fgeom(shape, causal, scale);
    TC_BY(g, mode, tc_fwd_k, g.nq, stream, g, q, k, v, o, lse);
    return (int)cudaGetLastError();
}

int kiln__cu_flash_attention_grad_tc(void *stream, int mode, const int64_t *shape, int causal, double scale,
                                     const float *q, const float *k, const float *v, const float *o,
                                     const float *lse, const float *dout, float *dq, float *dk, float *dv,
                                     double *di) {
    fgeom g = make_fgeom(shape, causal, scale);
    int64_t rows = g.b * g.hk * g.nq;
    cudaStream_t st = (cudaStream_t)stream;
    flash_delta_k<<<blocks_for(rows), THREADS, 0, st>>>(rows, g.dv, o, dout, di);
    int e = (int)cudaGetLastError();
    if (e) return e;
    TC_BY(g, mode, tc_dkv_k, g.s, st, g, q, k, v, lse, dout, di, dk, dv);
    if ((e = (int)cudaGetLastError())) return e;
    TC_BY(g, mode, tc_dq_k, g.nq, st, g, q, k, v, lse, dout, di, dq);
    return (int)cudaGetLastError();
}

} // extern "C"
