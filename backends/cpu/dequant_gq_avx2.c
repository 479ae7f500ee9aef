/* dequant_gq_avx2.c — GQ dequantize on AVX2 (coders.h): each chunk decoded
 * to 32 code bytes (gq_x86.h), widened to i32 8 at a time, minus the zero
 * point, times the scale: the scalar reference's single f32 product. */
#include "coders.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include "gq_x86.h"

static inline void store8(float *y, __m128i q8, __m256i z, __m256 s) {
    const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(q8), z);
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(q), s));
}

static inline __attribute__((always_inline)) void blocks(const uint8_t *in, const int bits, int group, float *y,
                                                         int64_t nb) {
    const size_t bsz = (size_t)KILN_GQ_BLOCK_BYTES(bits, group);
    for (int64_t b = 0; b < nb; b++, in += bsz) {
        const __m256 s = _mm256_set1_ps(kiln__gq_scale(in));
        const __m256i z = _mm256_set1_epi32(in[2]);
        for (int c = 0; c < group / KILN_GQ_CHUNK; c++, y += KILN_GQ_CHUNK) {
            const __m256i q = kiln__gq_decode(in + KILN_GQ_HEAD + c * KILN_GQ_CHUNK_BYTES(bits), bits);
            const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
            store8(y, lo, z, s);
            store8(y + 8, _mm_srli_si128(lo, 8), z, s);
            store8(y + 16, hi, z, s);
            store8(y + 24, _mm_srli_si128(hi, 8), z, s);
        }
    }
}

/* one copy per bit width, so that the decode is inlined without a branch */
static void gq_dequant(const void *in, int bits, int group, float *y, int64_t nb) {
    if (bits == 4) blocks(in, 4, group, y, nb);
    else if (bits == 3) blocks(in, 3, group, y, nb);
    else blocks(in, 2, group, y, nb);
}

kiln__gq_dequant_fn *kiln__gq_dequant_avx2(void) { return gq_dequant; }
#else
kiln__gq_dequant_fn *kiln__gq_dequant_avx2(void) { return 0; }
#endif
