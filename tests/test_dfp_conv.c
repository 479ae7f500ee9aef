/* test_dfp_conv.c — kiln_dfp_conv2d's columns gathered from int16 codes
 * (backends/cpu/dfp_im2col.c, ops/dfp.c): the gather of quantize(x) equals
 * quantize(im2col(x)) bit for bit whenever every pixel is a tap, and the
 * convolution's output and gradients equal, bit for bit, those of the DFP
 * product of explicit f32 columns (the path it replaces). */
#include "kt.h"

#include "../backends/cpu/gemm_dfp.h"
#include "../backends/cpu/coders.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill(float *x, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = scale * (float)((double)(seed >> 40) / (double)(1ull << 24) - 0.5);
    }
}

static int64_t out_size(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (n + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* geometries g (kh kw sh sw ph pw dh dw) that tap every pixel of a 7 x 6 image */
static const int64_t geoms[][8] = {
    {3, 3, 1, 1, 1, 1, 1, 1}, {3, 3, 2, 2, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 1, 1},
    {2, 3, 2, 1, 0, 2, 1, 1}, {3, 2, 1, 1, 2, 1, 2, 1},
};

KT_TEST(dfp_im2col_codes_equal_quantized_columns) {
    const int64_t n = 3, c = 2, h = 7, w = 6, nx = n * c * h * w;
    float *xv = malloc(nx * 4);
    int16_t *qx = malloc(nx * 2);
    fill(xv, nx, 5, 3.0f);
    int ex, mx;
    kiln__dfp_quantize(xv, nx, 14, qx, &ex, &mx, false, 0);
    for (size_t gi = 0; gi < sizeof geoms / sizeof *geoms; gi++) {
        const int64_t *g = geoms[gi];
        int64_t oh = out_size(h, g[0], g[2], g[4], g[6]), ow = out_size(w, g[1], g[3], g[5], g[7]);
        int64_t nc = c * g[0] * g[1] * n * oh * ow;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, n, c, h, w);
        KT_OK(kiln_tensor_set_f32(x, xv, nx));
        kiln_tensor *cols = kiln__im2col_cn(ctx, x, g, oh, ow, 0.0);
        KT_NOTNULL(cols);
        kiln_graph *gr = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(gr, cols));
        KT_OK(kiln_graph_compute(gr));
        float *cv = malloc(nc * 4);
        int16_t *want = malloc(nc * 2), *got = malloc(nc * 2);
        KT_OK(kiln_tensor_get_f32(cols, cv, nc));
        int ec, mc;
        kiln__dfp_quantize(cv, nc, 14, want, &ec, &mc, false, 0);
        for (int nt = 1; nt <= 2; nt++) {
            memset(got, 0x55, nc * 2);
            kiln__dfp_im2col_cn(qx, n, c, h, w, g, oh, ow, got, nt);
            KT_CHECK(ec == ex && mc == mx, "geometry %zu: exponent %d bound %d, the image's %d %d", gi, ec, mc, ex, mx);
            KT_CHECK(!memcmp(got, want, nc * 2), "geometry %zu, %d threads: gathered codes differ", gi, nt);
        }
        free(cv), free(want), free(got);
        kiln_ctx_free(ctx);
    }
    free(xv), free(qx);
}

/* y, dx, dw, db of kiln_dfp_conv2d against the DFP product of explicit
 * columns, kiln_dfp_matmul_t(w, im2col_cn(x)), with the same reshapes:
 * bit for bit, but dx at stride 1 (a transposed convolution) within its
 * folds' rounding */
