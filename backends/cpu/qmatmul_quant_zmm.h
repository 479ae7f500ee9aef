/* qmatmul_quant_zmm.h — one block of 32 activations quantized on
 * AVX-512 exactly as kiln__qmm_quantize_x does (the same f32 operations;
 * roundf's ties away from zero done by hand), for the batched integer
 * path (qmatmul_gemm_zmm.h) and the vector path (qmatmul_avx512vnni.c, qmatmul_vbmi.c). Include after
 * <immintrin.h> in a file built with the AVX-512 flags. */
#ifndef KILN_CPU_QMATMUL_QUANT_ZMM_H
#define KILN_CPU_QMATMUL_QUANT_ZMM_H

#include "internal.h"

#include <immintrin.h>

/* the 32 codes (int8, in order); *d gets the block's scale (an f16 value) */
static inline __m256i kiln__qmm_quantize_block(const float *x, float *d_out) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(v0, absmask), _mm512_and_ps(v1, absmask)));
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    *d_out = kiln__f16_to_f32(kiln__f32_to_f16(d));
    __m512i q[2];
    for (int h = 0; h < 2; h++) {
        const __m512 v = _mm512_mul_ps(h ? v1 : v0, _mm512_set1_ps(id));
        const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __mmask16 up =
            _mm512_cmp_ps_mask(_mm512_and_ps(_mm512_sub_ps(v, t), absmask), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
        /* t + sign(v) where |v - t| >= 0.5 */
        const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_andnot_ps(absmask, v));
        q[h] = _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, one));
    }
    return _mm256_set_m128i(_mm512_cvtepi32_epi8(q[1]), _mm512_cvtepi32_epi8(q[0]));
}

#endif
