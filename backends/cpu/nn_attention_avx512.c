/* nn_attention_avx512.c — blocked attention's f32 tile loops for AVX-512:
 * a register-tiled multiply, 6 x 64 for full column blocks (4 x 64 with
 * masked loads/stores for the edges, 8 x 16 for narrow tiles)
 * and a vectorized exp. Twins of nn_attention_loops.c's scalar loops. */
#if defined(__x86_64__)
#include "nn_attention_simd.h"

#include <immintrin.h>
#include <math.h>

/* exp(x) to ~2 ulp for x <= 0-ish inputs: 2^n * p(r), x = n ln2 + r,
 * |r| <= ln2/2, p the degree-6 Taylor polynomial; below ln(FLT_MIN) the
 * result is 0 (so exp(-inf) = 0). */
static inline __m512 exp16(__m512 x) {
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps((__mmask16)~under, p, n);
}

static __mmask16 tail_mask(int64_t w) { return w >= 16 ? (__mmask16)0xffff : w <= 0 ? 0 : (__mmask16)((1u << w) - 1); }

static float exp_sum(float *x, int64_t n, float scale, float sub) {
    __m512 vs = _mm512_set1_ps(scale), vsub = _mm512_set1_ps(sub), acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = tail_mask(n - j);
        __m512 e = exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + j), vs, vsub));
        e = _mm512_maskz_mov_ps(m, e);
        _mm512_mask_storeu_ps(x + j, m, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

static float row_max(const float *x, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, tail_mask(n - j), x + j));
    return _mm512_reduce_max_ps(m);
}

/* One row of C: 4 vectors (by value, so the tile stays in registers). */
static inline __attribute__((always_inline)) void store_row(float *c, __m512 v0, __m512 v1, __m512 v2, __m512 v3,
                                                            const __mmask16 *m, bool acc) {
    __m512 v[4] = {v0, v1, v2, v3};
    for (int q = 0; q < 4; q++) {
        if (!m[q]) break;
        __m512 r = acc ? _mm512_add_ps(v[q], _mm512_maskz_loadu_ps(m[q], c + 16 * q)) : v[q];
        _mm512_mask_storeu_ps(c + 16 * q, m[q], r);
    }
}

#define ZERO4(c) __m512 c##0 = _mm512_setzero_ps(), c##1 = c##0, c##2 = c##0, c##3 = c##0
#define FMA4(x, c)                                                                                            \
    c##0 = _mm512_fmadd_ps(x, b0, c##0), c##1 = _mm512_fmadd_ps(x, b1, c##1), c##2 = _mm512_fmadd_ps(x, b2, c##2), \
    c##3 = _mm512_fmadd_ps(x, b3, c##3)

/* C's columns [j, n) when at most 16, 8 rows at a time: a decoding step's
 * K Q^T tile is as wide as a group of heads (8 for most GQA models), and
 * the 4 x 64 tile spent 3 of every 4 FMAs on masked-off lanes. Each lane
 * sums over p in the same order as there. */
static void gemm_narrow(int64_t m, int64_t j, int64_t n, int64_t k, const float *a, int64_t ars, int64_t acs,
                        const float *b, int64_t ldb, float *c, int64_t ldc, bool acc) {
    const __mmask16 mk = tail_mask(n - j);
    for (int64_t i = 0; i < m; i += 8) {
        const int rows = m - i < 8 ? (int)(m - i) : 8;
        __m512 r[8];
        for (int q = 0; q < 8; q++) r[q] = _mm512_setzero_ps();
        const float *ai = a + i * ars;
        for (int64_t p = 0; p < k; p++) {
            const __m512 bp = _mm512_maskz_loadu_ps(mk, b + p * ldb + j);
            for (int q = 0; q < rows; q++) r[q] = _mm512_fmadd_ps(_mm512_set1_ps(ai[q * ars + p * acs]), bp, r[q]);
        }
        for (int q = 0; q < rows; q++) {
            float *ci = c + (i + q) * ldc + j;
            _mm512_mask_storeu_ps(ci, mk, acc ? _mm512_add_ps(r[q], _mm512_maskz_loadu_ps(mk, ci)) : r[q]);
        }
    }
}

/* One full row of C: plain loads and stores. */
static inline __attribute__((always_inline)) void store_full(float *c, __m512 v0, __m512 v1, __m512 v2, __m512 v3,
                                                             bool acc) {
    if (acc) {
        v0 = _mm512_add_ps(v0, _mm512_loadu_ps(c)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(c + 16));
        v2 = _mm512_add_ps(v2, _mm512_loadu_ps(c + 32)), v3 = _mm512_add_ps(v3, _mm512_loadu_ps(c + 48));
    }
    _mm512_storeu_ps(c, v0), _mm512_storeu_ps(c + 16, v1), _mm512_storeu_ps(c + 32, v2), _mm512_storeu_ps(c + 48, v3);
}