KT_TEST(dfp_conv2d_equals_explicit_columns) {
    const int64_t n = 2, c = 3, h = 7, wd = 6, o = 5;
    for (size_t gi = 0; gi < 2; gi++) {
        const int64_t *g = geoms[gi];
        int64_t oh = out_size(h, 3, g[2], 1, 1), ow = out_size(wd, 3, g[3], 1, 1), k = c * 9;
        int64_t sizes[4] = {n * o * oh * ow, n * c * h * wd, o * k, o};
        float *xv = malloc(sizes[1] * 4), *wv = malloc(sizes[2] * 4), bv[5], *res[2][4];
        fill(xv, sizes[1], 7, 2.0f), fill(wv, sizes[2], 8, 0.6f), fill(bv, o, 9, 1.0f);
        for (int way = 0; way < 2; way++) {
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, n, c, h, wd), *w = kiln_new_4d(ctx, KILN_F32, o, c, 3, 3);
            kiln_tensor *b = kiln_new_1d(ctx, KILN_F32, o);
            KT_OK(kiln_tensor_set_f32(x, xv, sizes[1]));
            KT_OK(kiln_tensor_set_f32(w, wv, sizes[2]));
            KT_OK(kiln_tensor_set_f32(b, bv, o));
            kiln_tensor_set_requires_grad(x, true), kiln_tensor_set_requires_grad(w, true);
            kiln_tensor_set_requires_grad(b, true);
            kiln_tensor *y;
            if (way == 0) {
                kiln_conv2d_params p = {.stride = {(int)g[2], (int)g[3]}, .padding = {1, 1}};
                y = kiln_dfp_conv2d(ctx, x, w, b, &p);
            } else {
                kiln_tensor *cols = kiln_reshape(ctx, kiln__im2col_cn(ctx, x, g, oh, ow, 0.0), 2,
                                                 (int64_t[]){k, n * oh * ow});
                y = kiln_dfp_matmul_t(ctx, kiln_reshape(ctx, w, 2, (int64_t[]){o, k}), false, cols, false);
                y = kiln_permute(ctx, kiln_reshape(ctx, y, 4, (int64_t[]){o, n, oh, ow}), (const int[]){1, 0, 2, 3});
                y = kiln_add(ctx, y, kiln_reshape(ctx, b, 4, (int64_t[]){1, o, 1, 1}));
            }
            KT_NOTNULL(y);
            kiln_tensor *r = kiln_new_4d(ctx, KILN_F32, n, o, oh, ow);
            KT_OK(kiln_tensor_fill_randn(r, 11, 0.0, 1.0));
            kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, r));
            kiln_graph *gr = kiln_graph_new(ctx);
            KT_OK(kiln_graph_add(gr, y));
            KT_OK(kiln_graph_add(gr, loss));
            KT_OK(kiln_graph_backward(gr, loss));
            KT_OK(kiln_graph_compute(gr));
            kiln_tensor *ts[4] = {y, kiln_tensor_grad(x), kiln_tensor_grad(w), kiln_tensor_grad(b)};
            for (int i = 0; i < 4; i++) {
                res[way][i] = malloc((size_t)sizes[i] * 4);
                KT_OK(kiln_tensor_get_f32(ts[i], res[way][i], sizes[i]));
            }
            kiln_ctx_free(ctx);
        }
        const char *names[4] = {"y", "dx", "dw", "db"};
        for (int i = 0; i < 4; i++) {
            if (i == 1 && g[2] == 1 && g[3] == 1) {
                /* stride 1: dx is the transposed convolution of gy (ops/dfp.c), the same codes as the columns'
                 * route with the f32 folds elsewhere (chunks over output channels and taps, not per tap
                 * and then col2im's adds): equal within those folds' rounding, 2^-24 a fold of at most
                 * 45 terms of |w r| < 2 each */
                for (int64_t e = 0; e < sizes[1]; e++)
                    KT_CHECK(fabsf(res[0][1][e] - res[1][1][e]) <= 0x1p-15f, "stride 1: dx[%lld] %.9g vs %.9g",
                             (long long)e, res[0][1][e], res[1][1][e]);
            } else
                KT_CHECK(!memcmp(res[0][i], res[1][i], (size_t)sizes[i] * 4), "stride %lld: %s differs",
                         (long long)g[2], names[i]);
            free(res[0][i]), free(res[1][i]);
        }
        free(xv), free(wv);
    }
}

/* kiln__gemm_dfp_conv_t, whose packer gathers the columns from the image,
 * against kiln__gemm_dfp_t on explicit columns, bit for bit: B the columns
 * (the forward) and their transpose (the weight gradient), A either way,
 * odd sizes, every geometry above and one that skips pixels. */
