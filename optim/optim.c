/* optim.c — what every optimizer shares: checking and collecting the
 * parameters, the hyper leaf and step graph, kiln_optim_step() and the
 * accessors. The optimizers themselves (sgd.c, ...) only say which step op
 * each parameter gets and what goes into the hyper leaf. */
#include "optim_impl.h"
#include "backend.h"

#include <math.h>
#include <pthread.h>

/* The step ops' rows of the op table, filled by the optimizers themselves
 * when the first one is made (no step node exists before): the op
 * registry (ops/) knows no optimizer. */
static void register_step_ops(void) {
    kiln__sgd_register(kiln__op_table);
    kiln__adam_register(kiln__op_table);
    kiln__lion_register(kiln__op_table);
    kiln__galore_register(kiln__op_table);
    kiln__apollo_register(kiln__op_table);
    kiln__opt8bit_register(kiln__op_table);
}

/* One parameter: a float leaf of ctx with a gradient, not seen before. */
static kiln_status check_param(kiln_ctx *ctx, const char *who, kiln_tensor *const *params, int i, bool need_grad) {
    kiln_tensor *p = params[i];
    if (!p) {
        /* a NULL parameter usually comes from a failed kiln_param(): keep its message */
        if (kiln_last_status()) return kiln_last_status();
        return kiln__errs(KILN_ERR_ARG, "%s: parameter %d is NULL", who, i);
    }
    if (p->ctx != ctx)
        return kiln__errs(KILN_ERR_ARG, "%s: parameter %d '%s' belongs to another context", who, i, p->name);
    if (p->op != KILN_OP_NONE)
        return kiln__errs(KILN_ERR_ARG, "%s: parameter %d '%s' is a %s node, not a leaf", who, i, p->name,
                          kiln__op_table[p->op].name);
    if (need_grad && (!(p->flags & KILN_FLAG_REQUIRES_GRAD) || !p->grad))
        return kiln__errs(KILN_ERR_ARG, "%s: parameter %d '%s' does not require grad", who, i, p->name);
    if (!kiln__is_compute_float(p->dtype))
        return kiln__errs(KILN_ERR_DTYPE, "%s: parameter %d '%s' is %s; optimizers update f32 and f64 parameters", who,
                          i, p->name, kiln_dtype_name(p->dtype));
    for (int j = 0; j < i; j++)
        if (params[j] == p)
            return kiln__errs(KILN_ERR_ARG, "%s: parameter '%s' appears twice (entries %d and %d)", who, p->name, j, i);
    return KILN_OK;
}

static kiln_optim *optim_new(kiln_ctx *ctx, const char *who, const kiln_optim_impl *impl, kiln_tensor *const *params,
                             int n, float lr, bool forward_only) {
    if (!ctx) return kiln__err(KILN_ERR_ARG, "%s: ctx is NULL", who);
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_step_ops);
    if (!params) {
        params = ctx->params;
        n = ctx->n_params;
    }
    if (n < 1) return kiln__err(KILN_ERR_ARG, "%s: no parameters to optimize (make them with kiln_param first)", who);
    for (int i = 0; i < n; i++)
        if (check_param(ctx, who, params, i, !forward_only)) return NULL;
    kiln_optim *opt = kiln__arena_alloc(ctx, sizeof *opt);
    if (!opt) return NULL;
    opt->ctx = ctx;
    opt->impl = impl;
    opt->forward_only = forward_only;
    opt->lr = lr;
    opt->last_grad_norm = -1.0f;
    opt->n_params = n;
    opt->params = kiln__arena_alloc(ctx, (size_t)n * sizeof *opt->params);
    opt->nodes = kiln__arena_alloc(ctx, (size_t)n * sizeof *opt->nodes);
    opt->graph = kiln_graph_new(ctx);
    opt->hyper = kiln_new_1d(ctx, KILN_F32, impl->n_hyper + KILN__HYPER_STEP_SLOTS);
    if (!opt->params || !opt->nodes || !opt->graph || !opt->hyper) return NULL;
    memcpy(opt->params, params, (size_t)n * sizeof *params);
    snprintf(opt->hyper->name, sizeof opt->hyper->name, "%s.hyper", impl->name);
    return opt;
}

kiln_optim *kiln__optim_new(kiln_ctx *ctx, const char *who, const kiln_optim_impl *impl, kiln_tensor *const *params,
                            int n, float lr) {
    return optim_new(ctx, who, impl, params, n, lr, false);
}

kiln_optim *kiln__optim_new_forward(kiln_ctx *ctx, const char *who, const kiln_optim_impl *impl,
                                    kiln_tensor *const *params, int n, float lr) {
    return optim_new(ctx, who, impl, params, n, lr, true);
}

