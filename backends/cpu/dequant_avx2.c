/* dequant_avx2.c — dequantize kernels on AVX2 (coders.h): 8 lanes, codes
 * widened to i32; the 16-entry NF4 table as two 8-entry halves (vpermps)
 * chosen by bit 3 of the code. Each value is the scalar reference's single
 * f32 product. */
#include "coders.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

static void q8_0(const void *blocks, float *y, int64_t n) {
    const kiln_block_q8_0 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QK8_0; b++, y += KILN_QK8_0) {
        const __m256 d = _mm256_set1_ps(kiln__f16_to_f32(x[b].d));
        for (int j = 0; j < KILN_QK8_0; j += 8) {
            __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[b].qs + j)));
            _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

static void store8(float *y, __m128i codes8, __m256 d, __m256i eight) {
    __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(codes8), eight);
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
}

static void q4_0(const void *blocks, float *y, int64_t n) {
    const kiln_block_q4_0 *x = blocks;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i eight = _mm256_set1_epi32(8);
    for (int64_t b = 0; b < n / KILN_QK4_0; b++, y += KILN_QK4_0) {
        const __m256 d = _mm256_set1_ps(kiln__f16_to_f32(x[b].d));
        __m128i v = _mm_loadu_si128((const __m128i *)x[b].qs);
        __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        store8(y, lo, d, eight);
        store8(y + 8, _mm_srli_si128(lo, 8), d, eight);
        store8(y + 16, hi, d, eight);
        store8(y + 24, _mm_srli_si128(hi, 8), d, eight);
    }
}

/* 8 codes (the low 8 bytes of c) through the table, times a. */
static void nf4_store8(float *y, __m128i c, __m256 t0, __m256 t1, __m256 a) {
    __m256i i = _mm256_cvtepu8_epi32(c);
    __m256 v0 = _mm256_permutevar8x32_ps(t0, i), v1 = _mm256_permutevar8x32_ps(t1, i);
    /* bit 3 of the code moved to the sign bit picks the upper half */
    __m256 v = _mm256_blendv_ps(v0, v1, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
    _mm256_storeu_ps(y, _mm256_mul_ps(v, a));
}

static void nf4_codes(const uint8_t *codes, const float *absmax, int64_t nb, float *y) {
    const __m256 t0 = _mm256_loadu_ps(kiln__nf4_table), t1 = _mm256_loadu_ps(kiln__nf4_table + 8);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++, codes += KILN_QKNF4 / 2, y += KILN_QKNF4) {
        const __m256 a = _mm256_set1_ps(absmax[b]);
        for (int h = 0; h < 2; h++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(codes + 16 * h));
            __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4), lo = _mm_and_si128(v, m4);
            __m128i e0 = _mm_unpacklo_epi8(hi, lo), e1 = _mm_unpackhi_epi8(hi, lo);
            float *o = y + 32 * h;
            nf4_store8(o, e0, t0, t1, a);
            nf4_store8(o + 8, _mm_srli_si128(e0, 8), t0, t1, a);
            nf4_store8(o + 16, e1, t0, t1, a);
            nf4_store8(o + 24, _mm_srli_si128(e1, 8), t0, t1, a);
        }
    }
}

static const kiln__dequant_kernels k = {q8_0, q4_0, nf4_codes};
const kiln__dequant_kernels *kiln__dequant_kernels_avx2(void) { return &k; }
#else
const kiln__dequant_kernels *kiln__dequant_kernels_avx2(void) { return 0; }
#endif
