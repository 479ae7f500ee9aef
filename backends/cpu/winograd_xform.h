/* winograd_xform.h — the body of the F(4x4, 3x3) transforms (winograd.h),
 * included once per dispatch level (winograd_xform.c for the baseline,
 * winograd_xform_avx2.c, winograd_xform_avx512.c) with WX_SUF its suffix.
 * 16 tiles (or kernels) are the lanes of every loop, always all 16 (unused
 * lanes zero), so that a tile's arithmetic does not depend on its place in
 * a block: 1 and 2 threads give the same bits. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define WX_CAT2(a, b) a##_##b
#define WX_CAT(a, b) WX_CAT2(a, b)
#define WX(name) WX_CAT(name, WX_SUF)

enum { WL = 16 };
#define LANES _Pragma("omp simd") for (int l = 0; l < WL; l++)

/* y0..y5 = B^T (d0..d5): floats, or AVX-512 vectors of them (the same
 * operations in the same order, so the same bits). */
#define WX_BT6(y0, y1, y2, y3, y4, y5, d0, d1, d2, d3, d4, d5) \
    do {                                                      \
        y0 = 4 * (d0) - 5 * (d2) + (d4);                      \
        y1 = (d3) + (d4) - 4 * ((d1) + (d2));                 \
        y2 = (d4) - (d3) + 4 * ((d1) - (d2));                 \
        y3 = (d4) - (d2) + 2 * ((d3) - (d1));                 \
        y4 = (d4) - (d2) - 2 * ((d3) - (d1));                 \
        y5 = 4 * (d1) - 5 * (d3) + (d5);                      \
    } while (0)
#define WX_BT6V(y, d) \
    WX_BT6((y)[0], (y)[1], (y)[2], (y)[3], (y)[4], (y)[5], (d)[0], (d)[1], (d)[2], (d)[3], (d)[4], (d)[5])

/* y[i ys + l] = (B^T x)[i] of x[j xs + l], j < 6. */
static inline void WX(bt6)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float d0 = x[l], d1 = x[xs + l], d2 = x[2 * xs + l], d3 = x[3 * xs + l], d4 = x[4 * xs + l];
        float d5 = x[5 * xs + l];
        WX_BT6(y[l], y[ys + l], y[2 * ys + l], y[3 * ys + l], y[4 * ys + l], y[5 * ys + l], d0, d1, d2, d3, d4, d5);
    }
}

/* y[i ys + l] = (A^T x)[i], i < 4, of x[j xs + l], j < 6. */
/* y0..y3 = A^T (m0..m5), as WX_BT6. */
#define WX_AT6(y0, y1, y2, y3, m0, m1, m2, m3, m4, m5)                          \
    do {                                                                       \
        __typeof__(m0) a_ = (m1) + (m2), b_ = (m1) - (m2);                     \
        __typeof__(m0) c_ = (m3) + (m4), d_ = (m3) - (m4);                     \
        y0 = (m0) + a_ + c_;                                                   \
        y1 = b_ + 2 * d_;                                                      \
        y2 = a_ + 4 * c_;                                                      \
        y3 = b_ + 8 * d_ + (m5);                                               \
    } while (0)
#define WX_AT6V(y, m) WX_AT6((y)[0], (y)[1], (y)[2], (y)[3], (m)[0], (m)[1], (m)[2], (m)[3], (m)[4], (m)[5])

static inline void WX(at6)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float m0 = x[l], m1 = x[xs + l], m2 = x[2 * xs + l], m3 = x[3 * xs + l], m4 = x[4 * xs + l];
        float m5 = x[5 * xs + l];
        WX_AT6(y[l], y[ys + l], y[2 * ys + l], y[3 * ys + l], m0, m1, m2, m3, m4, m5);
    }
}

/* y[i ys + l] = (G x)[i], i < 6, of x[j xs + l], j < 3. */
static inline void WX(g3)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float g0 = x[l], g1 = x[xs + l], g2 = x[2 * xs + l];
        float s = g0 + g2, t = g0 * (1.0f / 24) + g2 * (1.0f / 6);
        y[l] = g0 * 0.25f;
        y[ys + l] = -(s + g1) * (1.0f / 6);
        y[2 * ys + l] = -(s - g1) * (1.0f / 6);
        y[3 * ys + l] = t + g1 * (1.0f / 12);
        y[4 * ys + l] = t - g1 * (1.0f / 12);
        y[5 * ys + l] = g2;
    }
}

