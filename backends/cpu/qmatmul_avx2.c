/* qmatmul_avx2.c — AVX2 dot products of KILN_OP_QMATMUL (qmatmul.h):
 * maddubs (u8 x s8 pairs to int16; |w| <= 128 and |x| <= 127 keep each
 * pair below 2^15, so nothing saturates) then madd with ones to int32
 * lanes; NF4 has no AVX2 kernel (the reference runs). */
#include "qmatmul.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define QMM_NAME(x) x##_avx2
#define QMM_DOT32(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#include "qmatmul_x86.h"

const kiln_qmm_kernels *kiln__qmm_kernels_avx2(void) {
    static const kiln_qmm_kernels k = {dot_q8_0_avx2, dot_q4_0_avx2, kiln__qmm_dot_nf4_ref};
    return &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_avx2(void) { return NULL; }
#endif
