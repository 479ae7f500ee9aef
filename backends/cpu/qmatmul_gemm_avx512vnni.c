/* qmatmul_gemm_avx512vnni.c — the block-scaled int8 GEMM of qmatmul_gemm.h on
 * AVX512-VNNI. vpdpbusd multiplies unsigned by signed bytes: W's side is
 * made unsigned (Q4_0: the nibble, w + 8; Q8_0: w + 128) and x stays
 * signed, so the offset's share, off * sum(x), depends on x alone and is
 * computed once per call (pack_x) instead of per column of W.
 *
 * A tile (qmatmul_gemm_zmm.h) is 6 columns of W x 32 rows of x (two
 * groups of 16 rows, one per zmm lane set): 12 int32 accumulators restart each block from
 * -off * sum(x) (a vector per group), take 8 vpdpbusd per block (one
 * 4-byte quad of W broadcast against one zmm of x), then go to f32 with
 * one convert, one scale multiply and one FMA into the 12 f32
 * accumulators: 96 vpdpbusd per 36 other vector operations. */
#include "qmatmul_gemm.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "../../quant/quant.h"
#define QG_NAME(x) x##_vnni
#define QG_Q8_OFF 128
#define QG_Q8_SPLIT 0
#include "qmatmul_gemm_pack_x86.h"

#include <immintrin.h>

#define NC KILN_QMM_GEMM_NC

/* Block b's sums (qmatmul_gemm_zmm.h): from -off * sum(x), 8 vpdpbusd
 * per column and group (one quad of W broadcast against one zmm of x) */
static inline __attribute__((always_inline)) void sums(const bool q8, const int gs, const int cc, const int8_t *xb,
                                                       const uint8_t *wb, const int32_t *xs, int64_t nb, int64_t b,
                                                       __m512i s[NC][2]) {
    (void)q8; /* W unsigned either way */
#pragma GCC unroll 2
    for (int g = 0; g < gs; g++) {
        const __m512i init = _mm512_load_si512((const void *)(xs + (g * nb + b) * 16));
#pragma GCC unroll 6
        for (int c = 0; c < cc; c++) s[c][g] = init;
    }
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        __m512i a[2];
#pragma GCC unroll 2
        for (int g = 0; g < gs; g++) a[g] = _mm512_load_si512((const void *)(xb + g * nb * 512 + q * 64));
#pragma GCC unroll 6
        for (int c = 0; c < cc; c++) {
            const __m512i wv = _mm512_set1_epi32(QG_NAME(load32)(wb + c * nb * 32 + q * 4));
#pragma GCC unroll 2
            for (int g = 0; g < gs; g++) s[c][g] = _mm512_dpbusd_epi32(s[c][g], wv, a[g]);
        }
    }
}

#define QG_Q8_CC NC
#include "qmatmul_gemm_zmm.h"

const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512vnni(void) {
    static const kiln_qmm_gemm_kernels k = {pack_x, QG_NAME(pack_w), tile_q8, tile_q4, QG_Q8_OFF, QG_Q8_SPLIT};
    return &k;
}
#else
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512vnni(void) { return NULL; }
#endif
