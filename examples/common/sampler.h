/* sampler.h — the next token from a model's logits, as the examples that
 * generate text draw it (generate, chat): greedy at temperature 0, else
 * llama.cpp's chain: the repetition penalty on the recent tokens, top-k,
 * top-p and min-p on the softmax of the (penalized) logits, then
 * softmax(z / temperature) over what is left, drawn with a seeded
 * splitmix64 stream (the same seed, the same tokens).
 *
 *     sampler s;
 *     sampler_init(&s, &(sampler_params){.temperature = 0.8, .top_k = 40, .top_p = 0.95}, seed);
 *     int32_t next = sampler_draw(&s, logits, vocab);   // logits are changed
 *     sampler_accept(&s, next);                        // for the penalty
 *     sampler_free(&s);
 */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stdint.h>

typedef struct sampler_params {
    double temperature;    /* 0: greedy */
    int top_k;             /* 0: all */
    double top_p, min_p;   /* 1, 0: off (0 is taken as off for top_p too) */
    double repeat_penalty; /* 1 (or 0): off; logits of the last repeat_last tokens / it (> 0) or * it */
    int repeat_last;       /* 0: 64 */
} sampler_params;

typedef struct sampler {
    sampler_params p;
    uint64_t rng;
    int32_t *recent; /* a ring of the last repeat_last tokens */
    int n_recent, next;
    float *tmp;
    double *prob;
    int64_t cap;
} sampler;

/* stream: the random stream's seed (the caller's --seed, mixed with a
 * constant of its own). 0 on success, -1 out of memory. */
int sampler_init(sampler *s, const sampler_params *p, uint64_t stream);
void sampler_free(sampler *s);
/* The next token from z [n] (z is penalized in place). */
int32_t sampler_draw(sampler *s, float *z, int64_t n);
/* id was generated or read: the penalty counts it. */
void sampler_accept(sampler *s, int32_t id);
/* Forget the recent tokens (a new conversation). */
void sampler_reset(sampler *s);

#endif
