/* dfp_avx2.c — the DFP loops (quant/dfp.h) in AVX2, 8 values a step, the tail
 * by the scalar reference; equal to it bit for bit (see dfp_avx512.c). */
#include "coders.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

static uint32_t amax_bits(const float *x, int64_t n) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), abs));
    uint32_t lanes[8], r = 0;
    _mm256_storeu_si256((__m256i *)lanes, m);
    for (int j = 0; j < 8; j++) r = lanes[j] > r ? lanes[j] : r;
    uint32_t t = kiln__dfp_kernels_scalar()->amax_bits(x + i, n - i);
    return t > r ? t : r;
}

static inline __m256i hash8(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

static void round_codes(const float *x, int64_t n, float scale, int qmax, int16_t *q, bool sr, uint32_t mix,
                        uint32_t index0) {
    const __m256 s = _mm256_set1_ps(scale), hi = _mm256_set1_ps((float)qmax), lo = _mm256_set1_ps(-(float)qmax);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), s), r;
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        if (sr) {
            __m256 f = _mm256_floor_ps(v);
            __m256i h = hash8(_mm256_add_epi32(_mm256_set1_epi32((int)(mix + index0 + (uint32_t)i)), lane));
            __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(0x1p-24f));
            __m256 up = _mm256_cmp_ps(u, _mm256_sub_ps(v, f), _CMP_LT_OQ);
            r = _mm256_add_ps(f, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
        } else
            r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        __m256i w = _mm256_cvttps_epi32(r);
        __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storeu_si128((__m128i *)(q + i), p);
    }
    if (i < n) kiln__dfp_kernels_scalar()->round(x + i, n - i, scale, qmax, q + i, sr, mix, index0 + (uint32_t)i);
}

static const kiln__dfp_kernels kernels = {amax_bits, round_codes};
const kiln__dfp_kernels *kiln__dfp_kernels_avx2(void) { return &kernels; }
#else
const kiln__dfp_kernels *kiln__dfp_kernels_avx2(void) { return 0; }
#endif
