/* nn_attention_avx2.c — blocked attention's f32 tile loops for AVX2 + FMA:
 * a 4 x 16 register-tiled multiply (masked loads/stores for the edges)
 * and a vectorized exp. Twins of nn_attention_loops.c's scalar loops. */
#if defined(__x86_64__)
#include "nn_attention_simd.h"

#include <immintrin.h>
#include <math.h>

/* exp(x): 2^n * p(r), x = n ln2 + r, |r| <= ln2/2, p the degree-6 Taylor
 * polynomial; below ln(FLT_MIN) the result is 0 (so exp(-inf) = 0). */
static inline __m256 exp8(__m256 x) {
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n >= -126 here, so n + 127 is a valid exponent field */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Lanes below w are on (all lanes for w >= 8). */
static inline __m256i tail_mask(int64_t w) {
    static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    int64_t s = w >= 8 ? 0 : w <= 0 ? 8 : 8 - w;
    return _mm256_loadu_si256((const __m256i *)(ones + s));
}

static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float exp_sum(float *x, int64_t n, float scale, float sub) {
    __m256 vs = _mm256_set1_ps(scale), vsub = _mm256_set1_ps(sub), acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(x + j), vs, vsub));
        _mm256_storeu_ps(x + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (j < n) {
        __m256i m = tail_mask(n - j);
        __m256 e = exp8(_mm256_fmsub_ps(_mm256_maskload_ps(x + j, m), vs, vsub));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x + j, m, e);
        acc = _mm256_add_ps(acc, e);
    }
    return hsum(acc);
}

static float row_max(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; j < n; j++)
        if (x[j] > r) r = x[j];
    return r;
}

static inline void store_row(float *c, __m256 v0, __m256 v1, __m256i m0, __m256i m1, bool acc) {
    if (acc) {
        v0 = _mm256_add_ps(v0, _mm256_maskload_ps(c, m0));
        v1 = _mm256_add_ps(v1, _mm256_maskload_ps(c + 8, m1));
    }
    _mm256_maskstore_ps(c, m0, v0);
    _mm256_maskstore_ps(c + 8, m1, v1);
}

/* Loads of one row of B's 16 columns: plain when all are inside. */
#define LOADB(p, full, m) ((full) ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), (m)))

/* Rows i..i+rows-1 (rows 4 or 1) of the 16 columns at bj; `full` is a
 * constant at each call so the compiler drops the masks when it can. */
static inline __attribute__((always_inline)) void tile(int rows, const float *a, int64_t ars, int64_t acs, const float *bj,
                                                       int64_t ldb, int64_t k, float *ci, int64_t ldc, __m256i m0,
                                                       __m256i m1, bool full, bool acc) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    const float *a0 = a, *a1 = a0 + ars, *a2 = a1 + ars, *a3 = a2 + ars;
    for (int64_t p = 0; p < k; p++) {
        const float *bp = bj + p * ldb;
        __m256 b0 = LOADB(bp, full, m0), b1 = LOADB(bp + 8, full, m1), x;
        x = _mm256_broadcast_ss(a0 + p * acs), c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
        if (rows == 1) continue;
        x = _mm256_broadcast_ss(a1 + p * acs), c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a2 + p * acs), c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a3 + p * acs), c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    }
    store_row(ci, c00, c01, m0, m1, acc);
    if (rows == 1) return;
    store_row(ci + ldc, c10, c11, m0, m1, acc);
    store_row(ci + 2 * ldc, c20, c21, m0, m1, acc);
    store_row(ci + 3 * ldc, c30, c31, m0, m1, acc);
}

static void gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                 float *c, int64_t ldc, bool acc) {
    for (int64_t j = 0; j < n; j += 16) {
        __m256i m0 = tail_mask(n - j), m1 = tail_mask(n - j - 8);
        int64_t i = 0;
        if (n - j >= 16) {
            for (; i + 4 <= m; i += 4) tile(4, a + i * ars, ars, acs, b + j, ldb, k, c + i * ldc + j, ldc, m0, m1, true, acc);
            for (; i < m; i++) tile(1, a + i * ars, ars, acs, b + j, ldb, k, c + i * ldc + j, ldc, m0, m1, true, acc);
        } else {
            for (; i + 4 <= m; i += 4)
                tile(4, a + i * ars, ars, acs, b + j, ldb, k, c + i * ldc + j, ldc, m0, m1, false, acc);
            for (; i < m; i++) tile(1, a + i * ars, ars, acs, b + j, ldb, k, c + i * ldc + j, ldc, m0, m1, false, acc);
        }
    }
}

const kiln_attn_ops_f32 kiln__attn_ops_f32_avx2 = {gemm, exp_sum, row_max};
#endif
