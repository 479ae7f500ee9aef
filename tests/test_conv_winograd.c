/* test_conv_winograd.c — 3x3 stride-1 f32 convolutions by Winograd
 * (backends/cpu/winograd.c): y, gx and gw against the f64 tiled path at
 * every SIMD level, over shapes whose 4x4 tiles stop at the images' edges
 * (odd sizes, padding 0 to 2, batch 1 and 3, channels off the SIMD width);
 * 2 threads against 1 bit for bit; F(2x2, 3x3) (winograd2.c) alike. */
#include "../backends/cpu/gemm_kernels.h" /* kiln__cpu_caches_set */
#include "../backends/cpu/winograd.h"
#include "kt_simd.h"
#include "test_nn_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct wino_case {
    int64_t n, c, h, w, o, pad;
} wino_case;

static const wino_case CASES[] = {
    {1, 17, 13, 11, 19, 1}, {3, 16, 9, 14, 24, 0}, {3, 20, 7, 5, 17, 1}, {1, 33, 6, 6, 16, 0}, {2, 16, 5, 10, 18, 2},
    {2, 16, 9, 18, 17, 1}, /* rows of 4 whole tiles (the output's stores by rows) beside edge tiles */
};

/* y, gx, gw (nnt_conv_grads) with $KILN_CONV_WINOGRAD = mode. */
static void run(const wino_case *tc, kiln_dtype dt, const char *mode, int threads, double *out[3], int64_t num[3]) {
    setenv("KILN_CONV_WINOGRAD", mode, 1);
    nnt_conv_grads(dt, (int64_t[]){tc->n, tc->c, tc->h, tc->w}, (int64_t[]){tc->o, tc->c, 3, 3},
                   &(kiln_conv2d_params){.padding = {tc->pad, tc->pad}}, threads, out, num);
    unsetenv("KILN_CONV_WINOGRAD");
}

static const char *const NAMES[3] = {"y", "gx", "gw"};

/* The largest error against ref relative to ref's largest magnitude. */
static double rel_err(const double *got, const double *ref, int64_t n) {
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs(got[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return e / (m > 0 ? m : 1);
}

/* Measured (Zen 5, scalar to avx512): the f32 tiled path's largest error
 * is 1-4e-7 of the largest value, Winograd's 1-4e-6 (one digit less:
 * F(4x4, 3x3)'s transforms scale by up to 8 and 1/24); 1e-5 leaves room. */
KT_TEST(conv_winograd_matches_f64) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const wino_case *tc = &CASES[i];
        kiln_conv_geom g = {3, 3, 1, 1, tc->pad, tc->pad, 1, 1, tc->h, tc->w, tc->h + 2 * tc->pad - 2,
                            tc->w + 2 * tc->pad - 2};
        setenv("KILN_CONV_WINOGRAD", "force", 1);
        KT_CHECK(kiln__wino_fits(&g, tc->n, tc->c, tc->o), "case %zu: Winograd not taken", i);
        double *ref[3], *tiled[3];
        int64_t num[3];
        run(tc, KILN_F64, "0", 1, ref, num);
        run(tc, KILN_F32, "0", 1, tiled, num);
        KT_FOR_EACH_SIMD(v) {
            double *got[3];
            run(tc, KILN_F32, "force", 1, got, num);
            for (int k = 0; k < 3; k++) {
                double e = rel_err(got[k], ref[k], num[k]), et = rel_err(tiled[k], ref[k], num[k]);
                KT_CHECK(e <= 1e-5, "case %zu %s: Winograd's error %.3g of the largest (tiled f32 %.3g)", i, NAMES[k],
                         e, et);
                free(got[k]);
            }
        }
        for (int k = 0; k < 3; k++) free(ref[k]), free(tiled[k]);
    }
}

/* Several blocks of tiles (tiny caches: 64 tiles a block) and of gw's
 * channels (64 a chunk), threaded; gw's sums split in parts of the tiles
 * (two chunks of 80 channels in one group, and 32 channels: one chunk)
 * against f64; 2 blocks (72 tiles) of a U within the L3, which the
 * forward and gx pack once for both; and 144 input channels, 2 of the
 * GEMM's kc blocks deep, for the forward's GEMMs on V's panels. */
