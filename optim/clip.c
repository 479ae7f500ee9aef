/* clip.c — global-norm gradient clipping (kiln_optim_set_clip_grad_norm),
 * torch.nn.utils.clip_grad_norm_'s rule, for gradients on any backend.
 *
 * Why two small graphs of ordinary ops rather than host loops or a grad
 * scale in every step kernel: the graphs run where the optimizer's graph
 * runs (the Vulkan backend has every op they use), so gradients on a device
 * stay there and only n_params sums of squares come back to the host; and
 * the step kernels of SGD/Adam/Lion (CPU and Vulkan) stay untouched, so
 * unclipped steps are bit for bit what they were.
 *   norm graph:  sq_i = sum(g_i * g_i), one [n] vector (concat) when all
 *                gradients share a dtype, else one output each; the host
 *                adds them in double: norm = sqrt(sum sq_i). A non-finite
 *                sq_i names its parameter.
 *   scale graph: g_i += g_i * (coef - 1), in place (an ACC_GRAD node over a
 *                product, as the backward pass adds into gradients);
 *                coef = max_norm / (norm + 1e-6), less 1, goes into a leaf
 *                [1] per dtype each time, not into a node's parameters, so
 *                the graph is built once and a device replays its
 *                recording at every clipped step. It runs only
 *                when coef < 1 (torch multiplies by min(coef, 1): by 1 the
 *                gradients keep their bits, as here). g + g * (coef - 1)
 *                is within a rounding or two of torch's g * coef. */
#include "optim_impl.h"
#include "graph.h"

#include <math.h>
#include <stdlib.h>

kiln_status kiln__optim_check_clip(float max_norm, kiln_status bad, const char *who) {
    if (!kiln__finite_nonneg(max_norm))
        return kiln__errs(bad, "%s: invalid max_norm %g (must be finite and >= 0)", who, (double)max_norm);
    return KILN_OK;
}

kiln_status kiln_optim_set_clip_grad_norm(kiln_optim *opt, float max_norm) {
    if (!opt) return kiln__errs(KILN_ERR_ARG, "kiln_optim_set_clip_grad_norm: optimizer is NULL");
    kiln_status s = kiln__optim_check_clip(max_norm, KILN_ERR_ARG, "kiln_optim_set_clip_grad_norm");
    if (s) return s;
    if (opt->forward_only && max_norm != 0.0f)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "kiln_optim_set_clip_grad_norm: %s has no gradients to clip",
                          opt->impl->name);
    opt->clip_max_norm = max_norm;
    return KILN_OK;
}

float kiln_optim_last_grad_norm(const kiln_optim *opt) { return opt ? opt->last_grad_norm : -1.0f; }
int64_t kiln_optim_skipped_steps(const kiln_optim *opt) { return opt ? opt->skipped_steps : 0; }

bool kiln__optim_one_dtype(const kiln_optim *opt) {
    for (int i = 1; i < opt->n_params; i++)
        if (opt->params[i]->dtype != opt->params[0]->dtype) return false;
    return true;
}

static kiln_status build_norm_graph(kiln_optim *opt) {
    kiln_ctx *ctx = opt->ctx;
    int n = opt->n_params;
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_tensor **sq = kiln__arena_alloc(ctx, (size_t)n * sizeof *sq);
    if (!g || !sq) return kiln_last_status();
    g->backend = opt->graph->backend;
    for (int i = 0; i < n; i++) {
        kiln_tensor *gr = opt->params[i]->grad;
        if (!(sq[i] = kiln_sum_all(ctx, kiln_mul(ctx, gr, gr)))) return kiln_last_status();
    }
    kiln_status s = KILN_OK;
    if (kiln__optim_one_dtype(opt)) { /* one vector: one read back */
        kiln_tensor *all = kiln_concat(ctx, sq, n, 0);
        if ((s = kiln_graph_add(g, all))) return s;
        opt->grad_sq = kiln__arena_alloc(ctx, sizeof *opt->grad_sq);
        if (!opt->grad_sq) return kiln_last_status();
        opt->grad_sq[0] = all;
    } else {
        for (int i = 0; i < n && !s; i++) s = kiln_graph_add(g, sq[i]);
        if (s) return s;
        opt->grad_sq = sq;
    }
    opt->norm_graph = g;
    return KILN_OK;
}

