/* test_backend_optim.c — the cross-backend op table's optimizer family:
 * every optimizer step op (SGD, Adam/AdamW, Lion, their 8-bit versions,
 * APOLLO and APOLLO-Mini, GaLore and 8-bit GaLore) runs a few training
 * steps on a small model on every device backend and on the CPU, and the
 * parameters and state must agree (harness: backend_ops_util.h). No step
 * node may fall back to the CPU. */
#include "backend_ops_util.h"
#include "../optim/optim_impl.h"

/* ---- optimizers ---------------------------------------------------------------- */

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_LION } opt_kind;
typedef struct optim_case {
    const char *name;
    opt_kind kind;
    kiln_sgd_config sgd;
    kiln_adam_config adam;
    kiln_lion_config lion;
} optim_case;

#define OPT_STEPS 4

typedef struct opt_side {
    kiln_ctx *ctx;
    kiln_tensor *p[4]; /* w1 [7,6], b1 [7], w2 [3,7], b2 [3] */
    kiln_tensor *loss;
    kiln_graph *g;
    kiln_optim *opt;
} opt_side;

/* A two-layer model with an mse loss, its graph with the backward and the
 * optimizer, all in a context on b (NULL: the CPU). */
static bool opt_build(opt_side *s, const optim_case *c, kiln_backend *b) {
    kiln_ctx *ctx = s->ctx = kiln_ctx_new();
    if (!ctx || kiln_ctx_set_backend(ctx, b)) return false;
    const int64_t shapes[4][2] = {{7, 6}, {7, 0}, {3, 7}, {3, 0}};
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        s->p[i] = kiln_param(ctx, name, KILN_F32, shapes[i][1] ? 2 : 1, shapes[i]);
        if (!s->p[i] || kiln_tensor_fill_uniform(s->p[i], 10 + (uint64_t)i, -0.5, 0.5)) return false;
    }
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 8, 6), *y = kiln_new_2d(ctx, KILN_F32, 8, 3);
    if (!x || !y || kiln_tensor_fill_uniform(x, 1, -1, 1) || kiln_tensor_fill_uniform(y, 2, -1, 1)) return false;
    kiln_tensor *h = kiln_tanh(ctx, kiln_linear(ctx, x, s->p[0], s->p[1]));
    s->loss = kiln_mse(ctx, kiln_linear(ctx, h, s->p[2], s->p[3]), y);
    s->g = kiln_graph_new(ctx);
    if (!s->loss || !s->g || kiln_graph_add(s->g, s->loss) || kiln_graph_backward(s->g, s->loss)) return false;
    s->opt = c->kind == OPT_SGD    ? kiln_sgd_new(ctx, &c->sgd)
             : c->kind == OPT_ADAM ? kiln_adam_new(ctx, &c->adam)
             : c->kind == OPT_LION ? kiln_lion_new(ctx, &c->lion)
                                   : kiln_adamw_new(ctx, &c->adam);
    return s->opt != NULL;
}

/* OPT_STEPS training steps on both sides; the parameters must agree after
 * each, and both the model's graph and the step graph run on the device. */
static void run_optim_case(const optim_case *c, kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    opt_side ref = {0}, dev = {0};
    double err = 0;
    int64_t vmsg = kiln_backend_validation_messages(b);
    if (!opt_build(&ref, c, NULL) || !opt_build(&dev, c, b)) {
        kt_fail(__FILE__, __LINE__, "optim/%s: building failed: %s", c->name, kiln_last_error());
        goto done;
    }
    for (int k = 0; k < OPT_STEPS; k++) {
        if (kiln_graph_compute(ref.g) || kiln_optim_step(ref.opt) || kiln_graph_compute(dev.g) ||
            kiln_optim_step(dev.opt)) {
            kt_fail(__FILE__, __LINE__, "optim/%s step %d: %s", c->name, k, kiln_last_error());
            goto done;
        }
        double e = bo_error(dev.loss, ref.loss);
        for (int i = 0; i < 4; i++) {
            double ep = bo_error(dev.p[i], ref.p[i]);
            if (!(ep <= e)) e = ep;
        }
        if (!(e <= err)) err = e;
    }
    kiln_graph_stats gs = kiln_graph_get_stats(dev.g), os = kiln_graph_get_stats(dev.opt->graph);
    vmsg = kiln_backend_validation_messages(b) - vmsg;
    if (!(err <= BO_TRANS) || gs.nodes_fallback || os.nodes_fallback || vmsg || getenv("KILN_TEST_VERBOSE"))
        printf("    %-10s %-26s %-4s %-7s params %.1e  tol %.0e  nodes %lld dev %lld cpu, step nodes %lld dev %lld cpu\n",
               "optim", c->name, "f32", bn, err, BO_TRANS, (long long)gs.nodes_on_backend,
               (long long)gs.nodes_fallback, (long long)os.nodes_on_backend, (long long)os.nodes_fallback);
    fflush(stdout); /* in order with the failure lines on stderr */
    KT_CHECK(err <= BO_TRANS, "optim/%s on %s: parameter error %.3g > %.0e", c->name, bn, err, BO_TRANS);
    KT_CHECK(gs.nodes_fallback == 0, "optim/%s on %s: %lld model nodes ran on the CPU", c->name, bn,
             (long long)gs.nodes_fallback);
    KT_CHECK(os.nodes_fallback == 0, "optim/%s on %s: %lld step nodes ran on the CPU", c->name, bn,
             (long long)os.nodes_fallback);
    KT_CHECK(vmsg == 0, "optim/%s on %s: %lld validation messages", c->name, bn, (long long)vmsg);
done:
    kiln_ctx_free(ref.ctx);
    kiln_ctx_free(dev.ctx);
}

