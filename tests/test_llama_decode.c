/* test_llama_decode.c — decoding through rows graphs made once (llama.h's
 * llama_rows_graph): batch-1 decoding (the cache's decode graph), the
 * same for Llama 3.1's rope frequency factors and for Gemma 2 (soft-capped
 * scores and logits), batched decoding of 3 slots (llama_slots) of a llama
 * and of a Gemma 2, slots steps mixing a prompt chunk with decoding slots,
 * and a batch-1 prompt in chunks. A tiny GQA llama (3 layers, a
 * sliding window on two) greedily generating after a prompt gives, on
 * each device, the CPU's tokens and logits (the cross-backend table's
 * tolerance), the same bits with replay as node by node
 * ($KILN_GRAPH_REPLAY=0), one recording of the graph under test and a
 * replay for every compute after its second (the first runs node by node,
 * the second records), and no node on the CPU. */
#include "kt_device.h"
#include "backend_ops_util.h"
#include "llama_slots.h"
#include "test_llama_util.h"

#include <stdlib.h>
#include <string.h>

enum { PROMPT = 3, GEN = 6, VOCAB = 48, SLOTS = 3 };

typedef enum run_kind { RUN_DECODE, RUN_ROPE_FREQS, RUN_SLOTS, RUN_MIXED, RUN_CHUNKED, RUN_GEMMA2, RUN_GEMMA2_SLOTS } run_kind;

static llama_config tiny_gqa(run_kind kind) {
    llama_config c = llama_defaults();
    c.vocab = VOCAB, c.context = 16, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.dim = 64, c.hidden = 128;
    c.rope_theta = 500.0;
    c.traits.swa_every = 2, c.sliding_window = 4; /* layers 0 and 2 see the last 4 positions */
    c.rope_freqs = kind == RUN_ROPE_FREQS;
    if (kind == RUN_GEMMA2 || kind == RUN_GEMMA2_SLOTS) { /* caps low enough to bend these weights' scores */
        c.traits.neox = c.traits.post_norms = c.traits.embed_scale = true, c.traits.act = LLAMA_ACT_GELU_TANH;
        c.attn_softcap = 0.5, c.final_softcap = 3;
    }
    return c;
}

static int32_t argmax(const float *z) {
    int32_t b = 0;
    for (int32_t i = 1; i < VOCAB; i++)
        if (z[i] > z[b]) b = i;
    return b;
}

/* The steps' logits [rows, VOCAB] and generated tokens [GEN * SLOTS],
 * and the stats of the graph under test, which computes want times. */
typedef struct run {
    float logits[GEN * SLOTS * VOCAB];
    int32_t toks[GEN * SLOTS];
    int rows, want;
    kiln_graph_stats st;
} run;

/* Batch-1: the prompt, then GEN greedy tokens one at a time. */
static void run_decode(llama *m, run *r) {
    llama_cache *cache = llama_cache_new(m, 1, m->cfg.context);
    KT_NOTNULL(cache);
    float z[VOCAB];
    KT_OK(llama_cache_step(m, cache, (const int32_t[]){1, 17, 5}, PROMPT, z));
    int32_t next = argmax(z);
    for (int t = 0; t < GEN; t++) {
        r->toks[t] = next;
        KT_OK(llama_cache_step(m, cache, &next, 1, r->logits + t * VOCAB));
        next = argmax(r->logits + t * VOCAB);
    }
    KT_CHECK(cache->pos == PROMPT + GEN && cache->decode.g, "pos %lld, decode graph %p", (long long)cache->pos,
             (void *)cache->decode.g);
    r->st = cache->decode.g ? kiln_graph_get_stats(cache->decode.g) : (kiln_graph_stats){0};
    r->rows = r->want = GEN;
    llama_cache_free(cache);
}

/* Batch-1: a prompt of 10 tokens in chunks of 2 (on a device: 4 through
 * the cache's prompt graph wanting no logits, the last through the one
 * wanting its last row's), then GEN greedy tokens. */
static void run_chunked(llama *m, run *r) {
    enum { N = 10 };
    llama_cache *cache = llama_cache_new(m, 1, m->cfg.context);
    KT_NOTNULL(cache);
    cache->chunk = 2;
    const int32_t prompt[N] = {1, 17, 5, 9, 30, 3, 4, 40, 2, 11};
    KT_OK(llama_cache_step(m, cache, prompt, N, r->logits));
    int32_t next = argmax(r->logits);
    for (int t = 0; t < GEN; t++) {
        float *z = r->logits + (t + 1) * VOCAB;
        r->toks[t] = next;
        KT_OK(llama_cache_step(m, cache, &next, 1, z));
        next = argmax(z);
    }
    KT_CHECK(cache->pos == N + GEN, "pos %lld", (long long)cache->pos);
    r->st = cache->prompt[0].g ? kiln_graph_get_stats(cache->prompt[0].g) : (kiln_graph_stats){0};
    r->rows = GEN + 1, r->want = N / 2 - 1;
    llama_cache_free(cache);
}