static kiln_status build_scale_graph(kiln_optim *opt) {
    kiln_ctx *ctx = opt->ctx;
    int n = opt->n_params;
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_tensor **coef = kiln__arena_alloc(ctx, (size_t)n * sizeof *coef);
    if (!g || !coef) return kiln_last_status();
    g->backend = opt->graph->backend;
    for (int i = 0; i < n; i++) {
        kiln_tensor *gr = opt->params[i]->grad;
        coef[i] = NULL;
        for (int j = 0; j < i && !coef[i]; j++)
            if (coef[j]->dtype == gr->dtype) coef[i] = coef[j];
        if (!coef[i] && !(coef[i] = kiln_new_1d(ctx, gr->dtype, 1))) return kiln_last_status();
        kiln_tensor *src[2] = {gr, kiln_mul(ctx, gr, coef[i])};
        if (!src[1]) return kiln_last_status();
        kiln_tensor *acc = kiln__node_new(ctx, KILN_OP_ACC_GRAD, gr->dtype, gr->ndim, gr->shape, 2, src);
        if (!acc) return kiln_last_status();
        acc->flags &= ~(uint32_t)KILN_FLAG_REQUIRES_GRAD;
        acc->view_src = gr;
        kiln_status s = kiln_graph_add(g, acc);
        if (s) return s;
    }
    opt->scale_coef = coef;
    opt->scale_graph = g;
    return KILN_OK;
}

/* The sums of squares, in parameter order, read back from the norm graph. */
static kiln_status read_sq(kiln_optim *opt, double *sq) {
    int n = opt->n_params;
    if (kiln__optim_one_dtype(opt)) return kiln_tensor_get_f64(opt->grad_sq[0], sq, n);
    for (int i = 0; i < n; i++) {
        kiln_status s = kiln_tensor_get_f64(opt->grad_sq[i], &sq[i], 1);
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status kiln__optim_clip(kiln_optim *opt) {
    if (opt->clip_max_norm == 0.0f) return KILN_OK;
    kiln_status s;
    if (!opt->norm_graph && (s = build_norm_graph(opt))) return s;
    if ((s = kiln_graph_compute(opt->norm_graph))) return s;
    double *sq = kiln__malloc((size_t)opt->n_params * sizeof *sq);
    if (!sq) return kiln__errs(KILN_ERR_OOM, "kiln_optim_step: out of memory");
    if ((s = read_sq(opt, sq))) {
        free(sq);
        return s;
    }
    double total = 0.0;
    int bad = -1;
    for (int i = 0; i < opt->n_params; i++) {
        if (bad < 0 && !isfinite(sq[i])) bad = i;
        total += sq[i];
    }
    free(sq);
    double norm = sqrt(total);
    opt->last_grad_norm = (float)norm;
    if (bad >= 0 || !isfinite(norm))
        return kiln__optim_skip(opt, "gradient of '%s' is not finite (norm %g)", opt->params[bad >= 0 ? bad : 0]->name,
                                norm);
    double coef = (double)opt->clip_max_norm / (norm + 1e-6);
    if (coef >= 1.0) return KILN_OK;
    if (!opt->scale_graph && (s = build_scale_graph(opt))) return s;
    const double c1 = coef - 1.0;
    for (int i = 0; i < opt->n_params; i++) /* a leaf shared by a dtype is written again: a few bytes */
        if ((s = kiln_tensor_set_f64(opt->scale_coef[i], &c1, 1))) return s;
    return kiln_graph_compute(opt->scale_graph);
}
