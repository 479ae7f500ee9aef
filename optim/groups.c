/* groups.c — parameter groups (kiln_optim_set_group): each group has its
 * own hyper leaf, which becomes the last source of its parameters' step
 * nodes. kiln_optim_step lets the optimizer prepare the main hyper leaf,
 * then copies it into each group's with the lr scaled and the weight decay
 * replaced (the slots of optim_impl.h), so per-parameter hyperparameters
 * reach the step kernels without a new graph; only the graph's plan is
 * redone after a change of sources. */
#include "optim_impl.h"
#include "graph.h"

#include <math.h>

typedef struct kiln__optim_group {
    kiln_tensor *hyper;
    float lr_scale, weight_decay;
    struct kiln__optim_group *next;
} kiln__optim_group;

static int param_index(const kiln_optim *opt, const kiln_tensor *p) {
    for (int i = 0; i < opt->n_params; i++)
        if (opt->params[i] == p) return i;
    return -1;
}

/* The source slot of node t holding the optimizer's or a group's hyper
 * leaf (the last, by the convention of optim_impl.h; checked). */
static int hyper_slot(const kiln_optim *opt, const kiln_tensor *t) {
    int k = t->nsrc - 1;
    if (k < 0) return -1;
    if (t->src[k] == opt->hyper) return k;
    for (const kiln__optim_group *g = opt->groups; g; g = g->next)
        if (t->src[k] == g->hyper) return k;
    return -1;
}

kiln_status kiln_optim_set_group(kiln_optim *opt, kiln_tensor *const *params, int n, float lr_scale,
                                 float weight_decay) {
    const char *who = "kiln_optim_set_group";
    if (!opt) return kiln__errs(KILN_ERR_ARG, "%s: optimizer is NULL", who);
    if (!params || n < 1) return kiln__errs(KILN_ERR_ARG, "%s: no parameters", who);
    if (opt->forward_only)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: %s has no parameter groups (one lr and weight decay)", who,
                          opt->impl->name);
    if (!(lr_scale >= 0.0f) || isinf(lr_scale))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid lr_scale %g (must be finite and >= 0)", who, (double)lr_scale);
    if (!(weight_decay >= 0.0f) || isinf(weight_decay))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid weight_decay %g (must be finite and >= 0)", who,
                          (double)weight_decay);
    for (int j = 0; j < n; j++) {
        if (!params[j]) return kiln__errs(KILN_ERR_ARG, "%s: parameter %d is NULL", who, j);
        int i = param_index(opt, params[j]);
        if (i < 0)
            return kiln__errs(KILN_ERR_ARG, "%s: '%s' is not a parameter of this %s optimizer", who, params[j]->name,
                              opt->impl->name);
        if (hyper_slot(opt, opt->nodes[i]) < 0)
            return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: %s's step node of '%s' has no hyper leaf last", who,
                              opt->impl->name, params[j]->name);
    }
    kiln__optim_group *g = kiln__arena_alloc(opt->ctx, sizeof *g);
    if (!g) return kiln_last_status();
    if (!(g->hyper = kiln_new_1d(opt->ctx, KILN_F32, opt->impl->n_hyper + KILN__HYPER_STEP_SLOTS))) return kiln_last_status();
    snprintf(g->hyper->name, sizeof g->hyper->name, "%.30s.group_hyper", opt->impl->name);
    g->lr_scale = lr_scale;
    g->weight_decay = weight_decay;
    g->next = opt->groups;
    opt->groups = g;
    for (int j = 0; j < n; j++) {
        kiln_tensor *t = opt->nodes[param_index(opt, params[j])];
        t->src[hyper_slot(opt, t)] = g->hyper;
    }
    opt->graph->planned = false; /* sources changed: plan (and schedule) again */
    return KILN_OK;
}

kiln_status kiln__optim_write_groups(kiln_optim *opt, const float *hyper) {
    int nh = opt->impl->n_hyper;
    for (kiln__optim_group *g = opt->groups; g; g = g->next) {
        float *h = kiln_tensor_data(g->hyper);
        if (!h) return kiln_last_status();
        memcpy(h, hyper, (size_t)(nh + KILN__HYPER_STEP_SLOTS) * sizeof *h);
        h[KILN__HYPER_LR] = (float)((double)hyper[KILN__HYPER_LR] * g->lr_scale);
        h[nh - 1] = g->weight_decay;
    }
    return KILN_OK;
}
