/* gpt.c — the GPT-2 architecture (see gpt.h). Shapes: B batch, T positions,
 * D width, H heads of Dh = D / H. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

gpt_config gpt_defaults(void) {
    return (gpt_config){.vocab = 256, .context = 128, .layers = 4, .heads = 4, .width = 256};
}

/* Make parameter "h.{layer}.{what}" (or "{what}" for layer < 0) and list it. */
static kiln_tensor *param(gpt *m, int layer, const char *what, int ndim, const int64_t *shape, model_init init,
                          double arg, uint64_t seed) {
    char name[64];
    if (layer >= 0) snprintf(name, sizeof name, "h.%d.%s", layer, what);
    else snprintf(name, sizeof name, "%s", what);
    kiln_tensor *p = model_param(m->ctx, name, ndim, shape, init, arg, seed);
    if (p) m->params[m->n_params++] = p;
    return p;
}

gpt *gpt_new(kiln_ctx *ctx, const gpt_config *cfg, uint64_t seed) {
    gpt_config c = cfg ? *cfg : gpt_defaults();
    if (!ctx || c.vocab < 1 || c.context < 1 || c.layers < 1 || c.heads < 1 || c.width < 1 || c.width % c.heads) {
        kiln_set_error(KILN_ERR_ARG, "gpt_new: %s",
                       ctx ? "vocab, context, layers, heads, width must be >= 1 and heads divide width"
                           : "ctx is NULL");
        return NULL;
    }
    gpt *m = calloc(1, sizeof *m);
    if (m) m->blocks = calloc((size_t)c.layers, sizeof *m->blocks);
    if (m) m->params = calloc((size_t)(4 + 12 * c.layers), sizeof *m->params);
    if (!m || !m->blocks || !m->params) {
        gpt_free(m);
        kiln_set_error(KILN_ERR_OOM, "gpt_new: out of memory");
        return NULL;
    }
    m->ctx = ctx;
    m->cfg = c;
    const int64_t D = c.width;
    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * (double)c.layers);
    bool ok = (m->wte = param(m, -1, "wte.weight", 2, (int64_t[]){c.vocab, D}, MODEL_INIT_NORMAL, std, seed)) &&
              (m->wpe = param(m, -1, "wpe.weight", 2, (int64_t[]){c.context, D}, MODEL_INIT_NORMAL, std, seed));
    for (int l = 0; ok && l < c.layers; l++) {
        gpt_block *b = &m->blocks[l];
        ok = (b->ln_1_w = param(m, l, "ln_1.weight", 1, (int64_t[]){D}, MODEL_INIT_ONES, 0, seed)) &&
             (b->ln_1_b = param(m, l, "ln_1.bias", 1, (int64_t[]){D}, MODEL_INIT_ZEROS, 0, seed)) &&
             (b->attn_w = param(m, l, "attn.c_attn.weight", 2, (int64_t[]){3 * D, D}, MODEL_INIT_NORMAL, std, seed)) &&
             (b->attn_b = param(m, l, "attn.c_attn.bias", 1, (int64_t[]){3 * D}, MODEL_INIT_ZEROS, 0, seed)) &&
             (b->proj_w = param(m, l, "attn.c_proj.weight", 2, (int64_t[]){D, D}, MODEL_INIT_NORMAL, proj_std, seed)) &&
             (b->proj_b = param(m, l, "attn.c_proj.bias", 1, (int64_t[]){D}, MODEL_INIT_ZEROS, 0, seed)) &&
             (b->ln_2_w = param(m, l, "ln_2.weight", 1, (int64_t[]){D}, MODEL_INIT_ONES, 0, seed)) &&
             (b->ln_2_b = param(m, l, "ln_2.bias", 1, (int64_t[]){D}, MODEL_INIT_ZEROS, 0, seed)) &&
             (b->fc_w = param(m, l, "mlp.c_fc.weight", 2, (int64_t[]){4 * D, D}, MODEL_INIT_NORMAL, std, seed)) &&
             (b->fc_b = param(m, l, "mlp.c_fc.bias", 1, (int64_t[]){4 * D}, MODEL_INIT_ZEROS, 0, seed)) &&
             (b->mlp_proj_w =
                  param(m, l, "mlp.c_proj.weight", 2, (int64_t[]){D, 4 * D}, MODEL_INIT_NORMAL, proj_std, seed)) &&
             (b->mlp_proj_b = param(m, l, "mlp.c_proj.bias", 1, (int64_t[]){D}, MODEL_INIT_ZEROS, 0, seed));
    }
    ok = ok && (m->ln_f_w = param(m, -1, "ln_f.weight", 1, (int64_t[]){D}, MODEL_INIT_ONES, 0, seed)) &&
         (m->ln_f_b = param(m, -1, "ln_f.bias", 1, (int64_t[]){D}, MODEL_INIT_ZEROS, 0, seed));
    if (!ok) {
        gpt_free(m);
        return NULL;
    }
    return m;
}

