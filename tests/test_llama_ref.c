/* test_llama_ref.c — kiln against llama.cpp: the reference GGUF files of
 * tests/fixtures/gguf-ref/ (copied from the shared gguf-ref set: tiny
 * random-weight models, 2 layers, width 256, vocab 512, made with gguf-py
 * and quantized by llama-quantize; its README says how) run the same 32
 * token ids as one prompt through llama_infer_from_gguf (weights as
 * stored) and llama_cache_step_all, and every position's logits must
 * match the logits llama.cpp computed for them (*.logits.bin, [32][512]
 * little-endian float32). One table for every file: F32 to max |diff|
 * 1e-4; quantized files to max 0.03 and rms 0.008 (llama.cpp quantizes the
 * activations; a float-activation product differs by about 0.02). A wrong
 * rope mode or a missing bias must fail the same tolerances. */
#include "kt.h"
#include "llama_files.h"
#include "test_llama_util.h"

#include <stdint.h>

#define REF_DIR "tests/fixtures/gguf-ref/"
#define N_IDS 32
#define VOCAB 512

/* ids[0] = 1 (BOS), ids[i] = (i*37) % 509 + 3: the README's sequence */
static void ref_ids(int32_t *ids) {
    ids[0] = 1;
    for (int i = 1; i < N_IDS; i++) ids[i] = (i * 37) % 509 + 3;
}

static float *read_logits(const char *path) {
    FILE *f = fopen(path, "rb");
    float *z = malloc(N_IDS * VOCAB * sizeof *z);
    size_t got = f && z ? fread(z, sizeof *z, N_IDS * VOCAB, f) : 0;
    if (f) fclose(f);
    if (got != N_IDS * VOCAB) {
        free(z);
        return NULL;
    }
    return z;
}

/* The model's logits of the ids, [32][512], malloc'd; NULL on failure. */
static float *kiln_logits(llama *m) {
    int32_t ids[N_IDS];
    ref_ids(ids);
    llama_cache *c = llama_cache_new(m, 1, N_IDS);
    float *z = malloc(N_IDS * VOCAB * sizeof *z);
    if (!c || !z || llama_cache_step_all(m, c, ids, N_IDS, z)) {
        free(z);
        z = NULL;
    }
    llama_cache_free(c);
    return z;
}

static void diff(const float *a, const float *b, double *max, double *rms) {
    double s = 0;
    *max = 0;
    for (int i = 0; i < N_IDS * VOCAB; i++) {
        double d = fabs((double)a[i] - b[i]);
        *max = fmax(*max, d);
        s += d * d;
    }
    *rms = sqrt(s / (N_IDS * VOCAB));
}

typedef struct ref_file {
    const char *name; /* <arch>-s1-<TYPE> */
    double max, rms;  /* tolerances */
} ref_file;

/* Every reference file kiln reads. The quantized files of the other types
 * (Q4_0 with its Q6_K output, Q4_K_M, Q5_K_M, Q6_K, IQ4_NL) join this table
 * with ggml's K-quant and IQ types. */
static const ref_file REFS[] = {
    {"llama-s1-F32", 1e-4, 1e-4}, {"llama-s1-Q8_0", 0.03, 0.008}, {"qwen2-s1-F32", 1e-4, 1e-4},
    {"qwen2-s1-Q8_0", 0.03, 0.008}, {"phi3-s1-F32", 1e-4, 1e-4},  {"phi3-s1-Q8_0", 0.03, 0.008},
};

/* The file's model, as stored, and its logits against llama.cpp's: the
 * max and rms |diff| through max / rms. */
static bool run_ref(const char *name, double *max, double *rms, void (*spoil)(llama *)) {
    char path[256], lpath[256];
    snprintf(path, sizeof path, REF_DIR "%s.gguf", name);
    snprintf(lpath, sizeof lpath, REF_DIR "%s.logits.bin", name);
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_infer_from_gguf(ctx, path, LLAMA_AS_STORED);
    KT_CHECK(m != NULL, "%s: %s", name, kiln_last_error());
    if (m && spoil) spoil(m);
    float *want = read_logits(lpath), *got = m ? kiln_logits(m) : NULL;
    KT_CHECK(want != NULL, "%s: cannot read %s", name, lpath);
    KT_CHECK(!m || got, "%s: %s", name, kiln_last_error());
    bool ok = want && got;
    if (ok) diff(got, want, max, rms);
    free(want);
    free(got);
    llama_free(m);
    kiln_ctx_free(ctx);
    return ok;
}

