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

static void param_name(char *name, size_t size, int layer, const char *what) {
    if (layer >= 0) snprintf(name, size, "layers.%d.%s", layer, what);
    else snprintf(name, size, "%s", what);
}

/* An inference model's dtype for a weight of this shape: the one its
 * dtype_of chooses, else the embedding in llama_embedding_dtype, NF4_DQ
 * only where the tensor is whole super-blocks (NF4 otherwise); norms f32. */
static kiln_dtype infer_dtype(const llama *m, int layer, const char *what, int ndim, const int64_t *shape) {
    if (ndim == 1) return KILN_F32;
    if (m->dtype_of) {
        char name[64];
        param_name(name, sizeof name, layer, what);
        return m->dtype_of(m->dtype_user, name, shape[0], shape[1]);
    }
    kiln_dtype dt = m->weights;
    if (!strcmp(what, "tok_embeddings.weight")) dt = llama_embedding_dtype(m->weights);
    if (dt == KILN_NF4_DQ && (shape[0] * shape[1]) % kiln_dtype_block(KILN_NF4_DQ)) dt = KILN_NF4;
    return dt;
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
        kiln_dtype dt = infer_dtype(m, layer, what, ndim, shape);
        p = m->leaf_of ? m->leaf_of(m->dtype_user, (const char *const[]){name}, 1, dt, ndim, shape) : NULL;
        if (!p && (p = kiln_tensor_new(m->ctx, dt, ndim, shape)) && init == MODEL_INIT_ONES && kiln_tensor_fill(p, 1.0))
            p = NULL;
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
static kiln_tensor *stacked(llama *m, int layer, int n, const char *const *what, const int64_t *rows, int64_t cols) {
    if (!m->inference) return NULL;
    int64_t total = 0;
    kiln_dtype dt = infer_dtype(m, layer, what[0], 2, (int64_t[]){rows[0], cols});
    for (int i = 0; i < n; i++) {
        if (infer_dtype(m, layer, what[i], 2, (int64_t[]){rows[i], cols}) != dt || (total * cols) % kiln_dtype_block(dt))
            return NULL;
        total += rows[i];
    }
    if (infer_dtype(m, layer, what[0], 2, (int64_t[]){total, cols}) != dt) return NULL;
    char names[3][64];
    const char *const name[3] = {names[0], names[1], names[2]};
    for (int i = 0; i < n; i++) param_name(names[i], sizeof names[i], layer, what[i]);
    kiln_tensor *s = m->leaf_of ? m->leaf_of(m->dtype_user, name, n, dt, 2, (int64_t[]){total, cols}) : NULL;
    return s ? s : kiln_tensor_new(m->ctx, dt, 2, (int64_t[]){total, cols});
}

/* Weight "layers.{layer}.{what}" [rows, cols] (cols 0: a bias [rows]):
 * rows [row0, row0 + rows) of the stacked leaf, a view listed as param
 * lists its leaves (loaders fill it in place), or a parameter of its own
 * where there is no stack (a bias starts at zero). */
static kiln_tensor *part(llama *m, int layer, const char *what, kiln_tensor *stack, int64_t row0, int64_t rows,
                         int64_t cols, uint64_t seed) {
    if (!stack && !cols) return param(m, layer, what, 1, (int64_t[]){rows}, MODEL_INIT_ZEROS, seed);
    if (!stack) return param(m, layer, what, 2, (int64_t[]){rows, cols}, MODEL_INIT_NORMAL, seed);
    char name[64];
    param_name(name, sizeof name, layer, what);
    kiln_tensor *p = kiln_slice(m->ctx, stack, 0, row0, row0 + rows, 1);
    if (p) kiln_tensor_set_name(p, name);
    if (p) m->params[m->n_params++] = p;
    return p;
}

const llama_config_names llama_config_fields = {"vocab",  "context",  "layers",     "heads",   "kv_heads",
                                                "dim",    "hidden",   "norm_eps",   "rope_theta", "head_dim"};

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
    if (c->head_dim < 0 || (c->head_dim % 2))
        return kiln_set_error(bad, "%s: %s = %lld must be even and >= 1 (rotary embeddings rotate pairs)", at,
                              nm->head_dim, (long long)c->head_dim);
    if (!c->head_dim && c->dim % c->heads)
        return kiln_set_error(bad, "%s: %s = %lld does not divide %s = %lld", at, nm->heads, (long long)c->heads,
                              nm->dim, (long long)c->dim);
    if (!c->head_dim && (c->dim / c->heads) % 2)
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
    const struct { const char *name; double v; } extras[] = {{"query_scale", c->query_scale},
                                                             {"attn_softcap", c->attn_softcap},
                                                             {"final_softcap", c->final_softcap},
                                                             {"sliding_window", (double)c->sliding_window}};
    for (int i = 0; i < 4; i++)
        if (!(extras[i].v >= 0) || isinf(extras[i].v))
            return kiln_set_error(bad, "%s: %s = %g must be >= 0 and finite", at, extras[i].name, extras[i].v);
    if (c->traits.swa_every < 0 || (c->traits.swa_every && !c->sliding_window))
        return kiln_set_error(bad, "%s: sliding-window layers every %d need a window >= 1", at, c->traits.swa_every);
    return KILN_OK;
}