void gpt_free(gpt *m) {
    if (!m) return;
    free(m->blocks);
    free(m->params);
    free(m);
}

/* Causal self-attention of x [B, T, D] (already normalized) -> [B, T, D]. */
static kiln_tensor *attention(gpt *m, const gpt_block *b, kiln_tensor *x, int64_t B, int64_t T) {
    kiln_ctx *ctx = m->ctx;
    const int64_t D = m->cfg.width, H = m->cfg.heads, Dh = D / H;
    /* qkv [B, T, 3D] -> [B, T, 3H, Dh] -> [B, 3H, T, Dh]: heads 0..H-1 are q, then k, then v */
    if (m->taps) m->taps[4 * (b - m->blocks)] = x;
    kiln_tensor *qkv = model_linear(ctx, x, b->attn_w, b->attn_perm, b->attn_b);
    qkv = kiln_permute(ctx, kiln_reshape(ctx, qkv, 4, (int64_t[]){B, T, 3 * H, Dh}), (int[]){0, 2, 1, 3});
    kiln_tensor *q = kiln_slice(ctx, qkv, 1, 0, H, 1), *k = kiln_slice(ctx, qkv, 1, H, 2 * H, 1),
                *v = kiln_slice(ctx, qkv, 1, 2 * H, 3 * H, 1);
    kiln_tensor *y = kiln_permute(ctx, kiln_attention(ctx, q, k, v, true, 0.0), (int[]){0, 2, 1, 3});
    y = kiln_reshape(ctx, y, 3, (int64_t[]){B, T, D});
    if (m->taps) m->taps[4 * (b - m->blocks) + 1] = y;
    return model_linear(ctx, y, b->proj_w, b->proj_perm, b->proj_b);
}

kiln_tensor *gpt_forward(gpt *m, kiln_tensor *idx) {
    kiln_ctx *ctx = m->ctx;
    if (!idx) return NULL;
    if (kiln_tensor_ndim(idx) != 2 || kiln_tensor_dim(idx, 1) > m->cfg.context) {
        kiln_set_error(KILN_ERR_SHAPE, "gpt_forward: idx must be [B, T] with T <= context %lld",
                       (long long)m->cfg.context);
        return NULL;
    }
    const int64_t B = kiln_tensor_dim(idx, 0), T = kiln_tensor_dim(idx, 1);
    /* positions 0..T-1: the first T rows of wpe */
    kiln_tensor *pos = kiln_slice(ctx, m->wpe, 0, 0, T, 1);
    kiln_tensor *x = kiln_add(ctx, kiln_get_rows(ctx, m->wte, idx), pos);
    bool segments = m->checkpoint && kiln_ctx_grad_enabled(ctx);
    for (int l = 0; l < m->cfg.layers; l++) {
        const gpt_block *b = &m->blocks[l];
        if (segments && kiln_checkpoint_begin(ctx)) return NULL;
        x = kiln_add(ctx, x, attention(m, b, kiln_layer_norm(ctx, x, b->ln_1_w, b->ln_1_b, 1e-5), B, T));
        kiln_tensor *xn = kiln_layer_norm(ctx, x, b->ln_2_w, b->ln_2_b, 1e-5);
        kiln_tensor *h = kiln_gelu_tanh(ctx, model_linear(ctx, xn, b->fc_w, b->fc_perm, b->fc_b));
        if (m->taps) m->taps[4 * l + 2] = xn, m->taps[4 * l + 3] = h;
        x = kiln_add(ctx, x, model_linear(ctx, h, b->mlp_proj_w, b->mlp_proj_perm, b->mlp_proj_b));
        if (segments && kiln_checkpoint_end(ctx)) return NULL;
    }
    /* the head is the token embedding itself (weight tying) */
    return kiln_linear(ctx, kiln_layer_norm(ctx, x, m->ln_f_w, m->ln_f_b, 1e-5), m->wte, NULL);
}

static kiln_status build(gpt *m, int64_t batch, int64_t seq, model_graph *out, bool train) {
    kiln_ctx *ctx = m->ctx;
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, train);
    *out = (model_graph){0};
    out->input = kiln_new_2d(ctx, KILN_I32, batch, seq);
    out->labels = kiln_new_2d(ctx, KILN_I32, batch, seq);
    kiln_tensor *logits = out->input && out->labels ? gpt_forward(m, out->input) : NULL;
    kiln_tensor *loss = kiln_cross_entropy(ctx, logits, out->labels, -100);
    kiln_status s = model_graph_finish(ctx, out, logits, loss, train);
    kiln_ctx_set_grad_enabled(ctx, was);
    return s;
}

kiln_status gpt_train_graph(gpt *m, int64_t batch, int64_t seq, model_graph *out) {
    return build(m, batch, seq, out, true);
}
kiln_status gpt_eval_graph(gpt *m, int64_t batch, int64_t seq, model_graph *out) {
    return build(m, batch, seq, out, false);
}
int64_t gpt_param_count(const gpt *m) { return model_count(m->params, m->n_params); }
