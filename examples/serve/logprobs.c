/* logprobs.c — records of the generated tokens' log-probabilities
 * (logprobs.h). */
#include "logprobs.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The n_top likeliest ids of z, the likeliest first (ties: the lower id). */
static int likeliest(const float *z, int64_t vocab, int n_top, int32_t *ids) {
    int n = 0;
    for (int64_t v = 0; n_top > 0 && v < vocab; v++) {
        if (n == n_top && !(z[v] > z[ids[n - 1]])) continue;
        int k = n < n_top ? n++ : n - 1;
        while (k > 0 && z[v] > z[ids[k - 1]]) ids[k] = ids[k - 1], k--;
        ids[k] = (int32_t)v;
    }
    return n;
}

/* id's text after prev, as decode spells it in the answer (SentencePiece
 * drops the space in front of a text's first token): decode(prev, id)
 * less prev's lead bytes of decode(prev) (SIZE_MAX: prev did not decode,
 * the text is empty); no prev (< 0): decode(id). */
static size_t spelled(const kiln_tokenizer *tok, int32_t prev, size_t lead, int32_t id, char *out, size_t cap) {
    int32_t two[2] = {prev, id};
    size_t n = 0;
    if (prev < 0) return kiln_tokenizer_decode(tok, &id, 1, out, cap, &n) ? 0 : n;
    char buf[512];
    if (kiln_tokenizer_decode(tok, two, 2, buf, sizeof buf, &n) || lead > n || n - lead > cap) return 0;
    memcpy(out, buf + lead, n - lead);
    return n - lead;
}

job_logprob *lp_record(const kiln_tokenizer *tok, const float *z, int64_t vocab, int n_top, int32_t prev, int32_t id,
                       const char *text, size_t len, size_t offset) {
    double top = -INFINITY, sum = 0;
    for (int64_t v = 0; v < vocab; v++) top = z[v] > top ? z[v] : top;
    for (int64_t v = 0; v < vocab; v++) sum += exp((double)z[v] - top);
    double lse = top + log(sum);
    int32_t ids[JOB_MAX_TOP];
    n_top = likeliest(z, vocab, n_top < JOB_MAX_TOP ? n_top : JOB_MAX_TOP, ids);
    enum { TOKEN_CAP = 256 }; /* bytes of an alternative's text (a longer one is given as empty) */
    job_logprob *r = malloc(sizeof *r + len + (size_t)n_top * TOKEN_CAP);
    if (!r) return NULL;
    r->chosen = (job_token){id, (float)((double)z[id] - lse), 0, len};
    memcpy(r->bytes, text, len);
    size_t at = len, lead = 0;
    char buf[512];
    if (prev >= 0 && kiln_tokenizer_decode(tok, &prev, 1, buf, sizeof buf, &lead)) lead = SIZE_MAX;
    for (int i = 0; i < n_top; i++) {
        size_t n = spelled(tok, prev, lead, ids[i], r->bytes + at, TOKEN_CAP);
        r->top[i] = (job_token){ids[i], (float)((double)z[ids[i]] - lse), at, n};
        at += n;
    }
    r->n_top = n_top, r->offset = offset;
    job_logprob *fit = realloc(r, sizeof *r + at); /* a long answer keeps a record per token */
    return fit ? fit : r;
}

api_logprob *lp_views(const job_logprob *const *r, int n) {
    api_logprob *v = malloc((size_t)(n ? n : 1) * (sizeof *v + JOB_MAX_TOP * sizeof(api_token)));
    api_token *top = v ? (api_token *)(v + n) : NULL;
    for (int i = 0; v && i < n; i++, top += JOB_MAX_TOP) {
        const job_logprob *p = r[i];
        v[i] = (api_logprob){{p->bytes + p->chosen.at, p->chosen.len, p->chosen.logprob}, top, p->n_top, p->offset};
        for (int k = 0; k < p->n_top; k++)
            top[k] = (api_token){p->bytes + p->top[k].at, p->top[k].len, p->top[k].logprob};
    }
    return v;
}
