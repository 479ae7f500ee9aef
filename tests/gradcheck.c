/* gradcheck.c — see gradcheck.h. */
#include "gradcheck.h"

#include <string.h>

#define GC_MAX_IN 8
#define GC_MAX_ELEMS 48 /* elements checked per input (sampled beyond that) */

static double loss_value(kiln_graph *g, kiln_tensor *loss) {
    if (kiln_graph_compute(g)) return NAN;
    return kiln_tensor_item(loss);
}

bool gc_check(const char *what, gc_build build, void *arg, int n, const gc_input *in, uint64_t seed) {
    bool ok = false;
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x[GC_MAX_IN] = {0};
    if (!ctx || n > GC_MAX_IN) {
        kt_fail(__FILE__, __LINE__, "%s: set-up failed", what);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        kiln_dtype dt = in[i].is_index ? KILN_I32 : KILN_F64;
        x[i] = kiln_tensor_new(ctx, dt, in[i].ndim, in[i].shape);
        if (!x[i]) goto fail;
        int64_t m = kiln_tensor_numel(x[i]);
        if (in[i].is_index) {
            int32_t *d = kiln_tensor_data(x[i]);
            for (int64_t j = 0; j < m; j++)
                d[j] = in[i].ivalues ? in[i].ivalues[j]
                                     : (int32_t)(((uint64_t)j * 2654435761u + seed) % (uint64_t)(in[i].hi > 0 ? in[i].hi : 2));
            continue;
        }
        if (in[i].values) memcpy(kiln_tensor_data(x[i]), in[i].values, (size_t)m * sizeof(double));
        else {
            double lo = in[i].lo, hi = in[i].hi;
            if (lo == 0 && hi == 0) lo = -1, hi = 1;
            kiln_tensor_fill_uniform(x[i], seed * 131 + (uint64_t)i, lo, hi);
        }
        if (!in[i].no_grad && kiln_tensor_set_requires_grad(x[i], true)) goto fail;
    }
    kiln_tensor *out = build(ctx, x, arg);
    if (!out) goto fail;
    kiln_tensor *r = kiln_tensor_new(ctx, KILN_F64, kiln_tensor_ndim(out), kiln_tensor_shape(out));
    if (!r || kiln_tensor_fill_uniform(r, seed + 7, 0.5, 1.5)) goto fail;
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, out, r));
    kiln_graph *gb = kiln_graph_new(ctx), *gf = kiln_graph_new(ctx);
    if (!loss || !gb || !gf || kiln_graph_add(gb, loss) || kiln_graph_backward(gb, loss) || kiln_graph_add(gf, loss) ||
        kiln_graph_compute(gb))
        goto fail;
    ok = true;
    for (int i = 0; i < n; i++) {
        if (in[i].no_grad || in[i].is_index) continue;
        int64_t m = kiln_tensor_numel(x[i]);
        double *xv = kiln_tensor_data(x[i]);
        const double *gv = kiln_tensor_data(kiln_tensor_grad(x[i]));
        int64_t step = m > GC_MAX_ELEMS ? m / GC_MAX_ELEMS : 1;
        for (int64_t j = (int64_t)(seed % (uint64_t)step); j < m; j += step) {
            double x0 = xv[j], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
            xv[j] = x0 + h;
            double lp = loss_value(gf, loss);
            xv[j] = x0 - h;
            double lm = loss_value(gf, loss);
            xv[j] = x0;
            double num = (lp - lm) / (2 * h), a = gv[j];
            if (!(fabs(a - num) <= 1e-6 + 1e-5 * fabs(num))) {
                kt_fail(__FILE__, __LINE__, "%s: input %d element %lld: backward gives %.10g, finite differences %.10g",
                        what, i, (long long)j, a, num);
                ok = false;
                goto done;
            }
        }
    }
    goto done;
fail:
    kt_fail(__FILE__, __LINE__, "%s: %s", what, kiln_last_error());
done:
    kiln_ctx_free(ctx);
    return ok;
}
