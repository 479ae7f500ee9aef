/* test_dfp_op.c — the DFP matmul op (ops/dfp.c): forward against the f32
 * product within the 14-bit representation's bound for every transpose
 * combination, and a finite-difference gradient check of a DFP linear
 * layer at DFP precision: its gradients (the backward-data and
 * backward-weight products again in DFP) against central differences of
 * the loss, within the bound the representation implies; the DFP mode of
 * models/mlp and models/cnn against their f32 mode. */
#include "kt.h"

#include "cnn.h"
#include "mlp.h"
#include "../core/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill(float *x, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = scale * (float)((double)(seed >> 40) / (double)(1ull << 24) - 0.5);
    }
}

static kiln_tensor *tensor(kiln_ctx *ctx, int64_t r, int64_t c, const float *v) {
    kiln_tensor *t = kiln_new_2d(ctx, KILN_F32, r, c);
    kiln_tensor_set_f32(t, v, r * c);
    return t;
}

static kiln_status compute(kiln_ctx *ctx, kiln_tensor *t) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = g ? kiln_graph_add(g, t) : kiln_last_status();
    return s ? s : kiln_graph_compute(g);
}

/* |C - A B| <= (2^-13 max|A| sum|B| + 2^-13 max|B| sum|A| + ...): each code
 * is within 2^(e-1) <= 2^-13 max of its value (14 bits: max * 2^-e >=
 * 2^12); the f32 folds add a relative 2^-20 or so. */
KT_TEST(dfp_matmul_forward_all_transposes) {
    int64_t m = 19, n = 23, k = 150;
    float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(k * n) * 4), *c = malloc((size_t)(m * n) * 4);
    fill(a, m * k, 1, 2.0f), fill(b, k * n, 2, 0.3f);
    float amax = 0, bmax = 0;
    for (int64_t i = 0; i < m * k; i++) amax = fmaxf(amax, fabsf(a[i]));
    for (int64_t i = 0; i < k * n; i++) bmax = fmaxf(bmax, fabsf(b[i]));
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            kiln_ctx *ctx = kiln_ctx_new();
            /* stored transposed where asked, same logical A [m, k], B [k, n] */
            float *as = malloc((size_t)(m * k) * 4), *bs = malloc((size_t)(k * n) * 4);
            for (int64_t i = 0; i < m; i++)
                for (int64_t p = 0; p < k; p++) as[ta ? p * m + i : i * k + p] = a[i * k + p];
            for (int64_t p = 0; p < k; p++)
                for (int64_t j = 0; j < n; j++) bs[tb ? j * k + p : p * n + j] = b[p * n + j];
            kiln_tensor *y = kiln_dfp_matmul_t(ctx, tensor(ctx, ta ? k : m, ta ? m : k, as), ta,
                                               tensor(ctx, tb ? n : k, tb ? k : n, bs), tb);
            KT_NOTNULL(y);
            KT_OK(compute(ctx, y));
            KT_OK(kiln_tensor_get_f32(y, c, m * n));
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double exact = 0, sa = 0, sb = 0;
                    for (int64_t p = 0; p < k; p++) {
                        exact += (double)a[i * k + p] * b[p * n + j];
                        sa += fabs(a[i * k + p]), sb += fabs(b[p * n + j]);
                    }
                    double bound = 0x1p-13 * (amax * sb + bmax * sa) + k * 0x1p-26 * amax * bmax +
                                   0x1p-18 * sa * bmax;
                    KT_REQUIRE(fabs(c[i * n + j] - exact) <= bound, "ta %d tb %d c[%lld,%lld] %g vs %g (bound %g)", ta,
                               tb, (long long)i, (long long)j, c[i * n + j], exact, bound);
                }
            free(as), free(bs);
            kiln_ctx_free(ctx);
        }
    free(a), free(b), free(c);
}

/* sum(R * (x w^T + b)) in double */
static double lin_loss(const float *x, const float *w, const float *b, const float *r, int64_t t, int64_t in,
                       int64_t out) {
    double l = 0;
    for (int64_t i = 0; i < t; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = b[o];
            for (int64_t p = 0; p < in; p++) s += (double)x[i * in + p] * w[o * in + p];
            l += r[i * out + o] * s;
        }
    return l;
}

