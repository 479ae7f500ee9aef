/* llama.c — the Llama architecture and its KV cache (see llama.h). Shapes:
 * B batch, T positions, D dim, H query heads, G kv heads, hd = D / H. */
#include "llama.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

llama_config llama_defaults(void) {
    return (llama_config){.vocab = 256, .context = 128, .layers = 4, .heads = 4, .kv_heads = 0, .dim = 256,
                          .hidden = 0, .multiple_of = 256, .norm_eps = 1e-5, .rope_theta = 10000.0};
}

/* An inference model's dtype for a weight of this shape: the embedding in
 * llama_embedding_dtype, NF4_DQ only where the tensor is whole
 * super-blocks (NF4 otherwise), norms f32. */
static kiln_dtype infer_dtype(const llama *m, const char *what, int ndim, const int64_t *shape) {
    kiln_dtype dt = ndim == 1 ? KILN_F32 : m->weights;
    if (ndim == 2 && !strcmp(what, "tok_embeddings.weight")) dt = llama_embedding_dtype(m->weights);
    if (dt == KILN_NF4_DQ && (shape[0] * shape[1]) % kiln_dtype_block(KILN_NF4_DQ)) dt = KILN_NF4;
    return dt;
}

static void param_name(char *name, size_t size, int layer, const char *what) {
    if (layer >= 0) snprintf(name, size, "layers.%d.%s", layer, what);
    else snprintf(name, size, "%s", what);
}

/* Make parameter "layers.{layer}.{what}" (or "{what}" for layer < 0) and list
 * it. An inference model makes plain leaves instead: no gradient, no random
 * init (norms 1, weights zero blocks), 2-d weights in infer_dtype. */
static kiln_tensor *param(llama *m, int layer, const char *what, int ndim, const int64_t *shape, model_init init,
                          uint64_t seed) {
    char name[64];
    param_name(name, sizeof name, layer, what);
    kiln_tensor *p;
    if (m->inference) {
        p = kiln_tensor_new(m->ctx, infer_dtype(m, what, ndim, shape), ndim, shape);
        if (p && init == MODEL_INIT_ONES && kiln_tensor_fill(p, 1.0)) p = NULL;
        if (p) kiln_tensor_set_name(p, name);
    } else {
        p = model_param(m->ctx, name, ndim, shape, init, 0.02, seed);
    }
    if (p) m->params[m->n_params++] = p;
    return p;
}

/* An inference model's weights that read the same input, stacked by rows
 * in one leaf [sum rows, cols] (wq|wk|wv, w1|w3), so a token runs one
 * matrix-vector product over them instead of n. NULL (no error) for a
 * training model, or where the parts could not be row views of it in the
 * dtype each would have alone (NF4_DQ's super-blocks, a part starting
 * inside a block). */
static kiln_tensor *stacked(llama *m, int n, const char *const *what, const int64_t *rows, int64_t cols) {
    if (!m->inference) return NULL;
    int64_t total = 0;
    kiln_dtype dt = infer_dtype(m, what[0], 2, (int64_t[]){rows[0], cols});
    for (int i = 0; i < n; i++) {
        if (infer_dtype(m, what[i], 2, (int64_t[]){rows[i], cols}) != dt || (total * cols) % kiln_dtype_block(dt))
            return NULL;
        total += rows[i];
    }
    if (infer_dtype(m, what[0], 2, (int64_t[]){total, cols}) != dt) return NULL;
    return kiln_tensor_new(m->ctx, dt, 2, (int64_t[]){total, cols});
}

/* Weight "layers.{layer}.{what}" [rows, cols]: rows [row0, row0 + rows) of
 * the stacked leaf, a view listed as param lists its leaves (loaders fill
 * it in place), or a parameter of its own where there is no stack. */
