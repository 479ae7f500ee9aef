/* gemm_i8_avxvnni.c — int8 GEMM with AVX-VNNI (VEX-encoded vpdpbusd on
 * ymm), on CPUs that have it with or without AVX-512: a 6 x 16 tile of C
 * in 12 ymm accumulators, driven by the loop both VNNI kernels share
 * (gemm_i8_tiles_avx2.c; packed A carries a + 128, see there). */
#if defined(__x86_64__)
#include "gemm_i8.h"

#include <immintrin.h>
#include <string.h>

#define MR KILN_S8_VNNI_MR

/* One 16-column panel: 6 x 16 of C in 12 ymm accumulators. */
static void tile256(const int8_t *a, const int8_t *b, int64_t quads, int64_t ps, int np, const int32_t *cs, bool first,
                    int32_t *c, int64_t ldc, int64_t rows, int64_t cols) {
    (void)ps, (void)np;
    int32_t tmp[MR][16];
    bool edge = rows < MR || cols < 16;
    int32_t *dst = c;
    int64_t ld = ldc;
    if (edge) { /* work in a full-size copy */
        dst = &tmp[0][0], ld = 16;
        memset(tmp, 0, sizeof tmp);
        if (!first)
            for (int64_t r = 0; r < rows; r++) memcpy(tmp[r], c + r * ldc, (size_t)cols * 4);
    }
    __m256i acc[MR][2];
    __m256i i0 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)cs));
    __m256i i1 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)(cs + 8)));
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = first ? i0 : _mm256_loadu_si256((const __m256i *)(dst + r * ld));
        acc[r][1] = first ? i1 : _mm256_loadu_si256((const __m256i *)(dst + r * ld + 8));
    }
    for (int64_t k = 0; k < quads; k++, a += MR * 4, b += 64) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)b), b1 = _mm256_loadu_si256((const __m256i *)(b + 32));
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256i av = _mm256_set1_epi32(kiln__s8_quad(a + r * 4));
            acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], av, b0);
            acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], av, b1);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_si256((__m256i *)(dst + r * ld), acc[r][0]);
        _mm256_storeu_si256((__m256i *)(dst + r * ld + 8), acc[r][1]);
    }
    if (edge)
        for (int64_t r = 0; r < rows; r++) memcpy(c + r * ldc, tmp[r], (size_t)cols * 4);
}

void kiln__gemm_s8_kernel_avxvnni(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads) {
    kiln__gemm_s8_drive_vnni(p, c, ldc, n_threads, 16, tile256);
}
#endif
