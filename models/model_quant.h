/* model_quant.h — what gpt_quant.h and llama_quant.h share: weight-only
 * GPTQ or RTN (include/kiln.h's GPTQ layout) over a model's linear layers,
 * in sequence as GPTQ's reference does it. A model describes itself as a
 * list of calibration points, in forward order: each point is one input
 * of the forward pass (a "tap") and the weights [out, in] that read it
 * (attention's q, k and v read the same input, so they share one
 * Hessian). Point by point, its input is captured by running the model
 * (whose earlier points are already quantized) over the calibration
 * sequences a batch at a time, H is accumulated, and each of its weights
 * is quantized and replaced by its dequantized values ("fake
 * quantization": the weights stay f32 and the model runs as before; the
 * codes are in the results for a packed format). Memory stays one point's
 * Hessian plus one batch's activations.
 *
 *     static int weights(void *model, int k, kiln_tensor **w) { ... return n; }
 *     static kiln_tensor *forward(void *model, kiln_tensor *idx, kiln_tensor **taps) { ... }
 *     model_quant_plan p = {.model = m, .ctx = ctx, .context = 128, .points = 4 * layers,
 *                           .weights = weights, .forward = forward};
 *     model_quantize(&p, "gpt_quantize", MODEL_QUANT_GPTQ, &cfg, tokens, 128, 64, 8, results);
 */
#ifndef MODEL_QUANT_H
#define MODEL_QUANT_H

#include "model.h"

typedef enum model_quant_method { MODEL_QUANT_RTN = 0, MODEL_QUANT_GPTQ } model_quant_method;

enum { MODEL_QUANT_MAX_WEIGHTS = 4 }; /* weights reading one point's input */

typedef struct model_quant_plan {
    void *model;
    kiln_ctx *ctx;
    int64_t context; /* the longest calibration sequence */
    int points;
    /* the weights (f32 [out, in] leaves) of point k into w; their count */
    int (*weights)(void *model, int k, kiln_tensor **w);
    /* the forward pass over token ids idx i32 [B, T], setting taps[k] to
     * the input [..., in] of point k's weights; NULL on failure */
    kiln_tensor *(*forward)(void *model, kiln_tensor *idx, kiln_tensor **taps);
} model_quant_plan;

/* Quantize the plan's weights in place. tokens: i32 [n_seqs, seq]
 * calibration sequences (GPTQ; RTN ignores them and may pass NULL), run
 * batch sequences at a time (batch divides n_seqs, seq <= context). out:
 * NULL, or one slot per weight, points in order and each point's weights in
 * order, for the results (the caller frees them). who names the caller in
 * errors. Fails with kiln's error set (KILN_ERR_UNSUPPORTED for GPTQ in a
 * build without LAPACK); weights already quantized stay so. */
kiln_status model_quantize(const model_quant_plan *p, const char *who, model_quant_method method,
                           const kiln_gptq_config *cfg, const int32_t *tokens, int64_t n_seqs, int64_t seq,
                           int64_t batch, kiln_gptq_result **out);

#endif