/* y0..y5 = A (d0..d3), the grad of A^T, as WX_BT6. */
#define WX_A4(y0, y1, y2, y3, y4, y5, d0, d1, d2, d3)                      \
    do {                                                                   \
        __typeof__(d0) e_ = (d0) + (d2), o_ = (d1) + (d3);                 \
        __typeof__(d0) e4_ = (d0) + 4 * (d2), o8_ = 2 * (d1) + 8 * (d3);   \
        y0 = (d0);                                                         \
        y1 = e_ + o_;                                                      \
        y2 = e_ - o_;                                                      \
        y3 = e4_ + o8_;                                                    \
        y4 = e4_ - o8_;                                                    \
        y5 = (d3);                                                         \
    } while (0)
#define WX_A4V(y, d) WX_A4((y)[0], (y)[1], (y)[2], (y)[3], (y)[4], (y)[5], (d)[0], (d)[1], (d)[2], (d)[3])

/* y[i ys + l] = (A x)[i], i < 6, of x[j xs + l], j < 4. */
static inline void WX(a4)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float d0 = x[l], d1 = x[xs + l], d2 = x[2 * xs + l], d3 = x[3 * xs + l];
        WX_A4(y[l], y[ys + l], y[2 * ys + l], y[3 * ys + l], y[4 * ys + l], y[5 * ys + l], d0, d1, d2, d3);
    }
}

/* y[i ys + l] = (G^T x)[i], i < 3, of x[j xs + l], j < 6 (grad of G). */
static inline void WX(gt6)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float q0 = x[l], q1 = x[xs + l], q2 = x[2 * xs + l], q3 = x[3 * xs + l], q4 = x[4 * xs + l];
        float q5 = x[5 * xs + l];
        float s = q1 + q2, d = q2 - q1, s34 = q3 + q4, d34 = q3 - q4;
        y[l] = q0 * 0.25f - s * (1.0f / 6) + s34 * (1.0f / 24);
        y[ys + l] = d * (1.0f / 6) + d34 * (1.0f / 12);
        y[2 * ys + l] = (s34 - s) * (1.0f / 6) + q5;
    }
}

/* Where 16 tiles' patches lie in one channel's planes: lane l's element
 * (i, k) is at off[l] + i w + k from the plane's (n = 0) start, read where
 * bit l of rm[i] & cm[k] is set (inside the image: padding and the lanes
 * past the last tile read 0, write nothing). */
typedef struct wx_lanes {
    int64_t off[WL];
    uint16_t rm[6], cm[6];
    uint8_t row[6][WL]; /* lane l's row i read under the mask row[i][l]: bit k set where (i, k) is inside */
} wx_lanes;

/* The lanes of tiles [t0 + b, t0 + b + 16) of cnt, size x size patches
 * with corners at the tile's top-left pixel (output grid) less ph, pw, in
 * planes h x w, images sn apart. */
static inline void WX(lanes_at)(const kiln_wino_geom *g, int64_t t0, int64_t b, int64_t cnt, int size, int64_t ph,
                                int64_t pw, int64_t h, int64_t w, int64_t sn, wx_lanes *ln) {
    int64_t per = g->th * g->tw;
    memset(ln->rm, 0, sizeof ln->rm);
    memset(ln->cm, 0, sizeof ln->cm);
    memset(ln->row, 0, sizeof ln->row);
    for (int l = 0; l < WL; l++) {
        int64_t t = t0 + b + l, r0 = t % per / g->tw * 4 - ph, q0 = t % g->tw * 4 - pw;
        unsigned cols = 0; /* bit k: column k inside the image */
        ln->off[l] = b + l < cnt ? t / per * sn + r0 * w + q0 : 0;
        for (int i = 0; i < size; i++) {
            if (b + l < cnt && r0 + i >= 0 && r0 + i < h) ln->rm[i] |= (uint16_t)(1u << l);
            if (q0 + i >= 0 && q0 + i < w) ln->cm[i] |= (uint16_t)(1u << l), cols |= 1u << i;
        }
        for (int i = 0; i < size; i++) ln->row[i][l] = (uint8_t)(ln->rm[i] >> l & 1 ? cols : 0);
    }
}