/* SLOTS sequences: prompts of 3, 2 and 4 tokens in two steps (the last
 * position's logits each: a graph of its own per step), then GEN steps of
 * a token per slot, every one wanting logits (the slots' rows graph for
 * 3, stored at the first). */
static void run_slots(llama *m, run *r) {
    llama_slots *s = llama_slots_new(m, SLOTS, m->cfg.context);
    KT_NOTNULL(s);
    float z[SLOTS * VOCAB];
    int32_t next[SLOTS];
    KT_OK(llama_slots_step(s, 5, (const int[]){0, 0, 0, 1, 1}, (const int32_t[]){1, 17, 5, 9, 30},
                           (const bool[]){false, false, true, false, true}, z));
    next[0] = argmax(z), next[1] = argmax(z + VOCAB);
    KT_OK(llama_slots_step(s, 4, (const int[]){2, 2, 2, 2}, (const int32_t[]){3, 4, 40, 2},
                           (const bool[]){false, false, false, true}, z));
    next[2] = argmax(z);
    for (int t = 0; t < GEN; t++) {
        float *zt = r->logits + t * SLOTS * VOCAB;
        memcpy(r->toks + t * SLOTS, next, sizeof next);
        KT_OK(llama_slots_step(s, SLOTS, (const int[]){0, 1, 2}, next, (const bool[]){true, true, true}, zt));
        for (int i = 0; i < SLOTS; i++) next[i] = argmax(zt + i * VOCAB);
    }
    const llama_rows_graph *g = llama_slots_graph(s, SLOTS, SLOTS);
    KT_CHECK(g && g->g && llama_slots_pos(s, 2) == 4 + GEN, "rows graph %p, slot 2 at %lld", g ? (void *)g->g : NULL,
             (long long)llama_slots_pos(s, 2));
    r->st = g && g->g ? kiln_graph_get_stats(g->g) : (kiln_graph_stats){0};
    r->rows = GEN * SLOTS, r->want = GEN;
    llama_slots_free(s);
}

/* Slots 0 and 1 decode while slot 2's prompt goes in 2 tokens a step, as
 * serve mixes them: GEN steps of 4 entries of which 2 want logits, the
 * chunk first on even steps and last on odd ones (the same graph gathers
 * other rows). On a device the first step makes a graph of its own, the
 * second stores the graph for (4, 2), which then computes GEN - 1 times. */
static void run_mixed(llama *m, run *r) {
    llama_slots *s = llama_slots_new(m, SLOTS, m->cfg.context);
    KT_NOTNULL(s);
    float z[2 * VOCAB];
    int32_t next[2];
    KT_OK(llama_slots_step(s, 5, (const int[]){0, 0, 0, 1, 1}, (const int32_t[]){1, 17, 5, 9, 30},
                           (const bool[]){false, false, true, false, true}, z));
    next[0] = argmax(z), next[1] = argmax(z + VOCAB);
    for (int t = 0; t < GEN; t++) {
        float *zt = r->logits + t * 2 * VOCAB;
        const int32_t c0 = 3 + 2 * t, c1 = 20 + t;
        memcpy(r->toks + t * 2, next, sizeof next);
        if (t % 2 == 0)
            KT_OK(llama_slots_step(s, 4, (const int[]){2, 2, 0, 1}, (const int32_t[]){c0, c1, next[0], next[1]},
                                   (const bool[]){false, false, true, true}, zt));
        else
            KT_OK(llama_slots_step(s, 4, (const int[]){0, 2, 1, 2}, (const int32_t[]){next[0], c0, next[1], c1},
                                   (const bool[]){true, false, true, false}, zt));
        for (int i = 0; i < 2; i++) next[i] = argmax(zt + i * VOCAB);
    }
    const llama_rows_graph *g = llama_slots_graph(s, 4, 2);
    KT_CHECK(llama_slots_pos(s, 2) == 2 * GEN, "slot 2 at %lld", (long long)llama_slots_pos(s, 2));
    r->st = g && g->g ? kiln_graph_get_stats(g->g) : (kiln_graph_stats){0};
    r->rows = 2 * GEN, r->want = GEN - 1;
    llama_slots_free(s);
}

