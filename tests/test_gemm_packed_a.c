/* test_gemm_packed_a.c — the GEMM with A packed beforehand
 * (backends/cpu/gemm_packed_a.c) against a double-precision loop at every
 * SIMD level: sizes off the micro-tile (edge rows and columns), deeper
 * than one kc block, taller than one mc block, wider than one nc block
 * (tiny caches), padded leading dimensions whose padding stays untouched,
 * and C filled with NaN (only written). */
#include "../backends/cpu/gemm.h"
#include "../backends/cpu/gemm_kernels.h"
#include "kt_simd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* C = A B for m x n x k, leading dimensions padded by pad (the first
 * few wrong elements reported). */
static void check(int64_t m, int64_t n, int64_t k, int pad, const char *what) {
    int64_t lda = k + pad, ldb = n + pad, ldc = n + pad;
    float *a = malloc(sizeof(float) * (size_t)(m * lda)), *b = malloc(sizeof(float) * (size_t)(k * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc)), *pa = malloc(sizeof(float) * kiln__sgemm_packed_a_floats(m, k));
    KT_REQUIRE(a && b && c && pa, "out of memory");
    uint64_t r = (uint64_t)(m * 131 + n * 17 + k);
    for (int64_t i = 0; i < m * lda; i++) a[i] = (float)((r = r * 6364136223846793005ULL + 1) >> 40) / (1 << 24) - 0.5f;
    for (int64_t i = 0; i < k * ldb; i++) b[i] = (float)((r = r * 6364136223846793005ULL + 1) >> 40) / (1 << 24) - 0.5f;
    for (int64_t i = 0; i < m * ldc; i++) c[i] = i % ldc < n ? NAN : -7.0f;
    kiln__sgemm_pack_a(m, k, a, lda, pa);
    kiln__sgemm_packed_a(m, n, k, pa, b, ldb, c, ldc);
    int fails = 0;
    for (int64_t i = 0; i < m && fails < 3; i++)
        for (int64_t j = 0; j < ldc && fails < 3; j++) {
            double want = -7.0;
            if (j < n) {
                want = 0;
                for (int64_t p = 0; p < k; p++) want += (double)a[i * lda + p] * (double)b[p * ldb + j];
            }
            double got = c[i * ldc + j];
            if (!(fabs(got - want) <= 2e-6 * (double)(k + 4) * (1 + fabs(want)))) {
                KT_CHECK(false, "%s %lldx%lldx%lld pad %d: C[%lld,%lld] = %g, want %g", what, (long long)m,
                         (long long)n, (long long)k, pad, (long long)i, (long long)j, got, want);
                fails++;
            }
        }
    free(a), free(b), free(c), free(pa);
}

static const int64_t SHAPES[][3] = {
    {1, 1, 1}, {13, 31, 7}, {14, 32, 16}, {29, 65, 130}, {64, 64, 64}, {70, 100, 800}, {600, 40, 100}, {33, 17, 1000},
};

KT_TEST(gemm_packed_a_matches_f64) {
    KT_FOR_EACH_SIMD(v) {
        for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
            check(SHAPES[i][0], SHAPES[i][1], SHAPES[i][2], (int)(i % 3), v.name);
    }
}

/* Tiny caches: several blocks of every kind (kc 128, a few MR-row blocks
 * of A, nc of a few NR panels). */
KT_TEST(gemm_packed_a_tiny_cache_blocks) {
    const kiln__cpu_caches tiny = {4 << 10, 16 << 10, 64 << 10};
    kiln__cpu_caches_set(&tiny);
    KT_FOR_EACH_SIMD(v) {
        check(100, 300, 300, 1, v.name);
        check(45, 1000, 129, 0, v.name);
    }
    kiln__cpu_caches_set(NULL);
}
