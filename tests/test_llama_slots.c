/* test_llama_slots.c — batched decoding (models/llama_slots.h) on the
 * tiny reference models of tests/fixtures/gguf-ref (2 layers, width 256,
 * vocab 512): sequences of different lengths run together, their prompts
 * fed in chunks while others decode, give each position the logits that
 * sequence alone gets through llama_cache_step, one token at a time: F32
 * files to max |diff| 1e-5 (the batch's rows go through other matrix
 * kernels than one row's; measured ~1e-6), quantized ones as the bounds
 * before llama_slots_interleaved_match_each_alone say. */
#include "kt.h"
#include "kt_device.h"
#include "llama_files.h"
#include "llama_slots.h"
#include "test_llama_util.h"

#include <stdint.h>

#define REF_DIR "tests/fixtures/gguf-ref/"
#define VOCAB 512
#define N_SEQ 4
#define MAX_LEN 24

/* sequence q's token t: a different walk over the vocabulary for each */
static int32_t token(int q, int t) { return t == 0 ? 1 : (int32_t)((t * (37 + 8 * q) + 11 * q) % 509 + 3); }

static const int LEN[N_SEQ] = {9, 24, 5, 17};    /* tokens of each sequence */
static const int PROMPT[N_SEQ] = {6, 13, 3, 12}; /* of them, its prompt */
static const int START[N_SEQ] = {0, 1, 1, 3};    /* the step it joins at */

/* Sequence q's logits at every position, [len, VOCAB], one token at a
 * time through llama_cache_step; malloc'd, NULL on failure. */
static float *alone(llama *m, int q, int len) {
    llama_cache *c = llama_cache_new(m, 1, len);
    float *z = malloc((size_t)len * VOCAB * sizeof *z);
    bool ok = c && z;
    for (int t = 0; t < len && ok; t++) {
        int32_t id = token(q, t);
        ok = !llama_cache_step(m, c, &id, 1, z + (size_t)t * VOCAB);
    }
    llama_cache_free(c);
    if (!ok) free(z);
    return ok ? z : NULL;
}

/* max |a - b| over a row of logits */
static double row_diff(const float *a, const float *b) { return llama_test_max_diff(a, b, VOCAB); }

static llama *load(kiln_ctx *ctx, const char *name) {
    char path[256];
    snprintf(path, sizeof path, REF_DIR "%s.gguf", name);
    llama *m = llama_infer_from_gguf(ctx, path, LLAMA_AS_STORED);
    KT_CHECK(m != NULL, "%s: %s", name, kiln_last_error());
    return m;
}

/* Run the sequences together: each joins at its START step, feeds its
 * prompt in chunks of `chunk` tokens, then one token a step; logits are
 * asked for by a pattern (every entry of some steps, none of others, the
 * last of a chunk and some inside it) and each compared with ref. The
 * largest difference, or -1 on failure. */
static double together(llama *m, float *const *ref, int chunk) {
    llama_slots *s = llama_slots_new(m, N_SEQ, MAX_LEN);
    KT_CHECK(s != NULL, "llama_slots_new: %s", kiln_last_error());
    if (!s) return -1;
    int slots[N_SEQ * MAX_LEN], step = 0, fed[N_SEQ] = {0};
    int32_t tokens[N_SEQ * MAX_LEN];
    bool want[N_SEQ * MAX_LEN];
    float *z = malloc((size_t)N_SEQ * MAX_LEN * VOCAB * sizeof *z);
    double worst = 0;
    for (bool left = true; left && worst >= 0; step++) {
        int n = 0, at[N_SEQ * MAX_LEN], of[N_SEQ * MAX_LEN];
        left = false;
        for (int q = 0; q < N_SEQ; q++) {
            if (step < START[q] || fed[q] == LEN[q]) {
                left |= fed[q] < LEN[q];
                continue;
            }
            int take = fed[q] < PROMPT[q] ? (PROMPT[q] - fed[q] < chunk ? PROMPT[q] - fed[q] : chunk) : 1;
            for (int i = 0; i < take; i++, n++) {
                slots[n] = q, tokens[n] = token(q, fed[q] + i), at[n] = fed[q] + i, of[n] = q;
                want[n] = step % 3 == 1 || i == take - 1 || (step + i) % 4 == 0;
            }
            fed[q] += take;
            left = true;
        }
        if (step % 5 == 4) /* a step asks for nothing */
            for (int i = 0; i < n; i++) want[i] = false;
        if (llama_slots_step(s, n, slots, tokens, want, z)) {
            KT_CHECK(false, "step %d: %s", step, kiln_last_error());
            worst = -1;
            break;
        }
        for (int i = 0, r = 0; i < n; i++) {
            if (!want[i]) continue;
            double d = row_diff(z + (size_t)r++ * VOCAB, ref[of[i]] + (size_t)at[i] * VOCAB);
            worst = d > worst ? d : worst;
        }
    }
    for (int q = 0; q < N_SEQ && worst >= 0; q++)
        KT_CHECK(llama_slots_pos(s, q) == LEN[q], "slot %d holds %lld positions, not %d", q,
                 (long long)llama_slots_pos(s, q), LEN[q]);
    free(z);
    llama_slots_free(s);
    return worst;
}

