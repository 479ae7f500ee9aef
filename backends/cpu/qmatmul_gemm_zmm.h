/* qmatmul_gemm_zmm.h — the zmm tile of the block-scaled int8 GEMM
 * (qmatmul_gemm.h), shared by qmatmul_gemm_avx512vnni.c and _avx512.c: 6
 * columns of W x 32 rows of x (two groups of 16 rows, one per zmm lane
 * set), 12 int32 sums per block and 12 f32 accumulators. The including
 * file defines, before it, sums(q8, gs, xb, wb, xs, nb, b, s): block b's
 * exact int32 sums S - off * sum(x) of gs groups (xb: their quads, nb *
 * 512 bytes apart) against the NC columns (wb: the panel's block b), xs
 * the groups' -off * sum(x) at block 0. Defines tile_q8 and tile_q4;
 * included once per file, built with its flags. */
#include "qmatmul_gemm.h"

#include <immintrin.h>

#define NC KILN_QMM_GEMM_NC

/* gs groups of 16 rows against NC columns over blocks [b0, b1): each
 * block's exact sums (sums()), then one convert, one scale multiply and
 * one FMA per zmm, kiln__qmm_gemm_ref's f32 operations in each lane */
static inline __attribute__((always_inline)) void tile_n(const bool q8, const int8_t *xp, const float *da,
                                                          const int32_t *xs, const int gs, const uint8_t *wp,
                                                          const float *dw, int64_t nb, int64_t b0, int64_t b1,
                                                          bool first, float out[NC][32]) {
    __m512 f[NC][2];
#pragma GCC unroll 6
    for (int c = 0; c < NC; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) f[c][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out[c] + 16 * g);
    for (int64_t b = b0; b < b1; b++) {
        __m512i s[NC][2];
        sums(q8, gs, xp + b * 512, wp + b * 32, xs, nb, b, s);
        __m512 d[2];
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) d[g] = _mm512_load_ps(da + (g * nb + b) * 16);
#pragma GCC unroll 6
        for (int c = 0; c < NC; c++) {
            const __m512 dc = _mm512_set1_ps(dw[c * nb + b]);
#pragma GCC unroll 2
            for (int g = 0; g < gs; g++)
                f[c][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[c][g]), _mm512_mul_ps(d[g], dc), f[c][g]);
        }
    }
#pragma GCC unroll 6
    for (int c = 0; c < NC; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) _mm512_storeu_ps(out[c] + 16 * g, f[c][g]);
}

static void tile_q8(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                    const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    if (rows > 16) tile_n(true, xp, da, xs, 2, wp, dw, nb, b0, b1, first, out);
    else tile_n(true, xp, da, xs, 1, wp, dw, nb, b0, b1, first, out);
}

static void tile_q4(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                    const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    if (rows > 16) tile_n(false, xp, da, xs, 2, wp, dw, nb, b0, b1, first, out);
    else tile_n(false, xp, da, xs, 1, wp, dw, nb, b0, b1, first, out);
}

#undef NC
