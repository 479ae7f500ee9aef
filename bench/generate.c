/* generate.c — `kiln_bench --only generate`: batch-1 generation with the
 * KV cache (llama_cache_step, models/llama.h) on a llama in TinyLlama-1.1B's
 * shape (dim 2048, hidden 5632, 22 layers, 32/4 heads, vocab 32000): 590 MiB
 * of weights in Q4_0, more than the 480 MiB cache, so every token streams
 * them from memory. Each dtype's tokens/s, and the weight bytes a token
 * reads per second against the triad in the same run; the quantized ones'
 * tokens/s against f32's; the prompt (128 tokens at once) in Q4_0.
 *
 * The weights are random blocks: one chunk of a few MiB per tensor drawn
 * N(0, 0.02) and quantized, then copied over the rest (the bytes streamed
 * are what matters), so making the f32 model (4.4 GB) takes seconds. Each
 * dtype's model is made, measured and freed in turn. */
#include "bench.h"
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static llama_config tinyllama(void) {
    llama_config c = llama_defaults();
    c.vocab = 32000, c.context = 2048, c.layers = 22, c.heads = 32, c.kv_heads = 4, c.dim = 2048, c.hidden = 5632;
    return c;
}

/* Every weight: its first chunk of rows drawn and converted, then tiled. */
static void fill(llama *m) {
    for (int i = 0; i < m->n_params; i++) {
        kiln_tensor *t = m->params[i];
        if (kiln_tensor_ndim(t) != 2) continue;
        int64_t rows = kiln_tensor_dim(t, 0), cols = kiln_tensor_dim(t, 1), step = llama_row_chunk(t, 1 << 20);
        kiln_ctx *tmp = kiln_ctx_new();
        kiln_tensor *f = kiln_new_2d(tmp, KILN_F32, step, cols);
        bench_check(f && kiln_tensor_fill_randn(f, 7 + (uint64_t)i, 0.0, 0.02) == KILN_OK &&
                        llama_put_rows(t, 0, step, kiln_tensor_data(f)) == KILN_OK,
                    "random weights");
        kiln_ctx_free(tmp);
        char *d = kiln_tensor_data(t);
        const size_t chunk = kiln_tensor_nbytes(t) / (size_t)rows * (size_t)step, all = kiln_tensor_nbytes(t);
        for (size_t at = chunk; at < all; at += chunk) memcpy(d + at, d, all - at < chunk ? all - at : chunk);
    }
}

llama *bench_tinyllama(kiln_ctx *ctx, kiln_dtype weights) {
    const llama_config cfg = tinyllama();
    llama *m = llama_new_inference(ctx, &cfg, weights, false);
    bench_check(m != NULL, "llama_new_inference");
    fill(m);
    return m;
}

typedef struct gen_job {
    llama *m;
    llama_cache *c;
    float *logits;
    int32_t tok;
    int nt;
    int64_t n; /* tokens per step: 1 (generation) or the prompt's */
} gen_job;

static void run_gen(void *p) {
    gen_job *j = p;
    kiln_set_threads(j->nt);
    if (j->n > 1 || j->c->pos + 1 > j->c->len) j->c->pos = 0; /* the prompt from 0; generation wraps */
    int32_t toks[128];
    for (int64_t i = 0; i < j->n; i++) toks[i] = (j->tok + (int32_t)i * 7919) % 32000;
    bench_check(llama_cache_step(j->m, j->c, toks, j->n, j->logits) == KILN_OK, "llama_cache_step");
    j->tok = (j->tok + 1) % 32000;
}

void bench_generate(const bench_opts *o) {
    const kiln_dtype ts[3] = {KILN_F32, KILN_Q8_0, KILN_Q4_0};
    static float logits[32000];
    bench_triad tr = bench_triad_new(o->stream_mib * (1 << 20) / 4);
    printf("# generation: llama in TinyLlama-1.1B's shape, random weights, KV cache, batch 1; GB/s: weight bytes a "
           "token reads (all but the embedding)\n");
    const int saved = kiln_get_threads();
    double f32_tps[2] = {0, 0};
    for (int i = 0; i < 3; i++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = bench_tinyllama(ctx, ts[i]);
        const double bytes = (double)(llama_weight_bytes(m) - (int64_t)kiln_tensor_nbytes(m->tok_embeddings));
        llama_cache *c = llama_cache_new(m, 1, 256);
        bench_check(c != NULL, "cache");
        for (int ti = 0; ti < o->n_threads; ti++) {
            const int nt = o->threads[ti];
            gen_job j = {m, c, logits, 1, nt, 1};
            tr.nt = nt;
            bench_job jobs[2] = {{run_gen, &j}, {bench_triad_run, &tr}};
            double med[2];
            bench_measure(jobs, 2, 3, 16, (ts[i] == KILN_F32 ? 2.5 : 1.5) * o->scale, med);
            char name[64];
            snprintf(name, sizeof name, "generate %s %dt", kiln_dtype_name(ts[i]), nt);
            bench_report(name, bytes / med[0] * 1e-9, "GB/s", bench_triad_gbs(&tr, med[1]), "triad");
            if (ts[i] == KILN_F32) f32_tps[ti] = 1 / med[0];
            snprintf(name, sizeof name, "generate %s %dt", kiln_dtype_name(ts[i]), nt);
            bench_report(name, 1 / med[0], "tok/s", ts[i] == KILN_F32 ? 0 : f32_tps[ti],
                         ts[i] == KILN_F32 ? "reference of the lines below" : "f32");
            if (ts[i] == KILN_Q4_0) { /* the prompt: 128 tokens in one step */
                gen_job p = {m, c, logits, 1, nt, 128};
                double pm;
                bench_measure(&(bench_job){run_gen, &p}, 1, 1, 3, 1.0 * o->scale, &pm);
                snprintf(name, sizeof name, "prompt 128 %s %dt", kiln_dtype_name(ts[i]), nt);
                bench_report(name, 128 / pm, "tok/s", 0, "llama.cpp 174 tok/s, AMX, 2t");
            }
        }
        llama_cache_free(c);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
    printf("# llama.cpp on this machine (CPU-NOTES, 2 threads): Q4_0 30 tok/s, Q8_0 17, F32 3.5\n");
    kiln_set_threads(saved);
    bench_triad_free(&tr);
}

/* One model and cache for both jobs (j first: jobs[0].arg is the struct). */
typedef struct gen_jobs {
    gen_job j[2];
    kiln_ctx *ctx;
} gen_jobs;

void bench_generate_jobs(const int *threads, int n, bench_job *jobs) {
    static float logits[32000];
    gen_jobs *g = calloc(1, sizeof *g);
    bench_check(g && n <= 2 && (g->ctx = kiln_ctx_new()), "out of memory");
    llama *m = bench_tinyllama(g->ctx, KILN_Q4_0);
    llama_cache *c = llama_cache_new(m, 1, 256);
    bench_check(c != NULL, "cache");
    for (int i = 0; i < n; i++) {
        g->j[i] = (gen_job){m, c, logits, 1, threads[i], 1};
        jobs[i] = (bench_job){run_gen, &g->j[i]};
    }
}

void bench_generate_jobs_free(bench_job *jobs, int n) {
    gen_jobs *g = jobs[0].arg;
    (void)n;
    llama_cache_free(g->j[0].c);
    llama_free(g->j[0].m);
    kiln_ctx_free(g->ctx);
    free(g);
}
