/* gemm_dfp_avx512vnni.c — the DFP GEMM (gemm_dfp.h) with AVX512-VNNI vpdpwssd:
 * a 6 x 64 tile of C in 24 int32 chunk accumulators (its f32 totals in L1).
 * Each chunk starts from zeroed accumulators (a zero idiom, free), adds cp
 * pairs with vpdpwssd, and is folded into the f32 total by one conversion
 * and one add: with 14-bit operands (cp = 16) 18 vector instructions for
 * 16 pairs of work. (Starting a chunk with vpmaddwd instead made GCC copy
 * all 12 accumulators every pair.) Units of work (a run of 64-column
 * blocks against a group of row tiles) are handed out dynamically; a unit
 * runs all of k for each tile, a block's four B panels staying in L2. */
#if defined(__x86_64__)
#include "gemm_dfp.h"

#include <immintrin.h>
#include "pool.h"
#include <stdint.h>
#include <string.h>

#define MR KILN_DFP_MR
#define GROUP 8 /* row tiles per unit */
#define UNIT_PAIRS 2048 /* tile pairs (6 x 64 x 2 multiply-adds) a unit should hold at least */

/* acc += pairwise products of a and b. Inline assembly: GCC 12 compiled the
 * intrinsic with a register copy of every accumulator every pair (the
 * accumulator operand not tied to the destination). */
static inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

static inline int32_t load32(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* C's masked columns: the value, or C plus it (acc) */
static inline void store(float *c, __mmask16 k, __m512 v, bool acc) {
    if (acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, c), v);
    _mm512_mask_storeu_ps(c, k, v);
}

static inline __attribute__((always_inline)) void tile_n(const kiln_dfp_packed *p, const int16_t *a,
                                                          const int16_t *b, const int np, const int mr, float *c, int64_t ldc,
                                                          int64_t rows, int64_t cols) {
    const int64_t pairs = p->kp / 2, ps = pairs * 32, cp = p->cp;
    const __m512 sa = _mm512_set1_ps(p->sa), sb = _mm512_set1_ps(p->sb);
    /* the f32 totals live in L1, not in registers: 12 more zmm made GCC
     * copy every accumulator every pair */
    float tot[MR][64] __attribute__((aligned(64)));
    __mmask16 mk[4];
#pragma GCC unroll 4
    for (int q = 0; q < np; q++) {
        int64_t left = cols - q * 16;
        mk[q] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    }
    if (pairs <= cp) { /* one chunk (short k: conv1's 9 taps, a backward-data k of 32 channels): C straight
                        * from the accumulators, as 0 + chunk would give it exactly */
        const int16_t *ak = a, *bk = b;
        __m512i acc[MR][4], bv[4];
        int64_t len = pairs;
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int q = 0; q < np; q++) acc[r][q] = _mm512_setzero_si512();
        do {
#pragma GCC unroll 4
            for (int q = 0; q < np; q++) bv[q] = _mm512_loadu_si512(bk + q * ps);
#pragma GCC unroll 6
            for (int r = 0; r < mr; r++) {
                __m512i av = _mm512_set1_epi32(load32(ak + r * 2));
#pragma GCC unroll 4
                for (int q = 0; q < np; q++) acc[r][q] = dpwssd(acc[r][q], av, bv[q]);
            }
            ak += MR * 2, bk += 32;
        } while (--len);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++)
            if (r < rows) {
#pragma GCC unroll 4
                for (int q = 0; q < np; q++)
                    store(c + r * ldc + q * 16, mk[q],
                          _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][q]), sa), sb), p->acc);
            }
        return;
    }
