/* galore.c — GaLore AdamW (Zhao et al. 2024, "GaLore: Memory-Efficient LLM
 * Training by Gradient Low-Rank Projection"), as galore_torch's GaLoreAdamW
 * with projection type 'std', and its 8-bit form GaLoreAdamW8bit; the
 * formulas are in include/kiln.h.
 *
 * One KILN_OP_GALORE_STEP node per 2-D parameter p [m, n], in place into p:
 *   src: p, p's gradient, projector P ([r, n] when m >= n, else [m, r]),
 *        exp_avg and exp_avg_sq (the shape of R: [m, r] or [r, n]), hyper
 *        (f32 [7]: lr, beta1, beta2, eps, weight_decay, then t, the
 *        number of this step (1 on the first), as Adam's: read from
 *        device memory, so a step graph that does not refresh replays)
 *   ip[1] = refresh: recompute P from this step's gradient first,
 *   fp[0] = scale (alpha).
 * 8-bit GaLore: one KILN_OP_GALORE8_STEP node per 2-D parameter, ip and fp
 * as above, Adam in bitsandbytes' form (eps * sqrt(1 - beta2^t) in the
 * denominator, no weight decay inside), ip[2] = 8-bit moments:
 *   ip[2] = 1 (R has >= 4096 elements): src p, grad, projector, exp_avg
 *        codes and exp_avg_sq codes (I32 [ceil(nr / 4)], nr bytes, as
 *        optim/opt8bit.c's), absmax (F32 [2, ceil(nr / 256)]: exp_avg's row,
 *        then exp_avg_sq's; one leaf so the op fits in KILN_MAX_SRC), maps,
 *        hyper;
 *   ip[2] = 0: src p, grad, projector, exp_avg, exp_avg_sq (f32, R's
 *        shape), hyper: bitsandbytes' 32-bit moments below min_8bit_size.
 * ip[1] is written by prepare before each step: refresh on steps 1,
 * T+1, 2T+1, ... (galore_torch refreshes when its 0-based step count is a
 * multiple of update_proj_gap).
 *
 * Where P is recomputed: in the step kernel (backends/cpu/optim_galore.c),
 * not in prepare: the CPU kernel already holds the gradient in host
 * memory, and the Vulkan and CUDA kernels bring it down only on refresh
 * steps; all run the same SVD code (core/lowrank.c), so the step
 * stays one op whose state is all in its sources. prepare only
 * decides *whether* to refresh, from the step count.
 *
 * Parameters that are not matrices get torch.optim.AdamW's step
 * (KILN_OP_ADAM_STEP, decoupled), as kiln_adamw would give them: the
 * paper's optimizer leaves them to AdamW. (galore_torch runs them through
 * its Hugging Face-style AdamW, which differs in eps's place and decays
 * after the update; kiln keeps one AdamW.) Under 8-bit GaLore they get
 * kiln_adamw8bit's step (8-bit from 4096 f32 elements, as there).
 */
#include "optim_impl.h"
#include "../quant/dynamic_map.h"

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
    for (int i = 0; i < opt->n_params; i++) { /* a refresh step's key differs: it runs node by node */
        kiln_tensor *t = opt->nodes[i];
        if (t->op == KILN_OP_GALORE_STEP || t->op == KILN_OP_GALORE8_STEP) t->ip[1] = refresh;
    }
}

static const kiln_optim_impl galore_impl = {"kiln_galore_adamw", GL_N_HYPER, galore_prepare};
static const kiln_optim_impl galore8_impl = {"kiln_galore_adamw8bit", GL_N_HYPER, galore_prepare};

void kiln__galore_register(kiln_op_info *tab) {
    tab[KILN_OP_GALORE_STEP] = (kiln_op_info){"galore_step", KILN_KIND_INPLACE, NULL};
    tab[KILN_OP_GALORE8_STEP] = (kiln_op_info){"galore8_step", KILN_KIND_INPLACE, NULL};
}

kiln_galore_config kiln_galore_defaults(void) {
    kiln_adam_config a = kiln_adam_defaults();
    a.eps = 1e-6f; /* galore_torch's AdamW (Hugging Face's) default */
    return (kiln_galore_config){.adamw = a, .rank = 128, .update_gap = 200, .scale = 0.25f};
}