/* loss = sum(R * (x w^T + b)) through kiln_dfp_linear, gradients by kiln's
 * backward (DFP products), against central differences (double) of the
 * same loss. The loss is bilinear, so the differences are the exact
 * gradients dx = R w, dw = R^T x, db = colsum R; the DFP gradients may be
 * off by the representation's bound on those products. A second check
 * differentiates the DFP forward itself (a step large against its 2^-13
 * quantization) on a few elements. */
KT_TEST(dfp_linear_gradcheck) {
    int64_t t = 9, in = 70, out = 13;
    float *x = malloc((size_t)(t * in) * 4), *w = malloc((size_t)(out * in) * 4), *bb = malloc((size_t)out * 4),
          *r = malloc((size_t)(t * out) * 4);
    fill(x, t * in, 3, 2.0f), fill(w, out * in, 4, 0.5f), fill(bb, out, 5, 1.0f), fill(r, t * out, 6, 2.0f);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *xt = tensor(ctx, t, in, x), *wt = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){out, in});
    kiln_tensor *bt = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){out});
    KT_OK(kiln_tensor_set_f32(wt, w, out * in));
    KT_OK(kiln_tensor_set_f32(bt, bb, out));
    KT_OK(kiln_tensor_set_requires_grad(xt, true));
    kiln_tensor *y = kiln_dfp_linear(ctx, xt, wt, bt);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, tensor(ctx, t, out, r)));
    KT_NOTNULL(loss);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    float *gx = malloc((size_t)(t * in) * 4), *gw = malloc((size_t)(out * in) * 4), gb[13];
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(xt), gx, t * in));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(wt), gw, out * in));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(bt), gb, out));
    double rmax = 0, xmax = 0, wmax = 0;
    for (int64_t i = 0; i < t * out; i++) rmax = fmax(rmax, fabs(r[i]));
    for (int64_t i = 0; i < t * in; i++) xmax = fmax(xmax, fabs(x[i]));
    for (int64_t i = 0; i < out * in; i++) wmax = fmax(wmax, fabs(w[i]));
    const float h = 0.125f; /* exact in f32; the loss is bilinear, so any step is exact */
    for (int64_t e = 0; e < t * in; e += 7) { /* dx[i, p] = sum_o R[i, o] w[o, p]: bound 2^-12 max|R| sum|w[., p]| */
        float keep = x[e];
        double lp, lm, sw = 0;
        x[e] = keep + h, lp = lin_loss(x, w, bb, r, t, in, out), x[e] = keep - h, lm = lin_loss(x, w, bb, r, t, in, out), x[e] = keep;
        for (int64_t o = 0; o < out; o++) sw += fabs(w[o * in + e % in]);
        double fd = (lp - lm) / (2 * h), bound = 0x1p-12 * (rmax * sw + wmax * out * rmax) + 1e-6;
        KT_REQUIRE(fabs(gx[e] - fd) <= bound, "dx[%lld] %g vs %g (bound %g)", (long long)e, gx[e], fd, bound);
    }
    for (int64_t e = 0; e < out * in; e += 5) { /* dw[o, p] = sum_i R[i, o] x[i, p] */
        float keep = w[e];
        double lp, lm;
        w[e] = keep + h, lp = lin_loss(x, w, bb, r, t, in, out), w[e] = keep - h, lm = lin_loss(x, w, bb, r, t, in, out), w[e] = keep;
        double fd = (lp - lm) / (2 * h), bound = 0x1p-12 * 2 * t * rmax * xmax + 1e-6;
        KT_REQUIRE(fabs(gw[e] - fd) <= bound, "dw[%lld] %g vs %g (bound %g)", (long long)e, gw[e], fd, bound);
    }
    for (int64_t o = 0; o < out; o++) { /* db: f32 all the way */
        float keep = bb[o];
        double lp, lm;
        bb[o] = keep + h, lp = lin_loss(x, w, bb, r, t, in, out), bb[o] = keep - h, lm = lin_loss(x, w, bb, r, t, in, out), bb[o] = keep;
        KT_REQUIRE(fabs(gb[o] - (lp - lm) / (2 * h)) <= 1e-4, "db[%lld] %g vs %g", (long long)o, gb[o],
                   (lp - lm) / (2 * h));
    }
    /* differences of the DFP forward itself: step 0.05 (x up to 1); its
     * quantization moves the loss by at most sum |R| 2^-13 (max|x| sum|w|
     * + max|w| sum|x|), so the slope is within twice that over 2 h */
    double qerr = 0;
    for (int64_t i = 0; i < t; i++)
        for (int64_t o = 0; o < out; o++) qerr += fabs(r[i * out + o]) * 0x1p-13 * 2.0 * in * xmax * wmax * 1.2;
    for (int64_t e = 3; e < t * in; e += 97) {
        const float hd = 0.05f;
        float keep = x[e], v[2];
        for (int s = 0; s < 2; s++) {
            x[e] = keep + (s ? -hd : hd);
            KT_OK(kiln_tensor_set_f32(xt, x, t * in));
            KT_OK(kiln_graph_compute(g));
            v[s] = (float)kiln_tensor_item(loss);
        }
        x[e] = keep;
        double fd = ((double)v[0] - v[1]) / (2 * hd);
        KT_CHECK(fabs(fd - gx[e]) <= 2 * qerr / (2 * hd) + 1e-3, "DFP forward slope dx[%lld] %g vs %g (bound %g)",
                 (long long)e, fd, gx[e], 2 * qerr / (2 * hd));
    }
    free(x), free(w), free(bb), free(r), free(gx), free(gw);
    kiln_ctx_free(ctx);
}