KT_TEST(conv_winograd_threads_same_bits) {
    const kiln__cpu_caches tiny = {4 << 10, 16 << 10, 64 << 10};
    kiln__cpu_caches_set(&tiny);
    const wino_case cases[] = {
        {3, 80, 20, 21, 32, 1}, {3, 32, 20, 21, 24, 1}, {2, 16, 24, 24, 24, 1}, {5, 144, 20, 21, 16, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double *one[3], *two[3], *ref[3];
        int64_t num[3];
        run(&cases[i], KILN_F64, "0", 1, ref, num);
        run(&cases[i], KILN_F32, "force", 1, one, num);
        run(&cases[i], KILN_F32, "force", 2, two, num);
        for (int k = 0; k < 3; k++) {
            double e = rel_err(one[k], ref[k], num[k]);
            KT_CHECK(e <= 1e-5, "case %zu %s: Winograd's error %.3g of the largest", i, NAMES[k], e);
            KT_CHECK(nnt_close(NAMES[k], two[k], one[k], num[k], 0, 0), "case %zu %s: 2 threads differ from 1", i,
                     NAMES[k]);
            free(one[k]), free(two[k]), free(ref[k]);
        }
    }
    kiln__cpu_caches_set(NULL);
}

/* gw's sums not split in parts: at 400 outputs two chunks' sums (36 x 400
 * x 64 floats each) make a group, and 400 channels 4 groups (2, 2, 2 and
 * 1 chunks, the last of 16 channels), against f64 and 2 threads against 1
 * (only gw: y and gx sum hundreds of channels, beyond the tolerance above). */
KT_TEST(conv_winograd_grad_w_groups) {
    const wino_case tc = {2, 400, 5, 6, 400, 1};
    double *one[3], *two[3], *ref[3];
    int64_t num[3];
    run(&tc, KILN_F64, "0", 1, ref, num);
    run(&tc, KILN_F32, "force", 1, one, num);
    run(&tc, KILN_F32, "force", 2, two, num);
    double e = rel_err(one[2], ref[2], num[2]);
    KT_CHECK(e <= 1e-5, "gw: Winograd's error %.3g of the largest", e);
    KT_CHECK(nnt_close("gw", two[2], one[2], num[2], 0, 0), "gw: 2 threads differ from 1");
    for (int k = 0; k < 3; k++) free(one[k]), free(two[k]), free(ref[k]);
}

/* F(2x2, 3x3) (winograd2.c), the forward and both gradients, against f64
 * at every SIMD level (its GEMM's kernel), over the cases' odd sizes and
 * paddings. */
KT_TEST(conv_winograd2_matches_f64) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const wino_case *tc = &CASES[i];
        kiln_conv_geom g = {3, 3, 1, 1, tc->pad, tc->pad, 1, 1, tc->h, tc->w, tc->h + 2 * tc->pad - 2,
                            tc->w + 2 * tc->pad - 2};
        setenv("KILN_CONV_WINOGRAD", "force2", 1);
        KT_CHECK(kiln__wino2_fits(&g, tc->n, tc->c, tc->o) && !kiln__wino_fits(&g, tc->n, tc->c, tc->o),
                 "case %zu: F(2x2) not taken", i);
        double *ref[3];
        int64_t num[3];
        run(tc, KILN_F64, "0", 1, ref, num);
        KT_FOR_EACH_SIMD(v) {
            double *got[3];
            run(tc, KILN_F32, "force2", 1, got, num);
            for (int k = 0; k < 3; k++) {
                double e = rel_err(got[k], ref[k], num[k]);
                KT_CHECK(e <= 1e-5, "case %zu %s: F(2x2)'s error %.3g of the largest", i, NAMES[k], e);
            }
            for (int k = 0; k < 3; k++) free(got[k]);
        }
        for (int k = 0; k < 3; k++) free(ref[k]);
    }
}

/* F(2x2) in several blocks of tiles and chunks of U's rows (tiny caches:
 * 64 tiles a block), 2 threads against 1 bit for bit, and against f64: y,
 * gx and gw; the second case's gw in 2 blocks (363 tiles) and 2 units of
 * output channels (70). */
KT_TEST(conv_winograd2_threads_same_bits) {
    const kiln__cpu_caches tiny = {4 << 10, 16 << 10, 64 << 10};
    kiln__cpu_caches_set(&tiny);
    const wino_case cases[] = {{3, 40, 11, 13, 33, 1}, {3, 20, 21, 21, 70, 1}};
    for (int i = 0; i < 2; i++) {
        double *one[3], *two[3], *ref[3];
        int64_t num[3];
        run(&cases[i], KILN_F64, "0", 1, ref, num);
        run(&cases[i], KILN_F32, "force2", 1, one, num);
        run(&cases[i], KILN_F32, "force2", 2, two, num);
        for (int k = 0; k < 3; k++) {
            double e = rel_err(one[k], ref[k], num[k]);
            KT_CHECK(e <= 1e-5, "case %d %s: F(2x2)'s error %.3g of the largest", i, NAMES[k], e);
            KT_CHECK(nnt_close(NAMES[k], two[k], one[k], num[k], 0, 0), "case %d %s: 2 threads differ from 1", i,
                     NAMES[k]);
            free(one[k]), free(two[k]), free(ref[k]);
        }
    }
    kiln__cpu_caches_set(NULL);
}

