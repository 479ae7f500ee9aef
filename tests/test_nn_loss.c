/* test_nn_loss.c — cross_entropy and mse: values against PyTorch and a
 * reference loop, gradient checks, ignored and bad labels, error paths. */
#include "test_nn_util.h"

#include <string.h>

/* ---- cross_entropy ---- */

static kiln_tensor *build_ce_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    return kiln_cross_entropy(ctx, in[0], in[1], (int32_t)fx_param(c, "ignore_index", -100));
}

KT_TEST(nn_cross_entropy_fixture) {
    const char *cases[] = {"cross_entropy", "cross_entropy_all", "cross_entropy_3d"};
    const char *inputs[] = {"x", "labels", NULL};
    for (int i = 0; i < 3; i++) {
        nnt_fixture("tests/fixtures/cross_entropy.txt", cases[i], inputs, build_ce_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture("tests/fixtures/cross_entropy.txt", cases[i], inputs, build_ce_fixture, KILN_F32, 1e-5, 1e-5);
    }
}

typedef struct {
    int32_t ignore;
    bool transpose; /* logits given as the transpose of a [C, N] input */
} ce_case;

static kiln_tensor *build_ce(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const ce_case *c = arg;
    kiln_tensor *logits = c->transpose ? kiln_transpose(ctx, in[0], 0, 1) : in[0];
    return kiln_cross_entropy(ctx, logits, in[1], c->ignore);
}

KT_TEST(nn_cross_entropy_grad) {
    static const int32_t l6[] = {1, 4, -100, 0, 2, 4}, l23[] = {3, 0, 1, -7, 2, 2};
    static const int32_t pad0[] = {0, 3, 0, 1, 2, 4}, none[] = {-100, -100, -100};
    const struct {
        gc_input x, labels;
        ce_case c;
        const char *what;
    } cases[] = {
        {GC_IN(2, 6, 5), GC_IN(1, 6), {-100, false}, "[6, 5] with one ignored label"},
        {GC_IN(3, 2, 3, 4), GC_IN(2, 2, 3), {-7, false}, "[2, 3, 4] with one ignored label"},
        {GC_IN(2, 5, 6), GC_IN(1, 6), {-100, true}, "transposed logits"},
        {GC_IN(2, 6, 5), GC_IN(1, 6), {0, false}, "ignore_index 0 inside [0, C)"},
        {GC_IN(2, 3, 4), GC_IN(1, 3), {-100, false}, "every label ignored"},
    };
    const int32_t *labels[] = {l6, l23, l6, pad0, none};
    for (int i = 0; i < 5; i++) {
        gc_input in[2] = {cases[i].x, cases[i].labels};
        in[0].lo = -3, in[0].hi = 3;
        in[1].is_index = true;
        in[1].ivalues = labels[i];
        gc_check(cases[i].what, build_ce, (void *)&cases[i].c, 2, in, (uint64_t)(21 + i));
    }
}

/* Against -mean(log_softmax(x)[label]) computed here; every label ignored
 * gives 0 (torch: NaN) and a zero gradient. */
KT_TEST(nn_cross_entropy_values) {
    for (int f = 0; f < 2; f++) {
        kiln_dtype dt = f ? KILN_F32 : KILN_F64;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_2d(ctx, dt, 4, 3), *lab = kiln_new_1d(ctx, KILN_I32, 4);
        kiln_tensor *none = kiln_new_1d(ctx, KILN_I32, 4);
        const double xv[12] = {0.5, -1, 2, 3, 3, 3, -2, 0, 1, 100, -100, 0};
        KT_OK(kiln_tensor_set_f64(x, xv, 12));
        KT_OK(kiln_tensor_set_i32(lab, (int32_t[]){2, 0, 5, 0}, 4)); /* 5 is ignore_index */
        KT_OK(kiln_tensor_set_i32(none, (int32_t[]){5, 5, 5, 5}, 4));
        KT_OK(kiln_tensor_set_requires_grad(x, true));
        kiln_tensor *loss = kiln_cross_entropy(ctx, x, lab, 5), *zero = kiln_cross_entropy(ctx, x, none, 5);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_NOTNULL(loss);
        KT_NOTNULL(zero);
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_add(g, zero));
        KT_OK(kiln_graph_backward(g, zero));
        KT_OK(kiln_graph_compute(g));
        double want = 0;
        const int rows[3] = {0, 1, 3}, labs[3] = {2, 0, 0};
        for (int k = 0; k < 3; k++) {
            const double *r = xv + 3 * rows[k];
            double m = fmax(r[0], fmax(r[1], r[2]));
            want += m + log(exp(r[0] - m) + exp(r[1] - m) + exp(r[2] - m)) - r[labs[k]];
        }
        want /= 3;
        KT_CHECK(fabs(kiln_tensor_item(loss) - want) < (f ? 1e-5 : 1e-12) * want, "%s loss %.17g, want %.17g",
                 kiln_dtype_name(dt), kiln_tensor_item(loss), want);
        KT_CHECK(kiln_tensor_item(zero) == 0.0, "all ignored: loss %g, want 0", kiln_tensor_item(zero));
        double gx[12];
        KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(x), gx, 12));
        for (int i = 0; i < 12; i++) KT_CHECK(gx[i] == 0.0, "all ignored: grad[%d] = %g", i, gx[i]);
        kiln_ctx_free(ctx);
    }
}