#if defined(__AVX512F__)
/* Lane l's row i of its patch, masked to the image: 8 floats (k < size). */
static inline __m256 WX(lane_row)(const float *p, const wx_lanes *ln, int i, int l, int64_t w) {
    return _mm256_maskz_loadu_ps(ln->row[i][l], p + ln->off[l] + i * w);
}

static inline __m512 WX(pair)(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

/* e[k] (k < size) = element k of the 16 lanes of z[j] = lane j's 8
 * elements | lane j + 8's. */
static inline void WX(transpose)(const __m512 z[8], __m512 e[8], int size) {
    /* after the in-chunk transposes, element k of lanes 0-3 | 4-7 | 8-11 | 12-15 */
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
    __m512 u[8];
#pragma GCC unroll 2
    for (int j = 0; j < 8; j += 4) {
        __m512 t0 = _mm512_unpacklo_ps(z[j], z[j + 1]), t1 = _mm512_unpackhi_ps(z[j], z[j + 1]);
        __m512 t2 = _mm512_unpacklo_ps(z[j + 2], z[j + 3]), t3 = _mm512_unpackhi_ps(z[j + 2], z[j + 3]);
        u[j] = _mm512_shuffle_ps(t0, t2, 0x44), u[j + 1] = _mm512_shuffle_ps(t0, t2, 0xEE);
        u[j + 2] = _mm512_shuffle_ps(t1, t3, 0x44), u[j + 3] = _mm512_shuffle_ps(t1, t3, 0xEE);
    }
    /* u[k] (u[4 + k]): lanes 0-3 (4-7) in chunk 0, 8-11 (12-15) in chunk 2: element k; chunks 1, 3: k + 4 */
#pragma GCC unroll 8
    for (int k = 0; k < size; k++) e[k] = _mm512_permutex2var_ps(u[k & 3], k < 4 ? lo : hi, u[4 + (k & 3)]);
}
#endif

/* d[(i size + k) WL + l] = lane l's element (i, k) of plane p (0 where
 * masked): the baseline's patch (the SIMD levels' read each lane's row by
 * one masked load and transpose in registers: on Zen 5 a masked
 * vgatherdps per element held 90% of AVX-512's input transform's
 * samples). */
static inline void WX(gather)(const float *p, const wx_lanes *ln, int size, int64_t w, float *d) {
    for (int i = 0; i < size; i++)
        for (int k = 0; k < size; k++)
            for (int l = 0; l < WL; l++)
                d[(i * size + k) * WL + l] = (ln->rm[i] & ln->cm[k]) >> l & 1 ? p[ln->off[l] + i * w + k] : 0.0f;
}

#if defined(__AVX2__)
/* The lanes whose groups of 4 lie side by side inside the image (images
 * 16 pixels wide or more): stored by rows of 16 pixels. */
static inline unsigned WX(whole_groups)(const wx_lanes *ln) {
    unsigned whole = 0, inside = ln->rm[0] & ln->rm[1] & ln->rm[2] & ln->rm[3] & ln->cm[0] & ln->cm[1] & ln->cm[2] &
                                 ln->cm[3];
    for (int l = 0; l < WL; l += 4)
        if ((inside >> l & 15) == 15 && ln->off[l + 1] == ln->off[l] + 4 && ln->off[l + 2] == ln->off[l] + 8 &&
            ln->off[l + 3] == ln->off[l] + 12)
            whole |= 15u << l;
    return whole;
}
#endif

#if defined(__AVX512F__)
/* Of y[k] (element k of a row of the 16 lanes' tiles): c[j]'s 128-bit
 * chunk q = lane 4 q + j's 4 pixels, rows[g] = lanes 4 g .. 4 g + 3's. */
static inline void WX(rows_of)(const __m512 y[4], __m512 c[4], __m512 rows[4]) {
    __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(y[0], y[1]));
    __m512d t1 = _mm512_castps_pd(_mm512_unpackhi_ps(y[0], y[1]));
    __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(y[2], y[3]));
    __m512d t3 = _mm512_castps_pd(_mm512_unpackhi_ps(y[2], y[3]));
    c[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)), c[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    c[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)), c[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    __m512 a = _mm512_shuffle_f32x4(c[0], c[1], 0x44), b = _mm512_shuffle_f32x4(c[2], c[3], 0x44);
    __m512 e = _mm512_shuffle_f32x4(c[0], c[1], 0xEE), f = _mm512_shuffle_f32x4(c[2], c[3], 0xEE);
    rows[0] = _mm512_shuffle_f32x4(a, b, 0x88), rows[1] = _mm512_shuffle_f32x4(a, b, 0xDD);
    rows[2] = _mm512_shuffle_f32x4(e, f, 0x88), rows[3] = _mm512_shuffle_f32x4(e, f, 0xDD);
}

