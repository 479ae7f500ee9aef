/* qmatmul_quant_ymm.h — one block of 32 activations quantized on ymm
 * exactly as kiln__qmm_quantize_x does, for CPUs without AVX-512: the
 * batched integer path's pack_x (qmatmul_gemm_x86.h) and the batch-1
 * products' quantize_x (qmatmul_avx2.c, which AVX-VNNI takes too).
 * qmatmul_quant_zmm.h is its zmm twin. Include in a file built with the
 * AVX2 flags (or above). */
#ifndef KILN_CPU_QMATMUL_QUANT_YMM_H
#define KILN_CPU_QMATMUL_QUANT_YMM_H

#include "internal.h"

#include <immintrin.h>

/* The 32 codes (int8, in order); *d_out gets the block's scale (an f16
 * value). kiln__qmm_quantize_x's f32 operations: the largest |x| by
 * max_ps, which like fmaxf passes over NaN; roundf's ties away from zero
 * by hand; a code that is not finite 0. */
static inline __m256i kiln__qmm_quantize_block_ymm(const float *x, float *d_out) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7); /* the packs' dwords back in order */
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        m = _mm256_max_ps(_mm256_and_ps(v[i], absmask), m); /* m where |x| is NaN */
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float d = _mm_cvtss_f32(h) / 127, id = d ? 1.0f / d : 0.0f;
    *d_out = kiln__f16_to_f32(kiln__f32_to_f16(d));
    __m256i q[4];
    for (int i = 0; i < 4; i++) {
        const __m256 u = _mm256_mul_ps(v[i], _mm256_set1_ps(id));
        const __m256 t = _mm256_round_ps(u, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 up =
            _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(u, t), absmask), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
        /* t + sign(u) where |u - t| >= 0.5 */
        const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_andnot_ps(absmask, u));
        q[i] = _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, one)));
    }
    /* each code's low byte (unsigned packs of & 0xff): the 0x80000000 of a
     * code not finite gives 0, as in kiln__qmm_quantize_x; signed packs -128 */
    const __m256i lo8 = _mm256_set1_epi32(0xff);
    for (int i = 0; i < 4; i++) q[i] = _mm256_and_si256(q[i], lo8);
    return _mm256_permutevar8x32_epi32(
        _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3])), order);
}

#endif