static kiln_tensor *part(llama *m, int layer, const char *what, kiln_tensor *stack, int64_t row0, int64_t rows,
                         int64_t cols, uint64_t seed) {
    if (!stack) return param(m, layer, what, 2, (int64_t[]){rows, cols}, MODEL_INIT_NORMAL, seed);
    char name[64];
    param_name(name, sizeof name, layer, what);
    kiln_tensor *p = kiln_slice(m->ctx, stack, 0, row0, row0 + rows, 1);
    if (p) kiln_tensor_set_name(p, name);
    if (p) m->params[m->n_params++] = p;
    return p;
}

const llama_config_names llama_config_fields = {"vocab", "context", "layers", "heads", "kv_heads",
                                                "dim",   "hidden",  "norm_eps", "rope_theta"};

kiln_status llama_config_check(const llama_config *c, const llama_config_names *nm, const char *who,
                               const char *source, kiln_status bad) {
    char at[4200];
    snprintf(at, sizeof at, "%s%s%s", who, source ? ": " : "", source ? source : "");
    const struct { const char *name; int64_t v; } sizes[] = {
        {nm->vocab, c->vocab}, {nm->context, c->context}, {nm->layers, c->layers}, {nm->heads, c->heads},
        {nm->dim, c->dim},     {nm->hidden, c->hidden},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].v < 1)
            return kiln_set_error(bad, "%s: %s = %lld must be >= 1", at, sizes[i].name, (long long)sizes[i].v);
    if (c->kv_heads < 0)
        return kiln_set_error(bad, "%s: %s = %lld must be >= 1", at, nm->kv_heads, (long long)c->kv_heads);
    const int64_t kv = c->kv_heads ? c->kv_heads : c->heads;
    if (c->dim % c->heads)
        return kiln_set_error(bad, "%s: %s = %lld does not divide %s = %lld", at, nm->heads, (long long)c->heads,
                              nm->dim, (long long)c->dim);
    if ((c->dim / c->heads) % 2)
        return kiln_set_error(bad, "%s: the head size %s / %s = %lld is odd (rotary embeddings rotate pairs)", at,
                              nm->dim, nm->heads, (long long)(c->dim / c->heads));
    if (c->heads % kv)
        return kiln_set_error(bad, "%s: %s = %lld does not divide %s = %lld", at, nm->kv_heads, (long long)kv,
                              nm->heads, (long long)c->heads);
    const struct { const char *name; double v; } reals[] = {{nm->norm_eps, c->norm_eps},
                                                            {nm->rope_theta, c->rope_theta}};
    for (int i = 0; i < 2; i++)
        if (!(reals[i].v > 0) || isinf(reals[i].v))
            return kiln_set_error(bad, "%s: %s = %g must be > 0 and finite", at, reals[i].name, reals[i].v);
    return KILN_OK;
}

kiln_dtype llama_embedding_dtype(kiln_dtype weights) { return weights == KILN_NF4_DQ ? KILN_NF4 : weights; }

