/* test_adam.c — Adam and AdamW against torch.optim trajectories
 * (tests/fixtures/adam.txt from scripts/make_optim_fixtures.py: defaults,
 * betas/eps, L2 and decoupled weight decay, AMSGrad, learning-rate changes;
 * f32 and f64), the defaults, state bytes, a threaded step on a large
 * parameter against a small one, and the error paths. */
#include "fixture.h"
#include "kt.h"
#include "optim_threaded.h"
#include "../optim/optim_impl.h"

#include <string.h>

#define FX_PATH "tests/fixtures/adam.txt"

/* Run one fixture case: set p, then per step set lr and the gradient, step
 * and compare p with torch's trajectory. */
static void run_case(const fx_file *f, const char *name) {
    const fx_case *c = fx_find(f, name);
    KT_REQUIRE(c, "%s: no case %s", FX_PATH, name);
    const fx_tensor *p0 = fx_tensor_get(c, "p"), *g = fx_tensor_get(c, "g"), *lrs = fx_tensor_get(c, "lr"),
                    *y = fx_tensor_get(c, "y");
    KT_REQUIRE(p0 && g && lrs && y, "%s: tensors missing", name);
    int steps = (int)fx_param(c, "steps", 0);
    int64_t n = p0->n;
    KT_REQUIRE(steps > 0 && g->n == steps * n && y->n == steps * n && lrs->n == steps, "%s: bad sizes", name);
    kiln_dtype dt = fx_param(c, "f64", 0) != 0 ? KILN_F64 : KILN_F32;
    bool adamw = fx_param(c, "adamw", 0) != 0;
    kiln_adam_config cfg = {
        .lr = (float)fx_param(c, "lr", 0),
        .beta1 = (float)fx_param(c, "beta1", 0),
        .beta2 = (float)fx_param(c, "beta2", 0),
        .eps = (float)fx_param(c, "eps", 0),
        .weight_decay = (float)fx_param(c, "weight_decay", 0),
        .amsgrad = fx_param(c, "amsgrad", 0) != 0,
    };
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = kiln_param(ctx, "p", dt, p0->ndim, p0->shape);
    KT_NOTNULL(p);
    KT_OK(kiln_tensor_set_f64(p, p0->v, n));
    kiln_optim *opt = adamw ? kiln_adamw_new(ctx, &cfg) : kiln_adam_new(ctx, &cfg);
    KT_NOTNULL(opt);
    size_t want_state = (size_t)(cfg.amsgrad ? 3 : 2) * (size_t)n * kiln_dtype_size(dt);
    KT_CHECK(kiln_optim_state_bytes(opt) >= want_state, "%s: state bytes %zu < %zu", name,
             kiln_optim_state_bytes(opt), want_state);
    double *got = malloc((size_t)n * sizeof *got);
    KT_NOTNULL(got);
    /* f32: torch and kiln round differently inside a step (fused vs separate
     * ops); f64 agrees to rounding */
    double atol = dt == KILN_F32 ? 2e-6 : 1e-13, rtol = dt == KILN_F32 ? 2e-5 : 1e-11;
    for (int k = 0; k < steps; k++) {
        KT_OK(kiln_optim_set_lr(opt, (float)lrs->v[k]));
        KT_OK(kiln_tensor_set_f64(kiln_tensor_grad(p), g->v + k * n, n));
        KT_OK(kiln_optim_step(opt));
        KT_OK(kiln_tensor_get_f64(p, got, n));
        int64_t worst;
        double e = kt_rel_err(got, y->v + k * n, n, atol, rtol, &worst);
        KT_CHECK(e <= 1, "%s step %d: p[%lld] = %.10g, torch %.10g", name, k, (long long)worst, got[worst],
                 y->v[k * n + worst]);
    }
    KT_CHECK(kiln_optim_steps(opt) == steps, "%s: %lld steps", name, (long long)kiln_optim_steps(opt));
    free(got);
    kiln_ctx_free(ctx);
}

static void run_both(const char *base) {
    fx_file *f = fx_load(FX_PATH);
    KT_REQUIRE(f, "cannot load %s", FX_PATH);
    char name[64];
    snprintf(name, sizeof name, "%s_f32", base);
    run_case(f, name);
    snprintf(name, sizeof name, "%s_f64", base);
    run_case(f, name);
    fx_free(f);
}

KT_TEST(adam_torch_default) { run_both("adam_default"); }
KT_TEST(adam_torch_options) { run_both("adam_options"); }
KT_TEST(adam_torch_amsgrad) { run_both("adam_amsgrad"); }
KT_TEST(adam_torch_beta1_zero) { run_both("adam_beta1_zero"); }
KT_TEST(adam_torch_lr_change) { run_both("adam_lr_change"); }
KT_TEST(adamw_torch_default) { run_both("adamw_default"); }
KT_TEST(adamw_torch_options) { run_both("adamw_options"); }
KT_TEST(adamw_torch_amsgrad) { run_both("adamw_amsgrad"); }
KT_TEST(adamw_torch_lr_change) { run_both("adamw_lr_change"); }
KT_TEST(adamw_torch_no_decay) { run_both("adamw_no_decay"); }

