/* slots.c — `kiln_bench --only slots`: batched decoding (llama_slots,
 * models/llama_slots.h) on bench/generate.c's Q4_0 llama in TinyLlama-1.1B's
 * shape: the tokens/s of 1, 4 and 16 sequences together (and of 2 and 4
 * in Q4_K and Q8_0, whose few rows have their own kernels), each decoding a
 * token a step in one forward pass (every sequence's logits out, as a
 * server samples them), against batch-1 generation through
 * llama_cache_step in alternating blocks of the same run. Every sequence
 * runs over positions 0 .. 255 and starts over, as the batch-1 one does. */
#include "bench.h"
#include "llama_slots.h"

#include <stdio.h>
#include <stdlib.h>

enum { LEN = 256, VOCAB = 32000 };

typedef struct slots_job {
    llama *m;
    llama_slots *s;
    llama_cache *c; /* batch 1, for the reference */
    float *logits;
    int n, nt;      /* sequences, threads */
    int32_t tok;
} slots_job;

static void run_single(void *p) {
    slots_job *j = p;
    kiln_set_threads(j->nt);
    if (j->c->pos + 1 > j->c->len) j->c->pos = 0;
    bench_check(llama_cache_step(j->m, j->c, &j->tok, 1, j->logits) == KILN_OK, "llama_cache_step");
    j->tok = (j->tok + 7919) % VOCAB;
}

static void run_slots(void *p) {
    slots_job *j = p;
    int slots[16];
    int32_t toks[16];
    bool want[16];
    kiln_set_threads(j->nt);
    for (int i = 0; i < j->n; i++) {
        if (llama_slots_pos(j->s, i) + 1 > LEN) bench_check(llama_slots_clear(j->s, i) == KILN_OK, "clear");
        slots[i] = i, toks[i] = (j->tok + 104729 * i) % VOCAB, want[i] = true;
    }
    bench_check(llama_slots_step(j->s, j->n, slots, toks, want, j->logits) == KILN_OK, "llama_slots_step");
    j->tok = (j->tok + 7919) % VOCAB;
}

/* One weight dtype's lines. */
static void slots_of(const bench_opts *o, kiln_dtype t, const char *label, const int *counts, int n_counts) {
    kiln_ctx *ctx = kiln_ctx_new();
    bench_check(ctx != NULL, "out of memory");
    llama *m = bench_tinyllama(ctx, t);
    llama_slots *s = llama_slots_new(m, 16, LEN);
    llama_cache *c = llama_cache_new(m, 1, LEN);
    float *logits = malloc((size_t)16 * VOCAB * sizeof *logits);
    bench_check(s && c && logits, "slots");
    const int saved = kiln_get_threads();
    for (int ti = 0; ti < o->n_threads; ti++)
        for (int k = 0; k < n_counts; k++) {
            slots_job one = {m, s, c, logits, 1, o->threads[ti], 1}, many = one;
            many.n = counts[k];
            bench_job jobs[2] = {{run_single, &one}, {run_slots, &many}};
            double med[2];
            bench_measure(jobs, 2, 3, 16, 2.0 * o->scale, med);
            char name[64];
            snprintf(name, sizeof name, "slots %d %s %dt", counts[k], label, o->threads[ti]);
            bench_report(name, counts[k] / med[1], "tok/s", 1 / med[0], "batch-1 llama_cache_step");
        }
    kiln_set_threads(saved);
    free(logits);
    llama_cache_free(c);
    llama_slots_free(s);
    llama_free(m);
    kiln_ctx_free(ctx);
}

void bench_slots(const bench_opts *o) {
    static const int counts[] = {1, 4, 16}, few[] = {2, 4}; /* few: the rows kernels' (qmatmul.h) */
    printf("# batched decoding: llama_slots, TinyLlama-1.1B's shape in Q4_0 (and 2, 4 sequences in Q4_K and "
           "Q8_0), random weights; tok/s of all the sequences together against batch-1 llama_cache_step\n");
    slots_of(o, KILN_Q4_0, "Q4_0", counts, 3);
    slots_of(o, KILN_Q4_K, "Q4_K", few, 2);
    slots_of(o, KILN_Q8_0, "Q8_0", few, 2);
}
