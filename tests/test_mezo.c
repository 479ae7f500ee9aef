/* test_mezo.c — MeZO (kiln_mezo_*): one step against a plain double
 * re-implementation of Algorithm 1 (f32 and f64 parameters, weight decay),
 * the perturbations and the restore bit for bit against the reference's
 * f32 arithmetic, a regression whose loss falls, seeds and resumes that
 * reproduce bit for bit, no state and no gradients needed, LoRA adapters
 * of a tiny llama (base untouched), order and config errors. */
#include "kt.h"

#include "llama.h"
#include "lora.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NA 60 /* parameter a: [6, 10] */
#define NB 7  /* parameter b: [7] */

/* The test's loss: 0.5 sum_i w_i (p_i - t_i)^2 over a then b, in double,
 * read from the parameters as they are. */
typedef struct quad {
    kiln_tensor *p[2];
    int calls;
} quad;

static double quad_at(const double *x, int i) {
    double w = 0.5 + (i % 5) * 0.25, t = sin(0.7 * i);
    return 0.5 * w * (x[i] - t) * (x[i] - t);
}

static kiln_status quad_loss(void *user, double *loss) {
    quad *q = user;
    double x[NA + NB];
    kiln_status s = kiln_tensor_get_f64(q->p[0], x, NA);
    if (!s) s = kiln_tensor_get_f64(q->p[1], x + NA, NB);
    *loss = 0;
    for (int i = 0; i < NA + NB; i++) *loss += quad_at(x, i);
    q->calls++;
    return s;
}

static kiln_ctx *two_params(kiln_dtype dt, kiln_tensor **a, kiln_tensor **b) {
    kiln_ctx *ctx = kiln_ctx_new();
    *a = kiln_param(ctx, "a", dt, 2, (int64_t[]){6, 10});
    *b = kiln_param(ctx, "b", dt, 1, (int64_t[]){NB});
    if (!*a || !*b || kiln_tensor_fill_uniform(*a, 1, -1, 1) || kiln_tensor_fill_uniform(*b, 2, -1, 1)) return NULL;
    return ctx;
}

/* z of parameter i at step t as the header defines it, in double. */
static void noise(kiln_ctx *ctx, const kiln_mezo_config *c, int64_t t, int i, kiln_dtype dt, int n, double *z) {
    kiln_tensor *zt = kiln_tensor_new(ctx, dt, 1, (int64_t[]){n});
    kiln_tensor_fill_randn(zt, kiln_mezo_noise_seed(c->seed, t, i), 0, 1);
    kiln_tensor_get_f64(zt, z, n);
}

/* Steps of Algorithm 1 in double from x (a then b), z as kiln draws it. */
static void reference(kiln_ctx *ctx, const kiln_mezo_config *c, kiln_dtype dt, int steps, double *x) {
    double eps = c->eps, lr = c->lr, wd = c->weight_decay, z[NA + NB], y[NA + NB];
    for (int t = 0; t < steps; t++) {
        noise(ctx, c, t, 0, dt, NA, z), noise(ctx, c, t, 1, dt, NB, z + NA);
        double lp = 0, lm = 0;
        for (int i = 0; i < NA + NB; i++) y[i] = x[i] + eps * z[i];
        for (int i = 0; i < NA + NB; i++) lp += quad_at(y, i);
        for (int i = 0; i < NA + NB; i++) y[i] = x[i] - eps * z[i];
        for (int i = 0; i < NA + NB; i++) lm += quad_at(y, i);
        double g = (lp - lm) / (2 * eps);
        for (int i = 0; i < NA + NB; i++) x[i] -= lr * (g * z[i] + wd * x[i]);
    }
}

