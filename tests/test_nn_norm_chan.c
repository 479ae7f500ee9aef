/* test_nn_norm_chan.c — batch_norm: values and gradients against PyTorch,
 * the running statistics torch keeps, gradient checks (training and eval,
 * with and without affine and running statistics, second order),
 * checkpoints holding the running statistics, errors. */
#include "internal.h"
#include "kt_simd.h"
#include "test_nn_util.h"

#include "../core/graph.h"

#include <stdio.h>
#include <unistd.h>

static const char *const NORM_CHAN = "tests/fixtures/norm_chan.txt";

/* in: x [, w [, b]] then, in eval cases, rm, rv */
static kiln_tensor *build_bn_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    bool has_w = fx_param(c, "has_w", 0) != 0, has_b = fx_param(c, "has_b", 0) != 0;
    bool training = fx_param(c, "training", 1) != 0;
    int k = 1 + has_w + has_b;
    return kiln_batch_norm(ctx, in[0], training ? NULL : in[k], training ? NULL : in[k + 1], has_w ? in[1] : NULL,
                           has_b ? in[1 + has_w] : NULL, training, fx_param(c, "momentum", 0.1), fx_param(c, "eps", 1e-5));
}

KT_TEST(nn_batch_norm_fixture) {
    const char *cases[] = {"batch_norm_2d", "batch_norm_1d", "batch_norm_3d_plain", "batch_norm_eval"};
    const char *inputs[][5] = {{"x", "w", "b", NULL}, {"x", "w", "b", NULL}, {"x", NULL}, {"x", "w", "rm", "rv", NULL}};
    for (int i = 0; i < 4; i++) {
        nnt_fixture(NORM_CHAN, cases[i], inputs[i], build_bn_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture(NORM_CHAN, cases[i], inputs[i], build_bn_fixture, KILN_F32, 1e-5, 1e-4);
    }
}

static kiln_tensor *fx_leaf(kiln_ctx *ctx, const fx_case *c, const char *name, kiln_dtype dt) {
    const fx_tensor *f = fx_tensor_get(c, name);
    if (!f) return NULL;
    kiln_tensor *t = kiln_tensor_new(ctx, dt, f->ndim, f->shape);
    if (t && kiln_tensor_set_f64(t, f->v, f->n)) return NULL;
    return t;
}

/* Two training computes, on x then x2, move the running statistics as
 * torch's two forward passes do (unbiased variance, momentum 0.1). */
KT_TEST(nn_batch_norm_running_stats) {
    fx_file *f = fx_load(NORM_CHAN);
    KT_NOTNULL(f);
    const fx_case *c = fx_find(f, "batch_norm_running");
    KT_REQUIRE(c, "no case batch_norm_running");
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F32 : KILN_F64;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = fx_leaf(ctx, c, "x", dt), *rm = kiln_buffer(ctx, "bn.running_mean", dt, 1, (int64_t[]){3});
        kiln_tensor *rv = kiln_buffer(ctx, "bn.running_var", dt, 1, (int64_t[]){3});
        const fx_tensor *x2 = fx_tensor_get(c, "x2"), *rm0 = fx_tensor_get(c, "rm"), *rv0 = fx_tensor_get(c, "rv");
        KT_NOTNULL(rv);
        KT_OK(kiln_tensor_set_f64(rm, rm0->v, 3));
        KT_OK(kiln_tensor_set_f64(rv, rv0->v, 3));
        kiln_tensor *y = kiln_batch_norm(ctx, x, rm, rv, NULL, NULL, true, fx_param(c, "momentum", 0),
                                         fx_param(c, "eps", 0));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_tensor_set_f64(x, x2->v, x2->n));
        KT_OK(kiln_graph_compute(g));
        double *m = nnt_values(rm), *v = nnt_values(rv);
        double tol = d ? 1e-6 : 1e-12;
        nnt_close("running_mean", m, fx_tensor_get(c, "rm_out")->v, 3, tol, tol);
        nnt_close("running_var", v, fx_tensor_get(c, "rv_out")->v, 3, tol, tol);
        free(m);
        free(v);
        kiln_ctx_free(ctx);
    }
    fx_free(f);
}