static inline __m128 WX(chunk)(__m512 v, int q) {
    return q == 0 ? _mm512_castps512_ps128(v)
           : q == 1 ? _mm512_extractf32x4_ps(v, 1)
           : q == 2 ? _mm512_extractf32x4_ps(v, 2)
                    : _mm512_extractf32x4_ps(v, 3);
}
#elif !defined(__AVX2__)
/* Lane l's element (i, k) of d[(i 4 + k) WL + l] stored where it is
 * unmasked: the inverse of gather for the 4x4 output tiles, one store at
 * a time (AVX2 and AVX-512: tile_out). */
static inline void WX(scatter)(float *p, const wx_lanes *ln, int64_t w, const float *d) {
    for (int l = 0; l < WL; l++)
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 4; k++)
                if ((ln->rm[i] & ln->cm[k]) >> l & 1) p[ln->off[l] + i * w + k] = d[(i * 4 + k) * WL + l];
}
#endif

/* The passes take up to 16 sets of 16 tiles at a time and walk one channel
 * at a time through every set: their reads and writes run down each
 * channel's planes in order instead of hopping between channels, and the
 * masks are made once a set, not once a channel. Fills ln with the sets of tiles [t0 + s0, t0 + s0 +
 * 256) of cnt (as lanes_at) and returns how many. */
enum { WX_SETS = 16 };

static int WX(lane_sets)(const kiln_wino_geom *g, int64_t t0, int64_t s0, int64_t cnt, int size, int64_t ph,
                         int64_t pw, int64_t h, int64_t w, int64_t sn, wx_lanes *ln) {
    int sets = 0;
    for (int64_t b = s0; b < cnt && sets < WX_SETS; b += WL)
        WX(lanes_at)(g, t0, b, cnt, size, ph, pw, h, w, sn, &ln[sets++]);
    return sets;
}

/* The 36 rows dst[xi xs + l] = (B^T d B)[xi] of the 16 lanes' 6x6
 * patches in plane p (size 6), or (A d A^T)[xi] of their 4x4 ones (size
 * 4, dy's). AVX2 and AVX-512: the transform down each lane's columns (two
 * lanes a register at AVX-512: j | j + 8) as its rows are loaded, then,
 * row by row of that, the lanes transposed in registers and the transform
 * along them, stored once; the baseline: the patches gathered, then
 * transformed down and along through memory. The same operations on each
 * value at every level, so the same bits. (AVX-512 through memory took
 * 126 ns per 16 tiles and channel from the L2 on Zen 5, in registers 68.) */
#if defined(__AVX512F__)
static inline void WX(patch)(const float *p, const wx_lanes *ln, int64_t w, int size, float *dst, int64_t xs) {
    __m512 t[6][8]; /* t[i][j]: row i of the transform down lanes j | j + 8 */
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m512 r[6], y[6];
#pragma GCC unroll 6
        for (int i = 0; i < size; i++) r[i] = WX(pair)(WX(lane_row)(p, ln, i, j, w), WX(lane_row)(p, ln, i, j + 8, w));
        if (size == 6) WX_BT6V(y, r);
        else WX_A4V(y, r);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) t[i][j] = y[i];
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        __m512 e[8], y[6];
        WX(transpose)(t[i], e, size);
        if (size == 6) WX_BT6V(y, e);
        else WX_A4V(y, e);