KT_TEST(dfp_gemm_implicit_columns_equal_explicit) {
    const int64_t n = 3, c = 3, h = 7, w = 6, nx = n * c * h * w, m = 5;
    const int64_t more[][8] = {{1, 1, 2, 2, 0, 0, 1, 1}, {3, 3, 1, 2, 0, 1, 1, 2}};
    int16_t *qx = malloc((nx + 1) * 2);
    float *xv = malloc(nx * 4);
    fill(xv, nx, 6, 1.5f);
    int ex, mx;
    kiln__dfp_quantize(xv, nx, 14, qx, &ex, &mx, false, 0);
    qx[nx] = 0x7fff; /* the slack: never a code */
    int ng = (int)(sizeof geoms / sizeof *geoms);
    for (int gi = 0; gi < ng + 2; gi++) {
        const int64_t *g = gi < ng ? geoms[gi] : more[gi - ng];
        int64_t oh = out_size(h, g[0], g[2], g[4], g[6]), ow = out_size(w, g[1], g[3], g[5], g[7]);
        int64_t kc = c * g[0] * g[1], nc = n * oh * ow;
        int16_t *cols = malloc(kc * nc * 2), *qa = malloc(m * (kc > nc ? kc : nc) * 2);
        float *want = malloc(m * (kc > nc ? kc : nc) * 4), *got = malloc(m * (kc > nc ? kc : nc) * 4);
        kiln__dfp_im2col_cn(qx, n, c, h, w, g, oh, ow, cols, 1);
        kiln_dfp_image img = {qx, n, c, h, w, oh, ow, {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]}, 0, 0, false};
        for (int bt = 0; bt < 2; bt++)
            for (int akm = 0; akm < 2; akm++)
                for (int nt = 1; nt <= 2; nt++) {
                    int64_t pn = bt ? kc : nc, pk = bt ? nc : kc;
                    for (int64_t i = 0; i < m * pk; i++) qa[i] = (int16_t)((i * 2654435761u >> 7) % 16383 - 8191);
                    KT_OK(kiln__gemm_dfp_t(akm, !bt, m, pn, pk, qa, akm ? m : pk, 8191, -12, cols, bt ? pk : pn, mx,
                                           ex, want, pn, nt));
                    memset(got, 0xff, m * pn * 4);
                    KT_OK(kiln__gemm_dfp_conv_t(akm, bt, m, pn, pk, qa, akm ? m : pk, 8191, -12, &img, mx, ex, got,
                                                pn, nt));
                    KT_CHECK(!memcmp(got, want, m * pn * 4), "geometry %d, b_t %d, a_km %d, %d threads: differs", gi,
                             bt, akm, nt);
                }
        KT_CHECK(kiln__gemm_dfp_conv_t(false, false, m, nc + 1, kc, qa, kc, 8191, -12, &img, mx, ex, got, nc + 1, 1) ==
                     KILN_ERR_ARG, "geometry %d: a misfit size accepted", gi);
        free(cols), free(qa), free(want), free(got);
    }
    free(qx), free(xv);
}

/* A weight gradient of long k (the columns of 3 images of 64 x 64: 6144
 * pairs, so its panels are packed in several units of lines) and one of a
 * forward, from the image against explicit columns, bit for bit, on one
 * and two threads (large enough to be threaded; two: B packed before the
 * kernel for the gradient). */
