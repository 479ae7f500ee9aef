/* test_llama_arch.c — the architectures the gguf-ref set has no file for:
 * Gemma 2 (embedding scale, GELU(tanh), post-norms, soft-caps, sliding
 * windows, a head_dim of its own) and Llama 3.1 (rope_freqs, tied output),
 * tiny models written by scripts/make_arch_fixtures.py both as GGUF and as
 * a Hugging Face directory, with logits it computed in float64 plain
 * Python. Both files, through the inference and the training loaders,
 * must give those logits (F32: 1e-4); each trait undone must not; a KV
 * cache fed one token at a time, and Gemma 2 batched through llama_slots,
 * must give the same logits; a file
 * naming an unknown architecture or lacking a key is refused by name. */
#include "kt.h"
#include "llama_files.h"
#include "llama_slots.h"
#include "test_llama_util.h"

#include <unistd.h>

#define ARCH_DIR "tests/fixtures/arch/"
#define N_TOK 12
static const int32_t TOKENS[N_TOK] = {1, 7, 30, 2, 45, 11, 11, 19, 40, 3, 28, 5};

static float *expected(const char *name, int64_t vocab) {
    char p[256];
    snprintf(p, sizeof p, ARCH_DIR "%s.logits.bin", name);
    FILE *f = fopen(p, "rb");
    float *z = malloc((size_t)(N_TOK * vocab) * sizeof *z);
    size_t got = f && z ? fread(z, sizeof *z, (size_t)(N_TOK * vocab), f) : 0;
    if (f) fclose(f);
    if (got != (size_t)(N_TOK * vocab)) free(z), z = NULL;
    return z;
}

/* every position's logits of TOKENS through the cache at once */
static float *logits_all(llama *m) {
    llama_cache *c = llama_cache_new(m, 1, N_TOK);
    float *z = malloc((size_t)(N_TOK * m->cfg.vocab) * sizeof *z);
    if (!c || !z || llama_cache_step_all(m, c, TOKENS, N_TOK, z)) free(z), z = NULL;
    llama_cache_free(c);
    return z;
}

typedef enum { VIA_INFER_GGUF, VIA_INFER_HF, VIA_TRAIN_GGUF, VIA_TRAIN_HF } via;
static const char *const VIA[] = {"llama_infer_from_gguf", "llama_infer_from_hf", "llama_from_gguf", "llama_from_hf"};

static llama *load(kiln_ctx *ctx, const char *name, via v) {
    char p[256];
    snprintf(p, sizeof p, ARCH_DIR "%s%s", name, v == VIA_INFER_HF || v == VIA_TRAIN_HF ? "-hf" : ".gguf");
    switch (v) {
    case VIA_INFER_GGUF: return llama_infer_from_gguf(ctx, p, LLAMA_AS_STORED);
    case VIA_INFER_HF: return llama_infer_from_hf(ctx, p, KILN_F32);
    case VIA_TRAIN_GGUF: return llama_from_gguf(ctx, p);
    default: return llama_from_hf(ctx, p);
    }
}

/* max |diff| of the model's logits (spoil applied first, may be NULL)
 * against the fixture's; -1 on failure */
static double check(const char *name, via v, void (*spoil)(llama *)) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = load(ctx, name, v);
    KT_CHECK(m != NULL, "%s via %s: %s", name, VIA[v], kiln_last_error());
    double d = -1;
    if (m) {
        if (spoil) spoil(m);
        float *want = expected(name, m->cfg.vocab);
        float *got = v >= VIA_TRAIN_GGUF ? llama_test_logits(m, TOKENS, N_TOK) : logits_all(m);
        KT_CHECK(want && got, "%s via %s: %s", name, VIA[v], want ? kiln_last_error() : "no expected logits");
        if (want && got) d = llama_test_max_diff(got, want, N_TOK * m->cfg.vocab);
        free(want), free(got);
    }
    llama_free(m);
    kiln_ctx_free(ctx);
    return d;
}

KT_TEST(llama_arch_gemma2_and_rope_freqs_match_float64) {
    static const char *const names[] = {"gemma2-tiny", "llama-rope-tiny"};
    for (int i = 0; i < 2; i++)
        for (int v = 0; v < 4; v++) {
            double d = check(names[i], (via)v, NULL);
            KT_CHECK(d >= 0 && d <= 1e-4, "%s via %s: max |diff| %.3g", names[i], VIA[v], d);
        }
}

static void no_attn_cap(llama *m) { m->cfg.attn_softcap = 0; }
static void no_final_cap(llama *m) { m->cfg.final_softcap = 0; }
static void no_window(llama *m) { m->cfg.traits.swa_every = 0; }
static void odd_windows(llama *m) { m->cfg.sliding_window = 5; }
static void no_embed_scale(llama *m) { m->cfg.traits.embed_scale = false; }
static void silu_mlp(llama *m) { m->cfg.traits.act = LLAMA_ACT_SILU; }
static void no_post_norms(llama *m) {
    for (int l = 0; l < m->cfg.layers; l++) m->layers[l].attn_post_norm = m->layers[l].ffn_post_norm = NULL;
}
static void plain_scale(llama *m) { m->cfg.query_scale = 1.0 / sqrt(8.0); } /* dim / heads, not head_dim */
static void no_rope_freqs(llama *m) { kiln_tensor_fill(m->rope_freqs, 1.0); }

