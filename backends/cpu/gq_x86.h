/* gq_x86.h — one 32-element chunk of a GQ block (quant/quant.h) decoded to 32
 * code bytes in element order on AVX2 (shared by the dequantizers and the
 * fused matmul; the including file is compiled with AVX2 or above). */
#ifndef KILN_GQ_X86_H
#define KILN_GQ_X86_H

#include "../../quant/quant.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i kiln__gq_decode4(const uint8_t *c) {
    const __m128i p = _mm_loadu_si128((const __m128i *)c);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), _mm256_set1_epi8(0x0f));
}

/* the 2-bit plane: 64-bit lane l shifted right by 2 l puts elements
 * 8 l .. 8 l + 7 in the low two bits of its bytes */
static inline __m256i kiln__gq_decode2(const uint8_t *c) {
    int64_t p;
    memcpy(&p, c, 8);
    const __m256i v = _mm256_srlv_epi64(_mm256_set1_epi64x(p), _mm256_set_epi64x(6, 4, 2, 0));
    return _mm256_and_si256(v, _mm256_set1_epi8(3));
}

/* the 1-bit plane: byte j takes byte j / 8 of the plane, then tests bit j % 8 */
static inline __m256i kiln__gq_decode3(const uint8_t *c) {
    int32_t h;
    memcpy(&h, c + 8, 4);
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(h), idx), bit);
    const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(4));
    return _mm256_or_si256(kiln__gq_decode2(c), hi);
}

static inline __m256i kiln__gq_decode(const uint8_t *c, int bits) {
    return bits == 4 ? kiln__gq_decode4(c) : bits == 3 ? kiln__gq_decode3(c) : kiln__gq_decode2(c);
}

#endif
