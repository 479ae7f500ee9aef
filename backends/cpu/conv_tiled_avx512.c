/* conv_tiled_avx512.c — AVX-512 rows of conv_tiled.c's tile columns (f32,
 * stride 1 or 2), formed from x for the forward (and the weight
 * gradient) and added back into gx for the input gradient: each output
 * row segment 16 pixels at a time, the image row read (and written) whole
 * where that stays in its plane, stride 2's even elements picked (spread)
 * by one permute. The same values, and the same adds in the same order, as
 * the element-at-a-time loops, so the same bits (tests/test_conv_simd.c
 * compares both). On ResNet-18's stride-2 3x3 layers those loops, over
 * segments of 4 to 16 pixels, were 40% of the forward and of grad x. */
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
 * loads are masked only where a whole one would leave the plane: with
 * masked loads throughout, a 1x1 stride-2 layer's forward took 2.9 ms on
 * Zen 5, with these 1.2. */
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
        __m512 l = _mm512_maskz_loadu_ps((__mmask16)in2, at);
        __m512 h = _mm512_maskz_loadu_ps((__mmask16)(in2 >> 16), at + 16);
        v = _mm512_permutex2var_ps(l, even, h);
    }
    if (e - q0 >= 16) _mm512_storeu_ps(o + q0, v);
    else _mm512_mask_storeu_ps(o + q0, (__mmask16)bits(0, e - q0), v);
}

/* gx's row[q sw] += cols' s[q] for the pixels q0 + [0, 16) in [a, b) of
 * a segment ending at e: the row read and written back whole where that
 * stays in the plane [lo, hi) (a thread's planes are its own), else under
 * the mask; one add a pixel, as the portable loop. */
static inline void segment_add(const float *s, float *row, float *lo, float *hi, int64_t sw, int64_t q0, int64_t e,
                               int64_t a, int64_t b) {
    __mmask16 in = (__mmask16)bits(a - q0, b - q0);
    if (!in) return;
    __m512 v = e - q0 >= 16 ? _mm512_loadu_ps(s + q0) : _mm512_maskz_loadu_ps((__mmask16)bits(0, e - q0), s + q0);
    float *at = row + sw * q0;
    if (sw == 1) {
        bool whole = at >= lo && at + 16 <= hi;
        __m512 r = whole ? _mm512_loadu_ps(at) : _mm512_maskz_loadu_ps(in, at);
        r = _mm512_mask_add_ps(r, in, r, v);
        if (whole) _mm512_storeu_ps(at, r);
        else _mm512_mask_storeu_ps(at, in, r);
        return;
    }
    /* pixel q0 + i at element 2 i of 32: the values spread to the even lanes of two registers */
    const __m512i lo8 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i hi8 = _mm512_add_epi32(lo8, _mm512_set1_epi32(8));
    uint32_t in2 = bits(2 * (a - q0), 2 * (b - q0)) & 0x55555555u;
    __mmask16 m0 = (__mmask16)in2, m1 = (__mmask16)(in2 >> 16);
    bool whole = at >= lo && at + 32 <= hi;
    __m512 r0 = whole ? _mm512_loadu_ps(at) : _mm512_maskz_loadu_ps(m0, at);
    __m512 r1 = whole ? _mm512_loadu_ps(at + 16) : _mm512_maskz_loadu_ps(m1, at + 16);
    r0 = _mm512_mask_add_ps(r0, m0, r0, _mm512_permutexvar_ps(lo8, v));
    r1 = _mm512_mask_add_ps(r1, m1, r1, _mm512_permutexvar_ps(hi8, v));
    if (whole) {
        _mm512_storeu_ps(at, r0), _mm512_storeu_ps(at + 16, r1);
    } else {
        _mm512_mask_storeu_ps(at, m0, r0), _mm512_mask_storeu_ps(at + 16, m1, r1);
    }
}

/* Rows kk in [r0, r1) of the tile [p0, p1)'s columns, walked one output
 * row segment at a time (its image and row counted, not divided out):
 * formed from x, or (add) added into gx. */
static inline void walk(float *img, int64_t c_img, const kiln_conv_geom *g, int64_t p0, int64_t p1, int64_t r0,
                        int64_t r1, float *cols, bool add) {
    int64_t len = p1 - p0, plane = g->oh * g->ow, taps = g->kh * g->kw, hw = g->h * g->w;
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
            float *pl = img + (n * c_img + c) * hw;
            float *row = inside ? pl + ii * g->w + kj * g->dw - g->pw : pl;
            int64_t a = lo > oj ? lo : oj, b = hi < e ? hi : e;
            if (!inside || a > b) a = b = oj;
            float *o = out + (p - p0) - oj;
            for (int64_t q = oj; q < e; q += 16)
                if (add) segment_add(o, row, pl, pl + hw, g->sw, q, e, a, b);
                else segment_part(o, row, pl, pl + hw, g->sw, q, e, a, b);
            p += e - oj;
        }
    }
}

void kiln__conv_tile_rows_f32_avx512(const float *x, int64_t c_img, const kiln_conv_geom *g, int64_t p0, int64_t p1,
                                     int64_t r0, int64_t r1, float *cols) {
    walk((float *)x, c_img, g, p0, p1, r0, r1, cols, false);
}

void kiln__conv_tile_add_f32_avx512(float *gx, int64_t c_img, const kiln_conv_geom *g, int64_t p0, int64_t p1,
                                    int64_t r0, int64_t r1, const float *cols) {
    walk(gx, c_img, g, p0, p1, r0, r1, (float *)cols, true);
}
#endif