static void check_reference(kiln_dtype dt, double rtol) {
    kiln_tensor *a, *b;
    kiln_ctx *ctx = two_params(dt, &a, &b);
    KT_NOTNULL(ctx);
    kiln_mezo_config c = {.lr = 0.05f, .eps = 1e-3f, .weight_decay = 0.1f, .seed = 11};
    kiln_optim *opt = kiln_mezo_new(ctx, NULL, 0, &c);
    KT_NOTNULL(opt);
    double x[NA + NB], got[NA + NB], x0[NA + NB];
    KT_OK(kiln_tensor_get_f64(a, x, NA));
    KT_OK(kiln_tensor_get_f64(b, x + NA, NB));
    memcpy(x0, x, sizeof x);
    quad q = {{a, b}, 0};
    for (int t = 0; t < 3; t++) KT_OK(kiln_mezo_step(opt, quad_loss, &q));
    KT_CHECK(q.calls == 6 && kiln_optim_steps(opt) == 3, "%d forwards, %lld steps", q.calls,
             (long long)kiln_optim_steps(opt));
    reference(ctx, &c, dt, 3, x);
    KT_OK(kiln_tensor_get_f64(a, got, NA));
    KT_OK(kiln_tensor_get_f64(b, got + NA, NB));
    /* compare the moves, which the update makes large (lr g z ~ 1e-2) */
    double dg[NA + NB], dx[NA + NB];
    for (int i = 0; i < NA + NB; i++) dg[i] = got[i] - x0[i], dx[i] = x[i] - x0[i];
    int64_t w = 0;
    double e = kt_rel_err(dg, dx, NA + NB, rtol, rtol, &w);
    KT_CHECK(e <= 1, "%s: element %lld moved %.9g, the reference %.9g", kiln_dtype_name(dt), (long long)w, dg[w],
             dx[w]);
    KT_CHECK(fabs(dx[w]) > 1e-3, "the steps hardly moved the parameters (%g)", dx[w]);
    kiln_ctx_free(ctx);
}

/* f32: the perturbed parameters carry f32 rounding (~1e-7) into losses
 * whose difference is ~eps: g to about 1e-4 relative. */
KT_TEST(mezo_steps_match_a_double_reference_f32) { check_reference(KILN_F32, 2e-4); }
KT_TEST(mezo_steps_match_a_double_reference_f64) { check_reference(KILN_F64, 1e-9); }

/* After plus, minus and an update with lr 0, every element is the
 * reference's f32 arithmetic: d = z * eps, ((p + d) + (-2 z) * eps) + d. */
KT_TEST(mezo_perturbations_restore_as_the_reference) {
    kiln_tensor *a, *b;
    kiln_ctx *ctx = two_params(KILN_F32, &a, &b);
    KT_NOTNULL(ctx);
    /* a wide range of magnitudes, so that the three roundings show */
    float p0[NA], z[NA], p[NA];
    for (int i = 0; i < NA; i++) p0[i] = (float)(sin(i) * pow(10, i % 7 - 3));
    KT_OK(kiln_tensor_set_f32(a, p0, NA));
    kiln_mezo_config c = {.lr = 0, .eps = 1e-3f, .seed = 5};
    kiln_optim *opt = kiln_mezo_new(ctx, (kiln_tensor *[]){a, b}, 2, &c);
    KT_NOTNULL(opt);
    kiln_tensor *zt = kiln_tensor_new(ctx, KILN_F32, 1, (int64_t[]){NA});
    KT_OK(kiln_tensor_fill_randn(zt, kiln_mezo_noise_seed(5, 0, 0), 0, 1));
    KT_OK(kiln_tensor_get_f32(zt, z, NA));
    float want[NA];
    KT_OK(kiln_mezo_plus(opt));
    KT_OK(kiln_tensor_get_f32(a, p, NA));
    for (int i = 0; i < NA; i++) want[i] = p0[i] + z[i] * c.eps;
    KT_CHECK(!memcmp(p, want, sizeof p), "theta + eps z differs from f32's p + z * eps");
    KT_OK(kiln_mezo_minus(opt));
    KT_OK(kiln_tensor_get_f32(a, p, NA));
    for (int i = 0; i < NA; i++) want[i] = want[i] + (-2.0f * z[i]) * c.eps;
    KT_CHECK(!memcmp(p, want, sizeof p), "theta - 2 eps z differs from f32's");
    KT_OK(kiln_mezo_update(opt, 1.0, 1.0));
    KT_OK(kiln_tensor_get_f32(a, p, NA));
    int moved = 0;
    for (int i = 0; i < NA; i++) {
        want[i] = want[i] + z[i] * c.eps;
        moved += p[i] != p0[i];
        KT_CHECK(fabsf(p[i] - p0[i]) <= 4e-10f + 3e-7f * fabsf(p0[i]), "element %d: %.9g restored to %.9g", i,
                 (double)p0[i], (double)p[i]);
    }
    KT_CHECK(!memcmp(p, want, sizeof p), "the restore differs from f32's three additions");
    /* the f32 round trip is not exact on these values: the check above is
     * the reference's, not the originals' */
    KT_CHECK(moved > 0, "no element rounded: the test's values are too tame");
    kiln_ctx_free(ctx);
}

