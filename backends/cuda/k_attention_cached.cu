// k_attention_cached.cu — kiln_attention_cached's attention in the
// FlashAttention-2 style, head sizes D, Dv <= 256 in f32, <= 128 in f64
// (cu_attention.c sends larger ones to k_attention.cu's row kernel: an f64
// tile 256 wide passes 48 KiB of static shared memory), after its write launch
// has put the rows' keys and values into the caches. q [N, Hq, D] row i,
// query head h reads keys first .. pos[i] of sequence seq[i] of the
// caches [B, Hk, S, D/Dv] (the last window of them when window > 0), kv
// head h / (Hq / Hk); o [N, Hq, Dv]; a row outside the caches gets NaN.
// softcap > 0: each scaled score s is softcap tanh(s / softcap) (Gemma 2).
//
// A kv head's query slots are (row i, head of its group), row-major: the
// group's heads of one row are contiguous in q, so a tile of BR slots takes
// the whole group (GQA: each K/V tile staged once for all of them) and, for
// a prompt, several rows. The K/V tiles of BC keys are staged in shared
// memory and the softmax runs online as k_attention_flash.cu's forward.
// Each slot has its own sequence and positions, read from device memory (a
// replayed graph serves the next token): a tile walks the keys of one
// sequence at a time, the union of its slots' ranges, each slot masked to
// its own first .. pos; a tile whose rows span two sequences makes two
// passes. Decoding (a few slots per kv head over a long cache) splits each
// pass's range over nsplit blocks (FlashDecoding): each writes its slots'
// normalized partial O and logsumexp, merged after by flash_merge_k.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"
#include "k_flash.cuh"

struct tgeom {
    int64_t n, hq, hk, group, b, s, window, nq; // nq = n * group slots per kv head
    int d, dv;
};

// f64 tiles: smaller, to stay under 48 KiB of static shared memory.
struct f64tiles64 {
    static const int HD = 64, BR = 16, BC = 16;
};
struct f64tiles128 {
    static const int HD = 128, BR = 16, BC = 8;
};
struct f64decode64 {
    static const int HD = 64, BR = DECODE_ROWS, BC = 16;
};
struct f64decode128 {
    static const int HD = 128, BR = DECODE_ROWS, BC = 16;
};

// A tile shape S on elements T.
template <typename T, typename S> struct tile_of : S {
    typedef T elem;
};