/* One run of kind on backend be (NULL: the CPU). */
static void generate(kiln_backend *be, run_kind kind, bool replay, run *r) {
    if (replay) unsetenv("KILN_GRAPH_REPLAY");
    else setenv("KILN_GRAPH_REPLAY", "0", 1);
    memset(r, 0, sizeof *r);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    llama_config c = tiny_gqa(kind);
    llama *m = llama_new(ctx, &c, 5);
    KT_NOTNULL(m);
    llama_test_randomize(m, 30, 0.3);
    if (kind == RUN_ROPE_FREQS) { /* factors that change the angles: 1, 2, 4, ... as Llama 3.1's grow */
        float f[8];
        for (int i = 0; i < 8; i++) f[i] = (float)(1 << (i % 4));
        KT_OK(kiln_tensor_set_f32(m->rope_freqs, f, 8));
    }
    if (kind == RUN_SLOTS || kind == RUN_GEMMA2_SLOTS) run_slots(m, r);
    else if (kind == RUN_MIXED) run_mixed(m, r);
    else if (kind == RUN_CHUNKED) run_chunked(m, r);
    else run_decode(m, r);
    llama_free(m);
    kiln_ctx_free(ctx);
    unsetenv("KILN_GRAPH_REPLAY");
}

static void check_device(const char *name, run_kind kind) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    static run cpu, on, off;
    generate(NULL, kind, true, &cpu);
    generate(be, kind, true, &on);
    generate(be, kind, false, &off);
    KT_CHECK(!memcmp(cpu.toks, on.toks, sizeof cpu.toks), "%s generated other tokens than the CPU", name);
    for (int t = 0; t < on.rows; t++) {
        double cv[VOCAB], dv[VOCAB];
        for (int i = 0; i < VOCAB; i++) cv[i] = cpu.logits[t * VOCAB + i], dv[i] = on.logits[t * VOCAB + i];
        double e = bo_error_values(dv, cv, VOCAB);
        KT_CHECK(e <= BO_TRANS, "row %d: %s's logits differ from the CPU's by %g", t, name, e);
    }
    KT_CHECK(!memcmp(on.logits, off.logits, sizeof on.logits), "%s: replayed logits differ from node by node", name);
    KT_CHECK(on.st.computes == on.want && on.st.recordings == 1 && on.st.replays == on.want - 2 &&
                 on.st.nodes_fallback == 0,
             "%s: %lld computes (want %d), %lld recordings, %lld replays, %lld nodes on the cpu", name,
             (long long)on.st.computes, on.want, (long long)on.st.recordings, (long long)on.st.replays,
             (long long)on.st.nodes_fallback);
    KT_CHECK(off.st.recordings == 0 && off.st.nodes_fallback == 0, "%s, KILN_GRAPH_REPLAY=0: %lld recordings", name,
             (long long)off.st.recordings);
    printf("  %s: a step is %lld kernels node by node, one recording's launch replayed\n", name,
            (long long)(off.st.nodes_on_backend / (off.st.computes ? off.st.computes : 1)));
}

KT_TEST(llama_decode_graph_cuda) { check_device("cuda", RUN_DECODE); }
KT_TEST(llama_decode_graph_vulkan) { check_device("vulkan", RUN_DECODE); }
KT_TEST(llama_decode_graph_rope_freqs_cuda) { check_device("cuda", RUN_ROPE_FREQS); }
KT_TEST(llama_decode_graph_rope_freqs_vulkan) { check_device("vulkan", RUN_ROPE_FREQS); }
KT_TEST(llama_decode_graph_slots_cuda) { check_device("cuda", RUN_SLOTS); }
KT_TEST(llama_decode_graph_slots_vulkan) { check_device("vulkan", RUN_SLOTS); }
KT_TEST(llama_decode_graph_slots_mixed_cuda) { check_device("cuda", RUN_MIXED); }
KT_TEST(llama_decode_graph_slots_mixed_vulkan) { check_device("vulkan", RUN_MIXED); }
KT_TEST(llama_decode_graph_prompt_chunks_cuda) { check_device("cuda", RUN_CHUNKED); }
KT_TEST(llama_decode_graph_prompt_chunks_vulkan) { check_device("vulkan", RUN_CHUNKED); }
KT_TEST(llama_decode_graph_gemma2_cuda) { check_device("cuda", RUN_GEMMA2); }
KT_TEST(llama_decode_graph_gemma2_vulkan) { check_device("vulkan", RUN_GEMMA2); }
KT_TEST(llama_decode_graph_gemma2_slots_cuda) { check_device("cuda", RUN_GEMMA2_SLOTS); }
KT_TEST(llama_decode_graph_gemma2_slots_vulkan) { check_device("vulkan", RUN_GEMMA2_SLOTS); }
