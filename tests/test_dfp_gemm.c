/* test_dfp_gemm.c — the DFP GEMM (backends/cpu/gemm_dfp.h): the chunk
 * bound, no overflow on adversarial operands (every value +-32767 or
 * +-8191, reductions up to k = 2^16), the path of every SIMD variant
 * (kt_simd.h) equal to the scalar reference bit for bit on odd shapes, strides, every operand layout ([m, k]
 * or [k, m] A, [n, k] or [k, n] B) and 1 or 2 threads, and a
 * quantize-then-multiply product within the bound the representation
 * implies of the exact (double) product. */
#include "kt.h"
#include "kt_simd.h"

#include "../backends/cpu/gemm_dfp.h"
#include "../backends/cpu/coders.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint32_t next32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

KT_TEST(dfp_gemm_chunk_bound) {
    KT_CHECK(kiln__gemm_dfp_chunk_pairs(32767, 32767) == 1, "full range: one pair");
    KT_CHECK(kiln__gemm_dfp_chunk_pairs(8191, 8191) == 16, "14 bits: 16 pairs");
    KT_CHECK(kiln__gemm_dfp_chunk_pairs(8191, 32767) == 4, "14 x 16 bits: 4 pairs");
    KT_CHECK(kiln__gemm_dfp_chunk_pairs(0, 32767) >= (1 << 20), "zero: unbounded");
    for (int a = 1; a <= 32767; a += 97) /* the bound is tight: one more pair could wrap */
        for (int b = a; b <= 32767; b += 1013) {
            int64_t cp = kiln__gemm_dfp_chunk_pairs(a, b);
            KT_REQUIRE(2 * cp * (int64_t)a * b <= INT32_MAX && (cp == 1 || 2 * (cp + 1) * (int64_t)a * b > INT32_MAX),
                       "a %d b %d cp %lld", a, b, (long long)cp);
        }
}

/* C of constant-sign operands: every product has one sign, so a chunk too
 * long would wrap and flip the result's sign. The exact sum is k a b; the
 * f32 accumulation of k / (2 cp) chunk sums is within (chunks + 1) 2^-24. */
static void adversarial(int v, int64_t m, int64_t n, int64_t k) {
    int16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(n * k) * 2);
    for (int64_t i = 0; i < m * k; i++) a[i] = (int16_t)(i / k % 2 ? -v : v); /* rows alternate in sign */
    for (int64_t i = 0; i < n * k; i++) b[i] = (int16_t)v;
    float *c = malloc((size_t)(m * n) * 4), *r = malloc((size_t)(m * n) * 4);
    KT_OK(kiln__gemm_dfp(m, n, k, a, k, v, -3, b, k, v, 1, c, n, 2));
    KT_OK(kiln__gemm_dfp_ref(m, n, k, a, k, v, -3, b, k, v, 1, r, n, 1));
    double exact = (double)k * v * v * 0.25, chunks = ceil((double)k / (2.0 * kiln__gemm_dfp_chunk_pairs(v, v)));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = i % 2 ? -exact : exact, got = c[i * n + j];
            KT_REQUIRE(fabs(got - want) <= (chunks + 1) * 0x1p-24 * exact, "v %d k %lld: c[%lld,%lld] %.9g vs %.9g", v,
                       (long long)k, (long long)i, (long long)j, got, want);
            KT_REQUIRE(got == r[i * n + j], "simd %.9g vs scalar %.9g", got, r[i * n + j]);
        }
    free(a), free(b), free(c), free(r);
}

KT_TEST(dfp_gemm_adversarial_no_overflow) {
    KT_FOR_EACH_SIMD(v) {
        adversarial(32767, 3, 17, 1 << 16); /* full range: chunks of one pair */
        adversarial(8191, 7, 33, 1 << 16);  /* 14 bits: chunks of 32, each 2,146,959,392 */
        adversarial(8191, 6, 16, 33);       /* one full chunk and one product */
        adversarial(32767, 1, 1, 1);
    }
}

