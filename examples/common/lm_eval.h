/* lm_eval.h — a byte-level language model's loss on a held-out text, as
 * examples/gpt and examples/quantize measure it: mean cross-entropy per
 * predicted byte over windows of the text (data_text_eval_batch), taken on
 * the host from the logits so that the rows a short last batch leaves
 * empty (label DATA_IGNORE) are skipped. Divide by ln 2 for bits per byte.
 *
 *     kiln_tensor *x = kiln_new_2d(ctx, KILN_I32, 16, seq);
 *     lm_eval e;
 *     if (lm_eval_init(&e, ctx, x, gpt_forward(m, x), &corpus.val)) ...
 *     double nats = lm_eval_loss(&e, 1);     // every batch; -1 on an error
 *     int64_t done;                          // or as many as fit before a deadline:
 *     nats = lm_eval_loss_until(&e, 1, progress_now() + 30, &done);
 *     lm_eval_free(&e);
 */
#ifndef LM_EVAL_H
#define LM_EVAL_H

#include "data.h"
#include "kiln.h"

typedef struct lm_eval {
    kiln_graph *graph;
    kiln_tensor *x, *y, *logits; /* y is a plain leaf: the labels, read on the host */
    int64_t batch, seq;
    float *host_logits;
    const data_text *text;
} lm_eval;

/* x: i32 [batch, seq] leaf; logits [batch, seq, DATA_TEXT_VOCAB] computed
 * from it. Builds the graph in ctx. */
kiln_status lm_eval_init(lm_eval *e, kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *logits, const data_text *text);
/* Batches in a full pass over the text. */
int64_t lm_eval_batches(const lm_eval *e);
/* Mean cross-entropy in nats per predicted byte over batches 0, stride,
 * 2 stride, ... of the pass (stride 1: every byte); -1 on an error
 * (kiln_last_error() or data_last_error() says why). */
double lm_eval_loss(lm_eval *e, int64_t stride);
/* The same, stopping before a batch that starts past deadline (seconds on
 * progress_now()'s clock; at least one batch is done): the mean over the
 * *done batches evaluated. */
double lm_eval_loss_until(lm_eval *e, int64_t stride, double deadline, int64_t *done);
/* The host buffer and the graph's buffers. */
void lm_eval_free(lm_eval *e);

#endif