#pragma GCC unroll 6
        for (int k = 0; k < 6; k++) _mm512_storeu_ps(dst + (i * 6 + k) * xs, y[k]);
    }
}
#elif defined(__AVX2__)
/* e[k] (k < size) = element k of the 8 lanes z[j] (8 elements each). */
static inline void WX(transpose8)(const __m256 z[8], __m256 e[8], int size) {
    __m256 u[8];
#pragma GCC unroll 2
    for (int j = 0; j < 8; j += 4) { /* u[j + k] (k < 4): elements k | k + 4 of lanes j .. j + 3 */
        __m256 t0 = _mm256_unpacklo_ps(z[j], z[j + 1]), t1 = _mm256_unpackhi_ps(z[j], z[j + 1]);
        __m256 t2 = _mm256_unpacklo_ps(z[j + 2], z[j + 3]), t3 = _mm256_unpackhi_ps(z[j + 2], z[j + 3]);
        u[j] = _mm256_shuffle_ps(t0, t2, 0x44), u[j + 1] = _mm256_shuffle_ps(t0, t2, 0xEE);
        u[j + 2] = _mm256_shuffle_ps(t1, t3, 0x44), u[j + 3] = _mm256_shuffle_ps(t1, t3, 0xEE);
    }
#pragma GCC unroll 8
    for (int k = 0; k < size; k++) e[k] = _mm256_permute2f128_ps(u[k & 3], u[4 + (k & 3)], k < 4 ? 0x20 : 0x31);
}

static inline void WX(patch)(const float *p, const wx_lanes *ln, int64_t w, int size, float *dst, int64_t xs) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int h = 0; h < WL; h += 8) {
        __m256 t[6][8]; /* t[i][j]: row i of the transform down lane h + j */
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256 r[6], y[6];
#pragma GCC unroll 6
            for (int i = 0; i < size; i++) {
                __m256i m = _mm256_set1_epi32(ln->row[i][h + j]);
                m = _mm256_cmpeq_epi32(_mm256_and_si256(m, bit), bit);
                r[i] = _mm256_maskload_ps(p + ln->off[h + j] + i * w, m);
            }
            if (size == 6) WX_BT6V(y, r);
            else WX_A4V(y, r);
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) t[i][j] = y[i];
        }
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            __m256 e[8], y[6];
            WX(transpose8)(t[i], e, size);
            if (size == 6) WX_BT6V(y, e);
            else WX_A4V(y, e);
#pragma GCC unroll 6
            for (int k = 0; k < 6; k++) _mm256_storeu_ps(dst + (i * 6 + k) * xs + h, y[k]);
        }
    }
}
#else
/* (inlined, so that size is a constant: a call took twice as long) */
static inline __attribute__((always_inline)) void WX(patch)(const float *p, const wx_lanes *ln, int64_t w, int size,
                                                            float *dst, int64_t xs) {
    float buf[72 * WL], *d = buf, *t = buf + size * size * WL;
    WX(gather)(p, ln, size, w, d);
    for (int k = 0; k < size; k++)
        if (size == 6) WX(bt6)(d + k * WL, 6 * WL, t + k * WL, 6 * WL);
        else WX(a4)(d + k * WL, 4 * WL, t + k * WL, 4 * WL);
    for (int i = 0; i < 6; i++)
        if (size == 6) WX(bt6)(t + i * 6 * WL, WL, dst + i * 6 * xs, xs);
        else WX(a4)(t + i * 4 * WL, WL, dst + i * 6 * xs, xs);
}
#endif

static void WX(input)(const kiln_wino_geom *g, int64_t c0, int64_t c1, int64_t t0, int64_t cnt, float *v, int64_t ld,
                      int64_t xs) {
    wx_lanes ln[WX_SETS];
    for (int64_t s0 = 0; s0 < cnt; s0 += WX_SETS * WL) {
        int sets = WX(lane_sets)(g, t0, s0, cnt, 6, g->ph, g->pw, g->h, g->w, g->in_sn, ln);
        for (int64_t c = c0; c < c1; c++)
            for (int s = 0; s < sets; s++)
                WX(patch)(g->in + c * g->in_sc, &ln[s], g->w, 6, v + (c - c0) * ld + s0 + s * WL, xs);
    }
}

#if defined(__AVX512F__)
/* The 16 lanes' 4x4 output tiles A^T P A of P[xi] = src[xi xs + l]
 * stored into plane p where they are inside: A^T down and along in
 * registers (the same operations as at6's, so the same bits), then, row
 * by row, the lanes transposed: each group of 4 lanes side by side inside
 * the image (scatter's) stores a row of 16 pixels, each other lane its
 * row of 4 under its mask. */