/* A label outside [0, C) that is not ignore_index fails the compute. */
KT_TEST(nn_cross_entropy_bad_label) {
    const int32_t bad[][3] = {{1, 5, 0}, {0, 2, -1}};
    const char *want[] = {"label 5 of row 1", "label -1 of row 2"};
    for (int i = 0; i < 2; i++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 3, 5), *lab = kiln_new_1d(ctx, KILN_I32, 3);
        KT_OK(kiln_tensor_set_i32(lab, bad[i], 3));
        kiln_tensor *loss = kiln_cross_entropy(ctx, x, lab, -100);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, loss));
        kiln_status s = kiln_graph_compute(g);
        KT_CHECK(s == KILN_ERR_ARG, "compute gave %s, want a bad-argument error", kiln_status_name(s));
        KT_CHECK(strstr(kiln_last_error(), "kiln_cross_entropy") && strstr(kiln_last_error(), want[i]),
                 "message '%s' should name the op and '%s'", kiln_last_error(), want[i]);
        kiln_ctx_free(ctx);
    }
}

KT_TEST(nn_cross_entropy_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 4, 3), *xi = kiln_new_2d(ctx, KILN_I32, 4, 3);
    kiln_tensor *x1 = kiln_new_1d(ctx, KILN_F32, 3), *lab = kiln_new_1d(ctx, KILN_I32, 4);
    kiln_tensor *labf = kiln_new_1d(ctx, KILN_F32, 4), *lab3 = kiln_new_1d(ctx, KILN_I32, 3);
    kiln_tensor *lab2d = kiln_new_2d(ctx, KILN_I32, 4, 1), *x3 = kiln_new_3d(ctx, KILN_F64, 2, 2, 3);
    const char *op = "kiln_cross_entropy";
    NNT_FAILS(kiln_cross_entropy(ctx, xi, lab, -100), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_cross_entropy(ctx, x, labf, -100), KILN_ERR_DTYPE, op);
    NNT_FAILS(kiln_cross_entropy(ctx, x1, lab3, -100), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_cross_entropy(ctx, x, lab3, -100), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_cross_entropy(ctx, x, lab2d, -100), KILN_ERR_SHAPE, op);
    NNT_FAILS(kiln_cross_entropy(ctx, x3, lab, -100), KILN_ERR_SHAPE, op);
    KT_CHECK(!kiln_cross_entropy(ctx, NULL, lab, -100) && strstr(kiln_last_error(), "[2, 2, 3]"),
             "NULL logits replaced the error: %s", kiln_last_error());
    KT_CHECK(!kiln_cross_entropy(ctx, x, NULL, -100) && strstr(kiln_last_error(), "[2, 2, 3]"),
             "NULL labels replaced the error: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

/* ---- mse ---- */

static kiln_tensor *build_mse(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    (void)arg;
    return kiln_mse(ctx, kiln_transpose(ctx, in[0], 0, 1), in[1]);
}

KT_TEST(nn_mse_grad) {
    gc_input in[2] = {GC_IN(2, 4, 3), GC_IN(2, 3, 4)};
    gc_check("mse (a transposed)", build_mse, NULL, 2, in, 31);
    in[1].no_grad = true;
    gc_check("mse (b constant)", build_mse, NULL, 2, in, 32);
}

KT_TEST(nn_mse_values) {
    const double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1.5, 2, 0, 4, 7, -1};
    double want = (0.25 + 0 + 9 + 0 + 4 + 49) / 6;
    for (int f = 0; f < 2; f++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_dtype dt = f ? KILN_F32 : KILN_F64;
        kiln_tensor *ta = kiln_new_2d(ctx, dt, 2, 3), *tb = kiln_new_2d(ctx, dt, 2, 3);
        KT_OK(kiln_tensor_set_f64(ta, a, 6));
        KT_OK(kiln_tensor_set_f64(tb, b, 6));
        kiln_tensor *loss = kiln_mse(ctx, ta, tb);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_NOTNULL(loss);
        KT_CHECK(kiln_tensor_ndim(loss) == 1 && kiln_tensor_dim(loss, 0) == 1, "mse is not of shape [1]");
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_compute(g));
        KT_CHECK(fabs(kiln_tensor_item(loss) - want) < 1e-6 * want, "%s mse %.17g, want %.17g", kiln_dtype_name(dt),
                 kiln_tensor_item(loss), want);
        kiln_ctx_free(ctx);
    }
}

KT_TEST(nn_mse_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 3, 1), *b = kiln_new_1d(ctx, KILN_F32, 3);
    kiln_tensor *a64 = kiln_new_2d(ctx, KILN_F64, 3, 1), *ai = kiln_new_2d(ctx, KILN_I32, 3, 1);
    NNT_FAILS(kiln_mse(ctx, a, b), KILN_ERR_SHAPE, "kiln_mse");
    NNT_FAILS(kiln_mse(ctx, a, a64), KILN_ERR_DTYPE, "kiln_mse");
    NNT_FAILS(kiln_mse(ctx, ai, ai), KILN_ERR_DTYPE, "kiln_mse");
    NNT_FAILS(kiln_mse(ctx, a, ai), KILN_ERR_DTYPE, "kiln_mse");
    const char *first = "kiln_mse: b [3, 1] is i32";
    KT_CHECK(!kiln_mse(ctx, NULL, a) && strstr(kiln_last_error(), first), "NULL a replaced the error: %s",
             kiln_last_error());
    KT_CHECK(!kiln_mse(ctx, a, NULL) && strstr(kiln_last_error(), first), "NULL b replaced the error: %s",
             kiln_last_error());
    kiln_ctx_free(ctx);
}
