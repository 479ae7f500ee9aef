/* test_numerics.c — where kiln's numerics follow PyTorch's, against the
 * fixtures of scripts/make_fixtures.py (numerics.txt): NaN through relu
 * (forward and gradient, every SIMD level, the fused chain, every float
 * dtype), the causal softmax / log_softmax gradient where the mask hides
 * an entry, and how max / min share their gradient among ties. */
#include "test_nn_util.h"

#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/vecmath.h"

#define NUMERICS "tests/fixtures/numerics.txt"

static const char *const X_ONLY[] = {"x", NULL};

/* ---- relu at NaN ---- */

static kiln_tensor *build_relu(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    (void)c;
    return kiln_relu(ctx, in[0]);
}

KT_TEST(numerics_relu_nan_fixture) {
    kiln_cpu_caps saved = *kiln__cpu_caps();
    for (int l = KILN_SIMD_SCALAR; l <= KILN_SIMD_AVX512; l++) {
        if (!kiln__vm_for(l)) continue; /* a level this CPU lacks */
        kiln_cpu_caps c = *kiln__cpu_caps_detected();
        kiln__cpu_caps_limit(&c, (kiln_simd_level)l);
        kiln__cpu_caps_set(&c);
        nnt_fixture(NUMERICS, "relu_nan", X_ONLY, build_relu, KILN_F64, 0, 1e-300);
        nnt_fixture(NUMERICS, "relu_nan", X_ONLY, build_relu, KILN_F32, 0, 1e-300);
    }
    kiln__cpu_caps_set(&saved);
}

/* f16 and bf16 go through their own conversions; a bias add and the relu
 * run as one fused pass (core/fuse.c), which must keep the NaN too. */
KT_TEST(numerics_relu_nan_dtypes_and_fused) {
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    const double x[6] = {NAN, -1.0, 0.0, 2.0, -3.0, NAN}, b[3] = {0.5, -0.5, 0.25};
    for (int i = 0; i < 4; i++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *xt = kiln_new_2d(ctx, dts[i], 2, 3), *bt = kiln_new_1d(ctx, dts[i], 3);
        KT_OK(kiln_tensor_set_f64(xt, x, 6));
        KT_OK(kiln_tensor_set_f64(bt, b, 3));
        kiln_tensor *y = kiln_relu(ctx, kiln_add(ctx, xt, bt));
        double *v = nnt_eval(ctx, y);
        KT_REQUIRE(v, "relu did not compute");
        const double want[6] = {NAN, 0.0, 0.25, 2.5, 0.0, NAN};
        for (int k = 0; k < 6; k++)
            KT_CHECK(isnan(want[k]) ? isnan(v[k]) : v[k] == want[k], "%s: relu(%g + %g) = %g, want %g",
                     kiln_dtype_name(dts[i]), x[k], b[k % 3], v[k], want[k]);
        free(v);
        kiln_ctx_free(ctx);
    }
}

/* ---- causal softmax and log_softmax where the mask hides an entry ---- */

static kiln_tensor *build_causal(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    bool causal = fx_param(c, "causal", 0) != 0;
    return strncmp(c->name, "log_", 4) ? kiln_softmax(ctx, in[0], causal) : kiln_log_softmax(ctx, in[0], causal);
}

KT_TEST(numerics_causal_softmax_gradient_at_masked_entries) {
    const char *cases[] = {"softmax_causal_masked_gy", "softmax_causal_masked_gy_rect", "log_softmax_causal_masked_gy",
                           "log_softmax_causal_masked_gy_rect"};
    for (int i = 0; i < 4; i++) {
        nnt_fixture(NUMERICS, cases[i], X_ONLY, build_causal, KILN_F64, 1e-12, 1e-12);
        nnt_fixture(NUMERICS, cases[i], X_ONLY, build_causal, KILN_F32, 1e-5, 1e-5);
    }
}

/* A row the mask hides wholly (more rows than columns) gives -inf, and
 * its gradient is gy, as at every other masked entry; a visible entry
 * gets gy - exp(y) * (the sum of gy over its whole row), as a non-causal
 * log_softmax of an input holding -inf there. */
KT_TEST(numerics_causal_log_softmax_hidden_row_gradient) {
    const double gyv[6] = {0.5, -2.0, 0.25, 0.75, 1.5, -1.0};
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F64, 3, 2), *gy = kiln_new_2d(ctx, KILN_F64, 3, 2);
    KT_OK(kiln_tensor_fill_uniform(x, 1, -1, 1));
    KT_OK(kiln_tensor_set_f64(gy, gyv, 6));
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    kiln_tensor *y = kiln_log_softmax(ctx, x, true);
    /* d sum(y * gy) / dy = gy, also where y is -inf (the loss is then -inf: not read) */
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, gy));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y)); /* read below */
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    double yv[6], gx[6];
    KT_OK(kiln_tensor_get_f64(y, yv, 6));
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(x), gx, 6));
    /* row 0 sees nothing, row 1 column 0, row 2 both */
    const double want[6] = {gyv[0], gyv[1], gyv[2] - (gyv[2] + gyv[3]), gyv[3],
                            gyv[4] - exp(yv[4]) * (gyv[4] + gyv[5]), gyv[5] - exp(yv[5]) * (gyv[4] + gyv[5])};
    KT_CHECK(yv[0] == -INFINITY && yv[1] == -INFINITY && yv[2] == 0 && yv[3] == -INFINITY,
             "y = %g %g %g %g, want -inf -inf 0 -inf", yv[0], yv[1], yv[2], yv[3]);
    nnt_close("gx", gx, want, 6, 1e-15, 1e-15);
    kiln_ctx_free(ctx);
}

/* ---- max and min: ties share the gradient ---- */

static kiln_tensor *build_extreme(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    int axis = (int)fx_param(c, "axis", -1);
    bool max = !strncmp(c->name, "max", 3);
    if (axis < 0) return max ? kiln_max_all(ctx, in[0]) : kiln_min_all(ctx, in[0]);
    return max ? kiln_max(ctx, in[0], axis, false) : kiln_min(ctx, in[0], axis, false);
}

KT_TEST(numerics_max_min_ties_fixture) {
    const char *cases[] = {"max_ties_axis1", "max_ties_axis0", "max_ties_all", "max_nan_axis1",
                           "min_ties_axis1", "min_ties_axis0", "min_ties_all", "min_nan_axis1"};
    for (int i = 0; i < 8; i++) {
        nnt_fixture(NUMERICS, cases[i], X_ONLY, build_extreme, KILN_F64, 0, 1e-15);
        nnt_fixture(NUMERICS, cases[i], X_ONLY, build_extreme, KILN_F32, 0, 1e-7);
    }
}
