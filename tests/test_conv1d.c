/* test_conv1d.c — kiln_conv1d: values and gradients against PyTorch
 * (strided and dilated, grouped, causal), gradient checks, errors. */
#include "test_nn_util.h"

static kiln_conv1d_params fx_params(const fx_case *c) {
    return (kiln_conv1d_params){.stride = (int)fx_param(c, "stride", 1), .padding = (int)fx_param(c, "padding", 0),
                                .dilation = (int)fx_param(c, "dilation", 1), .groups = (int)fx_param(c, "groups", 1),
                                .causal = fx_param(c, "causal", 0) != 0};
}

static kiln_tensor *build_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    kiln_conv1d_params p = fx_params(c);
    return kiln_conv1d(ctx, in[0], in[1], fx_param(c, "has_b", 0) ? in[2] : NULL, &p);
}

KT_TEST(conv1d_fixture) {
    const char *cases[] = {"conv1d", "conv1d_grouped", "conv1d_causal"};
    const char *inputs[][4] = {{"x", "w", "b", NULL}, {"x", "w", NULL}, {"x", "w", "b", NULL}};
    for (int i = 0; i < 3; i++) {
        nnt_fixture("tests/fixtures/conv1d.txt", cases[i], inputs[i], build_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture("tests/fixtures/conv1d.txt", cases[i], inputs[i], build_fixture, KILN_F32, 1e-5, 1e-4);
    }
}

typedef struct {
    kiln_conv1d_params p;
    bool bias, transpose;
} c1_case;

/* in: x (or its transpose in the last two dims), w [, bias] */
static kiln_tensor *build(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const c1_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], 1, 2) : in[0];
    return kiln_conv1d(ctx, x, in[1], c->bias ? in[2] : NULL, &c->p);
}

KT_TEST(conv1d_grad) {
    const c1_case cases[] = {
        {{.stride = 2, .padding = 1, .dilation = 2}, true, false},
        {{.groups = 2, .padding = 1}, false, true},
        {{.causal = true, .dilation = 3}, true, false},
        {{.causal = true, .stride = 2, .groups = 2}, false, true},
    };
    for (int i = 0; i < 4; i++) {
        const c1_case *c = &cases[i];
        int g = c->p.groups ? c->p.groups : 1;
        gc_input in[3] = {GC_IN(3, 2, 4, 9), GC_IN(3, 4, 4 / g, 3), GC_IN(1, 4)};
        if (c->transpose) in[0].shape[1] = 9, in[0].shape[2] = 4;
        char what[96];
        snprintf(what, sizeof what, "conv1d case %d", i);
        gc_check(what, build, (void *)c, 2 + c->bias, in, (uint64_t)(151 + i));
    }
}

/* causal: output t does not move when input t + 1 does, and has x's length */
KT_TEST(conv1d_causal_sees_no_future) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_3d(ctx, KILN_F32, 1, 2, 8), *w = kiln_new_3d(ctx, KILN_F32, 3, 2, 3);
    KT_NOTNULL(x && w);
    KT_OK(kiln_tensor_fill_uniform(x, 1, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(w, 2, -1, 1));
    kiln_conv1d_params p = {.causal = true, .dilation = 2};
    kiln_tensor *y = kiln_conv1d(ctx, x, w, NULL, &p);
    KT_NOTNULL(y);
    KT_CHECK(kiln_tensor_dim(y, 2) == 8, "length %lld, want 8", (long long)kiln_tensor_dim(y, 2));
    double *before = nnt_eval(ctx, y);
    float *xv = kiln_tensor_data(x);
    xv[5] += 1.0f, xv[8 + 5] -= 1.0f; /* t = 5 in both channels */
    double *after = nnt_eval(ctx, y);
    KT_REQUIRE(before && after, "compute failed");
    for (int o = 0; o < 3; o++)
        for (int t = 0; t <= 5; t++) /* t = 5 sees its own input */
            KT_CHECK((before[o * 8 + t] == after[o * 8 + t]) == (t < 5), "channel %d t %d: %g -> %g", o, t,
                     before[o * 8 + t], after[o * 8 + t]);
    free(before), free(after);
    kiln_ctx_free(ctx);
}

KT_TEST(conv1d_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_3d(ctx, KILN_F32, 2, 4, 9), *w = kiln_new_3d(ctx, KILN_F32, 3, 4, 3);
    kiln_tensor *x4 = kiln_new_4d(ctx, KILN_F32, 2, 4, 1, 9), *wbig = kiln_new_3d(ctx, KILN_F32, 3, 4, 12);
    KT_NOTNULL(x && w && x4 && wbig);
    const char *op = "kiln_conv1d";
    NNT_FAILS(kiln_conv1d(ctx, x4, w, NULL, NULL), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_conv1d(ctx, x, w, NULL, &(kiln_conv1d_params){.stride = -1}), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_conv1d(ctx, x, w, NULL, &(kiln_conv1d_params){.causal = true, .padding = 1}), KILN_ERR_ARG, op);
    NNT_FAILS(kiln_conv1d(ctx, x, w, NULL, &(kiln_conv1d_params){.groups = 3}), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_conv1d(ctx, x, wbig, NULL, NULL), KILN_ERR_SHAPE, op);
    kiln_ctx_free(ctx);
}
