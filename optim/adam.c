/* adam.c — Adam and AdamW, exactly as torch.optim.Adam and torch.optim.AdamW
 * (bias correction, optional AMSGrad; Adam's weight decay is L2 added to the
 * gradient, AdamW's is decoupled: p *= 1 - lr * weight_decay).
 *
 * One KILN_OP_ADAM_STEP node per parameter p, in place into p:
 *   src: p, p's gradient, exp_avg, exp_avg_sq, [max_exp_avg_sq (amsgrad
 *        only)], hyper (f32 [7]: lr, beta1, beta2, eps, weight_decay,
 *        then t, the number of this step (1 on the first) in the two
 *        slots of KILN__HYPER_STEP_SLOTS; written by kiln_optim_step
 *        before each step)
 *   ip[0] = amsgrad, ip[1] = decoupled weight decay (AdamW).
 * The kernel computes the bias corrections from t in double, as torch does
 * in Python.
 * Per element (backends/cpu/optim.c), with bc1 = 1 - beta1^t and
 * bc2 = 1 - beta2^t:
 *   p *= 1 - lr * weight_decay                        (AdamW)
 *   g = grad + weight_decay * p                       (Adam, weight_decay != 0)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   vmax = max(vmax, v); use vmax for v below         (amsgrad)
 *   p += -(lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
 */
#include "optim_impl.h"

#include <math.h>

enum { ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_WEIGHT_DECAY, ADAM_N_HYPER };

static void adam_prepare(kiln_optim *opt, float *hyper) {
    const kiln_adam_config *cfg = opt->cfg;
    hyper[ADAM_LR] = opt->lr;
    hyper[ADAM_BETA1] = cfg->beta1;
    hyper[ADAM_BETA2] = cfg->beta2;
    hyper[ADAM_EPS] = cfg->eps;
    hyper[ADAM_WEIGHT_DECAY] = cfg->weight_decay;
}

static const kiln_optim_impl adam_impl = {"kiln_adam", ADAM_N_HYPER, adam_prepare};
static const kiln_optim_impl adamw_impl = {"kiln_adamw", ADAM_N_HYPER, adam_prepare};

void kiln__adam_register(kiln_op_info *tab) {
    tab[KILN_OP_ADAM_STEP] = (kiln_op_info){"adam_step", KILN_KIND_INPLACE, NULL};
}

/* torch.optim.Adam()'s and AdamW()'s defaults. */
kiln_adam_config kiln_adam_defaults(void) {
    return (kiln_adam_config){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
}

kiln_adam_config kiln_adamw_defaults(void) {
    kiln_adam_config c = kiln_adam_defaults();
    c.weight_decay = 1e-2f;
    return c;
}


/* The checks torch.optim.Adam/AdamW make, with their wording (and NaN and
 * infinities refused as well). */
kiln_status kiln__adam_check_config(const char *who, const kiln_adam_config *c) {
    if (!kiln__finite_nonneg(c->lr))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid learning rate: %g (must be >= 0)", who, (double)c->lr);
    if (!kiln__finite_nonneg(c->eps))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid epsilon value: %g (must be >= 0)", who, (double)c->eps);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid beta parameter at index 0: %g (must be in [0, 1))", who,
                          (double)c->beta1);
    if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid beta parameter at index 1: %g (must be in [0, 1))", who,
                          (double)c->beta2);
    if (!kiln__finite_nonneg(c->weight_decay))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid weight_decay value: %g (must be >= 0)", who,
                          (double)c->weight_decay);
    return KILN_OK;
}

kiln_tensor *kiln__adam_node(kiln_optim *opt, int i, bool amsgrad, bool decoupled) {
    kiln_tensor *p = opt->params[i], *srcs[6] = {p, p->grad};
    int nsrc = 2;
    if (!(srcs[nsrc++] = kiln__optim_state(opt, p, "exp_avg"))) return NULL;
    if (!(srcs[nsrc++] = kiln__optim_state(opt, p, "exp_avg_sq"))) return NULL;
    if (amsgrad && !(srcs[nsrc++] = kiln__optim_state(opt, p, "max_exp_avg_sq"))) return NULL;
    srcs[nsrc++] = opt->hyper;
    kiln_tensor *t = kiln__optim_step_node(opt, i, KILN_OP_ADAM_STEP, nsrc, srcs);
    if (!t) return NULL;
    t->ip[0] = amsgrad;
    t->ip[1] = decoupled;
    return t;
}

static kiln_optim *adam_new(kiln_ctx *ctx, const char *who, bool decoupled, kiln_tensor *const *params, int n,
                            const kiln_adam_config *cfg) {
    kiln_adam_config c = cfg ? *cfg : decoupled ? kiln_adamw_defaults() : kiln_adam_defaults();
    if (kiln__adam_check_config(who, &c)) return NULL;
    kiln_optim *opt = kiln__optim_new(ctx, who, decoupled ? &adamw_impl : &adam_impl, params, n, c.lr);
    if (!opt) return NULL;
    kiln_adam_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = c;
    opt->cfg = own;
    for (int i = 0; i < opt->n_params; i++)
        if (!kiln__adam_node(opt, i, c.amsgrad, decoupled)) return NULL;
    return opt;
}

kiln_optim *kiln_adam_new(kiln_ctx *ctx, const kiln_adam_config *cfg) {
    return adam_new(ctx, "kiln_adam_new", false, NULL, 0, cfg);
}

kiln_optim *kiln_adam_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg) {
    return adam_new(ctx, "kiln_adam_new_for", false, params, n, cfg);
}

kiln_optim *kiln_adamw_new(kiln_ctx *ctx, const kiln_adam_config *cfg) {
    return adam_new(ctx, "kiln_adamw_new", true, NULL, 0, cfg);
}

kiln_optim *kiln_adamw_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg) {
    return adam_new(ctx, "kiln_adamw_new_for", true, params, n, cfg);
}