#pragma GCC unroll 4
    for (int q = 0; q < np; q++)
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) _mm512_store_ps(&tot[r][q * 16], _mm512_setzero_ps());
    for (int64_t t0 = 0; t0 < pairs; t0 += cp) {
        int64_t len = pairs - t0 < cp ? pairs - t0 : cp;
        const int16_t *ak = a + t0 * MR * 2, *bk = b + t0 * 32;
        __m512i acc[MR][4], bv[4];
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int q = 0; q < np; q++) acc[r][q] = _mm512_setzero_si512();
        do {
#pragma GCC unroll 4
            for (int q = 0; q < np; q++) bv[q] = _mm512_loadu_si512(bk + q * ps);
#pragma GCC unroll 6
            for (int r = 0; r < mr; r++) {
                __m512i av = _mm512_set1_epi32(load32(ak + r * 2));
#pragma GCC unroll 4
                for (int q = 0; q < np; q++) acc[r][q] = dpwssd(acc[r][q], av, bv[q]);
            }
            ak += MR * 2, bk += 32;
        } while (--len);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
            for (int q = 0; q < np; q++)
                _mm512_store_ps(&tot[r][q * 16],
                                _mm512_add_ps(_mm512_load_ps(&tot[r][q * 16]), _mm512_cvtepi32_ps(acc[r][q])));
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++)
        if (r < rows) {
#pragma GCC unroll 4
            for (int q = 0; q < np; q++)
                store(c + r * ldc + q * 16, mk[q],
                      _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(&tot[r][q * 16]), sa), sb), p->acc);
        }
}

/* A's full pairs of MR rows into the tile's layout (gemm_dfp.h), 16 pairs
 * at a time: a 6 x 16 transpose of 32-bit words by permutes (rows 0-1,
 * 2-3, 4-5 interleaved into pairs of words, then three 64-bit streams
 * merged), which the scalar loop did with 96 loads and stores. Rows from
 * live on are padding (0). */
void kiln__gemm_dfp_pack_a_rows_avx512(const int16_t *const src[MR], int live, int64_t full, int16_t *d) {
    _Static_assert(MR == 6, "the permutes below are for 6 rows");
    __m512i lo = _mm512_setzero_si512(), hi = lo, q1[3], q2[3];
    __mmask8 m2[3];
    {
        int32_t l[16], h[16];
        for (int i = 0; i < 8; i++) l[2 * i] = i, l[2 * i + 1] = 16 + i, h[2 * i] = 8 + i, h[2 * i + 1] = 24 + i;
        lo = _mm512_loadu_si512(l), hi = _mm512_loadu_si512(h);
        for (int w = 0; w < 3; w++) {
            int64_t a[8], b[8];
            unsigned mk = 0;
            for (int e = 0; e < 8; e++) {
                int g = 8 * w + e, pp = g / 3, st = g % 3;
                a[e] = st == 1 ? 8 + pp : pp, b[e] = pp;
                if (st == 2) mk |= 1u << e;
            }
            q1[w] = _mm512_loadu_si512(a), q2[w] = _mm512_loadu_si512(b), m2[w] = (__mmask8)mk;
        }
    }
    int64_t p = 0;
    for (; p + 16 <= full; p += 16, d += 16 * MR * 2) {
        __m512i r[MR], u[3][2];
        for (int t = 0; t < MR; t++) r[t] = t < live ? _mm512_loadu_si512(src[t] + 2 * p) : _mm512_setzero_si512();
        for (int s = 0; s < 3; s++) {
            u[s][0] = _mm512_permutex2var_epi32(r[2 * s], lo, r[2 * s + 1]);
            u[s][1] = _mm512_permutex2var_epi32(r[2 * s], hi, r[2 * s + 1]);
        }
        for (int h = 0; h < 2; h++)
            for (int w = 0; w < 3; w++) {
                __m512i o = _mm512_permutex2var_epi64(u[0][h], q1[w], u[1][h]);
                o = _mm512_mask_permutexvar_epi64(o, m2[w], q2[w], u[2][h]);
                _mm512_storeu_si512(d + (3 * h + w) * 32, o);
            }
    }
    for (; p < full; p++, d += MR * 2)
        for (int t = 0; t < MR; t++) {
            if (t < live) memcpy(d + 2 * t, src[t] + 2 * p, 4);
            else memset(d + 2 * t, 0, 4); /* padding rows */
        }
}

/* What B's packers read. */
typedef struct pack_job {
    bool kn;
    int64_t n, k, ldb, kp, np;
    const int16_t *b;
    int16_t *dst;
    const kiln_dfp_taps *t;
} pack_job;

