/* gemm_lowp_avx2.c — row converters of the portable bf16/f16 GEMM path,
 * with AVX2 and F16C: bf16/f16 rows to f32 (f32 rows rounded through bf16)
 * and f32 results back to bf16/f16, rounding to nearest even. Bit-exact
 * with the scalar functions of core/dtype.c (NaN payloads aside). */
#if defined(__x86_64__)
#include "gemm_lowp.h"

#include <immintrin.h>

/* f32 bits rounded to bf16 (result in the high half), NaN kept quiet */
static inline __m256i round_bf16_hi(__m256 v) {
    __m256i x = _mm256_castps_si256(v);
    __m256i r = _mm256_add_epi32(
        x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1))));
    __m256i qnan = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_and_si256(_mm256_blendv_epi8(r, qnan, nan), _mm256_set1_epi32((int)0xffff0000u));
}

/* 8 values of at most 16 bits in 32-bit lanes -> 8 packed u16 */
static inline __m128i pack16(__m256i x) {
    return _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

void kiln__lowp_row_to_f32_avx2(kiln_dtype in_dt, const void *src, float *dst, int64_t n) {
    int64_t i = 0;
    if (in_dt == KILN_BF16) {
        const uint16_t *s = src;
        for (; i + 8 <= n; i += 8) {
            __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)));
        }
        for (; i < n; i++) dst[i] = kiln__bf16_to_f32(s[i]);
    } else if (in_dt == KILN_F16) {
        const uint16_t *s = src;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
        for (; i < n; i++) dst[i] = kiln__f16_to_f32(s[i]);
    } else {
        const float *s = src;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(round_bf16_hi(_mm256_loadu_ps(s + i))));
        for (; i < n; i++) dst[i] = kiln__bf16_to_f32(kiln__f32_to_bf16(s[i]));
    }
}

void kiln__lowp_row_from_f32_avx2(kiln_dtype c_dt, const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    if (c_dt == KILN_BF16) {
        for (; i + 8 <= n; i += 8) {
            __m256i h = _mm256_srli_epi32(round_bf16_hi(_mm256_loadu_ps(src + i)), 16);
            _mm_storeu_si128((__m128i *)(d + i), pack16(h));
        }
        for (; i < n; i++) d[i] = kiln__f32_to_bf16(src[i]);
    } else {
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(src + i);
            __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), _mm256_set1_epi32(0x8000));
            __m128i qnan = pack16(_mm256_or_si256(sign, _mm256_set1_epi32(0x7e00)));
            __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            __m128i nan = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
            _mm_storeu_si128((__m128i *)(d + i), _mm_blendv_epi8(h, qnan, nan));
        }
        for (; i < n; i++) d[i] = kiln__f32_to_f16(src[i]);
    }
}
#endif
