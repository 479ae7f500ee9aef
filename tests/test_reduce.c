/* test_reduce.c — sum/mean/max/min/argmax over an axis and over all. */
#include "gradcheck.h"

#include <string.h>

typedef struct {
    int op; /* 0 sum 1 mean 2 max 3 min */
    int axis;
    bool keepdim, all, transpose;
} reduce_case;

static kiln_tensor *build_reduce(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const reduce_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], 0, 2) : in[0];
    if (c->all) {
        kiln_tensor *(*f[])(kiln_ctx *, kiln_tensor *) = {kiln_sum_all, kiln_mean_all, kiln_max_all, kiln_min_all};
        return f[c->op](ctx, x);
    }
    kiln_tensor *(*f[])(kiln_ctx *, kiln_tensor *, int, bool) = {kiln_sum, kiln_mean, kiln_max, kiln_min};
    return f[c->op](ctx, x, c->axis, c->keepdim);
}

KT_TEST(reduce_grads) {
    for (int op = 0; op < 4; op++)
        for (int axis = -3; axis < 3; axis += 2)
            for (int v = 0; v < 4; v++) {
                reduce_case c = {op, axis, v & 1, v == 3, v & 2};
                gc_input in = GC_IN(3, 3, 4, 5);
                char what[80];
                snprintf(what, sizeof what, "reduce op %d axis %d keepdim %d all %d transposed %d", op, axis,
                         c.keepdim, c.all, c.transpose);
                gc_check(what, build_reduce, &c, 1, &in, (uint64_t)(op * 100 + axis * 10 + v + 50));
            }
}

KT_TEST(reduce_values_and_shapes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3);
    KT_OK(kiln_tensor_set_f32(x, (float[]){1, 5, -2, 4, 0, 7}, 6));
    kiln_tensor *s0 = kiln_sum(ctx, x, 0, false), *m1 = kiln_mean(ctx, x, 1, true), *mx = kiln_max(ctx, x, -1, false);
    kiln_tensor *mn = kiln_min_all(ctx, x), *am = kiln_argmax(ctx, x, 1, false), *sa = kiln_sum_all(ctx, x);
    kiln_tensor *am0 = kiln_argmax(ctx, kiln_transpose(ctx, x, 0, 1), 1, true);
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_tensor *outs[] = {s0, m1, mx, mn, am, sa, am0};
    for (int i = 0; i < 7; i++) KT_OK(kiln_graph_add(g, outs[i]));
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_tensor_ndim(s0) == 1 && kiln_tensor_dim(s0, 0) == 3, "sum shape");
    KT_CHECK(kiln_tensor_ndim(m1) == 2 && kiln_tensor_dim(m1, 1) == 1, "keepdim shape");
    KT_CHECK(kiln_tensor_dtype(am) == KILN_I32, "argmax dtype");
    KT_CHECK(kiln_tensor_ndim(am0) == 2 && kiln_tensor_dim(am0, 0) == 3, "argmax keepdim shape");
    const double want[][3] = {{5, 5, 5}, {4.0 / 3, 11.0 / 3}, {5, 7}, {-2}, {1, 2}, {15}, {1, 0, 1}};
    const int n[] = {3, 2, 2, 1, 2, 1, 3};
    for (int i = 0; i < 7; i++) {
        double v[3];
        KT_OK(kiln_tensor_get_f64(outs[i], v, n[i]));
        for (int j = 0; j < n[i]; j++)
            KT_CHECK(fabs(v[j] - want[i][j]) < 1e-6, "output %d[%d] = %g, want %g", i, j, v[j], want[i][j]);
    }
    kiln_ctx_free(ctx);
}

/* A long f32 sum accumulates in double: 10^6 copies of 0.1 stay exact to f32. */
KT_TEST(reduce_long_sum_accuracy) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_1d(ctx, KILN_F32, 1000000);
    KT_OK(kiln_tensor_fill(x, 0.1));
    kiln_tensor *s = kiln_sum_all(ctx, x);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, s));
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(fabs(kiln_tensor_item(s) - 100000.0) < 0.01, "sum = %.4f", kiln_tensor_item(s));
    kiln_ctx_free(ctx);
}

KT_TEST(reduce_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3), *i = kiln_new_1d(ctx, KILN_I32, 3);
    KT_CHECK(!kiln_sum(ctx, x, 2, false) && kiln_last_status() == KILN_ERR_ARG, "axis 2");
    KT_CHECK(strstr(kiln_last_error(), "kiln_sum") && strstr(kiln_last_error(), "[2, 3]"), "msg: %s", kiln_last_error());
    KT_CHECK(!kiln_max(ctx, x, -3, true), "axis -3");
    KT_CHECK(!kiln_mean(ctx, i, 0, false) && kiln_last_status() == KILN_ERR_DTYPE, "mean of i32");
    kiln_ctx_free(ctx);
}