KT_TEST(llama_ref_logits_match_llama_cpp) {
    for (size_t i = 0; i < sizeof REFS / sizeof *REFS; i++) {
        double max, rms;
        if (!run_ref(REFS[i].name, &max, &rms, NULL)) continue;
        KT_CHECK(max <= REFS[i].max && rms <= REFS[i].rms, "%s: max |diff| %.3g (<= %g), rms %.3g (<= %g)",
                 REFS[i].name, max, REFS[i].max, rms, REFS[i].rms);
    }
}

/* The tolerances catch what an architecture gets wrong: each file with one
 * trait undone fails the F32 bound (the README: the other rope mode moves
 * llama's logits by 0.081, qwen2's by 0.038). */
static void flip_rope(llama *m) { m->cfg.traits.neox = !m->cfg.traits.neox; }
static void drop_biases(llama *m) {
    for (int l = 0; l < m->cfg.layers; l++) kiln_tensor_fill(m->layers[l].bqkv, 0.0);
}
static void swap_gate_up(llama *m) { /* Phi-3's ffn_up halves the wrong way round */
    for (int l = 0; l < m->cfg.layers; l++) {
        llama_layer *y = &m->layers[l];
        size_t half = kiln_tensor_nbytes(y->w13) / 2;
        char *p = kiln_tensor_data(y->w13), *t = malloc(half);
        memcpy(t, p, half), memmove(p, p + half, half), memcpy(p + half, t, half);
        free(t);
    }
}

KT_TEST(llama_ref_wrong_traits_fail) {
    const struct { const char *name; void (*spoil)(llama *); double at_least; } cases[] = {
        {"llama-s1-F32", flip_rope, 0.01},
        {"qwen2-s1-F32", flip_rope, 0.01},
        {"qwen2-s1-F32", drop_biases, 0.01},
        {"phi3-s1-F32", swap_gate_up, 0.01},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double max, rms;
        if (!run_ref(cases[i].name, &max, &rms, cases[i].spoil)) continue;
        KT_CHECK(max >= cases[i].at_least, "%s, case %zu: spoiled, still within %.3g of llama.cpp", cases[i].name, i,
                 max);
    }
}

/* The training model (f32 parameters, no stacked weights) of the F32
 * files: llama_from_gguf's, the same logits through llama_forward. */
KT_TEST(llama_ref_training_model_matches_llama_cpp) {
    static const char *const names[] = {"llama-s1-F32", "qwen2-s1-F32", "phi3-s1-F32"};
    int32_t ids[N_IDS];
    ref_ids(ids);
    for (int i = 0; i < 3; i++) {
        char path[256], lpath[256];
        snprintf(path, sizeof path, REF_DIR "%s.gguf", names[i]);
        snprintf(lpath, sizeof lpath, REF_DIR "%s.logits.bin", names[i]);
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = llama_from_gguf(ctx, path);
        KT_CHECK(m != NULL, "%s: %s", names[i], kiln_last_error());
        float *want = read_logits(lpath), *got = m ? llama_test_logits(m, ids, N_IDS) : NULL;
        if (want && got) {
            double max, rms;
            diff(got, want, &max, &rms);
            KT_CHECK(max <= 1e-4, "%s: max |diff| %.3g", names[i], max);
        } else {
            KT_CHECK(false, "%s: %s", names[i], kiln_last_error());
        }
        free(want), free(got);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
}

/* The rope of rope_freqs (element-wise, its cos and sin computed on the
 * host) with every factor 1 is kiln_rope's: llama's adjacent pairs and
 * qwen2's NEOX halves still match llama.cpp. */
static void ones_rope_freqs(llama *m) {
    m->rope_freqs = kiln_tensor_new(m->ctx, KILN_F32, 1, (int64_t[]){m->cfg.head_dim / 2});
    if (m->rope_freqs) kiln_tensor_fill(m->rope_freqs, 1.0);
    m->cfg.rope_freqs = true;
}

KT_TEST(llama_ref_rope_freqs_of_ones_match) {
    static const char *const names[] = {"llama-s1-F32", "qwen2-s1-F32"};
    for (int i = 0; i < 2; i++) {
        double max, rms;
        if (!run_ref(names[i], &max, &rms, ones_rope_freqs)) continue;
        KT_CHECK(max <= 1e-4, "%s: max |diff| %.3g", names[i], max);
    }
}
