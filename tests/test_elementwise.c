/* test_elementwise.c — unary/binary ops, comparisons and where: values
 * against libm, gradients against finite differences, error paths. */
#include "gradcheck.h"
#include "internal.h" /* kiln__vjp, for second derivatives */

#include <string.h>

typedef kiln_tensor *(*unary_fn)(kiln_ctx *, kiln_tensor *);

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static const struct {
    const char *name;
    unary_fn fn;
    double (*ref)(double);
    double lo, hi;
} unaries[] = {
    {"neg", kiln_neg, NULL, -2, 2},       {"exp", kiln_exp, exp, -2, 2},       {"log", kiln_log, log, 0.2, 3},
    {"sqrt", kiln_sqrt, sqrt, 0.2, 3},    {"rsqrt", kiln_rsqrt, NULL, 0.2, 3}, {"abs", kiln_abs, fabs, -2, 2},
    {"tanh", kiln_tanh, tanh, -2, 2},     {"sigmoid", kiln_sigmoid, ref_sigmoid, -4, 4},
    {"relu", kiln_relu, NULL, -2, 2},     {"gelu", kiln_gelu, NULL, -3, 3},    {"gelu_tanh", kiln_gelu_tanh, NULL, -3, 3},
    {"silu", kiln_silu, NULL, -3, 3},     {"softplus", kiln_softplus, NULL, -3, 3},
};

static double ref_unary(int i, double x) {
    const char *n = unaries[i].name;
    if (unaries[i].ref) return unaries[i].ref(x);
    if (!strcmp(n, "neg")) return -x;
    if (!strcmp(n, "rsqrt")) return 1 / sqrt(x);
    if (!strcmp(n, "relu")) return x > 0 ? x : 0;
    if (!strcmp(n, "gelu")) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    if (!strcmp(n, "gelu_tanh")) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    if (!strcmp(n, "silu")) return x * ref_sigmoid(x);
    return log(1 + exp(x)); /* softplus */
}

static int current;
static kiln_tensor *build_unary(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    return unaries[current].fn(ctx, in[0]);
}

KT_TEST(elementwise_unary_values) {
    for (int i = 0; i < (int)(sizeof unaries / sizeof *unaries); i++) {
        for (int dt = 0; dt < 2; dt++) {
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *x = kiln_new_2d(ctx, dt ? KILN_F64 : KILN_F32, 3, 7);
            kiln_tensor_fill_uniform(x, 5, unaries[i].lo, unaries[i].hi);
            kiln_tensor *y = unaries[i].fn(ctx, x);
            kiln_graph *g = kiln_graph_new(ctx);
            KT_OK(kiln_graph_add(g, y));
            KT_OK(kiln_graph_compute(g));
            double xv[21], yv[21], ref[21];
            kiln_tensor_get_f64(x, xv, 21);
            kiln_tensor_get_f64(y, yv, 21);
            for (int j = 0; j < 21; j++) ref[j] = ref_unary(i, xv[j]);
            double e = kt_rel_err(yv, ref, 21, dt ? 1e-14 : 1e-6, dt ? 1e-13 : 1e-6, NULL);
            KT_CHECK(e <= 1, "%s (%s): error %g", unaries[i].name, dt ? "f64" : "f32", e);
            kiln_ctx_free(ctx);
        }
    }
}

KT_TEST(elementwise_unary_grads) {
    for (current = 0; current < (int)(sizeof unaries / sizeof *unaries); current++) {
        gc_input in = GC_IN(2, 3, 5);
        in.lo = unaries[current].lo, in.hi = unaries[current].hi;
        gc_check(unaries[current].name, build_unary, NULL, 1, &in, 11 + (uint64_t)current);
    }
}

/* The backward rules are built from ops, so they differentiate again:
 * check d/dx of <dy/dx, gy> for every unary op. */
static kiln_tensor *build_unary_grad(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *g = NULL, *y = unaries[current].fn(ctx, in[0]);
    return y && !kiln__vjp(ctx, y, in[1], 1, &in[0], &g) ? g : NULL;
}

