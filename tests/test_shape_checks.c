/* test_shape_checks.c — shape arithmetic on numbers a caller gives (a
 * reshape target, pads, repeat counts, slice bounds, a kernel's stride and
 * dilation, shapes that multiply): every sum and product is checked, so
 * each of these ends in an error that names the call, never in a crash or
 * in signed overflow (the sanitizer build runs them too). Huge operands
 * are broadcast views of one element: they take no memory. */
#include "kt.h"

#define BIG ((int64_t)1 << 40)

/* x [1, ..., 1] broadcast to shape: any size, one element of storage. */
static kiln_tensor *huge(kiln_ctx *ctx, int ndim, const int64_t *shape) {
    int64_t ones[KILN_MAX_DIMS] = {1, 1, 1, 1, 1, 1};
    kiln_tensor *one = kiln_tensor_new(ctx, KILN_F32, ndim, ones);
    return one ? kiln_broadcast_to(ctx, one, ndim, shape) : NULL;
}

KT_TEST(shape_reshape_product_overflow) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3);
    /* 2^32 * 2^32 wrapped to 0, then 6 % 0: SIGFPE */
    KT_EXPECT_ERR(kiln_reshape(ctx, x, 3, ((int64_t[]){(int64_t)1 << 32, (int64_t)1 << 32, -1})), KILN_ERR_SHAPE,
                  "kiln_reshape: cannot reshape [2, 3]");
    KT_EXPECT_ERR(kiln_view(ctx, x, 3, ((int64_t[]){INT64_MAX, 2, -1})), KILN_ERR_SHAPE, "kiln_view");
    KT_EXPECT_ERR(kiln_reshape(ctx, x, 2, ((int64_t[]){-1, INT64_MAX})), KILN_ERR_SHAPE, "kiln_reshape");
    kiln_ctx_free(ctx);
}

KT_TEST(shape_pad_repeat_concat_overflow) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3);
    KT_EXPECT_ERR(kiln_pad(ctx, x, ((int64_t[]){0, 0, INT64_MAX, 1}), 0.0), KILN_ERR_SHAPE, "kiln_pad: pads");
    KT_EXPECT_ERR(kiln_pad(ctx, x, ((int64_t[]){INT64_MAX - 1, 0, 0, 0}), 0.0), KILN_ERR_SHAPE, "kiln_pad");
    KT_EXPECT_ERR(kiln_pad(ctx, x, ((int64_t[]){BIG, 0, 0, 0}), 0.0), KILN_ERR_SHAPE, "kiln_pad: shape");
    KT_EXPECT_ERR(kiln_repeat(ctx, x, ((int64_t[]){INT64_MAX, 3})), KILN_ERR_SHAPE, "kiln_repeat");
    KT_EXPECT_ERR(kiln_repeat(ctx, x, ((int64_t[]){BIG, BIG})), KILN_ERR_SHAPE, "kiln_repeat: shape");
    KT_EXPECT_ERR(kiln_repeat(ctx, x, ((int64_t[]){(int64_t)1 << 39, 1})), KILN_ERR_SHAPE, "kiln_repeat: shape");
    kiln_tensor *h = huge(ctx, 1, (int64_t[]){BIG});
    KT_NOTNULL(h);
    KT_EXPECT_ERR(kiln_concat(ctx, ((kiln_tensor *[]){h, h}), 2, 0), KILN_ERR_SHAPE, "kiln_concat: shape");
    kiln_ctx_free(ctx);
}

/* [start:end:step] where end - start + step passes INT64_MAX: element 0 alone. */
KT_TEST(shape_slice_huge_step) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3);
    KT_OK(kiln_tensor_set_f32(x, (const float[]){1, 2, 3, 4, 5, 6}, 6));
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    kiln_tensor *s = kiln_slice(ctx, x, 1, 0, INT64_MAX, INT64_MAX);
    KT_NOTNULL(s);
    KT_CHECK(kiln_tensor_dim(s, 1) == 1, "[0:max:max] has %lld columns, want 1", (long long)kiln_tensor_dim(s, 1));
    kiln_tensor *t = kiln_slice(ctx, x, 1, 1, INT64_MAX, INT64_MAX - 1);
    KT_NOTNULL(t);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_add(ctx, s, t));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    float sv[2], gv[6];
    KT_OK(kiln_tensor_get_f32(s, sv, 2));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(x), gv, 6));
    KT_CHECK(sv[0] == 1 && sv[1] == 4, "x[:, 0:max:max] = %g %g, want 1 4", sv[0], sv[1]);
    KT_CHECK(gv[0] == 1 && gv[1] == 1 && gv[2] == 0 && gv[3] == 1 && gv[4] == 1 && gv[5] == 0,
             "gradient %g %g %g %g %g %g, want 1 1 0 1 1 0", gv[0], gv[1], gv[2], gv[3], gv[4], gv[5]);
    kiln_ctx_free(ctx);
}