static void check_layout(bool akm, bool bkn, int64_t m, int64_t n, int64_t k, int pad, int amax, int bmax, int nt) {
    int64_t arows = akm ? k : m, brows = bkn ? k : n;
    int64_t lda = (akm ? m : k) + pad, ldb = (bkn ? n : k) + 2 * pad, ldc = n + pad;
    int16_t *a = malloc((size_t)(arows * lda) * 2 + 2), *b = malloc((size_t)(brows * ldb) * 2 + 2);
    for (int64_t i = 0; i < arows * lda; i++) a[i] = (int16_t)((int)(next32() % (2u * amax + 1)) - amax);
    for (int64_t i = 0; i < brows * ldb; i++) b[i] = (int16_t)((int)(next32() % (2u * bmax + 1)) - bmax);
    float *c = malloc((size_t)(m * ldc) * 4), *r = malloc((size_t)(m * ldc) * 4);
    for (int64_t i = 0; i < m * ldc; i++) c[i] = r[i] = 7.0f;
    KT_OK(kiln__gemm_dfp_t(akm, bkn, m, n, k, a, lda, amax, -20, b, ldb, bmax, 5, c, ldc, nt));
    KT_OK(kiln__gemm_dfp_ref_t(akm, bkn, m, n, k, a, lda, amax, -20, b, ldb, bmax, 5, r, ldc, 1));
    KT_REQUIRE(!memcmp(c, r, (size_t)(m * ldc) * 4),
               "layout %d%d m %lld n %lld k %lld pad %d bounds %d %d threads %d differs", akm, bkn, (long long)m,
               (long long)n, (long long)k, pad, amax, bmax, nt);
    if (akm || bkn) { /* the reference itself against the NT reference of the transposed copies */
        int16_t *at = malloc((size_t)(m * k) * 2 + 2), *bt = malloc((size_t)(n * k) * 2 + 2);
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++) at[i * k + p] = akm ? a[p * lda + i] : a[i * lda + p];
        for (int64_t j = 0; j < n; j++)
            for (int64_t p = 0; p < k; p++) bt[j * k + p] = bkn ? b[p * ldb + j] : b[j * ldb + p];
        KT_OK(kiln__gemm_dfp_ref(m, n, k, at, k, amax, -20, bt, k, bmax, 5, c, ldc, 1));
        KT_REQUIRE(!memcmp(c, r, (size_t)(m * ldc) * 4), "layout %d%d: reference differs from NT", akm, bkn);
        free(at), free(bt);
    }
    free(a), free(b), free(c), free(r);
}

static void check_shape(int64_t m, int64_t n, int64_t k, int pad, int amax, int bmax, int nt) {
    for (int l = 0; l < 4; l++) check_layout(l & 1, l & 2, m, n, k, pad, amax, bmax, nt);
}

KT_TEST(dfp_gemm_simd_equals_scalar) {
    static const int64_t sz[] = {1, 5, 6, 7, 16, 17, 33, 64, 100};
    int ns = (int)(sizeof sz / sizeof *sz);
    KT_FOR_EACH_SIMD(v) {
        for (int i = 0; i < ns; i++)
            for (int j = 0; j < ns; j += 2)
                check_shape(sz[i], sz[j], sz[(i + j) % ns] + 3, (i + j) % 3, 8191, 8191, 1 + i % 2);
        check_shape(50, 70, 1001, 1, 32767, 32767, 2);
        check_shape(130, 96, 515, 0, 8191, 8191, 2);
        check_shape(64, 64, 300, 0, 100, 30000, 2);
    }
}

/* Quantize f32 operands to 14 bits (one exponent each), multiply, compare
 * with the exact product of the f32 values. With d = 2^(e-1) the largest
 * rounding error of an operand, |a b - qa qb 2^(ea+eb)| <= |a| db + |b| da
 * + da db per product; the f32 fold adds at most (chunks + 1) 2^-24 of
 * sum |qa qb| 2^(ea+eb). */
KT_TEST(dfp_gemm_within_representation_bound) {
    int64_t m = 37, n = 45, k = 700;
    float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(n * k) * 4), *c = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)((int)(next32() % 20001) - 10000) * 1e-4f * (i % 13 ? 1 : 20);
    for (int64_t i = 0; i < n * k; i++) b[i] = (float)((int)(next32() % 20001) - 10000) * 3e-6f;
    int16_t *qa = malloc((size_t)(m * k) * 2), *qb = malloc((size_t)(n * k) * 2);
    int ea, eb, ma, mb;
    kiln__dfp_quantize(a, m * k, 14, qa, &ea, &ma, false, 0);
    kiln__dfp_quantize(b, n * k, 14, qb, &eb, &mb, false, 0);
    KT_CHECK(ma <= 8191 && mb <= 8191 && ma >= 4096 && mb >= 4096, "bounds %d %d", ma, mb);
    KT_OK(kiln__gemm_dfp(m, n, k, qa, k, ma, ea, qb, k, mb, eb, c, n, 2));
    double da = ldexp(1, ea - 1), db = ldexp(1, eb - 1), chunks = ceil(k / (2.0 * kiln__gemm_dfp_chunk_pairs(ma, mb)));
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double exact = 0, bound = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = a[i * k + p], y = b[j * k + p];
                exact += x * y;
                bound += fabs(x) * db + fabs(y) * da + da * db;
                mag += fabs((double)qa[i * k + p] * qb[j * k + p]);
            }
            bound += (chunks + 1) * 0x1p-24 * mag * ldexp(1, ea + eb);
            double err = fabs(c[i * n + j] - exact);
            KT_REQUIRE(err <= bound, "c[%lld,%lld] %.9g vs %.9g: error %g > bound %g", (long long)i, (long long)j,
                       c[i * n + j], exact, err, bound);
            worst = fmax(worst, err / bound);
        }
    KT_CHECK(worst > 0.0, "the bound is not vacuous for a zero error everywhere");
    free(a), free(b), free(c), free(qa), free(qb);
}

