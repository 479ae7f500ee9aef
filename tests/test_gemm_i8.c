/* test_gemm_i8.c — the int8 GEMM (backends/cpu/gemm_i8.h): the path of
 * every SIMD variant of this machine (kt_simd.h: AMX-INT8, AVX512-VNNI
 * with and without AVX-VNNI, AVX-VNNI alone, ARM64 dotprod, plain NEON)
 * must give exactly the scalar result, and the scalar path exactly a naive
 * 64-bit sum: odd sizes (k not a multiple of 4 or 64), strided operands,
 * extreme values, 1 and 2 threads. */
#include "kt.h"
#include "kt_simd.h"

#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/gemm_i8.h"

#include <stdlib.h>
#include <string.h>

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* rows x ld bytes: random, or (extreme) mostly -128 / 127 */
static int8_t *make(int64_t rows, int64_t ld, uint64_t seed, bool extreme) {
    int8_t *x = malloc((size_t)(rows * ld) + 1);
    uint64_t s = seed;
    for (int64_t i = 0; i < rows * ld; i++) {
        uint64_t r = lcg(&s);
        x[i] = extreme ? (r % 5 == 0 ? (int8_t)(r >> 8) : r % 2 ? -128 : 127) : (int8_t)(r >> 3);
    }
    return x;
}

static int32_t *run(const kiln_cpu_caps *caps, int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda,
                    const int8_t *b, int64_t ldb, int64_t ldc, int nt) {
    int32_t *c = malloc((size_t)(m * ldc) * sizeof *c);
    for (int64_t i = 0; i < m * ldc; i++) c[i] = 0x5a5a5a5a; /* garbage: must be overwritten, padding kept */
    kiln_cpu_caps saved = *kiln__cpu_caps();
    kiln__cpu_caps_set(caps);
    kiln_status s = kiln__gemm_s8(m, n, k, a, lda, b, ldb, c, ldc, nt);
    kiln__cpu_caps_set(&saved);
    if (s != KILN_OK) {
        free(c);
        return NULL;
    }
    return c;
}

/* first mismatch of got against want over m whole rows of ldc (the
 * padding past n too: it must keep its garbage), or -1 */
static int64_t mismatch(const int32_t *got, const int32_t *want, int64_t m, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++)
            if (got[i * ldc + j] != want[i * ldc + j]) return i * ldc + j;
    return -1;
}

static void check_size(int64_t m, int64_t n, int64_t k, int64_t pad, bool extreme) {
    int64_t lda = k + pad, ldb = k + 2 * pad, ldc = n + pad;
    int8_t *a = make(m, lda, (uint64_t)(m * 1000 + k), extreme), *b = make(n, ldb, (uint64_t)(n * 7 + k + 1), extreme);
    kiln_cpu_caps scalar = *kiln__cpu_caps_detected();
    kiln__cpu_caps_limit(&scalar, KILN_SIMD_SCALAR);
    int32_t *want = run(&scalar, m, n, k, a, lda, b, ldb, ldc, 1);
    KT_REQUIRE(want, "scalar %lldx%lldx%lld: %s", (long long)m, (long long)n, (long long)k, kiln_last_error());
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t s = 0;
            for (int64_t p = 0; p < k; p++) s += a[i * lda + p] * b[j * ldb + p];
            KT_REQUIRE(want[i * ldc + j] == (int32_t)s, "scalar %lldx%lldx%lld [%lld,%lld]: %d, want %lld",
                       (long long)m, (long long)n, (long long)k, (long long)i, (long long)j, want[i * ldc + j],
                       (long long)s);
        }
    int32_t *want2 = run(&scalar, m, n, k, a, lda, b, ldb, ldc, 2);
    KT_CHECK(want2 && mismatch(want2, want, m, ldc) < 0, "scalar with 2 threads differs");
    free(want2);
    KT_FOR_EACH_SIMD(v)
        for (int nt = 1; nt <= 2; nt++) {
            int32_t *got = run(&v.caps, m, n, k, a, lda, b, ldb, ldc, nt);
            KT_CHECK(got, "%lldx%lldx%lld: %s", (long long)m, (long long)n, (long long)k, kiln_last_error());
            if (!got) continue;
            int64_t at = mismatch(got, want, m, ldc);
            KT_CHECK(at < 0, "%lldx%lldx%lld pad %lld%s threads %d: C[%lld, %lld] = %d, want %d", (long long)m,
                     (long long)n, (long long)k, (long long)pad, extreme ? " extreme" : "", nt, (long long)(at / ldc),
                     (long long)(at % ldc), got[at < 0 ? 0 : at], want[at < 0 ? 0 : at]);
            free(got);
        }
    free(want);
    free(a);
    free(b);
}

KT_TEST(gemm_i8_paths_match_scalar) {
    static const int64_t sizes[] = {1, 3, 16, 17, 33, 64, 100, 257};
    int ns = (int)(sizeof sizes / sizeof *sizes);
    for (int i = 0; i < ns; i++) /* cubes, plain and strided */
        for (int pad = 0; pad <= 5; pad += 5) check_size(sizes[i], sizes[i], sizes[i], pad, false);
    for (int i = 0; i < ns; i++) /* mixed shapes: each size as m, n and k against others */
        check_size(sizes[i], sizes[(i + 3) % ns], sizes[(i + 5) % ns], 3, false);
    check_size(2, 300, 1030, 1, false);    /* several K blocks, few rows */
    check_size(129, 70, 515, 0, false);    /* more row tiles than one group */
}

KT_TEST(gemm_i8_extreme_values) {
    static const int64_t sizes[] = {1, 3, 17, 64, 100, 257};
    for (int i = 0; i < 6; i++) check_size(sizes[i], sizes[(i + 1) % 6], sizes[(i + 2) % 6], 2, true);
    check_size(40, 40, 4100, 0, true); /* long sums of +-2^14 products */
}

KT_TEST(gemm_i8_edge_cases) {
    int32_t c[6] = {7, 7, 7, 7, 7, 7};
    int8_t a[4] = {1, 2, 3, 4};
    KT_OK(kiln__gemm_s8(2, 3, 0, a, 1, a, 1, c, 3, 1)); /* k = 0: an empty sum */
    for (int i = 0; i < 6; i++) KT_CHECK(c[i] == 0, "c[%d] = %d", i, c[i]);
    KT_OK(kiln__gemm_s8(0, 3, 2, a, 2, a, 2, c, 3, 1));
    KT_CHECK(kiln__gemm_s8(-1, 3, 2, a, 2, a, 2, c, 3, 1) == KILN_ERR_ARG, "negative m accepted");
    KT_CHECK(kiln__gemm_s8(2, 2, 4, a, 2, a, 4, c, 2, 1) == KILN_ERR_ARG, "lda < k accepted");
}
