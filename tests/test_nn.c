/* test_nn.c — softmax, log_softmax and dropout: values against PyTorch and
 * a double-loop reference, gradient checks, dropout's mask, error paths. */
#include "test_nn_util.h"

#include <string.h>

/* ---- softmax and log_softmax ---- */

static kiln_tensor *build_softmax_fixture(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    bool causal = fx_param(c, "causal", 0) != 0;
    return strncmp(c->name, "log_", 4) ? kiln_softmax(ctx, in[0], causal) : kiln_log_softmax(ctx, in[0], causal);
}

KT_TEST(nn_softmax_fixture) {
    const char *cases[] = {"softmax",     "softmax_causal",     "softmax_causal_rect",
                           "log_softmax", "log_softmax_causal", "log_softmax_causal_rect"};
    const char *inputs[] = {"x", NULL};
    for (int i = 0; i < 6; i++) {
        nnt_fixture("tests/fixtures/softmax.txt", cases[i], inputs, build_softmax_fixture, KILN_F64, 1e-10, 1e-10);
        nnt_fixture("tests/fixtures/softmax.txt", cases[i], inputs, build_softmax_fixture, KILN_F32, 1e-5, 1e-4);
    }
}

/* 1 where the causal mask hides entry (i, j) of a rows x cols matrix. */
static kiln_tensor *hidden_mask(kiln_ctx *ctx, int64_t rows, int64_t cols) {
    kiln_tensor *m = kiln_new_2d(ctx, KILN_F64, rows, cols);
    if (!m) return NULL;
    double *d = kiln_tensor_data(m);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) d[i * cols + j] = j > i + cols - rows;
    return m;
}

typedef struct {
    bool use_log, causal, transpose;
} softmax_case;

/* The op on in[0] (transposed in its last two dims when asked). A causal
 * log_softmax is -inf where masked, which no finite loss can take: those
 * entries are set to 0 by masked_fill (which passes them no gradient). */
static kiln_tensor *build_softmax(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const softmax_case *c = arg;
    kiln_tensor *x = c->transpose ? kiln_transpose(ctx, in[0], -1, -2) : in[0];
    if (!c->use_log) return kiln_softmax(ctx, x, c->causal);
    kiln_tensor *y = kiln_log_softmax(ctx, x, c->causal);
    if (!c->causal || !y) return y;
    return kiln_masked_fill(ctx, y, hidden_mask(ctx, kiln_tensor_dim(y, -2), kiln_tensor_dim(y, -1)), 0.0);
}

static void softmax_grads(bool use_log) {
    /* plain, 3-D, causal square / wide / tall (tall rows see nothing), transposed (non-contiguous) */
    const struct {
        gc_input in;
        bool causal, transpose;
    } cases[] = {
        {GC_IN(2, 3, 5), false, false}, {GC_IN(3, 2, 3, 6), false, false}, {GC_IN(3, 2, 4, 4), true, false},
        {GC_IN(2, 3, 5), true, false},  {GC_IN(2, 5, 3), true, false},     {GC_IN(3, 2, 5, 4), false, true},
        {GC_IN(3, 2, 5, 4), true, true},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
        softmax_case c = {use_log, cases[i].causal, cases[i].transpose};
        gc_input in = cases[i].in;
        in.lo = -3, in.hi = 3;
        char what[80];
        snprintf(what, sizeof what, "%s case %d (causal %d, transposed %d)", use_log ? "log_softmax" : "softmax", i,
                 c.causal, c.transpose);
        gc_check(what, build_softmax, &c, 1, &in, (uint64_t)(11 + i));
    }
}

KT_TEST(nn_softmax_grad) { softmax_grads(false); }
KT_TEST(nn_log_softmax_grad) { softmax_grads(true); }

/* Against a double-loop reference on a tensor large enough for the
 * threaded path, in both dtypes, causal with more columns than rows. */
KT_TEST(nn_softmax_large_matches_reference) {
    const int64_t b = 48, rows = 40, cols = 23, n = b * rows * cols;
    double *x = malloc((size_t)n * sizeof *x), *want = malloc((size_t)n * sizeof *want);
    KT_REQUIRE(x && want, "out of memory");
    for (int64_t i = 0; i < n; i++) x[i] = 20.0 * sin(0.37 * (double)i) + (i % 7 == 0 ? 500.0 : 0.0);
    for (int lg = 0; lg < 2; lg++) {
        for (int64_t r = 0; r < b * rows; r++) {
            const double *xr = x + r * cols;
            int64_t nv = r % rows + cols - rows + 1;
            nv = nv < 0 ? 0 : nv;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < nv; j++) m = xr[j] > m ? xr[j] : m;
            for (int64_t j = 0; j < nv; j++) s += exp(xr[j] - m);
            for (int64_t j = 0; j < cols; j++)
                want[r * cols + j] = j >= nv ? (lg ? -INFINITY : 0.0) : lg ? xr[j] - m - log(s) : exp(xr[j] - m) / s;
        }
        for (int f = 0; f < 2; f++) {
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *t = kiln_new_3d(ctx, f ? KILN_F32 : KILN_F64, b, rows, cols);
            KT_NOTNULL(t);
            KT_OK(kiln_tensor_set_f64(t, x, n));
            if (f) KT_OK(kiln_tensor_get_f64(t, x, n)); /* the f32-rounded inputs */
            kiln_tensor *y = lg ? kiln_log_softmax(ctx, t, true) : kiln_softmax(ctx, t, true);
            double *got = nnt_eval(ctx, y);
            if (!got) return;
            nnt_close(lg ? "large log_softmax" : "large softmax", got, want, n, f ? 1e-5 : 1e-12, f ? 1e-5 : 1e-12);
            free(got);
            kiln_ctx_free(ctx);
        }
    }
    free(x);
    free(want);
}

