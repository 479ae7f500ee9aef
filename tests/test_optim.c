/* test_optim.c — optimizers: SGD against a scalar reference loop (plain,
 * weight decay, momentum, dampening, Nesterov; f32 and f64), learning-rate
 * changes, state bytes, error paths, gradient accumulation over
 * micro-batches, and a small end-to-end fit. */
#include "kt.h"
#include "../optim/optim_impl.h"

#include <string.h>

#define NA 12 /* parameter a: [3, 4] */
#define NB 5  /* parameter b: [5] */
#define STEPS 5

/* Fixed synthetic values: the initial parameters and the gradient of step k. */
static double init_value(int which, int i) { return 0.5 * sin(1.0 + i + 7.0 * which); }
static double grad_value(int which, int k, int i) { return cos(0.37 * i + 1.1 * k + 3.0 * which) + 0.1 * which; }

/* One torch.optim.SGD step on n doubles; k is the step index (0 first). */
static void sgd_ref(double *p, double *buf, const double *g, int n, const kiln_sgd_config *c, double lr, int k) {
    double mom = c->momentum, damp = c->dampening, wd = c->weight_decay;
    for (int i = 0; i < n; i++) {
        double d = g[i];
        if (wd != 0) d += wd * p[i];
        if (mom != 0) {
            buf[i] = k == 0 ? d : mom * buf[i] + (1 - damp) * d;
            d = c->nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
    }
}

/* Run STEPS steps on two parameters of dtype dt with the gradients above,
 * lrs[k] set before step k when lrs is not NULL, and compare every step
 * with the reference. */
static void check_sgd(const char *what, kiln_dtype dt, kiln_sgd_config cfg, const float *lrs) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_param(ctx, "a", dt, 2, (int64_t[]){3, 4}), *b = kiln_param(ctx, "b", dt, 1, (int64_t[]){NB});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    double pa[NA], pb[NB], ba[NA] = {0}, bb[NB] = {0}, ga[NA], gb[NB], got[NA];
    for (int i = 0; i < NA; i++) pa[i] = init_value(0, i);
    for (int i = 0; i < NB; i++) pb[i] = init_value(1, i);
    KT_OK(kiln_tensor_set_f64(a, pa, NA));
    KT_OK(kiln_tensor_set_f64(b, pb, NB));
    /* a f32 parameter holds its initial values rounded: start the reference there */
    KT_OK(kiln_tensor_get_f64(a, pa, NA));
    KT_OK(kiln_tensor_get_f64(b, pb, NB));
    kiln_optim *opt = kiln_sgd_new(ctx, &cfg);
    KT_NOTNULL(opt);
    kiln_graph *graph = opt->graph;
    int n_nodes = kiln_graph_n_nodes(graph);
    double atol = dt == KILN_F32 ? 1e-6 : 1e-13, rtol = dt == KILN_F32 ? 1e-5 : 1e-12;
    for (int k = 0; k < STEPS; k++) {
        if (lrs) KT_OK(kiln_optim_set_lr(opt, lrs[k]));
        double lr = kiln_optim_lr(opt);
        KT_CHECK(lr == (double)(lrs ? lrs[k] : cfg.lr), "%s: lr %g", what, lr);
        for (int i = 0; i < NA; i++) ga[i] = grad_value(0, k, i);
        for (int i = 0; i < NB; i++) gb[i] = grad_value(1, k, i);
        KT_OK(kiln_tensor_set_f64(kiln_tensor_grad(a), ga, NA));
        KT_OK(kiln_tensor_set_f64(kiln_tensor_grad(b), gb, NB));
        /* the reference sees the gradients as the tensor holds them */
        KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(a), ga, NA));
        KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(b), gb, NB));
        sgd_ref(pa, ba, ga, NA, &cfg, lr, k);
        sgd_ref(pb, bb, gb, NB, &cfg, lr, k);
        KT_OK(kiln_optim_step(opt));
        int64_t worst;
        KT_OK(kiln_tensor_get_f64(a, got, NA));
        double e = kt_rel_err(got, pa, NA, atol, rtol, &worst);
        KT_CHECK(e <= 1, "%s %s step %d: a[%lld] = %.10g, reference %.10g", what, kiln_dtype_name(dt), k,
                 (long long)worst, got[worst], pa[worst]);
        KT_OK(kiln_tensor_get_f64(b, got, NB));
        e = kt_rel_err(got, pb, NB, atol, rtol, &worst);
        KT_CHECK(e <= 1, "%s %s step %d: b[%lld] = %.10g, reference %.10g", what, kiln_dtype_name(dt), k,
                 (long long)worst, got[worst], pb[worst]);
        /* the step zeroes the gradients */
        KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(a), got, NA));
        for (int i = 0; i < NA; i++) KT_CHECK(got[i] == 0, "%s: a.grad[%d] = %g after the step", what, i, got[i]);
        KT_CHECK(kiln_optim_steps(opt) == k + 1, "%s: %lld steps counted", what, (long long)kiln_optim_steps(opt));
    }
    /* a new lr is a new value in the hyper leaf: the step graph is the same */
    KT_CHECK(opt->graph == graph && kiln_graph_n_nodes(graph) == n_nodes, "%s: the step graph was rebuilt", what);
    kiln_ctx_free(ctx);
}

