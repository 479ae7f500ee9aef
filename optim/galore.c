/* galore.c — GaLore AdamW (Zhao et al. 2024, "GaLore: Memory-Efficient LLM
 * Training by Gradient Low-Rank Projection"), as galore_torch's GaLoreAdamW
 * with projection type 'std'; the formula is in include/kiln.h.
 *
 * One KILN_OP_GALORE_STEP node per 2-D parameter p [m, n], in place into p:
 *   src: p, p's gradient, projector P ([r, n] when m >= n, else [m, r]),
 *        exp_avg and exp_avg_sq (the shape of R: [m, r] or [r, n]), hyper
 *        (f32 [5]: lr, beta1, beta2, eps, weight_decay)
 *   ip[0] = t, the number of this step (1 on the first),
 *   ip[1] = refresh: recompute P from this step's gradient first,
 *   fp[0] = scale (alpha).
 * Both ip are written by prepare before each step: refresh on steps 1,
 * T+1, 2T+1, ... (galore_torch refreshes when its 0-based step count is a
 * multiple of update_proj_gap).
 *
 * Where P is recomputed: in the step kernel (backends/cpu/optim_galore.c),
 * not in prepare. The kernel already holds the gradient in host memory
 * (on a device backend the step falls back to the CPU, and the fallback
 * copies the gradient down and marks every source of an in-place op as
 * written, P included), so the SVD needs no extra copies or syncing and
 * the step stays one op whose state is all in its sources. prepare only
 * decides *whether* to refresh, from the step count.
 *
 * Parameters that are not matrices get torch.optim.AdamW's step
 * (KILN_OP_ADAM_STEP, decoupled), as kiln_adamw would give them: the
 * paper's optimizer leaves them to AdamW. (galore_torch runs them through
 * its Hugging Face-style AdamW, which differs in eps's place and decays
 * after the update; kiln keeps one AdamW.)
 */
#include "optim_impl.h"

#include <math.h>

/* Adam's hyper layout, so the non-matrix parameters' Adam step nodes
 * share the hyper leaf */
enum { GL_LR, GL_BETA1, GL_BETA2, GL_EPS, GL_WEIGHT_DECAY, GL_N_HYPER };

static void galore_prepare(kiln_optim *opt, float *hyper) {
    const kiln_galore_config *c = opt->cfg;
    hyper[GL_LR] = opt->lr;
    hyper[GL_BETA1] = c->adamw.beta1;
    hyper[GL_BETA2] = c->adamw.beta2;
    hyper[GL_EPS] = c->adamw.eps;
    hyper[GL_WEIGHT_DECAY] = c->adamw.weight_decay;
    bool refresh = opt->steps % c->update_gap == 0;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *t = opt->nodes[i];
        if (t->op == KILN_OP_GALORE_STEP) {
            t->ip[0] = opt->steps + 1;
            t->ip[1] = refresh;
        } else {
            t->ip[2] = opt->steps + 1; /* Adam's step number */
        }
    }
}

static const kiln_optim_impl galore_impl = {"kiln_galore_adamw", GL_N_HYPER, galore_prepare};

void kiln__galore_register(kiln_op_info *tab) {
    tab[KILN_OP_GALORE_STEP] = (kiln_op_info){"galore_step", KILN_KIND_INPLACE, NULL};
}

kiln_galore_config kiln_galore_defaults(void) {
    kiln_adam_config a = kiln_adam_defaults();
    a.eps = 1e-6f; /* galore_torch's AdamW (Hugging Face's) default */
    return (kiln_galore_config){.adamw = a, .rank = 128, .update_gap = 200, .scale = 0.25f};
}


static kiln_status check_config(const char *who, const kiln_galore_config *c) {
    const kiln_adam_config *a = &c->adamw;
    kiln_status s = kiln__adam_check_config(who, a);
    if (s) return s;
    if (a->amsgrad) return kiln__errs(KILN_ERR_ARG, "%s: amsgrad is not supported by GaLore", who);
    if (c->rank < 1) return kiln__errs(KILN_ERR_ARG, "%s: invalid rank %d (must be >= 1)", who, c->rank);
    if (c->update_gap < 1)
        return kiln__errs(KILN_ERR_ARG, "%s: invalid update_gap %d (must be >= 1)", who, c->update_gap);
    if (!isfinite(c->scale)) return kiln__errs(KILN_ERR_ARG, "%s: invalid scale %g (must be finite)", who, (double)c->scale);
    return KILN_OK;
}