/* Huge logits must not overflow: only differences matter. */
KT_TEST(nn_softmax_stable_for_large_inputs) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3);
    KT_OK(kiln_tensor_set_f32(x, (float[]){1000, 1001, 1002, -1000, -1001, -1002}, 6));
    kiln_tensor *y = kiln_softmax(ctx, x, false), *ly = kiln_log_softmax(ctx, x, false);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_add(g, ly));
    KT_OK(kiln_graph_compute(g));
    double s = exp(0) + exp(-1) + exp(-2), vy[6], vl[6];
    double want[6] = {exp(-2) / s, exp(-1) / s, 1 / s, 1 / s, exp(-1) / s, exp(-2) / s};
    KT_OK(kiln_tensor_get_f64(y, vy, 6));
    KT_OK(kiln_tensor_get_f64(ly, vl, 6));
    nnt_close("softmax of large logits", vy, want, 6, 1e-6, 1e-5);
    for (int i = 0; i < 6; i++) want[i] = log(want[i]);
    nnt_close("log_softmax of large logits", vl, want, 6, 1e-5, 1e-5);
    kiln_ctx_free(ctx);
}

KT_TEST(nn_softmax_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *xi = kiln_new_2d(ctx, KILN_I32, 2, 3), *x1 = kiln_new_1d(ctx, KILN_F32, 4);
    NNT_FAILS(kiln_softmax(ctx, xi, false), KILN_ERR_DTYPE, "kiln_softmax");
    NNT_FAILS(kiln_log_softmax(ctx, xi, false), KILN_ERR_DTYPE, "kiln_log_softmax");
    NNT_FAILS(kiln_softmax(ctx, x1, true), KILN_ERR_SHAPE, "kiln_softmax");
    NNT_FAILS(kiln_log_softmax(ctx, x1, true), KILN_ERR_SHAPE, "kiln_log_softmax");
    KT_CHECK(kiln_softmax(ctx, x1, false) != NULL, "1-D softmax without a mask is fine: %s", kiln_last_error());
    /* a NULL source keeps the first error */
    NNT_FAILS(kiln_softmax(ctx, xi, false), KILN_ERR_DTYPE, "kiln_softmax");
    KT_CHECK(!kiln_log_softmax(ctx, NULL, true) && kiln_last_status() == KILN_ERR_DTYPE &&
                 strstr(kiln_last_error(), "kiln_softmax:"),
             "NULL input replaced the error: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

/* ---- dropout ---- */

/* x (f64, no zeros) -> y = dropout(x), loss = sum(y); one compute. */
typedef struct {
    kiln_ctx *ctx;
    kiln_tensor *x, *y;
    kiln_graph *g;
} dropout_setup;

static bool dropout_make(dropout_setup *d, int64_t n, double p, uint64_t seed) {
    d->ctx = kiln_ctx_new();
    d->x = kiln_new_1d(d->ctx, KILN_F64, n);
    if (!d->x || kiln_tensor_fill_uniform(d->x, 3, 0.5, 1.5) || kiln_tensor_set_requires_grad(d->x, true)) return false;
    d->y = kiln_dropout(d->ctx, d->x, p, seed);
    kiln_tensor *loss = kiln_sum_all(d->ctx, d->y);
    d->g = kiln_graph_new(d->ctx);
    return loss && !kiln_graph_add(d->g, d->y) && !kiln_graph_backward(d->g, loss);
}

/* The gradient is the mask scaled by 1/(1-p): the backward's dropout drops
 * exactly what the forward dropped (same seed, same run). */
KT_TEST(nn_dropout_grad_is_mask) {
    const int64_t n = 2000;
    const double p = 0.3;
    dropout_setup d;
    KT_REQUIRE(dropout_make(&d, n, p, 42), "set-up: %s", kiln_last_error());
    KT_OK(kiln_graph_compute(d.g));
    const double *x = kiln_tensor_data(d.x), *y = kiln_tensor_data(d.y), *gx = kiln_tensor_data(kiln_tensor_grad(d.x));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = y[i] != 0;
        kept += keep;
        KT_CHECK(!keep || fabs(y[i] - x[i] / (1 - p)) < 1e-12, "y[%lld] = %g, x = %g", (long long)i, y[i], x[i]);
        KT_CHECK(fabs(gx[i] - keep / (1 - p)) < 1e-12, "grad[%lld] = %g, y = %g", (long long)i, gx[i], y[i]);
    }
    KT_CHECK(kept > 0 && kept < n, "kept %lld of %lld", (long long)kept, (long long)n);
    kiln_ctx_free(d.ctx);
}

/* A new mask each compute; gradients accumulate each run's own mask. */
KT_TEST(nn_dropout_mask_changes_between_runs) {
    const int64_t n = 1000;
    const double p = 0.5;
    dropout_setup d;
    KT_REQUIRE(dropout_make(&d, n, p, 7), "set-up: %s", kiln_last_error());
    bool *m1 = malloc((size_t)n);
    KT_REQUIRE(m1, "out of memory");
    KT_OK(kiln_graph_compute(d.g));
    const double *y = kiln_tensor_data(d.y), *gx = kiln_tensor_data(kiln_tensor_grad(d.x));
    for (int64_t i = 0; i < n; i++) m1[i] = y[i] != 0;
    KT_OK(kiln_graph_compute(d.g));
    int64_t changed = 0;
    for (int64_t i = 0; i < n; i++) {
        bool m2 = y[i] != 0;
        changed += m2 != m1[i];
        double want = (m1[i] + m2) / (1 - p);
        KT_CHECK(fabs(gx[i] - want) < 1e-12, "accumulated grad[%lld] = %g, want %g", (long long)i, gx[i], want);
    }
    KT_CHECK(changed > n / 4, "only %lld of %lld mask entries changed between runs", (long long)changed, (long long)n);
    free(m1);
    kiln_ctx_free(d.ctx);
}

/* Keep rate and mean on 10^5 elements (threaded path), f32. */
KT_TEST(nn_dropout_keep_rate) {
    const int64_t n = 100000;
    const double p = 0.25;
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_1d(ctx, KILN_F32, n);
    KT_OK(kiln_tensor_fill(x, 1.0));
    kiln_tensor *y = kiln_dropout(ctx, x, p, 1234), *y2 = kiln_dropout(ctx, x, p, 1235);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_add(g, y2));
    KT_OK(kiln_graph_compute(g));
    const float *v = kiln_tensor_data(y), *v2 = kiln_tensor_data(y2);
    int64_t kept = 0, same = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        kept += v[i] != 0;
        same += (v[i] != 0) == (v2[i] != 0);
        sum += v[i];
        KT_CHECK(v[i] == 0 || fabsf(v[i] - 1.0f / 0.75f) < 1e-6f, "y[%lld] = %g", (long long)i, v[i]);
    }
    /* the standard deviation of the rate is 0.0014: 0.01 is 7 of them */
    KT_CHECK(fabs((double)kept / n - (1 - p)) < 0.01, "keep rate %g, want %g", (double)kept / n, 1 - p);
    KT_CHECK(fabs(sum / n - 1.0) < 0.02, "mean %g, want about 1", sum / n);
    /* two seeds agree only as often as independent masks do (0.625) */
    KT_CHECK(fabs((double)same / n - 0.625) < 0.01, "masks of two seeds agree on %g", (double)same / n);
    kiln_ctx_free(ctx);
}