KT_TEST(dfp_matmul_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 3, 4), *b = kiln_new_2d(ctx, KILN_F32, 5, 4);
    KT_EXPECT_ERR(kiln_dfp_matmul_t(ctx, a, false, b, false), KILN_ERR_SHAPE, "inner dims");
    KT_EXPECT_ERR(kiln_dfp_matmul_t(ctx, a, false, kiln_new_2d(ctx, KILN_F64, 4, 2), false), KILN_ERR_DTYPE, "f32");
    KT_EXPECT_ERR(kiln_dfp_linear(ctx, a, kiln_new_2d(ctx, KILN_F32, 5, 3), NULL), KILN_ERR_SHAPE, "do not fit");
    KT_NOTNULL(kiln_dfp_matmul_t(ctx, a, false, b, true));
    kiln_ctx_free(ctx);
}

/* kiln_dfp_conv2d against kiln_conv2d, forward and the gradients of x, w
 * and bias: within 2^-11 of the largest magnitude of each (14-bit
 * operands, im2col sums of 36 taps). */
KT_TEST(dfp_conv2d_matches_f32) {
    const int64_t n = 2, c = 4, h = 7, wd = 6, o = 5;
    float *xv = malloc(n * c * h * wd * 4), *wv = malloc(o * c * 9 * 4), bv[5];
    fill(xv, n * c * h * wd, 7, 2.0f), fill(wv, o * c * 9, 8, 0.6f), fill(bv, o, 9, 1.0f);
    float *res[2][4];
    int64_t sizes[4] = {n * o * h * wd, n * c * h * wd, o * c * 9, o};
    for (int dfp = 0; dfp < 2; dfp++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, n, c, h, wd), *w = kiln_new_4d(ctx, KILN_F32, o, c, 3, 3);
        kiln_tensor *b = kiln_new_1d(ctx, KILN_F32, o);
        KT_OK(kiln_tensor_set_f32(x, xv, sizes[1]));
        KT_OK(kiln_tensor_set_f32(w, wv, sizes[2]));
        KT_OK(kiln_tensor_set_f32(b, bv, o));
        kiln_tensor_set_requires_grad(x, true), kiln_tensor_set_requires_grad(w, true);
        kiln_tensor_set_requires_grad(b, true);
        kiln_conv2d_params p = {.padding = {1, 1}};
        kiln_tensor *y = dfp ? kiln_dfp_conv2d(ctx, x, w, b, &p) : kiln_conv2d(ctx, x, w, b, &p);
        KT_NOTNULL(y);
        kiln_tensor *r = kiln_new_4d(ctx, KILN_F32, n, o, h, wd);
        KT_OK(kiln_tensor_fill_randn(r, 11, 0.0, 1.0));
        kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, r));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_backward(g, loss));
        KT_OK(kiln_graph_compute(g));
        kiln_tensor *ts[4] = {y, kiln_tensor_grad(x), kiln_tensor_grad(w), kiln_tensor_grad(b)};
        for (int i = 0; i < 4; i++) {
            res[dfp][i] = malloc((size_t)sizes[i] * 4);
            KT_OK(kiln_tensor_get_f32(ts[i], res[dfp][i], sizes[i]));
        }
        kiln_ctx_free(ctx);
    }
    const char *names[4] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; i++) {
        double big = 0, worst = 0;
        for (int64_t e = 0; e < sizes[i]; e++) big = fmax(big, fabs(res[0][i][e]));
        for (int64_t e = 0; e < sizes[i]; e++) worst = fmax(worst, fabs(res[0][i][e] - res[1][i][e]));
        KT_CHECK(worst <= 0x1p-11 * big * 4 && (i == 3 || worst > 0), "%s: largest difference %g of %g", names[i], worst,
                 big);
        free(res[0][i]), free(res[1][i]);
    }
    free(xv), free(wv);
}

