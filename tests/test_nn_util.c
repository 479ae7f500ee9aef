/* test_nn_util.c — see test_nn_util.h. */
#include "test_nn_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NNT_MAX_IN 8

bool nnt_close(const char *what, const double *got, const double *want, int64_t n, double atol, double rtol) {
    for (int64_t i = 0; i < n; i++) {
        if ((isinf(want[i]) && got[i] == want[i]) || (isnan(want[i]) && isnan(got[i]))) continue;
        double err = fabs(got[i] - want[i]);
        if (!(err <= atol + rtol * fabs(want[i]))) { /* also catches NaN */
            kt_fail(__FILE__, __LINE__, "%s: element %lld is %.17g, want %.17g (error %.3g)", what, (long long)i,
                    got[i], want[i], err);
            return false;
        }
    }
    return true;
}

bool nnt_same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    for (int ca = 0, cb = 0; same && ca != EOF; same = ca == cb) ca = fgetc(fa), cb = fgetc(fb);
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

void nnt_fill_ints(kiln_tensor *t, int n, uint32_t salt) {
    int64_t c = kiln_tensor_numel(t);
    int32_t *v = malloc((size_t)c * sizeof *v);
    for (int64_t i = 0; i < c; i++) v[i] = (int32_t)(((uint32_t)i * 2654435761u + salt * 40503u) % (uint32_t)n);
    kiln_tensor_set_i32(t, v, c);
    free(v);
}

char *nnt_snapshot(kiln_tensor *const *t, int n, size_t *size) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += kiln_tensor_nbytes(t[i]);
    char *s = malloc(total ? total : 1), *p = s;
    for (int i = 0; s && i < n; i++) {
        memcpy(p, kiln_tensor_data(t[i]), kiln_tensor_nbytes(t[i]));
        p += kiln_tensor_nbytes(t[i]);
    }
    *size = total;
    return s;
}

double *nnt_values(const kiln_tensor *t) {
    int64_t n = kiln_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (v && kiln_tensor_get_f64(t, v, n)) {
        free(v);
        return NULL;
    }
    return v;
}

double *nnt_eval(kiln_ctx *ctx, kiln_tensor *y) {
    kiln_graph *g = kiln_graph_new(ctx);
    double *v = y && g && !kiln_graph_add(g, y) && !kiln_graph_compute(g) ? nnt_values(y) : NULL;
    if (!v) kt_fail(__FILE__, __LINE__, "computing %s: %s", y ? kiln_op_name_of(y) : "NULL", kiln_last_error());
    return v;
}

static bool is_index(const char *name) { return !strcmp(name, "pos") || !strcmp(name, "labels"); }

/* A leaf holding fixture tensor ft (index inputs as i32). */
static kiln_tensor *leaf_of(kiln_ctx *ctx, const fx_tensor *ft, kiln_dtype dt, bool index) {
    kiln_tensor *t = kiln_tensor_new(ctx, index ? KILN_I32 : dt, ft->ndim, ft->shape);
    if (!t) return NULL;
    if (!index) return kiln_tensor_set_f64(t, ft->v, ft->n) ? NULL : t;
    int32_t *iv = malloc((size_t)ft->n * sizeof *iv);
    if (!iv) return NULL;
    for (int64_t i = 0; i < ft->n; i++) iv[i] = (int32_t)ft->v[i];
    kiln_status s = kiln_tensor_set_i32(t, iv, ft->n);
    free(iv);
    return s ? NULL : t;
}

/* got (a computed tensor) against fixture tensor want: shape and values. */
static void compare(const char *what, const kiln_tensor *got, const fx_tensor *want, double tol) {
    if (!got || kiln_tensor_ndim(got) != want->ndim || kiln_tensor_numel(got) != want->n) {
        kt_fail(__FILE__, __LINE__, "%s: shape differs from the fixture's", what);
        return;
    }
    for (int d = 0; d < want->ndim; d++)
        if (kiln_tensor_dim(got, d) != want->shape[d]) {
            kt_fail(__FILE__, __LINE__, "%s: dim %d is %lld, want %lld", what, d, (long long)kiln_tensor_dim(got, d),
                    (long long)want->shape[d]);
            return;
        }
    double *v = nnt_values(got);
    if (!v) {
        kt_fail(__FILE__, __LINE__, "%s: cannot read values: %s", what, kiln_last_error());
        return;
    }
    nnt_close(what, v, want->v, want->n, tol, tol);
    free(v);
}

static bool has_inf(const fx_tensor *t) {
    for (int64_t i = 0; i < t->n; i++)
        if (isinf(t->v[i])) return true;
    return false;
}

/* A float input the fixture gives no gradient for (batch norm's running
 * statistics in eval mode): a constant. */
static bool is_const(const fx_case *c, const char *name) {
    char gname[40];
    snprintf(gname, sizeof gname, "g%s", name);
    return !fx_tensor_get(c, gname);
}