/* B's panels [g0, g1) of 16 columns of k pairs (layout in gemm_dfp.h),
 * AVX-512: from [n, k] one 16-row gather of 32-bit words (a k pair) per
 * panel line, from [k, n] 16 values of rows 2p and 2p + 1 interleaved.
 * Zero padded. */
static void pack_b_panels(void *arg, int64_t g0, int64_t g1, int tid) {
    const pack_job *j = arg;
    const bool kn = j->kn;
    const int64_t n = j->n, k = j->k, ldb = j->ldb, pairs = j->kp / 2, full = k / 2;
    const int16_t *b = j->b;
    int16_t *dst = j->dst;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    (void)tid;
    for (int64_t j0 = g0 * 16; j0 < g1 * 16; j0 += 16) {
        int16_t *d = dst + (j0 / 16) * pairs * 32;
        int live = n - j0 < 16 ? (int)(n - j0) : 16;
        __mmask16 lm = (__mmask16)((1u << live) - 1);
        if (kn) {
            const __m512i idx = _mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7);
            for (int64_t p = 0; p < pairs; p++, d += 32) {
                const int16_t *s0 = b + 2 * p * ldb + j0;
                __m256i r0 = _mm256_maskz_loadu_epi16(lm, s0);
                __m256i r1 = p < full ? _mm256_maskz_loadu_epi16(lm, s0 + ldb) : _mm256_setzero_si256();
                /* (r0[t], r1[t]) pairs: unpack within 128-bit lanes, then put the lanes in order */
                __m256i lo = _mm256_unpacklo_epi16(r0, r1), hi = _mm256_unpackhi_epi16(r0, r1);
                __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                _mm512_storeu_si512(d, _mm512_permutexvar_epi64(idx, v));
            }
        } else {
            /* 32-bit words of row j0 + t at byte offset 4p: row starts as int32 indices */
            const __m512i rows = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)(ldb / 2)));
            const int32_t *base = (const int32_t *)(const void *)(b + j0 * ldb);
            if (ldb % 2 == 0 && (int64_t)(ldb / 2) * 16 < INT32_MAX) {
                for (int64_t p = 0; p < full; p++, d += 32)
                    _mm512_storeu_si512(d, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lm,
                                                                       _mm512_add_epi32(rows, _mm512_set1_epi32((int)p)),
                                                                       base, 4));
            } else
                for (int64_t p = 0; p < full; p++, d += 32) {
                    for (int t = 0; t < 16; t++) {
                        d[2 * t] = t < live ? b[(j0 + t) * ldb + 2 * p] : 0;
                        d[2 * t + 1] = t < live ? b[(j0 + t) * ldb + 2 * p + 1] : 0;
                    }
                }
            for (int64_t p = full; p < pairs; p++, d += 32) /* odd k: the last pair's second half is 0 */
                for (int t = 0; t < 16; t++) {
                    d[2 * t] = t < live ? b[(j0 + t) * ldb + 2 * p] : 0;
                    d[2 * t + 1] = 0;
                }
        }
    }
}

void kiln__gemm_dfp_pack_b_avx512(bool kn, int64_t n, int64_t k, const int16_t *b, int64_t ldb, int16_t *dst,
                                  int64_t np, int64_t kp, int n_threads) {
    pack_job j = {kn, n, k, ldb, kp, np, b, dst, NULL};
    kiln__pool_for(np / 16, 1, n_threads, pack_b_panels, &j);
}

/* One row's codes for the 16 lanes of a forward panel: lane l of run s
 * reads x[start[s] + ofs + l], lanes outside the image (in clear) read
 * nothing and are 0. */
static inline __m256i row_by_runs(const int16_t *x, int64_t ofs, int nr, const __mmask16 *run, const int32_t *start,
                                  __mmask16 in) {
    __m256i v = _mm256_setzero_si256();
    for (int s = 0; s < nr; s++)
        if (run[s] & in)
            v = _mm256_mask_loadu_epi16(v, run[s] & in, (const void *)((uintptr_t)x + (uintptr_t)(2 * (start[s] + ofs))));
    return v;
}

