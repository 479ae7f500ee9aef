/* gpt_quant.h — weight-only quantization of a GPT's linear layers with GPTQ
 * or RTN (include/kiln.h's GPTQ layout), layer by layer as GPTQ's
 * reference does it (its sequential mode, in true-sequential order): each
 * linear layer of each block, in order c_attn, attn.c_proj, c_fc,
 * mlp.c_proj, is calibrated on its inputs captured by running the model
 * whose earlier layers are already quantized, then quantized, and its
 * weight replaced by the dequantized values. Memory stays one layer's
 * Hessian plus one batch's activations. The embeddings and the head (tied
 * to wte) stay f32, as the reference leaves them.
 *
 * The weights stay f32 tensors holding the quantized values ("fake
 * quantization"): the model runs and evaluates as before, and the codes
 * are in the results for a packed format: kiln_gptq_pack(ctx, res[k],
 * KILN_GQ4_32, &perm) gives the GQ weight to put in the block's slot, and
 * an act-order perm goes in the matching *_perm field (gpt.h; what
 * examples/quantize does). The machinery is model_quant.h's, shared with
 * llama_quant.h.
 *
 *     kiln_gptq_config q = kiln_gptq_defaults();     // 4 bits, group 128
 *     kiln_gptq_result *res[4 * layers];
 *     gpt_quantize(m, GPT_QUANT_GPTQ, &q, tokens, 128, 64, 8, res);  // 128 x 64 tokens
 *     ... evaluate m; kiln_gptq_result_free(res[i]) for each i
 */
#ifndef GPT_QUANT_H
#define GPT_QUANT_H

#include "gpt.h"
#include "model_quant.h"

typedef model_quant_method gpt_quant_method;
#define GPT_QUANT_RTN MODEL_QUANT_RTN
#define GPT_QUANT_GPTQ MODEL_QUANT_GPTQ

/* Quantize m's block linear weights in place. tokens: i32 [n_seqs, seq]
 * calibration sequences (GPTQ; RTN ignores them and may pass NULL), run
 * batch sequences at a time (batch divides n_seqs, seq <= context). out:
 * NULL, or 4 x layers slots for the results (the caller frees them), in
 * the order above. Fails with kiln's error set (KILN_ERR_UNSUPPORTED for
 * GPTQ in a build without LAPACK); weights already quantized stay so. */
kiln_status gpt_quantize(gpt *m, gpt_quant_method method, const kiln_gptq_config *cfg, const int32_t *tokens,
                         int64_t n_seqs, int64_t seq, int64_t batch, kiln_gptq_result **out);

#endif