KT_TEST(dfp_gemm_implicit_columns_long_k) {
    const int64_t n = 3, c = 2, h = 64, w = 64, nx = n * c * h * w, m = 48;
    const int64_t g[8] = {3, 3, 1, 1, 1, 1, 1, 1}, oh = h, ow = w, kc = c * 9, nc = n * oh * ow;
    int16_t *qx = malloc((nx + 1) * 2), *cols = malloc(kc * nc * 2), *qa = malloc(m * nc * 2);
    float *xv = malloc(nx * 4), *want = malloc(m * nc * 4), *got = malloc(m * nc * 4);
    fill(xv, nx, 9, 3.0f);
    int ex, mx;
    kiln__dfp_quantize(xv, nx, 14, qx, &ex, &mx, false, 0);
    qx[nx] = 0x7fff;
    for (int64_t i = 0; i < m * nc; i++) qa[i] = (int16_t)((i * 2654435761u >> 9) % 16383 - 8191);
    kiln__dfp_im2col_cn(qx, n, c, h, w, g, oh, ow, cols, 1);
    kiln_dfp_image img = {qx, n, c, h, w, oh, ow, {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]}, 0, 0, false};
    for (int bt = 0; bt < 2; bt++) {
        int64_t pn = bt ? kc : nc, pk = bt ? nc : kc;
        KT_OK(kiln__gemm_dfp_t(false, !bt, m, pn, pk, qa, pk, 8191, -12, cols, bt ? pk : pn, mx, ex, want, pn, 1));
        for (int nt = 1; nt <= 2; nt++) {
            memset(got, 0xff, m * pn * 4);
            KT_OK(kiln__gemm_dfp_conv_t(false, bt, m, pn, pk, qa, pk, 8191, -12, &img, mx, ex, got, pn, nt));
            KT_CHECK(!memcmp(got, want, m * pn * 4), "b_t %d, %d threads: differs", bt, nt);
        }
    }
    free(qx), free(cols), free(qa), free(xv), free(want), free(got);
}

/* A convolution's data gradient as a transposed convolution (the flip
 * layout of gemm_dfp.h): the output gradient gy [O, N, OH, OW] read with
 * taps running back, against explicit columns built here from the
 * definition, col (o, i, j) x (n, y, z) = gy[o, n, y + ph - i, z + pw - j]
 * or 0, bit for bit on one and two threads; the scalar fallback layout
 * too (x86 without VNNI reaches it; here through the same tables). */
KT_TEST(dfp_gemm_transposed_conv_columns) {
    const int64_t geo[][4] = {{3, 3, 1, 1}, {3, 3, 0, 2}, {1, 1, 0, 0}, {5, 3, 2, 1}};
    for (int gi = 0; gi < 4; gi++) {
        const int64_t n = 3, o = 5, h = 9, w = 11, c = 7, kh = geo[gi][0], kw = geo[gi][1], ph = geo[gi][2],
                      pw = geo[gi][3];
        const int64_t oh = h + 2 * ph - kh + 1, ow = w + 2 * pw - kw + 1, ng = o * n * oh * ow;
        const int64_t kc = o * kh * kw, nc = n * h * w;
        int16_t *qg = malloc((ng + 1) * 2), *cols = malloc(kc * nc * 2), *qa = malloc(c * kc * 2);
        float *want = malloc(c * nc * 4), *got = malloc(c * nc * 4);
        for (int64_t i = 0; i < ng; i++) qg[i] = (int16_t)((i * 2654435761u >> 7) % 16383 - 8191);
        qg[ng] = 0x7fff;
        for (int64_t i = 0; i < c * kc; i++) qa[i] = (int16_t)((i * 40503u + 7) % 16383 - 8191);
        for (int64_t oc = 0; oc < o; oc++)
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++)
                    for (int64_t b = 0; b < n; b++)
                        for (int64_t y = 0; y < h; y++)
                            for (int64_t z = 0; z < w; z++) {
                                int64_t yy = y + ph - i, zz = z + pw - j;
                                cols[((oc * kh + i) * kw + j) * nc + (b * h + y) * w + z] =
                                    yy >= 0 && yy < oh && zz >= 0 && zz < ow ? qg[((oc * n + b) * oh + yy) * ow + zz] : 0;
                            }
        KT_OK(kiln__gemm_dfp_t(false, true, c, nc, kc, qa, kc, 8191, -12, cols, nc, 8191, -9, want, nc, 1));
        kiln_dfp_image img = {qg, n, o, oh, ow, h, w, {kh, kw, 1, 1, ph, pw, 1, 1}, n * oh * ow, oh * ow, true};
        for (int nt = 1; nt <= 2; nt++) {
            memset(got, 0xff, c * nc * 4);
            KT_OK(kiln__gemm_dfp_conv_t(false, false, c, nc, kc, qa, kc, 8191, -12, &img, 8191, -9, got, nc, nt));
            KT_CHECK(!memcmp(got, want, c * nc * 4), "geometry %d, %d threads: differs", gi, nt);
        }
        free(qg), free(cols), free(qa), free(want), free(got);
    }
}
