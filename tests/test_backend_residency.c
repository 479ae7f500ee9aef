/* test_backend_residency.c — where a tensor's current bytes live when graphs
 * run on a device backend, through the public API only: parameters updated
 * on the device read back on the host, host writes (kiln_tensor_set_f32,
 * writes through kiln_tensor_data) reach the next compute, outputs read
 * with kiln_tensor_item and kiln_tensor_data, kiln_zero_grad on device
 * gradients, and two graphs of one context on different backends sharing
 * parameters. Each scenario runs twice, all on the CPU and with the device,
 * records every value it reads and checks some against values worked out by
 * hand; the device's record must match the CPU's. */
#include "backend_ops_util.h"

#define REC_MAX 4096

typedef struct rec {
    double v[REC_MAX];
    int n;
} rec;

static void rec_f32(rec *r, const float *v, int64_t n) {
    for (int64_t i = 0; i < n && r->n < REC_MAX; i++) r->v[r->n++] = v[i];
}
/* t's values through kiln_tensor_get_f32 (the host read under test) */
static void rec_tensor(rec *r, const kiln_tensor *t) {
    float buf[256];
    int64_t n = kiln_tensor_numel(t);
    if (n > 256 || kiln_tensor_get_f32(t, buf, n)) {
        kt_fail(__FILE__, __LINE__, "reading %s: %s", kiln_tensor_name(t), kiln_last_error());
        return;
    }
    rec_f32(r, buf, n);
}
static void rec_value(rec *r, double v) {
    if (r->n < REC_MAX) r->v[r->n++] = v;
}

typedef void (*scenario)(kiln_backend *dev, rec *r);

/* Run f on the CPU, then on each device backend; the records must agree. */
static void twin(const char *name, scenario f) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    if (!nb) return;
    rec *ref = calloc(1, sizeof *ref), *got = calloc(1, sizeof *got);
    KT_NOTNULL(ref);
    KT_NOTNULL(got);
    f(NULL, ref);
    for (int i = 0; i < nb; i++) {
        int64_t vmsg = kiln_backend_validation_messages(bs[i]);
        got->n = 0;
        f(bs[i], got);
        double e = got->n == ref->n ? bo_error_values(got->v, ref->v, ref->n) : INFINITY;
        if (getenv("KILN_TEST_VERBOSE"))
            printf("    %-26s %-7s %d values, error %.1e\n", name, kiln_backend_name(bs[i]), ref->n, e);
        KT_CHECK(got->n == ref->n, "%s on %s: %d values read, %d on the CPU", name, kiln_backend_name(bs[i]), got->n,
                 ref->n);
        KT_CHECK(e <= BO_TRANS, "%s on %s: values differ from the CPU's (error %.3g)", name, kiln_backend_name(bs[i]), e);
        vmsg = kiln_backend_validation_messages(bs[i]) - vmsg;
        KT_CHECK(vmsg == 0, "%s on %s: %lld validation messages", name, kiln_backend_name(bs[i]), (long long)vmsg);
    }
    free(ref);
    free(got);
}

static kiln_tensor *leaf(kiln_ctx *ctx, int64_t rows, int64_t cols, uint64_t seed) {
    kiln_tensor *t = kiln_new_2d(ctx, KILN_F32, rows, cols);
    if (t && kiln_tensor_fill_uniform(t, seed, -1, 1)) return NULL;
    return t;
}
static kiln_tensor *param(kiln_ctx *ctx, const char *name, int64_t rows, int64_t cols, uint64_t seed) {
    kiln_tensor *t = kiln_param(ctx, name, KILN_F32, 2, (int64_t[]){rows, cols});
    if (t && kiln_tensor_fill_uniform(t, seed, -0.5, 0.5)) return NULL;
    return t;
}

/* A linear model trained by SGD with momentum in a context on dev: the
 * loss, gradients before each step and the parameters after it; the step
 * leaves zero gradients. */