typedef struct {
    bool training, has_w, has_b, running, transpose;
    int ndim;
} bn_case;

/* in[0] = x (or its transpose in the first two dims) [, w] [, b]; eval
 * mode and running statistics use constants made here. */
static kiln_tensor *build_bn(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const bn_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], 0, 1) : in[0];
    kiln_tensor *w = c->has_w ? in[1] : NULL, *b = c->has_b ? in[1 + c->has_w] : NULL, *rm = NULL, *rv = NULL;
    int64_t ch = kiln_tensor_dim(x, 1);
    if (c->running || !c->training) {
        rm = kiln_new_1d(ctx, KILN_F64, ch), rv = kiln_new_1d(ctx, KILN_F64, ch);
        if (!rv || kiln_tensor_fill_uniform(rm, 5, -1, 1) || kiln_tensor_fill_uniform(rv, 6, 0.5, 2)) return NULL;
    }
    return kiln_batch_norm(ctx, x, rm, rv, w, b, c->training, 0.1, 1e-5);
}

KT_TEST(nn_batch_norm_grad) {
    for (int v = 0; v < 32; v++) {
        bn_case c = {!(v & 1), (v & 2) != 0, (v & 4) != 0, (v & 8) != 0, (v & 16) != 0, 4};
        if (!c.training && c.running) c.ndim = 2; /* eval mode always has them: test [N, C] there instead */
        gc_input in[3] = {GC_IN(4, 3, 3, 2, 5), GC_IN(1, 3), GC_IN(1, 3)};
        if (c.ndim == 2) in[0] = GC_IN(2, 4, 3);
        if (c.transpose) in[0].shape[0] = 3, in[0].shape[1] = c.ndim == 2 ? 4 : 3;
        in[0].lo = -2, in[0].hi = 3;
        char what[128];
        snprintf(what, sizeof what, "batch_norm training %d weight %d bias %d running %d transposed %d %d-D",
                 c.training, c.has_w, c.has_b, c.running, c.transpose, c.ndim);
        gc_check(what, build_bn, &c, 1 + c.has_w + c.has_b, in, (uint64_t)(91 + v));
    }
}

/* The gradient of batch_norm's gradient (BATCH_NORM_GRAD's rule, the
 * reference in ops) as a function of x, w and gy. */
static kiln_tensor *build_bn_second(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *y = kiln_batch_norm(ctx, in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5), *g[2] = {0};
    if (!y || kiln__vjp(ctx, y, in[3], 2, in, g)) return NULL;
    return kiln_add(ctx, kiln_sum_all(ctx, kiln_mul(ctx, g[0], g[0])), kiln_sum_all(ctx, g[1]));
}

KT_TEST(nn_batch_norm_second_order_grad) {
    gc_input in[4] = {GC_IN(3, 3, 2, 4), GC_IN(1, 2), GC_IN(1, 2), GC_IN(3, 3, 2, 4)};
    gc_check("gradient of batch_norm", build_bn_second, NULL, 4, in, 77);
}

/* A graph of y and the gradients of sum(y * gy), computed once; NULL
 * (the failure recorded) if a step fails. */
static kiln_graph *run_backward(kiln_ctx *ctx, kiln_tensor *y, kiln_tensor *gy) {
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, gy));
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = loss && g ? kiln_graph_add(g, y) : kiln_last_status();
    if (!s) s = kiln_graph_add(g, loss);
    if (!s) s = kiln_graph_backward(g, loss);
    if (!s) s = kiln_graph_compute(g);
    KT_CHECK(!s, "%s", kiln_last_error());
    return s ? NULL : g;
}

