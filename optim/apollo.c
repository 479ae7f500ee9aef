/* apollo.c — APOLLO and APOLLO-Mini (Zhu et al. 2024), as apollo_torch's
 * APOLLOAdamW computes them; see kiln.h for the method.
 *
 * One node per parameter, in place into p, sharing one hyper leaf (f32
 * [5]: lr, beta1, beta2, eps, weight_decay, Adam's layout):
 *   2-D f32 p [m, n]: KILN_OP_APOLLO_STEP (backends/cpu/optim_apollo.c)
 *     src: p, grad, exp_avg, exp_avg_sq (both R's shape: [m, rank] when
 *          m >= n, else [rank, n]), prev_norm (f64 [1]: the last update's
 *          norm), hyper (then t, the step number, 1 first, as Adam's: read
 *          from device memory, so the step graph replays within a period)
 *     ip[0] = rank, ip[1] = update_gap, ip[2] = the projector's period
 *     (t - 1) / update_gap, ip[3] = mini, ip[4] = the parameter's seed
 *     (core/lowrank.h); fp[0] = scale
 *   any other p: KILN_OP_ADAM_STEP as kiln_adamw (decoupled, no amsgrad).
 * Per step of a matrix, following apollo_torch (t the step number):
 *   P refreshed when (t - 1) % update_gap == 0   (core/lowrank.h)
 *   R = G P^T or P^T G
 *   m = b1 m + (1 - b1) R,  v = b2 v + (1 - b2) R^2
 *   Rt = m / (sqrt(v) + eps)                    (moments not bias-corrected
 *                                                here: as the reference,
 *                                                the correction is in the
 *                                                step size below)
 *   s_c = |Rt_c| / (|R_c| + 1e-8) per channel c (row of G when m >= n,
 *         column when m < n, norms along R's rank dimension), or
 *   s = |Rt| / (|R| + 1e-8) for the tensor       (mini)
 *   u = sqrt(scale) * s * G                      (sqrt(scale) before the
 *                                                limiter: apollo_torch's
 *                                                scale_front, which its
 *                                                APOLLO-Mini scripts use)
 *   t > 1: f = max(|u| / (prev + 1e-8), 1.01) / 1.01, u /= f, prev = |u|
 *   t = 1: prev = |u|
 *   p *= 1 - lr * weight_decay                   (as kiln's AdamW; the
 *                                                reference decays after
 *                                                the update instead, a
 *                                                second-order difference)
 *   p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * u
 */
#include "optim_impl.h"
#include "lowrank.h"

#include <math.h>

enum { AP_LR, AP_BETA1, AP_BETA2, AP_EPS, AP_WEIGHT_DECAY, AP_N_HYPER };

static void apollo_prepare(kiln_optim *opt, float *hyper) {
    const kiln_apollo_config *cfg = opt->cfg;
    hyper[AP_LR] = opt->lr;
    hyper[AP_BETA1] = cfg->adamw.beta1;
    hyper[AP_BETA2] = cfg->adamw.beta2;
    hyper[AP_EPS] = cfg->adamw.eps;
    hyper[AP_WEIGHT_DECAY] = cfg->adamw.weight_decay;
    /* the period seeds the projector: a new one changes the key (once every update_gap steps) */
    for (int i = 0; i < opt->n_params; i++)
        if (opt->nodes[i]->op == KILN_OP_APOLLO_STEP) opt->nodes[i]->ip[2] = opt->steps / cfg->update_gap;
}

static const kiln_optim_impl apollo_impl = {"kiln_apollo", AP_N_HYPER, apollo_prepare};

void kiln__apollo_register(kiln_op_info *tab) {
    tab[KILN_OP_APOLLO_STEP] = (kiln_op_info){"apollo_step", KILN_KIND_INPLACE, NULL};
}

/* apollo_torch's APOLLOAdamW defaults and README settings for APOLLO. */
kiln_apollo_config kiln_apollo_defaults(void) {
    return (kiln_apollo_config){
        .adamw = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.0f},
        .rank = 256,
        .update_gap = 200,
        .scale = 1.0f,
        .mini = false,
        .seed = 0,
    };
}

