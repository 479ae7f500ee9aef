/* logprobs.h — the tokens' log-probabilities of OpenAI's `logprobs`. The
 * scheduler's worker makes a record of each generated token from the
 * logits it was drawn from: its log-probability under the model (the
 * log-softmax of the logits, before temperature and top_p, as OpenAI and
 * vLLM report it), the likeliest tokens' (at most JOB_MAX_TOP), and each
 * token's text as it reads in the answer (an alternative's after the
 * same previous token). The HTTP side views records as api.h's
 * api_logprob, which the answers' JSON takes.
 *
 *     job_logprob *r = lp_record(tok, z, vocab, 5, prev, id, text, len, offset);
 *     api_logprob *v = lp_views((const job_logprob *const *)&r, 1);  // points into r
 *     free(v), free(r);
 */
#ifndef SERVE_LOGPROBS_H
#define SERVE_LOGPROBS_H

#include "api.h"
#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

enum { JOB_MAX_TOP = API_MAX_TOP_LOGPROBS };

typedef struct job_token {
    int32_t id;
    float logprob;
    size_t at, len; /* its text: the record's bytes[at, at + len) */
} job_token;

typedef struct job_logprob {
    job_token chosen;
    job_token top[JOB_MAX_TOP]; /* the likeliest first */
    int n_top;
    size_t start, end; /* the chosen token's bytes in the answer's text */
    size_t offset;     /* characters of the answer before it (the legacy text_offset) */
    char bytes[];
} job_logprob;

/* The record of token id drawn from the logits z[vocab] after token prev
 * (the last of the prompt for the first); text: its len bytes in the
 * answer. NULL when out of memory. */
job_logprob *lp_record(const kiln_tokenizer *tok, const float *z, int64_t vocab, int n_top, int32_t prev, int32_t id,
                       const char *text, size_t len, size_t offset);
/* n records as the answers take them, with their alternatives in the same
 * allocation (free it); they point into the records. NULL when out of
 * memory. */
api_logprob *lp_views(const job_logprob *const *r, int n);

#endif