/* One case's operands for the transforms: x (also read as dy, kernels and
 * sums), and two of each output, the baseline's and a level's. */
typedef struct xf_case {
    kiln_wino_geom g;
    float *x, *y[2], *v[2], *z[2], *gw[2];
    int64_t c, big, t0, cnt, ld, xs, vf, gwf;
    bool rot; /* grad x's planes, and its kernels */
} xf_case;

/* F(4x4)'s five transforms of the baseline (xf[0]) and a level (xf[1]). */
static void xforms4(const xf_case *t, const kiln_wino_xform *const xf[2], const char *what) {
    const kiln_wino_geom *g = &t->g;
    int64_t c = t->c;
    for (int s = 0; s < 2; s++) {
        memset(t->v[s], 0, (size_t)t->vf * 4);
        xf[s]->input(g, 1, c, t->t0, t->cnt, t->v[s], t->ld, t->xs);
    }
    KT_CHECK(!memcmp(t->v[0], t->v[1], (size_t)t->vf * 4), "%s: input transforms differ", what);
    kiln_wino_geom gy = *g; /* x read as dy */
    gy.out = t->x;
    for (int s = 0; s < 2; s++) {
        memset(t->v[s], 0, (size_t)t->vf * 4);
        xf[s]->grad_output(&gy, 0, c, t->t0, t->cnt, t->v[s], t->ld, t->xs);
    }
    KT_CHECK(!memcmp(t->v[0], t->v[1], (size_t)t->vf * 4), "%s: dy transforms differ", what);
    for (int s = 0; s < 2; s++) {
        kiln_wino_geom go = *g;
        go.out = t->y[s];
        memset(t->y[s], 0, (size_t)t->big * 4);
        xf[s]->output(&go, t->v[0], t->ld, t->xs, 0, c, t->t0, t->cnt);
    }
    KT_CHECK(!memcmp(t->y[0], t->y[1], (size_t)t->big * 4), "%s: output transforms differ", what);
    for (int s = 0; s < 2; s++) {
        memset(t->z[s], 0, (size_t)t->vf * 4);
        xf[s]->weights(t->x, c, c, t->rot, 1, c * c, t->z[s]);
    }
    KT_CHECK(!memcmp(t->z[0], t->z[1], (size_t)t->vf * 4), "%s: kernel transforms differ", what);
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; i < t->gwf; i++) t->gw[s][i] = (float)i;
        xf[s]->kernel_grad(t->x, c, c, 1, c * c, t->gw[s], c * 9, true);
    }
    KT_CHECK(!memcmp(t->gw[0], t->gw[1], (size_t)t->gwf * 4), "%s: kernel gradients differ", what);
}

/* F(2x2)'s four transforms, as xforms4. */
static void xforms2(const xf_case *t, const kiln_wino2_xform *const xf[2], const char *what) {
    const kiln_wino_geom *g = &t->g;
    int64_t c = t->c;
    for (int s = 0; s < 2; s++) {
        memset(t->v[s], 0, (size_t)t->vf * 4);
        xf[s]->input(g, c, t->t0, t->cnt, t->v[s], t->ld, t->xs);
    }
    KT_CHECK(!memcmp(t->v[0], t->v[1], (size_t)t->vf * 4), "%s: input transforms differ", what);
    for (int s = 0; s < 2; s++) {
        kiln_wino_geom go = *g;
        go.out = t->y[s];
        memset(t->y[s], 0, (size_t)t->big * 4);
        xf[s]->output(&go, c, t->v[0], t->ld, t->xs, t->t0, t->cnt);
    }
    KT_CHECK(!memcmp(t->y[0], t->y[1], (size_t)t->big * 4), "%s: output transforms differ", what);
    kiln_wino_geom gy = *g; /* x read as dy */
    gy.out = t->x;
    for (int s = 0; s < 2; s++) {
        memset(t->z[s], 0, (size_t)t->vf * 4);
        xf[s]->grad_output(&gy, 1, c, t->t0, t->cnt, t->ld, t->xs, t->v[s], t->z[s]);
    }
    KT_CHECK(!memcmp(t->z[0], t->z[1], (size_t)t->vf * 4), "%s: dy transforms differ", what);
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; i < t->gwf; i++) t->gw[s][i] = (float)i;
        xf[s]->kernel_grad(t->x, c * c, 1, c, 0, c, c, t->gw[s], true);
    }
    KT_CHECK(!memcmp(t->gw[0], t->gw[1], (size_t)t->gwf * 4), "%s: kernel gradients differ", what);
}