static const optim_case optim_cases[] = {
    {"sgd", OPT_SGD, .sgd = {.lr = 0.1f}},
    {"sgd_momentum_wd", OPT_SGD, .sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f}},
    {"sgd_nesterov", OPT_SGD, .sgd = {.lr = 0.05f, .momentum = 0.8f, .nesterov = true}},
    {"sgd_dampening", OPT_SGD, .sgd = {.lr = 0.05f, .momentum = 0.7f, .dampening = 0.3f}},
    {"adam", OPT_ADAM, .adam = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}},
    {"adam_wd_amsgrad", OPT_ADAM,
     .adam = {.lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.05f, .amsgrad = true}},
    {"adamw", OPT_ADAMW, .adam = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f}},
    {"lion", OPT_LION, .lion = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f}},
    {"lion_wd", OPT_LION, .lion = {.lr = 0.02f, .beta1 = 0.8f, .beta2 = 0.95f, .weight_decay = 0.3f}},
};

KT_TEST(backend_ops_optim) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++)
        for (int k = 0; k < BO_COUNT(optim_cases); k++) run_optim_case(&optim_cases[k], bs[i]);
    fflush(stdout);
}

/* f64 parameters (the CPU's other step dtype): every optimizer_cases entry
 * steps a [20, 15] and a [7] f64 parameter OPT_STEPS times from the same
 * gradients on both sides; the parameters must agree to 1e-12 (the
 * scalars the step derives with pow and sqrt differ by an ulp or so
 * between libm and the device's) and every step node run on the device.
 * CUDA only: the Vulkan steps are f32. */