/* y = X w_true, w learned from 0 by MeZO on the MSE of a forward graph. */
KT_TEST(mezo_lowers_a_regression_loss) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){8, 1});
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){32, 8});
    kiln_tensor *wt = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){8, 1});
    KT_REQUIRE(w && x && wt, "%s", kiln_last_error());
    KT_OK(kiln_tensor_fill_randn(x, 1, 0, 1));
    KT_OK(kiln_tensor_fill_randn(wt, 2, 0, 1));
    kiln_graph *gy = kiln_graph_new(ctx), *g = kiln_graph_new(ctx);
    kiln_tensor *y = kiln_matmul(ctx, x, wt);
    KT_OK(kiln_graph_add(gy, y));
    KT_OK(kiln_graph_compute(gy));
    kiln_tensor *loss = kiln_mse(ctx, kiln_matmul(ctx, x, w), y);
    KT_OK(kiln_graph_add(g, loss));
    kiln_mezo_config c = {.lr = 2e-2f, .eps = 1e-3f, .seed = 3};
    kiln_optim *opt = kiln_mezo_new(ctx, &w, 1, &c);
    KT_NOTNULL(opt);
    KT_OK(kiln_graph_compute(g));
    double first = kiln_tensor_item(loss);
    for (int s = 0; s < 200; s++) {
        KT_OK(kiln_mezo_plus(opt));
        KT_OK(kiln_graph_compute(g));
        double lp = kiln_tensor_item(loss);
        KT_OK(kiln_mezo_minus(opt));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_mezo_update(opt, lp, kiln_tensor_item(loss)));
    }
    KT_OK(kiln_graph_compute(g));
    double last = kiln_tensor_item(loss);
    KT_CHECK(last < 0.1 * first, "loss %g -> %g after 200 steps", first, last);
    kiln_ctx_free(ctx);
}

/* Steps 0..n of a fresh pair of parameters with seed; the final bytes. */
static bool run_steps(uint64_t seed, int n, const char *save, const char *load, float *out) {
    kiln_tensor *a, *b;
    kiln_ctx *ctx = two_params(KILN_F32, &a, &b);
    kiln_mezo_config c = {.lr = 0.05f, .eps = 1e-3f, .weight_decay = 0.01f, .seed = seed};
    kiln_optim *opt = ctx ? kiln_mezo_new(ctx, NULL, 0, &c) : NULL;
    quad q = {{a, b}, 0};
    bool ok = opt && (!load || !kiln_checkpoint_load(opt, load));
    for (int s = 0; ok && s < n; s++) ok = !kiln_mezo_step(opt, quad_loss, &q);
    ok = ok && (!save || !kiln_checkpoint_save(opt, save));
    ok = ok && !kiln_tensor_get_f32(a, out, NA) && !kiln_tensor_get_f32(b, out + NA, NB);
    kiln_ctx_free(ctx);
    return ok;
}