/* Llama 3.1's rope (its cos and sin computed on the host for each row's
 * position) with frequency factors 1 .. 2 */
static void with_rope_freqs(llama *m) {
    const int64_t half = m->cfg.head_dim / 2;
    float f[256];
    for (int64_t i = 0; i < half; i++) f[i] = 1.0f + (float)i / (float)half;
    m->rope_freqs = kiln_tensor_new(m->ctx, KILN_F32, 1, &half);
    if (m->rope_freqs) kiln_tensor_set_f32(m->rope_freqs, f, half);
    m->cfg.rope_freqs = true;
}

/* Prompt chunks of 1 make steps of at most 4 rows, chunks of 4 steps of
 * up to 13, chunks of 16 whole prompts (runs of 8 or more take the
 * attention's blocked path): a quantized product of 8 rows or more takes the batched path
 * (f32 panels or an int8 GEMM, not the one-row integer dot products), which
 * moves logits by about 0.02, as test_llama_ref's prompts (measured: Q4_0
 * 0.012, Q4_K_M 0.024; fewer rows: bit for bit; F32 ~1e-6 either way). */
KT_TEST(llama_slots_interleaved_match_each_alone) {
    static const struct { const char *name; double few, many; bool freqs; } files[] = {
        {"llama-s1-F32", 1e-5, 1e-5, false}, {"llama-s1-Q4_0", 1e-6, 0.03, false},
        {"llama-s1-Q4_K_M", 1e-6, 0.03, false}, {"qwen2-s1-F32", 1e-5, 1e-5, false},
        {"phi3-s1-F32", 1e-5, 1e-5, false}, {"llama-s1-F32", 1e-5, 1e-5, true},
    };
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = load(ctx, files[f].name);
        if (m && files[f].freqs) with_rope_freqs(m);
        float *ref[N_SEQ] = {0};
        for (int q = 0; m && q < N_SEQ; q++)
            KT_CHECK((ref[q] = alone(m, q, LEN[q])) != NULL, "%s: alone: %s", files[f].name, kiln_last_error());
        for (int chunk = 1; m && ref[N_SEQ - 1] && chunk <= 16; chunk *= 4) {
            double d = together(m, ref, chunk);
            double tol = chunk == 1 ? files[f].few : files[f].many;
            KT_CHECK(d >= 0 && d <= tol, "%s%s, prompt chunks of %d: max |diff| %.3g (<= %g)", files[f].name,
                     files[f].freqs ? " with rope_freqs" : "", chunk, d, tol);
        }
        for (int q = 0; q < N_SEQ; q++) free(ref[q]);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
}

/* Feed sequence q's first len tokens into slot, one at a time (the other
 * slot idle), comparing each position's logits with ref. */
static void feed(llama_slots *s, int slot, int q, int len, const float *ref) {
    float z[VOCAB];
    for (int t = 0; t < len; t++) {
        int32_t id = token(q, t);
        KT_OK(llama_slots_step(s, 1, &slot, &id, (bool[]){true}, z));
        double d = row_diff(z, ref + (size_t)t * VOCAB);
        KT_CHECK(d <= 1e-5, "slot %d, sequence %d, position %d: max |diff| %.3g", slot, q, t, d);
    }
}

