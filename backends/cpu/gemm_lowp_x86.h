/* gemm_lowp_x86.h — AVX-512 helpers inlined into the bf16 GEMM files built
 * with AVX-512 flags (gemm_lowp_avx512.c, _avx512bf16.c, _amx.c): f32 to
 * bf16/f16 with round-to-nearest-even, bit-exact with kiln__f32_to_bf16 /
 * kiln__f32_to_f16 (vcvtneps2bf16 is not: it flushes denormals), and the
 * write-back of an f32 block into C of any output dtype. */
#ifndef KILN_CPU_GEMM_LOWP_X86_H
#define KILN_CPU_GEMM_LOWP_X86_H

#if defined(__x86_64__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

#include "gemm_lowp.h"

/* 16 f32 -> 16 bf16 (low half of each 32-bit lane holds the result) */
static inline __m512i lowp_bf16_lanes(__m512 v) {
    __m512i x = _mm512_castps_si512(v);
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
}

static inline __m256i lowp_f32_to_bf16(__m512 v) { return _mm512_cvtepi32_epi16(lowp_bf16_lanes(v)); }

static inline __m256i lowp_f32_to_f16(__m512 v) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    __m256i qnan = _mm512_cvtepi32_epi16(_mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x8000)),
        _mm512_set1_epi32(0x7e00)));
    return _mm256_mask_mov_epi16(h, nan, qnan);
}

/* Write rows x cols of the f32 block src (row stride lds) into C. */
static inline void lowp_store_block(kiln_dtype c_dt, const float *src, int64_t lds, int64_t rows, int64_t cols,
                                    void *c, int64_t ldc) {
    for (int64_t i = 0; i < rows; i++) {
        const float *s = src + i * lds;
        for (int64_t j = 0; j < cols; j += 16) {
            __mmask16 mk = cols - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - j)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(mk, s + j);
            if (c_dt == KILN_F32) _mm512_mask_storeu_ps((float *)c + i * ldc + j, mk, v);
            else {
                __m256i h = c_dt == KILN_BF16 ? lowp_f32_to_bf16(v) : lowp_f32_to_f16(v);
                _mm256_mask_storeu_epi16((uint16_t *)c + i * ldc + j, mk, h);
            }
        }
    }
}
#endif

#endif