#define F64_TOL 1e-12
static void run_optim_f64_case(const optim_case *c, kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    const int64_t shp[2][2] = {{20, 15}, {7, 0}};
    kiln_ctx *ctx[2] = {0};
    kiln_tensor *p[2][2];
    kiln_optim *opt[2] = {0};
    double x[300], y[300], err = 0;
    for (int s = 0; s < 2; s++) {
        if (!(ctx[s] = kiln_ctx_new()) || kiln_ctx_set_backend(ctx[s], s ? b : NULL)) goto fail;
        for (int j = 0; j < 2; j++) {
            p[s][j] = kiln_param(ctx[s], j ? "b" : "w", KILN_F64, shp[j][1] ? 2 : 1, shp[j]);
            if (!p[s][j] || kiln_tensor_fill_uniform(p[s][j], 20 + (uint64_t)j, -1, 1)) goto fail;
        }
        opt[s] = c->kind == OPT_SGD    ? kiln_sgd_new(ctx[s], &c->sgd)
                 : c->kind == OPT_ADAM ? kiln_adam_new(ctx[s], &c->adam)
                 : c->kind == OPT_LION ? kiln_lion_new(ctx[s], &c->lion)
                                       : kiln_adamw_new(ctx[s], &c->adam);
        if (!opt[s]) goto fail;
    }
    for (int k = 0; k < OPT_STEPS; k++) {
        for (int j = 0; j < 2; j++) {
            int64_t n = kiln_tensor_numel(p[0][j]);
            if (kiln_tensor_fill_randn(kiln_tensor_grad(p[0][j]), 40 + 10 * (uint64_t)k + (uint64_t)j, 0, 1) ||
                kiln_tensor_get_f64(kiln_tensor_grad(p[0][j]), x, n) ||
                kiln_tensor_set_f64(kiln_tensor_grad(p[1][j]), x, n))
                goto fail;
        }
        if (kiln_optim_step(opt[0]) || kiln_optim_step(opt[1])) goto fail;
        for (int j = 0; j < 2; j++) {
            int64_t n = kiln_tensor_numel(p[0][j]);
            if (kiln_tensor_get_f64(p[0][j], x, n) || kiln_tensor_get_f64(p[1][j], y, n)) goto fail;
            double e = bo_error_values(y, x, n);
            if (!(e <= err)) err = e;
        }
    }
    kiln_graph_stats os = kiln_graph_get_stats(opt[1]->graph);
    if (!(err <= F64_TOL) || os.nodes_fallback || getenv("KILN_TEST_VERBOSE"))
        printf("    %-10s %-26s %-4s %-7s params %.1e  tol %.0e  step nodes %lld dev %lld cpu\n", "optim", c->name,
               "f64", bn, err, F64_TOL, (long long)os.nodes_on_backend, (long long)os.nodes_fallback);
    fflush(stdout);
    KT_CHECK(err <= F64_TOL, "optim/%s f64 on %s: parameter error %.3g > %.0e", c->name, bn, err, F64_TOL);
    KT_CHECK(os.nodes_fallback == 0, "optim/%s f64 on %s: %lld step nodes ran on the CPU", c->name, bn,
             (long long)os.nodes_fallback);
    goto done;
fail:
    kt_fail(__FILE__, __LINE__, "optim/%s f64 on %s: %s", c->name, bn, kiln_last_error());
done:
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

KT_TEST(backend_ops_optim_f64) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs), ran = 0;
    for (int i = 0; i < nb; i++) {
        if (strcmp(kiln_backend_name(bs[i]), "cuda")) continue;
        for (int k = 0; k < BO_COUNT(optim_cases); k++) run_optim_f64_case(&optim_cases[k], bs[i]);
        ran++;
    }
    fflush(stdout);
    if (!ran) kt_skip("no CUDA device (the f64 steps are CUDA's)");
}

/* 8-bit Adam/AdamW (optim/opt8bit.c): parameters of 4500 (a partial last
 * block) and 5120 elements with the same gradients on both sides, step
 * NaN/Inf elements on step 1; parameters, codes and absmax must be the
 * CPU's bits, every step node on the device. */
