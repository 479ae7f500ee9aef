/* winograd2_xform.h — the body of F(2x2, 3x3)'s tile transforms
 * (winograd2.c), included once per dispatch level (winograd2_xform.c for
 * the baseline, which is the reference, winograd2_xform_avx2.c,
 * winograd2_xform_avx512.c) with W2_SUF its suffix. 16 tiles (or
 * kernels) are the lanes of every loop, so that a tile's arithmetic does
 * not depend on its place in a block, nor on the level: each level's
 * transforms give the baseline's bits. AVX2 and AVX-512 read each lane's
 * row of its patch by one masked load and transpose the lanes in
 * registers (one element at a time, the patches' reads were a third of
 * the 512-channel 4x4 layers' transforms on Zen 5). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define W2_CAT2(a, b) a##_##b
#define W2_CAT(a, b) W2_CAT2(a, b)
#define W2(name) W2_CAT(name, W2_SUF)

enum { W2L = 16 };
#define W2_LANES _Pragma("omp simd") for (int l = 0; l < W2L; l++)

/* Where 16 tiles [t0 + s, t0 + s + 16) of cnt lie in one channel's planes
 * (h x w, images sn apart), corners less ph, pw: lane l's element (i, k)
 * at off[l] + i w + k, inside the image where bit l of rm[i] & cm[k] is
 * set (lanes past cnt: none); row[i][l]: those bits of lane l's row i. */
typedef struct w2_lanes {
    int64_t off[W2L];
    unsigned rm[4], cm[4];
    uint8_t row[4][W2L];
} w2_lanes;

static inline w2_lanes W2(lanes_at)(const kiln_wino_geom *g, int64_t t0, int64_t s, int64_t cnt, int64_t ph,
                                    int64_t pw, int64_t h, int64_t w, int64_t sn) {
    w2_lanes ln;
    memset(&ln, 0, sizeof ln);
    int64_t per = g->th * g->tw;
    for (int l = 0; l < W2L && s + l < cnt; l++) {
        int64_t t = t0 + s + l, r0 = t % per / g->tw * 2 - ph, q0 = t % g->tw * 2 - pw;
        ln.off[l] = t / per * sn + r0 * w + q0;
        for (int i = 0; i < 4; i++) {
            if (r0 + i >= 0 && r0 + i < h) ln.rm[i] |= 1u << l;
            if (q0 + i >= 0 && q0 + i < w) ln.cm[i] |= 1u << l;
        }
    }
    for (int i = 0; i < 4; i++)
        for (int l = 0; l < W2L; l++)
            for (int k = 0; k < 4; k++) ln.row[i][l] |= (uint8_t)(((ln.rm[i] & ln.cm[k]) >> l & 1) << k);
    return ln;
}

/* d[i size + k][l] = lane l's element (i, k), i, k < size, of plane p (0
 * outside the image). */
static inline void W2(gather)(const float *p, const w2_lanes *ln, int size, int64_t w, float (*d)[W2L]) {
#if defined(__AVX512F__)
    for (int i = 0; i < size; i++) {
        __m512 z[4]; /* z[j]'s 128-bit chunk q: lane 4 q + j's 4 elements */
        for (int j = 0; j < 4; j++) {
            __m128 r[4];
            for (int q = 0; q < 4; q++)
                r[q] = _mm_maskz_loadu_ps(ln->row[i][4 * q + j], p + ln->off[4 * q + j] + i * w);
            __m512 a = _mm512_insertf32x4(_mm512_castps128_ps512(r[0]), r[1], 1);
            z[j] = _mm512_insertf32x4(_mm512_insertf32x4(a, r[2], 2), r[3], 3);
        }
        __m512 t0 = _mm512_unpacklo_ps(z[0], z[1]), t1 = _mm512_unpackhi_ps(z[0], z[1]);
        __m512 t2 = _mm512_unpacklo_ps(z[2], z[3]), t3 = _mm512_unpackhi_ps(z[2], z[3]);
        __m512 e[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE),
                       _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xEE)};
        for (int k = 0; k < size; k++) _mm512_storeu_ps(d[i * size + k], e[k]);
    }
