/* lm_eval.c — a language model's held-out loss (see lm_eval.h). */
#include "lm_eval.h"

#include "progress.h"

#include <math.h>
#include <stdlib.h>

kiln_status lm_eval_init(lm_eval *e, kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *logits, const data_text *text) {
    *e = (lm_eval){.x = x, .logits = logits, .text = text};
    if (!x || !logits) return kiln_last_status() ? kiln_last_status() : KILN_ERR_ARG;
    e->batch = kiln_tensor_dim(x, 0);
    e->seq = kiln_tensor_dim(x, 1);
    e->y = kiln_new_2d(ctx, KILN_I32, e->batch, e->seq);
    e->graph = kiln_graph_new(ctx);
    kiln_status s = !e->y || !e->graph ? kiln_last_status() : kiln_graph_add(e->graph, logits);
    if (s) return s;
    kiln_graph_set_training(e->graph, false);
    e->host_logits = malloc((size_t)(e->batch * e->seq * DATA_TEXT_VOCAB) * sizeof(float));
    return e->host_logits ? KILN_OK : kiln_set_error(KILN_ERR_OOM, "lm_eval_init: out of memory");
}

int64_t lm_eval_batches(const lm_eval *e) { return data_text_eval_batches(e->text, e->batch, e->seq); }

double lm_eval_loss(lm_eval *e, int64_t stride) { return lm_eval_loss_until(e, stride, INFINITY, NULL); }

double lm_eval_loss_until(lm_eval *e, int64_t stride, double deadline, int64_t *done) {
    double sum = 0;
    int64_t count = 0, n = e->batch * e->seq, batches = 0;
    if (done) *done = 0;
    for (int64_t i = 0; i < lm_eval_batches(e); i += stride, batches++) {
        if (batches && progress_now() > deadline) break;
        if (data_text_eval_batch(e->text, e->batch, e->seq, i, e->x, e->y) < 0 || kiln_graph_compute(e->graph) ||
            kiln_tensor_get_f32(e->logits, e->host_logits, n * DATA_TEXT_VOCAB))
            return -1;
        const int32_t *label = kiln_tensor_data(e->y);
        for (int64_t r = 0; r < n; r++) {
            if (label[r] < 0) continue; /* DATA_IGNORE: past the end of the text */
            const float *z = e->host_logits + r * DATA_TEXT_VOCAB;
            /* -log softmax(z)[label] = logsumexp(z) - z[label] */
            float mx = z[0];
            for (int v = 1; v < DATA_TEXT_VOCAB; v++) mx = z[v] > mx ? z[v] : mx;
            double s = 0;
            for (int v = 0; v < DATA_TEXT_VOCAB; v++) s += exp((double)(z[v] - mx));
            sum += log(s) + mx - z[label[r]];
            count++;
        }
        if (done) *done = batches + 1;
    }
    return count ? sum / (double)count : NAN;
}

void lm_eval_free(lm_eval *e) {
    if (e->graph) kiln_graph_free_buffers(e->graph);
    free(e->host_logits);
    e->host_logits = NULL;
}
