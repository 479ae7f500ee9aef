/* test_nn_norm.c — layer_norm and rms_norm: values against PyTorch and a
 * reference loop, gradient checks with and without weight/bias, errors. */
#include "test_nn_util.h"

#include <string.h>

static kiln_tensor *build_norm_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    double eps = fx_param(c, "eps", -1);
    bool has_w = fx_param(c, "has_w", 0) != 0, has_b = fx_param(c, "has_b", 0) != 0;
    kiln_tensor *w = has_w ? in[1] : NULL, *b = has_b ? in[1 + has_w] : NULL;
    if (!strncmp(c->name, "rms_", 4)) return kiln_rms_norm(ctx, in[0], w, eps);
    return kiln_layer_norm(ctx, in[0], w, b, eps);
}

KT_TEST(nn_norm_fixture) {
    const char *cases[] = {"layer_norm", "layer_norm_plain", "rms_norm", "rms_norm_plain"};
    const char *inputs[][4] = {{"x", "w", "b", NULL}, {"x", NULL}, {"x", "w", NULL}, {"x", NULL}};
    for (int i = 0; i < 4; i++) {
        nnt_fixture("tests/fixtures/norm.txt", cases[i], inputs[i], build_norm_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture("tests/fixtures/norm.txt", cases[i], inputs[i], build_norm_fixture, KILN_F32, 1e-5, 1e-4);
    }
}

typedef struct {
    bool rms, has_w, has_b, transpose;
} norm_case;

/* in[0] = x (or its transpose in the first two dims), then w, then b. */
static kiln_tensor *build_norm(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const norm_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], 0, 1) : in[0];
    kiln_tensor *w = c->has_w ? in[1] : NULL, *b = c->has_b ? in[1 + c->has_w] : NULL;
    return c->rms ? kiln_rms_norm(ctx, x, w, 1e-5) : kiln_layer_norm(ctx, x, w, b, 1e-5);
}

static void norm_grads(bool rms) {
    for (int v = 0; v < 8; v++) {
        norm_case c = {rms, v & 1, (v & 2) && !rms, (v & 4) != 0};
        if (rms && (v & 2)) continue;
        gc_input in[3] = {c.transpose ? GC_IN(3, 3, 2, 6) : GC_IN(3, 2, 3, 6), GC_IN(1, 6), GC_IN(1, 6)};
        in[0].lo = -2, in[0].hi = 3;
        char what[96];
        snprintf(what, sizeof what, "%s weight %d bias %d transposed %d", rms ? "rms_norm" : "layer_norm", c.has_w,
                 c.has_b, c.transpose);
        gc_check(what, build_norm, &c, 1 + c.has_w + c.has_b, in, (uint64_t)(41 + v));
    }
}

KT_TEST(nn_layer_norm_grad) { norm_grads(false); }
KT_TEST(nn_rms_norm_grad) { norm_grads(true); }

/* Rows far from 0 (mean 1000, spread 1) on the threaded path, against a
 * reference in double on the same (f32-rounded) inputs. */
