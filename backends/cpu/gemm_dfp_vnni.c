/* gemm_dfp_vnni.c — the DFP GEMM (gemm_dfp.h) with AVX512-VNNI vpdpwssd:
 * a 6 x 32 tile of C in 12 int32 chunk accumulators and 12 f32 totals.
 * Each chunk starts with vpmaddwd (the first pair, no accumulator to
 * clear), adds cp - 1 pairs with vpdpwssd, and is folded into the f32
 * total by one conversion and one add: with 14-bit operands (cp = 16) 18
 * instructions for 16 pairs of work. Units of work (one 32-column block
 * against a group of row tiles) are handed out dynamically; a unit runs
 * all of k for each tile, its two B panels staying in L2. */
#if defined(__x86_64__)
#include "gemm_dfp.h"

#include <immintrin.h>
#include <string.h>

#define MR KILN_DFP_MR
#define GROUP 8 /* row tiles per unit */

static inline int32_t load32(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) void tile_n(const kiln_dfp_packed *p, const int16_t *a,
                                                          const int16_t *b, const int np, float *c, int64_t ldc,
                                                          int64_t rows, int64_t cols) {
    const int64_t pairs = p->kp / 2, ps = pairs * 32, cp = p->cp;
    __m512 tot[MR][2];
    __mmask16 mk[2];
#pragma GCC unroll 2
    for (int q = 0; q < np; q++) {
        int64_t left = cols - q * 16;
        mk[q] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) tot[r][q] = _mm512_setzero_ps();
    }
    for (int64_t t0 = 0; t0 < pairs; t0 += cp) {
        int64_t len = pairs - t0 < cp ? pairs - t0 : cp;
        const int16_t *ak = a + t0 * MR * 2, *bk = b + t0 * 32;
        __m512i acc[MR][2], bv[2];
#pragma GCC unroll 2
        for (int q = 0; q < np; q++) bv[q] = _mm512_loadu_si512(bk + q * ps);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m512i av = _mm512_set1_epi32(load32(ak + r * 2));
#pragma GCC unroll 2
            for (int q = 0; q < np; q++) acc[r][q] = _mm512_madd_epi16(av, bv[q]);
        }
        for (int64_t t = 1; t < len; t++) {
            ak += MR * 2, bk += 32;
#pragma GCC unroll 2
            for (int q = 0; q < np; q++) bv[q] = _mm512_loadu_si512(bk + q * ps);
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                __m512i av = _mm512_set1_epi32(load32(ak + r * 2));
#pragma GCC unroll 2
                for (int q = 0; q < np; q++) acc[r][q] = _mm512_dpwssd_epi32(acc[r][q], av, bv[q]);
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int q = 0; q < np; q++) tot[r][q] = _mm512_add_ps(tot[r][q], _mm512_cvtepi32_ps(acc[r][q]));
    }
    const __m512 sa = _mm512_set1_ps(p->sa), sb = _mm512_set1_ps(p->sb);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
        if (r < rows) {
#pragma GCC unroll 2
            for (int q = 0; q < np; q++)
                _mm512_mask_storeu_ps(c + r * ldc + q * 16, mk[q], _mm512_mul_ps(_mm512_mul_ps(tot[r][q], sa), sb));
        }
}

void kiln__gemm_dfp_kernel_avx512vnni(const kiln_dfp_packed *p, float *c, int64_t ldc) {
    const int64_t pairs = p->kp / 2, mt = p->mp / MR, nbk = (p->np + 31) / 32;
    const int64_t groups = (mt + GROUP - 1) / GROUP, units = groups * nbk;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t u = 0; u < units; u++) {
        int64_t jb = u % nbk, t0 = u / nbk * GROUP, t1 = t0 + GROUP < mt ? t0 + GROUP : mt, j0 = jb * 32;
        int64_t cols = p->n - j0 < 32 ? p->n - j0 : 32;
        int np = p->np - j0 >= 32 ? 2 : 1;
        const int16_t *b = p->b + (j0 / 16) * pairs * 32;
        for (int64_t t = t0; t < t1; t++) {
            int64_t i0 = t * MR, rows = p->m - i0 < MR ? p->m - i0 : MR;
            if (rows <= 0) continue;
            const int16_t *a = p->a + t * pairs * MR * 2;
            if (np == 2) tile_n(p, a, b, 2, c + i0 * ldc + j0, ldc, rows, cols);
            else tile_n(p, a, b, 1, c + i0 * ldc + j0, ldc, rows, cols);
        }
    }
}
#endif