KT_TEST(llama_arch_each_trait_matters) {
    const struct { const char *name; void (*spoil)(llama *); const char *what; } cases[] = {
        {"gemma2-tiny", no_attn_cap, "no attention soft-cap"},  {"gemma2-tiny", no_final_cap, "no final soft-cap"},
        {"gemma2-tiny", no_window, "no sliding window"},        {"gemma2-tiny", odd_windows, "a window of 5"},
        {"gemma2-tiny", no_embed_scale, "no embedding scale"},  {"gemma2-tiny", silu_mlp, "SiLU for GELU"},
        {"gemma2-tiny", no_post_norms, "no post-norms"},        {"gemma2-tiny", plain_scale, "1/sqrt(dim/heads)"},
        {"llama-rope-tiny", no_rope_freqs, "rope_freqs all 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double d = check(cases[i].name, VIA_INFER_GGUF, cases[i].spoil);
        KT_CHECK(d > 1e-2, "%s with %s: still within %.3g of the reference", cases[i].name, cases[i].what, d);
    }
}

/* Generation's path: the prompt's first 3 tokens, then one at a time (the
 * cache's decode rows graph: kiln_attention_cached_softcap), so the
 * sliding window and the caps run with keys from the cache; each step's
 * logits are the reference's at that position. */
KT_TEST(llama_arch_cache_steps_match) {
    static const char *const names[] = {"gemma2-tiny", "llama-rope-tiny"};
    for (int i = 0; i < 2; i++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = load(ctx, names[i], VIA_INFER_GGUF);
        KT_NOTNULL(m);
        const int64_t V = m->cfg.vocab;
        float *want = expected(names[i], V), *z = malloc((size_t)V * sizeof *z);
        llama_cache *c = llama_cache_new(m, 1, N_TOK);
        KT_NOTNULL(want);
        KT_NOTNULL(c);
        KT_OK(llama_cache_step(m, c, TOKENS, 3, z));
        double worst = llama_test_max_diff(z, want + 2 * V, V);
        for (int t = 3; t < N_TOK; t++) {
            KT_OK(llama_cache_step(m, c, TOKENS + t, 1, z));
            worst = fmax(worst, llama_test_max_diff(z, want + t * V, V));
        }
        KT_CHECK(worst <= 1e-4, "%s: cached steps differ by %.3g", names[i], worst);
        free(want), free(z);
        llama_cache_free(c);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
}

/* Gemma 2 batched (llama_slots: kiln_attention_cached with the soft-cap):
 * slot 0 takes TOKENS in chunks of 5, slot 1 one token a step beside it,
 * then alone (the rows graph of one entry, computed again each step);
 * every position's logits are the reference's. */
KT_TEST(llama_arch_gemma2_slots_match) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = load(ctx, "gemma2-tiny", VIA_INFER_GGUF);
    KT_NOTNULL(m);
    const int64_t V = m->cfg.vocab;
    float *want = expected("gemma2-tiny", V), *z = malloc((size_t)(6 * V) * sizeof *z);
    llama_slots *s = llama_slots_new(m, 2, N_TOK);
    KT_NOTNULL(want);
    KT_CHECK(s != NULL, "llama_slots_new: %s", kiln_last_error());
    double worst = 0;
    for (int t = 0; s && t < N_TOK; t++) {
        int slots[6], at[6], n = 0;
        int32_t ids[6];
        for (int i = 5 * t; i < 5 * t + 5 && i < N_TOK; i++, n++) slots[n] = 0, ids[n] = TOKENS[i], at[n] = i;
        slots[n] = 1, ids[n] = TOKENS[t], at[n++] = t;
        KT_OK(llama_slots_step(s, n, slots, ids, (const bool[]){1, 1, 1, 1, 1, 1}, z));
        for (int i = 0; i < n; i++) worst = fmax(worst, llama_test_max_diff(z + i * V, want + at[i] * V, V));
    }
    KT_CHECK(worst <= 1e-4, "gemma2-tiny through llama_slots: max |diff| %.3g", worst);
    llama_slots_free(s);
    free(want), free(z);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* A GGUF file naming what kiln does not run, or lacking what it needs: the
 * error names the architecture or key and the file. */
KT_TEST(llama_arch_gguf_errors_name_the_key) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_arch_%d.gguf", (int)getpid());
    const struct { const char *arch, *key; int64_t v; kiln_status want; const char *says; } cases[] = {
        {"gpt2", NULL, 0, KILN_ERR_UNSUPPORTED, "general.architecture is 'gpt2', not llama, qwen2, phi3 or gemma2"},
        {"phi3", "phi3.block_count", 2, KILN_ERR_FORMAT, "phi3.embedding_length"},
        {"gemma2", "gemma2.block_count", 0, KILN_ERR_FORMAT, "gemma2.block_count = 0 is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kiln_gguf_writer *w = kiln_gguf_writer_new();
        KT_OK(kiln_gguf_set_string(w, "general.architecture", cases[i].arch));
        if (cases[i].key) KT_OK(kiln_gguf_set_int(w, cases[i].key, KILN_GGUF_UINT32, cases[i].v));
        KT_OK(kiln_gguf_writer_save(w, path));
        kiln_gguf_writer_free(w);
        kiln_ctx *ctx = kiln_ctx_new();
        KT_CHECK(llama_infer_from_gguf(ctx, path, LLAMA_AS_STORED) == NULL && kiln_last_status() == cases[i].want &&
                     strstr(kiln_last_error(), cases[i].says) && strstr(kiln_last_error(), path),
                 "case %zu: %s", i, kiln_last_error());
        kiln_ctx_free(ctx);
    }
    unlink(path);
}