kiln_dtype llama_embedding_dtype(kiln_dtype weights) { return weights == KILN_NF4_DQ ? KILN_NF4 : weights; }

/* the most parameters: embedding, norm, output; per layer 9 weights, 3 biases, 2 post norms */
enum { LLAMA_TOP_SLOTS = 3, LLAMA_LAYER_SLOTS = 14 };

static llama *make(kiln_ctx *ctx, const llama_config *cfg, uint64_t seed, bool inference, kiln_dtype weights,
                   bool tied, llama_dtype_fn dtype_of, llama_leaf_fn leaf_of, void *dtype_user) {
    const char *who = inference ? "llama_new_inference" : "llama_new";
    llama_config c = cfg ? *cfg : llama_defaults();
    if (c.kv_heads == 0) c.kv_heads = c.heads;
    if (c.head_dim == 0 && c.heads > 0) c.head_dim = c.dim / c.heads;
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
    if (m) m->params = calloc((size_t)(LLAMA_TOP_SLOTS + LLAMA_LAYER_SLOTS * c.layers), sizeof *m->params);
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
    m->dtype_of = dtype_of, m->leaf_of = leaf_of, m->dtype_user = dtype_user;
    const int64_t D = c.dim, hd = c.head_dim, Q = c.heads * hd, KV = c.kv_heads * hd, F = c.hidden;
    bool ok = (m->tok_embeddings =
                   param(m, -1, "tok_embeddings.weight", 2, (int64_t[]){c.vocab, D}, MODEL_INIT_NORMAL, seed)) != NULL;
    static const char *const qkv[3] = {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight"};
    static const char *const w13[2] = {"feed_forward.w1.weight", "feed_forward.w3.weight"};
    static const char *const bqkv[3] = {"attention.wq.bias", "attention.wk.bias", "attention.wv.bias"};
    if (ok && c.rope_freqs) /* factors, not a parameter: ones until a loader reads a file's */
        ok = (m->rope_freqs = kiln_tensor_new(ctx, KILN_F32, 1, (int64_t[]){hd / 2})) &&
             !kiln_tensor_fill(m->rope_freqs, 1.0);
    for (int l = 0; ok && l < c.layers; l++) {
        llama_layer *y = &m->layers[l];
        y->wqkv = stacked(m, l, 3, qkv, (int64_t[]){Q, KV, KV}, D);
        y->w13 = stacked(m, l, 2, w13, (int64_t[]){F, F}, D);
        if (c.traits.qkv_bias && inference) ok = (y->bqkv = kiln_tensor_new(ctx, KILN_F32, 1, (int64_t[]){Q + 2 * KV}));
        if (ok && c.traits.qkv_bias)
            ok = (y->bq = part(m, l, bqkv[0], y->bqkv, 0, Q, 0, seed)) &&
                 (y->bk = part(m, l, bqkv[1], y->bqkv, Q, KV, 0, seed)) &&
                 (y->bv = part(m, l, bqkv[2], y->bqkv, Q + KV, KV, 0, seed));
        if (ok && c.traits.post_norms)
            ok = (y->attn_post_norm = param(m, l, "attention_post_norm.weight", 1, &D, MODEL_INIT_ONES, seed)) &&
                 (y->ffn_post_norm = param(m, l, "ffn_post_norm.weight", 1, &D, MODEL_INIT_ONES, seed));
        ok = ok && (y->attention_norm = param(m, l, "attention_norm.weight", 1, &D, MODEL_INIT_ONES, seed)) &&
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
    if (ok && dtype_of) m->weights = kiln_tensor_dtype(m->layers[0].wq); /* the layers' dtype, as the file's was */
    m->dtype_of = NULL, m->leaf_of = NULL, m->dtype_user = NULL;
    if (!ok) {
        llama_free(m);
        return NULL;
    }
    return m;
}

llama *llama_new(kiln_ctx *ctx, const llama_config *cfg, uint64_t seed) {
    return make(ctx, cfg, seed, false, KILN_F32, false, NULL, NULL, NULL);
}

llama *llama_new_inference(kiln_ctx *ctx, const llama_config *cfg, kiln_dtype weights, bool tied_output) {
    return make(ctx, cfg, 0, true, weights, tied_output, NULL, NULL, NULL);
}

llama *llama_new_inference_typed(kiln_ctx *ctx, const llama_config *cfg, llama_dtype_fn dtype_of, void *user,
                                 bool tied_output) {
    if (!dtype_of) {
        kiln_set_error(KILN_ERR_ARG, "llama_new_inference_typed: dtype_of is NULL");
        return NULL;
    }
    return make(ctx, cfg, 0, true, KILN_F32, tied_output, dtype_of, NULL, user);
}

llama *llama_new_inference_leaves(kiln_ctx *ctx, const llama_config *cfg, llama_dtype_fn dtype_of,
                                  llama_leaf_fn leaf_of, void *user, bool tied_output) {
    if (!dtype_of || !leaf_of) {
        kiln_set_error(KILN_ERR_ARG, "llama_new_inference_leaves: dtype_of or leaf_of is NULL");
        return NULL;
    }
    return make(ctx, cfg, 0, true, KILN_F32, tied_output, dtype_of, leaf_of, user);
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
    k->chunk = LLAMA_PROMPT_CHUNK;
    for (int l = 0; l < 2 * c->layers; l++)
        if (!(k->k[l] = kiln_new_4d(m->ctx, KILN_F32, batch, c->kv_heads, len, c->head_dim))) {
            llama_cache_free(k);
            return NULL;
        }
    return k;
}

void llama_cache_free(llama_cache *c) {
    if (!c) return;
    llama_rows_free(&c->decode);
    llama_rows_free(&c->prompt[0]);
    llama_rows_free(&c->prompt[1]);
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

/* act(w1 x) * w3 x: one product over w13 where the layer fuses */
static kiln_tensor *gated_mlp(llama *m, const llama_layer *y, kiln_tensor *x) {
    kiln_ctx *ctx = m->ctx;
    kiln_tensor *(*act)(kiln_ctx *, kiln_tensor *) =
        m->cfg.traits.act == LLAMA_ACT_GELU_TANH ? kiln_gelu_tanh : kiln_silu;
    if (stacked_ok(m, y->w13, y->stacked_of + 3, y->stacked_perm + 3, (kiln_tensor *const[]){y->w1, y->w3},
                   (kiln_tensor *const[]){y->w1_perm, y->w3_perm}, 2)) {
        const int64_t F = m->cfg.hidden;
        kiln_tensor *h = model_linear(ctx, x, y->w13, y->stacked_perm[3], NULL);
        return kiln_mul(ctx, act(ctx, kiln_slice(ctx, h, -1, 0, F, 1)), kiln_slice(ctx, h, -1, F, 2 * F, 1));
    }
    return kiln_mul(ctx, act(ctx, model_linear(ctx, x, y->w1, y->w1_perm, NULL)),
                    model_linear(ctx, x, y->w3, y->w3_perm, NULL));
}

/* What a step's attention layers share: the positions (a leaf [T]), and
 * for a model with rope_freqs the rotations' cos and sin [T, hd/2] as
 * leaves shaped for the pairs of rope_split. Positions p0 .. p0 + T - 1 of
 * every sequence, or with seq (llama_hidden_rows) row t of sequence seq[t]
 * at at[t]. */
typedef struct step_pos {
    kiln_tensor *pos, *cos, *sin, *seq;
    const int32_t *at;
    int64_t p0, T;
} step_pos;

/* x [B, H, T, hd] as [B, H, T, hd/2, 2] (adjacent pairs) or [B, H, T, 2, hd/2]
 * (NEOX's halves), and the axis of the pair */
static kiln_tensor *rope_split(kiln_ctx *ctx, kiln_tensor *x, bool neox, int *axis) {
    const int64_t *sh = kiln_tensor_shape(x), hd = sh[3];
    *axis = neox ? 3 : 4;
    const int64_t pairs[5] = {sh[0], sh[1], sh[2], hd / 2, 2}, halves[5] = {sh[0], sh[1], sh[2], 2, hd / 2};
    return kiln_reshape(ctx, x, 5, neox ? halves : pairs);
}

/* Llama 3.1's rope: angle pos * theta^(-2i/hd) / rope_freqs[i] (as ggml's
 * rope with frequency factors), the cos and sin of step p computed here in
 * double into p's leaves, applied by element-wise products on the pairs. */
static kiln_status rope_fill(llama *m, const step_pos *p) {
    const int64_t T = p->T, half = m->cfg.head_dim / 2;
    float *f = malloc((size_t)(half * (2 * T + 1)) * sizeof *f);
    if (!f) return kiln_set_error(KILN_ERR_OOM, "llama_forward: out of memory");
    float *c = f + half, *sn = c + T * half;
    kiln_status s = kiln_tensor_get_f32(m->rope_freqs, f, half);
    for (int64_t t = 0; t < T && !s; t++)
        for (int64_t i = 0; i < half; i++) {
            double at = (double)(p->at ? p->at[t] : p->p0 + t);
            double a = at * pow(m->cfg.rope_theta, -2.0 * (double)i / (double)(2 * half)) / f[i];
            c[t * half + i] = (float)cos(a), sn[t * half + i] = (float)sin(a);
        }
    if (!s) s = kiln_tensor_set_f32(p->cos, c, T * half);
    if (!s) s = kiln_tensor_set_f32(p->sin, sn, T * half);
    free(f);
    return s;
}

/* p's cos and sin leaves [T, hd/2] shaped for the pairs of rope_split */
static kiln_status rope_tables(llama *m, step_pos *p) {
    const int64_t half = m->cfg.head_dim / 2;
    const bool neox = m->cfg.traits.neox;
    const int64_t shape[3] = {p->T, neox ? 1 : half, neox ? half : 1};
    if (!(p->cos = kiln_tensor_new(m->ctx, KILN_F32, 3, shape)) || !(p->sin = kiln_tensor_new(m->ctx, KILN_F32, 3, shape)))
        return kiln_last_status();
    return rope_fill(m, p);
}

static kiln_tensor *rope(llama *m, kiln_tensor *x, const step_pos *p) {
    kiln_ctx *ctx = m->ctx;
    const bool neox = m->cfg.traits.neox;
    if (!p->cos) return kiln_rope(ctx, x, p->pos, m->cfg.rope_theta, neox ? KILN_ROPE_NEOX : KILN_ROPE_INTERLEAVED);
    int ax;
    kiln_tensor *v = rope_split(ctx, x, neox, &ax);
    kiln_tensor *a = kiln_slice(ctx, v, ax, 0, 1, 1), *b = kiln_slice(ctx, v, ax, 1, 2, 1);
    kiln_tensor *ra = kiln_sub(ctx, kiln_mul(ctx, a, p->cos), kiln_mul(ctx, b, p->sin));
    kiln_tensor *rb = kiln_add(ctx, kiln_mul(ctx, a, p->sin), kiln_mul(ctx, b, p->cos));
    return kiln_reshape(ctx, kiln_concat(ctx, (kiln_tensor *const[]){ra, rb}, 2, ax), 4, kiln_tensor_shape(x));
}

/* Attention with what kiln_attention does not do, Gemma 2's: scores
 * soft-capped, and on sliding layers only the keys fewer than window
 * positions back. q [B, H, T, hd], k and v [B, G, S, hd] (S = p0 + T). */
static kiln_tensor *attention_capped(llama *m, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, int64_t p0,
                                     int64_t window) {
    kiln_ctx *ctx = m->ctx;
    const int64_t *qs = kiln_tensor_shape(q), B = qs[0], H = qs[1], T = qs[2], hd = qs[3];
    const int64_t G = kiln_tensor_dim(k, 1), S = kiln_tensor_dim(k, 2), r = H / G;
    const double cap = m->cfg.attn_softcap;
    /* query head h reads kv head h / r: [B, G, r, T, hd] against [B, G, 1, S, hd] */
    kiln_tensor *q5 = kiln_reshape(ctx, q, 5, (int64_t[]){B, G, r, T, hd});
    kiln_tensor *k5 = kiln_reshape(ctx, k, 5, (int64_t[]){B, G, 1, S, hd});
    kiln_tensor *v5 = kiln_reshape(ctx, v, 5, (int64_t[]){B, G, 1, S, hd});
    double scale = m->cfg.query_scale > 0 ? m->cfg.query_scale : 1.0 / sqrt((double)hd);
    kiln_tensor *sc = kiln_scale(ctx, kiln_matmul_t(ctx, q5, false, k5, true), scale);
    if (cap > 0) sc = kiln_scale(ctx, kiln_tanh(ctx, kiln_scale(ctx, sc, 1.0 / cap)), cap);
    if (window > 0 && p0 + T > window) { /* query p0 + t does not see key j at p0 + t - j >= window */
        kiln_tensor *mask = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){T, S});
        float *f = mask ? malloc((size_t)(T * S) * sizeof *f) : NULL;
        if (mask && !f) kiln_set_error(KILN_ERR_OOM, "llama_forward: out of memory");
        for (int64_t t = 0; f && t < T; t++)
            for (int64_t j = 0; j < S; j++) f[t * S + j] = p0 + t - j >= window;
        kiln_status s = f ? kiln_tensor_set_f32(mask, f, T * S) : KILN_ERR_OOM;
        free(f);
        if (s) return NULL;
        sc = kiln_masked_fill(ctx, sc, mask, -INFINITY);
    }
    kiln_tensor *a = kiln_matmul(ctx, kiln_softmax(ctx, sc, true), v5);
    return kiln_reshape(ctx, a, 4, (int64_t[]){B, H, T, hd});
}

/* Grouped-query causal self-attention of x [B, T, D] (normalized). */
static kiln_tensor *attention(llama *m, int l, kiln_tensor *x, const step_pos *p, llama_cache *cache, int64_t B) {
    kiln_ctx *ctx = m->ctx;
    const llama_layer *y = &m->layers[l];
    const int64_t H = m->cfg.heads, G = m->cfg.kv_heads, hd = m->cfg.head_dim, T = p->T, p0 = p->p0;
    if (m->taps) m->taps[4 * l] = x;
    kiln_tensor *q, *k, *v;
    if (stacked_ok(m, y->wqkv, y->stacked_of, y->stacked_perm, (kiln_tensor *const[]){y->wq, y->wk, y->wv},
                   (kiln_tensor *const[]){y->wq_perm, y->wk_perm, y->wv_perm}, 3)) {
        /* one product, its heads split by views ([B, H, 1, hd] at T = 1 is contiguous: no copies) */
        kiln_tensor *qkv = kiln_reshape(ctx, model_linear(ctx, x, y->wqkv, y->stacked_perm[0], y->bqkv), 4,
                                        (int64_t[]){B, T, H + 2 * G, hd});
        q = kiln_permute(ctx, kiln_slice(ctx, qkv, 2, 0, H, 1), (int[]){0, 2, 1, 3});
        k = kiln_permute(ctx, kiln_slice(ctx, qkv, 2, H, H + G, 1), (int[]){0, 2, 1, 3});
        v = kiln_permute(ctx, kiln_slice(ctx, qkv, 2, H + G, H + 2 * G, 1), (int[]){0, 2, 1, 3});
    } else {
        q = split_heads(ctx, model_linear(ctx, x, y->wq, y->wq_perm, y->bq), B, T, H, hd);
        k = split_heads(ctx, model_linear(ctx, x, y->wk, y->wk_perm, y->bk), B, T, G, hd);
        v = split_heads(ctx, model_linear(ctx, x, y->wv, y->wv_perm, y->bv), B, T, G, hd);
    }
    q = rope(m, q, p);
    k = rope(m, k, p);
    const int every = m->cfg.traits.swa_every;
    const int64_t window = every > 0 && l % every == 0 ? m->cfg.sliding_window : 0;
    if (p->seq) { /* a sequence per row: [1, heads, T, hd] as rows [T, heads, hd] */
        kiln_tensor *r[3] = {q, k, v};
        for (int i = 0; i < 3; i++)
            r[i] = kiln_reshape(ctx, kiln_permute(ctx, r[i], (int[]){0, 2, 1, 3}), 3,
                                (int64_t[]){T, i ? G : H, hd});
        kiln_tensor *a = kiln_attention_cached_softcap(ctx, r[0], r[1], r[2], cache->k[l], cache->v[l], p->seq,
                                                       p->pos, window, m->cfg.query_scale, m->cfg.attn_softcap);
        return model_linear(ctx, kiln_reshape(ctx, a, 3, (int64_t[]){1, T, H * hd}), y->wo, y->wo_perm, NULL);
    }
    if (cache) { /* write this step's k, v at p0, then read every position so far */
        k = kiln_slice(ctx, kiln_slice_assign(ctx, cache->k[l], k, 2, p0), 2, 0, p0 + T, 1);
        v = kiln_slice(ctx, kiln_slice_assign(ctx, cache->v[l], v, 2, p0), 2, 0, p0 + T, 1);
    }
    kiln_tensor *a;
    if (m->cfg.attn_softcap > 0 || (window > 0 && p0 + T > window)) {
        a = attention_capped(m, q, k, v, p0, window);
    } else { /* causal with the last query aligned to the last key: right with a cache too */
        a = kiln_attention(ctx, q, k, v, true, m->cfg.query_scale);
    }
    a = kiln_reshape(ctx, kiln_permute(ctx, a, (int[]){0, 2, 1, 3}), 3, (int64_t[]){B, T, H * hd});
    if (m->taps) m->taps[4 * l + 1] = a;
    return model_linear(ctx, a, y->wo, y->wo_perm, NULL);
}

/* The last block's output h [B, T, D] of token ids idx [B, T] at p's
 * positions, before the final norm and the head. */
static kiln_tensor *blocks(llama *m, kiln_tensor *idx, step_pos *p, llama_cache *cache) {
    kiln_ctx *ctx = m->ctx;
    const int64_t B = kiln_tensor_dim(idx, 0);
    if (m->rope_freqs && rope_tables(m, p)) return NULL;
    const double eps = m->cfg.norm_eps;
    kiln_tensor *h = kiln_get_rows(ctx, m->tok_embeddings, idx);
    if (m->cfg.traits.embed_scale) h = kiln_scale(ctx, h, sqrt((double)m->cfg.dim));
    bool segments = m->checkpoint && !cache && kiln_ctx_grad_enabled(ctx);
    for (int l = 0; l < m->cfg.layers; l++) {
        const llama_layer *y = &m->layers[l];
        if (segments && kiln_checkpoint_begin(ctx)) return NULL;
        kiln_tensor *a = attention(m, l, kiln_rms_norm(ctx, h, y->attention_norm, eps), p, cache, B);
        if (y->attn_post_norm) a = kiln_rms_norm(ctx, a, y->attn_post_norm, eps);
        h = kiln_add(ctx, h, a);
        kiln_tensor *x = kiln_rms_norm(ctx, h, y->ffn_norm, eps);
        kiln_tensor *gate = gated_mlp(m, y, x);
        if (m->taps) m->taps[4 * l + 2] = x, m->taps[4 * l + 3] = gate;
        kiln_tensor *f = model_linear(ctx, gate, y->w2, y->w2_perm, NULL);
        if (y->ffn_post_norm) f = kiln_rms_norm(ctx, f, y->ffn_post_norm, eps);
        h = kiln_add(ctx, h, f);
        if (segments && kiln_checkpoint_end(ctx)) return NULL;
    }
    return h;
}

/* blocks() at positions pos .. pos + T - 1 of every sequence */
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
    step_pos p = {.pos = kiln_tensor_new(ctx, KILN_I32, 1, (int64_t[]){T}), .p0 = pos, .T = T};
    int32_t *pv = malloc((size_t)T * sizeof *pv);
    if (!p.pos || !pv) {
        free(pv);
        if (p.pos) kiln_set_error(KILN_ERR_OOM, "llama_forward: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < T; i++) pv[i] = (int32_t)(pos + i);
    kiln_status s = kiln_tensor_set_i32(p.pos, pv, T);
    free(pv);
    return s ? NULL : blocks(m, idx, &p, cache);
}

kiln_tensor *llama_hidden_rows(llama *m, llama_cache *cache, int64_t n, const int32_t *tokens, const int32_t *seq,
                               const int32_t *pos) {
    if (!m || !cache || n < 1 || !tokens || !seq || !pos) {
        kiln_set_error(KILN_ERR_ARG, "llama_hidden_rows: needs a model, a cache, n = %lld >= 1 and the rows' tokens, "
                       "sequences and positions", (long long)n);
        return NULL;
    }
    kiln_ctx *ctx = m->ctx;
    kiln_tensor *idx = kiln_new_2d(ctx, KILN_I32, 1, n);
    step_pos p = {.pos = kiln_tensor_new(ctx, KILN_I32, 1, &n), .seq = kiln_tensor_new(ctx, KILN_I32, 1, &n),
                  .at = pos, .T = n};
    if (!idx || !p.pos || !p.seq || kiln_tensor_set_i32(idx, tokens, n) || kiln_tensor_set_i32(p.pos, pos, n) ||
        kiln_tensor_set_i32(p.seq, seq, n))
        return NULL;
    return kiln_reshape(ctx, blocks(m, idx, &p, cache), 2, (int64_t[]){n, m->cfg.dim});
}

kiln_tensor *llama_head(llama *m, kiln_tensor *h) {
    if (!m || !h) return NULL;
    kiln_ctx *ctx = m->ctx;
    kiln_tensor *x = kiln_rms_norm(ctx, h, m->norm, m->cfg.norm_eps);
    const kiln_dtype dt = kiln_tensor_dtype(m->output);
    /* a 16-bit head (QLoRA's) runs in its dtype; the loss reads f32 */
    kiln_tensor *z = dt == KILN_BF16 || dt == KILN_F16
                         ? kiln_cast(ctx, kiln_linear(ctx, kiln_cast(ctx, x, dt), m->output, NULL), KILN_F32)
                         : kiln_linear(ctx, x, m->output, NULL);
    const double cap = m->cfg.final_softcap;
    return cap > 0 ? kiln_scale(ctx, kiln_tanh(ctx, kiln_scale(ctx, z, 1.0 / cap)), cap) : z;
}

kiln_tensor *llama_forward(llama *m, kiln_tensor *idx, llama_cache *cache, int64_t pos) {
    return llama_head(m, hidden(m, idx, cache, pos));
}

/* r for n rows of which k want logits (llama.h): leaves for the tokens,
 * sequences and positions (and rope tables), the wanted rows' index when
 * k < n, blocks and head. Made outside the steps' marks, so it stays. */
static kiln_status rows_build(llama *m, llama_cache *c, llama_rows_graph *r, int64_t n, int64_t k, const int32_t *pos) {
    kiln_ctx *ctx = m->ctx;
    if (r->g) kiln_graph_free_buffers(r->g);
    *r = (llama_rows_graph){0};
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, false);
    kiln_tensor *tok = kiln_new_2d(ctx, KILN_I32, 1, n), *pick = k < n && k > 0 ? kiln_new_1d(ctx, KILN_I32, k) : NULL;
    step_pos p = {.pos = kiln_tensor_new(ctx, KILN_I32, 1, &n), .seq = kiln_tensor_new(ctx, KILN_I32, 1, &n),
                  .at = pos, .T = n};
    kiln_tensor *h = tok && p.pos && p.seq && (pick || k == 0 || k == n) ? blocks(m, tok, &p, c) : NULL;
    h = kiln_reshape(ctx, h, 2, (int64_t[]){n, m->cfg.dim});
    /* only the wanted rows go through the head (vocab x dim each); none: the blocks alone, for the cache */
    kiln_tensor *out = !h || k == 0 ? h : llama_head(m, pick ? kiln_get_rows(ctx, h, pick) : h);
    kiln_graph *g = out ? kiln_graph_new(ctx) : NULL;
    kiln_status s = g ? kiln_graph_add(g, out) : kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    kiln_ctx_set_grad_enabled(ctx, was);
    if (!s)
        *r = (llama_rows_graph){.g = g, .n = n, .k = k, .tok = tok, .seq = p.seq, .pos = p.pos, .pick = pick,
                                .cos = p.cos, .sin = p.sin, .logits = k ? out : NULL, .fused = m->fuse};
    return s;
}

kiln_status llama_rows_compute(llama *m, llama_cache *c, llama_rows_graph *r, int64_t n, const int32_t *tokens,
                               const int32_t *seq, const int32_t *pos, int64_t k, const int32_t *pick,
                               float *logits) {
    if (!m || !c || !r || n < 1 || !tokens || !seq || !pos || k < 0 || k > n || (k > 0 && !logits) ||
        (k > 0 && k < n && !pick))
        return kiln_set_error(KILN_ERR_ARG, "llama_rows_compute: needs a model, a cache, a rows graph, n = %lld >= 1, "
                              "the rows' tokens, sequences and positions, k = %lld in 0 .. n, the wanted rows "
                              "when k < n, and logits when k > 0", (long long)n, (long long)k);
    for (int64_t i = 0; k < n && i < k; i++)
        if (pick[i] < 0 || pick[i] >= n)
            return kiln_set_error(KILN_ERR_ARG, "llama_rows_compute: wanted row %lld is %d, outside 0 .. %lld",
                                  (long long)i, (int)pick[i], (long long)(n - 1));
    kiln_status s = r->g && r->n == n && r->k == k && r->fused == m->fuse ? KILN_OK : rows_build(m, c, r, n, k, pos);
    if (!s) s = kiln_tensor_set_i32(r->tok, tokens, n);
    if (!s) s = kiln_tensor_set_i32(r->seq, seq, n);
    if (!s) s = kiln_tensor_set_i32(r->pos, pos, n);
    if (!s && r->pick) s = kiln_tensor_set_i32(r->pick, pick, k);
    if (!s && r->cos) s = rope_fill(m, &(step_pos){.cos = r->cos, .sin = r->sin, .at = pos, .T = n});
    if (!s) s = kiln_graph_compute(r->g);
    if (!s && k) s = kiln_tensor_get_f32(r->logits, logits, k * m->cfg.vocab);
    return s;
}

kiln_status llama_rows_compute_once(llama *m, llama_cache *c, int64_t n, const int32_t *tokens, const int32_t *seq,
                                    const int32_t *pos, int64_t k, const int32_t *pick, float *logits) {
    kiln_ctx *ctx = m ? m->ctx : NULL;
    if (!ctx) return kiln_set_error(KILN_ERR_ARG, "llama_rows_compute_once: needs a model");
    kiln_ctx_mark mark = kiln_ctx_get_mark(ctx);
    llama_rows_graph r = {0};
    kiln_status s = llama_rows_compute(m, c, &r, n, tokens, seq, pos, k, pick, logits);
    llama_rows_free(&r);
    /* refused (nothing freed) where the step made device memory: the context then keeps the step */
    if (kiln_ctx_rewind(ctx, mark) && !s) kiln_clear_error();
    return s;
}

void llama_rows_free(llama_rows_graph *r) {
    if (r && r->g) kiln_graph_free_buffers(r->g);
    if (r) *r = (llama_rows_graph){0};
}

/* One token of a batch-1 cache through its decode rows graph. */
static kiln_status decode_step(llama *m, llama_cache *c, int32_t token, float *logits) {
    if (c->pos >= c->len)
        return kiln_set_error(KILN_ERR_SHAPE, "llama_cache_step: position %lld is past the cache's %lld",
                              (long long)c->pos, (long long)c->len);
    kiln_status s = llama_rows_compute(m, c, &c->decode, 1, &token, (const int32_t[]){0},
                                       (const int32_t[]){(int32_t)c->pos}, 1, NULL, logits);
    if (!s) c->pos++;
    return s;
}

bool llama_on_device(const llama *m) { return strcmp(kiln_backend_name(kiln_ctx_backend(m->ctx)), "cpu") != 0; }

/* A batch-1 prompt of n tokens in chunks of c->chunk rows, each full one
 * through the cache's stored prompt graph ([1] for the last, which wants
 * its last row's logits), a shorter last one through a graph of its own
 * (the decode graph for one row). A failed chunk leaves c->pos as it was. */
static kiln_status prompt_chunks(llama *m, llama_cache *c, const int32_t *tokens, int64_t n, float *logits) {
    const int64_t C = c->chunk, p0 = c->pos;
    if (C < 1) return kiln_set_error(KILN_ERR_ARG, "llama_cache_step: the cache's chunk %lld is not >= 1", (long long)C);
    if (p0 + n > c->len)
        return kiln_set_error(KILN_ERR_SHAPE, "llama_cache_step: %lld tokens at position %lld are past the cache's %lld",
                              (long long)n, (long long)p0, (long long)c->len);
    int32_t *seq = calloc((size_t)(n < C ? n : C), 2 * sizeof *seq), *pos = seq + (n < C ? n : C);
    kiln_status s = seq ? KILN_OK : kiln_set_error(KILN_ERR_OOM, "llama_cache_step: out of memory");
    for (int64_t i = 0; i < n && !s; i += C) {
        const int64_t r = n - i < C ? n - i : C;
        const bool last = i + r == n;
        const int32_t pick = (int32_t)(r - 1);
        for (int64_t j = 0; j < r; j++) pos[j] = (int32_t)(c->pos + j);
        if (r == C) s = llama_rows_compute(m, c, &c->prompt[last], r, tokens + i, seq, pos, last, &pick, logits);
        else if (r == 1) s = llama_rows_compute(m, c, &c->decode, 1, tokens + i, seq, pos, 1, NULL, logits);
        else s = llama_rows_compute_once(m, c, r, tokens + i, seq, pos, 1, &pick, logits);
        if (!s) c->pos += r;
    }
    if (s) c->pos = p0;
    free(seq);
    return s;
}

/* llama_cache_step, with every position's logits where all is true */
static kiln_status step(llama *m, llama_cache *c, const int32_t *tokens, int64_t n, float *logits, bool all,
                        const char *who) {
    kiln_ctx *ctx = m ? m->ctx : NULL;
    if (!m || !c || !tokens || !logits || n < 1)
        return kiln_set_error(KILN_ERR_ARG, "%s: needs a model, a cache, tokens, logits and n >= 1", who);
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, false);
    if (c->batch == 1 && !all && !m->taps && (n == 1 || llama_on_device(m))) {
        kiln_status s = n == 1 ? decode_step(m, c, tokens[0], logits) : prompt_chunks(m, c, tokens, n, logits);
        kiln_ctx_set_grad_enabled(ctx, was);
        return s;
    }
    /* the step's graph is scratch: rewound afterwards, so generating
     * thousands of tokens does not grow the context */
    kiln_ctx_mark mark = kiln_ctx_get_mark(ctx);
    kiln_tensor *idx = kiln_new_2d(ctx, KILN_I32, c->batch, n);
    kiln_status s = idx ? kiln_tensor_set_i32(idx, tokens, c->batch * n) : kiln_last_status();
    /* unless all are asked for, only the last position goes through the head (vocab x dim per row) */
    kiln_tensor *h = s ? NULL : hidden(m, idx, c, c->pos);
    kiln_tensor *out = h ? llama_head(m, all ? h : kiln_slice(ctx, h, 1, n - 1, n, 1)) : NULL;
    kiln_graph *g = out ? kiln_graph_new(ctx) : NULL;
    if (!s && !g) s = kiln_last_status() ? kiln_last_status() : KILN_ERR_STATE;
    if (!s) s = kiln_graph_add(g, out);
    if (!s) s = kiln_graph_compute(g);
    if (!s) s = kiln_tensor_get_f32(out, logits, c->batch * (all ? n : 1) * m->cfg.vocab);
    if (!s) c->pos += n;
    if (g) kiln_graph_free_buffers(g);
    /* refused (nothing freed) where the step made device memory: the context then keeps the step */
    if (kiln_ctx_rewind(ctx, mark) && !s) kiln_clear_error();
    kiln_ctx_set_grad_enabled(ctx, was);
    return s;
}

kiln_status llama_cache_step(llama *m, llama_cache *c, const int32_t *tokens, int64_t n, float *logits) {
    return step(m, c, tokens, n, logits, false, "llama_cache_step");
}

kiln_status llama_cache_step_all(llama *m, llama_cache *c, const int32_t *tokens, int64_t n, float *logits) {
    return step(m, c, tokens, n, logits, true, "llama_cache_step_all");
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