static inline void WX(tile_out)(float *p, const wx_lanes *ln, int64_t w, const float *src, int64_t xs) {
    __m512 q[4][6], y[4][4]; /* q[i][k]: A^T down column k; y[i]: row i of the tiles */
#pragma GCC unroll 6
    for (int k = 0; k < 6; k++) {
        __m512 m[6], r[4];
#pragma GCC unroll 6
        for (int j = 0; j < 6; j++) m[j] = _mm512_loadu_ps(src + (j * 6 + k) * xs);
        WX_AT6V(r, m);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) q[i][k] = r[i];
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) WX_AT6V(y[i], q[i]);
    unsigned whole = WX(whole_groups)(ln);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512 c[4], rows[4];
        WX(rows_of)(y[i], c, rows);
        for (int g = 0; g < 4; g++)
            if (whole >> (4 * g) & 1) _mm512_storeu_ps(p + ln->off[4 * g] + i * w, rows[g]);
        for (unsigned rest = ~whole & 0xFFFFu; rest; rest &= rest - 1) {
            int l = __builtin_ctz(rest);
            _mm_mask_storeu_ps(p + ln->off[l] + i * w, ln->row[i][l], WX(chunk)(c[l & 3], l >> 2));
        }
    }
}
#elif defined(__AVX2__)
/* AVX-512's tile_out in two halves of 8 lanes: c[j] = lane j's row of 4
 * | lane j + 4's; a whole group's row is two 256-bit stores, a lane inside
 * on the whole row one 128-bit store, and only a lane cut by the image's
 * edge a masked one (vmaskmovps stores are slow on AMD). Through memory
 * with scalar stores (the baseline's at6 and scatter) it took 323 ns per
 * 16 tiles and channel of 32x32 planes on Zen 5, in registers 148
 * (AVX-512: 98). */
static inline void WX(tile_out)(float *p, const wx_lanes *ln, int64_t w, const float *src, int64_t xs) {
    const __m128i bit = _mm_setr_epi32(1, 2, 4, 8);
    const unsigned whole = WX(whole_groups)(ln);
    for (int h = 0; h < WL; h += 8) {
        __m256 q[4][6], y[4][4]; /* q[i][k]: A^T down column k; y[i]: row i of the tiles */
#pragma GCC unroll 6
        for (int k = 0; k < 6; k++) {
            __m256 m[6], r[4];
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) m[j] = _mm256_loadu_ps(src + (j * 6 + k) * xs + h);
            WX_AT6V(r, m);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) q[i][k] = r[i];
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) WX_AT6V(y[i], q[i]);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m256d t0 = _mm256_castps_pd(_mm256_unpacklo_ps(y[i][0], y[i][1]));
            __m256d t1 = _mm256_castps_pd(_mm256_unpackhi_ps(y[i][0], y[i][1]));
            __m256d t2 = _mm256_castps_pd(_mm256_unpacklo_ps(y[i][2], y[i][3]));
            __m256d t3 = _mm256_castps_pd(_mm256_unpackhi_ps(y[i][2], y[i][3]));
            __m256 c[4] = {_mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2)), _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2)),
                           _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3)), _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3))};
            for (int g = 0; g < 2; g++) {
                int l0 = h + 4 * g;
                if (whole >> l0 & 1) {
                    float *row = p + ln->off[l0] + i * w; /* (immediates written out: ASan builds keep g a variable) */
                    _mm256_storeu_ps(row, g ? _mm256_permute2f128_ps(c[0], c[1], 0x31)
                                            : _mm256_permute2f128_ps(c[0], c[1], 0x20));
                    _mm256_storeu_ps(row + 8, g ? _mm256_permute2f128_ps(c[2], c[3], 0x31)
                                                : _mm256_permute2f128_ps(c[2], c[3], 0x20));
                    continue;
                }
                for (int j = 0; j < 4; j++) {
                    unsigned bits = ln->row[i][l0 + j];
                    __m128 v = g ? _mm256_extractf128_ps(c[j], 1) : _mm256_castps256_ps128(c[j]);
                    float *at = p + ln->off[l0 + j] + i * w;
                    if (bits == 15) _mm_storeu_ps(at, v);
                    else if (bits) {
                        __m128i m = _mm_and_si128(_mm_set1_epi32((int)bits), bit);
                        _mm_maskstore_ps(at, _mm_cmpeq_epi32(m, bit), v);
                    }
                }
            }
        }
    }
}
#endif