/* A forward panel (lanes: 16 columns j; pairs: rows r, r + 1) without
 * gathers where the lanes' offsets run in a few runs of consecutive codes
 * (stride 1: a run per output row, or per image when the padding makes
 * consecutive rows continue one another, as 3x3 with padding 1): per row
 * and run one masked 16-code load, the taps outside the image masked off,
 * and the two rows' codes interleaved into pairs with one permute. false
 * (nothing written) for more than RUNS runs: the caller gathers. */
#define RUNS 4
#define PERIOD 64 /* taps of a kernel whose masks a panel computes once */
static bool panel_by_runs(int64_t live, __m512i ofs, const int32_t *lofs, const int16_t *x, const int32_t *pofs,
                          const int32_t *pi, const int32_t *pj, __m512i ii, __m512i jj, __m512i hv, __m512i wv,
                          int16_t *d, int64_t p0, int64_t p1, int64_t rows, int32_t period) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i base = _mm512_sub_epi32(ofs, lane); /* equal within a run */
    __mmask16 left = live >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << live) - 1), run[RUNS];
    int32_t start[RUNS];
    int nr = 0;
    while (left && nr < RUNS) {
        int l = __builtin_ctz(left);
        start[nr] = lofs[l] - l;
        run[nr] = _mm512_cmpeq_epi32_mask(base, _mm512_set1_epi32(start[nr])) & left;
        left &= (__mmask16)~run[nr++];
    }
    if (left) return false;
    /* word 2l: row r's code of lane l, word 2l + 1: row r + 1's */
    const __m512i pairs_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                                               6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    d += p0 * 32;
    if (period >= 1 && period <= PERIOD && rows >= period) {
        /* a row's taps inside the image depend only on its kernel tap (ri, rj): the masks of one kernel's
         * taps, once per panel, then row r takes tap r % period's (rows past the last: none) */
        __mmask16 tm[PERIOD];
        for (int t = 0; t < period; t++)
            tm[t] = _mm512_cmplt_epu32_mask(_mm512_add_epi32(ii, _mm512_set1_epi32(pi[t])), hv) &
                    _mm512_cmplt_epu32_mask(_mm512_add_epi32(jj, _mm512_set1_epi32(pj[t])), wv);
        int32_t t = (int32_t)(2 * p0 % period);
        for (int64_t p = p0; p < p1; p++, d += 32) {
            const int64_t q = 2 * p;
            int32_t t1 = t + 1 == period ? 0 : t + 1;
            __mmask16 in0 = q < rows ? tm[t] : 0, in1 = q + 1 < rows ? tm[t1] : 0;
            t = t1 + 1 == period ? 0 : t1 + 1;
            __m256i v0 = row_by_runs(x, pofs[q], nr, run, start, in0);
            __m256i v1 = row_by_runs(x, pofs[q + 1], nr, run, start, in1);
            _mm512_storeu_si512(d, _mm512_permutex2var_epi16(_mm512_castsi256_si512(v0), pairs_idx,
                                                             _mm512_castsi256_si512(v1)));
        }
        return true;
    }
    for (int64_t p = p0; p < p1; p++, d += 32) {
        const int64_t q = 2 * p;
        /* unsigned compares: a negative coordinate is out too */
        __mmask16 in0 = _mm512_cmplt_epu32_mask(_mm512_add_epi32(ii, _mm512_set1_epi32(pi[q])), hv) &
                        _mm512_cmplt_epu32_mask(_mm512_add_epi32(jj, _mm512_set1_epi32(pj[q])), wv);
        __mmask16 in1 = _mm512_cmplt_epu32_mask(_mm512_add_epi32(ii, _mm512_set1_epi32(pi[q + 1])), hv) &
                        _mm512_cmplt_epu32_mask(_mm512_add_epi32(jj, _mm512_set1_epi32(pj[q + 1])), wv);
        __m256i v0 = row_by_runs(x, pofs[q], nr, run, start, in0), v1 = row_by_runs(x, pofs[q + 1], nr, run, start, in1);
        _mm512_storeu_si512(d, _mm512_permutex2var_epi16(_mm512_castsi256_si512(v0), pairs_idx,
                                                         _mm512_castsi256_si512(v1)));
    }
    return true;
}

