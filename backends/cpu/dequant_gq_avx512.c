/* dequant_gq_avx512.c — GQ dequantize on AVX-512 (coders.h): each chunk
 * decoded to 32 code bytes (gq_x86.h), widened to i32 16 at a time, minus
 * the zero point, times the scale: the scalar reference's single f32
 * product. */
#include "coders.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include "gq_x86.h"

static inline __attribute__((always_inline)) void blocks(const uint8_t *in, const int bits, int group, float *y,
                                                         int64_t nb) {
    const size_t bsz = (size_t)KILN_GQ_BLOCK_BYTES(bits, group);
    for (int64_t b = 0; b < nb; b++, in += bsz) {
        const __m512 s = _mm512_set1_ps(kiln__gq_scale(in));
        const __m512i z = _mm512_set1_epi32(in[2]);
        for (int c = 0; c < group / KILN_GQ_CHUNK; c++, y += KILN_GQ_CHUNK) {
            const __m256i q = kiln__gq_decode(in + KILN_GQ_HEAD + c * KILN_GQ_CHUNK_BYTES(bits), bits);
            const __m512i lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)), z);
            const __m512i hi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)), z);
            _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), s));
            _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), s));
        }
    }
}

static void gq_dequant(const void *in, int bits, int group, float *y, int64_t nb) {
    if (bits == 4) blocks(in, 4, group, y, nb);
    else if (bits == 3) blocks(in, 3, group, y, nb);
    else blocks(in, 2, group, y, nb);
}

kiln__gq_dequant_fn *kiln__gq_dequant_avx512(void) { return gq_dequant; }
#else
kiln__gq_dequant_fn *kiln__gq_dequant_avx512(void) { return 0; }
#endif