// A tile of BR slots of kv head kh (slots x0 ...), split sp of nsplit.
// nsplit == 1 writes O into o; more write the partial O and L of split sp
// at po + sp * N Hq Dv and pl + sp * N Hq.
template <typename C>
__global__ void cached_tile_k(tgeom g, typename C::elem scale, typename C::elem softcap, int nsplit,
                              const int32_t *seq, const int32_t *pos,
                              const typename C::elem *q, const typename C::elem *kc, const typename C::elem *vc,
                              typename C::elem *o, typename C::elem *po, typename C::elem *pl) {
    typedef typename C::elem T;
    const int HD = C::HD, BR = C::BR, BC = C::BC;
    static_assert(NT % BC == 0 && (NT % HD == 0 || HD % NT == 0), "a thread's scores share a key");
    __shared__ T qs[BR][HD + 1], ks[BC][HD + 1], vs[BC][HD], ps[BR][BC + 1];
    __shared__ T m_s[BR], l_s[BR], c_s[BR];
    __shared__ int64_t sq_s[BR], f_s[BR], e_s[BR]; // a slot's sequence (-1: none, -2: done), keys [f, e)
    __shared__ int64_t pass_s[3];                  // the pass's sequence (-1: none left), its keys [lo, hi)
    const int SE = BR * BC / NT, OE = BR * HD / NT; // score and output entries per thread
    const int tid = threadIdx.x, sc = tid % BC;     // a thread's scores all share key column sc
    const int64_t rows = g.n * g.hq;
    int64_t qtiles = (g.nq + BR - 1) / BR, tiles = g.hk * qtiles * nsplit;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t sp = tile % nsplit, qt = tile / nsplit, kh = qt / qtiles, x0 = qt % qtiles * BR;
        int nr = (int)(g.nq - x0 < BR ? g.nq - x0 : BR);
        // slot r: row (x0 + r) / group, query head kh * group + (x0 + r) % group
#define SLOT_ROW(r) (((x0 + (r)) / g.group) * g.hq + kh * g.group + (x0 + (r)) % g.group)
        if (tid < BR) {
            int64_t sq = -1, f = 0, e = 0;
            if (tid < nr) {
                int64_t i = (x0 + tid) / g.group, s = seq[i], p = pos[i];
                if (s >= 0 && s < g.b && p >= 0 && p < g.s)
                    sq = s, e = p + 1, f = g.window > 0 && e > g.window ? e - g.window : 0;
            }
            sq_s[tid] = sq, f_s[tid] = f, e_s[tid] = e;
        }
        for (int x = tid; x < BR * HD; x += NT) {
            int r = x / HD, c = x % HD;
            qs[r][c] = r < nr && c < g.d ? q[SLOT_ROW(r) * g.d + c] : (T)0;
        }
        for (;;) {
            __syncthreads(); // the slots staged, or the last pass's slots marked done
            if (tid == 0) {
                int64_t cur = -1, lo = 0, hi = 0;
                for (int r = 0; r < BR; r++)
                    if (sq_s[r] >= 0 && cur < 0) cur = sq_s[r], lo = f_s[r], hi = e_s[r];
                for (int r = 0; r < BR; r++)
                    if (sq_s[r] == cur) lo = f_s[r] < lo ? f_s[r] : lo, hi = e_s[r] > hi ? e_s[r] : hi;
                pass_s[0] = cur, pass_s[1] = lo, pass_s[2] = hi;
            }
            if (tid < BR) m_s[tid] = -INFINITY, l_s[tid] = 0;
            __syncthreads();
            int64_t cur = pass_s[0];
            if (cur < 0) break;
            // this split's share of the pass's keys, in whole key tiles
            int64_t chunk = (pass_s[2] - pass_s[1] + nsplit - 1) / nsplit;
            chunk = (chunk + BC - 1) / BC * BC;
            int64_t j0 = pass_s[1] + sp * chunk, j1 = j0 + chunk < pass_s[2] ? j0 + chunk : pass_s[2];
            const T *kh_ = kc + (cur * g.hk + kh) * g.s * g.d, *vh = vc + (cur * g.hk + kh) * g.s * g.dv;
            T acc[OE];
#pragma unroll
            for (int e = 0; e < OE; e++) acc[e] = 0;
            for (; j0 < j1; j0 += BC) {
                int nc = (int)(j1 - j0 < BC ? j1 - j0 : BC);
                stage<BC, HD, 1>(ks, kh_ + j0 * g.d, nc, g.d);
                stage<BC, HD, 0>(vs, vh + j0 * g.dv, nc, g.dv);
                __syncthreads();
                T s[SE];
                dots<SE, BC, HD + 1>(s, qs, ks[sc], g.d);
#pragma unroll
                for (int m = 0; m < SE; m++) { // scaled (and capped) scores, -inf where masked
                    int r = tid / BC + m * (NT / BC);
                    int64_t j = j0 + sc;
                    bool vis = sc < nc && sq_s[r] == cur && j >= f_s[r] && j < e_s[r];
                    T x = s[m] * scale;
                    if (softcap > 0) x = tanh(x / softcap) * softcap;
                    ps[r][sc] = vis ? x : (T)-INFINITY;
                }
                softmax_tile<BR, BC, HD>(ps, m_s, l_s, c_s, vs, nc, acc);
            }
            // this pass's slots: O, or the split's partial O and L (+inf: no key in this split)
#pragma unroll
            for (int e = 0; e < OE; e++) {
                int r = out_row<HD>(e), col = out_col<HD>(e);
                if (r >= nr || sq_s[r] != cur || col >= g.dv) continue;
                T x = l_s[r] > 0 ? acc[e] / l_s[r] : (T)0;
                if (nsplit == 1) o[SLOT_ROW(r) * g.dv + col] = x;
                else po[(sp * rows + SLOT_ROW(r)) * g.dv + col] = x;
            }
            if (nsplit > 1 && tid < nr && sq_s[tid] == cur)
                pl[sp * rows + SLOT_ROW(tid)] = l_s[tid] > 0 ? m_s[tid] + log(l_s[tid]) : (T)INFINITY;
            __syncthreads();
            if (tid < BR && sq_s[tid] == cur) sq_s[tid] = -2;
        }
        // slots outside the caches: NaN (merged from L = +inf alone when split)
        for (int x = tid; x < BR * g.dv; x += NT) {
            int r = x / g.dv, col = x % g.dv;
            if (r >= nr || sq_s[r] != -1) continue;
            if (nsplit == 1) o[SLOT_ROW(r) * g.dv + col] = (T)NAN;
            else if (col == 0) pl[sp * rows + SLOT_ROW(r)] = (T)INFINITY;
        }
#undef SLOT_ROW
        __syncthreads(); // sq_s, qs are rewritten next tile
    }
}

