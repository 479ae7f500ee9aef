/* gemm_i8_avx512vnni.c — int8 GEMM with AVX512-VNNI vpdpbusd: a 6 x 64
 * tile of C in 24 zmm accumulators. (The AVX-VNNI ymm twin lives in
 * gemm_i8_avxvnni.c: CPUs with AVX-VNNI may lack AVX-512, and Zen 4 has
 * AVX512-VNNI without AVX-VNNI.)
 *
 * vpdpbusd multiplies unsigned by signed bytes, so packed A carries a + 128
 * (gemm_i8.h) and every column starts from -128 * sum_p B(j, p): exact in
 * int32 arithmetic modulo 2^32, like the sums themselves. Each k quad of a
 * row is one 32-bit broadcast against one quad-row of a 16-column B panel.
 * K is cut into KC-wide blocks so a tile's B panels (64 x KC bytes) stay in
 * L1 while the row tiles of a group pass over them; a later block adds to
 * the partial C the earlier ones wrote. */
#if defined(__x86_64__)
#include "gemm_i8.h"

#include <immintrin.h>

#define MR KILN_S8_VNNI_MR

static inline __attribute__((always_inline)) void tile512_n(const int8_t *a, const int8_t *b, int64_t quads,
                                                              int64_t ps, const int np, const int32_t *cs, bool first,
                                                              int32_t *c, int64_t ldc, int64_t rows, int64_t cols) {
    __m512i acc[MR][4];
    __mmask16 mk[4];
#pragma GCC unroll 4
    for (int q = 0; q < np; q++) {
        int64_t left = cols - q * 16;
        mk[q] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(cs + q * 16));
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++)
            acc[r][q] = first || r >= rows ? init : _mm512_maskz_loadu_epi32(mk[q], c + r * ldc + q * 16);
    }
    for (int64_t k = 0; k < quads; k++, a += MR * 4, b += 64) {
        __m512i bv[4];
#pragma GCC unroll 4
        for (int q = 0; q < np; q++) bv[q] = _mm512_loadu_si512(b + q * ps);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m512i av = _mm512_set1_epi32(kiln__s8_quad(a + r * 4));
#pragma GCC unroll 4
            for (int q = 0; q < np; q++) acc[r][q] = _mm512_dpbusd_epi32(acc[r][q], av, bv[q]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
        if (r < rows) {
#pragma GCC unroll 4
            for (int q = 0; q < np; q++) _mm512_mask_storeu_epi32(c + r * ldc + q * 16, mk[q], acc[r][q]);
        }
}

static void tile512(const int8_t *a, const int8_t *b, int64_t quads, int64_t ps, int np, const int32_t *cs, bool first,
                    int32_t *c, int64_t ldc, int64_t rows, int64_t cols) {
    switch (np) {
    case 4: tile512_n(a, b, quads, ps, 4, cs, first, c, ldc, rows, cols); break;
    case 3: tile512_n(a, b, quads, ps, 3, cs, first, c, ldc, rows, cols); break;
    case 2: tile512_n(a, b, quads, ps, 2, cs, first, c, ldc, rows, cols); break;
    default: tile512_n(a, b, quads, ps, 1, cs, first, c, ldc, rows, cols); break;
    }
}

void kiln__gemm_s8_kernel_avx512vnni(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads) {
    kiln__gemm_s8_drive_vnni(p, c, ldc, n_threads, 64, tile512);
}
#endif