static void check_both(const char *what, kiln_sgd_config cfg, const float *lrs) {
    check_sgd(what, KILN_F32, cfg, lrs);
    check_sgd(what, KILN_F64, cfg, lrs);
}

KT_TEST(optim_sgd_plain) { check_both("plain", (kiln_sgd_config){.lr = 0.1f}, NULL); }

KT_TEST(optim_sgd_weight_decay) {
    check_both("weight decay", (kiln_sgd_config){.lr = 0.05f, .weight_decay = 0.3f}, NULL);
}

KT_TEST(optim_sgd_momentum) {
    check_both("momentum", (kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}, NULL);
    /* by hand: p = 1, gradient 1 every step, lr 0.1, momentum 0.9 gives
     * buffers 1, 1.9, 2.71 (the first step takes the gradient as it is) */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F64, 1, (int64_t[]){1});
    KT_NOTNULL(p);
    KT_OK(kiln_tensor_fill(p, 1.0));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f});
    KT_NOTNULL(opt);
    double lr = 0.1f, m = 0.9f, want[3] = {1 - lr, 1 - lr * (1 + (1 + m)), 1 - lr * (3 + m + m * (1 + m))};
    for (int k = 0; k < 3; k++) {
        KT_OK(kiln_tensor_fill(kiln_tensor_grad(p), 1.0));
        KT_OK(kiln_optim_step(opt));
        KT_CHECK(fabs(kiln_tensor_item(p) - want[k]) < 1e-12, "step %d: p = %.12g, want %.12g", k, kiln_tensor_item(p),
                 want[k]);
    }
    kiln_ctx_free(ctx);
}

KT_TEST(optim_sgd_dampening) {
    check_both("dampening", (kiln_sgd_config){.lr = 0.1f, .momentum = 0.8f, .dampening = 0.25f}, NULL);
}

KT_TEST(optim_sgd_nesterov) {
    check_both("nesterov", (kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.1f, .nesterov = true},
               NULL);
}

KT_TEST(optim_sgd_lr_change) {
    static const float lrs[STEPS] = {0.1f, 0.05f, 0.2f, 0.0f, 0.01f};
    check_both("lr change", (kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f}, lrs);
    check_both("lr change, plain", (kiln_sgd_config){.lr = 0.3f}, lrs);
}