KT_TEST(elementwise_unary_second_order) {
    for (current = 0; current < (int)(sizeof unaries / sizeof *unaries); current++) {
        if (!strcmp(unaries[current].name, "relu") || !strcmp(unaries[current].name, "abs")) continue; /* flat */
        gc_input in[2] = {GC_IN(2, 3, 5), GC_IN(2, 3, 5)};
        in[0].lo = unaries[current].lo, in[0].hi = unaries[current].hi;
        char what[64];
        snprintf(what, sizeof what, "second derivative of %s", unaries[current].name);
        gc_check(what, build_unary_grad, NULL, 2, in, 31 + (uint64_t)current);
    }
}

static kiln_tensor *build_scalar_ops(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *x = in[0];
    kiln_tensor *a = kiln_pow(ctx, x, 2.5), *b = kiln_scale(ctx, kiln_add_scalar(ctx, x, 0.75), -1.5);
    return kiln_add(ctx, kiln_add(ctx, a, b), kiln_leaky_relu(ctx, kiln_add_scalar(ctx, x, -1.0), 0.1));
}

KT_TEST(elementwise_scalar_param_grads) {
    gc_input in = GC_IN(2, 4, 3);
    in.lo = 0.3, in.hi = 2.0;
    gc_check("pow/scale/add_scalar/leaky_relu", build_scalar_ops, NULL, 1, &in, 3);
}

static kiln_tensor *(*binaries[])(kiln_ctx *, kiln_tensor *, kiln_tensor *) = {kiln_add, kiln_sub, kiln_mul, kiln_div};
static const char *binary_names[] = {"add", "sub", "mul", "div"};
static int bin;

static kiln_tensor *build_binary(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    return binaries[bin](ctx, in[0], in[1]);
}

/* b's values stay away from zero so div is smooth. */
KT_TEST(elementwise_binary_broadcast_grads) {
    const gc_input shapes[][2] = {
        {GC_IN(2, 3, 4), GC_IN(2, 3, 4)}, {GC_IN(3, 2, 3, 4), GC_IN(2, 3, 1)}, {GC_IN(2, 3, 1), GC_IN(1, 5)},
        {GC_IN(1, 1), GC_IN(3, 2, 1, 3)},
    };
    for (bin = 0; bin < 4; bin++)
        for (int s = 0; s < 4; s++) {
            gc_input in[2] = {shapes[s][0], shapes[s][1]};
            in[1].lo = 0.5, in[1].hi = 2.0;
            char what[64];
            snprintf(what, sizeof what, "%s shapes #%d", binary_names[bin], s);
            gc_check(what, build_binary, NULL, 2, in, 100 + (uint64_t)(bin * 10 + s));
        }
}

static kiln_tensor *build_strided(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    /* a transposed view times a broadcast row, then a view read twice */
    kiln_tensor *xt = kiln_transpose(ctx, in[0], 0, 1);
    kiln_tensor *p = kiln_mul(ctx, xt, in[1]);
    return kiln_div(ctx, p, kiln_add_scalar(ctx, kiln_mul(ctx, xt, xt), 1.0));
}

KT_TEST(elementwise_noncontiguous_grads) {
    gc_input in[2] = {GC_IN(2, 4, 3), GC_IN(1, 4)};
    gc_check("mul/div of a transposed view", build_strided, NULL, 2, in, 9);
}

KT_TEST(elementwise_add_values_broadcast) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 2, 3), *b = kiln_new_1d(ctx, KILN_F32, 3);
    KT_OK(kiln_tensor_set_f32(a, (float[]){1, 2, 3, 4, 5, 6}, 6));
    KT_OK(kiln_tensor_set_f32(b, (float[]){10, 20, 30}, 3));
    kiln_tensor *y = kiln_sub(ctx, kiln_mul(ctx, a, b), b);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    float v[6];
    KT_OK(kiln_tensor_get_f32(y, v, 6));
    const float want[6] = {0, 20, 60, 30, 80, 150};
    for (int i = 0; i < 6; i++) KT_CHECK(v[i] == want[i], "y[%d] = %g, want %g", i, v[i], want[i]);
    kiln_ctx_free(ctx);
}