static void sc_param_update(kiln_backend *dev, rec *r) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, dev));
    kiln_tensor *w = param(ctx, "w", 2, 5, 1), *b = param(ctx, "b", 1, 2, 2);
    kiln_tensor *x = leaf(ctx, 6, 5, 3), *y = leaf(ctx, 6, 2, 4);
    KT_NOTNULL(w && b && x && y);
    kiln_tensor *loss = kiln_mse(ctx, kiln_add(ctx, kiln_matmul_t(ctx, x, false, w, true), b), y);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.2f, .momentum = 0.9f});
    KT_NOTNULL(opt);
    for (int k = 0; k < 3; k++) {
        KT_OK(kiln_graph_compute(g));
        rec_value(r, kiln_tensor_item(loss));
        rec_tensor(r, kiln_tensor_grad(w));
        KT_OK(kiln_optim_step(opt));
        rec_tensor(r, w);
        rec_tensor(r, b);
        float gw[10];
        KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gw, 10));
        for (int i = 0; i < 10; i++) KT_CHECK(gw[i] == 0, "step %d: w.grad[%d] = %g after the step", k, i, gw[i]);
    }
    kiln_ctx_free(ctx);
}
KT_TEST(backend_residency_param_update) { twin("param_update", sc_param_update); }

/* f(x) = 1.5 tanh(x) + x for x set before each compute */
static float f_tanh(float x) { return 1.5f * tanhf(x) + x; }

/* kiln_tensor_set_f32 between computes: on an input, and on a parameter
 * the device has just updated (the host's bytes must win). */
static void sc_set_after_compute(kiln_backend *dev, rec *r) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, dev));
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 3, 7);
    kiln_tensor *y = kiln_add(ctx, kiln_scale(ctx, kiln_tanh(ctx, x), 1.5), x);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    float xv[21], yv[21];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 21; i++) xv[i] = 0.1f * (float)(i - 10) + 0.37f * (float)k;
        KT_OK(kiln_tensor_set_f32(x, xv, 21));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_tensor_get_f32(y, yv, 21));
        rec_f32(r, yv, 21);
        for (int i = 0; i < 21; i++)
            KT_CHECK(fabsf(yv[i] - f_tanh(xv[i])) <= 1e-5f, "compute %d: y[%d] = %g, want %g", k, i, yv[i], f_tanh(xv[i]));
    }
    /* loss = sum(p * p), p stepped by SGD on dev, then overwritten on the host */
    kiln_tensor *p = param(ctx, "p", 2, 3, 5);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, p, p));
    kiln_graph *g2 = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g2, loss));
    KT_OK(kiln_graph_backward(g2, loss));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f});
    KT_NOTNULL(opt);
    for (int k = 0; k < 2; k++) {
        KT_OK(kiln_graph_compute(g2));
        KT_OK(kiln_optim_step(opt));
        const float pv[6] = {1, -2, 0.5f, 3, (float)k, -1};
        KT_OK(kiln_tensor_set_f32(p, pv, 6));
        KT_OK(kiln_graph_compute(g2));
        double want = 0;
        for (int i = 0; i < 6; i++) want += (double)pv[i] * pv[i];
        double got = kiln_tensor_item(loss);
        rec_value(r, got);
        KT_CHECK(fabs(got - want) <= 1e-5 * want, "round %d: loss %g after set_f32, want %g", k, got, want);
        KT_OK(kiln_optim_step(opt)); /* with the gradients of both computes */
        rec_tensor(r, p);
    }
    /* a fill is a host write too */
    KT_OK(kiln_graph_compute(g2));
    KT_OK(kiln_optim_step(opt));
    KT_OK(kiln_tensor_fill(p, 0.5));
    KT_OK(kiln_graph_compute(g2));
    rec_value(r, kiln_tensor_item(loss));
    KT_CHECK(kiln_tensor_item(loss) == 1.5, "loss %g after kiln_tensor_fill(p, 0.5), want 1.5", kiln_tensor_item(loss));
    /* i32 indices set between computes */
    kiln_tensor *table = leaf(ctx, 5, 3, 13), *idx = kiln_new_1d(ctx, KILN_I32, 4);
    kiln_tensor *rows = kiln_get_rows(ctx, table, idx);
    kiln_graph *g3 = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g3, rows));
    float tv[15], rv[12];
    KT_OK(kiln_tensor_get_f32(table, tv, 15));
    for (int k = 0; k < 3; k++) {
        const int32_t iv[4] = {k, 4 - k, 2, (k * 3) % 5};
        KT_OK(kiln_tensor_set_i32(idx, iv, 4));
        KT_OK(kiln_graph_compute(g3));
        KT_OK(kiln_tensor_get_f32(rows, rv, 12));
        rec_f32(r, rv, 12);
        for (int i = 0; i < 12; i++)
            KT_CHECK(rv[i] == tv[iv[i / 3] * 3 + i % 3], "compute %d: row %d col %d is %g, want %g", k, i / 3, i % 3,
                     rv[i], tv[iv[i / 3] * 3 + i % 3]);
    }
    kiln_ctx_free(ctx);
}
KT_TEST(backend_residency_set_after_compute) { twin("set_after_compute", sc_set_after_compute); }