void nnt_fixture(const char *path, const char *name, const char *const *inputs, nnt_build build, kiln_dtype dt,
                 double tol, double grad_tol) {
    char what[160];
    fx_file *f = fx_load(path);
    const fx_case *c = f ? fx_find(f, name) : NULL;
    const fx_tensor *fy = c ? fx_tensor_get(c, "y") : NULL, *fgy = c ? fx_tensor_get(c, "gy") : NULL;
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *in[NNT_MAX_IN] = {0};
    int n = 0;
    if (!fy || !fgy || !ctx) {
        kt_fail(__FILE__, __LINE__, "%s: case %s (with y and gy) not found", path, name);
        goto done;
    }
    for (; inputs[n]; n++) {
        const fx_tensor *ft = fx_tensor_get(c, inputs[n]);
        if (n == NNT_MAX_IN || !ft) {
            kt_fail(__FILE__, __LINE__, "%s: case %s has no input %s", path, name, inputs[n]);
            goto done;
        }
        bool index = is_index(inputs[n]);
        if (!(in[n] = leaf_of(ctx, ft, dt, index)) ||
            (!index && !is_const(c, inputs[n]) && grad_tol > 0 && kiln_tensor_set_requires_grad(in[n], true))) {
            kt_fail(__FILE__, __LINE__, "%s: %s", name, kiln_last_error());
            goto done;
        }
    }
    kiln_tensor *y = build(ctx, c, in);
    kiln_graph *g = kiln_graph_new(ctx);
    if (!y || kiln_graph_add(g, y)) {
        kt_fail(__FILE__, __LINE__, "%s: build failed: %s", name, kiln_last_error());
        goto done;
    }
    if (grad_tol > 0) {
        /* loss = sum(y * gy); where y is -inf (masked log_softmax) gy is 0,
         * and masked_fill makes those terms 0 instead of NaN */
        kiln_tensor *gy = leaf_of(ctx, fgy, dt, false), *yy = y;
        if (has_inf(fy)) yy = kiln_masked_fill(ctx, y, kiln_cmp(ctx, gy, kiln_scalar(ctx, dt, 0), KILN_CMP_EQ), 0.0);
        kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, yy, gy));
        if (!loss || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss)) {
            kt_fail(__FILE__, __LINE__, "%s: backward failed: %s", name, kiln_last_error());
            goto done;
        }
    }
    if (kiln_graph_compute(g)) {
        kt_fail(__FILE__, __LINE__, "%s: compute failed: %s", name, kiln_last_error());
        goto done;
    }
    snprintf(what, sizeof what, "%s (%s) y", name, kiln_dtype_name(dt));
    compare(what, y, fy, tol);
    for (int i = 0; i < n && grad_tol > 0; i++) {
        if (is_index(inputs[i]) || is_const(c, inputs[i])) continue;
        char gname[40];
        snprintf(gname, sizeof gname, "g%s", inputs[i]);
        const fx_tensor *fg = fx_tensor_get(c, gname);
        snprintf(what, sizeof what, "%s (%s) %s", name, kiln_dtype_name(dt), gname);
        if (!fg) kt_fail(__FILE__, __LINE__, "%s: not in the fixture", what);
        else compare(what, kiln_tensor_grad(in[i]), fg, grad_tol);
    }
done:
    kiln_ctx_free(ctx);
    fx_free(f);
}

void nnt_conv_grads(kiln_dtype dt, const int64_t *xs, const int64_t *ws, const kiln_conv2d_params *p, int threads,
                    double *out[3], int64_t num[3]) {
    KT_OK(kiln_set_threads(threads));
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, dt, xs[0], xs[1], xs[2], xs[3]);
    kiln_tensor *w = kiln_new_4d(ctx, dt, ws[0], ws[1], ws[2], ws[3]);
    KT_NOTNULL(x && w);
    KT_OK(kiln_tensor_fill_uniform(x, 1, -1, 1));
    KT_OK(kiln_tensor_fill_uniform(w, 2, -1, 1));
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    KT_OK(kiln_tensor_set_requires_grad(w, true));
    kiln_tensor *y = kiln_conv2d(ctx, x, w, NULL, p);
    KT_NOTNULL(y);
    const int64_t *ys = kiln_tensor_shape(y);
    kiln_tensor *r = kiln_new_4d(ctx, dt, ys[0], ys[1], ys[2], ys[3]);
    KT_NOTNULL(r);
    KT_OK(kiln_tensor_fill_uniform(r, 3, -1, 1));
    int64_t ny = kiln_tensor_numel(y);
    kiln_tensor *loss = kiln_sum(ctx, kiln_reshape(ctx, kiln_mul(ctx, y, r), 1, &ny), 0, false);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(loss && g);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    const kiln_tensor *t[3] = {y, kiln_tensor_grad(x), kiln_tensor_grad(w)};
    for (int i = 0; i < 3; i++) out[i] = nnt_values(t[i]), num[i] = kiln_tensor_numel(t[i]);
    kiln_ctx_free(ctx);
    KT_OK(kiln_set_threads(0));
    KT_NOTNULL(out[0] && out[1] && out[2]);
}
