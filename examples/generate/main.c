/* generate — run a llama, Mistral, Qwen2, Phi-3 or Gemma 2 (a GGUF file or
 * a Hugging Face directory; models/llama_arch.h) with its
 * weights in f32 or quantized, a KV cache and greedy or top-k sampling, and
 * say how fast: prompt tokens/s, generation tokens/s, the weight bytes
 * streamed per second, peak resident memory.
 *
 * The model is models/llama.h's, made by llama_infer_from_gguf / _from_hf
 * (models/llama_files.h): no gradients, the linear weights and the
 * embedding kept in --dtype (as stored in the file, or converted on load a
 * few MiB at a time), so memory stays near the quantized size and every
 * matrix-vector product runs kiln's fused quantized matmul. The run:
 *
 *   1. load the model and its tokenizer (the GGUF's tokenizer.ggml.*, or
 *      the directory's tokenizer.json; byte-level ids when there is none);
 *   2. the prompt in one llama_cache_step (the batched path), timed;
 *   3. up to --tokens tokens one at a time through the cache (greedy at
 *      temperature 0, else softmax(z / T) over the --top-k likeliest:
 *      examples/common/sampler.h),
 *      stopping at an end-of-generation token (end of text, of turn)
 *      unless --ignore-eos, timed; the text is printed at the end;
 *   4. the figures: tokens/s, weight GB/s (the bytes a step reads: every
 *      weight but the embedding, of which it reads one row), peak RSS.
 *
 * --ids 1,40,77 --dump-logits OUT runs those token ids as one prompt and
 * writes every position's logits as raw little-endian float32, row-major
 * [n_ids][vocab], then stops: how kiln is checked against llama.cpp's
 * logits on any model.
 *
 * --make-random FILE writes a llama with random N(0, 0.02) weights in
 * TinyLlama-1.1B's shape (dim 2048, hidden 5632, 22 layers, 32 heads, 4 kv
 * heads, vocab 32000, context 2048; --size tiny: a few-KiB model for tests)
 * as a GGUF with kiln's writer and a byte vocabulary (so llama.cpp loads
 * it), in --dtype, one of llama-quantize's mixes (Q4_K_M, Q6_K, Q8_0,
 * IQ4_XS, Q4_0, F32 ...: each tensor in the type llama-quantize gives it,
 * models/llama_mix.h): the weights are drawn and quantized a few MiB at a
 * time into their own types, so a 4-bit file never exists in f32 in memory.
 *
 *     build/examples/generate --make-random /tmp/tl-q4.gguf --dtype Q4_K_M
 *     build/examples/generate --model /tmp/tl-q4.gguf --threads 2
 *     build/examples/generate --model TinyLlama-1.1B/ --dtype nf4 --prompt "The capital of France"
 *     build/examples/generate --help
 */
#include "args.h"
#include "kiln.h"
#include "llama_files.h"
#include "output.h"
#include "progress.h"
#include "sampler.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every kiln call reports failure by value; kiln_last_error() says why. */
static int fail(const char *what) {
    fprintf(stderr, "generate: %s: %s\n", what, kiln_last_error());
    return 1;
}

static double peak_rss_mib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* --dtype: "stored" (LLAMA_AS_STORED) or any kiln dtype by its
 * kiln_dtype_name, in any case; -2 for another name. */
static int dtype_of(const char *name) {
    if (!strcmp(name, "stored")) return LLAMA_AS_STORED;
    for (int t = 0; t < KILN_DTYPE_COUNT; t++)
        if (!strcasecmp(name, kiln_dtype_name((kiln_dtype)t))) return t;
    return -2;
}

/* the names dtype_of takes, for its message */
static const char *dtype_names(void) {
    static char all[512];
    if (!all[0]) {
        strcpy(all, "stored");
        for (int t = 0; t < KILN_DTYPE_COUNT; t++)
            if (strcmp(kiln_dtype_name((kiln_dtype)t), "?") && strlen(all) + 16 < sizeof all)
                strcat(strcat(all, "|"), kiln_dtype_name((kiln_dtype)t));
    }
    return all;
}