KT_TEST(nn_dropout_eval_is_identity) {
    const int64_t n = 500;
    dropout_setup d;
    KT_REQUIRE(dropout_make(&d, n, 0.6, 9), "set-up: %s", kiln_last_error());
    kiln_graph_set_training(d.g, false);
    KT_OK(kiln_graph_compute(d.g));
    const double *x = kiln_tensor_data(d.x), *y = kiln_tensor_data(d.y), *gx = kiln_tensor_data(kiln_tensor_grad(d.x));
    for (int64_t i = 0; i < n; i++) {
        KT_CHECK(y[i] == x[i], "eval y[%lld] = %g, x = %g", (long long)i, y[i], x[i]);
        KT_CHECK(gx[i] == 1.0, "eval grad[%lld] = %g", (long long)i, gx[i]);
    }
    /* and back to training drops again */
    kiln_graph_set_training(d.g, true);
    KT_OK(kiln_graph_compute(d.g));
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; i++) dropped += y[i] == 0;
    KT_CHECK(dropped > n / 2, "training again dropped only %lld of %lld", (long long)dropped, (long long)n);
    kiln_ctx_free(d.ctx);
}

KT_TEST(nn_dropout_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3), *xi = kiln_new_1d(ctx, KILN_I32, 3);
    KT_CHECK(kiln_dropout(ctx, x, 0.0, 1) == x, "p = 0 must return x itself");
    NNT_FAILS(kiln_dropout(ctx, x, 1.0, 1), KILN_ERR_ARG, "kiln_dropout");
    NNT_FAILS(kiln_dropout(ctx, x, -0.1, 1), KILN_ERR_ARG, "kiln_dropout");
    NNT_FAILS(kiln_dropout(ctx, x, NAN, 1), KILN_ERR_ARG, "kiln_dropout");
    NNT_FAILS(kiln_dropout(ctx, xi, 0.5, 1), KILN_ERR_DTYPE, "kiln_dropout");
    KT_CHECK(!kiln_dropout(ctx, NULL, 0.5, 1) && strstr(kiln_last_error(), "kiln_dropout: x"),
             "NULL input replaced the error: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}
