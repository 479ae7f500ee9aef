/* winograd_xform.h — the body of the F(4x4, 3x3) transforms (winograd.h),
 * included once per dispatch level (winograd_xform.c for the baseline,
 * winograd_xform_avx2.c, winograd_xform_avx512.c) with WX_SUF its suffix.
 * 16 tiles (or kernels) are the lanes of every loop, always all 16 (unused
 * lanes zero), so that a tile's arithmetic does not depend on its place in
 * a block: 1 and 2 threads give the same bits. */
#include <stdbool.h>
#include <stdint.h>

#define WX_CAT2(a, b) a##_##b
#define WX_CAT(a, b) WX_CAT2(a, b)
#define WX(name) WX_CAT(name, WX_SUF)

enum { WL = 16 };
#define LANES _Pragma("omp simd") for (int l = 0; l < WL; l++)

/* y[i ys + l] = (B^T x)[i] of x[j xs + l], j < 6. */
static inline void WX(bt6)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float d0 = x[l], d1 = x[xs + l], d2 = x[2 * xs + l], d3 = x[3 * xs + l], d4 = x[4 * xs + l];
        float d5 = x[5 * xs + l];
        y[l] = 4 * d0 - 5 * d2 + d4;
        y[ys + l] = d3 + d4 - 4 * (d1 + d2);
        y[2 * ys + l] = d4 - d3 + 4 * (d1 - d2);
        y[3 * ys + l] = d4 - d2 + 2 * (d3 - d1);
        y[4 * ys + l] = d4 - d2 - 2 * (d3 - d1);
        y[5 * ys + l] = 4 * d1 - 5 * d3 + d5;
    }
}

/* y[i ys + l] = (A^T x)[i], i < 4, of x[j xs + l], j < 6. */
static inline void WX(at6)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float m0 = x[l], m1 = x[xs + l], m2 = x[2 * xs + l], m3 = x[3 * xs + l], m4 = x[4 * xs + l];
        float m5 = x[5 * xs + l];
        float a = m1 + m2, b = m1 - m2, c = m3 + m4, d = m3 - m4;
        y[l] = m0 + a + c;
        y[ys + l] = b + 2 * d;
        y[2 * ys + l] = a + 4 * c;
        y[3 * ys + l] = b + 8 * d + m5;
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