/* --ids: comma-separated token ids into a malloc'd array (*n of them), or
 * NULL after saying on stderr which entry is not a number. */
static int32_t *parse_ids(const char *text, int64_t *n) {
    int64_t cap = 1;
    for (const char *p = text; *p; p++) cap += *p == ',';
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return fprintf(stderr, "generate: out of memory\n"), NULL;
    *n = 0;
    for (const char *p = text;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *stop = NULL;
        long long v = len && p[0] >= '0' && p[0] <= '9' ? strtoll(p, &stop, 10) : -1;
        if (v < 0 || v > INT32_MAX || stop != p + len) {
            fprintf(stderr, "generate: --ids: '%.*s' (entry %lld of '%s') is not a token id\n", (int)len, p,
                    (long long)*n + 1, text);
            free(ids);
            return NULL;
        }
        ids[(*n)++] = (int32_t)v;
        if (!end) return ids;
        p = end;
    }
}

/* --dump-logits: the logits of ids [n] at positions 0..n-1, [n][vocab]
 * little-endian float32, written to a temporary file renamed over path
 * once whole. */
static int dump_logits(llama *m, const int32_t *ids, int64_t n, const char *path) {
    const int64_t vocab = m->cfg.vocab;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return fprintf(stderr, "generate: --ids: id %d (entry %lld) is not below the vocabulary size %lld\n",
                           (int)ids[i], (long long)i + 1, (long long)vocab), 2;
    if (n > m->cfg.context)
        return fprintf(stderr, "generate: --ids: %lld ids exceed the context of %lld\n", (long long)n,
                       (long long)m->cfg.context), 2;
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) return fprintf(stderr, "generate: --dump-logits needs a little-endian host\n"), 1;
    llama_cache *cache = llama_cache_new(m, 1, n);
    float *z = cache ? malloc((size_t)(n * vocab) * sizeof *z) : NULL;
    if (!z) return llama_cache_free(cache), fail("the logits");
    if (llama_cache_step_all(m, cache, ids, n, z)) return free(z), llama_cache_free(cache), fail("the ids");
    llama_cache_free(cache);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(z, sizeof *z, (size_t)(n * vocab), f) == (size_t)(n * vocab);
    ok = f && !fclose(f) && ok && !rename(tmp, path);
    free(z);
    if (!ok) {
        fprintf(stderr, "generate: --dump-logits %s: cannot write it: %s\n", path, strerror(errno));
        remove(tmp);
        return 1;
    }
    printf("%s: logits of %lld ids, [%lld][%lld] float32\n", path, (long long)n, (long long)n, (long long)vocab);
    return 0;
}

/* --make-random: TinyLlama-1.1B's shape (or a tiny one) with random weights. */
static int make_random(const char *path, const char *size, const char *dtype, uint64_t seed) {
    llama_ftype mix = llama_ftype_parse(dtype);
    if (mix == LLAMA_FTYPE_UNKNOWN) {
        fprintf(stderr, "generate: --make-random writes a llama.cpp mix (--dtype %s), not %s\n", llama_ftype_names(),
                dtype);
        return 2;
    }
    llama_config c = llama_defaults();
    if (!strcmp(size, "tiny")) {
        c.vocab = 320, c.context = 64, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.dim = 64, c.hidden = 128;
    } else {
        c.vocab = 32000, c.context = 2048, c.layers = 22, c.heads = 32, c.kv_heads = 4, c.dim = 2048, c.hidden = 5632;
    }
    double t0 = progress_now();
    kiln_ctx *ctx = kiln_ctx_new();
    llama_mix_choice choice = {mix, &c};
    llama *m = ctx ? llama_new_inference_typed(ctx, &c, llama_mix_param_dtype, &choice, false) : NULL;
    if (!m) return fail("making the model");
    /* llama_init_random on a copy of the model holding one parameter at a
     * time (each parameter's draw is seeded by its name: the same weights
     * as all at once), with a progress bar between them */
    int64_t total = 0, done = 0;
    for (int i = 0; i < m->n_params; i++) total += kiln_tensor_numel(m->params[i]);
    progress bar;
    progress_start(&bar, stdout, "drawing the weights", total, "weight");
    llama one = *m;
    one.n_params = 1;
    for (int i = 0; i < m->n_params; i++) {
        one.params = &m->params[i];
        if (llama_init_random(&one, seed)) return fail("making the model");
        done += kiln_tensor_numel(m->params[i]);
        progress_update(&bar, done, NAN, (double)kiln_tensor_numel(m->params[i]));
    }
    progress_finish(&bar);
    double t1 = progress_now();
    printf("writing %s (%.1f MiB)\n", path, (double)llama_weight_bytes(m) / (1 << 20));
    fflush(stdout);
    if (llama_save_gguf_mix(m, NULL, path, mix)) return fail("writing the GGUF");
    printf("%s: llama %lld params (%s) in %s: %.1f MiB of weights; drawn in %.1f s, written in %.1f s; peak RSS %.0f MiB\n",
           path, (long long)llama_param_count(m), size, llama_ftype_name(mix), (double)llama_weight_bytes(m) / (1 << 20),
           t1 - t0, progress_now() - t1, peak_rss_mib());
    llama_free(m);
    kiln_ctx_free(ctx);
    return 0;
}

