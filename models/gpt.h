/* gpt.h — the GPT-2 architecture (Radford et al. 2019; as Hugging Face's
 * GPT2Model and nanoGPT): token and learned position embeddings, n_layer
 * pre-LayerNorm blocks of causal multi-head self-attention and a GELU
 * (tanh form) MLP of 4 x width, a final LayerNorm, and an output head tied
 * to the token embedding (logits = ln_f(x) @ wte^T, one tensor). Biases
 * everywhere, LayerNorm eps 1e-5, no dropout.
 *
 * Init as GPT-2: every weight N(0, 0.02), biases 0, LayerNorms 1 and 0, and
 * the residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2 L)).
 *
 * Parameters, named as GPT2Model's state_dict ("transformer." dropped):
 *   wte.weight [vocab, d], wpe.weight [context, d],
 *   h.{i}.ln_1.weight/bias [d], h.{i}.attn.c_attn.weight [3d, d] and bias,
 *   h.{i}.attn.c_proj.weight [d, d] and bias, h.{i}.ln_2.weight/bias,
 *   h.{i}.mlp.c_fc.weight [4d, d] and bias, h.{i}.mlp.c_proj.weight [d, 4d]
 *   and bias, ln_f.weight/bias.
 * Weights are [out, in] as torch.nn.Linear (nanoGPT's layout); Hugging
 * Face's Conv1D stores the transpose. c_attn's rows are q, k, v, each
 * heads x head_dim as GPT-2 splits them.
 *
 *     gpt *m = gpt_new(ctx, NULL, 1);        // byte-level: vocab 256
 *     model_graph g;
 *     gpt_train_graph(m, 16, 128, &g);       // input, labels: i32 [16, 128]
 */
#ifndef GPT_H
#define GPT_H

#include "model.h"

typedef struct gpt_config {
    int64_t vocab;   /* 256: bytes */
    int64_t context; /* positions (block size) */
    int64_t layers, heads, width;
} gpt_config;

/* vocab 256, context 128, 4 layers, 4 heads, width 256 */
gpt_config gpt_defaults(void);

typedef struct gpt_block {
    kiln_tensor *ln_1_w, *ln_1_b, *attn_w, *attn_b, *proj_w, *proj_b;
    kiln_tensor *ln_2_w, *ln_2_b, *fc_w, *fc_b, *mlp_proj_w, *mlp_proj_b;
    /* NULL, or the i32 column permutation of a GPTQ act-order packed
     * weight of the same name (model.h's model_linear); not parameters */
    kiln_tensor *attn_perm, *proj_perm, *fc_perm, *mlp_proj_perm;
} gpt_block;

typedef struct gpt {
    kiln_ctx *ctx;
    gpt_config cfg;
    kiln_tensor *wte, *wpe, *ln_f_w, *ln_f_b;
    gpt_block *blocks; /* cfg.layers */
    kiln_tensor **params; /* every parameter once, in state_dict order */
    int n_params;
    /* NULL, or 4 x layers slots that gpt_forward fills with the input of
     * each linear layer of the blocks, in order c_attn, attn.c_proj, c_fc,
     * mlp.c_proj ([B, T, in]): what GPTQ calibrates on (gpt_quant.h) */
    kiln_tensor **taps;
    /* true: where gradients are on (gpt_train_graph), each block is a
     * kiln_checkpoint_begin/end segment: recomputed in the backward pass
     * instead of kept (less memory, one more forward; the same gradients) */
    bool checkpoint;
} gpt;

/* cfg NULL: gpt_defaults(). NULL on failure (kiln_last_error() says why). */
gpt *gpt_new(kiln_ctx *ctx, const gpt_config *cfg, uint64_t seed);
void gpt_free(gpt *m);
/* logits [B, T, vocab] of token ids idx i32 [B, T] at positions 0..T-1,
 * T <= context */
kiln_tensor *gpt_forward(gpt *m, kiln_tensor *idx);
/* input: tokens i32 [batch, seq]; labels: the next tokens i32 [batch, seq] */
kiln_status gpt_train_graph(gpt *m, int64_t batch, int64_t seq, model_graph *out);
kiln_status gpt_eval_graph(gpt *m, int64_t batch, int64_t seq, model_graph *out);
/* (vocab + context) d + layers (12 d^2 + 13 d) + 2 d (the head is wte) */
int64_t gpt_param_count(const gpt *m);

#endif