kiln_galore_config kiln_galore8bit_defaults(void) {
    kiln_galore_config c = kiln_galore_defaults();
    c.adamw.eps = 1e-8f; /* galore_torch's GaLoreAdamW8bit (bitsandbytes') default */
    return c;
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

/* R of fewer elements keeps 32-bit moments in 8-bit GaLore, as
 * bitsandbytes' min_8bit_size (4096) decides on the tensor it is handed */

/* Parameter i's GaLore node: KILN_OP_GALORE_STEP, or (eightbit)
 * KILN_OP_GALORE8_STEP with 8-bit moments when R has >= 4096 elements,
 * 32-bit ones otherwise (ip[2] says which; see the layout above). */
static kiln_tensor *matrix_node(kiln_optim *opt, int i, const kiln_galore_config *c, bool eightbit,
                                kiln_tensor *maps) {
    kiln_tensor *p = opt->params[i];
    int64_t m = p->shape[0], n = p->shape[1], k = m < n ? m : n, r = c->rank < k ? c->rank : k;
    bool right = m >= n; /* P = Vh[:r] on the right, else U[:, :r] on the left */
    int64_t rm = right ? m : r, rn = right ? r : n, nr = rm * rn; /* R's shape */
    bool q8 = eightbit && nr >= KILN__MIN_8BIT_NUMEL;
    kiln_tensor *srcs[KILN_MAX_SRC] = {p, p->grad};
    int nsrc;
    if (!(srcs[2] = lowrank_state(opt, p, right ? r : m, right ? n : r, "galore_proj"))) return NULL;
    if (q8) { /* codes: nr bytes as I32 [ceil(nr / 4)]; absmax [2, blocks]: m's row, then v's */
        int64_t nq = (nr + 3) / 4;
        if (!(srcs[3] = kiln__optim_state_shaped(opt, p, KILN_I32, 1, &nq, "exp_avg.q"))) return NULL;
        if (!(srcs[4] = kiln__optim_state_shaped(opt, p, KILN_I32, 1, &nq, "exp_avg_sq.q"))) return NULL;
        if (!(srcs[5] = lowrank_state(opt, p, 2, kiln__qblocks(nr), "absmax"))) return NULL;
        srcs[6] = maps;
        srcs[7] = opt->hyper;
        nsrc = 8;
    } else {
        if (!(srcs[3] = lowrank_state(opt, p, rm, rn, "exp_avg"))) return NULL;
        if (!(srcs[4] = lowrank_state(opt, p, rm, rn, "exp_avg_sq"))) return NULL;
        srcs[5] = opt->hyper;
        nsrc = 6;
    }
    kiln_tensor *t = kiln__optim_step_node(opt, i, eightbit ? KILN_OP_GALORE8_STEP : KILN_OP_GALORE_STEP, nsrc, srcs);
    if (t) {
        t->fp[0] = c->scale;
        t->ip[2] = q8;
    }
    return t;
}

/* the SVD comes from LAPACK, linked only with OpenBLAS (core/lowrank.c) */
#ifdef KILN_BLAS
static const bool have_lapack = true;
#else
static const bool have_lapack = false;
#endif

static kiln_optim *galore_new(kiln_ctx *ctx, const char *who, bool eightbit, kiln_tensor *const *params, int n,
                              const kiln_galore_config *cfg) {
    kiln_galore_config c = cfg ? *cfg : eightbit ? kiln_galore8bit_defaults() : kiln_galore_defaults();
    if (check_config(who, &c)) return NULL;
    if (!have_lapack)
        return kiln__err(KILN_ERR_UNSUPPORTED,
                         "%s: GaLore needs LAPACK's SVD (sgesdd) and this build has none (built with BLAS=0)", who);
    kiln_optim *opt = kiln__optim_new(ctx, who, eightbit ? &galore8_impl : &galore_impl, params, n, c.adamw.lr);
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
    kiln_tensor *maps = eightbit ? kiln__opt8bit_maps(opt) : NULL;
    if (eightbit && !maps) return NULL;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *p = opt->params[i], *t;
        if (p->ndim == 2)
            t = matrix_node(opt, i, &c, eightbit, maps);
        else if (eightbit) /* as kiln_adamw8bit */
            t = kiln__adam8_node(opt, i, maps, true);
        else /* as kiln_adamw */
            t = kiln__adam_node(opt, i, false, true);
        if (!t) return NULL;
    }
    return opt;
}

kiln_optim *kiln_galore_adamw_new(kiln_ctx *ctx, const kiln_galore_config *cfg) {
    return galore_new(ctx, "kiln_galore_adamw_new", false, NULL, 0, cfg);
}

kiln_optim *kiln_galore_adamw_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n,
                                      const kiln_galore_config *cfg) {
    return galore_new(ctx, "kiln_galore_adamw_new_for", false, params, n, cfg);
}

kiln_optim *kiln_galore_adamw8bit_new(kiln_ctx *ctx, const kiln_galore_config *cfg) {
    return galore_new(ctx, "kiln_galore_adamw8bit_new", true, NULL, 0, cfg);
}

kiln_optim *kiln_galore_adamw8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n,
                                          const kiln_galore_config *cfg) {
    return galore_new(ctx, "kiln_galore_adamw8bit_new_for", true, params, n, cfg);
}