KT_TEST(adam_defaults) {
    kiln_adam_config a = kiln_adam_defaults(), w = kiln_adamw_defaults();
    KT_CHECK(a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f && a.eps == 1e-8f && a.weight_decay == 0 &&
                 !a.amsgrad,
             "Adam defaults differ from torch's");
    KT_CHECK(w.lr == 1e-3f && w.weight_decay == 0.01f && w.beta2 == 0.999f, "AdamW defaults differ from torch's");
    /* cfg NULL means the defaults: one step of AdamW moves every element by
     * lr * sign(g) (bias-corrected first step) after the decay */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F64, 1, (int64_t[]){4});
    KT_NOTNULL(p);
    KT_OK(kiln_tensor_fill(p, 2.0));
    KT_OK(kiln_tensor_set_f64(kiln_tensor_grad(p), (double[]){1, -1, 3, -0.5}, 4));
    kiln_optim *opt = kiln_adamw_new(ctx, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_lr(opt) == 1e-3f, "lr %g", (double)kiln_optim_lr(opt));
    KT_OK(kiln_optim_step(opt));
    double got[4], lr = 1e-3f, decayed = 2.0 * (1.0 - lr * (double)0.01f), sgn[4] = {1, -1, 1, -1};
    KT_OK(kiln_tensor_get_f64(p, got, 4));
    for (int i = 0; i < 4; i++)
        KT_CHECK(fabs(got[i] - (decayed - lr * sgn[i])) < 1e-9, "p[%d] = %.12g, want %.12g", i, got[i],
                 decayed - lr * sgn[i]);
    kiln_ctx_free(ctx);
}

static kiln_optim *adam_amsgrad_wd(kiln_ctx *ctx) {
    kiln_adam_config cfg = kiln_adam_defaults();
    cfg.lr = 0.01f;
    cfg.weight_decay = 0.1f;
    cfg.amsgrad = true;
    return kiln_adam_new(ctx, &cfg);
}
KT_TEST(adam_threaded_matches_small) { ot_threaded_matches_small(adam_amsgrad_wd); }

static kiln_adam_config with(float lr, float b1, float b2, float eps, float wd) {
    return (kiln_adam_config){.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd};
}

KT_TEST(adam_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_EXPECT_ERR(kiln_adam_new(ctx, NULL), KILN_ERR_ARG, "kiln_adam_new: no parameters");
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *h = kiln_param(ctx, "h", KILN_F16, 1, (int64_t[]){3});
    kiln_tensor *leaf = kiln_new_1d(ctx, KILN_F32, 3);
    KT_NOTNULL(h);
    KT_NOTNULL(leaf);
    KT_EXPECT_ERR(kiln_adam_new(NULL, NULL), KILN_ERR_ARG, "kiln_adam_new: ctx is NULL");
    kiln_adam_config c;
    c = with(-1e-3f, 0.9f, 0.999f, 1e-8f, 0);
    KT_EXPECT_ERR(kiln_adam_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "kiln_adam_new_for: invalid learning rate: -0.001");
    c = with(NAN, 0.9f, 0.999f, 1e-8f, 0);
    KT_EXPECT_ERR(kiln_adamw_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "kiln_adamw_new_for: invalid learning rate");
    c = with(1e-3f, 0.9f, 0.999f, -1e-8f, 0);
    KT_EXPECT_ERR(kiln_adam_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid epsilon value");
    c = with(1e-3f, 1.0f, 0.999f, 1e-8f, 0);
    KT_EXPECT_ERR(kiln_adam_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 0: 1");
    c = with(1e-3f, -0.1f, 0.999f, 1e-8f, 0);
    KT_EXPECT_ERR(kiln_adamw_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 0");
    c = with(1e-3f, 0.9f, 1.5f, 1e-8f, 0);
    KT_EXPECT_ERR(kiln_adam_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 1: 1.5");
    c = with(1e-3f, 0.9f, NAN, 1e-8f, 0);
    KT_EXPECT_ERR(kiln_adam_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 1");
    c = with(1e-3f, 0.9f, 0.999f, 1e-8f, -0.01f);
    KT_EXPECT_ERR(kiln_adamw_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "kiln_adamw_new_for: invalid weight_decay value");
    /* all parameters of ctx include the f16 one */
    KT_EXPECT_ERR(kiln_adamw_new(ctx, NULL), KILN_ERR_DTYPE, "kiln_adamw_new: parameter 1 'h' is f16");
    KT_EXPECT_ERR(kiln_adam_new_for(ctx, &leaf, 1, NULL), KILN_ERR_ARG, "does not require grad");
    KT_EXPECT_ERR(kiln_adam_new_for(ctx, ((kiln_tensor *[]){p, p}), 2, NULL), KILN_ERR_ARG, "'p' appears twice");
    /* edge values torch accepts */
    c = with(0, 0, 0, 0, 0);
    kiln_clear_error();
    KT_CHECK(kiln_adam_new_for(ctx, &p, 1, &c) != NULL, "lr, betas, eps 0 refused: %s", kiln_last_error());
    kiln_optim *opt = kiln_adamw_new_for(ctx, &p, 1, NULL);
    KT_NOTNULL(opt);
    kiln_ctx_free(ctx);
}