KT_TEST(optim_sgd_new_for_subset) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_param(ctx, "a", KILN_F32, 1, (int64_t[]){4});
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){4});
    KT_NOTNULL(b);
    KT_OK(kiln_tensor_fill(a, 1.0));
    KT_OK(kiln_tensor_fill(b, 1.0));
    kiln_optim *opt = kiln_sgd_new_for(ctx, &b, 1, &(kiln_sgd_config){.lr = 0.5f});
    KT_NOTNULL(opt);
    KT_OK(kiln_tensor_fill(kiln_tensor_grad(a), 2.0));
    KT_OK(kiln_tensor_fill(kiln_tensor_grad(b), 2.0));
    KT_OK(kiln_optim_step(opt));
    float va[4], vb[4], gva[4];
    KT_OK(kiln_tensor_get_f32(a, va, 4));
    KT_OK(kiln_tensor_get_f32(b, vb, 4));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(a), gva, 4));
    for (int i = 0; i < 4; i++) {
        KT_CHECK(va[i] == 1.0f && gva[i] == 2.0f, "a is not in the optimizer but changed: %g, grad %g", va[i], gva[i]);
        KT_CHECK(vb[i] == 0.0f, "b[%d] = %g, want 0", i, vb[i]);
    }
    kiln_ctx_free(ctx);
}

KT_TEST(optim_sgd_state_bytes) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(kiln_param(ctx, "a", KILN_F32, 2, (int64_t[]){3, 4}));
    KT_NOTNULL(kiln_param(ctx, "b", KILN_F64, 1, (int64_t[]){5}));
    kiln_optim *plain = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f});
    KT_NOTNULL(plain);
    KT_CHECK(kiln_optim_state_bytes(plain) == 0, "plain SGD holds %zu bytes of state", kiln_optim_state_bytes(plain));
    size_t before = kiln_ctx_storage_bytes(ctx);
    kiln_optim *mom = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f});
    KT_NOTNULL(mom);
    size_t want = 12 * sizeof(float) + 5 * sizeof(double);
    KT_CHECK(kiln_optim_state_bytes(mom) == want, "momentum SGD: %zu bytes of state, want %zu",
             kiln_optim_state_bytes(mom), want);
    KT_CHECK(kiln_ctx_storage_bytes(ctx) - before >= want, "the momentum buffers are not in the context's storage");
    KT_CHECK(kiln_optim_state_bytes(NULL) == 0 && kiln_optim_steps(NULL) == 0, "NULL optimizer accessors");
    kiln_ctx_free(ctx);
}