/* Lines [p0, p1) of a panel by gathers: 16 taps per masked gather (4
 * bytes at each code's address; the low half is the code), the pair packed
 * as one 32-bit word (lo | hi << 16); one gather for both taps where they
 * are neighbours in x. */
static void lines_gather(const int16_t *x, __m512i ofs, __m512i ii, __m512i jj, __m512i hv, __m512i wv,
                         const int32_t *pofs, const int32_t *pi, const int32_t *pj, int64_t p0, int64_t p1,
                         int16_t *d) {
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
    d += p0 * 32;
    for (int64_t p = p0; p < p1; p++, d += 32) {
        const int64_t q = 2 * p;
        __m512i v[2];
        if (pofs[q + 1] == pofs[q] + 1 && pi[q + 1] == pi[q] && pj[q + 1] == pj[q] + 1) {
            /* the pair's two taps are neighbours in x (the next kernel column, or the next output
             * column at stride 1): one gather reads both where both are inside */
            __m512i i = _mm512_add_epi32(ii, _mm512_set1_epi32(pi[q]));
            __m512i j = _mm512_add_epi32(jj, _mm512_set1_epi32(pj[q]));
            __mmask16 in_i = _mm512_cmplt_epu32_mask(i, hv);
            __mmask16 both = in_i & _mm512_cmplt_epu32_mask(j, _mm512_sub_epi32(wv, _mm512_set1_epi32(1)));
            __mmask16 first = in_i & _mm512_cmplt_epu32_mask(j, wv) & (__mmask16)~both;
            __mmask16 second = in_i & _mm512_cmplt_epu32_mask(_mm512_add_epi32(j, _mm512_set1_epi32(1)), wv) &
                               (__mmask16)~both;
            __m512i idx = _mm512_add_epi32(ofs, _mm512_set1_epi32(pofs[q]));
            __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), both, idx, x, 2);
            if (first | second) { /* an edge: each tap alone */
                __m512i lo = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), first, idx, x, 2);
                __m512i hi = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), second,
                                                         _mm512_add_epi32(idx, _mm512_set1_epi32(1)), x, 2);
                w = _mm512_or_si512(w, _mm512_or_si512(_mm512_and_si512(lo, lo16), _mm512_slli_epi32(hi, 16)));
            }
            _mm512_storeu_si512(d, w);
            continue;
        }
        for (int h = 0; h < 2; h++) {
            __m512i i = _mm512_add_epi32(ii, _mm512_set1_epi32(pi[q + h]));
            __m512i j = _mm512_add_epi32(jj, _mm512_set1_epi32(pj[q + h]));
            /* unsigned compares: a negative coordinate is out too */
            __mmask16 in = _mm512_cmplt_epu32_mask(i, hv) & _mm512_cmplt_epu32_mask(j, wv);
            v[h] = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), in,
                                               _mm512_add_epi32(ofs, _mm512_set1_epi32(pofs[q + h])), x, 2);
        }
        _mm512_storeu_si512(d, _mm512_or_si512(_mm512_and_si512(v[0], lo16), _mm512_slli_epi32(v[1], 16)));
    }
}

