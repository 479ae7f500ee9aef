/* llama_quant.c — GPTQ / RTN over a llama's linear layers (see
 * llama_quant.h): four points per layer, as llama_forward's taps. */
#include "llama_quant.h"

static int weights(void *model, int k, kiln_tensor **w) {
    const llama_layer *y = &((llama *)model)->layers[k / 4];
    switch (k % 4) {
    case 0: w[0] = y->wq, w[1] = y->wk, w[2] = y->wv; return 3;
    case 1: w[0] = y->wo; return 1;
    case 2: w[0] = y->w1, w[1] = y->w3; return 2;
    default: w[0] = y->w2; return 1;
    }
}

static kiln_tensor *forward(void *model, kiln_tensor *idx, kiln_tensor **taps) {
    llama *m = model;
    m->taps = taps;
    kiln_tensor *logits = llama_forward(m, idx, NULL, 0);
    m->taps = NULL;
    return logits;
}

kiln_status llama_quantize(llama *m, model_quant_method method, const kiln_gptq_config *cfg, const int32_t *tokens,
                           int64_t n_seqs, int64_t seq, int64_t batch, kiln_gptq_result **out) {
    if (!m) return kiln_set_error(KILN_ERR_ARG, "llama_quantize: NULL argument");
    model_quant_plan p = {.model = m, .ctx = m->ctx, .context = m->cfg.context, .points = (int)(4 * m->cfg.layers),
                          .weights = weights, .forward = forward};
    return model_quantize(&p, "llama_quantize", method, cfg, tokens, n_seqs, seq, batch, out);
}