/* A large f32 batch far from 0 on the threaded path, against double loops
 * on the same values: forward and the packed backward. */
KT_TEST(nn_batch_norm_large_matches_reference) {
    const int64_t n = 16, c = 5, s = 1000, numel = n * c * s;
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_3d(ctx, KILN_F32, n, c, s), *w = kiln_new_1d(ctx, KILN_F32, c);
    kiln_tensor *gy = kiln_new_3d(ctx, KILN_F32, n, c, s);
    KT_NOTNULL(gy);
    KT_OK(kiln_tensor_fill_uniform(x, 1, 999, 1001));
    KT_OK(kiln_tensor_fill_uniform(w, 2, 0.5, 2));
    KT_OK(kiln_tensor_fill_uniform(gy, 3, -1, 1));
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    KT_OK(kiln_tensor_set_requires_grad(w, true));
    kiln_tensor *y = kiln_batch_norm(ctx, x, NULL, NULL, w, NULL, true, 0.1, 1e-5);
    KT_REQUIRE(run_backward(ctx, y, gy), "the graph did not run");
    double *xv = nnt_values(x), *wv = nnt_values(w), *gv = nnt_values(gy), *yv = nnt_values(y);
    double *gx = nnt_values(kiln_tensor_grad(x)), *gw = nnt_values(kiln_tensor_grad(w));
    double *wy = malloc((size_t)numel * sizeof *wy), *wgx = malloc((size_t)numel * sizeof *wgx), wgw[5];
    KT_REQUIRE(xv && wv && gv && yv && gx && gw && wy && wgx, "out of memory");
    for (int64_t ch = 0; ch < c; ch++) {
        double m = 0, var = 0, sg = 0, sgx = 0, cnt = (double)(n * s);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) m += xv[(i * c + ch) * s + j] / cnt;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) var += pow(xv[(i * c + ch) * s + j] - m, 2) / cnt;
        double rstd = 1 / sqrt(var + 1e-5);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) {
                int64_t o = (i * c + ch) * s + j;
                wy[o] = (xv[o] - m) * rstd * wv[ch];
                sg += gv[o], sgx += gv[o] * (xv[o] - m) * rstd;
            }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) {
                int64_t o = (i * c + ch) * s + j;
                wgx[o] = wv[ch] * rstd * (gv[o] - sg / cnt - (xv[o] - m) * rstd * sgx / cnt);
            }
        wgw[ch] = sgx;
    }
    nnt_close("y", yv, wy, numel, 1e-3, 1e-3);
    nnt_close("gx", gx, wgx, numel, 1e-3, 1e-3);
    nnt_close("gw", gw, wgw, c, 1e-2, 1e-4);
    free(xv), free(wv), free(gv), free(yv), free(gx), free(gw), free(wy), free(wgx);
    kiln_ctx_free(ctx);
}

/* conv2d -> batch_norm -> loss on the host, training: the norm reads the
 * convolution's [O, N, OH, OW] product in place and hands its gradient
 * back in that order, so neither direction copies it; y and the
 * gradients equal those of the norm over a row-major copy, on the f32
 * row primitives (rows of 144) and the short rows' loops (16), at every
 * SIMD level. */
