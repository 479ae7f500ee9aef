/* lora.c — LoRA adapters on the models' linear layers and PEFT's adapter
 * files (see lora.h). */
#include "lora.h"

#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lora_config lora_defaults(void) { return (lora_config){.r = 8, .alpha = 16, .dropout = 0}; }

/* PEFT's rule for a string in target_modules: the whole name, or its last
 * dotted parts. */
static bool matches(const char *module, const char *target) {
    size_t n = strlen(module), t = strlen(target);
    return t && (!strcmp(module, target) || (t < n && module[n - t - 1] == '.' && !strcmp(module + n - t, target)));
}

static kiln_tensor *apply(void *user, kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *y) {
    lora *l = user;
    if (l->merged || ctx != l->ctx) return y;
    for (int i = 0; i < l->n_layers; i++) {
        const lora_layer *a = &l->layers[i];
        if (a->w != w) continue;
        const double p = l->cfg.dropout;
        kiln_tensor *d = p > 0 ? kiln_dropout(ctx, x, p, model_param_seed(l->seed, a->module)) : x;
        kiln_tensor *u = kiln_linear(ctx, kiln_linear(ctx, d, a->a, NULL), a->b, NULL);
        return kiln_add(ctx, y, kiln_scale(ctx, u, l->cfg.alpha / l->cfg.r));
    }
    return y;
}

void lora_free(lora *l) {
    if (!l) return;
    model_linear_hook_remove(apply, l);
    if (l->cfg.targets)
        for (int i = 0; i < l->cfg.n_targets; i++) free((char *)l->cfg.targets[i]);
    free((void *)l->cfg.targets);
    free((char *)l->cfg.target_regex);
    free((char *)l->cfg.base_model);
    free(l->layers);
    free(l->params);
    free(l);
}

static char *dup(const char *s) {
    char *d = s ? malloc(strlen(s) + 1) : NULL;
    if (d) strcpy(d, s);
    return d;
}

/* An adapter's parameter name: its weight's name less ".weight", then what. */
static void adapter_name(char name[64], const kiln_tensor *w, const char *what) {
    const char *wn = kiln_tensor_name(w);
    size_t n = strlen(wn);
    if (n > 7 && !strcmp(wn + n - 7, ".weight")) n -= 7;
    snprintf(name, 64, "%.*s.%s", (int)n, wn, what);
}

static kiln_tensor *adapter_param(kiln_ctx *ctx, const kiln_tensor *w, const char *what, int64_t rows, int64_t cols) {
    char name[64];
    adapter_name(name, w, what);
    return kiln_param(ctx, name, KILN_F32, 2, (int64_t[]){rows, cols});
}

/* re: the compiled target_regex, or NULL for the list */
static bool targeted(const lora_config *c, const regex_t *re, const char *module) {
    if (re) return !regexec(re, module, 0, NULL, 0);
    for (int t = 0; t < c->n_targets; t++)
        if (matches(module, c->targets[t])) return true;
    return false;
}

/* PEFT's string form, re.fullmatch(pattern, name): a POSIX extended
 * regular expression anchored at both ends. */
