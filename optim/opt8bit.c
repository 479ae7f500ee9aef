/* opt8bit.c — block-wise 8-bit Adam, AdamW, Lion and SGD with momentum, as
 * bitsandbytes' 8-bit optimizers (Dettmers et al.): the constructors and
 * op rows. The quantization is quant/dynamic_map.h's; the kernels are in
 * backends/cpu/optim_8bit.c and backends/vulkan/vk_optim_8bit.c.
 *
 * Each state of a parameter of n >= 4096 f32 elements is two leaves:
 *   codes  : I32 [ceil(n / 4)], read as n bytes (kiln has no u8 dtype; the
 *            bytes past n are padding), code k meaning map[k] * absmax
 *   absmax : F32 [ceil(n / 256)], one per block of 256 elements
 * Zero-filled leaves mean a zero state (absmax 0 dequantizes to 0 whatever
 * the code). Maps: signed for Adam's exp_avg, Lion's and SGD's momentum;
 * unsigned for Adam's exp_avg_sq.
 *
 * Step ops (one per parameter, in place into p; hyper leaves laid out as the
 * 32-bit optimizers', so that small and f64 parameters, which keep 32-bit
 * state as bitsandbytes' min_8bit_size = 4096 does, share the leaf with a
 * plain KILN_OP_ADAM_STEP / LION_STEP / SGD_STEP node):
 *   KILN_OP_ADAM8_STEP: p, grad, m codes, m absmax, v codes, v absmax, maps,
 *       hyper [lr, beta1, beta2, eps, weight_decay, then t, the number of
 *       this step, as optim/adam.c's]; ip[1] = decoupled
 *   KILN_OP_LION8_STEP: p, grad, m codes, m absmax, maps,
 *       hyper [lr, beta1, beta2, weight_decay]
 *   KILN_OP_SGD8_STEP: p, grad, buf codes, buf absmax, maps,
 *       hyper [lr, momentum, dampening, weight_decay]; ip[0] = nesterov,
 *       ip[2] = 0 on the first step, 1 after (as optim/sgd.c's)
 * maps is one F32 [512] leaf per optimizer, the signed dynamic map then the
 * unsigned one, for device kernels (which cannot build them bit for bit);
 * a constant table like hyper, not counted in kiln_optim_state_bytes.
 * The per-element formulas are the 32-bit ones (optim/adam.c, lion.c,
 * sgd.c), computed in f32 on the dequantized state; an element whose
 * gradient is NaN or infinite is skipped (its p and state value kept), as
 * bitsandbytes' kernels do.
 *
 * Differences from bitsandbytes, on purpose: Adam8bit's weight decay is L2
 * as torch's Adam (bitsandbytes decays decoupled, after the update, in
 * both); AdamW's decay comes before the update as torch's; SGD keeps torch's
 * dampening and nesterov (bitsandbytes has neither).
 */
#include "optim_impl.h"
#include "../quant/dynamic_map.h"

#include <math.h>


enum { A_LR, A_BETA1, A_BETA2, A_EPS, A_WD, A_N };
enum { L_LR, L_BETA1, L_BETA2, L_WD, L_N };
enum { S_LR, S_MOMENTUM, S_DAMPENING, S_WD, S_N };

static void adam8_prepare(kiln_optim *opt, float *h) {
    const kiln_adam_config *c = opt->cfg;
    h[A_LR] = opt->lr;
    h[A_BETA1] = c->beta1;
    h[A_BETA2] = c->beta2;
    h[A_EPS] = c->eps;
    h[A_WD] = c->weight_decay;
}

static void lion8_prepare(kiln_optim *opt, float *h) {
    const kiln_lion_config *c = opt->cfg;
    h[L_LR] = opt->lr;
    h[L_BETA1] = c->beta1;
    h[L_BETA2] = c->beta2;
    h[L_WD] = c->weight_decay;
}

static void sgd8_prepare(kiln_optim *opt, float *h) {
    const kiln_sgd_config *c = opt->cfg;
    h[S_LR] = opt->lr;
    h[S_MOMENTUM] = c->momentum;
    h[S_DAMPENING] = c->dampening;
    h[S_WD] = c->weight_decay;
    for (int i = 0; i < opt->n_params; i++) opt->nodes[i]->ip[2] = opt->steps > 0;
}

static const kiln_optim_impl adam8_impl = {"kiln_adam8bit", A_N, adam8_prepare};
static const kiln_optim_impl adamw8_impl = {"kiln_adamw8bit", A_N, adam8_prepare};
static const kiln_optim_impl lion8_impl = {"kiln_lion8bit", L_N, lion8_prepare};
static const kiln_optim_impl sgd8_impl = {"kiln_sgd8bit", S_N, sgd8_prepare};