/* A zero-filled f32 state leaf [d0, d1] of p. */
static kiln_tensor *lowrank_state(kiln_optim *opt, kiln_tensor *p, int64_t d0, int64_t d1, const char *suffix) {
    return kiln__optim_state_shaped(opt, p, KILN_F32, 2, (int64_t[]){d0, d1}, suffix);
}

static kiln_tensor *matrix_node(kiln_optim *opt, int i, const kiln_galore_config *c) {
    kiln_tensor *p = opt->params[i];
    int64_t m = p->shape[0], n = p->shape[1], k = m < n ? m : n, r = c->rank < k ? c->rank : k;
    bool right = m >= n; /* P = Vh[:r] on the right, else U[:, :r] on the left */
    int64_t rm = right ? m : r, rn = right ? r : n; /* R's shape */
    kiln_tensor *srcs[6] = {p, p->grad};
    if (!(srcs[2] = lowrank_state(opt, p, right ? r : m, right ? n : r, "galore_proj"))) return NULL;
    if (!(srcs[3] = lowrank_state(opt, p, rm, rn, "exp_avg"))) return NULL;
    if (!(srcs[4] = lowrank_state(opt, p, rm, rn, "exp_avg_sq"))) return NULL;
    srcs[5] = opt->hyper;
    kiln_tensor *t = kiln__optim_step_node(opt, i, KILN_OP_GALORE_STEP, 6, srcs);
    if (t) t->fp[0] = c->scale;
    return t;
}

static kiln_tensor *adamw_node(kiln_optim *opt, int i) {
    kiln_tensor *p = opt->params[i], *srcs[5] = {p, p->grad};
    if (!(srcs[2] = kiln__optim_state(opt, p, "exp_avg"))) return NULL;
    if (!(srcs[3] = kiln__optim_state(opt, p, "exp_avg_sq"))) return NULL;
    srcs[4] = opt->hyper;
    kiln_tensor *t = kiln__optim_step_node(opt, i, KILN_OP_ADAM_STEP, 5, srcs);
    if (t) {
        t->ip[0] = 0; /* no amsgrad */
        t->ip[1] = 1; /* decoupled weight decay */
    }
    return t;
}

/* the SVD comes from LAPACK, linked only with OpenBLAS (backends/cpu/optim_galore.c) */
#ifdef KILN_BLAS
static const bool have_lapack = true;
#else
static const bool have_lapack = false;
#endif

static kiln_optim *galore_new(kiln_ctx *ctx, const char *who, kiln_tensor *const *params, int n,
                              const kiln_galore_config *cfg) {
    kiln_galore_config c = cfg ? *cfg : kiln_galore_defaults();
    if (check_config(who, &c)) return NULL;
    if (!have_lapack)
        return kiln__err(KILN_ERR_UNSUPPORTED,
                         "%s: GaLore needs LAPACK's SVD (sgesdd) and this build has none (built with BLAS=0)", who);
    kiln_optim *opt = kiln__optim_new(ctx, who, &galore_impl, params, n, c.adamw.lr);
    if (!opt) return NULL;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *p = opt->params[i];
        if (p->ndim == 2 && p->dtype != KILN_F32)
            return kiln__err(KILN_ERR_DTYPE, "%s: parameter %d '%s' is a %s matrix; GaLore projects f32 matrices",
                             who, i, p->name, kiln_dtype_name(p->dtype));
    }
    kiln_galore_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = c;
    opt->cfg = own;
    for (int i = 0; i < opt->n_params; i++)
        if (!(opt->params[i]->ndim == 2 ? matrix_node(opt, i, &c) : adamw_node(opt, i))) return NULL;
    return opt;
}

kiln_optim *kiln_galore_adamw_new(kiln_ctx *ctx, const kiln_galore_config *cfg) {
    return galore_new(ctx, "kiln_galore_adamw_new", NULL, 0, cfg);
}

kiln_optim *kiln_galore_adamw_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n,
                                      const kiln_galore_config *cfg) {
    return galore_new(ctx, "kiln_galore_adamw_new_for", params, n, cfg);
}
