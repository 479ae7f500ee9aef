/* qmatmul_gemm_zmm.h — the zmm tile of the block-scaled int8 GEMM
 * (qmatmul_gemm.h), shared by qmatmul_gemm_avx512vnni.c and _avx512.c: 6
 * columns of W x 32 rows of x (two groups of 16 rows, one per zmm lane
 * set), 12 int32 sums per block and 12 f32 accumulators. The including
 * file defines, before it, sums(q8, gs, cc, xb, wb, xs, nb, b, s): block
 * b's exact int32 sums S - off * sum(x) of gs groups (xb: their quads, nb
 * * 512 bytes apart) against cc columns (wb: the panel's block b), xs the
 * groups' -off * sum(x) at block 0, and QG_Q8_CC, the columns of a pass
 * over Q8_0 (NC, or fewer where sums() needs more registers). Defines
 * pack_x (by AVX-512's quantizer, qmatmul_quant_zmm.h), tile_q8 and
 * tile_q4; included once per file, built with its flags. */
#include "qmatmul_gemm.h"

#include "qmatmul_quant_zmm.h"

#include <immintrin.h>

#define NC KILN_QMM_GEMM_NC

/* One row of x (nb blocks) into the packed layout: codes at xp + 512 b +
 * 64 q (+ the row's 4 bytes, already in xp), scales at da + 16 b, and
 * -off * (sum of the block's codes) at xs + 16 b. */
static void pack_x(const float *x, int64_t nb, int32_t off, int8_t *xp, float *da, int32_t *xs) {
    const __m512i vidx = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t b = 0; b < nb; b++, x += 32, xp += 512, da += 16, xs += 16) {
        const __m256i codes = kiln__qmm_quantize_block(x, da);
        _mm512_mask_i32scatter_epi32(xp, 0xff, vidx, _mm512_castsi256_si512(codes), 4);
        /* sum of the codes: psadbw on codes + 128, less 32 * 128 */
        const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(codes, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
        const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        xs[0] = -off * (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128);
    }
}

/* gs groups of 16 rows against cc columns over blocks [b0, b1): each
 * block's exact sums (sums()), then one convert, one scale multiply and
 * one FMA per zmm, kiln__qmm_gemm_ref's f32 operations in each lane */
static inline __attribute__((always_inline)) void tile_n(const bool q8, const int8_t *xp, const float *da,
                                                          const int32_t *xs, const int gs, const int cc,
                                                          const uint8_t *wp,
                                                          const float *dw, int64_t nb, int64_t b0, int64_t b1,
                                                          bool first, float out[NC][32]) {
    __m512 f[NC][2];
#pragma GCC unroll 6
    for (int c = 0; c < cc; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) f[c][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out[c] + 16 * g);
    for (int64_t b = b0; b < b1; b++) {
        __m512i s[NC][2];
        sums(q8, gs, cc, xp + b * 512, wp + b * 32, xs, nb, b, s);
        __m512 d[2];
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) d[g] = _mm512_load_ps(da + (g * nb + b) * 16);
#pragma GCC unroll 6
        for (int c = 0; c < cc; c++) {
            const __m512 dc = _mm512_set1_ps(dw[c * nb + b]);
#pragma GCC unroll 2
            for (int g = 0; g < gs; g++)
                f[c][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[c][g]), _mm512_mul_ps(d[g], dc), f[c][g]);
        }
    }
#pragma GCC unroll 6
    for (int c = 0; c < cc; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) _mm512_storeu_ps(out[c] + 16 * g, f[c][g]);
}

static void tile_q8(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                    const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    for (int c0 = 0; c0 < NC; c0 += QG_Q8_CC) {
        const uint8_t *wc = wp + c0 * nb * 32;
        if (rows > 16) tile_n(true, xp, da, xs, 2, QG_Q8_CC, wc, dw + c0 * nb, nb, b0, b1, first, out + c0);
        else tile_n(true, xp, da, xs, 1, QG_Q8_CC, wc, dw + c0 * nb, nb, b0, b1, first, out + c0);
    }
}

static void tile_q4(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                    const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    if (rows > 16) tile_n(false, xp, da, xs, 2, NC, wp, dw, nb, b0, b1, first, out);
    else tile_n(false, xp, da, xs, 1, NC, wp, dw, nb, b0, b1, first, out);
}

#undef NC