/* A column block 64 wide, 6 rows at a time: 24 accumulators take 10 loads
 * (4 of B, 6 broadcasts) where the 4 x 64 tile took 8 for 16, and no
 * masks. Returns the rows done. Each lane sums over p in the same order
 * as the 4 x 64 tile. */
static int64_t gemm_rows6(int64_t m, int64_t k, const float *a, int64_t ars, int64_t acs, const float *bj, int64_t ldb,
                          float *c, int64_t ldc, bool acc) {
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) {
        ZERO4(r0);
        ZERO4(r1);
        ZERO4(r2);
        ZERO4(r3);
        ZERO4(r4);
        ZERO4(r5);
        const float *ai = a + i * ars;
        for (int64_t p = 0; p < k; p++) {
            const float *bp = bj + p * ldb, *ap = ai + p * acs;
            __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
            __m512 b2 = _mm512_loadu_ps(bp + 32), b3 = _mm512_loadu_ps(bp + 48);
            __m512 x = _mm512_set1_ps(ap[0]);
            FMA4(x, r0);
            x = _mm512_set1_ps(ap[ars]);
            FMA4(x, r1);
            x = _mm512_set1_ps(ap[2 * ars]);
            FMA4(x, r2);
            x = _mm512_set1_ps(ap[3 * ars]);
            FMA4(x, r3);
            x = _mm512_set1_ps(ap[4 * ars]);
            FMA4(x, r4);
            x = _mm512_set1_ps(ap[5 * ars]);
            FMA4(x, r5);
        }
        float *ci = c + i * ldc;
        store_full(ci, r00, r01, r02, r03, acc);
        store_full(ci + ldc, r10, r11, r12, r13, acc);
        store_full(ci + 2 * ldc, r20, r21, r22, r23, acc);
        store_full(ci + 3 * ldc, r30, r31, r32, r33, acc);
        store_full(ci + 4 * ldc, r40, r41, r42, r43, acc);
        store_full(ci + 5 * ldc, r50, r51, r52, r53, acc);
    }
    return i;
}

static void gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                 float *c, int64_t ldc, bool acc) {
    for (int64_t j = 0; j < n; j += 64) {
        if (n - j <= 16) {
            gemm_narrow(m, j, n, k, a, ars, acs, b, ldb, c, ldc, acc);
            break;
        }
        __mmask16 mk[4];
        for (int q = 0; q < 4; q++) mk[q] = tail_mask(n - j - 16 * q);
        __mmask16 m0 = mk[0], m1 = mk[1], m2 = mk[2], m3 = mk[3];
        const float *bj = b + j;
        int64_t i = n - j >= 64 ? gemm_rows6(m, k, a, ars, acs, bj, ldb, c + j, ldc, acc) : 0;
        for (; i + 4 <= m; i += 4) {
            ZERO4(r0);
            ZERO4(r1);
            ZERO4(r2);
            ZERO4(r3);
            const float *a0 = a + i * ars, *a1 = a0 + ars, *a2 = a1 + ars, *a3 = a2 + ars;
            for (int64_t p = 0; p < k; p++) {
                const float *bp = bj + p * ldb;
                __m512 b0 = _mm512_maskz_loadu_ps(m0, bp), b1 = _mm512_maskz_loadu_ps(m1, bp + 16);
                __m512 b2 = _mm512_maskz_loadu_ps(m2, bp + 32), b3 = _mm512_maskz_loadu_ps(m3, bp + 48);
                __m512 x0 = _mm512_set1_ps(a0[p * acs]), x1 = _mm512_set1_ps(a1[p * acs]);
                FMA4(x0, r0);
                FMA4(x1, r1);
                __m512 x2 = _mm512_set1_ps(a2[p * acs]), x3 = _mm512_set1_ps(a3[p * acs]);
                FMA4(x2, r2);
                FMA4(x3, r3);
            }
            float *ci = c + i * ldc + j;
            store_row(ci, r00, r01, r02, r03, mk, acc);
            store_row(ci + ldc, r10, r11, r12, r13, mk, acc);
            store_row(ci + 2 * ldc, r20, r21, r22, r23, mk, acc);
            store_row(ci + 3 * ldc, r30, r31, r32, r33, mk, acc);
        }
        for (; i < m; i++) {
            ZERO4(r0);
            const float *a0 = a + i * ars;
            for (int64_t p = 0; p < k; p++) {
                const float *bp = bj + p * ldb;
                __m512 b0 = _mm512_maskz_loadu_ps(m0, bp), b1 = _mm512_maskz_loadu_ps(m1, bp + 16);
                __m512 b2 = _mm512_maskz_loadu_ps(m2, bp + 32), b3 = _mm512_maskz_loadu_ps(m3, bp + 48);
                __m512 x0 = _mm512_set1_ps(a0[p * acs]);
                FMA4(x0, r0);
            }
            store_row(c + i * ldc + j, r00, r01, r02, r03, mk, acc);
        }
    }
}

const kiln_attn_ops_f32 kiln__attn_ops_f32_avx512 = {gemm, exp_sum, row_max};
#endif
