/* test_lion.c — Lion against an independent double-precision reference
 * (several steps on random tensors, weight decay, learning-rate changes,
 * f32 and f64, both state and parameters), sign(0) = 0, NaN and infinite
 * gradients, the defaults, state bytes, config errors, the threaded path,
 * and the Vulkan kernel against the CPU's bits on the same values. */
#include "kt.h"
#include "optim_threaded.h"
#include "../optim/optim_impl.h"

#include <stdlib.h>

#define NA 60 /* parameter a: [6, 10] */
#define NB 7  /* parameter b: [7] */
#define STEPS 6
#define MARGIN 1e-3 /* the smallest |c| the random test lets through, zero aside */

/* One lion-pytorch step on n doubles. */
static void lion_ref(double *p, double *m, const double *g, int n, const kiln_lion_config *c, double lr) {
    double b1 = c->beta1, b2 = c->beta2, wd = c->weight_decay;
    for (int i = 0; i < n; i++) {
        p[i] *= 1 - lr * wd;
        double u = b1 * m[i] + (1 - b1) * g[i];
        p[i] -= lr * (double)((u > 0) - (u < 0));
        m[i] = b2 * m[i] + (1 - b2) * g[i];
    }
}

/* Random gradients for step k: elements i % 9 == 4 are exactly 0 on the
 * first two steps (with m 0, c is exactly 0 there: sign(0) = 0 must leave
 * p only decayed); every other element is moved away from c = 0 by more
 * than MARGIN, where an error of the kernel's f32 rounding could flip the
 * sign (the reference's m is the exact one, the kernel's is rounded). */
static void make_grad(kiln_tensor *t, double *g, const double *m, int n, int k, double b1, uint64_t seed) {
    KT_OK(kiln_tensor_fill_randn(t, seed + 100 * (uint64_t)k, 0.0, 1.0));
    KT_OK(kiln_tensor_get_f64(t, g, n));
    for (int i = 0; i < n; i++) {
        if (k < 2 && i % 9 == 4) {
            g[i] = 0;
            continue;
        }
        double c = b1 * m[i] + (1 - b1) * g[i];
        if (fabs(c) < 2 * MARGIN) g[i] += (c >= 0 ? 4 : -4) * MARGIN / (1 - b1);
    }
    KT_OK(kiln_tensor_set_f64(t, g, n));
    KT_OK(kiln_tensor_get_f64(t, g, n)); /* as the tensor holds them */
    for (int i = 0; i < n; i++) {
        double c = b1 * m[i] + (1 - b1) * g[i];
        KT_REQUIRE(c == 0 || fabs(c) >= MARGIN, "step %d: c[%d] = %g, too near 0", k, i, c);
    }
}

/* Parameters a and b of dtype dt, STEPS steps with lrs[k] set before step
 * k (lrs NULL: cfg's lr), p and m compared with the reference each step:
 * relative 1e-6 (f32) / 1e-13 (f64), with as much absolute slack. */
static void check_lion(const char *what, kiln_dtype dt, kiln_lion_config cfg, const float *lrs) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_param(ctx, "a", dt, 2, (int64_t[]){6, 10}), *b = kiln_param(ctx, "b", dt, 1, (int64_t[]){NB});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    KT_OK(kiln_tensor_fill_uniform(a, 1, -1.0, 1.0));
    KT_OK(kiln_tensor_fill_uniform(b, 2, -1.0, 1.0));
    kiln_tensor *ps[2] = {a, b};
    const int ns[2] = {NA, NB};
    double p[2][NA], m[2][NA] = {{0}}, g[NA], got[NA];
    for (int j = 0; j < 2; j++) KT_OK(kiln_tensor_get_f64(ps[j], p[j], ns[j]));
    kiln_optim *opt = kiln_lion_new(ctx, &cfg);
    KT_NOTNULL(opt);
    double tol = dt == KILN_F32 ? 1e-6 : 1e-13;
    for (int k = 0; k < STEPS; k++) {
        if (lrs) KT_OK(kiln_optim_set_lr(opt, lrs[k]));
        double lr = kiln_optim_lr(opt);
        for (int j = 0; j < 2; j++) {
            make_grad(kiln_tensor_grad(ps[j]), g, m[j], ns[j], k, cfg.beta1, 7 + (uint64_t)j);
            lion_ref(p[j], m[j], g, ns[j], &cfg, lr);
        }
        KT_OK(kiln_optim_step(opt));
        for (int j = 0; j < 2; j++) {
            int64_t worst;
            KT_OK(kiln_tensor_get_f64(ps[j], got, ns[j]));
            double e = kt_rel_err(got, p[j], ns[j], tol, tol, &worst);
            KT_CHECK(e <= 1, "%s %s step %d: p%d[%lld] = %.10g, reference %.10g", what, kiln_dtype_name(dt), k, j,
                     (long long)worst, got[worst], p[j][worst]);
            KT_OK(kiln_tensor_get_f64(opt->nodes[j]->src[2], got, ns[j]));
            e = kt_rel_err(got, m[j], ns[j], tol, tol, &worst);
            KT_CHECK(e <= 1, "%s %s step %d: m%d[%lld] = %.10g, reference %.10g", what, kiln_dtype_name(dt), k, j,
                     (long long)worst, got[worst], m[j][worst]);
        }
        KT_CHECK(kiln_optim_steps(opt) == k + 1, "%s: %lld steps", what, (long long)kiln_optim_steps(opt));
    }
    kiln_ctx_free(ctx);
}