#elif defined(__AVX2__)
    const __m128i bits = _mm_setr_epi32(1, 2, 4, 8);
    for (int i = 0; i < size; i++)
        for (int h = 0; h < W2L; h += 8) {
            __m256 z[4]; /* z[j]: lane h + j's 4 elements | lane h + 4 + j's */
            for (int j = 0; j < 4; j++) {
                __m128 r[2];
                for (int q = 0; q < 2; q++) {
                    int l = h + 4 * q + j;
                    __m128i m = _mm_set1_epi32(ln->row[i][l]);
                    m = _mm_cmpeq_epi32(_mm_and_si128(m, bits), bits);
                    r[q] = _mm_maskload_ps(p + ln->off[l] + i * w, m);
                }
                z[j] = _mm256_insertf128_ps(_mm256_castps128_ps256(r[0]), r[1], 1);
            }
            __m256 t0 = _mm256_unpacklo_ps(z[0], z[1]), t1 = _mm256_unpackhi_ps(z[0], z[1]);
            __m256 t2 = _mm256_unpacklo_ps(z[2], z[3]), t3 = _mm256_unpackhi_ps(z[2], z[3]);
            __m256 e[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                           _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
            for (int k = 0; k < size; k++) _mm256_storeu_ps(d[i * size + k] + h, e[k]);
        }
#else
    for (int i = 0; i < size; i++)
        for (int k = 0; k < size; k++)
            for (int l = 0; l < W2L; l++)
                d[i * size + k][l] = ln->row[i][l] >> k & 1 ? p[ln->off[l] + i * w + k] : 0.0f;
#endif
}

/* v[xi vs + c ld + t - t0] = (B^T d B)[xi] of tile t's 4x4 patch of
 * channel c (0 outside the image), tiles [t0, t0 + cnt) and zeros up to
 * cnt rounded up to 16. */
static void W2(input)(const kiln_wino_geom *g, int64_t cin, int64_t t0, int64_t cnt, float *v, int64_t ld,
                      int64_t vs) {
    for (int64_t s = 0; s < cnt; s += W2L) {
        w2_lanes ln = W2(lanes_at)(g, t0, s, cnt, g->ph, g->pw, g->h, g->w, g->in_sn);
        for (int64_t c = 0; c < cin; c++) {
            float d[16][W2L], e[16][W2L];
            W2(gather)(g->in + c * g->in_sc, &ln, 4, g->w, d);
            for (int k = 0; k < 4; k++) /* B^T d: rows */
                W2_LANES {
                    e[k][l] = d[k][l] - d[8 + k][l];
                    e[4 + k][l] = d[4 + k][l] + d[8 + k][l];
                    e[8 + k][l] = d[8 + k][l] - d[4 + k][l];
                    e[12 + k][l] = d[4 + k][l] - d[12 + k][l];
                }
            float *o = v + c * ld + s;
            for (int i = 0; i < 4; i++) { /* (B^T d) B: columns */
                float *o0 = o + 4 * i * vs, *o1 = o0 + vs, *o2 = o1 + vs, *o3 = o2 + vs;
                const float(*ei)[W2L] = e + 4 * i;
                W2_LANES {
                    o0[l] = ei[0][l] - ei[2][l];
                    o1[l] = ei[1][l] + ei[2][l];
                    o2[l] = ei[2][l] - ei[1][l];
                    o3[l] = ei[1][l] - ei[3][l];
                }
            }
        }
    }
}

/* The 2x2 output pixels A^T P A of P[xi] = m[xi ms + o ld + t - t0]
 * (pixels past oh, ow not written), tiles [t0, t0 + cnt); m's columns up
 * to cnt rounded up to 16 are read. */
static void W2(output)(const kiln_wino_geom *g, int64_t cout, const float *m, int64_t ld, int64_t ms, int64_t t0,
                       int64_t cnt) {
    for (int64_t s = 0; s < cnt; s += W2L) {
        w2_lanes ln = W2(lanes_at)(g, t0, s, cnt, 0, 0, g->oh, g->ow, g->out_sn);
        for (int64_t o = 0; o < cout; o++) {
            const float *src = m + o * ld + s;
            float h[8][W2L], y[4][W2L];
            for (int k = 0; k < 4; k++) { /* A^T P: 2 x 4 */
                const float *p0 = src + k * ms, *p1 = p0 + 4 * ms, *p2 = p1 + 4 * ms, *p3 = p2 + 4 * ms;
                W2_LANES {
                    h[k][l] = p0[l] + p1[l] + p2[l];
                    h[4 + k][l] = p1[l] - p2[l] - p3[l];
                }
            }
            for (int i = 0; i < 2; i++) /* (A^T P) A */
                W2_LANES {
                    y[2 * i][l] = h[4 * i][l] + h[4 * i + 1][l] + h[4 * i + 2][l];
                    y[2 * i + 1][l] = h[4 * i + 1][l] - h[4 * i + 2][l] - h[4 * i + 3][l];
                }
            float *out = g->out + o * g->out_sc;
            for (int l = 0; l < W2L; l++)
                for (int i = 0; i < 2; i++)
                    for (int k = 0; k < 2; k++)
                        if ((ln.rm[i] & ln.cm[k]) >> l & 1) out[ln.off[l] + i * g->ow + k] = y[2 * i + k][l];
        }
    }
}