/* The README's APOLLO-Mini: rank 1, tensor-wise scaling, scale 128. */
kiln_apollo_config kiln_apollo_mini_defaults(void) {
    kiln_apollo_config c = kiln_apollo_defaults();
    c.rank = 1;
    c.scale = 128.0f;
    c.mini = true;
    return c;
}


static kiln_status check_config(const char *who, const kiln_apollo_config *c) {
    const kiln_adam_config *a = &c->adamw;
    kiln_status s = kiln__adam_check_config(who, a);
    if (s) return s;
    if (a->amsgrad) return kiln__errs(KILN_ERR_ARG, "%s: amsgrad is not supported", who);
    if (c->rank < 1) return kiln__errs(KILN_ERR_ARG, "%s: invalid rank: %d (must be >= 1)", who, c->rank);
    if (c->update_gap < 1)
        return kiln__errs(KILN_ERR_ARG, "%s: invalid update_gap: %d (must be >= 1)", who, c->update_gap);
    if (c->first_index < 0)
        return kiln__errs(KILN_ERR_ARG, "%s: invalid first_index: %d (must be >= 0)", who, c->first_index);
    if (!(c->scale > 0.0f) || isinf(c->scale))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid scale: %g (must be finite and > 0)", who, (double)c->scale);
    return KILN_OK;
}

static kiln_tensor *matrix_node(kiln_optim *opt, int i, const kiln_apollo_config *c, const char *who) {
    kiln_tensor *p = opt->params[i];
    if (p->dtype != KILN_F32)
        return kiln__err(KILN_ERR_DTYPE, "%s: parameter %d '%s' is a %s matrix; APOLLO steps f32 matrices", who, i,
                         p->name, kiln_dtype_name(p->dtype));
    int64_t m = p->shape[0], n = p->shape[1];
    int64_t rs[2] = {m >= n ? m : c->rank, m >= n ? c->rank : n}; /* R's shape */
    kiln_tensor *srcs[6] = {p, p->grad};
    if (!(srcs[2] = kiln__optim_state_shaped(opt, p, KILN_F32, 2, rs, "exp_avg"))) return NULL;
    if (!(srcs[3] = kiln__optim_state_shaped(opt, p, KILN_F32, 2, rs, "exp_avg_sq"))) return NULL;
    if (!(srcs[4] = kiln__optim_state_shaped(opt, p, KILN_F64, 1, (int64_t[]){1}, "prev_norm"))) return NULL;
    srcs[5] = opt->hyper;
    kiln_tensor *t = kiln__optim_step_node(opt, i, KILN_OP_APOLLO_STEP, 6, srcs);
    if (!t) return NULL;
    t->ip[0] = c->rank;
    t->ip[1] = c->update_gap;
    t->ip[3] = c->mini;
    t->ip[4] = (int64_t)kiln__apollo_param_seed(c->seed, c->first_index + i);
    t->fp[0] = c->scale;
    return t;
}

static kiln_optim *apollo_new(kiln_ctx *ctx, const char *who, kiln_tensor *const *params, int n,
                              const kiln_apollo_config *cfg) {
    kiln_apollo_config c = cfg ? *cfg : kiln_apollo_defaults();
    if (check_config(who, &c)) return NULL;
    kiln_optim *opt = kiln__optim_new(ctx, who, &apollo_impl, params, n, c.adamw.lr);
    if (!opt) return NULL;
    kiln_apollo_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = c;
    opt->cfg = own;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *t = opt->params[i]->ndim == 2 ? matrix_node(opt, i, &c, who) : kiln__adam_node(opt, i, false, true);
        if (!t) return NULL;
    }
    return opt;
}

kiln_optim *kiln_apollo_new(kiln_ctx *ctx, const kiln_apollo_config *cfg) {
    return apollo_new(ctx, "kiln_apollo_new", NULL, 0, cfg);
}

kiln_optim *kiln_apollo_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_apollo_config *cfg) {
    return apollo_new(ctx, "kiln_apollo_new_for", params, n, cfg);
}
