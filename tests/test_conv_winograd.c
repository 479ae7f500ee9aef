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
 * against f64. */
KT_TEST(conv_winograd_threads_same_bits) {
    const kiln__cpu_caches tiny = {4 << 10, 16 << 10, 64 << 10};
    kiln__cpu_caches_set(&tiny);
    const wino_case cases[] = {{3, 80, 20, 21, 32, 1}, {3, 32, 20, 21, 24, 1}};
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

/* The F(4x4) transforms of each SIMD level the CPU has (winograd_xform.h)
 * against the baseline's bit for bit, called one at a time: tiles from
 * mid-block to a short last set of lanes, images whose tiles stop at the
 * edges, padding 0 to 2, the forward's planes and grad x's. */
KT_TEST(conv_winograd_xforms_same_bits) {
    const kiln_cpu_caps *caps = kiln__cpu_caps();
    const kiln_wino_xform *ref = kiln__wino_xform_scalar(), *lv[2] = {NULL, NULL};
    const char *names[2] = {"avx2", "avx512"};
#if defined(__x86_64__)
    if (kiln__cpu_avx2(caps)) lv[0] = kiln__wino_xform_avx2();
    if (kiln__cpu_avx512(caps)) lv[1] = kiln__wino_xform_avx512();
#endif
    (void)caps;
    if (!lv[0] && !lv[1]) kt_skip("no SIMD level above the baseline");
    /* n, c, h, w, pad, grad_x */
    const int64_t cases[][6] = {{3, 5, 13, 11, 1, 0}, {2, 3, 9, 18, 0, 0}, {1, 4, 7, 21, 2, 0}, {2, 3, 10, 9, 1, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int64_t *k = cases[ci];
        int64_t n = k[0], c = k[1], h = k[2], w = k[3], p = k[4];
        kiln_conv_geom cg = {3, 3, 1, 1, p, p, 1, 1, h, w, h + 2 * p - 2, w + 2 * p - 2};
        int64_t nx = n * c * h * w, ny = n * c * cg.oh * cg.ow, big = nx > ny ? nx : ny;
        float *x = malloc((size_t)big * 4), *y[2] = {malloc((size_t)big * 4), malloc((size_t)big * 4)};
        KT_REQUIRE(x && y[0] && y[1], "out of memory");
        for (int64_t i = 0; i < big; i++) x[i] = (float)((i * 7919) % 1013) / 97.0f - 5.0f;
        kiln_wino_geom g = kiln__wino_geom_of(k[5], &cg, n, c, x, NULL, 4);
        int64_t t0 = g.tiles > 21 ? 5 : 0, cnt = g.tiles - t0, ld = (cnt + 15) / 16 * 16 + 16, xs = c * ld + 16;
        int64_t vf = 36 * xs, gw_f = c * c * 9, uf = 36 * c * c;
        float *v[2] = {malloc((size_t)vf * 4), malloc((size_t)vf * 4)};
        float *u[2] = {calloc((size_t)uf, 4), calloc((size_t)uf, 4)};
        float *gw[2] = {malloc((size_t)gw_f * 4), malloc((size_t)gw_f * 4)};
        KT_REQUIRE(v[0] && v[1] && u[0] && u[1] && gw[0] && gw[1], "out of memory");
        for (int l = 0; l < 2; l++) {
            if (!lv[l]) continue;
            const kiln_wino_xform *xf[2] = {ref, lv[l]};
            for (int s = 0; s < 2; s++) {
                memset(v[s], 0, (size_t)vf * 4);
                xf[s]->input(&g, 1, c, t0, cnt, v[s], ld, xs);
            }
            KT_CHECK(!memcmp(v[0], v[1], (size_t)vf * 4), "case %zu %s: input transforms differ", ci, names[l]);
            kiln_wino_geom gy = g; /* x read as dy */
            gy.out = x;
            for (int s = 0; s < 2; s++) {
                memset(v[s], 0, (size_t)vf * 4);
                xf[s]->grad_output(&gy, 0, c, t0, cnt, v[s], ld, xs);
            }
            KT_CHECK(!memcmp(v[0], v[1], (size_t)vf * 4), "case %zu %s: dy transforms differ", ci, names[l]);
            for (int s = 0; s < 2; s++) {
                kiln_wino_geom gs = g;
                gs.out = y[s];
                memset(y[s], 0, (size_t)big * 4);
                xf[s]->output(&gs, v[0], ld, xs, 0, c, t0, cnt);
            }
            KT_CHECK(!memcmp(y[0], y[1], (size_t)big * 4), "case %zu %s: output transforms differ", ci, names[l]);
            for (int s = 0; s < 2; s++) xf[s]->weights(x, c, c, k[5], 1, c * c, u[s]);
            KT_CHECK(!memcmp(u[0], u[1], (size_t)uf * 4), "case %zu %s: kernel transforms differ", ci, names[l]);
            for (int s = 0; s < 2; s++) {
                for (int64_t i = 0; i < gw_f; i++) gw[s][i] = (float)i;
                xf[s]->kernel_grad(x, c, c, 1, c * c, gw[s], c * 9, true);
            }
            KT_CHECK(!memcmp(gw[0], gw[1], (size_t)gw_f * 4), "case %zu %s: kernel gradients differ", ci, names[l]);
        }
        free(x), free(y[0]), free(y[1]), free(v[0]), free(v[1]), free(u[0]), free(u[1]), free(gw[0]), free(gw[1]);
    }
}