KT_TEST(nn_norm_large_matches_reference) {
    const int64_t rows = 400, c = 96, n = rows * c;
    double *x = malloc((size_t)n * sizeof *x), *want = malloc((size_t)n * sizeof *want), w[96], b[96];
    KT_REQUIRE(x && want, "out of memory");
    for (int64_t j = 0; j < c; j++) w[j] = 0.5 + 0.01 * (double)j, b[j] = cos((double)j);
    for (int rms = 0; rms < 2; rms++)
        for (int f = 0; f < 2; f++) {
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_dtype dt = f ? KILN_F32 : KILN_F64;
            kiln_tensor *tx = kiln_new_2d(ctx, dt, rows, c), *tw = kiln_new_1d(ctx, dt, c);
            kiln_tensor *tb = kiln_new_1d(ctx, dt, c);
            KT_NOTNULL(tb);
            for (int64_t i = 0; i < n; i++) x[i] = 1000.0 + sin(0.91 * (double)i);
            KT_OK(kiln_tensor_set_f64(tx, x, n));
            KT_OK(kiln_tensor_get_f64(tx, x, n));
            KT_OK(kiln_tensor_set_f64(tw, w, c));
            KT_OK(kiln_tensor_get_f64(tw, w, c));
            KT_OK(kiln_tensor_set_f64(tb, b, c));
            KT_OK(kiln_tensor_get_f64(tb, b, c));
            for (int64_t r = 0; r < rows; r++) {
                const double *xr = x + r * c;
                double mean = 0, var = 0;
                for (int64_t j = 0; j < c; j++) mean += rms ? 0 : xr[j] / (double)c;
                for (int64_t j = 0; j < c; j++) var += (xr[j] - mean) * (xr[j] - mean) / (double)c;
                for (int64_t j = 0; j < c; j++)
                    want[r * c + j] = (xr[j] - mean) / sqrt(var + 1e-5) * w[j] + (rms ? 0 : b[j]);
            }
            kiln_tensor *y = rms ? kiln_rms_norm(ctx, tx, tw, 1e-5) : kiln_layer_norm(ctx, tx, tw, tb, 1e-5);
            double *got = nnt_eval(ctx, y);
            if (!got) return;
            char what[64];
            snprintf(what, sizeof what, "%s %s", rms ? "rms_norm" : "layer_norm", kiln_dtype_name(dt));
            nnt_close(what, got, want, n, f ? 1e-5 : 1e-11, f ? 1e-5 : 1e-11);
            free(got);
            kiln_ctx_free(ctx);
        }
    free(x);
    free(want);
}

KT_TEST(nn_norm_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 4, 3), *xi = kiln_new_2d(ctx, KILN_I32, 4, 3);
    kiln_tensor *w = kiln_new_1d(ctx, KILN_F32, 3), *w4 = kiln_new_1d(ctx, KILN_F32, 4);
    kiln_tensor *w2d = kiln_new_2d(ctx, KILN_F32, 1, 3), *w64 = kiln_new_1d(ctx, KILN_F64, 3);
    const char *ln = "kiln_layer_norm", *rn = "kiln_rms_norm";
    NNT_FAILS(kiln_layer_norm(ctx, xi, NULL, NULL, 1e-5), KILN_ERR_DTYPE, ln);
    NNT_FAILS(kiln_layer_norm(ctx, x, w4, NULL, 1e-5), KILN_ERR_SHAPE, ln);
    NNT_FAILS(kiln_layer_norm(ctx, x, w2d, NULL, 1e-5), KILN_ERR_SHAPE, ln);
    NNT_FAILS(kiln_layer_norm(ctx, x, w64, NULL, 1e-5), KILN_ERR_DTYPE, ln);
    NNT_FAILS(kiln_layer_norm(ctx, x, w, w4, 1e-5), KILN_ERR_SHAPE, ln);
    NNT_FAILS(kiln_layer_norm(ctx, x, NULL, w64, 1e-5), KILN_ERR_DTYPE, ln);
    NNT_FAILS(kiln_layer_norm(ctx, x, w, w, -1e-5), KILN_ERR_ARG, ln);
    NNT_FAILS(kiln_layer_norm(ctx, x, w, w, NAN), KILN_ERR_ARG, ln);
    NNT_FAILS(kiln_rms_norm(ctx, xi, NULL, 1e-5), KILN_ERR_DTYPE, rn);
    NNT_FAILS(kiln_rms_norm(ctx, x, w4, 1e-5), KILN_ERR_SHAPE, rn);
    NNT_FAILS(kiln_rms_norm(ctx, x, w64, 1e-5), KILN_ERR_DTYPE, rn);
    NNT_FAILS(kiln_rms_norm(ctx, x, w, INFINITY), KILN_ERR_ARG, rn);
    KT_CHECK(kiln_layer_norm(ctx, x, NULL, w, 0.0) != NULL, "bias without weight, eps 0: %s", kiln_last_error());
    NNT_FAILS(kiln_rms_norm(ctx, x, w4, 1e-5), KILN_ERR_SHAPE, rn);
    KT_CHECK(!kiln_layer_norm(ctx, NULL, w, NULL, 1e-5) && strstr(kiln_last_error(), rn),
             "NULL x replaced the error: %s", kiln_last_error());
    KT_CHECK(!kiln_rms_norm(ctx, NULL, w, 1e-5) && strstr(kiln_last_error(), rn), "NULL x replaced the error: %s",
             kiln_last_error());
    kiln_ctx_free(ctx);
}
