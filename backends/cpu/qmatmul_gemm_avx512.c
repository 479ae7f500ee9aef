/* qmatmul_gemm_avx512.c — the block-scaled int8 GEMM of qmatmul_gemm.h on
 * AVX-512 without VNNI (Skylake-X): AVX512-VNNI's tile (qmatmul_gemm_zmm.h:
 * 6 columns of W x 32 rows of x, W's quads broadcast against a zmm of 16
 * rows' quads) with
 * vpdpbusd as vpmaddubsw + vpmaddwd, as AVX2's ymm tiles do. Q8_0 keeps W
 * signed (q8_off 0): |w| times x negated where w < 0 (a masked subtract:
 * no vpsignb on zmm), each pair at most 128 * 127 * 2 < 2^15, to int32
 * per quad; Q4_0's nibbles (w + 8) as int16 pairs (at most 15 * 127 * 2:
 * a block's 8 quads stay below 2^15), to int32 once per block. */
#include "qmatmul_gemm.h"

#if defined(__x86_64__) && defined(__AVX512BW__)
#include "../../quant/quant.h"
#define QG_NAME(x) x##_avx512
#define QG_Q8_OFF 0
#define QG_Q8_ABS 0 /* |w| from the panel measured no faster here */
#include "qmatmul_gemm_pack_x86.h"

#include <immintrin.h>
#include <string.h>

#define NC KILN_QMM_GEMM_NC
/* v stays in its register (see qmatmul_gemm_x86.h's QG_KEEP) */
#define KEEP(v) __asm__("" : "+v"(v))

static inline int32_t load32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The exact int32 sums S - off * sum(x) of block b for gs groups of 16
 * rows (xb: their quads, nb * 512 bytes apart) against NC columns (wb:
 * the panel's block b), xs: the groups' -off * sum(x) */
static inline __attribute__((always_inline)) void sums(const bool q8, const int gs, const int8_t *xb,
                                                       const uint8_t *wb, const int32_t *xs, int64_t nb, int64_t b,
                                                       __m512i s[NC][2]) {
    const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
#pragma GCC unroll 6
    for (int c = 0; c < NC; c++)
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) s[c][g] = zero;
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        __m512i a[2];
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) a[g] = _mm512_load_si512((const void *)(xb + g * nb * 512 + q * 64));
#pragma GCC unroll 6
        for (int c = 0; c < NC; c++) {
            const __m512i wv = _mm512_set1_epi32(load32(wb + c * nb * 32 + q * 4));
            if (q8) {
                const __m512i aw = _mm512_abs_epi8(wv);
                const __mmask64 neg = _mm512_movepi8_mask(wv);
#pragma GCC unroll 2
                for (int g = 0; g < gs; g++) {
                    const __m512i p = _mm512_maddubs_epi16(aw, _mm512_mask_sub_epi8(a[g], neg, zero, a[g]));
                    s[c][g] = _mm512_add_epi32(s[c][g], _mm512_madd_epi16(p, ones));
                    KEEP(s[c][g]);
                }
            } else {
#pragma GCC unroll 2
                for (int g = 0; g < gs; g++) {
                    s[c][g] = _mm512_add_epi16(s[c][g], _mm512_maddubs_epi16(wv, a[g]));
                    KEEP(s[c][g]);
                }
            }
        }
    }
    if (q8) return; /* xs is 0 with W signed */
#pragma GCC unroll 2
    for (int g = 0; g < gs; g++) {
        const __m512i init = _mm512_load_si512((const void *)(xs + (g * nb + b) * 16));
#pragma GCC unroll 6
        for (int c = 0; c < NC; c++) s[c][g] = _mm512_add_epi32(init, _mm512_madd_epi16(s[c][g], ones));
    }
}

#include "qmatmul_gemm_zmm.h"

const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512(void) {
    static const kiln_qmm_gemm_kernels k = {pack_x, QG_NAME(pack_w), tile_q8, tile_q4, QG_Q8_OFF, QG_Q8_ABS};
    return &k;
}
#else
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512(void) { return NULL; }
#endif