static llama *make(kiln_ctx *ctx, const llama_config *cfg, uint64_t seed, bool inference, kiln_dtype weights,
                   bool tied) {
    const char *who = inference ? "llama_new_inference" : "llama_new";
    llama_config c = cfg ? *cfg : llama_defaults();
    if (c.kv_heads == 0) c.kv_heads = c.heads;
    if (c.hidden == 0 && c.multiple_of > 0) { /* Meta's FeedForward sizing */
        int64_t h = 2 * (4 * c.dim) / 3;
        c.hidden = c.multiple_of * ((h + c.multiple_of - 1) / c.multiple_of);
    }
    if (!ctx) {
        kiln_set_error(KILN_ERR_ARG, "%s: ctx is NULL", who);
        return NULL;
    }
    if (llama_config_check(&c, &llama_config_fields, who, NULL, KILN_ERR_ARG)) return NULL;
    if (inference && (weights < 0 || weights >= KILN_DTYPE_COUNT ||
                      (weights != KILN_F32 && !kiln_dtype_is_quantized(weights)))) {
        kiln_set_error(KILN_ERR_DTYPE, "%s: weights in %s (F32 or a quantized dtype)", who,
                       weights >= 0 && weights < KILN_DTYPE_COUNT ? kiln_dtype_name(weights) : "an unknown dtype");
        return NULL;
    }
    llama *m = calloc(1, sizeof *m);
    if (m) m->layers = calloc((size_t)c.layers, sizeof *m->layers);
    if (m) m->params = calloc((size_t)(3 + 9 * c.layers), sizeof *m->params);
    if (!m || !m->layers || !m->params) {
        llama_free(m);
        kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
        return NULL;
    }
    m->ctx = ctx;
    m->cfg = c;
    m->inference = inference;
    m->weights = inference ? weights : KILN_F32;
    m->fuse = inference;
    const int64_t D = c.dim, hd = c.dim / c.heads, Q = c.heads * hd, KV = c.kv_heads * hd, F = c.hidden;
    bool ok = (m->tok_embeddings =
                   param(m, -1, "tok_embeddings.weight", 2, (int64_t[]){c.vocab, D}, MODEL_INIT_NORMAL, seed)) != NULL;
    static const char *const qkv[3] = {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight"};
    static const char *const w13[2] = {"feed_forward.w1.weight", "feed_forward.w3.weight"};
    for (int l = 0; ok && l < c.layers; l++) {
        llama_layer *y = &m->layers[l];
        y->wqkv = stacked(m, 3, qkv, (int64_t[]){Q, KV, KV}, D);
        y->w13 = stacked(m, 2, w13, (int64_t[]){F, F}, D);
        ok = (y->attention_norm = param(m, l, "attention_norm.weight", 1, (int64_t[]){D}, MODEL_INIT_ONES, seed)) &&
             (y->wq = part(m, l, qkv[0], y->wqkv, 0, Q, D, seed)) &&
             (y->wk = part(m, l, qkv[1], y->wqkv, Q, KV, D, seed)) &&
             (y->wv = part(m, l, qkv[2], y->wqkv, Q + KV, KV, D, seed)) &&
             (y->wo = param(m, l, "attention.wo.weight", 2, (int64_t[]){D, Q}, MODEL_INIT_NORMAL, seed)) &&
             (y->ffn_norm = param(m, l, "ffn_norm.weight", 1, (int64_t[]){D}, MODEL_INIT_ONES, seed)) &&
             (y->w1 = part(m, l, w13[0], y->w13, 0, F, D, seed)) &&
             (y->w2 = param(m, l, "feed_forward.w2.weight", 2, (int64_t[]){D, F}, MODEL_INIT_NORMAL, seed)) &&
             (y->w3 = part(m, l, w13[1], y->w13, F, F, D, seed));
        y->stacked_of[0] = y->wq, y->stacked_of[1] = y->wk, y->stacked_of[2] = y->wv;
        y->stacked_of[3] = y->w1, y->stacked_of[4] = y->w3;
    }
    ok = ok && (m->norm = param(m, -1, "norm.weight", 1, (int64_t[]){D}, MODEL_INIT_ONES, seed));
    if (ok && inference && tied) { /* one tensor for both: the embedding's dtype */
        m->output = m->tok_embeddings;
        m->tied = true;
    } else if (ok) {
        ok = (m->output = param(m, -1, "output.weight", 2, (int64_t[]){c.vocab, D}, MODEL_INIT_NORMAL, seed)) != NULL;
    }
    if (!ok) {
        llama_free(m);
        return NULL;
    }
    return m;
}

llama *llama_new(kiln_ctx *ctx, const llama_config *cfg, uint64_t seed) {
    return make(ctx, cfg, seed, false, KILN_F32, false);
}

llama *llama_new_inference(kiln_ctx *ctx, const llama_config *cfg, kiln_dtype weights, bool tied_output) {
    return make(ctx, cfg, 0, true, weights, tied_output);
}

void llama_free(llama *m) {
    if (!m) return;
    free(m->layers);
    free(m->params);
    free(m);
}

llama_cache *llama_cache_new(llama *m, int64_t batch, int64_t len) {
    const llama_config *c = &m->cfg;
    if (batch < 1 || len < 1 || len > c->context) {
        kiln_set_error(KILN_ERR_ARG, "llama_cache_new: batch %lld and len %lld must be >= 1, len <= context %lld",
                       (long long)batch, (long long)len, (long long)c->context);
        return NULL;
    }
    llama_cache *k = calloc(1, sizeof *k);
    if (k) k->k = calloc((size_t)(2 * c->layers), sizeof *k->k);
    if (!k || !k->k) {
        llama_cache_free(k);
        kiln_set_error(KILN_ERR_OOM, "llama_cache_new: out of memory");
        return NULL;
    }
    k->v = k->k + c->layers;
    k->batch = batch;
    k->len = len;
    for (int l = 0; l < 2 * c->layers; l++)
        if (!(k->k[l] = kiln_new_4d(m->ctx, KILN_F32, batch, c->kv_heads, len, c->dim / c->heads))) {
            llama_cache_free(k);
            return NULL;
        }
    return k;
}

void llama_cache_free(llama_cache *c) {
    if (!c) return;
    free(c->k);
    free(c);
}

/* x [B, T, heads*hd] -> [B, heads, T, hd] */
static kiln_tensor *split_heads(kiln_ctx *ctx, kiln_tensor *x, int64_t B, int64_t T, int64_t heads, int64_t hd) {
    return kiln_permute(ctx, kiln_reshape(ctx, x, 4, (int64_t[]){B, T, heads, hd}), (int[]){0, 2, 1, 3});
}

/* Whether a layer's stacked weight serves its n weights now: the model
 * fuses, the weights and their permutations are still those stacked. */
static bool stacked_ok(const llama *m, const kiln_tensor *stack, kiln_tensor *const *made, kiln_tensor *const *perm_made,
                       kiln_tensor *const *now, kiln_tensor *const *perm, int n) {
    bool ok = m->fuse && stack;
    for (int i = 0; ok && i < n; i++) ok = now[i] == made[i] && perm[i] == perm_made[i];
    return ok;
}

/* silu(w1 x) * w3 x: one product over w13 where the layer fuses */
static kiln_tensor *swiglu(llama *m, const llama_layer *y, kiln_tensor *x) {
    kiln_ctx *ctx = m->ctx;
    if (stacked_ok(m, y->w13, y->stacked_of + 3, y->stacked_perm + 3, (kiln_tensor *const[]){y->w1, y->w3},
                   (kiln_tensor *const[]){y->w1_perm, y->w3_perm}, 2)) {
        const int64_t F = m->cfg.hidden;
        kiln_tensor *h = model_linear(ctx, x, y->w13, y->stacked_perm[3], NULL);
        return kiln_mul(ctx, kiln_silu(ctx, kiln_slice(ctx, h, -1, 0, F, 1)), kiln_slice(ctx, h, -1, F, 2 * F, 1));
    }
    return kiln_mul(ctx, kiln_silu(ctx, model_linear(ctx, x, y->w1, y->w1_perm, NULL)),
                    model_linear(ctx, x, y->w3, y->w3_perm, NULL));
}

/* Grouped-query causal self-attention of x [B, T, D] (normalized). */
static kiln_tensor *attention(llama *m, int l, kiln_tensor *x, kiln_tensor *pos, llama_cache *cache, int64_t p0,
                              int64_t B, int64_t T) {
    kiln_ctx *ctx = m->ctx;
    const llama_layer *y = &m->layers[l];
    const int64_t H = m->cfg.heads, G = m->cfg.kv_heads, hd = m->cfg.dim / H;
    const double theta = m->cfg.rope_theta;
    if (m->taps) m->taps[4 * l] = x;
    kiln_tensor *q, *k, *v;
    if (stacked_ok(m, y->wqkv, y->stacked_of, y->stacked_perm, (kiln_tensor *const[]){y->wq, y->wk, y->wv},
                   (kiln_tensor *const[]){y->wq_perm, y->wk_perm, y->wv_perm}, 3)) {
        /* one product, its heads split by views ([B, H, 1, hd] at T = 1 is contiguous: no copies) */
        kiln_tensor *qkv = kiln_reshape(ctx, model_linear(ctx, x, y->wqkv, y->stacked_perm[0], NULL), 4,
                                        (int64_t[]){B, T, H + 2 * G, hd});
        q = kiln_permute(ctx, kiln_slice(ctx, qkv, 2, 0, H, 1), (int[]){0, 2, 1, 3});
        k = kiln_permute(ctx, kiln_slice(ctx, qkv, 2, H, H + G, 1), (int[]){0, 2, 1, 3});
        v = kiln_permute(ctx, kiln_slice(ctx, qkv, 2, H + G, H + 2 * G, 1), (int[]){0, 2, 1, 3});
    } else {
        q = split_heads(ctx, model_linear(ctx, x, y->wq, y->wq_perm, NULL), B, T, H, hd);
        k = split_heads(ctx, model_linear(ctx, x, y->wk, y->wk_perm, NULL), B, T, G, hd);
        v = split_heads(ctx, model_linear(ctx, x, y->wv, y->wv_perm, NULL), B, T, G, hd);
    }
    q = kiln_rope(ctx, q, pos, theta, KILN_ROPE_INTERLEAVED);
    k = kiln_rope(ctx, k, pos, theta, KILN_ROPE_INTERLEAVED);
    if (cache) { /* write this step's k, v at p0, then read every position so far */
        k = kiln_slice(ctx, kiln_slice_assign(ctx, cache->k[l], k, 2, p0), 2, 0, p0 + T, 1);
        v = kiln_slice(ctx, kiln_slice_assign(ctx, cache->v[l], v, 2, p0), 2, 0, p0 + T, 1);
    }
    /* causal with the last query aligned to the last key: right with a cache too */
    kiln_tensor *a = kiln_permute(ctx, kiln_attention(ctx, q, k, v, true, 0.0), (int[]){0, 2, 1, 3});
    a = kiln_reshape(ctx, a, 3, (int64_t[]){B, T, H * hd});
    if (m->taps) m->taps[4 * l + 1] = a;
    return model_linear(ctx, a, y->wo, y->wo_perm, NULL);
}

/* The last block's output h [B, T, D], before the final norm and the head. */
static kiln_tensor *hidden(llama *m, kiln_tensor *idx, llama_cache *cache, int64_t pos) {
    kiln_ctx *ctx = m->ctx;
    if (!idx) return NULL;
    const int64_t B = kiln_tensor_dim(idx, 0), T = kiln_tensor_ndim(idx) == 2 ? kiln_tensor_dim(idx, 1) : 0;
    int64_t limit = cache ? cache->len : m->cfg.context;
    if (kiln_tensor_ndim(idx) != 2 || pos < 0 || pos + T > limit || (cache && cache->batch != B)) {
        kiln_set_error(KILN_ERR_SHAPE, "llama_forward: idx must be [B, T] with pos %lld + T <= %lld%s",
                       (long long)pos, (long long)limit, cache ? " and B the cache's batch" : "");
        return NULL;
    }
    /* positions pos .. pos + T - 1, a leaf filled now */
    kiln_tensor *positions = kiln_tensor_new(ctx, KILN_I32, 1, (int64_t[]){T});
    int32_t *pv = malloc((size_t)T * sizeof *pv);
    if (!positions || !pv) {
        free(pv);
        if (positions) kiln_set_error(KILN_ERR_OOM, "llama_forward: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < T; i++) pv[i] = (int32_t)(pos + i);
    kiln_status s = kiln_tensor_set_i32(positions, pv, T);
    free(pv);
    if (s) return NULL;
    const double eps = m->cfg.norm_eps;
    kiln_tensor *h = kiln_get_rows(ctx, m->tok_embeddings, idx);
    bool segments = m->checkpoint && !cache && kiln_ctx_grad_enabled(ctx);
    for (int l = 0; l < m->cfg.layers; l++) {
        const llama_layer *y = &m->layers[l];
        if (segments && kiln_checkpoint_begin(ctx)) return NULL;
        h = kiln_add(ctx, h, attention(m, l, kiln_rms_norm(ctx, h, y->attention_norm, eps), positions, cache, pos, B, T));
        kiln_tensor *x = kiln_rms_norm(ctx, h, y->ffn_norm, eps);
        kiln_tensor *gate = swiglu(m, y, x);
        if (m->taps) m->taps[4 * l + 2] = x, m->taps[4 * l + 3] = gate;
        h = kiln_add(ctx, h, model_linear(ctx, gate, y->w2, y->w2_perm, NULL));
        if (segments && kiln_checkpoint_end(ctx)) return NULL;
    }
    return h;
}

static kiln_tensor *head(llama *m, kiln_tensor *h) {
    return kiln_linear(m->ctx, kiln_rms_norm(m->ctx, h, m->norm, m->cfg.norm_eps), m->output, NULL);
}

kiln_tensor *llama_forward(llama *m, kiln_tensor *idx, llama_cache *cache, int64_t pos) {
    return head(m, hidden(m, idx, cache, pos));
}

kiln_status llama_cache_step(llama *m, llama_cache *c, const int32_t *tokens, int64_t n, float *logits) {
    kiln_ctx *ctx = m->ctx;
    if (!c || !tokens || !logits || n < 1)
        return kiln_set_error(KILN_ERR_ARG, "llama_cache_step: needs a cache, tokens, logits and n >= 1");
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, false);
    /* the step's graph is scratch: rewound afterwards, so generating
     * thousands of tokens does not grow the context */
    kiln_ctx_mark mark = kiln_ctx_get_mark(ctx);
    kiln_tensor *idx = kiln_new_2d(ctx, KILN_I32, c->batch, n);
    kiln_status s = idx ? kiln_tensor_set_i32(idx, tokens, c->batch * n) : kiln_last_status();
    /* only the last position goes through the head (vocab x dim per row) */
    kiln_tensor *out = s ? NULL : head(m, kiln_slice(ctx, hidden(m, idx, c, c->pos), 1, n - 1, n, 1));
    kiln_graph *g = out ? kiln_graph_new(ctx) : NULL;
    if (!s && !g) s = kiln_last_status() ? kiln_last_status() : KILN_ERR_STATE;
    if (!s) s = kiln_graph_add(g, out);
    if (!s) s = kiln_graph_compute(g);
    if (!s) s = kiln_tensor_get_f32(out, logits, c->batch * m->cfg.vocab);
    if (!s) c->pos += n;
    if (g) kiln_graph_free_buffers(g);
    /* refused (nothing freed) where the step made device memory: the context then keeps the step */
    if (kiln_ctx_rewind(ctx, mark) && !s) kiln_clear_error();
    kiln_ctx_set_grad_enabled(ctx, was);
    return s;
}

static kiln_status build(llama *m, int64_t batch, int64_t seq, model_graph *out, bool train) {
    kiln_ctx *ctx = m->ctx;
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, train);
    *out = (model_graph){0};
    out->input = kiln_new_2d(ctx, KILN_I32, batch, seq);
    out->labels = kiln_new_2d(ctx, KILN_I32, batch, seq);
    kiln_tensor *logits = out->input && out->labels ? llama_forward(m, out->input, NULL, 0) : NULL;
    kiln_tensor *loss = kiln_cross_entropy(ctx, logits, out->labels, -100);
    kiln_status s = model_graph_finish(ctx, out, logits, loss, train);
    kiln_ctx_set_grad_enabled(ctx, was);
    return s;
}

kiln_status llama_train_graph(llama *m, int64_t batch, int64_t seq, model_graph *out) {
    return build(m, batch, seq, out, true);
}
kiln_status llama_eval_graph(llama *m, int64_t batch, int64_t seq, model_graph *out) {
    return build(m, batch, seq, out, false);
}
int64_t llama_param_count(const llama *m) { return model_count(m->params, m->n_params); }