/* Writes through kiln_tensor_data: on an input after a compute, and on a
 * parameter the device has updated (the pointer must show the update). */
static void sc_data_pointer(kiln_backend *dev, rec *r) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, dev));
    kiln_tensor *x = leaf(ctx, 4, 4, 6);
    kiln_tensor *y = kiln_scale(ctx, x, 2.0);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    rec_tensor(r, y);
    float *px = kiln_tensor_data(x);
    KT_NOTNULL(px);
    for (int i = 0; i < 16; i++) px[i] = (float)i - 5.5f;
    KT_OK(kiln_graph_compute(g));
    const float *py = kiln_tensor_data(y);
    KT_NOTNULL(py);
    rec_f32(r, py, 16);
    for (int i = 0; i < 16; i++) KT_CHECK(py[i] == 2.0f * ((float)i - 5.5f), "y[%d] = %g through kiln_tensor_data", i, py[i]);

    kiln_tensor *p = param(ctx, "p", 3, 4, 7);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, kiln_exp(ctx, p), kiln_slice(ctx, x, 0, 0, 3, 1)));
    kiln_graph *g2 = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g2, loss));
    KT_OK(kiln_graph_backward(g2, loss));
    kiln_optim *opt = kiln_adam_new(ctx, &(kiln_adam_config){.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f});
    KT_NOTNULL(opt);
    KT_OK(kiln_graph_compute(g2));
    KT_OK(kiln_optim_step(opt));
    float *pp = kiln_tensor_data(p), pg[12];
    KT_NOTNULL(pp);
    KT_OK(kiln_tensor_get_f32(p, pg, 12));
    rec_f32(r, pp, 12);
    for (int i = 0; i < 12; i++) KT_CHECK(pp[i] == pg[i], "p[%d]: %g through kiln_tensor_data, %g through get_f32", i, pp[i], pg[i]);
    for (int i = 0; i < 12; i++) pp[i] = 0.25f;
    KT_OK(kiln_graph_compute(g2));
    double want = 0, got = kiln_tensor_item(loss);
    for (int i = 0; i < 12; i++) want += exp(0.25) * ((double)i - 5.5); /* x's first 3 rows, written above */
    rec_value(r, got);
    KT_CHECK(fabs(got - want) <= 1e-5 * (1 + fabs(want)), "loss %g after writing p through kiln_tensor_data, want %g", got, want);
    kiln_ctx_free(ctx);
}
KT_TEST(backend_residency_data_pointer) { twin("data_pointer", sc_data_pointer); }

/* A graph output read with kiln_tensor_item, computed again after its input changed. */
static void sc_item(kiln_backend *dev, rec *r) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, dev));
    kiln_tensor *x = kiln_new_1d(ctx, KILN_F32, 50);
    kiln_tensor *s = kiln_sum_all(ctx, kiln_mul(ctx, x, x));
    kiln_tensor *m = kiln_max_all(ctx, x);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, s));
    KT_OK(kiln_graph_add(g, m));
    for (int k = 1; k <= 3; k++) {
        float xv[50];
        double want = 0;
        for (int i = 0; i < 50; i++) {
            xv[i] = (float)k * 0.01f * (float)(i - 20);
            want += (double)xv[i] * xv[i];
        }
        KT_OK(kiln_tensor_set_f32(x, xv, 50));
        KT_OK(kiln_graph_compute(g));
        double got = kiln_tensor_item(s), mx = kiln_tensor_item(m);
        rec_value(r, got);
        rec_value(r, mx);
        KT_CHECK(fabs(got - want) <= 1e-5 * want, "compute %d: item %g, want %g", k, got, want);
        KT_CHECK(mx == xv[49], "compute %d: max %g, want %g", k, mx, xv[49]);
    }
    kiln_ctx_free(ctx);
}
KT_TEST(backend_residency_item) { twin("item", sc_item); }

