/* model_quant.c — GPTQ / RTN over a model's calibration points (see
 * model_quant.h). */
#include "model_quant.h"

#include <stdlib.h>

/* Quantize weight w [rows, cols] (RTN, or GPTQ with h) and write the
 * dequantized values back into it. */
static kiln_status quantize_one(const char *who, kiln_tensor *w, kiln_gptq *h, const kiln_gptq_config *cfg,
                                kiln_gptq_result **out) {
    const int64_t rows = kiln_tensor_dim(w, 0), cols = kiln_tensor_dim(w, 1);
    float *buf = malloc((size_t)(rows * cols) * sizeof *buf);
    if (!buf) return kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
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

/* Capture point k's input over every calibration batch into h. The graph
 * holds only what the tap needs, so later layers are not run. */
static kiln_status calibrate(const char *who, kiln_ctx *ctx, kiln_tensor *input, kiln_tensor *tap, kiln_gptq *h,
                             const int32_t *tokens, int64_t n_seqs, int64_t seq, int64_t batch) {
    const int64_t cols = kiln_tensor_dim(tap, -1), rows = kiln_tensor_numel(tap) / cols;
    float *x = malloc((size_t)(rows * cols) * sizeof *x);
    kiln_graph *g = x ? kiln_graph_new(ctx) : NULL;
    kiln_status s = !x ? kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who) : !g ? kiln_last_status() : KILN_OK;
    if (!s && !(s = kiln_graph_add(g, tap))) kiln_graph_set_training(g, false);
    for (int64_t b = 0; !s && b < n_seqs; b += batch)
        if (!(s = kiln_tensor_set_i32(input, tokens + b * seq, batch * seq)) && !(s = kiln_graph_compute(g)) &&
            !(s = kiln_tensor_get_f32(tap, x, rows * cols)))
            s = kiln_gptq_add_batch(h, x, rows);
    if (g) kiln_graph_free_buffers(g);
    free(x);
    return s;
}

kiln_status model_quantize(const model_quant_plan *p, const char *who, model_quant_method method,
                           const kiln_gptq_config *cfg, const int32_t *tokens, int64_t n_seqs, int64_t seq,
                           int64_t batch, kiln_gptq_result **out) {
    if (!p || !cfg) return kiln_set_error(KILN_ERR_ARG, "%s: NULL argument", who);
    if (method != MODEL_QUANT_RTN && method != MODEL_QUANT_GPTQ)
        return kiln_set_error(KILN_ERR_ARG, "%s: unknown method %d", who, method);
    kiln_tensor *w[MODEL_QUANT_MAX_WEIGHTS];
    int n_out = 0;
    for (int k = 0; k < p->points; k++) n_out += p->weights(p->model, k, w);
    if (out)
        for (int i = 0; i < n_out; i++) out[i] = NULL;
    if (method == MODEL_QUANT_RTN) {
        for (int k = 0, o = 0; k < p->points; k++) {
            int n = p->weights(p->model, k, w);
            for (int i = 0; i < n; i++, o++) {
                kiln_status s = quantize_one(who, w[i], NULL, cfg, out ? &out[o] : NULL);
                if (s) return s;
            }
        }
        return KILN_OK;
    }
    if (!tokens || batch < 1 || n_seqs < batch || n_seqs % batch || seq < 1 || seq > p->context)
        return kiln_set_error(KILN_ERR_ARG,
                              "%s: need calibration tokens [n_seqs, seq], batch dividing n_seqs "
                              "(%lld, %lld), 1 <= seq <= context %lld",
                              who, (long long)n_seqs, (long long)batch, (long long)p->context);

    /* one forward pass whose taps are the points' inputs; a graph per point */
    kiln_ctx *ctx = p->ctx;
    const bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, false);
    kiln_tensor **taps = calloc((size_t)p->points, sizeof *taps);
    kiln_tensor *input = kiln_new_2d(ctx, KILN_I32, batch, seq);
    kiln_status s = KILN_OK;
    if (!taps) s = kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
    else if (!input || !p->forward(p->model, input, taps)) s = kiln_last_status();
    for (int k = 0; !s && k < p->points; k++)
        if (!taps[k]) s = kiln_set_error(KILN_ERR_STATE, "%s: the forward pass set no input for point %d", who, k);
    kiln_ctx_set_grad_enabled(ctx, was);

    for (int k = 0, o = 0; !s && k < p->points; k++) {
        const int n = p->weights(p->model, k, w);
        kiln_gptq *h = kiln_gptq_new(kiln_tensor_dim(taps[k], -1));
        if (!h) s = kiln_last_status();
        /* the inputs come from the model as quantized so far */
        if (!s) s = calibrate(who, ctx, input, taps[k], h, tokens, n_seqs, seq, batch);
        for (int i = 0; !s && i < n; i++, o++) s = quantize_one(who, w[i], h, cfg, out ? &out[o] : NULL);
        kiln_gptq_free(h);
    }
    free(taps);
    return s;
}