KT_TEST(mezo_seeds_and_resumes_reproduce_bit_for_bit) {
    float one[NA + NB], two[NA + NB], other[NA + NB], resumed[NA + NB], half[NA + NB];
    KT_REQUIRE(run_steps(9, 4, NULL, NULL, one) && run_steps(9, 4, NULL, NULL, two), "%s", kiln_last_error());
    KT_CHECK(!memcmp(one, two, sizeof one), "the same seed gave other bits");
    KT_REQUIRE(run_steps(10, 4, NULL, NULL, other), "%s", kiln_last_error());
    KT_CHECK(memcmp(one, other, sizeof one), "another seed gave the same bits");
    char path[] = "/tmp/kiln_mezo_XXXXXX";
    int fd = mkstemp(path);
    KT_REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    bool ok = run_steps(9, 2, path, NULL, half) && run_steps(9, 2, NULL, path, resumed);
    unlink(path);
    KT_REQUIRE(ok, "%s", kiln_last_error());
    KT_CHECK(!memcmp(one, resumed, sizeof one), "2 steps, saved, loaded and 2 more differ from 4 steps");
}

KT_TEST(mezo_keeps_no_state_and_needs_no_gradients) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = kiln_tensor_new(ctx, KILN_F32, 1, (int64_t[]){1000});
    KT_NOTNULL(p);
    KT_OK(kiln_tensor_fill(p, 1));
    KT_CHECK(!kiln_tensor_grad(p), "a plain leaf has a gradient");
    kiln_optim *opt = kiln_mezo_new(ctx, &p, 1, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_state_bytes(opt) == 0, "%zu bytes of state", kiln_optim_state_bytes(opt));
    KT_CHECK(isnan(kiln_mezo_projected_grad(opt)), "a projected gradient before any step");
    KT_OK(kiln_mezo_plus(opt));
    KT_OK(kiln_mezo_minus(opt));
    KT_OK(kiln_mezo_update(opt, 3.0, 1.0));
    KT_CHECK(kiln_mezo_projected_grad(opt) == (float)(2.0 / (2.0 * (double)1e-3f)), "g = %g, want (3 - 1) / 2e-3",
             (double)kiln_mezo_projected_grad(opt));
    KT_CHECK(kiln_optim_state_bytes(opt) == 0, "%zu bytes of state after a step", kiln_optim_state_bytes(opt));
    kiln_ctx_free(ctx);
}

static kiln_status failing_loss(void *user, double *loss) {
    int *calls = user;
    *loss = 0;
    return ++*calls == 2 ? kiln_tensor_fill(NULL, 0) : KILN_OK; /* any kiln error */
}

KT_TEST(mezo_errors_restore_and_name_the_call) {
    kiln_tensor *a, *b;
    kiln_ctx *ctx = two_params(KILN_F32, &a, &b);
    KT_NOTNULL(ctx);
    KT_EXPECT_ERR(kiln_mezo_new(ctx, NULL, 0, &(kiln_mezo_config){.lr = 1, .eps = 0}), KILN_ERR_ARG, "invalid eps: 0");
    KT_EXPECT_ERR(kiln_mezo_new(ctx, NULL, 0, &(kiln_mezo_config){.lr = -1, .eps = 1}), KILN_ERR_ARG,
                  "invalid learning rate: -1");
    KT_EXPECT_ERR(kiln_mezo_new(ctx, NULL, 0, &(kiln_mezo_config){.eps = 1, .weight_decay = NAN}), KILN_ERR_ARG,
                  "invalid weight_decay");
    kiln_optim *opt = kiln_mezo_new(ctx, NULL, 0, NULL);
    KT_NOTNULL(opt);
    float before[NA], after[NA];
    KT_OK(kiln_tensor_get_f32(a, before, NA));
    KT_CHECK(kiln_mezo_minus(opt) == KILN_ERR_STATE &&
                 strstr(kiln_last_error(), "next call of this step is kiln_mezo_plus"),
             "minus first: %s", kiln_last_error());
    KT_CHECK(kiln_mezo_update(opt, 0, 0) == KILN_ERR_STATE, "update first");
    KT_CHECK(kiln_optim_step(opt) == KILN_ERR_ARG && strstr(kiln_last_error(), "kiln_mezo_step"), "kiln_optim_step: %s",
             kiln_last_error());
    KT_CHECK(kiln_optim_set_group(opt, &a, 1, 1, 0) == KILN_ERR_UNSUPPORTED, "groups");
    KT_CHECK(kiln_optim_set_clip_grad_norm(opt, 1) == KILN_ERR_UNSUPPORTED, "clipping");
    /* a forward that fails: its error comes back, the parameters restored */
    int calls = 0;
    KT_CHECK(kiln_mezo_step(opt, failing_loss, &calls) == KILN_ERR_ARG, "a failing forward");
    KT_OK(kiln_tensor_get_f32(a, after, NA));
    for (int i = 0; i < NA; i++)
        KT_CHECK(fabsf(after[i] - before[i]) <= 1e-6f, "element %d: %g after an abandoned step, %g before", i,
                 (double)after[i], (double)before[i]);
    KT_CHECK(kiln_optim_steps(opt) == 0, "an abandoned step counted");
    /* a NaN loss: restored, skipped, counted */
    KT_OK(kiln_mezo_plus(opt));
    KT_OK(kiln_mezo_minus(opt));
    KT_CHECK(kiln_mezo_update(opt, NAN, 1) == KILN_ERR_NUMERIC && strstr(kiln_last_error(), "step skipped"), "NaN: %s",
             kiln_last_error());
    KT_CHECK(kiln_optim_skipped_steps(opt) == 1 && kiln_optim_steps(opt) == 0, "skip not counted");
    KT_OK(kiln_mezo_plus(opt)); /* back in order */
    kiln_ctx_free(ctx);
}

