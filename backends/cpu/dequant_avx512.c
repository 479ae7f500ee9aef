/* dequant_avx512.c — dequantize kernels on AVX-512 (coders.h): 16 lanes,
 * codes widened to i32, the NF4 table in one register (vpermps), each
 * value the scalar reference's single f32 product. */
#include "coders.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

static void q8_0(const void *blocks, float *y, int64_t n) {
    const kiln_block_q8_0 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QK8_0; b++, y += KILN_QK8_0) {
        const __m512 d = _mm512_set1_ps(kiln__f16_to_f32(x[b].d));
        for (int j = 0; j < KILN_QK8_0; j += 16) {
            __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(x[b].qs + j)));
            _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
        }
    }
}

static void q4_0(const void *blocks, float *y, int64_t n) {
    const kiln_block_q4_0 *x = blocks;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512i eight = _mm512_set1_epi32(8);
    for (int64_t b = 0; b < n / KILN_QK4_0; b++, y += KILN_QK4_0) {
        const __m512 d = _mm512_set1_ps(kiln__f16_to_f32(x[b].d));
        __m128i v = _mm_loadu_si128((const __m128i *)x[b].qs);
        __m512i lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(v, m4)), eight);
        __m512i hi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), m4)), eight);
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
    }
}

static void nf4_codes(const uint8_t *codes, const float *absmax, int64_t nb, float *y) {
    const __m512 tab = _mm512_loadu_ps(kiln__nf4_table);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++, codes += KILN_QKNF4 / 2, y += KILN_QKNF4) {
        const __m512 a = _mm512_set1_ps(absmax[b]);
        for (int h = 0; h < 2; h++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(codes + 16 * h));
            __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4), lo = _mm_and_si128(v, m4);
            /* element 2j is byte j's high nibble: interleave hi, lo */
            __m128i e0 = _mm_unpacklo_epi8(hi, lo), e1 = _mm_unpackhi_epi8(hi, lo);
            __m512 v0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e0), tab);
            __m512 v1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e1), tab);
            _mm512_storeu_ps(y + 32 * h, _mm512_mul_ps(v0, a));
            _mm512_storeu_ps(y + 32 * h + 16, _mm512_mul_ps(v1, a));
        }
    }
}

static const kiln__dequant_kernels k = {q8_0, q4_0, nf4_codes};
const kiln__dequant_kernels *kiln__dequant_kernels_avx512(void) { return &k; }
#else
const kiln__dequant_kernels *kiln__dequant_kernels_avx512(void) { return 0; }
#endif