/* The models' DFP mode (cfg.dfp): the same seed gives logits and weight
 * gradients within the DFP precision of the f32 model's. */
static void model_pair(bool is_cnn, float out[2][2][320]) {
    for (int dfp = 0; dfp < 2; dfp++) {
        kiln_ctx *ctx = kiln_ctx_new();
        model_graph g;
        kiln_tensor *w;
        if (is_cnn) {
            cnn_config c = {.channels = 1, .size = 8, .c1 = 4, .c2 = 6, .hidden = 16, .classes = 5,
                            .dfp = dfp ? CNN_DFP_ALL : 0};
            cnn *m = cnn_new(ctx, &c, 3);
            KT_REQUIRE(m && !cnn_train_graph(m, 4, &g), "cnn: %s", kiln_last_error());
            w = m->fc_w; /* conv weights' gradients pass max pooling, whose routing a near tie flips */
            cnn_free(m);
        } else {
            mlp_config c = {.inputs = 20, .hidden = 16, .classes = 5, .dfp = dfp ? MLP_DFP_ALL : 0};
            mlp *m = mlp_new(ctx, &c, 3);
            KT_REQUIRE(m && !mlp_train_graph(m, 4, &g), "mlp: %s", kiln_last_error());
            w = m->fc1_w;
            mlp_free(m);
        }
        KT_OK(kiln_tensor_fill_randn(g.input, 5, 0.0, 1.0));
        int32_t lab[4] = {0, 3, 1, 4};
        KT_OK(kiln_tensor_set_i32(g.labels, lab, 4));
        KT_OK(kiln_graph_compute(g.graph));
        KT_OK(kiln_tensor_get_f32(g.logits, out[dfp][0], 20));
        KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), out[dfp][1], is_cnn ? 80 : 320));
        kiln_ctx_free(ctx);
    }
}

KT_TEST(dfp_models_match_f32) {
    for (int is_cnn = 0; is_cnn < 2; is_cnn++) {
        float out[2][2][320];
        model_pair(is_cnn, out);
        for (int t = 0; t < 2; t++) {
            int n = t ? (is_cnn ? 80 : 320) : 20;
            double big = 0, worst = 0;
            for (int i = 0; i < n; i++) big = fmax(big, fabs(out[0][t][i]));
            for (int i = 0; i < n; i++) worst = fmax(worst, fabs(out[0][t][i] - out[1][t][i]));
            KT_CHECK(worst <= 2e-3 * big && worst > 0, "%s %s: largest difference %g of %g", is_cnn ? "cnn" : "mlp",
                     t ? "weight gradient" : "logits", worst, big);
        }
    }
}

/* The CPU kernel reuses an operand's codes within one compute
 * (backends/cpu/dfp_matmul.c): a leaf changed between computes, a leaf
 * shared by two graphs, and one node as both operands must each still give
 * the product of the current values, equal to a fresh context's bit for
 * bit. */