static void run_optim8_case(const char *name, bool decoupled, kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    kiln_ctx *ctx[2] = {0};
    kiln_tensor *p[2][2];
    kiln_optim *opt[2];
    const int64_t ns[2] = {4500, 5120};
    double *x = malloc(5120 * sizeof(double)), *y = malloc(5120 * sizeof(double));
    kiln_adam_config cfg = decoupled ? kiln_adamw_defaults() : kiln_adam_defaults();
    cfg.lr = 0.01f;
    cfg.weight_decay = 0.05f;
    for (int s = 0; s < 2; s++) {
        ctx[s] = kiln_ctx_new();
        if (!ctx[s] || kiln_ctx_set_backend(ctx[s], s ? b : NULL)) goto fail;
        for (int j = 0; j < 2; j++) {
            p[s][j] = kiln_param(ctx[s], j ? "b" : "a", KILN_F32, 1, &ns[j]);
            if (!p[s][j] || kiln_tensor_fill_uniform(p[s][j], 3 + (uint64_t)j, -1, 1)) goto fail;
        }
        opt[s] = decoupled ? kiln_adamw8bit_new(ctx[s], &cfg) : kiln_adam8bit_new(ctx[s], &cfg);
        if (!opt[s]) goto fail;
    }
    for (int k = 0; k < OPT_STEPS; k++) {
        for (int j = 0; j < 2; j++) {
            if (kiln_tensor_fill_randn(kiln_tensor_grad(p[0][j]), 50 + 10 * (uint64_t)k + j, 0, 1) ||
                kiln_tensor_get_f64(kiln_tensor_grad(p[0][j]), x, ns[j]))
                goto fail;
            for (int64_t i = 0; k == 1 && i < ns[j]; i += 61) x[i] = i % 2 ? NAN : INFINITY;
            if (kiln_tensor_set_f64(kiln_tensor_grad(p[0][j]), x, ns[j]) ||
                kiln_tensor_set_f64(kiln_tensor_grad(p[1][j]), x, ns[j]))
                goto fail;
        }
        if (kiln_optim_step(opt[0]) || kiln_optim_step(opt[1])) goto fail;
        for (int j = 0; j < 2; j++) {
            kiln_tensor *const *src[2] = {opt[0]->nodes[j]->src, opt[1]->nodes[j]->src};
            const int which[5] = {0, 2, 3, 4, 5}; /* p, m codes, m absmax, v codes, v absmax */
            for (int w = 0; w < 5; w++) {
                int64_t m = kiln_tensor_numel(src[0][which[w]]);
                if (kiln_tensor_get_f64(src[0][which[w]], x, m) || kiln_tensor_get_f64(src[1][which[w]], y, m))
                    goto fail;
                int64_t bad = 0;
                for (int64_t i = 0; i < m; i++) bad += memcmp(&x[i], &y[i], sizeof x[i]) != 0;
                KT_CHECK(bad == 0, "optim8/%s on %s step %d: param %d source %d: %lld of %lld differ from the CPU's",
                         name, bn, k, j, which[w], (long long)bad, (long long)m);
            }
        }
    }
    kiln_graph_stats os = kiln_graph_get_stats(opt[1]->graph);
    if (getenv("KILN_TEST_VERBOSE"))
        printf("    %-10s %-26s %-4s %-7s step nodes %lld dev %lld cpu\n", "optim8", name, "f32", bn,
               (long long)os.nodes_on_backend, (long long)os.nodes_fallback);
    KT_CHECK(os.nodes_fallback == 0, "optim8/%s on %s: %lld step nodes ran on the CPU", name, bn,
             (long long)os.nodes_fallback);
    goto done;
fail:
    kt_fail(__FILE__, __LINE__, "optim8/%s on %s: %s", name, bn, kiln_last_error());
done:
    free(x);
    free(y);
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

KT_TEST(backend_ops_optim8bit) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++) {
        run_optim8_case("adam8bit", false, bs[i]);
        run_optim8_case("adamw8bit", true, bs[i]);
    }
    fflush(stdout);
}


/* 8-bit Lion and SGD-momentum (optim/opt8bit.c) as run_optim8_case: two
 * parameters with 8-bit state (4500, a partial last block, and 5120
 * elements; NaN/Inf gradient elements on step 1) and one of 100 that keeps
 * 32-bit state (a plain LION_STEP / SGD_STEP node); parameters and state
 * (codes and absmax, or the f32 buffer) must be the CPU's bits, every step
 * node on the device. */
typedef struct optim8x_case {
    const char *name;
    bool sgd; /* else Lion */
    kiln_lion_config lion;
    kiln_sgd_config sgd_cfg;
} optim8x_case;