/* zt[xi zs + (t - t0) (o1 - o0) + o - o0] = (A dy A^T)[xi] of tile t's
 * 2x2 pixels of gy's channel o in [o0, o1) (0 past oh, ow), through z
 * (o1 - o0 rows of tb a matrix, tiles as lanes), the matrices zs apart. */
static void W2(grad_output)(const kiln_wino_geom *g, int64_t o0, int64_t o1, int64_t t0, int64_t cnt, int64_t tb,
                            int64_t zs, float *z, float *zt) {
    int64_t ow = o1 - o0;
    for (int64_t s = 0; s < cnt; s += W2L) {
        w2_lanes ln = W2(lanes_at)(g, t0, s, cnt, 0, 0, g->oh, g->ow, g->out_sn);
        for (int64_t o = o0; o < o1; o++) {
            float d[4][W2L], e[8][W2L];
            W2(gather)(g->out + o * g->out_sc, &ln, 2, g->ow, d);
            for (int k = 0; k < 2; k++) /* A dy: 4 x 2 */
                W2_LANES {
                    e[k][l] = d[k][l];
                    e[2 + k][l] = d[k][l] + d[2 + k][l];
                    e[4 + k][l] = d[k][l] - d[2 + k][l];
                    e[6 + k][l] = -d[2 + k][l];
                }
            float *q = z + (o - o0) * tb + s;
            for (int i = 0; i < 4; i++) { /* (A dy) A^T: 4 x 4 */
                float *q0 = q + 4 * i * zs, *q1 = q0 + zs, *q2 = q1 + zs, *q3 = q2 + zs;
                W2_LANES {
                    q0[l] = e[2 * i][l];
                    q1[l] = e[2 * i][l] + e[2 * i + 1][l];
                    q2[l] = e[2 * i][l] - e[2 * i + 1][l];
                    q3[l] = -e[2 * i + 1][l];
                }
            }
        }
    }
    for (int xi = 0; xi < 16; xi++) /* the GEMM's B: tiles down, channels across */
        for (int64_t o = 0; o < ow; o++)
            for (int64_t t = 0; t < cnt; t++) zt[xi * zs + t * ow + o] = z[xi * zs + o * tb + t];
}

/* gw[o c_n 9 + c 9 ..] (acc: +=) G^T P G of P[xi] = mt[xi ms + (c - c0) ow
 * + o - o0], rows o in [o0, o1) (ow of them), channels [c0, c1), 16 rows a
 * step. */
static void W2(kernel_grad)(const float *mt, int64_t ms, int64_t o0, int64_t o1, int64_t c0, int64_t c1, int64_t c_n,
                            float *gw, bool acc) {
    int64_t ow = o1 - o0;
    for (int64_t c = c0; c < c1; c++)
        for (int64_t b = 0; b < ow; b += W2L) {
            int64_t nl = ow - b < W2L ? ow - b : W2L;
            float p[16][W2L], t[12][W2L], k9[9][W2L];
            for (int xi = 0; xi < 16; xi++) {
                const float *src = mt + xi * ms + (c - c0) * ow + b;
                if (nl == W2L) memcpy(p[xi], src, sizeof p[xi]);
                else
                    for (int l = 0; l < W2L; l++) p[xi][l] = l < nl ? src[l] : 0.0f;
            }
            for (int k = 0; k < 4; k++) /* G^T P: 3 x 4 */
                W2_LANES {
                    t[k][l] = p[k][l] + 0.5f * (p[4 + k][l] + p[8 + k][l]);
                    t[4 + k][l] = 0.5f * (p[4 + k][l] - p[8 + k][l]);
                    t[8 + k][l] = 0.5f * (p[4 + k][l] + p[8 + k][l]) + p[12 + k][l];
                }
            for (int i = 0; i < 3; i++) /* (G^T P) G: 3 x 3 */
                W2_LANES {
                    const float *ti = t[4 * i];
                    k9[3 * i][l] = ti[l] + 0.5f * (ti[W2L + l] + ti[2 * W2L + l]);
                    k9[3 * i + 1][l] = 0.5f * (ti[W2L + l] - ti[2 * W2L + l]);
                    k9[3 * i + 2][l] = 0.5f * (ti[W2L + l] + ti[2 * W2L + l]) + ti[3 * W2L + l];
                }
            for (int64_t l = 0; l < nl; l++) {
                float *d = gw + ((o0 + b + l) * c_n + c) * 9;
                if (acc)
                    for (int k = 0; k < 9; k++) d[k] += k9[k][l];
                else
                    for (int k = 0; k < 9; k++) d[k] = k9[k][l];
            }
        }
}

static const kiln_wino2_xform W2(wino2_table) = {W2(input), W2(output), W2(grad_output), W2(kernel_grad)};