tgeom make_tgeom(const int64_t *shape, int64_t window) {
    tgeom g;
    g.n = shape[0], g.hq = shape[1], g.hk = shape[2], g.group = shape[1] / shape[2], g.b = shape[3], g.s = shape[4];
    g.window = window, g.nq = g.n * g.group, g.d = (int)shape[5], g.dv = (int)shape[6];
    return g;
}

// f(C) for the tile shape C of the kernel: decoding's when a kv head has
// at most DECODE_ROWS slots, else the prompt's; by head size and dtype
// (f64 has no shape past 128: pick gives it the 128 ones, which splits()
// keeps from heads over 128).
template <typename T, typename F64, typename F32> struct pick {
    typedef F64 type;
};
template <typename F64, typename F32> struct pick<float, F64, F32> {
    typedef F32 type;
};
template <typename T, typename F> int by_shape(const tgeom &g, F f) {
    int m = g.d > g.dv ? g.d : g.dv;
    if (g.nq <= DECODE_ROWS)
        return m <= 64    ? f(typename pick<T, f64decode64, decode64>::type())
               : m <= 128 ? f(typename pick<T, f64decode128, decode128>::type())
                          : f(typename pick<T, f64decode128, decode256>::type());
    return m <= 64    ? f(typename pick<T, f64tiles64, tiles64>::type())
           : m <= 128 ? f(typename pick<T, f64tiles128, tiles128>::type())
                      : f(typename pick<T, f64tiles128, tiles256>::type());
}

template <typename T, typename C>
int launch(const tgeom &g, int nsplit, double scale, double softcap, cudaStream_t st, const int32_t *seq,
           const int32_t *pos, const void *q, const void *kc, const void *vc, void *o, void *scratch) {
    int64_t tiles = g.hk * ((g.nq + C::BR - 1) / C::BR) * nsplit, rows = g.n * g.hq;
    T *po = (T *)scratch, *pl = po ? po + nsplit * rows * g.dv : NULL;
    typedef tile_of<T, C> K; // (the emulator's nvcc rewrites launches of one-argument templates)
    unsigned grid = (unsigned)(tiles < 65535 * 8 ? tiles : 65535 * 8);
    cached_tile_k<K><<<grid, NT, 0, st>>>(
        g, (T)scale, (T)softcap, nsplit, seq, pos, (const T *)q, (const T *)kc, (const T *)vc, (T *)o, po, pl);
    int e = (int)cudaGetLastError();
    if (e || nsplit == 1) return e;
    flash_merge_k<T><<<blocks_for(rows * (g.dv + 1)), THREADS, 0, st>>>(rows, g.dv, nsplit, po, pl, (T *)o,
                                                                          (T *)NULL, (T)NAN);
    return (int)cudaGetLastError();
}

// The splits of a kernel's tiles: the rows see at most the window, or S keys.
template <typename T> int splits(const tgeom &g) {
    int64_t keys = g.window > 0 && g.window < g.s ? g.window : g.s;
    return by_shape<T>(g, [&](auto c) {
        typedef decltype(c) C;
        return key_splits(g.hk * ((g.nq + C::BR - 1) / C::BR), keys, C::BC);
    });
}

} // namespace

extern "C" {

int kiln__cu_attention_cached_splits(int dt, const int64_t *shape, int64_t window) {
    tgeom g = make_tgeom(shape, window);
    int most = dt == CU_F64 ? 128 : 256;
    if (g.d > most || g.dv > most) return 0;
    return dt == CU_F64 ? splits<double>(g) : splits<float>(g);
}

int kiln__cu_attention_cached_tiles(void *stream, int dt, const int64_t *shape, int64_t window, double scale,
                                    double softcap, int nsplit, const int32_t *seq, const int32_t *pos,
                                    const void *q, const void *k_cache, const void *v_cache, void *o, void *scratch) {
    tgeom g = make_tgeom(shape, window);
    cudaStream_t st = (cudaStream_t)stream;
    if (dt == CU_F64)
        return by_shape<double>(g, [&](auto c) {
            return launch<double, decltype(c)>(g, nsplit, scale, softcap, st, seq, pos, q, k_cache, v_cache, o,
                                               scratch);
        });
    return by_shape<float>(g, [&](auto c) {
        return launch<float, decltype(c)>(g, nsplit, scale, softcap, st, seq, pos, q, k_cache, v_cache, o, scratch);
    });
}

} // extern "C"