kiln_tensor *kiln__optim_state_shaped(kiln_optim *opt, kiln_tensor *p, kiln_dtype dt, int ndim, const int64_t *shape,
                                      const char *suffix) {
    kiln_tensor *t = kiln_tensor_new(opt->ctx, dt, ndim, shape);
    kiln__optim_state_entry *e = t ? kiln__arena_alloc(opt->ctx, sizeof *e) : NULL;
    if (!e) return NULL;
    snprintf(t->name, sizeof t->name, "%.24s.%.22s", p->name, suffix);
    *e = (kiln__optim_state_entry){.t = t, .param = p};
    snprintf(e->suffix, sizeof e->suffix, "%s", suffix);
    if (opt->state_last) opt->state_last->next = e;
    else opt->state = e;
    opt->state_last = e;
    opt->state_bytes += t->storage_bytes;
    return t;
}

kiln_tensor *kiln__optim_state(kiln_optim *opt, kiln_tensor *p, const char *suffix) {
    return kiln__optim_state_shaped(opt, p, p->dtype, p->ndim, p->shape, suffix);
}

kiln_tensor *kiln__optim_step_node(kiln_optim *opt, int i, kiln_op op, int nsrc, kiln_tensor *const *srcs) {
    kiln_tensor *p = srcs[0];
    kiln_tensor *t = kiln__node_new(opt->ctx, op, p->dtype, p->ndim, p->shape, nsrc, srcs);
    if (!t) return NULL;
    /* as the backward pass's acc_grad nodes: no gradient, storage is p's */
    t->flags &= ~(uint32_t)KILN_FLAG_REQUIRES_GRAD;
    t->view_src = p;
    snprintf(t->name, sizeof t->name, "%.30s.%.16s", p->name, kiln__op_table[op].name);
    if (kiln_graph_add(opt->graph, t)) return NULL;
    opt->nodes[i] = t;
    return t;
}

kiln_status kiln__optim_check_steps(int64_t steps, kiln_status bad, const char *who) {
    if (steps < 0 || steps > KILN__MAX_STEPS)
        return kiln__errs(bad, "%s: step count %lld is outside 0..%lld", who, (long long)steps,
                          (long long)KILN__MAX_STEPS);
    return KILN_OK;
}

kiln_status kiln__optim_check_lr(float lr, kiln_status bad, const char *who) {
    if (!kiln__finite_nonneg(lr))
        return kiln__errs(bad, "%s: invalid learning rate %g (must be finite and >= 0)", who, (double)lr);
    return KILN_OK;
}

kiln_status kiln_optim_step(kiln_optim *opt) {
    if (!opt) return kiln__errs(KILN_ERR_ARG, "kiln_optim_step: optimizer is NULL");
    if (opt->forward_only)
        return kiln__errs(KILN_ERR_ARG, "kiln_optim_step: %s steps from two losses: call kiln_mezo_step (or "
                          "kiln_mezo_plus, kiln_mezo_minus, kiln_mezo_update)", opt->impl->name);
    /* a step adds one to either count: both stay what a load accepts */
    kiln_status s = kiln__optim_check_steps(opt->steps + 1, KILN_ERR_STATE, "kiln_optim_step");
    if (!s) s = kiln__optim_check_steps(opt->skipped_steps + 1, KILN_ERR_STATE, "kiln_optim_step: skipped steps");
    if (s) return s;
    s = kiln__optim_guard(opt);
    if (s) return s;
    if ((s = kiln__optim_clip(opt))) return s;
    /* the schedule's lr for this step, for prepare to write; the base lr stays */
    float base_lr = opt->lr;
    opt->lr = kiln_optim_lr_at(opt, opt->steps);
    float *hyper = kiln_tensor_data(opt->hyper);
    if (!hyper) {
        opt->lr = base_lr;
        return kiln_last_status();
    }
    opt->impl->prepare(opt, hyper);
    opt->lr = base_lr;
    uint32_t t = (uint32_t)(opt->steps + 1); /* checked above */
    hyper[opt->impl->n_hyper] = (float)(t >> 16);
    hyper[opt->impl->n_hyper + 1] = (float)(t & 0xffffu);
    if ((s = kiln__optim_write_groups(opt, hyper))) return s;
    s = kiln_graph_compute(opt->graph);
    if (s) return s;
    /* kiln_zero_grad for this optimizer's parameters: the next computes of
     * the training graph accumulate into zeroed gradients */
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *g = opt->params[i]->grad;
        if ((s = kiln__tensor_zero(g))) return s;
    }
    opt->steps++;
    return KILN_OK;
}

/* A bad lr (negative, NaN or infinite) sets the error and keeps the old one. */
kiln_status kiln_optim_set_lr(kiln_optim *opt, float lr) {
    if (!opt) return kiln__errs(KILN_ERR_ARG, "kiln_optim_set_lr: optimizer is NULL");
    kiln_status s = kiln__optim_check_lr(lr, KILN_ERR_ARG, "kiln_optim_set_lr");
    if (s) return s;
    opt->lr = lr;
    return KILN_OK;
}

float kiln_optim_lr(const kiln_optim *opt) { return opt ? opt->lr : 0.0f; }
int64_t kiln_optim_steps(const kiln_optim *opt) { return opt ? opt->steps : 0; }
size_t kiln_optim_state_bytes(const kiln_optim *opt) { return opt ? opt->state_bytes : 0; }