static void WX(output)(const kiln_wino_geom *g, const float *m, int64_t ld, int64_t xs, int64_t o0, int64_t o1,
                       int64_t t0, int64_t cnt) {
#if !defined(__AVX2__)
    float p[24 * WL], y[16 * WL];
#endif
    wx_lanes ln[WX_SETS];
    for (int64_t s0 = 0; s0 < cnt; s0 += WX_SETS * WL) {
        int sets = WX(lane_sets)(g, t0, s0, cnt, 4, 0, 0, g->oh, g->ow, g->out_sn, ln);
        for (int64_t o = o0; o < o1; o++)
            for (int s = 0; s < sets; s++) {
                const float *src = m + o * ld + s0 + s * WL;
#if defined(__AVX2__)
                WX(tile_out)(g->out + o * g->out_sc, &ln[s], g->ow, src, xs);
#else
                for (int k = 0; k < 6; k++) WX(at6)(src + k * xs, 6 * xs, p + k * WL, 6 * WL);
                for (int i = 0; i < 4; i++) WX(at6)(p + i * 6 * WL, WL, y + i * 4 * WL, WL);
                WX(scatter)(g->out + o * g->out_sc, &ln[s], g->ow, y);
#endif
            }
    }
}

/* Lanes over 16 consecutive places of u (so that the stores run along
 * rows: scattered ones, 36 rows a power of two apart, took 6x longer). */
static void WX(weights)(const float *w, int64_t o, int64_t c, bool rot, int64_t p0, int64_t p1, float *u) {
    float k9[9 * WL], t[18 * WL], r[36 * WL];
    for (int64_t pb = p0; pb < p1; pb += WL) {
        for (int l = 0; l < WL; l++) {
            int64_t at = pb + l, p = rot ? at % o * c + at / o : at; /* rot: at = c O + o */
            for (int k = 0; k < 9; k++) k9[k * WL + l] = at < p1 ? w[p * 9 + (rot ? 8 - k : k)] : 0.0f;
        }
        for (int j = 0; j < 3; j++) WX(g3)(k9 + j * WL, 3 * WL, t + j * WL, 3 * WL);
        for (int i = 0; i < 6; i++) WX(g3)(t + i * 3 * WL, WL, r + i * 6 * WL, WL);
        int64_t n = p1 - pb < WL ? p1 - pb : WL;
        for (int xi = 0; xi < 36; xi++)
            for (int64_t l = 0; l < n; l++) u[xi * o * c + pb + l] = r[xi * WL + l];
    }
}

static void WX(grad_output)(const kiln_wino_geom *g, int64_t o0, int64_t o1, int64_t t0, int64_t cnt, float *z,
                            int64_t ld, int64_t xs) {
    wx_lanes ln[WX_SETS];
    for (int64_t s0 = 0; s0 < cnt; s0 += WX_SETS * WL) {
        int sets = WX(lane_sets)(g, t0, s0, cnt, 4, 0, 0, g->oh, g->ow, g->out_sn, ln);
        for (int64_t o = o0; o < o1; o++)
            for (int s = 0; s < sets; s++)
                WX(patch)(g->out + o * g->out_sc, &ln[s], g->ow, 4, z + o * ld + s0 + s * WL, xs);
    }
}

static void WX(kernel_grad)(const float *m, int64_t o, int64_t c, int64_t p0, int64_t p1, float *gw, int64_t ldg,
                            bool acc) {
    float t[18 * WL], k9[9 * WL];
    for (int64_t pb = p0; pb < p1; pb += WL) {
        float q[36 * WL];
        for (int xi = 0; xi < 36; xi++)
            for (int l = 0; l < WL; l++) q[xi * WL + l] = pb + l < p1 ? m[xi * o * c + pb + l] : 0.0f;
        for (int j = 0; j < 6; j++) WX(gt6)(q + j * WL, 6 * WL, t + j * WL, 6 * WL);
        for (int i = 0; i < 3; i++) WX(gt6)(t + i * 6 * WL, WL, k9 + i * 3 * WL, WL);
        for (int l = 0; l < WL && pb + l < p1; l++)
            for (int k = 0; k < 9; k++) {
                float *d = gw + (pb + l) / c * ldg + (pb + l) % c * 9 + k;
                *d = acc ? *d + k9[k * WL + l] : k9[k * WL + l];
            }
    }
}

static const kiln_wino_xform WX(wino_table) = {WX(input), WX(output), WX(weights), WX(grad_output),
                                                WX(kernel_grad)};