KT_TEST(elementwise_cmp_where_masked_fill) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_1d(ctx, KILN_F32, 4), *b = kiln_new_1d(ctx, KILN_F32, 4);
    kiln_tensor *ia = kiln_new_1d(ctx, KILN_I32, 4), *ib = kiln_new_1d(ctx, KILN_I32, 4);
    kiln_tensor_set_f32(a, (float[]){1, 2, 3, 4}, 4);
    kiln_tensor_set_f32(b, (float[]){4, 2, 1, 4}, 4);
    kiln_tensor_set_i32(ia, (int32_t[]){7, 1, 3, 0}, 4);
    kiln_tensor_set_i32(ib, (int32_t[]){7, 2, 3, 9}, 4);
    kiln_tensor *lt = kiln_cmp(ctx, a, b, KILN_CMP_LT), *ge = kiln_cmp(ctx, a, b, KILN_CMP_GE);
    kiln_tensor *eq = kiln_cmp(ctx, ia, ib, KILN_CMP_EQ);
    kiln_tensor *w = kiln_where(ctx, eq, a, b), *mf = kiln_masked_fill(ctx, a, lt, -1.0);
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_tensor *outs[] = {lt, ge, eq, w, mf};
    for (int i = 0; i < 5; i++) KT_OK(kiln_graph_add(g, outs[i]));
    KT_OK(kiln_graph_compute(g));
    const double want[5][4] = {{1, 0, 0, 0}, {0, 1, 1, 1}, {1, 0, 1, 0}, {1, 2, 3, 4}, {-1, 2, 3, 4}};
    w = outs[3];
    for (int i = 0; i < 5; i++) {
        double v[4];
        KT_OK(kiln_tensor_get_f64(outs[i], v, 4));
        for (int j = 0; j < 4; j++)
            KT_CHECK(v[j] == (i == 3 ? (j == 0 || j == 2 ? want[3][j] : (double[]){4, 2, 1, 4}[j]) : want[i][j]),
                     "output %d element %d = %g", i, j, v[j]);
    }
    KT_CHECK(kiln_tensor_dtype(eq) == KILN_I32, "i32 comparison gives i32");
    kiln_ctx_free(ctx);
}

static kiln_tensor *build_where(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    kiln_tensor *cond = kiln_cmp(ctx, in[0], kiln_scalar(ctx, KILN_F64, 0.0), KILN_CMP_GT);
    return kiln_mul(ctx, kiln_where(ctx, cond, in[1], in[2]), in[0]);
}

KT_TEST(elementwise_where_grads) {
    gc_input in[3] = {GC_IN(2, 3, 4), GC_IN(2, 3, 4), GC_IN(1, 4)};
    gc_check("where (broadcast b)", build_where, NULL, 3, in, 21);
}

KT_TEST(elementwise_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 2, 3), *b = kiln_new_2d(ctx, KILN_F32, 4, 3);
    kiln_tensor *c = kiln_new_2d(ctx, KILN_F64, 2, 3), *i = kiln_new_1d(ctx, KILN_I32, 3);
    KT_CHECK(!kiln_add(ctx, a, b), "broadcast mismatch accepted");
    KT_CHECK(kiln_last_status() == KILN_ERR_SHAPE, "status %d", kiln_last_status());
    KT_CHECK(strstr(kiln_last_error(), "kiln_add") && strstr(kiln_last_error(), "[2, 3]") &&
                 strstr(kiln_last_error(), "[4, 3]"),
             "message: %s", kiln_last_error());
    KT_CHECK(!kiln_mul(ctx, a, c) && kiln_last_status() == KILN_ERR_DTYPE, "dtype mismatch: %s", kiln_last_error());
    KT_CHECK(!kiln_exp(ctx, i) && kiln_last_status() == KILN_ERR_DTYPE, "exp of i32: %s", kiln_last_error());
    KT_CHECK(!kiln_add(ctx, i, i) && strstr(kiln_last_error(), "i32"), "add of i32: %s", kiln_last_error());
    KT_CHECK(!kiln_cmp(ctx, a, a, (kiln_cmp_op)42) && kiln_last_status() == KILN_ERR_ARG, "bad cmp");
    KT_CHECK(!kiln_where(ctx, a, a, c) && kiln_last_status() == KILN_ERR_DTYPE, "where dtypes");
    /* a NULL source propagates the first error untouched */
    KT_CHECK(!kiln_add(ctx, a, b), "setup");
    char first[256];
    snprintf(first, sizeof first, "%s", kiln_last_error());
    KT_CHECK(!kiln_relu(ctx, kiln_mul(ctx, kiln_add(ctx, a, b), a)), "NULL propagates");
    KT_CHECK(!strcmp(first, kiln_last_error()), "first error kept: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}