static void bn_after_conv(int64_t hw, bool copy, double **out) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 6, 3, hw, hw), *k = kiln_new_4d(ctx, KILN_F32, 16, 3, 3, 3);
    kiln_tensor *w = kiln_new_1d(ctx, KILN_F32, 16), *b = kiln_new_1d(ctx, KILN_F32, 16);
    kiln_tensor *gy = kiln_new_4d(ctx, KILN_F32, 6, 16, hw, hw);
    KT_NOTNULL(gy);
    KT_OK(kiln_tensor_fill_uniform(x, 1, -1, 3));
    KT_OK(kiln_tensor_fill_uniform(k, 2, -0.5, 0.5));
    KT_OK(kiln_tensor_fill_uniform(w, 3, 0.5, 2));
    KT_OK(kiln_tensor_fill_uniform(b, 4, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(gy, 5, -1, 1));
    kiln_tensor *p[4] = {x, k, w, b};
    for (int i = 0; i < 4; i++) KT_OK(kiln_tensor_set_requires_grad(p[i], true));
    kiln_tensor *h = kiln_conv2d(ctx, x, k, NULL, &(kiln_conv2d_params){.stride = {1, 1}, .padding = {1, 1}});
    if (copy) h = kiln_add_scalar(ctx, h, 0.0);
    kiln_tensor *y = kiln_batch_norm(ctx, h, NULL, NULL, w, b, true, 0.1, 1e-5);
    kiln_graph *g = run_backward(ctx, y, gy);
    KT_REQUIRE(g, "the graph did not run");
    for (int i = 0; !copy && i < kiln_graph_n_nodes(g); i++)
        KT_CHECK(strcmp(kiln_op_name_of(kiln_graph_node(g, i)), "contiguous"), "node %d is a copy", i);
    out[0] = nnt_values(y);
    for (int i = 0; i < 4; i++) out[1 + i] = nnt_values(kiln_tensor_grad(p[i]));
    kiln_ctx_free(ctx);
}

KT_TEST(nn_batch_norm_reads_conv_product_in_place) {
    KT_FOR_EACH_SIMD(simd) {
        for (int64_t hw = 4; hw <= 12; hw += 8) {
            double *got[5], *want[5];
            int64_t n[5] = {6 * 16 * hw * hw, 6 * 3 * hw * hw, 16 * 27, 16, 16};
            const char *what[5] = {"y", "gx", "gk", "gw", "gb"};
            bn_after_conv(hw, false, got);
            bn_after_conv(hw, true, want);
            for (int i = 0; i < 5; i++) {
                KT_REQUIRE(got[i] && want[i], "out of memory");
                char w[64];
                snprintf(w, sizeof w, "%s %s %lldx%lld", simd.name, what[i], (long long)hw, (long long)hw);
                nnt_close(w, got[i], want[i], n[i], 1e-4, 1e-4);
                free(got[i]), free(want[i]);
            }
        }
    }
}

/* relu(batch_norm(x)) in training, or relu(bn + r) (res 1) or relu(r + bn)
 * (res 2), run with $KILN_FUSE = fuse, x a plain input or (conv) a
 * convolution's product: y, the gradients of x, w and r and the running
 * mean into out[0..4]; *fused: the norm ran as one chain to the ReLU, and
 * (res 0) the ReLU's gradient mask as one with batch_norm_grad. */