KT_TEST(llama_slots_clear_reuses_a_slot) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = load(ctx, "llama-s1-F32");
    float *a = m ? alone(m, 0, 9) : NULL, *b = m ? alone(m, 2, 5) : NULL;
    llama_slots *s = a && b ? llama_slots_new(m, 2, 12) : NULL;
    KT_CHECK(s != NULL, "%s", kiln_last_error());
    if (s) {
        feed(s, 1, 0, 9, a);
        KT_CHECK(llama_slots_pos(s, 1) == 9 && llama_slots_pos(s, 0) == 0, "positions %lld, %lld",
                 (long long)llama_slots_pos(s, 0), (long long)llama_slots_pos(s, 1));
        KT_OK(llama_slots_clear(s, 1));
        KT_CHECK(llama_slots_pos(s, 1) == 0, "a cleared slot holds %lld positions", (long long)llama_slots_pos(s, 1));
        feed(s, 1, 2, 5, b); /* a new sequence sees none of the old one's 9 positions */
        feed(s, 0, 0, 9, a);
    }
    llama_slots_free(s);
    free(a), free(b);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* A sequence that shares sequence 0's first SHARED tokens, then walks as
 * sequence 1 does. */
#define SHARED 5
static int32_t branch(int t) { return t < SHARED ? token(0, t) : token(1, t); }

/* Keep a prefix of a slot's sequence and go on from it: the logits of a
 * fresh run of the whole branch, one token at a time through
 * llama_cache_step (what the slot held past the prefix is never seen). */
KT_TEST(llama_slots_keep_then_continue_match_a_fresh_run) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = load(ctx, "llama-s1-F32");
    enum { LEN = 11 };
    float *a = m ? alone(m, 0, 9) : NULL, *ref = malloc((size_t)LEN * VOCAB * sizeof *ref);
    llama_cache *c = m ? llama_cache_new(m, 1, LEN) : NULL;
    bool ok = a && ref && c;
    for (int t = 0; t < LEN && ok; t++) ok = !llama_cache_step(m, c, (int32_t[]){branch(t)}, 1, ref + t * VOCAB);
    llama_cache_free(c);
    llama_slots *s = ok ? llama_slots_new(m, 2, 12) : NULL;
    KT_CHECK(s != NULL, "%s", kiln_last_error());
    if (s) {
        feed(s, 0, 0, 9, a);
        KT_OK(llama_slots_keep(s, 0, SHARED));
        KT_CHECK(llama_slots_pos(s, 0) == SHARED, "kept %lld positions", (long long)llama_slots_pos(s, 0));
        /* the rest of the branch as one chunk, every position's logits */
        int slots[LEN - SHARED];
        int32_t ids[LEN - SHARED];
        bool want[LEN - SHARED];
        float z[(LEN - SHARED) * VOCAB];
        for (int t = SHARED; t < LEN; t++) slots[t - SHARED] = 0, ids[t - SHARED] = branch(t), want[t - SHARED] = true;
        KT_OK(llama_slots_step(s, LEN - SHARED, slots, ids, want, z));
        for (int t = SHARED; t < LEN; t++) {
            double d = row_diff(z + (t - SHARED) * VOCAB, ref + t * VOCAB);
            KT_CHECK(d <= 1e-5, "position %d after keeping %d: max |diff| %.3g", t, SHARED, d);
        }
        KT_OK(llama_slots_keep(s, 0, LEN)); /* all it holds: nothing forgotten */
        KT_CHECK(llama_slots_keep(s, 0, LEN + 1) == KILN_ERR_ARG && strstr(kiln_last_error(), "llama_slots_keep") &&
                     strstr(kiln_last_error(), "n = 12") && strstr(kiln_last_error(), "0 .. 11"),
                 "keep past the held positions: %s", kiln_last_error());
        KT_CHECK(llama_slots_keep(s, 2, 0) == KILN_ERR_ARG && strstr(kiln_last_error(), "slot 2"), "slot 2: %s",
                 kiln_last_error());
        KT_CHECK(llama_slots_pos(s, 0) == LEN, "a refused keep moved slot 0 to %lld",
                 (long long)llama_slots_pos(s, 0));
    }
    llama_slots_free(s);
    free(a), free(ref);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* an error whose message contains each of the words */
static void check_error(kiln_status st, const char *what, const char *w1, const char *w2) {
    KT_CHECK(st == KILN_ERR_ARG, "%s: status %s", what, kiln_status_name(st));
    KT_CHECK(strstr(kiln_last_error(), w1) && strstr(kiln_last_error(), w2), "%s: message '%s' names no '%s', '%s'",
             what, kiln_last_error(), w1, w2);
}

