/* guard.c — the non-finite guard (kiln_optim_set_skip_nonfinite): before
 * each step, a loss or gradient that holds a NaN or an infinity skips the
 * step, as torch.cuda.amp.GradScaler's step() does when unscaling found an
 * inf (without the loss scaling itself).
 *
 * The gradients are checked by small graphs of ordinary ops that run
 * where the optimizer's graph runs (as clip.c's norm graph), so only n
 * values per step come back to the host:
 *   sums:   s_i = sum(g_i), one read of each gradient. Any NaN or
 *           infinity in g_i makes s_i NaN or infinite, so when every s_i
 *           is finite every gradient is (the common case, the only cost).
 *   exact:  z_i = sum(g_i * 0), run only when some s_i is not finite: 0
 *           when every element of g_i is finite, NaN otherwise (inf * 0
 *           and NaN * 0 are NaN). It tells a sum that merely overflowed
 *           (large finite gradients, which torch.isfinite passes) from a
 *           real NaN or infinity, and names the first bad parameter.
 * The step kernels are untouched, so a guarded step with finite gradients
 * is bit for bit the unguarded one. */
#include "optim_impl.h"
#include "graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

kiln_status kiln_optim_set_skip_nonfinite(kiln_optim *opt, bool on, kiln_tensor *loss) {
    const char *who = "kiln_optim_set_skip_nonfinite";
    if (!opt) return kiln__errs(KILN_ERR_ARG, "%s: optimizer is NULL", who);
    if (opt->forward_only && on)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: %s skips a step with a non-finite loss by itself", who,
                          opt->impl->name);
    if (loss && loss->ctx != opt->ctx)
        return kiln__errs(KILN_ERR_ARG, "%s: loss '%s' belongs to another context", who, loss->name);
    if (loss && !kiln__is_compute_float(loss->dtype))
        return kiln__errs(KILN_ERR_DTYPE, "%s: loss '%s' is %s, not a float tensor", who, loss->name,
                          kiln_dtype_name(loss->dtype));
    opt->guard = on;
    opt->guard_loss = on ? loss : NULL;
    return KILN_OK;
}

kiln_status kiln__optim_skip(kiln_optim *opt, const char *fmt, ...) {
    for (int i = 0; i < opt->n_params; i++) {
        kiln_status s = kiln__tensor_zero(opt->params[i]->grad);
        if (s) return s;
    }
    opt->skipped_steps++;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return kiln__errs(KILN_ERR_NUMERIC, "kiln_optim_step: %s; step skipped", why);
}

/* One value per gradient: sum(g), or with exact sum(g * 0). */
static kiln_status build_graph(kiln_optim *opt, bool exact) {
    kiln_ctx *ctx = opt->ctx;
    int n = opt->n_params;
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_tensor **z = kiln__arena_alloc(ctx, (size_t)n * sizeof *z);
    if (!g || !z) return kiln_last_status();
    g->backend = opt->graph->backend;
    for (int i = 0; i < n; i++) {
        kiln_tensor *gr = opt->params[i]->grad;
        if (!(z[i] = kiln_sum_all(ctx, exact ? kiln_scale(ctx, gr, 0.0) : gr))) return kiln_last_status();
    }
    kiln_status s = KILN_OK;
    if (kiln__optim_one_dtype(opt)) { /* one vector: one read back */
        kiln_tensor *all = kiln_concat(ctx, z, n, 0);
        if ((s = kiln_graph_add(g, all))) return s;
        if (!(z = kiln__arena_alloc(ctx, sizeof *z))) return kiln_last_status();
        z[0] = all;
    } else {
        for (int i = 0; i < n && !s; i++) s = kiln_graph_add(g, z[i]);
        if (s) return s;
    }
    opt->guard_graph[exact] = g;
    opt->guard_sums[exact] = z;
    return KILN_OK;
}

/* The values of the sum (or exact) graph, one per parameter. */
static kiln_status run_graph(kiln_optim *opt, bool exact, double *z) {
    kiln_status s;
    if (!opt->guard_graph[exact] && (s = build_graph(opt, exact))) return s;
    if ((s = kiln_graph_compute(opt->guard_graph[exact]))) return s;
    kiln_tensor **out = opt->guard_sums[exact];
    if (kiln__optim_one_dtype(opt)) return kiln_tensor_get_f64(out[0], z, opt->n_params);
    for (int i = 0; i < opt->n_params && !s; i++) s = kiln_tensor_get_f64(out[i], &z[i], 1);
    return s;
}

/* Index of the first parameter whose gradient is not finite, -1 if none.
 * The plain sums first (one read of each gradient): a NaN or an infinity
 * makes its sum non-finite, so all finite sums clear every gradient. A
 * non-finite sum may also be a finite gradient whose sum overflowed: the
 * exact graph then decides, and names the parameter. */
static kiln_status first_bad(kiln_optim *opt, int *bad) {
    *bad = -1;
    int n = opt->n_params;
    double *z = kiln__malloc((size_t)n * sizeof *z);
    if (!z) return kiln__errs(KILN_ERR_OOM, "kiln_optim_step: out of memory");
    kiln_status s = run_graph(opt, false, z);
    bool suspect = false;
    for (int i = 0; i < n && !s; i++) suspect |= !isfinite(z[i]);
    if (!s && suspect) s = run_graph(opt, true, z);
    for (int i = 0; i < n && !s && suspect && *bad < 0; i++)
        if (z[i] != 0.0) *bad = i; /* NaN: g * 0 is NaN only for NaN and infinities */
    free(z);
    return s;
}

/* The loss's first non-finite element (the loss is usually one value). */
static kiln_status loss_check(kiln_optim *opt, bool *finite, double *value) {
    int64_t n = kiln_tensor_numel(opt->guard_loss);
    double one, *v = n == 1 ? &one : kiln__malloc((size_t)n * sizeof *v);
    if (!v) return kiln__errs(KILN_ERR_OOM, "kiln_optim_step: out of memory");
    kiln_status s = kiln_tensor_get_f64(opt->guard_loss, v, n);
    *finite = true;
    for (int64_t i = 0; i < n && !s && *finite; i++)
        if (!isfinite(v[i])) {
            *finite = false;
            *value = v[i];
        }
    if (v != &one) free(v);
    return s;
}

kiln_status kiln__optim_guard(kiln_optim *opt) {
    if (!opt->guard) return KILN_OK;
    kiln_status s;
    if (opt->guard_loss) {
        bool finite;
        double v = 0;
        if ((s = loss_check(opt, &finite, &v))) return s;
        if (!finite) return kiln__optim_skip(opt, "loss is not finite (%g)", v);
    }
    int bad = -1;
    if ((s = first_bad(opt, &bad))) return s;
    if (bad >= 0) return kiln__optim_skip(opt, "gradient of '%s' is not finite", opt->params[bad]->name);
    return KILN_OK;
}