int main(int argc, char **argv) {
    const char *model = NULL, *backend = "cpu", *dtype = "stored", *prompt = "Once upon a time", *make = NULL,
               *size = "tinyllama", *ids_text = NULL, *dump = NULL;
    int tokens = 64, prompt_tokens = 0, top_k = 40, threads = 0;
    double temperature = 0;
    uint64_t seed = 1;
    bool quiet = false, ignore_eos = false, no_fuse = false, no_mmap = false;
    args_opt opts[] = {
        {"model", ARGS_STRING, &model, "PATH",
         "a GGUF file or a Hugging Face directory (llama, mistral, qwen2, phi3, gemma2)", NULL, false},
        {"dtype", ARGS_STRING, &dtype, "T",
         "the weights in memory: stored (as the file holds them) or a kiln dtype (converted on load); "
         "--make-random's: a llama.cpp mix (Q4_K_M, Q6_K, IQ4_XS, F32 ...)", NULL, false},
        {"prompt", ARGS_STRING, &prompt, "TEXT", "text to continue", NULL, false},
        {"prompt-tokens", ARGS_INT, &prompt_tokens, "N", "repeat the prompt's tokens to N tokens (0: as it is)", NULL,
         false},
        {"tokens", ARGS_INT, &tokens, "N", "tokens to generate", NULL, false},
        {"temperature", ARGS_DOUBLE, &temperature, "X", "sampling temperature (0: greedy)", NULL, false},
        {"top-k", ARGS_INT, &top_k, "K", "sample among the K likeliest tokens (0: all)", NULL, false},
        {"seed", ARGS_U64, &seed, "N", "seed of the sampling (and of --make-random's weights)", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where the graphs run", "cpu|vulkan|cuda", false},
        {"quiet", ARGS_FLAG, &quiet, NULL, "print the figures only, not the text", NULL, false},
        {"ignore-eos", ARGS_FLAG, &ignore_eos, NULL,
         "go on past the end-of-generation tokens (end of text, of turn: the vocabulary's)", NULL, false},
        {"no-mmap", ARGS_FLAG, &no_mmap, NULL, "copy a GGUF's weights into memory instead of mapping the file", NULL,
         false},
        {"no-fuse", ARGS_FLAG, &no_fuse, NULL,
         "one product per weight, not one over wq|wk|wv and one over w1|w3 (same logits; for comparison)", NULL, false},
        {"ids", ARGS_STRING, &ids_text, "I,J,...", "token ids to run as one prompt (with --dump-logits)", NULL, false},
        {"dump-logits", ARGS_STRING, &dump, "OUT",
         "write the --ids' logits, every position, as little-endian float32 [ids][vocab], and stop", NULL, false},
        {"make-random", ARGS_STRING, &make, "FILE", "write a random-weight llama GGUF in the --dtype mix (default Q4_0) and stop",
         NULL, false},
        {"size", ARGS_CHOICE, &size, "S", "--make-random's shape: TinyLlama-1.1B's, or a tiny test model",
         "tinyllama|tiny", false},
    };
    int r = args_parse("generate", "Generate text with a llama (GGUF or Hugging Face) in f32 or quantized; tokens/s.",
                       opts, (int)(sizeof opts / sizeof *opts), argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "generate: --threads: %s\n", kiln_last_error()), 2;
    if (make) {
        if (!output_file("generate", "--make-random", make)) return 2;
        return make_random(make, size, strcmp(dtype, "stored") ? dtype : "Q4_0", seed);
    }
    int weights = dtype_of(dtype);
    if (weights == -2)
        return fprintf(stderr, "generate: --dtype %s: not one of %s\n", dtype, dtype_names()), 2;
    if (!model) return fprintf(stderr, "generate: --model PATH is needed (or --make-random FILE); see --help\n"), 2;
    if (!ids_text != !dump) return fprintf(stderr, "generate: --ids and --dump-logits go together\n"), 2;
    int64_t n_dump = 0;
    int32_t *dump_ids = ids_text ? parse_ids(ids_text, &n_dump) : NULL;
    if (ids_text && !dump_ids) return 2;
    if (dump && !output_file("generate", "--dump-logits", dump)) return 2;

    /* 1. The model and its tokenizer. */
    struct stat st;
    bool dir = stat(model, &st) == 0 && S_ISDIR(st.st_mode);
    double t0 = progress_now();
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_backend *be = kiln_backend_get(backend);
    if (!ctx || !be || kiln_ctx_set_backend(ctx, be)) return fail("choosing the backend");
    if (no_mmap && weights == LLAMA_AS_STORED) weights = LLAMA_AS_STORED_COPY;
    llama *m = dir ? llama_infer_from_hf(ctx, model, weights) : llama_infer_from_gguf(ctx, model, weights);
    if (!m) return fail(model);
    m->fuse = !no_fuse;
    if (dump) {
        int rc = dump_logits(m, dump_ids, n_dump, dump);
        free(dump_ids);
        llama_free(m);
        kiln_ctx_free(ctx);
        return rc;
    }
    double t_load = progress_now() - t0;
    kiln_tokenizer *tok = dir ? llama_hf_tokenizer(model) : llama_gguf_tokenizer(model);
    if (!tok) kiln_clear_error(); /* byte-level ids */
    const llama_config *c = &m->cfg;
    if (!tok && c->vocab < 256) return fprintf(stderr, "generate: no tokenizer and a vocabulary under 256 bytes\n"), 1;
    int64_t bytes = llama_weight_bytes(m);
    int64_t streamed = bytes - (m->tied ? 0 : (int64_t)kiln_tensor_nbytes(m->tok_embeddings));
    printf("model: %s: %s %lld layers, dim %lld, %lld/%lld heads, vocab %lld; weights %s, %.1f MiB; loaded in "
           "%.2f s; tokenizer: %s; %d threads\n",
           model, c->traits.arch ? c->traits.arch : "llama", (long long)c->layers, (long long)c->dim, (long long)c->heads, (long long)c->kv_heads,
           (long long)c->vocab, kiln_dtype_name(kiln_tensor_dtype(m->layers[0].wq)), (double)bytes / (1 << 20), t_load,
           tok ? "the model's" : "bytes", kiln_get_threads());

    /* the prompt's ids: BOS where the vocabulary asks for it (as llama.cpp
     * reads tokenizer.ggml.add_bos_token), then the text */
    size_t plen = strlen(prompt);
    int64_t cap = (tok ? kiln_tokenizer_max_ids(tok, plen) : (int64_t)plen) + 2 + prompt_tokens, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return fprintf(stderr, "generate: out of memory\n"), 1;
    if (tok && kiln_tokenizer_add_bos(tok) && kiln_tokenizer_bos(tok) >= 0) ids[n++] = kiln_tokenizer_bos(tok);
    if (tok) {
        int64_t k = 0;
        if (kiln_tokenizer_encode(tok, prompt, plen, false, ids + n, cap - n, &k)) return fail("tokenizing the prompt");
        n += k;
    } else {
        for (size_t i = 0; i < plen; i++) ids[n++] = (unsigned char)prompt[i];
    }
    if (n == 0) ids[n++] = 0;
    for (int64_t i = n; i < prompt_tokens; i++) ids[i] = ids[i % n]; /* --prompt-tokens: repeated */
    if (prompt_tokens) n = prompt_tokens;
    int64_t len = n + tokens;
    if (len > c->context)
        return fprintf(stderr, "generate: %lld prompt + %d new tokens exceed the context of %lld\n", (long long)n,
                       tokens, (long long)c->context), 2;

    /* 2. The prompt, at once. */
    llama_cache *cache = llama_cache_new(m, 1, len);
    float *z = malloc((size_t)c->vocab * sizeof *z);
    int32_t *out = malloc((size_t)(tokens + 1) * sizeof *out);
    sampler smp;
    if (sampler_init(&smp, &(sampler_params){.temperature = temperature, .top_k = top_k}, seed ^ 0x67656e6572617465ull))
        return fprintf(stderr, "generate: out of memory\n"), 1; /* the stream: "generate" */
    if (!cache || !z || !out) return fail("the cache");
    t0 = progress_now();
    if (llama_cache_step(m, cache, ids, n, z)) return fail("the prompt");
    double t_prompt = progress_now() - t0;

    /* 3. New tokens, one at a time, up to an end-of-generation token (eos,
     * eot, <|im_end|> ...: kiln_tokenizer_is_eog, as llama.cpp stops;
     * unless --ignore-eos). The first comes from the prompt's logits. */
    int made = 0, steps = 0;
    t0 = progress_now();
    while (made < tokens) {
        out[made] = sampler_draw(&smp, z, c->vocab);
        if (tok && !ignore_eos && kiln_tokenizer_is_eog(tok, out[made])) {
            made++;
            break;
        }
        made++;
        if (made < tokens && llama_cache_step(m, cache, &out[made - 1], 1, z)) return fail("generating");
        steps += made < tokens;
    }
    double t_gen = progress_now() - t0;

    if (!quiet) {
        size_t cap_text = 16 * (size_t)made + 16, tl = 0;
        char *text = malloc(cap_text);
        if (!text) return fprintf(stderr, "generate: out of memory\n"), 1;
        if (tok) {
            kiln_status ds = kiln_tokenizer_decode(tok, out, made, text, cap_text, &tl);
            if (ds == KILN_ERR_ARG && tl > cap_text) { /* long tokens: the size it said */
                char *bigger = realloc(text, cap_text = tl);
                if (!bigger) return fprintf(stderr, "generate: out of memory\n"), 1;
                text = bigger;
                ds = kiln_tokenizer_decode(tok, out, made, text, cap_text, &tl);
            }
            if (ds) return fail("decoding");
        } else {
            for (int i = 0; i < made; i++) text[tl++] = (char)(out[i] & 0xff);
        }
        /* the model's text may hold any byte: a terminal gets no control bytes */
        text_write(stdout, prompt, strlen(prompt));
        text_write(stdout, text, tl);
        printf("\n");
        free(text);
    }

    /* 4. The figures. */
    printf("prompt: %lld tokens in %.3f s: %.1f tokens/s\n", (long long)n, t_prompt, (double)n / t_prompt);
    if (steps)
        printf("generation: %d tokens in %.3f s: %.2f tokens/s; weights %.1f MiB a token: %.2f GB/s\n", steps, t_gen,
               steps / t_gen, (double)streamed / (1 << 20), (double)streamed * steps / t_gen / 1e9);
    printf("peak RSS: %.0f MiB (weights %.0f MiB)\n", peak_rss_mib(), (double)bytes / (1 << 20));
    free(ids), free(z), free(out);
    sampler_free(&smp);
    kiln_tokenizer_free(tok);
    llama_cache_free(cache);
    llama_free(m);
    kiln_ctx_free(ctx);
    return 0;
}
