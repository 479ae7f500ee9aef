/* sgd.c — stochastic gradient descent with momentum, dampening, Nesterov
 * momentum and L2 weight decay, exactly as torch.optim.SGD.
 *
 * One KILN_OP_SGD_STEP node per parameter p, in place into p:
 *   src: p, p's gradient, [the momentum buffer (a leaf shaped like p; only
 *        when momentum != 0)], hyper (f32 [4]: lr, momentum, dampening,
 *        weight_decay, written by kiln_optim_step before each step)
 *   ip[0] = nesterov, ip[1] = has_momentum,
 *   ip[2] = 0 on the first step, 1 after, written by kiln_optim_step; the
 *           kernel uses it for torch's first-step rule (a flag, not the
 *           step count: the graph's replay key changes once, not at every
 *           step).
 * Per element (backends/cpu/optim.c):
 *   g = grad + weight_decay * p                         (if weight_decay != 0)
 *   buf = g on the first step, else momentum * buf + (1 - dampening) * g
 *   g = nesterov ? g + momentum * buf : buf              (if momentum != 0)
 *   p -= lr * g
 */
#include "optim_impl.h"

#include <math.h>

enum { SGD_LR, SGD_MOMENTUM, SGD_DAMPENING, SGD_WEIGHT_DECAY, SGD_N_HYPER };

static void sgd_prepare(kiln_optim *opt, float *hyper) {
    const kiln_sgd_config *cfg = opt->cfg;
    hyper[SGD_LR] = opt->lr;
    hyper[SGD_MOMENTUM] = cfg->momentum;
    hyper[SGD_DAMPENING] = cfg->dampening;
    hyper[SGD_WEIGHT_DECAY] = cfg->weight_decay;
    for (int i = 0; i < opt->n_params; i++) opt->nodes[i]->ip[2] = opt->steps > 0;
}

static const kiln_optim_impl sgd_impl = {"kiln_sgd", SGD_N_HYPER, sgd_prepare};

void kiln__sgd_register(kiln_op_info *tab) {
    tab[KILN_OP_SGD_STEP] = (kiln_op_info){"sgd_step", KILN_KIND_INPLACE, NULL};
}


/* The checks torch.optim.SGD makes, with its wording. */
static kiln_status check_config(const char *who, const kiln_sgd_config *c) {
    if (!c) return kiln__errs(KILN_ERR_ARG, "%s: config is NULL", who);
    if (!kiln__finite_nonneg(c->lr))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid learning rate: %g (must be >= 0)", who, (double)c->lr);
    if (!kiln__finite_nonneg(c->momentum))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid momentum value: %g (must be >= 0)", who, (double)c->momentum);
    if (!(c->dampening == c->dampening) || isinf(c->dampening))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid dampening value: %g", who, (double)c->dampening);
    if (!kiln__finite_nonneg(c->weight_decay))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid weight_decay value: %g (must be >= 0)", who,
                          (double)c->weight_decay);
    if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
        return kiln__errs(KILN_ERR_ARG,
                          "%s: Nesterov momentum requires a momentum and zero dampening (momentum %g, dampening %g)",
                          who, (double)c->momentum, (double)c->dampening);
    return KILN_OK;
}

static kiln_optim *sgd_new(kiln_ctx *ctx, const char *who, kiln_tensor *const *params, int n,
                           const kiln_sgd_config *cfg) {
    if (check_config(who, cfg)) return NULL;
    kiln_optim *opt = kiln__optim_new(ctx, who, &sgd_impl, params, n, cfg->lr);
    if (!opt) return NULL;
    kiln_sgd_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = *cfg;
    opt->cfg = own;
    bool has_momentum = cfg->momentum != 0.0f;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *p = opt->params[i], *srcs[4] = {p, p->grad};
        int nsrc = 2;
        if (has_momentum && !(srcs[nsrc++] = kiln__optim_state(opt, p, "momentum_buffer"))) return NULL;
        srcs[nsrc++] = opt->hyper;
        kiln_tensor *t = kiln__optim_step_node(opt, i, KILN_OP_SGD_STEP, nsrc, srcs);
        if (!t) return NULL;
        t->ip[0] = cfg->nesterov;
        t->ip[1] = has_momentum;
    }
    return opt;
}

kiln_optim *kiln_sgd_new(kiln_ctx *ctx, const kiln_sgd_config *cfg) {
    return sgd_new(ctx, "kiln_sgd_new", NULL, 0, cfg);
}

kiln_optim *kiln_sgd_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_sgd_config *cfg) {
    return sgd_new(ctx, "kiln_sgd_new_for", params, n, cfg);
}