static void check_both(const char *what, kiln_lion_config cfg, const float *lrs) {
    check_lion(what, KILN_F32, cfg, lrs);
    check_lion(what, KILN_F64, cfg, lrs);
}

KT_TEST(lion_reference) {
    check_both("plain", (kiln_lion_config){.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f}, NULL);
}

KT_TEST(lion_reference_weight_decay) {
    check_both("weight decay", (kiln_lion_config){.lr = 0.02f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.5f},
               NULL);
}

KT_TEST(lion_reference_lr_change) {
    const float lrs[STEPS] = {0.03f, 0.01f, 0.0f, 0.05f, 0.002f, 0.02f};
    check_both("lr change", (kiln_lion_config){.lr = 0.1f, .beta1 = 0.8f, .beta2 = 0.95f, .weight_decay = 0.1f}, lrs);
}

KT_TEST(lion_reference_betas_edges) {
    /* beta1 0: the sign of the gradient; beta2 1: m never moves from 0 */
    check_both("betas 0 and 1", (kiln_lion_config){.lr = 0.01f, .beta1 = 0.0f, .beta2 = 1.0f, .weight_decay = 0.2f},
               NULL);
}

KT_TEST(lion_defaults) {
    kiln_lion_config d = kiln_lion_defaults();
    KT_CHECK(d.lr == 1e-4f && d.beta1 == 0.9f && d.beta2 == 0.99f && d.weight_decay == 0,
             "Lion defaults differ from lion-pytorch's");
    /* cfg NULL means the defaults: the first step moves p by -lr sign(g)
     * (m starts at 0), and a zero gradient not at all */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F64, 1, (int64_t[]){5});
    KT_NOTNULL(p);
    KT_OK(kiln_tensor_fill(p, 2.0));
    KT_OK(kiln_tensor_set_f64(kiln_tensor_grad(p), (double[]){1, -1, 3e-30, -0.5, 0}, 5));
    kiln_optim *opt = kiln_lion_new(ctx, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_lr(opt) == 1e-4f, "lr %g", (double)kiln_optim_lr(opt));
    KT_OK(kiln_optim_step(opt));
    double got[5], lr = 1e-4f, sgn[5] = {1, -1, 1, -1, 0};
    KT_OK(kiln_tensor_get_f64(p, got, 5));
    for (int i = 0; i < 5; i++)
        KT_CHECK(got[i] == 2.0 - lr * sgn[i], "p[%d] = %.17g, want %.17g", i, got[i], 2.0 - lr * sgn[i]);
    kiln_ctx_free(ctx);
}

/* 32-bit state: one momentum element per parameter element, of the
 * parameter's dtype (4 bytes for f32). */
KT_TEST(lion_state_bytes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_param(ctx, "a", KILN_F32, 2, (int64_t[]){6, 10});
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){NB});
    kiln_tensor *d = kiln_param(ctx, "d", KILN_F64, 1, (int64_t[]){3});
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    KT_NOTNULL(d);
    kiln_optim *opt = kiln_lion_new_for(ctx, (kiln_tensor *[]){a, b}, 2, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_state_bytes(opt) == 4 * (NA + NB), "state %zu bytes, want %d", kiln_optim_state_bytes(opt),
             4 * (NA + NB));
    opt = kiln_lion_new_for(ctx, &d, 1, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_state_bytes(opt) == 8 * 3, "f64 state %zu bytes, want 24", kiln_optim_state_bytes(opt));
    kiln_ctx_free(ctx);
}