KT_TEST(optim_sgd_errors) {
    kiln_ctx *ctx = kiln_ctx_new(), *other = kiln_ctx_new();
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f}), KILN_ERR_ARG, "no parameters");
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *h = kiln_param(ctx, "h", KILN_F16, 1, (int64_t[]){3});
    kiln_tensor *leaf = kiln_new_1d(ctx, KILN_F32, 3), *foreign = kiln_param(other, "q", KILN_F32, 1, (int64_t[]){3});
    KT_NOTNULL(foreign);
    KT_NOTNULL(h);
    KT_EXPECT_ERR(kiln_sgd_new(ctx, NULL), KILN_ERR_ARG, "kiln_sgd_new: config is NULL");
    KT_EXPECT_ERR(kiln_sgd_new(NULL, &(kiln_sgd_config){.lr = 0.1f}), KILN_ERR_ARG, "kiln_sgd_new: ctx is NULL");
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = -0.1f}), KILN_ERR_ARG, "kiln_sgd_new: invalid learning rate");
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = NAN}), KILN_ERR_ARG, "invalid learning rate");
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .momentum = -0.5f}), KILN_ERR_ARG, "invalid momentum");
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .weight_decay = -1}), KILN_ERR_ARG,
               "invalid weight_decay");
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .nesterov = true}), KILN_ERR_ARG,
               "Nesterov momentum requires a momentum and zero dampening");
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .nesterov = true}),
               KILN_ERR_ARG, "Nesterov momentum requires");
    kiln_sgd_config ok = {.lr = 0.1f};
    /* all parameters of ctx include the f16 one */
    KT_EXPECT_ERR(kiln_sgd_new(ctx, &ok), KILN_ERR_DTYPE, "kiln_sgd_new: parameter 1 'h' is f16");
    KT_EXPECT_ERR(kiln_sgd_new_for(ctx, &leaf, 1, &ok), KILN_ERR_ARG,
               "kiln_sgd_new_for: parameter 0 '' does not require grad");
    KT_EXPECT_ERR(kiln_sgd_new_for(ctx, &foreign, 1, &ok), KILN_ERR_ARG, "belongs to another context");
    KT_EXPECT_ERR(kiln_sgd_new_for(ctx, ((kiln_tensor *[]){p, p}), 2, &ok), KILN_ERR_ARG, "'p' appears twice");
    KT_EXPECT_ERR(kiln_sgd_new_for(ctx, ((kiln_tensor *[]){p, NULL}), 2, &ok), KILN_ERR_ARG, "parameter 1 is NULL");
    KT_EXPECT_ERR(kiln_sgd_new_for(ctx, &p, 0, &ok), KILN_ERR_ARG, "no parameters");
    /* a NULL parameter after a failed constructor keeps that constructor's message */
    kiln_clear_error();
    kiln_tensor *bad = kiln_param(ctx, "bad", KILN_F32, 0, (int64_t[]){1});
    KT_CHECK(!bad && kiln_last_status() == KILN_ERR_SHAPE, "kiln_param with ndim 0 succeeded");
    KT_CHECK(kiln_sgd_new_for(ctx, &bad, 1, &ok) == NULL && kiln_last_status() == KILN_ERR_SHAPE &&
                 strstr(kiln_last_error(), "kiln_tensor_new"),
             "the first error was replaced: %s", kiln_last_error());
    kiln_clear_error();
    KT_CHECK(kiln_optim_step(NULL) == KILN_ERR_ARG && strstr(kiln_last_error(), "kiln_optim_step"), "step(NULL)");
    kiln_optim *opt = kiln_sgd_new_for(ctx, &p, 1, &ok);
    KT_NOTNULL(opt);
    kiln_clear_error();
    KT_CHECK(kiln_optim_set_lr(opt, -1.0f) == KILN_ERR_ARG, "set_lr(-1) accepted");
    KT_CHECK(kiln_last_status() == KILN_ERR_ARG && strstr(kiln_last_error(), "kiln_optim_set_lr"), "set_lr(-1): %s",
             kiln_last_error());
    KT_CHECK(kiln_optim_lr(opt) == 0.1f, "a bad lr replaced the old one: %g", (double)kiln_optim_lr(opt));
    kiln_ctx_free(other);
    kiln_ctx_free(ctx);
}

/* Linear regression pieces: loss = mse(x @ w, y) over micro-batches. */
#define ACC_N 8 /* rows of a micro-batch */
#define ACC_D 3 /* features */

static void batch(int b, double *x, double *y) {
    for (int i = 0; i < ACC_N * ACC_D; i++) x[i] = sin(0.7 * i + 2.3 * b);
    for (int i = 0; i < ACC_N; i++) y[i] = cos(1.3 * i + b);
}

/* d mse / dw = 2/N * x^T (x w - y) */
static void mse_grad(const double *x, const double *y, const double *w, double *g) {
    for (int j = 0; j < ACC_D; j++) g[j] = 0;
    for (int i = 0; i < ACC_N; i++) {
        double r = -y[i];
        for (int j = 0; j < ACC_D; j++) r += x[i * ACC_D + j] * w[j];
        for (int j = 0; j < ACC_D; j++) g[j] += 2.0 / ACC_N * x[i * ACC_D + j] * r;
    }
}

/* Two computes of a training graph (two micro-batches) then one step equal
 * one step with the sum of the two gradients. */
