/* llama_quant.h — weight-only quantization of a llama's linear layers with
 * GPTQ or RTN (include/kiln.h's GPTQ layout), layer by layer as GPTQ's
 * reference does it for LLaMA (its llama.py, true-sequential): in each
 * layer, wq, wk and wv together (one Hessian of their shared input), then
 * wo, then w1 and w3 together, then w2, each calibrated on its inputs
 * captured by running the model whose earlier weights are already
 * quantized. Memory stays one Hessian plus one batch's activations. The
 * embedding, the norms and the output head stay f32, as the reference
 * leaves them. The weights stay f32 holding the quantized values (fake
 * quantization, as gpt_quant.h; the machinery is model_quant.h's).
 *
 *     kiln_gptq_config q = kiln_gptq_defaults();     // 4 bits, group 128
 *     kiln_gptq_result *res[7 * layers];             // wq wk wv wo w1 w3 w2 per layer
 *     llama_quantize(m, MODEL_QUANT_GPTQ, &q, tokens, 128, 64, 8, res);
 *     ... evaluate m; kiln_gptq_result_free(res[i]) for each i
 */
#ifndef LLAMA_QUANT_H
#define LLAMA_QUANT_H

#include "llama.h"
#include "model_quant.h"

/* Quantize m's linear weights in place; the arguments are
 * model_quantize's (model_quant.h). out: NULL or 7 x layers slots, in the
 * order above. */
kiln_status llama_quantize(llama *m, model_quant_method method, const kiln_gptq_config *cfg, const int32_t *tokens,
                           int64_t n_seqs, int64_t seq, int64_t batch, kiln_gptq_result **out);

#endif
