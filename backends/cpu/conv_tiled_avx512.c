/* conv_tiled_avx512.c — AVX-512 rows of conv_tiled.c's tile columns (f32,
 * stride 1 or 2): each output row segment 16 pixels at a time, the image
 * row's taps read by masked loads (stride 2: two loads, their even
 * elements picked by one permute) and the padding zeroed in the same
 * store. The same values as the portable loop, so the same bits
 * (tests/test_conv_simd.c compares both). On ResNet-18's stride-2 3x3
 * layers the portable loop, an element at a time over segments of 4 to 16
 * pixels, was 40% of the forward. */
#include "conv_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* Bits [lo, hi) of 32, clamped to [0, 32]. */
static inline uint32_t bits(int64_t lo, int64_t hi) {
    lo = lo < 0 ? 0 : lo > 32 ? 32 : lo, hi = hi < 0 ? 0 : hi > 32 ? 32 : hi;
    uint64_t m = ((1ull << hi) - 1) & ~((1ull << lo) - 1);
    return (uint32_t)m;
}

/* Output pixels q0 + [0, 16) of a segment ending at e, those in [a, b)
 * read from row[q sw] (row within the plane [lo, hi)), the others 0. The
 * loads are masked only where a whole one would leave the plane: Zen 5's
 * masked loads from memory cost several times a plain one. */
static inline void segment_part(float *o, const float *row, const float *lo, const float *hi, int64_t sw, int64_t q0,
                                int64_t e, int64_t a, int64_t b) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __mmask16 in = (__mmask16)bits(a - q0, b - q0);
    const float *at = row + sw * q0;
    __m512 v;
    if (!in) {
        v = _mm512_setzero_ps();
    } else if (sw == 1) {
        v = at >= lo && at + 16 <= hi ? _mm512_maskz_mov_ps(in, _mm512_loadu_ps(at)) : _mm512_maskz_loadu_ps(in, at);
    } else if (at >= lo && at + 32 <= hi) {
        v = _mm512_maskz_permutex2var_ps(in, _mm512_loadu_ps(at), even, _mm512_loadu_ps(at + 16));
    } else { /* the even elements of 32 */
        uint32_t in2 = bits(2 * (a - q0), 2 * (b - q0)) & 0x55555555u;
        __m512 l = _mm512_maskz_loadu_ps((__mmask16)in2, at), h = _mm512_maskz_loadu_ps((__mmask16)(in2 >> 16), at + 16);
        v = _mm512_permutex2var_ps(l, even, h);
    }
    if (e - q0 >= 16) _mm512_storeu_ps(o + q0, v);
    else _mm512_mask_storeu_ps(o + q0, (__mmask16)bits(0, e - q0), v);
}

void kiln__conv_tile_rows_f32_avx512(const float *x, int64_t c_img, const kiln_conv_geom *g, int64_t p0, int64_t p1,
                                     int64_t r0, int64_t r1, float *cols) {
    int64_t len = p1 - p0, plane = g->oh * g->ow, taps = g->kh * g->kw;
    int64_t n0 = p0 / plane, oi0 = p0 % plane / g->ow, oj0 = p0 % g->ow;
    for (int64_t kk = r0; kk < r1; kk++) {
        int64_t c = kk / taps, ki = kk / g->kw % g->kh, kj = kk % g->kw;
        int64_t lo, hi;
        kiln__conv_in_range(g->ow, g->sw, g->pw, kj * g->dw, g->w, &lo, &hi);
        float *out = cols + kk * len;
        int64_t n = n0, oi = oi0, oj = oj0;
        for (int64_t p = p0; p < p1; oj = 0, oi++) {
            if (oi == g->oh) oi = 0, n++;
            int64_t e = oj + (p1 - p < g->ow - oj ? p1 - p : g->ow - oj);
            int64_t ii = oi * g->sh - g->ph + ki * g->dh;
            bool inside = ii >= 0 && ii < g->h;
            /* row indexed by the output column (its pointer formed only inside the image) */
            const float *pl = x + (n * c_img + c) * g->h * g->w;
            const float *row = inside ? pl + ii * g->w + kj * g->dw - g->pw : pl;
            int64_t a = lo > oj ? lo : oj, b = hi < e ? hi : e;
            if (!inside || a > b) a = b = oj;
            float *o = out + (p - p0) - oj;
            for (int64_t q = oj; q < e; q += 16) segment_part(o, row, pl, pl + g->h * g->w, g->sw, q, e, a, b);
            p += e - oj;
        }
    }
}
#endif