static void run_optim8x_case(const optim8x_case *c, kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    kiln_ctx *ctx[2] = {0};
    kiln_tensor *p[2][3];
    kiln_optim *opt[2];
    const int64_t ns[3] = {4500, 5120, 100};
    int64_t vmsg = kiln_backend_validation_messages(b);
    double *x = malloc(5120 * sizeof(double)), *y = malloc(5120 * sizeof(double));
    for (int s = 0; s < 2; s++) {
        ctx[s] = kiln_ctx_new();
        if (!x || !y || !ctx[s] || kiln_ctx_set_backend(ctx[s], s ? b : NULL)) goto fail;
        for (int j = 0; j < 3; j++) {
            const char *pn[3] = {"a", "b", "c"};
            p[s][j] = kiln_param(ctx[s], pn[j], KILN_F32, 1, &ns[j]);
            if (!p[s][j] || kiln_tensor_fill_uniform(p[s][j], 3 + (uint64_t)j, -1, 1)) goto fail;
        }
        opt[s] = c->sgd ? kiln_sgd8bit_new(ctx[s], &c->sgd_cfg) : kiln_lion8bit_new(ctx[s], &c->lion);
        if (!opt[s]) goto fail;
    }
    for (int k = 0; k < OPT_STEPS; k++) {
        for (int j = 0; j < 3; j++) {
            if (kiln_tensor_fill_randn(kiln_tensor_grad(p[0][j]), 70 + 10 * (uint64_t)k + j, 0, 1) ||
                kiln_tensor_get_f64(kiln_tensor_grad(p[0][j]), x, ns[j]))
                goto fail;
            for (int64_t i = 0; k == 1 && j < 2 && i < ns[j]; i += 61) x[i] = i % 2 ? NAN : -INFINITY;
            if (kiln_tensor_set_f64(kiln_tensor_grad(p[0][j]), x, ns[j]) ||
                kiln_tensor_set_f64(kiln_tensor_grad(p[1][j]), x, ns[j]))
                goto fail;
        }
        if (kiln_optim_step(opt[0]) || kiln_optim_step(opt[1])) goto fail;
        for (int j = 0; j < 3; j++) {
            kiln_tensor *const *src[2] = {opt[0]->nodes[j]->src, opt[1]->nodes[j]->src};
            int nw = j < 2 ? 3 : 2; /* p, codes, absmax; or p, f32 state */
            KT_CHECK(opt[1]->nodes[j]->op == (j < 2   ? (c->sgd ? KILN_OP_SGD8_STEP : KILN_OP_LION8_STEP)
                                             : c->sgd ? KILN_OP_SGD_STEP
                                                      : KILN_OP_LION_STEP),
                     "optim8/%s: param %d has step op %d", c->name, j, (int)opt[1]->nodes[j]->op);
            for (int w = 0; w < nw; w++) {
                int which = w ? w + 1 : 0;
                int64_t m = kiln_tensor_numel(src[0][which]);
                if (kiln_tensor_get_f64(src[0][which], x, m) || kiln_tensor_get_f64(src[1][which], y, m)) goto fail;
                int64_t bad = 0;
                for (int64_t i = 0; i < m; i++) bad += memcmp(&x[i], &y[i], sizeof x[i]) != 0;
                KT_CHECK(bad == 0, "optim8/%s on %s step %d: param %d source %d: %lld of %lld differ from the CPU's",
                         c->name, bn, k, j, which, (long long)bad, (long long)m);
            }
        }
    }
    kiln_graph_stats os = kiln_graph_get_stats(opt[1]->graph);
    if (getenv("KILN_TEST_VERBOSE"))
        printf("    %-10s %-26s %-4s %-7s step nodes %lld dev %lld cpu\n", "optim8", c->name, "f32", bn,
               (long long)os.nodes_on_backend, (long long)os.nodes_fallback);
    KT_CHECK(os.nodes_fallback == 0, "optim8/%s on %s: %lld step nodes ran on the CPU", c->name, bn,
             (long long)os.nodes_fallback);
    vmsg = kiln_backend_validation_messages(b) - vmsg;
    KT_CHECK(vmsg == 0, "optim8/%s on %s: %lld validation messages", c->name, bn, (long long)vmsg);
    goto done;
fail:
    kt_fail(__FILE__, __LINE__, "optim8/%s on %s: %s", c->name, bn, kiln_last_error());
done:
    free(x);
    free(y);
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

static const optim8x_case optim8x_cases[] = {
    {"lion8bit", false, .lion = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f}},
    {"lion8bit_wd", false, .lion = {.lr = 0.02f, .beta1 = 0.8f, .beta2 = 0.95f, .weight_decay = 0.3f}},
    {"sgd8bit_momentum", true, .sgd_cfg = {.lr = 0.05f, .momentum = 0.9f}},
    {"sgd8bit_dampening_wd", true, .sgd_cfg = {.lr = 0.05f, .momentum = 0.7f, .dampening = 0.3f, .weight_decay = 0.01f}},
    {"sgd8bit_nesterov_wd", true, .sgd_cfg = {.lr = 0.05f, .momentum = 0.8f, .nesterov = true, .weight_decay = 0.02f}},
};

KT_TEST(backend_ops_optim8bit_lion_sgd) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++)
        for (int k = 0; k < BO_COUNT(optim8x_cases); k++) run_optim8x_case(&optim8x_cases[k], bs[i]);
    fflush(stdout);
}

/* APOLLO / APOLLO-Mini (optim/apollo.c): a 40x24 matrix (R = G P^T), a
 * 12x36 one (R = P^T G) and a vector (Adam's step), the same gradients on
 * both sides for 6 steps, the projector refreshed on the way (update_gap
 * 2 or 3); parameters and prev_norm must agree with the CPU's to
 * APOLLO_TOL (the projection's f32 sums are in another order than the
 * CPU GEMM's) and every step node must run on the device. */