static kiln_status compile_regex(regex_t *re, const char *pattern) {
    for (const char *p = pattern; *p; p++)
        if (*p == '\\' && p[1] && (isalnum((unsigned char)p[1]) && !strchr("wWsSbB", p[1])))
            return kiln_set_error(KILN_ERR_ARG, "lora_attach: target_modules regex '%s': '\\%c' means something else "
                                  "in POSIX than in Python's re (write a class: [0-9] for \\d)", pattern, p[1]);
        else if (*p == '\\' && p[1])
            p++;
    size_t n = strlen(pattern);
    char *anchored = malloc(n + 5);
    if (!anchored) return kiln_set_error(KILN_ERR_OOM, "lora_attach: out of memory");
    snprintf(anchored, n + 5, "^(%s)$", pattern);
    int e = regcomp(re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (!e) return KILN_OK;
    char msg[128];
    regerror(e, re, msg, sizeof msg);
    return kiln_set_error(KILN_ERR_ARG, "lora_attach: target_modules regex '%s': %s (POSIX extended syntax)", pattern,
                          msg);
}

static kiln_status check_config(const lora_config *c) {
    if (!c) return kiln_set_error(KILN_ERR_ARG, "lora_attach: cfg is NULL");
    if (c->r < 1) return kiln_set_error(KILN_ERR_ARG, "lora_attach: r = %d must be >= 1", c->r);
    if (!(c->alpha > 0) || isinf(c->alpha))
        return kiln_set_error(KILN_ERR_ARG, "lora_attach: lora_alpha = %g must be > 0 and finite", c->alpha);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return kiln_set_error(KILN_ERR_ARG, "lora_attach: lora_dropout = %g must be in [0, 1)", c->dropout);
    if (c->target_regex && (c->n_targets || !*c->target_regex))
        return kiln_set_error(KILN_ERR_ARG, "lora_attach: target_regex '%s' %s", c->target_regex,
                              *c->target_regex ? "and a list of targets: give one form of target_modules"
                                               : "is empty");
    if (c->target_regex) return KILN_OK;
    if (c->n_targets < 1 || !c->targets)
        return kiln_set_error(KILN_ERR_ARG, "lora_attach: no target_modules");
    for (int t = 0; t < c->n_targets; t++)
        if (!c->targets[t] || !*c->targets[t])
            return kiln_set_error(KILN_ERR_ARG, "lora_attach: target_modules[%d] is %s", t,
                                  c->targets[t] ? "empty" : "NULL");
    return KILN_OK;
}

lora *lora_attach(kiln_ctx *ctx, int n, const char *const *modules, kiln_tensor *const *weights,
                  const lora_config *cfg, uint64_t seed) {
    if (!ctx || n < 1 || !modules || !weights) {
        kiln_set_error(KILN_ERR_ARG, "lora_attach: needs a context and n >= 1 modules with weights");
        return NULL;
    }
    if (check_config(cfg)) return NULL;
    regex_t regex, *re = NULL;
    if (cfg->target_regex) {
        if (compile_regex(&regex, cfg->target_regex)) return NULL;
        re = &regex;
        int hits = 0;
        for (int i = 0; i < n; i++) hits += targeted(cfg, re, modules[i]);
        if (!hits) {
            regfree(re);
            kiln_set_error(KILN_ERR_ARG, "lora_attach: target_modules regex '%s' matches none of the %d linear layers "
                           "as a whole (e.g. '%s')", cfg->target_regex, n, modules[0]);
            return NULL;
        }
    }
    for (int t = 0; t < cfg->n_targets; t++) {
        int hits = 0;
        for (int i = 0; i < n; i++) hits += matches(modules[i], cfg->targets[t]);
        if (!hits) {
            kiln_set_error(KILN_ERR_ARG, "lora_attach: target module '%s' matches none of the %d linear layers "
                           "(e.g. '%s')", cfg->targets[t], n, modules[0]);
            return NULL;
        }
    }
    lora *l = calloc(1, sizeof *l);
    if (l) l->layers = calloc((size_t)n, sizeof *l->layers);
    if (l) l->params = calloc((size_t)(2 * n), sizeof *l->params);
    if (l) l->cfg.targets = calloc((size_t)cfg->n_targets + 1, sizeof *l->cfg.targets);
    bool ok = l && l->layers && l->params && l->cfg.targets;
    if (ok) {
        l->ctx = ctx;
        l->seed = seed;
        l->cfg.r = cfg->r, l->cfg.alpha = cfg->alpha, l->cfg.dropout = cfg->dropout;
        l->cfg.n_targets = cfg->n_targets;
        for (int t = 0; ok && t < cfg->n_targets; t++) ok = (((const char **)l->cfg.targets)[t] = dup(cfg->targets[t]));
        if (ok && cfg->base_model) ok = (l->cfg.base_model = dup(cfg->base_model));
        if (ok && re) ok = (l->cfg.target_regex = dup(cfg->target_regex));
    }
    const int n_had = kiln_ctx_params(ctx, NULL, 0);
    kiln_tensor **had = ok ? malloc((size_t)(n_had + 1) * sizeof *had) : NULL;
    if (!had) {
        if (re) regfree(re);
        lora_free(l);
        kiln_set_error(KILN_ERR_OOM, "lora_attach: out of memory");
        return NULL;
    }
    kiln_ctx_params(ctx, had, n_had);
    /* every check before the first parameter: a parameter cannot be taken
     * back, and would keep its name from a later attach */
    for (int i = 0; i < n; i++) {
        if (!targeted(cfg, re, modules[i])) continue;
        kiln_tensor *w = weights[i];
        if (!w || kiln_tensor_ndim(w) != 2 || strlen(modules[i]) >= sizeof l->layers->module) {
            kiln_set_error(KILN_ERR_SHAPE, "lora_attach: module '%.96s': %s", modules[i],
                           w && kiln_tensor_ndim(w) == 2 ? "the name is 96 bytes or longer"
                                                         : "the weight must be 2-d [out, in]");
            goto fail;
        }
        char name[64];
        adapter_name(name, w, "lora_A");
        for (int j = 0; j < n_had; j++)
            if (!strcmp(kiln_tensor_name(had[j]), name)) {
                kiln_set_error(KILN_ERR_STATE, "lora_attach: module '%s' has adapters already ('%s')", modules[i],
                               name);
                goto fail;
            }
    }
    for (int i = 0; i < n; i++) {
        if (!targeted(cfg, re, modules[i])) continue;
        kiln_tensor *w = weights[i];
        lora_layer *a = &l->layers[l->n_layers];
        const int64_t out = kiln_tensor_dim(w, 0), in = kiln_tensor_dim(w, 1);
        strcpy(a->module, modules[i]);
        a->w = w;
        ok = (a->a = adapter_param(ctx, w, "lora_A", cfg->r, in)) &&
             !kiln_tensor_init_linear(a->a, model_param_seed(seed, a->module), in) &&
             (a->b = adapter_param(ctx, w, "lora_B", out, cfg->r));
        if (!ok) goto fail;
        l->params[l->n_params++] = a->a;
        l->params[l->n_params++] = a->b;
        l->n_layers++;
    }
    if (model_linear_hook_add(apply, l)) goto fail;
    /* frozen only now, so that a failure above leaves W as it was */
    for (int i = 0; i < l->n_layers; i++)
        if (kiln_tensor_requires_grad(l->layers[i].w)) kiln_tensor_set_requires_grad(l->layers[i].w, false);
    if (re) regfree(re);
    free(had);
    return l;
fail:
    if (re) regfree(re);
    free(had);
    lora_free(l);
    return NULL;
}

/* The Hugging Face names of a llama's linear weights, in kiln's order. */
static const char *const llama_hf[7][2] = {
    {"attention.wq", "self_attn.q_proj"},  {"attention.wk", "self_attn.k_proj"}, {"attention.wv", "self_attn.v_proj"},
    {"attention.wo", "self_attn.o_proj"},  {"feed_forward.w1", "mlp.gate_proj"}, {"feed_forward.w2", "mlp.down_proj"},
    {"feed_forward.w3", "mlp.up_proj"},
};

/* lora_attach over n weights whose module names are printf(fmt[j], layer). */
static lora *attach_blocks(kiln_ctx *ctx, int layers, int per, const char *const *fmt, kiln_tensor *const *w,
                           const lora_config *cfg, uint64_t seed) {
    int n = layers * per;
    char *names = malloc((size_t)n * 96);
    const char **mods = malloc((size_t)n * sizeof *mods);
    lora *l = NULL;
    if (!names || !mods) {
        kiln_set_error(KILN_ERR_OOM, "lora_attach: out of memory");
    } else {
        for (int i = 0; i < n; i++) {
            snprintf(names + 96 * i, 96, fmt[i % per], i / per);
            mods[i] = names + 96 * i;
        }
        l = lora_attach(ctx, n, mods, w, cfg, seed);
    }
    free(names);
    free(mods);
    return l;
}

lora *lora_attach_llama(llama *m, const lora_config *cfg, uint64_t seed) {
    if (!m) {
        kiln_set_error(KILN_ERR_ARG, "lora_attach_llama: NULL model");
        return NULL;
    }
    const char *fmt[7];
    char buf[7][64];
    for (int j = 0; j < 7; j++) snprintf(buf[j], sizeof buf[j], "model.layers.%%d.%s", llama_hf[j][1]), fmt[j] = buf[j];
    kiln_tensor **w = malloc((size_t)(7 * m->cfg.layers) * sizeof *w);
    if (!w) {
        kiln_set_error(KILN_ERR_OOM, "lora_attach_llama: out of memory");
        return NULL;
    }
    for (int i = 0; i < m->cfg.layers; i++) {
        const llama_layer *y = &m->layers[i];
        kiln_tensor *row[7] = {y->wq, y->wk, y->wv, y->wo, y->w1, y->w2, y->w3};
        memcpy(w + 7 * i, row, sizeof row);
    }
    lora *l = attach_blocks(m->ctx, (int)m->cfg.layers, 7, fmt, w, cfg, seed);
    free(w);
    if (l) m->fuse = false; /* the stacked products would pass the adapters by */
    return l;
}

lora *lora_attach_gpt(gpt *m, const lora_config *cfg, uint64_t seed) {
    if (!m) {
        kiln_set_error(KILN_ERR_ARG, "lora_attach_gpt: NULL model");
        return NULL;
    }
    static const char *const fmt[4] = {"transformer.h.%d.attn.c_attn", "transformer.h.%d.attn.c_proj",
                                       "transformer.h.%d.mlp.c_fc", "transformer.h.%d.mlp.c_proj"};
    kiln_tensor **w = malloc((size_t)(4 * m->cfg.layers) * sizeof *w);
    if (!w) {
        kiln_set_error(KILN_ERR_OOM, "lora_attach_gpt: out of memory");
        return NULL;
    }
    for (int i = 0; i < m->cfg.layers; i++) {
        const gpt_block *b = &m->blocks[i];
        kiln_tensor *row[4] = {b->attn_w, b->proj_w, b->fc_w, b->mlp_proj_w};
        memcpy(w + 4 * i, row, sizeof row);
    }
    lora *l = attach_blocks(m->ctx, (int)m->cfg.layers, 4, fmt, w, cfg, seed);
    free(w);
    if (l) l->fan_in_fan_out = true;
    return l;
}

kiln_status lora_merge(lora *l) {
    if (!l) return kiln_set_error(KILN_ERR_ARG, "lora_merge: NULL lora");
    if (l->merged) return kiln_set_error(KILN_ERR_STATE, "lora_merge: the adapters are merged already");
    const double s = l->cfg.alpha / l->cfg.r;
    const int64_t r = l->cfg.r;
    kiln_status st = KILN_OK;
    for (int i = 0; i < l->n_layers && !st; i++) {
        const lora_layer *a = &l->layers[i];
        const int64_t out = kiln_tensor_dim(a->w, 0), in = kiln_tensor_dim(a->w, 1);
        float *w = malloc((size_t)(out * in) * sizeof *w), *av = malloc((size_t)(r * in) * sizeof *av),
              *bv = malloc((size_t)(out * r) * sizeof *bv);
        if (!w || !av || !bv) st = kiln_set_error(KILN_ERR_OOM, "lora_merge: out of memory");
        if (!st) st = kiln_tensor_get_f32(a->w, w, out * in);
        if (!st) st = kiln_tensor_get_f32(a->a, av, r * in);
        if (!st) st = kiln_tensor_get_f32(a->b, bv, out * r);
        for (int64_t o = 0; !st && o < out; o++)
            for (int64_t k = 0; k < r; k++) {
                const float c = (float)(s * bv[o * r + k]);
                for (int64_t j = 0; j < in; j++) w[o * in + j] += c * av[k * in + j];
            }
        if (!st) st = llama_put_rows(a->w, 0, out, w);
        if (st) kiln_set_error(st, "lora_merge: %s: %s", a->module, kiln_last_error());
        free(w), free(av), free(bv);
    }
    if (!st) l->merged = true;
    return st;
}