/* y[i ys + l] = (A x)[i], i < 6, of x[j xs + l], j < 4 (grad of A^T). */
static inline void WX(a4)(const float *restrict x, int64_t xs, float *restrict y, int64_t ys) {
    LANES {
        float d0 = x[l], d1 = x[xs + l], d2 = x[2 * xs + l], d3 = x[3 * xs + l];
        float e = d0 + d2, o = d1 + d3, e4 = d0 + 4 * d2, o8 = 2 * d1 + 8 * d3;
        y[l] = d0;
        y[ys + l] = e + o;
        y[2 * ys + l] = e - o;
        y[3 * ys + l] = e4 + o8;
        y[4 * ys + l] = e4 - o8;
        y[5 * ys + l] = d3;
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

/* Tile t0 + b + l's image and top-left pixel (output grid), lane l < WL;
 * n < 0 past the last of cnt tiles. */
static inline void WX(lanes_of)(const kiln_wino_geom *g, int64_t t0, int64_t b, int64_t cnt, int64_t *n, int64_t *r,
                                int64_t *q) {
    int64_t per = g->th * g->tw;
    for (int l = 0; l < WL; l++) {
        int64_t t = t0 + b + l;
        n[l] = b + l < cnt ? t / per : -1;
        r[l] = t % per / g->tw * 4;
        q[l] = t % g->tw * 4;
    }
}

static void WX(input)(const kiln_wino_geom *g, int64_t c0, int64_t c1, int64_t t0, int64_t cnt, float *v, int64_t ld,
                      int64_t xs) {
    float d[36 * WL], t[36 * WL];
    for (int64_t b = 0; b < cnt; b += WL) {
        int64_t n[WL], r[WL], q[WL];
        WX(lanes_of)(g, t0, b, cnt, n, r, q);
        for (int64_t c = c0; c < c1; c++) {
            for (int l = 0; l < WL; l++) {
                int64_t r0 = r[l] - g->ph, q0 = q[l] - g->pw;
                const float *plane = n[l] >= 0 ? g->in + n[l] * g->in_sn + c * g->in_sc : NULL;
                if (plane && r0 >= 0 && q0 >= 0 && r0 + 6 <= g->h && q0 + 6 <= g->w) {
                    for (int i = 0; i < 6; i++)
                        for (int k = 0; k < 6; k++) d[(i * 6 + k) * WL + l] = plane[(r0 + i) * g->w + q0 + k];
                } else {
                    for (int i = 0; i < 6; i++)
                        for (int k = 0; k < 6; k++) {
                            int64_t ii = r0 + i, jj = q0 + k;
                            bool in = plane && ii >= 0 && ii < g->h && jj >= 0 && jj < g->w;
                            d[(i * 6 + k) * WL + l] = in ? plane[ii * g->w + jj] : 0.0f;
                        }
                }
            }
            for (int k = 0; k < 6; k++) WX(bt6)(d + k * WL, 6 * WL, t + k * WL, 6 * WL);
            for (int i = 0; i < 6; i++) WX(bt6)(t + i * 6 * WL, WL, v + i * 6 * xs + (c - c0) * ld + b, xs);
        }
    }
}

static void WX(output)(const kiln_wino_geom *g, const float *m, int64_t ld, int64_t xs, int64_t o0, int64_t o1,
                       int64_t t0, int64_t cnt) {
    float p[24 * WL], y[16 * WL];
    for (int64_t b = 0; b < cnt; b += WL) {
        int64_t n[WL], r[WL], q[WL];
        WX(lanes_of)(g, t0, b, cnt, n, r, q);
        for (int64_t o = o0; o < o1; o++) {
            const float *src = m + o * ld + b;
            for (int k = 0; k < 6; k++) WX(at6)(src + k * xs, 6 * xs, p + k * WL, 6 * WL);
            for (int i = 0; i < 4; i++) WX(at6)(p + i * 6 * WL, WL, y + i * 4 * WL, WL);
            for (int l = 0; l < WL && n[l] >= 0; l++) {
                float *plane = g->out + n[l] * g->out_sn + o * g->out_sc;
                int64_t rows = g->oh - r[l] < 4 ? g->oh - r[l] : 4, cols = g->ow - q[l] < 4 ? g->ow - q[l] : 4;
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t k = 0; k < cols; k++) plane[(r[l] + i) * g->ow + q[l] + k] = y[(i * 4 + k) * WL + l];
            }
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
    float d[16 * WL], t[24 * WL];
    for (int64_t b = 0; b < cnt; b += WL) {
        int64_t n[WL], r[WL], q[WL];
        WX(lanes_of)(g, t0, b, cnt, n, r, q);
        for (int64_t o = o0; o < o1; o++) {
            for (int l = 0; l < WL; l++) {
                const float *plane = n[l] >= 0 ? g->out + n[l] * g->out_sn + o * g->out_sc : NULL;
                for (int i = 0; i < 4; i++)
                    for (int k = 0; k < 4; k++) {
                        bool in = plane && r[l] + i < g->oh && q[l] + k < g->ow;
                        d[(i * 4 + k) * WL + l] = in ? plane[(r[l] + i) * g->ow + q[l] + k] : 0.0f;
                    }
            }
            for (int k = 0; k < 4; k++) WX(a4)(d + k * WL, 4 * WL, t + k * WL, 4 * WL);
            for (int i = 0; i < 6; i++) WX(a4)(t + i * 4 * WL, WL, z + i * 6 * xs + o * ld + b, xs);
        }
    }
}

static void WX(kernel_grad)(const float *m, int64_t o, int64_t c, int64_t p0, int64_t p1, float *gw, int64_t ldg) {
    float t[18 * WL], k9[9 * WL];
    for (int64_t pb = p0; pb < p1; pb += WL) {
        float q[36 * WL];
        for (int xi = 0; xi < 36; xi++)
            for (int l = 0; l < WL; l++) q[xi * WL + l] = pb + l < p1 ? m[xi * o * c + pb + l] : 0.0f;
        for (int j = 0; j < 6; j++) WX(gt6)(q + j * WL, 6 * WL, t + j * WL, 6 * WL);
        for (int i = 0; i < 3; i++) WX(gt6)(t + i * 6 * WL, WL, k9 + i * 3 * WL, WL);
        for (int l = 0; l < WL && pb + l < p1; l++)
            for (int k = 0; k < 9; k++) gw[(pb + l) / c * ldg + (pb + l) % c * 9 + k] = k9[k * WL + l];
    }
}

static const kiln_wino_xform WX(wino_table) = {WX(input), WX(output), WX(weights), WX(grad_output),
                                                WX(kernel_grad)};