KT_TEST(optim_grad_accumulation) {
    for (int pass = 0; pass < 2; pass++) {
        kiln_dtype dt = pass ? KILN_F64 : KILN_F32;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_2d(ctx, dt, ACC_N, ACC_D), *y = kiln_new_2d(ctx, dt, ACC_N, 1);
        kiln_tensor *w = kiln_param(ctx, "w", dt, 2, (int64_t[]){ACC_D, 1});
        KT_NOTNULL(w);
        double w0[ACC_D] = {0.3, -0.2, 0.5}, xv[ACC_N * ACC_D], yv[ACC_N], g1[ACC_D], g2[ACC_D], got[ACC_D];
        KT_OK(kiln_tensor_set_f64(w, w0, ACC_D));
        KT_OK(kiln_tensor_get_f64(w, w0, ACC_D));
        kiln_tensor *loss = kiln_mse(ctx, kiln_matmul(ctx, x, w), y);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_NOTNULL(loss);
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_backward(g, loss));
        kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f});
        KT_NOTNULL(opt);
        double *grads[2] = {g1, g2};
        for (int b = 0; b < 2; b++) {
            batch(b, xv, yv);
            KT_OK(kiln_tensor_set_f64(x, xv, ACC_N * ACC_D));
            KT_OK(kiln_tensor_set_f64(y, yv, ACC_N));
            KT_OK(kiln_tensor_get_f64(x, xv, ACC_N * ACC_D));
            KT_OK(kiln_tensor_get_f64(y, yv, ACC_N));
            KT_OK(kiln_graph_compute(g));
            mse_grad(xv, yv, w0, grads[b]);
        }
        KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), got, ACC_D));
        double want[ACC_D];
        for (int j = 0; j < ACC_D; j++) want[j] = g1[j] + g2[j];
        double tol = pass ? 1e-12 : 1e-5;
        KT_CHECK(kt_rel_err(got, want, ACC_D, tol, tol, NULL) <= 1, "%s: accumulated grad %g %g %g, want %g %g %g",
                 kiln_dtype_name(dt), got[0], got[1], got[2], want[0], want[1], want[2]);
        KT_OK(kiln_optim_step(opt));
        KT_OK(kiln_tensor_get_f64(w, got, ACC_D));
        for (int j = 0; j < ACC_D; j++) want[j] = w0[j] - (double)0.1f * (g1[j] + g2[j]);
        KT_CHECK(kt_rel_err(got, want, ACC_D, tol, tol, NULL) <= 1, "%s: w after the step %g %g %g, want %g %g %g",
                 kiln_dtype_name(dt), got[0], got[1], got[2], want[0], want[1], want[2]);
        kiln_ctx_free(ctx);
    }
}

/* End to end: fit y = x @ w_true (plus a bias through a column of ones) by
 * SGD with momentum; the loss must fall below 1e-5 and w reach w_true. */
KT_TEST(optim_sgd_fit_linear) {
    enum { ROWS = 64, F = 5 };
    static const float w_true[F] = {1.5f, -2.0f, 0.5f, 3.0f, 0.25f}; /* the last is the bias */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, ROWS, F), *y = kiln_new_2d(ctx, KILN_F32, ROWS, 1);
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){F, 1});
    KT_NOTNULL(w);
    KT_OK(kiln_tensor_fill_randn(x, 7, 0.0, 1.0));
    float *xv = kiln_tensor_data(x), *yv = kiln_tensor_data(y);
    for (int i = 0; i < ROWS; i++) {
        xv[i * F + F - 1] = 1.0f;
        yv[i] = 0;
        for (int j = 0; j < F; j++) yv[i] += xv[i * F + j] * w_true[j];
    }
    kiln_tensor *loss = kiln_mse(ctx, kiln_matmul(ctx, x, w), y);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(loss);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f});
    KT_NOTNULL(opt);
    double first = 0, last = 0;
    for (int step = 0; step < 200; step++) {
        KT_OK(kiln_graph_compute(g));
        last = kiln_tensor_item(loss);
        if (step == 0) first = last;
        KT_OK(kiln_optim_step(opt));
    }
    KT_CHECK(first > 1.0 && last < 1e-5, "loss %g -> %g after 200 steps", first, last);
    float wv[F];
    KT_OK(kiln_tensor_get_f32(w, wv, F));
    for (int j = 0; j < F; j++) KT_CHECK(fabs(wv[j] - w_true[j]) < 1e-3, "w[%d] = %g, want %g", j, wv[j], w_true[j]);
    kiln_ctx_free(ctx);
}
