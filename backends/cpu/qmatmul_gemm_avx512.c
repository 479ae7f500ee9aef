/* qmatmul_gemm_avx512.c — the block-scaled int8 GEMM of qmatmul_gemm.h on
 * AVX-512 without VNNI (Skylake-X): AVX512-VNNI's tile (qmatmul_gemm_zmm.h:
 * W's quads broadcast against a zmm of 16 rows' quads) with vpdpbusd as
 * vpmaddubsw into int16 sums over a block, to int32 by one vpmaddwd.
 * Q4_0's nibbles (w + 8) as they are; Q8_0's u = w + 128 (q8_off 128) as
 * two planes of nibbles (q8_split), 16 * hi + lo: two vpmaddubsw per
 * quad, none saturating, instead of |w| times x negated where w < 0 and a
 * vpmaddwd per quad (128 x 2048 x 5632, 1 thread, Zen 5: 1.08x the GOP/s,
 * in passes of 3 of the tile's 6 columns for the registers). */
#include "qmatmul_gemm.h"

#if defined(__x86_64__) && defined(__AVX512BW__)
#include "../../quant/quant.h"
#define QG_NAME(x) x##_avx512
#define QG_Q8_OFF 128
#define QG_Q8_SPLIT 2
#include "qmatmul_gemm_pack_x86.h"

#include <immintrin.h>

#define NC KILN_QMM_GEMM_NC
/* v stays in its register (see qmatmul_gemm_x86.h's QG_KEEP) */
#define KEEP(v) __asm__("" : "+v"(v))

/* The exact int32 sums S - off * sum(x) of block b for gs groups of 16
 * rows (xb: their quads, nb * 512 bytes apart) against cc columns (wb:
 * the panel's block b), xs: the groups' -off * sum(x). Each product of a
 * quad of nibbles (at most 15) and one of x is two int16 pairs of at most
 * 15 * 127 * 2, so a block's 8 stay below 2^15; Q8_0's u = w + 128 is its
 * two nibbles' sums, 16 * hi + lo, to int32 once per block. */
static inline __attribute__((always_inline)) void sums(const bool q8, const int gs, const int cc, const int8_t *xb,
                                                       const uint8_t *wb, const int32_t *xs, int64_t nb, int64_t b,
                                                       __m512i s[NC][2]) {
    const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
    __m512i lo[NC][2]; /* Q8_0's low nibbles' sums (s: the high ones') */
#pragma GCC unroll 6
    for (int c = 0; c < cc; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) s[c][g] = lo[c][g] = zero;
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        __m512i a[2];
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) a[g] = _mm512_load_si512((const void *)(xb + g * nb * 512 + q * 64));
#pragma GCC unroll 6
        for (int c = 0; c < cc; c++) {
            const __m512i wv = _mm512_set1_epi32(QG_NAME(load32)(wb + c * nb * 32 + q * 4));
            const __m512i wl = q8 ? _mm512_set1_epi32(QG_NAME(load32)(wb + (KILN_QMM_GEMM_NU + c) * nb * 32 + q * 4)) : zero;
#pragma GCC unroll 2
            for (int g = 0; g < gs; g++) {
                s[c][g] = _mm512_add_epi16(s[c][g], _mm512_maddubs_epi16(wv, a[g]));
                KEEP(s[c][g]);
                if (!q8) continue;
                lo[c][g] = _mm512_add_epi16(lo[c][g], _mm512_maddubs_epi16(wl, a[g]));
                KEEP(lo[c][g]);
            }
        }
    }
    const __m512i hi = _mm512_set1_epi16(q8 ? 16 : 1);
#pragma GCC unroll 2
    for (int g = 0; g < gs; g++) {
        const __m512i init = _mm512_load_si512((const void *)(xs + (g * nb + b) * 16));
#pragma GCC unroll 6
        for (int c = 0; c < cc; c++) {
            s[c][g] = _mm512_add_epi32(init, _mm512_madd_epi16(s[c][g], hi));
            if (q8) s[c][g] = _mm512_add_epi32(s[c][g], _mm512_madd_epi16(lo[c][g], ones));
        }
    }
}

#define QG_Q8_CC (NC / 2) /* 2 x 3 x 2 int16 sums in registers */
#include "qmatmul_gemm_zmm.h"

const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512(void) {
    static const kiln_qmm_gemm_kernels k = {pack_x, QG_NAME(pack_w), tile_q8, tile_q4, QG_Q8_OFF, QG_Q8_SPLIT};
    return &k;
}
#else
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512(void) { return NULL; }
#endif
