/* generate.c — `kiln_bench --only generate`: batch-1 generation with the
 * KV cache (llama_cache_step, models/llama.h) and a 128-token prompt on a
 * llama in TinyLlama-1.1B's shape (dim 2048, hidden 5632, 22 layers, 32/4
 * heads, vocab 32000) in llama-quantize's mixes Q4_K_M, Q6_K, Q8_0, IQ4_XS
 * and Q4_0: 0.6 to 1.1 GB of weights, more than the 480 MiB cache, so
 * every token streams them from memory. Each mix is a GGUF file written
 * once under build/bench/models and read as generate reads it (mapped):
 * its tokens/s, the weight bytes a token reads per second against the
 * triad in the same run, and, where $KILN_LLAMA_BENCH names llama.cpp's
 * llama-bench, llama.cpp's tokens/s on the same file (run after kiln's).
 *
 * The weights are random blocks: one chunk of a few MiB per tensor drawn
 * N(0, 0.02) and quantized, then copied over the rest (the bytes streamed
 * are what matters), so making a file takes seconds. */
#include "bench.h"
#include "llama_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

void bench_gen_run(void *p) {
    bench_gen *j = p;
    kiln_set_threads(j->nt);
    if (j->n > 1 || j->c->pos + 1 > j->c->len) j->c->pos = 0; /* the prompt from 0; generation wraps */
    int32_t toks[128];
    for (int64_t i = 0; i < j->n; i++) toks[i] = (j->tok + (int32_t)i * 7919) % 32000;
    bench_check(llama_cache_step(j->m, j->c, toks, j->n, j->logits) == KILN_OK, "llama_cache_step");
    j->tok = (j->tok + 1) % 32000;
}

void bench_model_file(const char *mix, char *path, size_t size) {
    char dir[4096];
    ssize_t k = readlink("/proc/self/exe", dir, sizeof dir - 1);
    dir[k > 0 ? k : 0] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    snprintf(path, size, "%s/models", dir);
    mkdir(path, 0777);
    snprintf(path, size, "%s/models/tinyllama-%s.gguf", dir, mix);
    if (access(path, R_OK) == 0) return;
    const llama_config cfg = tinyllama();
    llama_mix_choice choice = {llama_ftype_parse(mix), &cfg};
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = ctx ? llama_new_inference_typed(ctx, &cfg, llama_mix_param_dtype, &choice, false) : NULL;
    bench_check(m != NULL, "the random model");
    fill(m);
    fprintf(stderr, "bench: writing %s\n", path);
    bench_check(llama_save_gguf_mix(m, NULL, path, choice.mix) == KILN_OK, path);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* One field of a CSV line (quoted or not) into out; the rest after it. */
static const char *csv_field(const char *p, char *out, size_t size) {
    size_t n = 0;
    bool quoted = *p == '"';
    for (p += quoted; *p && (quoted ? *p != '"' : *p != ',' && *p != '\n'); p++)
        if (n + 1 < size) out[n++] = *p;
    out[n] = '\0';
    if (quoted && *p == '"') p++;
    return *p == ',' ? p + 1 : NULL;
}

void bench_llama_cpp(const char *env, const char *file, int nt, const char *extra, double *pp, double *tg) {
    const char *lb = getenv(env);
    *pp = *tg = 0;
    if (!lb || !*lb) return;
    char cmd[8600], line[8192], f[256];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t %d -p 128 -n 32 -r 3 %s -o csv 2>/dev/null", lb, file, nt, extra);
    FILE *p = popen(cmd, "r");
    int col_p = -1, col_g = -1, col_ts = -1;
    while (p && fgets(line, sizeof line, p)) {
        double v[3] = {0, 0, 0};
        int c = 0;
        for (const char *q = line; q; c++) {
            q = csv_field(q, f, sizeof f);
            if (!strcmp(f, "n_prompt")) col_p = c;
            if (!strcmp(f, "n_gen")) col_g = c;
            if (!strcmp(f, "avg_ts")) col_ts = c;
            if (c == col_p || c == col_g || c == col_ts) v[c == col_p ? 0 : c == col_g ? 1 : 2] = atof(f);
        }
        if (v[0] > 0 && v[1] == 0) *pp = v[2];
        if (v[1] > 0 && v[0] == 0) *tg = v[2];
    }
    if (p) pclose(p);
}

void bench_generate(const bench_opts *o) {
    static const char *const mixes[] = {"Q4_K_M", "Q6_K", "Q8_0", "IQ4_XS", "Q4_0"};
    static float logits[32000];
    bench_triad tr = bench_triad_new(o->stream_mib * (1 << 20) / 4);
    const char *lb = getenv("KILN_LLAMA_BENCH");
    const char *vs = lb && *lb ? "llama.cpp (llama-bench, same file)" : "no llama.cpp: KILN_LLAMA_BENCH unset";
    printf("# generation: a llama in TinyLlama-1.1B's shape, random weights in llama-quantize's mixes, read mapped "
           "from a GGUF (build/bench/models); KV cache, batch 1; GB/s: weight bytes a token reads (all but the "
           "embedding) against the triad; tok/s against %s\n", vs);
    const int saved = kiln_get_threads();
    for (size_t i = 0; i < sizeof mixes / sizeof *mixes; i++) {
        char path[4200];
        bench_model_file(mixes[i], path, sizeof path);
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = llama_infer_from_gguf(ctx, path, LLAMA_AS_STORED);
        bench_check(m != NULL, path);
        const double bytes = (double)(llama_weight_bytes(m) - (int64_t)kiln_tensor_nbytes(m->tok_embeddings));
        llama_cache *c = llama_cache_new(m, 1, 256);
        bench_check(c != NULL, "cache");
        for (int ti = 0; ti < o->n_threads; ti++) {
            const int nt = o->threads[ti];
            bench_gen j = {m, c, logits, 1, nt, 1}, p = {m, c, logits, 1, nt, 128};
            tr.nt = nt;
            bench_job jobs[2] = {{bench_gen_run, &j}, {bench_triad_run, &tr}};
            double med[2], pm, lpp, ltg;
            bench_measure(jobs, 2, 3, 16, 1.5 * o->scale, med);
            bench_measure(&(bench_job){bench_gen_run, &p}, 1, 1, 3, 1.0 * o->scale, &pm);
            bench_llama_cpp("KILN_LLAMA_BENCH", path, nt, "", &lpp, &ltg);
            char name[64];
            snprintf(name, sizeof name, "generate %s %dt", mixes[i], nt);
            bench_report(name, bytes / med[0] * 1e-9, "GB/s", bench_triad_gbs(&tr, med[1]), "triad");
            bench_report(name, 1 / med[0], "tok/s", ltg, ltg > 0 ? "llama.cpp" : vs);
            snprintf(name, sizeof name, "prompt 128 %s %dt", mixes[i], nt);
            bench_report(name, 128 / pm, "tok/s", lpp, lpp > 0 ? "llama.cpp" : vs);
        }
        llama_cache_free(c);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
    kiln_set_threads(saved);
    bench_triad_free(&tr);
}

/* One model and cache for both jobs (j first: jobs[0].arg is the struct). */
typedef struct gen_jobs {
    bench_gen j[2];
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
        g->j[i] = (bench_gen){m, c, logits, 1, threads[i], 1};
        jobs[i] = (bench_job){bench_gen_run, &g->j[i]};
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
