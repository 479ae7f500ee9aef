/* test_half.c — f16 and bf16 arithmetic: kernels written for f32 run on
 * half-precision tensors through widening (backends/cpu/cpu.c), forward and
 * backward, and agree with the same graph in f32 up to the half rounding. */
#include "test_mov_util.h"

/* loss = sum(gelu(x * x^T-ish mix + 1)) over a transposed (strided) view,
 * built in dtype dt; returns the loss and x's gradient as doubles. */
static void run(kiln_dtype dt, double *loss, double *grad) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_param(ctx, "x", dt, 2, (int64_t[]){4, 6});
    kiln_tensor *init = mt_leaf(ctx, KILN_F64, 2, (int64_t[]){4, 6}, 3);
    double v[24];
    KT_OK(kiln_tensor_get_f64(init, v, 24));
    KT_OK(kiln_tensor_set_f64(x, v, 24));
    kiln_tensor *xt = kiln_transpose(ctx, x, 0, 1); /* [6, 4], strided */
    kiln_tensor *y = kiln_gelu(ctx, kiln_add_scalar(ctx, kiln_mul(ctx, xt, xt), 1.0));
    kiln_tensor *l = kiln_sum(ctx, kiln_sub(ctx, y, kiln_sigmoid(ctx, xt)), -1, false);
    KT_REQUIRE(l != NULL, "build: %s", kiln_last_error());
    KT_CHECK(kiln_tensor_dtype(l) == dt, "the loss keeps the dtype");
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, l)); /* l keeps its values after compute */
    KT_OK(kiln_graph_backward(g, kiln_sum_all(ctx, l)));
    KT_OK(kiln_graph_compute(g));
    double ls[6];
    KT_OK(kiln_tensor_get_f64(l, ls, 6));
    *loss = 0;
    for (int i = 0; i < 6; i++) *loss += ls[i];
    KT_CHECK(kiln_tensor_dtype(kiln_tensor_grad(x)) == dt, "the gradient has the parameter's dtype");
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(x), grad, 24));
    kiln_ctx_free(ctx);
}

KT_TEST(half_dtypes_compute_forward_and_backward) {
    double l32, g32[24];
    run(KILN_F32, &l32, g32);
    const kiln_dtype dts[] = {KILN_F16, KILN_BF16};
    const double tol[] = {4e-3, 3e-2}; /* a few roundings of 11- and 8-bit mantissas */
    for (int k = 0; k < 2; k++) {
        double l, g[24];
        run(dts[k], &l, g);
        KT_CHECK(fabs(l - l32) <= tol[k] * (1 + fabs(l32)), "%s loss %g vs f32 %g", kiln_dtype_name(dts[k]), l, l32);
        for (int i = 0; i < 24; i++)
            KT_CHECK(fabs(g[i] - g32[i]) <= tol[k] * (1 + fabs(g32[i])), "%s grad[%d] %g vs f32 %g",
                     kiln_dtype_name(dts[k]), i, g[i], g32[i]);
    }
}

/* A bf16 linear layer trains like PyTorch's: forward and weight gradient
 * in bf16, close to the same layer in f32. */
KT_TEST(half_linear_forward_and_backward) {
    double out[2][15], gw[2][12];
    const kiln_dtype dts[2] = {KILN_F32, KILN_BF16};
    for (int k = 0; k < 2; k++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = mt_leaf(ctx, dts[k], 2, (int64_t[]){5, 4}, 1);
        kiln_tensor *w = kiln_param(ctx, "w", dts[k], 2, (int64_t[]){3, 4}), *b = kiln_param(ctx, "b", dts[k], 1, (int64_t[]){3});
        KT_OK(kiln_tensor_set_f64(w, (double[]){0.5, -0.25, 0.125, 1, -1, 0.75, 0.5, -0.5, 0.25, 0.25, -0.125, 2}, 12));
        KT_OK(kiln_tensor_fill(b, 0.5));
        kiln_tensor *y = kiln_linear(ctx, x, w, b);
        KT_REQUIRE(y != NULL, "%s", kiln_last_error());
        KT_CHECK(kiln_tensor_dtype(y) == dts[k], "linear keeps the dtype");
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, y));
        KT_OK(kiln_graph_backward(g, loss));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_tensor_get_f64(y, out[k], 15));
        KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), gw[k], 12));
        kiln_ctx_free(ctx);
    }
    for (int i = 0; i < 15; i++) KT_CHECK(fabs(out[1][i] - out[0][i]) <= 2e-2 * (1 + fabs(out[0][i])), "y[%d]", i);
    for (int i = 0; i < 12; i++) KT_CHECK(fabs(gw[1][i] - gw[0][i]) <= 3e-2 * (1 + fabs(gw[0][i])), "dw[%d] %g vs %g", i, gw[1][i], gw[0][i]);
}
