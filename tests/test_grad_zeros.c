/* test_grad_zeros.c — an optimizer step's zeroing of the gradients is
 * deferred on the host (KILN_FLAG_ZEROS, core/backend.c): the
 * convolution or matmul that next adds into a gradient stores instead,
 * and whatever reads a gradient first (the bias's ACC_GRAD, the
 * optimizer's own graph, kiln_tensor_get_*) reads zeros, though the bytes
 * still hold the last step's gradient. Checked on a small network with
 * fusion on and off ($KILN_FUSE=0: no product adds into a gradient)
 * against gradients computed once in a fresh context. */
#include "test_mov_util.h"

#include "../core/graph.h"

#include <stdlib.h>

enum { NW1 = 8 * 3 * 3 * 3, NW2 = 5 * 8 * 6 * 6, NB = 5, NP = 3 };

static const int64_t sizes[NP] = {NW1, NW2, NB};

typedef double values[NP][NW2];

/* conv (3x3, 8 channels) -> tanh -> linear -> tanh -> sum over x [4, 3,
 * 6, 6] and its backward, in *out; the weights w when not NULL. */
static void net(kiln_ctx *ctx, kiln_tensor **p, values *w, kiln_graph **out) {
    kiln_tensor *x = mt_leaf(ctx, KILN_F32, 4, (int64_t[]){4, 3, 6, 6}, 1);
    p[0] = kiln_param(ctx, "w1", KILN_F32, 4, (int64_t[]){8, 3, 3, 3});
    p[1] = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){5, 288});
    p[2] = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){5});
    for (int k = 0; k < NP; k++)
        KT_OK(w ? kiln_tensor_set_f64(p[k], (*w)[k], sizes[k]) : kiln_tensor_fill_randn(p[k], 3 + (uint64_t)k, 0.0, 0.3));
    kiln_conv2d_params cp = {.stride = {1, 1}, .padding = {1, 1}};
    kiln_tensor *h = kiln_tanh(ctx, kiln_conv2d(ctx, x, p[0], NULL, &cp));
    h = kiln_reshape(ctx, h, 2, (int64_t[]){4, 288});
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_tanh(ctx, kiln_linear(ctx, h, p[1], p[2])));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    *out = g;
}

static void get_all(kiln_tensor **t, values *v) {
    for (int k = 0; k < NP; k++) KT_OK(kiln_tensor_get_f64(t[k], (*v)[k], sizes[k]));
}

static void grads_of(kiln_tensor **p, kiln_tensor **g) {
    for (int k = 0; k < NP; k++) g[k] = kiln_tensor_grad(p[k]);
}

static void check_near(const char *what, int fuse, int threads, values *got, values *want, double scale) {
    for (int k = 0; k < NP; k++) {
        double big = 0;
        for (int64_t i = 0; i < sizes[k]; i++) big = fmax(big, fabs(scale * (*want)[k][i]));
        for (int64_t i = 0; i < sizes[k]; i++)
            KT_CHECK(fabs((*got)[k][i] - scale * (*want)[k][i]) <= 1e-5 * big, "%s, fuse %d, %d threads: %d[%lld] %.9g vs %.9g",
                     what, fuse, threads, k, (long long)i, (*got)[k][i], scale * (*want)[k][i]);
    }
}

/* compute, step; compute twice (the gradients twice those of a fresh
 * context at the step's weights); step, and step again without a compute
 * (SGD without momentum over zero gradients: the weights stay); compute,
 * step, and the gradients read as zeros. */
static void train(bool fuse, int threads) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    KT_OK(kiln_set_threads(threads));
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p[NP], *gr[NP];
    kiln_graph *g, *h;
    net(ctx, p, NULL, &g);
    grads_of(p, gr);
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.05f});
    KT_CHECK(opt != NULL, "kiln_sgd_new: %s", kiln_last_error());
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_optim_step(opt));
    int deferred = 0, stored = 0;
    for (int k = 0; k < NP; k++) deferred += (gr[k]->flags & KILN_FLAG_ZEROS) != 0;
    for (int i = 0; i < g->n; i++) stored += g->acc_node[i] >= 0;
    KT_CHECK(deferred == NP, "fuse %d: %d of %d gradients' zeros deferred", fuse, deferred, NP);
    KT_CHECK(stored == (fuse ? 2 : 0), "fuse %d: %d products add into a gradient", fuse, stored);
    static values w1, twice, once, w2, w3;
    get_all(p, &w1);
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(g));
    get_all(gr, &twice);
    kiln_ctx *fresh = kiln_ctx_new();
    kiln_tensor *q[NP], *qg[NP];
    net(fresh, q, &w1, &h);
    KT_OK(kiln_graph_compute(h));
    grads_of(q, qg);
    get_all(qg, &once);
    kiln_ctx_free(fresh);
    check_near("two computes after a step", fuse, threads, &twice, &once, 2.0);
    KT_OK(kiln_optim_step(opt));
    get_all(p, &w2);
    KT_OK(kiln_optim_step(opt));
    get_all(p, &w3);
    check_near("a step over zero gradients", fuse, threads, &w3, &w2, 1.0);
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_optim_step(opt));
    get_all(gr, &twice);
    for (int k = 0; k < NP; k++)
        for (int64_t i = 0; i < sizes[k]; i++)
            KT_CHECK(twice[k][i] == 0.0, "fuse %d: grad %d[%lld] is %.9g after a step", fuse, k, (long long)i,
                     twice[k][i]);
    kiln_ctx_free(ctx);
    KT_OK(kiln_set_threads(0));
}

KT_TEST(optim_step_defers_grad_zeros) {
    for (int threads = 1; threads <= 2; threads++) {
        train(true, threads);
        train(false, threads);
    }
    unsetenv("KILN_FUSE");
}