KT_TEST(dfp_gemm_edge_cases) {
    int16_t a[4] = {1, 2, 3, 4};
    float c[6] = {7, 7, 7, 7, 7, 7};
    KT_OK(kiln__gemm_dfp(2, 3, 0, a, 1, 4, 0, a, 1, 4, 0, c, 3, 1));
    for (int i = 0; i < 6; i++) KT_CHECK(c[i] == 0.0f, "k = 0: c[%d] = %g", i, c[i]);
    KT_CHECK(kiln__gemm_dfp(-1, 3, 2, a, 2, 4, 0, a, 2, 4, 0, c, 3, 1) == KILN_ERR_ARG, "negative m accepted");
    KT_CHECK(kiln__gemm_dfp(2, 2, 4, a, 2, 4, 0, a, 4, 4, 0, c, 2, 1) == KILN_ERR_ARG, "lda < k accepted");
}

/* kiln__gemm_dfp_add_t (a weight gradient's product adding into the
 * gradient, core/fuse.c) equals the product added to C afterwards, bit for
 * bit: every layout, edge sizes, one and two threads, and the scalar path
 * (k = 0 adds nothing). */
KT_TEST(dfp_gemm_add_equals_product_then_add) {
    static const int64_t sz[][3] = {{1, 1, 1}, {7, 17, 33}, {16, 9, 700}, {37, 70, 64}, {130, 96, 515}};
    for (int si = 0; si < 5; si++)
        for (int l = 0; l < 4; l++) {
            bool akm = l & 1, bkn = l & 2;
            int64_t m = sz[si][0], n = sz[si][1], k = sz[si][2], lda = akm ? m : k, ldb = bkn ? n : k;
            int16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(n * k) * 2);
            float *c = malloc((size_t)(m * n) * 4), *want = malloc((size_t)(m * n) * 4), *prod = malloc((size_t)(m * n) * 4);
            for (int64_t i = 0; i < m * k; i++) a[i] = (int16_t)((int)(next32() % 16383) - 8191);
            for (int64_t i = 0; i < n * k; i++) b[i] = (int16_t)((int)(next32() % 16383) - 8191);
            for (int64_t i = 0; i < m * n; i++) c[i] = (float)((int)(next32() % 2001) - 1000) * 0x1p-7f;
            KT_OK(kiln__gemm_dfp_t(akm, bkn, m, n, k, a, lda, 8191, -20, b, ldb, 8191, -3, prod, n, 1));
            for (int64_t i = 0; i < m * n; i++) want[i] = c[i] + prod[i];
            for (int nt = 1; nt <= 2; nt++) {
                float *got = malloc((size_t)(m * n) * 4);
                memcpy(got, c, (size_t)(m * n) * 4);
                KT_OK(kiln__gemm_dfp_add_t(akm, bkn, m, n, k, a, lda, 8191, -20, b, ldb, 8191, -3, got, n, nt));
                KT_CHECK(!memcmp(got, want, (size_t)(m * n) * 4), "m %lld n %lld k %lld layout %d, %d threads: differs",
                         (long long)m, (long long)n, (long long)k, l, nt);
                memcpy(got, c, (size_t)(m * n) * 4);
                KT_OK(kiln__gemm_dfp_add_t(akm, bkn, m, n, 0, a, lda, 8191, -20, b, ldb, 8191, -3, got, n, nt));
                KT_CHECK(!memcmp(got, c, (size_t)(m * n) * 4), "k = 0 changed C");
                free(got);
            }
            free(a), free(b), free(c), free(want), free(prod);
        }
}
