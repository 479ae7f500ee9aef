/* gpt_quant.c — GPTQ / RTN over a GPT's linear layers (see gpt_quant.h):
 * the GPT as a plan of model_quant.h, one point per linear layer. */
#include "gpt_quant.h"

/* point k: layer k / 4's c_attn, attn.c_proj, c_fc or mlp.c_proj */
static int weights(void *model, int k, kiln_tensor **w) {
    const gpt_block *b = &((gpt *)model)->blocks[k / 4];
    kiln_tensor *all[4] = {b->attn_w, b->proj_w, b->fc_w, b->mlp_proj_w};
    w[0] = all[k % 4];
    return 1;
}

static kiln_tensor *forward(void *model, kiln_tensor *idx, kiln_tensor **taps) {
    gpt *m = model;
    m->taps = taps;
    kiln_tensor *logits = gpt_forward(m, idx);
    m->taps = NULL;
    return logits;
}

kiln_status gpt_quantize(gpt *m, gpt_quant_method method, const kiln_gptq_config *cfg, const int32_t *tokens,
                         int64_t n_seqs, int64_t seq, int64_t batch, kiln_gptq_result **out) {
    if (!m) return kiln_set_error(KILN_ERR_ARG, "gpt_quantize: NULL argument");
    model_quant_plan p = {.model = m, .ctx = m->ctx, .context = m->cfg.context, .points = (int)(4 * m->cfg.layers),
                          .weights = weights, .forward = forward};
    return model_quantize(&p, "gpt_quantize", method, cfg, tokens, n_seqs, seq, batch, out);
}