#define APOLLO_TOL 1e-5
static void run_apollo_case(const char *name, const kiln_apollo_config *cfg, kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    kiln_ctx *ctx[2] = {0};
    kiln_tensor *p[2][3];
    kiln_optim *opt[2];
    const int64_t shapes[3][2] = {{40, 24}, {12, 36}, {24, 0}};
    double *x = malloc(960 * sizeof(double)), *y = malloc(960 * sizeof(double)), err = 0;
    int64_t vmsg = kiln_backend_validation_messages(b);
    if (!x || !y) goto fail;
    for (int s = 0; s < 2; s++) {
        ctx[s] = kiln_ctx_new();
        if (!ctx[s] || kiln_ctx_set_backend(ctx[s], s ? b : NULL)) goto fail;
        for (int j = 0; j < 3; j++) {
            char pn[4] = {'p', (char)('0' + j), 0};
            p[s][j] = kiln_param(ctx[s], pn, KILN_F32, shapes[j][1] ? 2 : 1, shapes[j]);
            if (!p[s][j] || kiln_tensor_fill_uniform(p[s][j], 7 + (uint64_t)j, -1, 1)) goto fail;
        }
        if (!(opt[s] = kiln_apollo_new(ctx[s], cfg))) goto fail;
    }
    for (int k = 0; k < 6; k++) {
        for (int j = 0; j < 3; j++) {
            int64_t n = kiln_tensor_numel(p[0][j]);
            if (kiln_tensor_fill_randn(kiln_tensor_grad(p[0][j]), 90 + 10 * (uint64_t)k + j, 0, 1) ||
                kiln_tensor_get_f64(kiln_tensor_grad(p[0][j]), x, n) ||
                kiln_tensor_set_f64(kiln_tensor_grad(p[1][j]), x, n))
                goto fail;
        }
        if (kiln_optim_step(opt[0]) || kiln_optim_step(opt[1])) goto fail;
        for (int j = 0; j < 3; j++) {
            double e = bo_error(p[1][j], p[0][j]);
            if (!(e <= err)) err = e;
            if (j == 2) continue;
            kiln_tensor *prev[2] = {opt[0]->nodes[j]->src[4], opt[1]->nodes[j]->src[4]};
            if (kiln_tensor_get_f64(prev[0], x, 1) || kiln_tensor_get_f64(prev[1], y, 1)) goto fail;
            e = fabs(x[0] - y[0]) / fabs(x[0]);
            if (!(e <= err)) err = e;
        }
    }
    kiln_graph_stats os = kiln_graph_get_stats(opt[1]->graph);
    vmsg = kiln_backend_validation_messages(b) - vmsg;
    if (!(err <= APOLLO_TOL) || os.nodes_fallback || vmsg || getenv("KILN_TEST_VERBOSE"))
        printf("    %-10s %-26s %-4s %-7s params %.1e  tol %.0e  step nodes %lld dev %lld cpu\n", "optim", name,
               "f32", bn, err, APOLLO_TOL, (long long)os.nodes_on_backend, (long long)os.nodes_fallback);
    fflush(stdout);
    KT_CHECK(err <= APOLLO_TOL, "apollo/%s on %s: error %.3g > %.0e", name, bn, err, APOLLO_TOL);
    KT_CHECK(os.nodes_fallback == 0, "apollo/%s on %s: %lld step nodes ran on the CPU", name, bn,
             (long long)os.nodes_fallback);
    KT_CHECK(vmsg == 0, "apollo/%s on %s: %lld validation messages", name, bn, (long long)vmsg);
    goto done;
fail:
    kt_fail(__FILE__, __LINE__, "apollo/%s on %s: %s", name, bn, kiln_last_error());
done:
    free(x);
    free(y);
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

/* The projector bit for bit: with one 1 per row (m >= n) or per column
 * (m < n) of G, R is P's elements times 1 and zeros, exact on both sides,
 * so exp_avg after step 1 ((1 - beta1) R) shows the device's P bits. */
static void run_apollo_projector_bits(kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    kiln_ctx *ctx[2] = {0};
    kiln_tensor *p[2][2];
    kiln_optim *opt[2];
    const int64_t shapes[2][2] = {{300, 200}, {100, 400}};
    double *x = malloc(60000 * sizeof(double)), *y = malloc(60000 * sizeof(double));
    kiln_apollo_config cfg = kiln_apollo_defaults();
    cfg.rank = 64;
    cfg.seed = 11;
    if (!x || !y) goto fail;
    for (int s = 0; s < 2; s++) {
        ctx[s] = kiln_ctx_new();
        if (!ctx[s] || kiln_ctx_set_backend(ctx[s], s ? b : NULL)) goto fail;
        for (int j = 0; j < 2; j++) {
            int64_t m = shapes[j][0], n = shapes[j][1];
            if (!(p[s][j] = kiln_param(ctx[s], j ? "wide" : "tall", KILN_F32, 2, shapes[j]))) goto fail;
            for (int64_t i = 0; i < m * n; i++) x[i] = 0;
            for (int64_t i = 0; i < (m > n ? m : n); i++) x[m >= n ? i * n + i % n : (i % m) * n + i] = 1;
            if (kiln_tensor_set_f64(kiln_tensor_grad(p[s][j]), x, m * n)) goto fail;
        }
        if (!(opt[s] = kiln_apollo_new(ctx[s], &cfg)) || kiln_optim_step(opt[s])) goto fail;
    }
    for (int j = 0; j < 2; j++) {
        kiln_tensor *m0 = opt[0]->nodes[j]->src[2], *m1 = opt[1]->nodes[j]->src[2];
        int64_t n = kiln_tensor_numel(m0), bad = 0;
        if (kiln_tensor_get_f64(m0, x, n) || kiln_tensor_get_f64(m1, y, n)) goto fail;
        for (int64_t i = 0; i < n; i++) bad += memcmp(&x[i], &y[i], sizeof x[i]) != 0;
        KT_CHECK(bad == 0, "apollo projector on %s: %s: %lld of %lld elements differ from the CPU's", bn,
                 j ? "wide" : "tall", (long long)bad, (long long)n);
    }
    goto done;
fail:
    kt_fail(__FILE__, __LINE__, "apollo projector on %s: %s", bn, kiln_last_error());
done:
    free(x);
    free(y);
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

KT_TEST(backend_ops_apollo) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    kiln_apollo_config full = kiln_apollo_defaults(), mini = kiln_apollo_mini_defaults();
    full.adamw.lr = 0.01f;
    full.adamw.weight_decay = 0.1f;
    full.rank = 4;
    full.update_gap = 2;
    full.seed = 5;
    mini.adamw.lr = 0.01f;
    mini.update_gap = 3;
    for (int i = 0; i < nb; i++) {
        run_apollo_case("apollo_wd", &full, bs[i]);
        run_apollo_case("apollo_mini", &mini, bs[i]);
        run_apollo_projector_bits(bs[i]);
    }
    fflush(stdout);
}

#ifdef KILN_BLAS
/* GaLore and 8-bit GaLore (optim/galore.c), rank 48: W [96, 64] (P on the
 * right; R 4608, 8-bit), V [40, 130] (P on the left, rank clamped to 40;
 * R 5200, 8-bit), S [6, 9] (R 54: 32-bit moments in 8-bit GaLore) and a
 * bias of 4500 (AdamW, or 8-bit AdamW), weight decay, update_gap 2 over
 * OPT_STEPS steps (refreshes on steps 1 and 3, the SVD on the host from
 * the device's G), the same gradients on both sides; in the 8-bit case
 * step 2's gradients of W, V and the bias hold NaN and -Inf. The projections sum
 * in another order than the CPU's GEMM, so the parameters must agree to
 * GALORE_TOL (max |dev - cpu| / max |cpu| per parameter, each step), not
 * bit for bit; every step node on the device, no validation messages.
 * GaLore needs LAPACK: BLAS=0 builds have neither the optimizer nor this. */
#define GALORE_TOL 1e-5
/* 8-bit GaLore: a last-bit difference in a projected moment can move its
 * 8-bit code to the neighbouring one (seen on an AMD EPYC under
 * KILN_SIMD=scalar against lavapipe: one element of W off by 1.07e-5).
 * Such flips are allowed in at most one element in 512, each off by at
 * most lr / 100 (one code's share of an update); every other element
 * within GALORE_TOL. Returns the error of the rest. */
static double galore8_outliers(const double *dev, const double *cpu, int64_t n, double lr, int64_t *flips) {
    double scale = 1e-6, rest = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(cpu[i]) && fabs(cpu[i]) > scale) scale = fabs(cpu[i]);
    int64_t out = 0;
    for (int64_t i = 0; i < n; i++) {
        if (dev[i] == cpu[i]) continue;
        double d = fabs(dev[i] - cpu[i]);
        if (!(d <= lr / 100)) return INFINITY; /* NaN too */
        if (d / scale > GALORE_TOL) out++;
        else if (d / scale > rest) rest = d / scale;
    }
    *flips += out;
    return out * 512 <= n ? rest : INFINITY;
}
static void run_galore_case(const char *name, bool eightbit, kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    const int64_t shp[4][2] = {{96, 64}, {40, 130}, {6, 9}, {4500, 1}};
    kiln_ctx *ctx[2] = {0};
    kiln_tensor *p[2][4];
    kiln_optim *opt[2];
    double *x = malloc(8192 * sizeof(double)), *y = malloc(8192 * sizeof(double)), err = 0;
    int64_t flips = 0, vmsg = kiln_backend_validation_messages(b);
    kiln_galore_config cfg = eightbit ? kiln_galore8bit_defaults() : kiln_galore_defaults();
    cfg.adamw.lr = 0.01f;
    cfg.adamw.weight_decay = 0.05f;
    cfg.rank = 48;
    cfg.update_gap = 2;
    for (int s = 0; s < 2; s++) {
        ctx[s] = kiln_ctx_new();
        if (!ctx[s] || kiln_ctx_set_backend(ctx[s], s ? b : NULL)) goto fail;
        for (int j = 0; j < 4; j++) {
            p[s][j] = kiln_param(ctx[s], (const char *[]){"W", "V", "S", "b"}[j], KILN_F32, j == 3 ? 1 : 2, shp[j]);
            if (!p[s][j] || kiln_tensor_fill_uniform(p[s][j], 3 + (uint64_t)j, -1, 1)) goto fail;
        }
        opt[s] = eightbit ? kiln_galore_adamw8bit_new(ctx[s], &cfg) : kiln_galore_adamw_new(ctx[s], &cfg);
        if (!opt[s]) goto fail;
    }
    for (int k = 0; k < OPT_STEPS; k++) {
        for (int j = 0; j < 4; j++) {
            int64_t n = kiln_tensor_numel(p[0][j]);
            if (kiln_tensor_fill_randn(kiln_tensor_grad(p[0][j]), 70 + 10 * (uint64_t)k + (uint64_t)j, 0, 1) ||
                kiln_tensor_get_f64(kiln_tensor_grad(p[0][j]), x, n))
                goto fail;
            /* 8-bit: NaN/Inf on step 2 (no refresh), skipped in R (and by 8-bit AdamW) */
            for (int64_t i = 5; eightbit && k == 1 && j != 2 && i < n; i += 613) x[i] = i % 2 ? NAN : -INFINITY;
            if (kiln_tensor_set_f64(kiln_tensor_grad(p[0][j]), x, n) ||
                kiln_tensor_set_f64(kiln_tensor_grad(p[1][j]), x, n))
                goto fail;
        }
        if (kiln_optim_step(opt[0]) || kiln_optim_step(opt[1])) goto fail;
        for (int j = 0; j < 4; j++) {
            int64_t n = kiln_tensor_numel(p[0][j]);
            if (kiln_tensor_get_f64(p[0][j], x, n) || kiln_tensor_get_f64(p[1][j], y, n)) goto fail;
            double e = bo_error_values(y, x, n);
            if (eightbit && e > GALORE_TOL) e = galore8_outliers(y, x, n, cfg.adamw.lr, &flips);
            if (!(e <= err)) err = e;
        }
    }
    kiln_graph_stats os = kiln_graph_get_stats(opt[1]->graph);
    vmsg = kiln_backend_validation_messages(b) - vmsg;
    if (!(err <= GALORE_TOL) || os.nodes_fallback || vmsg || getenv("KILN_TEST_VERBOSE"))
        printf("    %-10s %-26s %-4s %-7s params %.1e  tol %.0e  code flips %lld  step nodes %lld dev %lld cpu\n", "galore",
               name, "f32", bn, err, GALORE_TOL, (long long)flips, (long long)os.nodes_on_backend,
               (long long)os.nodes_fallback);
    fflush(stdout);
    KT_CHECK(err <= GALORE_TOL, "galore/%s on %s: parameter error %.3g > %.0e", name, bn, err, GALORE_TOL);
    KT_CHECK(os.nodes_fallback == 0, "galore/%s on %s: %lld step nodes ran on the CPU", name, bn,
             (long long)os.nodes_fallback);
    KT_CHECK(vmsg == 0, "galore/%s on %s: %lld validation messages", name, bn, (long long)vmsg);
    goto done;
fail:
    kt_fail(__FILE__, __LINE__, "galore/%s on %s: %s", name, bn, kiln_last_error());
done:
    free(x);
    free(y);
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

KT_TEST(backend_ops_galore) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++) {
        run_galore_case("galore_adamw", false, bs[i]);
        run_galore_case("galore_adamw8bit", true, bs[i]);
    }
    fflush(stdout);
}
#endif