/* Non-finite gradients are not special-cased (optim/lion.c): NaN gives
 * c NaN and sign 0 (torch.sign's), so p is only decayed, and m stays NaN;
 * +-inf steps by lr and makes m infinite; an exact c = 0 does not step.
 * Run on the CPU and, where there
 * is one, on the Vulkan device, which must give the same bits. */
static void check_nonfinite(kiln_backend *be) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 1, (int64_t[]){4});
    KT_NOTNULL(p);
    KT_OK(kiln_tensor_fill(p, 1.0));
    kiln_optim *opt = kiln_lion_new(ctx, &(kiln_lion_config){.lr = 0.125f, .beta1 = 0.5f, .beta2 = 0.5f,
                                                            .weight_decay = 0.5f});
    KT_NOTNULL(opt);
    const float decay = 1.0f - 0.125f * 0.5f;
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(p), (float[]){NAN, INFINITY, -INFINITY, 1}, 4));
    KT_OK(kiln_optim_step(opt));
    float got[4], m[4];
    const float want1[4] = {decay, decay - 0.125f, decay + 0.125f, decay - 0.125f};
    KT_OK(kiln_tensor_get_f32(p, got, 4));
    KT_OK(kiln_tensor_get_f32(opt->nodes[0]->src[2], m, 4));
    for (int i = 0; i < 4; i++)
        KT_CHECK(got[i] == want1[i], "%s step 1: p[%d] = %.9g, want %.9g", kiln_backend_name(be), i, got[i],
                 want1[i]);
    KT_CHECK(isnan(m[0]) && m[1] == INFINITY && m[2] == -INFINITY && m[3] == 0.5f, "%s: m = %g %g %g %g",
             kiln_backend_name(be), m[0], m[1], m[2], m[3]);
    /* p[3]: m 0.5 and g -0.5 make c exactly 0: decayed only */
    KT_OK(kiln_tensor_set_f32(kiln_tensor_grad(p), (float[]){1, -1, 1, -0.5f}, 4));
    KT_OK(kiln_optim_step(opt));
    const float want2[4] = {want1[0] * decay, want1[1] * decay - 0.125f, want1[2] * decay + 0.125f, want1[3] * decay};
    KT_OK(kiln_tensor_get_f32(p, got, 4));
    for (int i = 0; i < 4; i++)
        KT_CHECK(got[i] == want2[i], "%s step 2: p[%d] = %.9g, want %.9g", kiln_backend_name(be), i, got[i],
                 want2[i]);
    kiln_graph_stats os = kiln_graph_get_stats(opt->graph);
    KT_CHECK(os.nodes_fallback == 0, "%s: %lld step nodes ran on the CPU", kiln_backend_name(be),
             (long long)os.nodes_fallback);
    kiln_ctx_free(ctx);
}

KT_TEST(lion_nonfinite_gradients) {
    check_nonfinite(NULL);
    kiln_backend *vk = kiln_backend_get("vulkan");
    if (vk) check_nonfinite(vk);
}

#ifdef KILN_VULKAN /* a device test: in the builds that have the backend */
/* The Vulkan kernel gives the CPU kernel's bits over several steps with lr
 * and weight decay, on a parameter of odd size (a partial workgroup). */