/* Gradients accumulate over computes on the device; kiln_zero_grad clears
 * them there, whether or not the host read them in between. */
static void sc_zero_grad(kiln_backend *dev, rec *r) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, dev));
    kiln_tensor *w = param(ctx, "w", 3, 5, 8), *x = leaf(ctx, 3, 5, 9);
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, w, x)); /* d loss / d w = x */
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    float xv[15], gv[15];
    KT_OK(kiln_tensor_get_f32(x, xv, 15));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gv, 15));
    rec_f32(r, gv, 15);
    for (int i = 0; i < 15; i++) KT_CHECK(gv[i] == 2 * xv[i], "two computes: grad[%d] = %g, want %g", i, gv[i], 2 * xv[i]);
    kiln_zero_grad(ctx);
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gv, 15));
    rec_f32(r, gv, 15);
    for (int i = 0; i < 15; i++) KT_CHECK(gv[i] == 0, "after kiln_zero_grad: grad[%d] = %g", i, gv[i]);
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gv, 15));
    rec_f32(r, gv, 15);
    for (int i = 0; i < 15; i++) KT_CHECK(gv[i] == xv[i], "zero then compute: grad[%d] = %g, want %g", i, gv[i], xv[i]);
    /* no host read between the compute and the zeroing */
    KT_OK(kiln_graph_compute(g));
    kiln_zero_grad(ctx);
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gv, 15));
    rec_f32(r, gv, 15);
    for (int i = 0; i < 15; i++) KT_CHECK(gv[i] == xv[i], "compute, zero, compute: grad[%d] = %g, want %g", i, gv[i], xv[i]);
    kiln_ctx_free(ctx);
}
KT_TEST(backend_residency_zero_grad) { twin("zero_grad", sc_zero_grad); }

/* One context, two graphs on two backends sharing a parameter w: a
 * training graph and an evaluation graph, and the optimizer on the
 * context's backend. train_on_dev picks which graph runs on dev. */
static void two_graphs(kiln_backend *dev, rec *r, bool train_on_dev) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, train_on_dev ? NULL : dev)); /* the optimizer follows the context */
    kiln_tensor *w = param(ctx, "w", 3, 4, 10), *x = leaf(ctx, 5, 4, 11), *y = leaf(ctx, 5, 3, 12);
    kiln_tensor *loss = kiln_mse(ctx, kiln_matmul_t(ctx, x, false, w, true), y);
    kiln_graph *train = kiln_graph_new(ctx), *eval = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(train, loss));
    KT_OK(kiln_graph_backward(train, loss));
    kiln_tensor *norm = kiln_sum_all(ctx, kiln_mul(ctx, w, w));
    KT_OK(kiln_graph_add(eval, norm));
    KT_OK(kiln_graph_set_backend(train, train_on_dev ? dev : NULL));
    KT_OK(kiln_graph_set_backend(eval, train_on_dev ? NULL : dev));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.3f, .momentum = 0.5f});
    KT_NOTNULL(opt);
    for (int k = 0; k < 3; k++) {
        KT_OK(kiln_graph_compute(train));
        rec_value(r, kiln_tensor_item(loss));
        KT_OK(kiln_optim_step(opt));
        KT_OK(kiln_graph_compute(eval));
        float wv[12];
        KT_OK(kiln_tensor_get_f32(w, wv, 12));
        double want = 0, got = kiln_tensor_item(norm);
        for (int i = 0; i < 12; i++) want += (double)wv[i] * wv[i];
        rec_f32(r, wv, 12);
        rec_value(r, got);
        KT_CHECK(fabs(got - want) <= 1e-5 * want, "step %d: the other graph sees sum(w^2) = %g, w gives %g", k, got, want);
    }
    kiln_ctx_free(ctx);
}
static void sc_train_dev(kiln_backend *dev, rec *r) { two_graphs(dev, r, true); }
static void sc_train_cpu(kiln_backend *dev, rec *r) { two_graphs(dev, r, false); }
KT_TEST(backend_residency_two_graphs_train_on_device) { twin("two_graphs_train_dev", sc_train_dev); }
KT_TEST(backend_residency_two_graphs_step_on_device) { twin("two_graphs_step_dev", sc_train_cpu); }