/* 16 x 16 32-bit words: v[i] word j <-> v[j] word i. */
static inline void transpose16(__m512i v[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_i32x4(v[i + j], v[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_i32x4(v[i + j], v[i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        v[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        v[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
    }
}

/* Lines [p0, p0 + 16) of a weight-gradient panel (lanes: 16 rows r; pairs:
 * columns 2p, 2p + 1) without gathers where the block's 32 columns lie in
 * a few runs of consecutive codes (stride 1): each row's 32 codes by one
 * masked load per run (a row's pairs of neighbouring columns are its
 * 32-bit words), then a 16 x 16 transpose of the words turns rows into
 * lines. cols: the real columns (later ones are padding, 0). false
 * (nothing written) for more than RUNS runs. */
static bool block_t_by_runs(const int16_t *x, const kiln_dfp_taps *t, int64_t j0, int64_t cols, int64_t p0,
                            int16_t *d) {
    const int64_t q0 = 2 * p0;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i hv = _mm512_set1_epi32(t->h), wv = _mm512_set1_epi32(t->w);
    const __m512i o0 = _mm512_loadu_si512(t->cofs + q0), o1 = _mm512_loadu_si512(t->cofs + q0 + 16);
    const __m512i i0 = _mm512_loadu_si512(t->ci + q0), i1 = _mm512_loadu_si512(t->ci + q0 + 16);
    const __m512i c0 = _mm512_loadu_si512(t->cj + q0), c1 = _mm512_loadu_si512(t->cj + q0 + 16);
    /* equal within a run */
    const __m512i b0 = _mm512_sub_epi32(o0, lane), b1 = _mm512_sub_epi32(o1, _mm512_add_epi32(lane, _mm512_set1_epi32(16)));
    int64_t live = cols - q0;
    __mmask32 left = live >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << live) - 1), run[RUNS];
    int32_t start[RUNS];
    int nr = 0;
    while (left && nr < RUNS) {
        int l = __builtin_ctz(left);
        start[nr] = t->cofs[q0 + l] - l;
        const __m512i sv = _mm512_set1_epi32(start[nr]);
        run[nr] = ((__mmask32)_mm512_cmpeq_epi32_mask(b0, sv) | (__mmask32)_mm512_cmpeq_epi32_mask(b1, sv) << 16) & left;
        left &= ~run[nr++];
    }
    if (left) return false;
    __m512i v[16];
    for (int r = 0; r < 16; r++) {
        const int32_t ri = t->ri[j0 + r], rj = t->rj[j0 + r];
        const int64_t ro = t->rofs[j0 + r];
        const __m512i iv = _mm512_set1_epi32(ri), jv = _mm512_set1_epi32(rj);
        /* unsigned compares: a negative coordinate is out too */
        __mmask32 in = (__mmask32)(_mm512_cmplt_epu32_mask(_mm512_add_epi32(i0, iv), hv) &
                                   _mm512_cmplt_epu32_mask(_mm512_add_epi32(c0, jv), wv)) |
                       (__mmask32)(_mm512_cmplt_epu32_mask(_mm512_add_epi32(i1, iv), hv) &
                                   _mm512_cmplt_epu32_mask(_mm512_add_epi32(c1, jv), wv))
                           << 16;
        v[r] = _mm512_setzero_si512();
        for (int s = 0; s < nr; s++) /* column q0 + l of the run reads x[start + l + rofs[r]] */
            if (run[s] & in)
                v[r] = _mm512_mask_loadu_epi16(v[r], run[s] & in,
                                               (const void *)((uintptr_t)x + (uintptr_t)(2 * (start[s] + ro))));
    }
    transpose16(v);
    for (int l = 0; l < 16; l++) _mm512_storeu_si512(d + (p0 + l) * 32, v[l]);
    return true;
}

/* Lines [p0, p1) of one panel of the columns (16 lanes from j0; the
 * panel at d) straight from the image (implicit im2col). b_t false: lanes
 * are columns j, pairs run over rows r (by runs of loads where it can,
 * above); b_t true: lanes are rows, pairs run over columns (by blocks of
 * 16 lines, the same way; p0 a multiple of 16). Otherwise by gathers. n
 * and k: the product's (the columns' count is n, or k when b_t). */
static void panel_im2col(bool b_t, int64_t n, int64_t k, int64_t j0, const int16_t *x, const kiln_dfp_taps *t,
                         int16_t *d, int64_t p0, int64_t p1) {
    const __m512i hv = _mm512_set1_epi32(t->h), wv = _mm512_set1_epi32(t->w);
    const int32_t *lofs = b_t ? t->rofs : t->cofs, *li = b_t ? t->ri : t->ci, *lj = b_t ? t->rj : t->cj;
    const int32_t *pofs = b_t ? t->cofs : t->rofs, *pi = b_t ? t->ci : t->ri, *pj = b_t ? t->cj : t->rj;
    const __m512i ofs = _mm512_loadu_si512(lofs + j0), ii = _mm512_loadu_si512(li + j0),
                  jj = _mm512_loadu_si512(lj + j0);
    if (!b_t) {
        if (!panel_by_runs(n - j0, ofs, lofs + j0, x, pofs, pi, pj, ii, jj, hv, wv, d, p0, p1, k, t->period))
            lines_gather(x, ofs, ii, jj, hv, wv, pofs, pi, pj, p0, p1, d);
        return;
    }
    int64_t p = p0;
    for (; p + 16 <= p1; p += 16)
        if (!block_t_by_runs(x, t, j0, k, p, d)) lines_gather(x, ofs, ii, jj, hv, wv, pofs, pi, pj, p, p + 16, d);
    lines_gather(x, ofs, ii, jj, hv, wv, pofs, pi, pj, p, p1, d);
}

/* Units of a panel's lines (a multiple of 16): a weight gradient's few
 * panels of long k split among the threads */
#define PACK_LINES 1024

static void pack_im2col_units(void *arg, int64_t u0, int64_t u1, int tid) {
    const pack_job *j = arg;
    const int64_t pairs = j->kp / 2, per = (pairs + PACK_LINES - 1) / PACK_LINES;
    (void)tid;
    for (int64_t u = u0; u < u1; u++) {
        int64_t j0 = u / per * 16, p0 = u % per * PACK_LINES, p1 = p0 + PACK_LINES < pairs ? p0 + PACK_LINES : pairs;
        panel_im2col(j->kn, j->n, j->k, j0, j->b, j->t, j->dst + (j0 / 16) * pairs * 32, p0, p1);
    }
}

void kiln__gemm_dfp_pack_b_im2col_avx512(bool b_t, int64_t n, int64_t k, const int16_t *x, const kiln_dfp_taps *t,
                                         int16_t *dst, int64_t np, int64_t kp, int n_threads) {
    const int64_t per = (kp / 2 + PACK_LINES - 1) / PACK_LINES;
    pack_job j = {b_t, n, k, 0, kp, np, x, dst, t};
    kiln__pool_for(np / 16 * per, 1, n_threads, pack_im2col_units, &j);
}

#define TILE(np, mr)                                                                                           \
    static __attribute__((noinline)) void tile##np##_##mr(const kiln_dfp_packed *p, const int16_t *a,             \
                                                          const int16_t *b, float *c, int64_t ldc, int64_t rows,  \
                                                          int64_t cols) {                                         \
        tile_n(p, a, b, np, mr, c, ldc, rows, cols);                                                             \
    }
TILE(1, 2)
TILE(2, 2)
TILE(3, 2)
TILE(4, 2)
TILE(1, 4)
TILE(2, 4)
TILE(3, 4)
TILE(4, 4)
TILE(1, 6)
TILE(2, 6)
TILE(3, 6)
TILE(4, 6)

/* B's columns packed by each unit from the image, into its thread's
 * buffer (bufs + thread * stride), instead of all of B before the kernel:
 * a 64-column block of the columns is packed where the tiles read it
 * (L1 for a forward's k), never written to memory and read back. */
typedef struct conv_b {
    bool b_t;
    const int16_t *x;
    const kiln_dfp_taps *t;
    int16_t *bufs;
    int64_t stride;
} conv_b;

/* The kernel's units and what they read. */
typedef struct units_job {
    const kiln_dfp_packed *p;
    float *c;
    int64_t ldc;
    const conv_b *cb;
    int64_t group, bpu, runs;
} units_job;

static void units(void *arg, int64_t u0, int64_t u1, int tid) {
    typedef void (*tile_fn)(const kiln_dfp_packed *, const int16_t *, const int16_t *, float *, int64_t, int64_t,
                            int64_t);
    static const tile_fn tiles[3][5] = {{NULL, tile1_2, tile2_2, tile3_2, tile4_2},
                                        {NULL, tile1_4, tile2_4, tile3_4, tile4_4},
                                        {NULL, tile1_6, tile2_6, tile3_6, tile4_6}};
    const units_job *J = arg;
    const kiln_dfp_packed *p = J->p;
    const conv_b *cb = J->cb;
    float *c = J->c;
    const int64_t ldc = J->ldc, group = J->group, bpu = J->bpu, runs = J->runs;
    const int64_t pairs = p->kp / 2, mt = p->mp / MR, nbk = (p->np + 63) / 64;
    int16_t *buf = cb ? cb->bufs + tid * cb->stride : NULL;
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u % runs, t0 = u / runs * group, t1 = t0 + group < mt ? t0 + group : mt;
        int64_t b1 = (r + 1) * bpu < nbk ? (r + 1) * bpu : nbk;
        for (int64_t jb = r * bpu; jb < b1; jb++) {
            int64_t j0 = jb * 64, cols = p->n - j0 < 64 ? p->n - j0 : 64;
            int np = (int)((p->np - j0 < 64 ? p->np - j0 : 64) / 16);
            const int16_t *b = p->b + (j0 / 16) * pairs * 32;
            if (cb) {
                for (int q = 0; q < np; q++)
                    panel_im2col(cb->b_t, p->n, p->k, j0 + 16 * q, cb->x, cb->t, buf + q * pairs * 32, 0, pairs);
                b = buf;
            }
            for (int64_t t = t0; t < t1; t++) {
                int64_t i0 = t * MR, rows = p->m - i0 < MR ? p->m - i0 : MR;
                if (rows <= 0) continue;
                const int16_t *a = p->a + t * pairs * MR * 2;
                tiles[(rows - 1) / 2][np](p, a, b, c + i0 * ldc + j0, ldc, rows, cols);
            }
        }
    }
}

static void run_units(const kiln_dfp_packed *p, float *c, int64_t ldc, const conv_b *cb, int n_threads) {
    const int64_t pairs = p->kp / 2, mt = p->mp / MR, nbk = (p->np + 63) / 64;
    const int64_t nt = n_threads < 1 ? 1 : n_threads;
    /* a block packed in the unit serves every row tile (packed once); with
     * B packed before, fewer tiles a unit where the blocks are too few to
     * keep the threads busy (a weight gradient's 16 or 144 columns) */
    int64_t group = cb ? mt : GROUP;
    if (!cb && nt > 1 && (mt + GROUP - 1) / GROUP * nbk < 4 * nt)
        group = (mt * nbk + 4 * nt - 1) / (4 * nt) < 1 ? 1 : (mt * nbk + 4 * nt - 1) / (4 * nt);
    const int64_t gt = mt < group ? mt : group, groups = (mt + group - 1) / group;
    /* 64-column blocks per unit: enough k pairs of work that handing a
     * unit out costs little beside it (conv1's 9 taps made 784 units of
     * 15 tile pairs each, and libgomp's dispatch took a sixth of the
     * product), yet at least four units a thread where there are blocks
     * for them */
    const int64_t per_block = gt * pairs;
    int64_t bpu = (UNIT_PAIRS + per_block - 1) / per_block;
    if (bpu > nbk * groups / (4 * nt)) bpu = nbk * groups / (4 * nt);
    if (bpu < 1) bpu = 1;
    const int64_t runs = (nbk + bpu - 1) / bpu;
    units_job j = {p, c, ldc, cb, group, bpu, runs};
    kiln__pool_for(groups * runs, 1, n_threads, units, &j);
}

void kiln__gemm_dfp_kernel_avx512vnni(const kiln_dfp_packed *p, float *c, int64_t ldc, int n_threads) {
    run_units(p, c, ldc, NULL, n_threads);
}

void kiln__gemm_dfp_kernel_im2col_avx512vnni(const kiln_dfp_packed *p, float *c, int64_t ldc, bool b_t,
                                             const int16_t *x, const kiln_dfp_taps *t, int16_t *bufs,
                                             int64_t stride, int n_threads) {
    const conv_b cb = {b_t, x, t, bufs, stride};
    run_units(p, c, ldc, &cb, n_threads);
}
#endif
