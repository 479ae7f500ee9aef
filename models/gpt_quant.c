/* gpt_quant.c — GPTQ / RTN over a GPT's linear layers (see gpt_quant.h). */
#include "gpt_quant.h"

#include <stdlib.h>

/* the block's linear weights in quantization order */
static kiln_tensor *linear_weight(const gpt *m, int k) {
    const gpt_block *b = &m->blocks[k / 4];
    kiln_tensor *w[4] = {b->attn_w, b->proj_w, b->fc_w, b->mlp_proj_w};
    return w[k % 4];
}

/* Quantize weight w [rows, cols] (RTN, or GPTQ with h) and write the
 * dequantized values back into it. */
static kiln_status quantize_one(kiln_tensor *w, kiln_gptq *h, const kiln_gptq_config *cfg, kiln_gptq_result **out) {
    const int64_t rows = kiln_tensor_dim(w, 0), cols = kiln_tensor_dim(w, 1);
    float *buf = malloc((size_t)(rows * cols) * sizeof *buf);
    if (!buf) return kiln_set_error(KILN_ERR_OOM, "gpt_quantize: out of memory");
    kiln_status s = kiln_tensor_get_f32(w, buf, rows * cols);
    kiln_gptq_result *r = NULL;
    if (!s) {
        r = h ? kiln_gptq_quantize(h, buf, rows, cfg) : kiln_rtn_quantize(buf, rows, cols, cfg);
        s = r ? kiln_gptq_dequantize(r, buf) : kiln_last_status();
    }
    if (!s) s = kiln_tensor_set_f32(w, buf, rows * cols);
    free(buf);
    if (!s && out) *out = r;
    else kiln_gptq_result_free(r);
    return s;
}

kiln_status gpt_quantize(gpt *m, gpt_quant_method method, const kiln_gptq_config *cfg, const int32_t *tokens,
                         int64_t n_seqs, int64_t seq, int64_t batch, kiln_gptq_result **out) {
    if (!m || !cfg) return kiln_set_error(KILN_ERR_ARG, "gpt_quantize: NULL argument");
    const int n = (int)(4 * m->cfg.layers);
    if (out)
        for (int k = 0; k < n; k++) out[k] = NULL;
    if (method == GPT_QUANT_RTN) {
        for (int k = 0; k < n; k++) {
            kiln_status s = quantize_one(linear_weight(m, k), NULL, cfg, out ? &out[k] : NULL);
            if (s) return s;
        }
        return KILN_OK;
    }
    if (method != GPT_QUANT_GPTQ) return kiln_set_error(KILN_ERR_ARG, "gpt_quantize: unknown method %d", method);
    if (!tokens || batch < 1 || n_seqs < batch || n_seqs % batch || seq < 1 || seq > m->cfg.context)
        return kiln_set_error(KILN_ERR_ARG,
                              "gpt_quantize: need calibration tokens [n_seqs, seq], batch dividing n_seqs "
                              "(%lld, %lld), 1 <= seq <= context %lld",
                              (long long)n_seqs, (long long)batch, (long long)m->cfg.context);

    /* one forward graph whose outputs are the linear layers' inputs */
    kiln_ctx *ctx = m->ctx;
    const bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, false);
    kiln_tensor **taps = calloc((size_t)n, sizeof *taps);
    float *x = malloc((size_t)(batch * seq * 4 * m->cfg.width) * sizeof *x);
    kiln_tensor *input = kiln_new_2d(ctx, KILN_I32, batch, seq);
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = KILN_OK;
    if (!taps || !x) s = kiln_set_error(KILN_ERR_OOM, "gpt_quantize: out of memory");
    else if (!input || !g) s = kiln_last_status();
    if (!s) {
        m->taps = taps;
        kiln_tensor *logits = gpt_forward(m, input);
        m->taps = NULL;
        if (!logits) s = kiln_last_status();
        for (int k = 0; !s && k < n; k++) s = kiln_graph_add(g, taps[k]);
        if (!s) kiln_graph_set_training(g, false);
    }
    kiln_ctx_set_grad_enabled(ctx, was);

    for (int k = 0; !s && k < n; k++) {
        const int64_t cols = kiln_tensor_dim(linear_weight(m, k), 1), rows = batch * seq;
        kiln_gptq *h = kiln_gptq_new(cols);
        if (!h) s = kiln_last_status();
        /* the inputs come from the model as quantized so far */
        for (int64_t b = 0; !s && b < n_seqs; b += batch) {
            if (!(s = kiln_tensor_set_i32(input, tokens + b * seq, batch * seq)) && !(s = kiln_graph_compute(g)) &&
                !(s = kiln_tensor_get_f32(taps[k], x, rows * cols)))
                s = kiln_gptq_add_batch(h, x, rows);
        }
        if (!s) s = quantize_one(linear_weight(m, k), h, cfg, out ? &out[k] : NULL);
        kiln_gptq_free(h);
    }
    if (g) kiln_graph_free_buffers(g);
    free(taps);
    free(x);
    return s;
}
