/* dfp_avx512.c — the DFP loops (quant/dfp.h) in AVX-512, 16 values a step and a
 * masked tail; equal to the scalar reference bit for bit: the same integer
 * maximum, the same f32 products, round to nearest even (or floor and the
 * same hash comparison), the same clamps, NaN zeroed first. */
#include "coders.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

static uint32_t amax_bits(const float *x, int64_t n) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512i m = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(x + i), abs));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + i), abs));
    }
    return (uint32_t)_mm512_reduce_max_epu32(m);
}

static inline __m512i hash16(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bu));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

static void round_codes(const float *x, int64_t n, float scale, int qmax, int16_t *q, bool sr, uint32_t mix,
                        uint32_t index0) {
    const __m512 s = _mm512_set1_ps(scale), hi = _mm512_set1_ps((float)qmax), lo = _mm512_set1_ps(-(float)qmax);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), s), r;
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
        if (sr) {
            __m512 f = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
            __m512i h = hash16(_mm512_add_epi32(_mm512_set1_epi32((int)(mix + index0 + (uint32_t)i)), lane));
            __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(0x1p-24f));
            __mmask16 up = _mm512_cmp_ps_mask(u, _mm512_sub_ps(v, f), _CMP_LT_OQ);
            r = _mm512_mask_add_ps(f, up, f, _mm512_set1_ps(1.0f));
        } else
            r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        _mm256_mask_storeu_epi16(q + i, k, _mm512_cvtepi32_epi16(_mm512_cvttps_epi32(r)));
    }
}

static const kiln__dfp_kernels kernels = {amax_bits, round_codes};
const kiln__dfp_kernels *kiln__dfp_kernels_avx512(void) { return &kernels; }
#else
const kiln__dfp_kernels *kiln__dfp_kernels_avx512(void) { return 0; }
#endif