KT_TEST(llama_slots_errors_name_the_value_and_change_nothing) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = load(ctx, "llama-s1-F32");
    float *a = m ? alone(m, 0, 9) : NULL;
    llama_slots *s = a ? llama_slots_new(m, 3, 6) : NULL;
    KT_CHECK(s != NULL, "%s", kiln_last_error());
    if (!s) goto done;
    float z[9 * VOCAB];
    int32_t ids[9];
    for (int t = 0; t < 9; t++) ids[t] = token(0, t);
    bool yes[9] = {true, true, true, true, true, true, true, true, true};
    check_error(llama_slots_step(s, 2, (int[]){0, 3}, ids, yes, z), "slot 3 of 3", "entry 1", "slot 3");
    check_error(llama_slots_step(s, 1, (int[]){-1}, ids, yes, z), "slot -1", "entry 0", "slot -1");
    check_error(llama_slots_step(s, 1, (int[]){0}, (int32_t[]){VOCAB}, yes, z), "token 512", "entry 0", "token 512");
    check_error(llama_slots_step(s, 1, (int[]){0}, ids, yes, NULL), "logits NULL", "1 entries", "logits");
    check_error(llama_slots_step(s, 7, (int[]){1, 1, 1, 1, 1, 1, 1}, ids, yes, z), "7 into 6", "slot 1 is full",
                "entry 6");
    check_error(llama_slots_clear(s, 3), "clear slot 3", "slot 3", "0 .. 2");
    KT_CHECK(llama_slots_pos(s, 3) == -1 && llama_slots_pos(NULL, 0) == -1, "pos of no slot");
    for (int q = 0; q < 3; q++)
        KT_CHECK(llama_slots_pos(s, q) == 0, "a refused step moved slot %d to %lld", q,
                 (long long)llama_slots_pos(s, q));
    /* a step of no entries does nothing; then the slot fills to its last position and refuses one more */
    KT_OK(llama_slots_step(s, 0, NULL, NULL, NULL, NULL));
    KT_OK(llama_slots_step(s, 5, (int[]){1, 1, 1, 1, 1}, ids, (bool[]){false, false, false, false, true}, z));
    KT_CHECK(row_diff(z, a + 4 * VOCAB) <= 1e-5, "after refused steps: max |diff| %.3g", row_diff(z, a + 4 * VOCAB));
    KT_OK(llama_slots_step(s, 1, (int[]){1}, ids + 5, yes, z));
    KT_CHECK(row_diff(z, a + 5 * VOCAB) <= 1e-5, "the last position: max |diff| %.3g", row_diff(z, a + 5 * VOCAB));
    check_error(llama_slots_step(s, 2, (int[]){0, 1}, ids + 6, yes, z), "full", "slot 1 is full", "position 6");
    KT_CHECK(llama_slots_pos(s, 0) == 0 && llama_slots_pos(s, 1) == 6, "a refused step moved the slots");
    KT_CHECK(llama_slots_new(m, 0, 6) == NULL && strstr(kiln_last_error(), "n_slots = 0"), "0 slots: %s",
             kiln_last_error());
    KT_CHECK(llama_slots_new(m, 2, 100000) == NULL && strstr(kiln_last_error(), "llama_slots_new") &&
                 strstr(kiln_last_error(), "len = 100000"),
             "len past the context: %s", kiln_last_error());
done:
    llama_slots_free(s);
    free(a);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* On Vulkan the rows' attention runs on the CPU (no device kernel), its
 * cache writes kept right between the host and the device: the same
 * logits as the CPU's, to the device's f32 rounding. */
KT_TEST(llama_slots_on_vulkan_match_the_cpu) {
    kiln_backend *vk = kt_device("vulkan");
    kiln_ctx *cpu = kiln_ctx_new(), *ctx = kiln_ctx_new();
    llama *ref_model = load(cpu, "llama-s1-F32"), *m = load(ctx, "llama-s1-F32");
    float *ref[N_SEQ] = {0};
    for (int q = 0; ref_model && q < N_SEQ; q++) ref[q] = alone(ref_model, q, LEN[q]);
    KT_CHECK(ref[N_SEQ - 1] != NULL, "alone: %s", kiln_last_error());
    if (m && vk && ref[N_SEQ - 1] && !kiln_ctx_set_backend(ctx, vk)) {
        double d = together(m, ref, 4);
        KT_CHECK(d >= 0 && d <= 1e-4, "max |diff| %.3g (<= 1e-4)", d);
    }
    for (int q = 0; q < N_SEQ; q++) free(ref[q]);
    llama_free(ref_model), llama_free(m);
    kiln_ctx_free(cpu), kiln_ctx_free(ctx);
}
