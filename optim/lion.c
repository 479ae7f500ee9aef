/* lion.c — Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
 * Algorithms"), 32-bit state, as lucidrains' lion-pytorch computes it:
 * decoupled weight decay, the update the sign of an interpolation of the
 * momentum and the gradient, then the momentum moved with a second beta.
 *
 * One KILN_OP_LION_STEP node per parameter p, in place into p:
 *   src: p, p's gradient, exp_avg, hyper (f32 [4]: lr, beta1, beta2,
 *        weight_decay, written by kiln_optim_step before each step)
 * Per element (backends/cpu/optim.c):
 *   p *= 1 - lr * weight_decay
 *   c = beta1 * m + (1 - beta1) * g
 *   p += -lr * sign(c)
 *   m = beta2 * m + (1 - beta2) * g
 * sign is torch.sign's: (c > 0) - (c < 0), so sign(0) = 0 and, as torch
 * gives, sign(NaN) = 0. Non-finite gradients are not special-cased (as
 * neither torch.optim.Adam nor kiln's Adam does): a NaN gradient element
 * makes c NaN, so its p is only decayed that step, and its m NaN for good
 * (every later step only decays it too); an infinite one steps p by lr in
 * its direction and makes m infinite.
 */
#include "optim_impl.h"

#include <math.h>

enum { LION_LR, LION_BETA1, LION_BETA2, LION_WEIGHT_DECAY, LION_N_HYPER };

static void lion_prepare(kiln_optim *opt, float *hyper) {
    const kiln_lion_config *cfg = opt->cfg;
    hyper[LION_LR] = opt->lr;
    hyper[LION_BETA1] = cfg->beta1;
    hyper[LION_BETA2] = cfg->beta2;
    hyper[LION_WEIGHT_DECAY] = cfg->weight_decay;
}

static const kiln_optim_impl lion_impl = {"kiln_lion", LION_N_HYPER, lion_prepare};

void kiln__lion_register(kiln_op_info *tab) {
    tab[KILN_OP_LION_STEP] = (kiln_op_info){"lion_step", KILN_KIND_INPLACE, NULL};
}

/* lion-pytorch's defaults. */
kiln_lion_config kiln_lion_defaults(void) {
    return (kiln_lion_config){.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.0f};
}


/* lion-pytorch's checks (lr > 0 there: kiln accepts 0 as torch.optim does,
 * and kiln_optim_set_lr allows it anyway), worded as Adam's, and NaN and
 * infinities refused. */
static kiln_status check_config(const char *who, const kiln_lion_config *c) {
    if (!kiln__finite_nonneg(c->lr))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid learning rate: %g (must be >= 0)", who, (double)c->lr);
    if (!(c->beta1 >= 0.0f && c->beta1 <= 1.0f))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid beta parameter at index 0: %g (must be in [0, 1])", who,
                          (double)c->beta1);
    if (!(c->beta2 >= 0.0f && c->beta2 <= 1.0f))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid beta parameter at index 1: %g (must be in [0, 1])", who,
                          (double)c->beta2);
    if (!kiln__finite_nonneg(c->weight_decay))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid weight_decay value: %g (must be >= 0)", who,
                          (double)c->weight_decay);
    return KILN_OK;
}

static kiln_optim *lion_new(kiln_ctx *ctx, const char *who, kiln_tensor *const *params, int n,
                            const kiln_lion_config *cfg) {
    kiln_lion_config c = cfg ? *cfg : kiln_lion_defaults();
    if (check_config(who, &c)) return NULL;
    kiln_optim *opt = kiln__optim_new(ctx, who, &lion_impl, params, n, c.lr);
    if (!opt) return NULL;
    kiln_lion_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = c;
    opt->cfg = own;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *p = opt->params[i], *srcs[4] = {p, p->grad, NULL, opt->hyper};
        if (!(srcs[2] = kiln__optim_state(opt, p, "exp_avg"))) return NULL;
        if (!kiln__optim_step_node(opt, i, KILN_OP_LION_STEP, 4, srcs)) return NULL;
    }
    return opt;
}

kiln_optim *kiln_lion_new(kiln_ctx *ctx, const kiln_lion_config *cfg) {
    return lion_new(ctx, "kiln_lion_new", NULL, 0, cfg);
}

kiln_optim *kiln_lion_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_lion_config *cfg) {
    return lion_new(ctx, "kiln_lion_new_for", params, n, cfg);
}