KT_TEST(lion_vulkan_matches_cpu_bits) {
    kiln_backend *vk = kiln_backend_get("vulkan");
    if (!vk) kt_skip("no Vulkan device");
    enum { N = 1000 };
    kiln_ctx *ctx[2];
    kiln_tensor *p[2];
    kiln_optim *opt[2];
    for (int s = 0; s < 2; s++) {
        ctx[s] = kiln_ctx_new();
        KT_OK(kiln_ctx_set_backend(ctx[s], s ? vk : NULL));
        p[s] = kiln_param(ctx[s], "p", KILN_F32, 1, (int64_t[]){N});
        KT_NOTNULL(p[s]);
        KT_OK(kiln_tensor_fill_uniform(p[s], 3, -1.0, 1.0));
        opt[s] = kiln_lion_new(ctx[s], &(kiln_lion_config){.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f,
                                                          .weight_decay = 0.3f});
        KT_NOTNULL(opt[s]);
    }
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    for (int k = 0; k < 5; k++) {
        for (int s = 0; s < 2; s++) {
            KT_OK(kiln_optim_set_lr(opt[s], 0.01f / (float)(k + 1)));
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(p[s]), 20 + (uint64_t)k, 0.0, 1.0));
            KT_OK(kiln_optim_step(opt[s]));
        }
        KT_OK(kiln_tensor_get_f32(p[0], a, N));
        KT_OK(kiln_tensor_get_f32(p[1], b, N));
        for (int i = 0; i < N; i++)
            KT_REQUIRE(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "step %d: p[%d] cpu %.9g, vulkan %.9g", k, i, a[i],
                       b[i]);
        KT_OK(kiln_tensor_get_f32(opt[0]->nodes[0]->src[2], a, N));
        KT_OK(kiln_tensor_get_f32(opt[1]->nodes[0]->src[2], b, N));
        for (int i = 0; i < N; i++)
            KT_REQUIRE(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "step %d: m[%d] cpu %.9g, vulkan %.9g", k, i, a[i],
                       b[i]);
    }
    kiln_graph_stats os = kiln_graph_get_stats(opt[1]->graph);
    KT_CHECK(os.nodes_fallback == 0 && os.nodes_on_backend > 0, "step nodes: %lld on the device, %lld on the CPU",
             (long long)os.nodes_on_backend, (long long)os.nodes_fallback);
    free(a);
    free(b);
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}
#endif

static kiln_optim *lion_wd(kiln_ctx *ctx) {
    return kiln_lion_new(ctx, &(kiln_lion_config){.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f});
}
KT_TEST(lion_threaded_matches_small) { ot_threaded_matches_small(lion_wd); }

static kiln_lion_config with(float lr, float b1, float b2, float wd) {
    return (kiln_lion_config){.lr = lr, .beta1 = b1, .beta2 = b2, .weight_decay = wd};
}

KT_TEST(lion_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_EXPECT_ERR(kiln_lion_new(ctx, NULL), KILN_ERR_ARG, "kiln_lion_new: no parameters");
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *h = kiln_param(ctx, "h", KILN_F16, 1, (int64_t[]){3});
    kiln_tensor *leaf = kiln_new_1d(ctx, KILN_F32, 3);
    KT_NOTNULL(h);
    KT_NOTNULL(leaf);
    KT_EXPECT_ERR(kiln_lion_new(NULL, NULL), KILN_ERR_ARG, "kiln_lion_new: ctx is NULL");
    kiln_lion_config c;
    c = with(-1e-4f, 0.9f, 0.99f, 0);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "kiln_lion_new_for: invalid learning rate: -0.0001");
    c = with(NAN, 0.9f, 0.99f, 0);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "kiln_lion_new_for: invalid learning rate");
    c = with(INFINITY, 0.9f, 0.99f, 0);
    KT_EXPECT_ERR(kiln_lion_new(ctx, &c), KILN_ERR_ARG, "kiln_lion_new: invalid learning rate: inf");
    c = with(1e-4f, 1.5f, 0.99f, 0);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 0: 1.5");
    c = with(1e-4f, -0.1f, 0.99f, 0);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 0: -0.1");
    c = with(1e-4f, 0.9f, 1.01f, 0);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 1: 1.01");
    c = with(1e-4f, 0.9f, NAN, 0);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid beta parameter at index 1");
    c = with(1e-4f, 0.9f, 0.99f, -0.01f);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "kiln_lion_new_for: invalid weight_decay value");
    c = with(1e-4f, 0.9f, 0.99f, INFINITY);
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &p, 1, &c), KILN_ERR_ARG, "invalid weight_decay value: inf");
    /* all parameters of ctx include the f16 one */
    KT_EXPECT_ERR(kiln_lion_new(ctx, NULL), KILN_ERR_DTYPE, "kiln_lion_new: parameter 1 'h' is f16");
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, &leaf, 1, NULL), KILN_ERR_ARG, "does not require grad");
    KT_EXPECT_ERR(kiln_lion_new_for(ctx, ((kiln_tensor *[]){p, p}), 2, NULL), KILN_ERR_ARG, "'p' appears twice");
    /* edge values accepted: lr 0, betas 0 and 1 */
    c = with(0, 0, 1, 0);
    kiln_clear_error();
    KT_CHECK(kiln_lion_new_for(ctx, &p, 1, &c) != NULL, "lr 0, betas 0 and 1 refused: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}