void kiln__opt8bit_register(kiln_op_info *tab) {
    tab[KILN_OP_ADAM8_STEP] = (kiln_op_info){"adam8_step", KILN_KIND_INPLACE, NULL};
    tab[KILN_OP_LION8_STEP] = (kiln_op_info){"lion8_step", KILN_KIND_INPLACE, NULL};
    tab[KILN_OP_SGD8_STEP] = (kiln_op_info){"sgd8_step", KILN_KIND_INPLACE, NULL};
}


static kiln_status check_lr_wd(const char *who, float lr, float wd) {
    if (!kiln__finite_nonneg(lr)) return kiln__errs(KILN_ERR_ARG, "%s: invalid learning rate: %g (must be >= 0)", who, (double)lr);
    if (!kiln__finite_nonneg(wd))
        return kiln__errs(KILN_ERR_ARG, "%s: invalid weight_decay value: %g (must be >= 0)", who, (double)wd);
    return KILN_OK;
}

static kiln_status check_beta(const char *who, int i, float b, bool one_ok) {
    if (b >= 0.0f && (b < 1.0f || (one_ok && b == 1.0f))) return KILN_OK;
    return kiln__errs(KILN_ERR_ARG, "%s: invalid beta parameter at index %d: %g (must be in [0, 1%s)", who, i, (double)b,
                      one_ok ? "]" : ")");
}

/* Does parameter p get 8-bit state? */
static bool is_8bit(const kiln_tensor *p) { return p->dtype == KILN_F32 && kiln_tensor_numel(p) >= KILN__MIN_8BIT_NUMEL; }

/* One 8-bit state of p: its codes and absmax leaves into srcs[0..1]
 * ("<suffix>.q" and "<suffix>.a"). */
static kiln_status state8(kiln_optim *opt, kiln_tensor *p, const char *suffix, kiln_tensor **srcs) {
    int64_t n = kiln_tensor_numel(p), nq = (n + 3) / 4, nb = kiln__qblocks(n);
    char qs[24], as[24];
    snprintf(qs, sizeof qs, "%.14s.q", suffix);
    snprintf(as, sizeof as, "%.14s.a", suffix);
    if (!(srcs[0] = kiln__optim_state_shaped(opt, p, KILN_I32, 1, &nq, qs))) return kiln_last_status();
    if (!(srcs[1] = kiln__optim_state_shaped(opt, p, KILN_F32, 1, &nb, as))) return kiln_last_status();
    return KILN_OK;
}

kiln_tensor *kiln__opt8bit_maps(kiln_optim *opt) {
    kiln_tensor *t = kiln_new_1d(opt->ctx, KILN_F32, 512);
    float *d = t ? kiln_tensor_data(t) : NULL;
    if (!d) return NULL;
    kiln__dynamic_map(true, d);
    kiln__dynamic_map(false, d + 256);
    snprintf(t->name, sizeof t->name, "%s.maps", opt->impl->name);
    return t;
}

kiln_tensor *kiln__adam8_node(kiln_optim *opt, int i, kiln_tensor *maps, bool decoupled) {
    kiln_tensor *p = opt->params[i], *srcs[8] = {p, p->grad}, *t;
    if (!is_8bit(p)) return kiln__adam_node(opt, i, false, decoupled);
    if (state8(opt, p, "exp_avg", srcs + 2) || state8(opt, p, "exp_avg_sq", srcs + 4)) return NULL;
    srcs[6] = maps;
    srcs[7] = opt->hyper;
    if (!(t = kiln__optim_step_node(opt, i, KILN_OP_ADAM8_STEP, 8, srcs))) return NULL;
    t->ip[0] = 0; /* amsgrad */
    t->ip[1] = decoupled;
    return t;
}

static kiln_optim *adam8_new(kiln_ctx *ctx, const char *who, bool decoupled, kiln_tensor *const *params, int n,
                             const kiln_adam_config *cfg) {
    kiln_adam_config c = cfg ? *cfg : decoupled ? kiln_adamw_defaults() : kiln_adam_defaults();
    if (kiln__adam_check_config(who, &c)) return NULL;
    if (c.amsgrad) return kiln__err(KILN_ERR_ARG, "%s: amsgrad is not supported by the 8-bit optimizers", who);
    kiln_optim *opt = kiln__optim_new(ctx, who, decoupled ? &adamw8_impl : &adam8_impl, params, n, c.lr);
    if (!opt) return NULL;
    kiln_adam_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = c;
    opt->cfg = own;
    kiln_tensor *maps = kiln__opt8bit_maps(opt);
    if (!maps) return NULL;
    for (int i = 0; i < opt->n_params; i++)
        if (!kiln__adam8_node(opt, i, maps, decoupled)) return NULL;
    return opt;
}

kiln_optim *kiln_adam8bit_new(kiln_ctx *ctx, const kiln_adam_config *cfg) {
    return adam8_new(ctx, "kiln_adam8bit_new", false, NULL, 0, cfg);
}
kiln_optim *kiln_adam8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg) {
    return adam8_new(ctx, "kiln_adam8bit_new_for", false, params, n, cfg);
}
kiln_optim *kiln_adamw8bit_new(kiln_ctx *ctx, const kiln_adam_config *cfg) {
    return adam8_new(ctx, "kiln_adamw8bit_new", true, NULL, 0, cfg);
}
kiln_optim *kiln_adamw8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg) {
    return adam8_new(ctx, "kiln_adamw8bit_new_for", true, params, n, cfg);
}