/* A dilated kernel, or a transposed output, longer than int64. */
KT_TEST(shape_conv_geometry_overflow) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 1, 1, 5, 5);
    kiln_tensor *w = huge(ctx, 4, (int64_t[]){1, 1, 1, (int64_t)1 << 33});
    KT_NOTNULL(w);
    kiln_conv2d_params p = {.dilation = {1, INT32_MAX}};
    KT_EXPECT_ERR(kiln_conv2d(ctx, x, w, NULL, &p), KILN_ERR_SHAPE, "kiln_conv2d: kernel");
    KT_EXPECT_ERR(kiln_conv_transpose2d(ctx, x, w, NULL, &p), KILN_ERR_SHAPE, "kiln_conv_transpose2d");
    kiln_tensor *xw = huge(ctx, 4, (int64_t[]){1, 1, 1, (int64_t)1 << 34});
    kiln_tensor *w3 = kiln_new_4d(ctx, KILN_F32, 1, 1, 1, 3);
    kiln_conv2d_params s = {.stride = {1, INT32_MAX}};
    KT_EXPECT_ERR(kiln_conv_transpose2d(ctx, xw, w3, NULL, &s), KILN_ERR_SHAPE, "kiln_conv_transpose2d: stride");
    kiln_conv2d_params s2 = {.stride = {1, 1 << 16}}; /* fits int64, not 2^40 elements */
    KT_EXPECT_ERR(kiln_conv_transpose2d(ctx, xw, w3, NULL, &s2), KILN_ERR_SHAPE, "kiln_conv_transpose2d: x");
    /* an output that fits whose columns (C kh kw x N OH OW) do not */
    kiln_tensor *xc = huge(ctx, 4, (int64_t[]){1, (int64_t)1 << 20, 1, (int64_t)1 << 20});
    kiln_tensor *wc = huge(ctx, 4, (int64_t[]){1, (int64_t)1 << 20, 1, 2});
    KT_EXPECT_ERR(kiln_conv2d(ctx, xc, wc, NULL, NULL), KILN_ERR_SHAPE, "kiln_conv2d: x");
    KT_EXPECT_ERR(kiln_avg_pool2d(ctx, huge(ctx, 4, (int64_t[]){1, (int64_t)1 << 28, 64, 64}), 3, 3, 1, 1),
                  KILN_ERR_SHAPE, "kiln_avg_pool2d: x");
    kiln_ctx_free(ctx);
}

/* Results that would hold more than 2^40 elements name the call made. */
KT_TEST(shape_results_too_large_name_the_call) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *col = huge(ctx, 2, (int64_t[]){(int64_t)1 << 30, 1}), *row = huge(ctx, 2, (int64_t[]){1, (int64_t)1 << 30});
    KT_EXPECT_ERR(kiln_add(ctx, col, row), KILN_ERR_SHAPE, "kiln_add: shape [1073741824, 1073741824]");
    KT_EXPECT_ERR(kiln_where(ctx, col, col, row), KILN_ERR_SHAPE, "kiln_where: shape");
    KT_EXPECT_ERR(kiln_matmul(ctx, col, row), KILN_ERR_SHAPE, "kiln_matmul: shape");
    KT_EXPECT_ERR(kiln_broadcast_to(ctx, col, 3, ((int64_t[]){BIG, (int64_t)1 << 30, 1})), KILN_ERR_SHAPE,
                  "kiln_broadcast_to: shape");
    kiln_tensor *idx = kiln_new_1d(ctx, KILN_I32, (int64_t)1 << 20);
    KT_EXPECT_ERR(kiln_one_hot(ctx, idx, (int64_t)1 << 21, KILN_F32), KILN_ERR_SHAPE, "kiln_one_hot: shape");
    KT_EXPECT_ERR(kiln_get_rows(ctx, huge(ctx, 2, (int64_t[]){4, (int64_t)1 << 21}), idx), KILN_ERR_SHAPE,
                  "kiln_get_rows: shape");
    kiln_tensor *q = huge(ctx, 4, (int64_t[]){1, 1, (int64_t)1 << 20, 1});
    kiln_tensor *v = huge(ctx, 4, (int64_t[]){1, 1, 1, (int64_t)1 << 30});
    KT_EXPECT_ERR(kiln_attention(ctx, q, huge(ctx, 4, (int64_t[]){1, 1, 1, 1}), v, false, 0), KILN_ERR_SHAPE,
                  "kiln_attention: shape");
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 32, 64);
    KT_EXPECT_ERR(kiln_add(ctx, kiln_quantize(ctx, w, KILN_Q8_0), w), KILN_ERR_DTYPE, "kiln_add: does not take q8_0");
    KT_EXPECT_ERR(kiln_exp(ctx, kiln_quantize(ctx, w, KILN_Q8_0)), KILN_ERR_DTYPE, "kiln_exp: does not take q8_0");
    KT_EXPECT_ERR(kiln_mean_all(ctx, kiln_quantize(ctx, w, KILN_Q8_0)), KILN_ERR_DTYPE, "kiln_mean_all: does not take");
    kiln_ctx_free(ctx);
}