/* The F(4x4) and F(2x2) transforms of each SIMD level the CPU has
 * (winograd_xform.h, winograd2_xform.h) against the baseline's bit for
 * bit, called one at a time: tiles from mid-block to a short last set of
 * lanes, images whose tiles stop at the edges or fill them, padding 0 to
 * 2, the forward's planes and grad x's. */
KT_TEST(conv_winograd_xforms_same_bits) {
    const kiln_wino_xform *lv4[2] = {NULL, NULL};
    const kiln_wino2_xform *lv2[2] = {NULL, NULL};
    const char *names[2] = {"avx2", "avx512"};
#if defined(__x86_64__)
    const kiln_cpu_caps *caps = kiln__cpu_caps();
    if (kiln__cpu_avx2(caps)) lv4[0] = kiln__wino_xform_avx2(), lv2[0] = kiln__wino2_xform_avx2();
    if (kiln__cpu_avx512(caps)) lv4[1] = kiln__wino_xform_avx512(), lv2[1] = kiln__wino2_xform_avx512();
#endif
    if (!lv4[0] && !lv4[1]) kt_skip("no SIMD level above the baseline");
    /* n, c, h, w, pad, grad_x */
    const int64_t cases[][6] = {{3, 5, 13, 11, 1, 0}, {2, 3, 9, 18, 0, 0}, {1, 4, 7, 21, 2, 0}, {2, 3, 10, 9, 1, 1},
                                {1, 2, 18, 18, 0, 0}}; /* the last: every group of 4 lanes whole, in both halves of 8 */
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int tile = 2; tile <= 4; tile += 2) {
            const int64_t *k = cases[ci];
            int64_t n = k[0], c = k[1], h = k[2], w = k[3], p = k[4];
            kiln_conv_geom cg = {3, 3, 1, 1, p, p, 1, 1, h, w, h + 2 * p - 2, w + 2 * p - 2};
            xf_case t = {.c = c, .rot = k[5]};
            int64_t nx = n * c * h * w, ny = n * c * cg.oh * cg.ow;
            t.big = nx > ny ? nx : ny;
            t.x = malloc((size_t)t.big * 4);
            KT_REQUIRE(t.x, "out of memory");
            t.g = kiln__wino_geom_of(k[5], &cg, n, c, t.x, NULL, tile);
            t.t0 = t.g.tiles > 21 ? 5 : 0, t.cnt = t.g.tiles - t.t0, t.ld = (t.cnt + 15) / 16 * 16 + 16;
            t.xs = c * t.ld + 16, t.vf = 36 * t.xs, t.gwf = c * c * 9;
            if (t.vf < t.big) t.vf = t.big;
            for (int s = 0; s < 2; s++) {
                t.y[s] = malloc((size_t)t.big * 4), t.v[s] = malloc((size_t)t.vf * 4);
                t.z[s] = malloc((size_t)t.vf * 4), t.gw[s] = malloc((size_t)t.gwf * 4);
                KT_REQUIRE(t.y[s] && t.v[s] && t.z[s] && t.gw[s], "out of memory");
            }
            for (int64_t i = 0; i < t.big; i++) t.x[i] = (float)((i * 7919) % 1013) / 97.0f - 5.0f;
            for (int l = 0; l < 2; l++) {
                char what[64];
                snprintf(what, sizeof what, "case %zu F(%dx%d) %s", ci, tile, tile, names[l]);
                if (tile == 4 && lv4[l])
                    xforms4(&t, (const kiln_wino_xform *const[2]){kiln__wino_xform_scalar(), lv4[l]}, what);
                if (tile == 2 && lv2[l])
                    xforms2(&t, (const kiln_wino2_xform *const[2]){kiln__wino2_xform_scalar(), lv2[l]}, what);
            }
            free(t.x);
            for (int s = 0; s < 2; s++) free(t.y[s]), free(t.v[s]), free(t.z[s]), free(t.gw[s]);
        }
}