static kiln_optim *lion8_new(kiln_ctx *ctx, const char *who, kiln_tensor *const *params, int n,
                             const kiln_lion_config *cfg) {
    kiln_lion_config c = cfg ? *cfg : kiln_lion_defaults();
    if (check_lr_wd(who, c.lr, c.weight_decay) || check_beta(who, 0, c.beta1, true) ||
        check_beta(who, 1, c.beta2, true))
        return NULL;
    kiln_optim *opt = kiln__optim_new(ctx, who, &lion8_impl, params, n, c.lr);
    if (!opt) return NULL;
    kiln_lion_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = c;
    opt->cfg = own;
    kiln_tensor *maps = kiln__opt8bit_maps(opt);
    if (!maps) return NULL;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *p = opt->params[i], *srcs[6] = {p, p->grad};
        if (is_8bit(p)) {
            if (state8(opt, p, "exp_avg", srcs + 2)) return NULL;
            srcs[4] = maps;
            srcs[5] = opt->hyper;
            if (!kiln__optim_step_node(opt, i, KILN_OP_LION8_STEP, 6, srcs)) return NULL;
        } else {
            if (!(srcs[2] = kiln__optim_state(opt, p, "exp_avg"))) return NULL;
            srcs[3] = opt->hyper;
            if (!kiln__optim_step_node(opt, i, KILN_OP_LION_STEP, 4, srcs)) return NULL;
        }
    }
    return opt;
}

kiln_optim *kiln_lion8bit_new(kiln_ctx *ctx, const kiln_lion_config *cfg) {
    return lion8_new(ctx, "kiln_lion8bit_new", NULL, 0, cfg);
}
kiln_optim *kiln_lion8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_lion_config *cfg) {
    return lion8_new(ctx, "kiln_lion8bit_new_for", params, n, cfg);
}

static kiln_optim *sgd8_new(kiln_ctx *ctx, const char *who, kiln_tensor *const *params, int n,
                            const kiln_sgd_config *cfg) {
    if (!cfg) return kiln__err(KILN_ERR_ARG, "%s: config is NULL", who);
    if (check_lr_wd(who, cfg->lr, cfg->weight_decay)) return NULL;
    if (!(cfg->momentum > 0.0f) || isinf(cfg->momentum))
        return kiln__err(KILN_ERR_ARG, "%s: invalid momentum value: %g (8-bit SGD needs momentum > 0)", who,
                         (double)cfg->momentum);
    if (!(cfg->dampening == cfg->dampening) || isinf(cfg->dampening))
        return kiln__err(KILN_ERR_ARG, "%s: invalid dampening value: %g", who, (double)cfg->dampening);
    if (cfg->nesterov && cfg->dampening != 0.0f)
        return kiln__err(KILN_ERR_ARG, "%s: Nesterov momentum requires zero dampening (dampening %g)", who,
                         (double)cfg->dampening);
    kiln_optim *opt = kiln__optim_new(ctx, who, &sgd8_impl, params, n, cfg->lr);
    if (!opt) return NULL;
    kiln_sgd_config *own = kiln__arena_alloc(ctx, sizeof *own);
    if (!own) return NULL;
    *own = *cfg;
    opt->cfg = own;
    kiln_tensor *maps = kiln__opt8bit_maps(opt);
    if (!maps) return NULL;
    for (int i = 0; i < opt->n_params; i++) {
        kiln_tensor *p = opt->params[i], *srcs[6] = {p, p->grad}, *t;
        if (is_8bit(p)) {
            if (state8(opt, p, "momentum_buffer", srcs + 2)) return NULL;
            srcs[4] = maps;
            srcs[5] = opt->hyper;
            t = kiln__optim_step_node(opt, i, KILN_OP_SGD8_STEP, 6, srcs);
        } else {
            if (!(srcs[2] = kiln__optim_state(opt, p, "momentum_buffer"))) return NULL;
            srcs[3] = opt->hyper;
            t = kiln__optim_step_node(opt, i, KILN_OP_SGD_STEP, 4, srcs);
        }
        if (!t) return NULL;
        t->ip[0] = cfg->nesterov;
        t->ip[1] = 1; /* has_momentum */
    }
    return opt;
}

kiln_optim *kiln_sgd8bit_new(kiln_ctx *ctx, const kiln_sgd_config *cfg) {
    return sgd8_new(ctx, "kiln_sgd8bit_new", NULL, 0, cfg);
}
kiln_optim *kiln_sgd8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_sgd_config *cfg) {
    return sgd8_new(ctx, "kiln_sgd8bit_new_for", params, n, cfg);
}