KT_TEST(dfp_matmul_codes_reused_only_within_a_compute) {
    int64_t m = 5, n = 7, k = 96;
    float *a = malloc((size_t)(m * k) * 4), *w = malloc((size_t)(n * k) * 4), *got = malloc((size_t)(m * n) * 4),
          *want = malloc((size_t)(m * n) * 4), *aat = malloc((size_t)(m * m) * 4);
    fill(a, m * k, 3, 1.0f), fill(w, n * k, 4, 0.5f);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *at = tensor(ctx, m, k, a), *wt = tensor(ctx, n, k, w);
    kiln_tensor *y1 = kiln_dfp_matmul_t(ctx, at, false, wt, true), *y2 = kiln_dfp_matmul_t(ctx, at, false, wt, true);
    kiln_tensor *sq = kiln_dfp_matmul_t(ctx, at, false, at, true); /* A A^T: one node, both operands */
    kiln_graph *g1 = kiln_graph_new(ctx), *g2 = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g1, y1));
    KT_OK(kiln_graph_add(g1, sq));
    KT_OK(kiln_graph_add(g2, y2));
    KT_OK(kiln_graph_compute(g1));
    for (int round = 0; round < 2; round++) {
        for (int64_t i = 0; i < n * k; i++) w[i] = -3.0f * w[i] + 0.01f; /* a new exponent and new codes */
        KT_OK(kiln_tensor_set_f32(wt, w, n * k));
        kiln_ctx *fresh = kiln_ctx_new();
        kiln_tensor *yf = kiln_dfp_matmul_t(fresh, tensor(fresh, m, k, a), false, tensor(fresh, n, k, w), true);
        KT_OK(compute(fresh, yf));
        KT_OK(kiln_tensor_get_f32(yf, want, m * n));
        kiln_ctx_free(fresh);
        KT_OK(kiln_graph_compute(round ? g1 : g2));
        KT_OK(kiln_tensor_get_f32(round ? y1 : y2, got, m * n));
        KT_CHECK(!memcmp(got, want, (size_t)(m * n) * 4), "round %d: the product of the changed weight differs", round);
    }
    KT_OK(kiln_tensor_get_f32(sq, aat, m * m));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < m; j++) {
            double exact = 0;
            for (int64_t p = 0; p < k; p++) exact += (double)a[i * k + p] * a[j * k + p];
            KT_CHECK(aat[i * m + j] == aat[j * m + i] && fabs(aat[i * m + j] - exact) <= 0x1p-10 * k,
                     "A A^T [%lld,%lld] %g vs %g", (long long)i, (long long)j, aat[i * m + j], exact);
        }
    kiln_ctx_free(ctx);
    free(a), free(w), free(got), free(want), free(aat);
}

/* A DFP linear layer's weight gradient, computed twice without zeroing
 * (so it accumulates): the product adding straight into the gradient
 * (core/fuse.c) equals the product and a separate add ($KILN_FUSE=0) bit
 * for bit, and the fused graph has one such product. */
static void dfp_linear_twice(bool fuse, float *gw, int *adds) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    float xv[9 * 13];
    fill(xv, 9 * 13, 5, 2.0f);
    kiln_tensor *x = tensor(ctx, 9, 13, xv);
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){5, 13});
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){5});
    KT_OK(kiln_tensor_fill_randn(w, 3, 0.0, 0.5));
    KT_OK(kiln_tensor_fill(b, 0.1));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_tanh(ctx, kiln_dfp_linear(ctx, x, w, b)));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gw, 65));
    *adds = 0;
    for (int i = 0; i < g->n; i++) *adds += g->acc_node[i] >= 0;
    kiln_ctx_free(ctx);
    unsetenv("KILN_FUSE");
}

KT_TEST(dfp_weight_gradient_adds_into_gradient) {
    float f[65], u[65];
    int nf, nu;
    dfp_linear_twice(true, f, &nf);
    dfp_linear_twice(false, u, &nu);
    KT_CHECK(nf == 1 && nu == 0, "%d DFP products add into a gradient (KILN_FUSE=0: %d)", nf, nu);
    KT_CHECK(!memcmp(f, u, sizeof f), "fused and unfused weight gradients differ");
}