static void bn_relu_run(bool fuse, kiln_dtype dt, int64_t hw, int res, bool conv, double **out, bool *fused) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, dt, 5, 6, hw, hw), *w = kiln_new_1d(ctx, dt, 6), *b = kiln_new_1d(ctx, dt, 6);
    kiln_tensor *rm = kiln_buffer(ctx, "rm", dt, 1, (int64_t[]){6}), *rv = kiln_buffer(ctx, "rv", dt, 1, (int64_t[]){6});
    kiln_tensor *gy = kiln_new_4d(ctx, dt, 5, 6, hw, hw), *r = kiln_new_4d(ctx, dt, 5, 6, hw, hw);
    kiln_tensor *k = kiln_new_4d(ctx, dt, 6, 6, 1, 1);
    KT_NOTNULL(gy && r && k);
    KT_NOTNULL(rv);
    KT_OK(kiln_tensor_fill_uniform(x, 1, -2, 3));
    KT_OK(kiln_tensor_fill_uniform(w, 2, 0.5, 2));
    KT_OK(kiln_tensor_fill_uniform(b, 3, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(gy, 4, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(r, 5, -1.5, 1));
    KT_OK(kiln_tensor_fill_uniform(k, 6, -1, 1));
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    KT_OK(kiln_tensor_set_requires_grad(w, true));
    KT_OK(kiln_tensor_set_requires_grad(r, true));
    kiln_tensor *h = conv ? kiln_conv2d(ctx, x, k, NULL, &(kiln_conv2d_params){.stride = {1, 1}}) : x;
    kiln_tensor *bn = kiln_batch_norm(ctx, h, rm, rv, w, b, true, 0.1, 1e-5);
    kiln_tensor *y = kiln_relu(ctx, res == 0 ? bn : res == 1 ? kiln_add(ctx, bn, r) : kiln_add(ctx, r, bn));
    kiln_graph *g = run_backward(ctx, y, gy);
    KT_REQUIRE(g, "the graph did not run");
    /* without r, whose gradient reads it too, the masked gradient is batch_norm_grad's alone */
    bool fwd = false, bwd = res != 0;
    for (int i = 0; i < g->n; i++) {
        fwd |= g->nodes[i] == bn && g->chain_end[i] == i + 1 + (res != 0);
        bwd |= g->nodes[i]->op == KILN_OP_CMP && g->chain_end[i] == i + 2 &&
               g->nodes[i + 2]->op == KILN_OP_BATCH_NORM_GRAD;
    }
    *fused = fwd && bwd;
    out[0] = nnt_values(y), out[1] = nnt_values(kiln_tensor_grad(x)), out[2] = nnt_values(kiln_tensor_grad(w));
    out[3] = res ? nnt_values(kiln_tensor_grad(r)) : nnt_values(r);
    out[4] = nnt_values(rm);
    kiln_ctx_free(ctx);
    unsetenv("KILN_FUSE");
}

/* The norm, [a residual's add,] and the ReLU as one fused pass, and the
 * ReLU's gradient mask read by batch_norm_grad, give the bytes of the nodes
 * apart: f32 on the row primitives (rows of 144) and
 * the short rows' loops (16) at every SIMD level, f64, a convolution's
 * product, and a batch the norm splits between threads (rows of 1600), at
 * 1 and 2 threads. */
KT_TEST(nn_batch_norm_relu_fused) {
    int threads = kiln_get_threads();
    KT_FOR_EACH_SIMD(simd) {
        for (int t = 1; t <= 2; t++) {
            KT_OK(kiln_set_threads(t));
            for (int v = 0; v < 15; v++) {
                int res = v % 3, kind = v / 3;
                kiln_dtype dt = kind == 2 ? KILN_F64 : KILN_F32;
                int64_t hw = kind == 1 ? 4 : kind == 4 ? 40 : 12, numel = 5 * 6 * hw * hw;
                int64_t n[5] = {numel, numel, 6, numel, 6};
                double *got[5], *want[5];
                bool fused, apart;
                bn_relu_run(true, dt, hw, res, kind == 3, got, &fused);
                bn_relu_run(false, dt, hw, res, kind == 3, want, &apart);
                KT_CHECK(fused && !apart, "%s, %d threads, case %d: fused %d, under KILN_FUSE=0 %d", simd.name, t, v,
                         fused, apart);
                for (int i = 0; i < 5; i++) {
                    KT_REQUIRE(got[i] && want[i], "out of memory");
                    KT_CHECK(!memcmp(got[i], want[i], (size_t)n[i] * sizeof *got[i]),
                             "%s, %d threads, case %d: output %d differs", simd.name, t, v, i);
                    free(got[i]), free(want[i]);
                }
            }
        }
    }
    KT_OK(kiln_set_threads(threads));
}

/* kiln_save_params holds the buffers; a load restores them, and a file
 * without them does not fit a context that has them. */
KT_TEST(nn_batch_norm_buffers_checkpoint) {
    char path[] = "/tmp/kiln_bn_ckpt_XXXXXX", plain[] = "/tmp/kiln_bn_plain_XXXXXX";
    int fd = mkstemp(path), fd2 = mkstemp(plain);
    KT_REQUIRE(fd >= 0 && fd2 >= 0, "mkstemp failed");
    close(fd), close(fd2);
    kiln_ctx *a = kiln_ctx_new(), *b = kiln_ctx_new(), *p = kiln_ctx_new();
    kiln_tensor *wa = kiln_param(a, "bn.weight", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *ra = kiln_buffer(a, "bn.running_mean", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *wb = kiln_param(b, "bn.weight", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *rb = kiln_buffer(b, "bn.running_mean", KILN_F32, 1, (int64_t[]){3});
    KT_NOTNULL(kiln_param(p, "bn.weight", KILN_F32, 1, (int64_t[]){3}));
    KT_NOTNULL(wb && rb && wa && ra);
    KT_CHECK(!kiln_tensor_requires_grad(ra) && kiln_ctx_buffers(a, NULL, 0) == 1 && kiln_ctx_params(a, NULL, 0) == 1,
             "a buffer is no parameter");
    KT_EXPECT_ERR(kiln_buffer(a, "bn.weight", KILN_F32, 1, (int64_t[]){3}), KILN_ERR_ARG, "already has a parameter");
    KT_EXPECT_ERR(kiln_param(a, "bn.running_mean", KILN_F32, 1, (int64_t[]){3}), KILN_ERR_ARG, "already has a buffer");
    KT_OK(kiln_tensor_set_f32(wa, (const float[]){1, 2, 3}, 3));
    KT_OK(kiln_tensor_set_f32(ra, (const float[]){4, 5, 6}, 3));
    KT_OK(kiln_save_params(a, path));
    KT_OK(kiln_load_params(b, path));
    float got[3];
    KT_OK(kiln_tensor_get_f32(rb, got, 3));
    KT_CHECK(got[0] == 4 && got[1] == 5 && got[2] == 6, "running_mean not restored: %g %g %g", got[0], got[1], got[2]);
    KT_OK(kiln_save_params(p, plain));
    KT_CHECK(kiln_load_params(b, plain) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "bn.running_mean"),
             "a file without the buffer: %s", kiln_last_error());
    KT_CHECK(kiln_load_params(p, path) == KILN_ERR_FORMAT, "a file with an unknown buffer loads");
    /* a buffer is lasting state: a rewind past it is refused, as past a parameter */
    kiln_ctx_mark mark = kiln_ctx_get_mark(p);
    KT_NOTNULL(kiln_buffer(p, "late", KILN_F32, 1, (int64_t[]){2}));
    KT_CHECK(kiln_ctx_rewind(p, mark) == KILN_ERR_STATE, "a rewind past a buffer was allowed");
    kiln_ctx_free(a), kiln_ctx_free(b), kiln_ctx_free(p);
    unlink(path), unlink(plain);
}

KT_TEST(nn_batch_norm_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 2, 3, 2, 2), *r3 = kiln_new_1d(ctx, KILN_F32, 3);
    kiln_tensor *r4 = kiln_new_1d(ctx, KILN_F32, 4), *r64 = kiln_new_1d(ctx, KILN_F64, 3);
    kiln_tensor *one = kiln_new_2d(ctx, KILN_F32, 1, 3), *v = kiln_new_1d(ctx, KILN_F32, 3);
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 1, (int64_t[]){3});
    KT_NOTNULL(p && one && v);
    const char *op = "kiln_batch_norm";
    NNT_FAILS(kiln_batch_norm(ctx, x, r4, r3, NULL, NULL, true, 0.1, 1e-5), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_batch_norm(ctx, x, r3, NULL, NULL, NULL, true, 0.1, 1e-5), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_batch_norm(ctx, x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_batch_norm(ctx, x, r3, v, r64, NULL, true, 0.1, 1e-5), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_batch_norm(ctx, x, r3, v, NULL, NULL, true, 1.5, 1e-5), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_batch_norm(ctx, x, r3, v, NULL, NULL, true, 0.1, -1), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_batch_norm(ctx, one, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_batch_norm(ctx, r3, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), KILN_ERR_SHAPE, op);
    /* training writes the running statistics: a parameter or a node will not do */
    NNT_FAILS(kiln_batch_norm(ctx, x, p, v, NULL, NULL, true, 0.1, 1e-5), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_batch_norm(ctx, x, kiln_neg(ctx, r3), v, NULL, NULL, true, 0.1, 1e-5), KILN_ERR_ARG, op);
    kiln_ctx_free(ctx);
}

/* ---- group_norm ---- */

static kiln_tensor *build_gn_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    bool has_w = fx_param(c, "has_w", 0) != 0, has_b = fx_param(c, "has_b", 0) != 0;
    return kiln_group_norm(ctx, in[0], (int)fx_param(c, "groups", 1), has_w ? in[1] : NULL, has_b ? in[1 + has_w] : NULL,
                           fx_param(c, "eps", 1e-5));
}

KT_TEST(nn_group_norm_fixture) {
    const char *cases[] = {"group_norm", "group_norm_plain", "group_norm_one"};
    const char *inputs[][4] = {{"x", "w", "b", NULL}, {"x", NULL}, {"x", "w", "b", NULL}};
    for (int i = 0; i < 3; i++) {
        nnt_fixture(NORM_CHAN, cases[i], inputs[i], build_gn_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture(NORM_CHAN, cases[i], inputs[i], build_gn_fixture, KILN_F32, 1e-5, 1e-4);
    }
}

typedef struct {
    int groups;
    bool has_w, has_b, transpose;
} gn_case;

static kiln_tensor *build_gn(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const gn_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], 0, 1) : in[0];
    return kiln_group_norm(ctx, x, c->groups, c->has_w ? in[1] : NULL, c->has_b ? in[1 + c->has_w] : NULL, 1e-5);
}

KT_TEST(nn_group_norm_grad) {
    for (int v = 0; v < 16; v++) {
        gn_case c = {v & 1 ? 3 : 2, (v & 2) != 0, (v & 4) != 0, (v & 8) != 0};
        gc_input in[3] = {GC_IN(4, 2, 6, 2, 3), GC_IN(1, 6), GC_IN(1, 6)};
        if (c.transpose) in[0].shape[0] = 6, in[0].shape[1] = 2;
        in[0].lo = -2, in[0].hi = 3;
        char what[96];
        snprintf(what, sizeof what, "group_norm groups %d weight %d bias %d transposed %d", c.groups, c.has_w,
                 c.has_b, c.transpose);
        gc_check(what, build_gn, &c, 1 + c.has_w + c.has_b, in, (uint64_t)(131 + v));
    }
}

KT_TEST(nn_group_norm_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 2, 6, 2, 2), *w4 = kiln_new_1d(ctx, KILN_F32, 4);
    kiln_tensor *v = kiln_new_1d(ctx, KILN_F32, 6);
    KT_NOTNULL(v && w4);
    const char *op = "kiln_group_norm";
    NNT_FAILS(kiln_group_norm(ctx, x, 4, NULL, NULL, 1e-5), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_group_norm(ctx, x, 0, NULL, NULL, 1e-5), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_group_norm(ctx, x, 3, w4, NULL, 1e-5), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_group_norm(ctx, x, 3, v, NULL, -1.0), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_group_norm(ctx, v, 3, NULL, NULL, 1e-5), KILN_ERR_SHAPE, op);
    /* an empty batch normalizes nothing */
    kiln_tensor *y = kiln_group_norm(ctx, kiln_new_4d(ctx, KILN_F32, 0, 6, 2, 2), 3, v, v, 1e-5);
    KT_NOTNULL(y);
    KT_CHECK(kiln_tensor_dim(y, 0) == 0 && kiln_tensor_dim(y, 1) == 6, "empty batch: wrong shape");
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    kiln_ctx_free(ctx);
}