/* MeZO on a tiny llama's LoRA adapters: the adapters move, the loss on a
 * fixed batch falls, every base weight keeps its bytes. */
KT_TEST(mezo_trains_lora_adapters_only) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = llama_defaults();
    c.vocab = 32, c.context = 16, c.layers = 2, c.heads = 2, c.dim = 16, c.hidden = 32;
    llama *m = llama_new(ctx, &c, 4);
    KT_NOTNULL(m);
    void *before[64];
    KT_REQUIRE(m->n_params <= 64, "%d parameters", m->n_params);
    for (int i = 0; i < m->n_params; i++) {
        size_t n = kiln_tensor_nbytes(m->params[i]);
        before[i] = malloc(n);
        memcpy(before[i], kiln_tensor_data(m->params[i]), n);
    }
    lora_config lc = lora_defaults();
    lc.r = 4, lc.targets = (const char *[]){"q_proj", "v_proj"}, lc.n_targets = 2;
    lora *l = lora_attach_llama(m, &lc, 1);
    KT_NOTNULL(l);
    model_graph g;
    KT_OK(llama_eval_graph(m, 2, 8, &g));
    int32_t tok[16];
    for (int i = 0; i < 16; i++) tok[i] = (i * 7 + 3) % 32;
    KT_OK(kiln_tensor_set_i32(g.input, tok, 16));
    for (int i = 0; i < 16; i++) tok[i] = (i * 7 + 10) % 32;
    KT_OK(kiln_tensor_set_i32(g.labels, tok, 16));
    kiln_optim *opt = kiln_mezo_new(ctx, l->params, l->n_params, &(kiln_mezo_config){.lr = 3e-2f, .eps = 1e-3f});
    KT_NOTNULL(opt);
    KT_OK(kiln_graph_compute(g.graph));
    double first = kiln_tensor_item(g.loss);
    for (int s = 0; s < 60; s++) {
        KT_OK(kiln_mezo_plus(opt));
        KT_OK(kiln_graph_compute(g.graph));
        double lp = kiln_tensor_item(g.loss);
        KT_OK(kiln_mezo_minus(opt));
        KT_OK(kiln_graph_compute(g.graph));
        KT_OK(kiln_mezo_update(opt, lp, kiln_tensor_item(g.loss)));
    }
    KT_OK(kiln_graph_compute(g.graph));
    double last = kiln_tensor_item(g.loss);
    KT_CHECK(last < first - 0.02, "loss %g -> %g", first, last);
    for (int i = 0; i < m->n_params; i++) {
        KT_CHECK(!memcmp(before[i], kiln_tensor_data(m->params[i]), kiln_tensor_nbytes(m->params[i])), "'%s' changed",
                 kiln_tensor_name(m->params[i]));
        free(before[i]);
    }
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
}
