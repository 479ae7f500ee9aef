/* conv_avx512.c — AVX-512 planes of the 2x2 stride-2 max-pool and its
 * backward (f32), the CNN's pool: 16 windows at a time, the pairs of
 * columns split with one permute; and col2im's image plane at stride 1,
 * 16 pixels of a row summed in a register over every tap. The same
 * comparisons, sums (in the same order) and division as the portable
 * loops in conv.c, lane by lane, so the results are bit-identical
 * (tests/test_pool_layout.c and test_conv_simd.c compare both). */
#include "conv_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* The masks for windows [o, o + nb) of a row: the first and second 16 of
 * its 2 nb input columns, and the nb outputs. */
static inline void masks(int64_t nb, __mmask16 *lo, __mmask16 *hi, __mmask16 *out) {
    *lo = nb >= 8 ? 0xffff : (__mmask16)((1u << (2 * nb)) - 1);
    *hi = nb > 8 ? (__mmask16)((1u << (2 * nb - 16)) - 1) : 0;
    *out = nb >= 16 ? 0xffff : (__mmask16)((1u << nb) - 1);
}

/* b where b > a or b is NaN, else a (conv.c's rule: a NaN wins). */
static inline __m512 max_nan(__m512 a, __m512 b) {
    __mmask16 k = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(k, a, b);
}

void kiln__pool2x2_f32_avx512(const float *img, float *out, int64_t oh, int64_t ow, int64_t w) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t oi = 0; oi < oh; oi++, out += ow) {
        const float *r0 = img + 2 * oi * w, *r1 = r0 + w;
        for (int64_t o = 0; o < ow; o += 16) {
            __mmask16 klo, khi, kout;
            masks(ow - o < 16 ? ow - o : 16, &klo, &khi, &kout);
            __m512 p0 = _mm512_maskz_loadu_ps(klo, r0 + 2 * o), p1 = _mm512_maskz_loadu_ps(khi, r0 + 2 * o + 16);
            __m512 q0 = _mm512_maskz_loadu_ps(klo, r1 + 2 * o), q1 = _mm512_maskz_loadu_ps(khi, r1 + 2 * o + 16);
            __m512 a = _mm512_permutex2var_ps(p0, even, p1), b = _mm512_permutex2var_ps(p0, odd, p1);
            __m512 c = _mm512_permutex2var_ps(q0, even, q1), d = _mm512_permutex2var_ps(q0, odd, q1);
            _mm512_mask_storeu_ps(out + o, kout, max_nan(max_nan(max_nan(a, b), c), d));
        }
    }
}

void kiln__pool2x2_grad_f32_avx512(const float *img, const float *y, const float *gy, float *gimg, int64_t oh,
                                   int64_t ow, int64_t w) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    /* interleave A, B back into A0 B0 A1 B1 ...: the first 16 and the second 16 */
    const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t oi = 0; oi < oh; oi++) {
        const float *r0 = img + 2 * oi * w, *r1 = r0 + w, *yr = y + oi * ow, *gr = gy + oi * ow;
        float *g0 = gimg + 2 * oi * w, *g1 = g0 + w;
        for (int64_t o = 0; o < ow; o += 16) {
            __mmask16 klo, khi, kout;
            masks(ow - o < 16 ? ow - o : 16, &klo, &khi, &kout);
            __m512 p0 = _mm512_maskz_loadu_ps(klo, r0 + 2 * o), p1 = _mm512_maskz_loadu_ps(khi, r0 + 2 * o + 16);
            __m512 q0 = _mm512_maskz_loadu_ps(klo, r1 + 2 * o), q1 = _mm512_maskz_loadu_ps(khi, r1 + 2 * o + 16);
            __m512 m = _mm512_maskz_loadu_ps(kout, yr + o), g = _mm512_maskz_loadu_ps(kout, gr + o);
            __m512 ea = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_permutex2var_ps(p0, even, p1), m, _CMP_EQ_OQ), one);
            __m512 eb = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_permutex2var_ps(p0, odd, p1), m, _CMP_EQ_OQ), one);
            __m512 ec = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_permutex2var_ps(q0, even, q1), m, _CMP_EQ_OQ), one);
            __m512 ed = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_permutex2var_ps(q0, odd, q1), m, _CMP_EQ_OQ), one);
            __m512 sv = _mm512_div_ps(g, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(ea, eb), ec), ed));
            __m512 va = _mm512_mul_ps(sv, ea), vb = _mm512_mul_ps(sv, eb);
            __m512 vc = _mm512_mul_ps(sv, ec), vd = _mm512_mul_ps(sv, ed);
            _mm512_mask_storeu_ps(g0 + 2 * o, klo, _mm512_permutex2var_ps(va, ilo, vb));
            _mm512_mask_storeu_ps(g0 + 2 * o + 16, khi, _mm512_permutex2var_ps(va, ihi, vb));
            _mm512_mask_storeu_ps(g1 + 2 * o, klo, _mm512_permutex2var_ps(vc, ilo, vd));
            _mm512_mask_storeu_ps(g1 + 2 * o + 16, khi, _mm512_permutex2var_ps(vc, ihi, vd));
        }
    }
}

/* col2im of one plane at stride 1: img[ii, jj] = the sum over taps (ki,
 * kj), in that order, of tap[oi = ii + ph - ki dh][oj = jj + pw - kj dw]
 * where both lie in the OH x OW grid. Lane l of a block of 16 pixels
 * reads the grid row at j0 - s + l: one masked load (masked-out lanes are
 * never read, so the start may lie before the row; its address is formed
 * as an integer). */
void kiln__col2im_plane_s1_f32_avx512(const float *base, int64_t tap_stride, float *img, const kiln_conv_geom *g) {
    for (int64_t ii = 0; ii < g->h; ii++)
        for (int64_t j0 = 0; j0 < g->w; j0 += 16) {
            int64_t jend = g->w - j0 < 16 ? g->w : j0 + 16;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t ki = 0; ki < g->kh; ki++) {
                int64_t oi = ii + g->ph - ki * g->dh;
                if (oi < 0 || oi >= g->oh) continue;
                for (int64_t kj = 0; kj < g->kw; kj++) {
                    int64_t s = kj * g->dw - g->pw; /* jj = oj + s */
                    int64_t lo = j0 > s ? j0 : s, hi = g->ow + s < jend ? g->ow + s : jend;
                    if (lo >= hi) continue;
                    __mmask16 k = (__mmask16)(((1u << (hi - lo)) - 1) << (lo - j0));
                    uintptr_t row = (uintptr_t)(base + (ki * g->kw + kj) * tap_stride + oi * g->ow);
                    const float *in = (const float *)(row + (uintptr_t)((j0 - s) * (int64_t)sizeof(float)));
                    acc = _mm512_mask_add_ps(acc, k, acc, _mm512_maskz_loadu_ps(k, in));
                }
            }
            _mm512_mask_storeu_ps(img + ii * g->w + j0, (__mmask16)((1u << (jend - j0)) - 1), acc);
        }
}

#endif
