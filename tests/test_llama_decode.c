/* test_llama_decode.c — batch-1 decoding through the cache's decode graph
 * (llama.h, llama_cache.decode): a tiny GQA llama (3 layers, a sliding
 * window on one) greedily generating after a prompt gives, on each device,
 * the CPU's tokens and logits (the cross-backend table's tolerance), the
 * same bits with replay as node by node ($KILN_GRAPH_REPLAY=0), one
 * recording and a replay for every token after the second (the first runs
 * node by node, the second records), and no node on the CPU. */
#include "kt_device.h"
#include "backend_ops_util.h"
#include "test_llama_util.h"

#include <stdlib.h>
#include <string.h>

enum { PROMPT = 3, GEN = 6, VOCAB = 48 };

static llama_config tiny_gqa(void) {
    llama_config c = llama_defaults();
    c.vocab = VOCAB, c.context = 16, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.dim = 64, c.hidden = 128;
    c.rope_theta = 500.0;
    c.traits.swa_every = 2, c.sliding_window = 4; /* layers 0 and 2 see the last 4 positions */
    return c;
}

static int32_t argmax(const float *z) {
    int32_t b = 0;
    for (int32_t i = 1; i < VOCAB; i++)
        if (z[i] > z[b]) b = i;
    return b;
}

/* The prompt, then GEN greedy tokens one at a time on backend be (NULL:
 * the CPU): each decoding step's logits, its token, the decode graph's stats. */
static void generate(kiln_backend *be, bool replay, float *logits, int32_t *toks, kiln_graph_stats *st) {
    if (replay) unsetenv("KILN_GRAPH_REPLAY");
    else setenv("KILN_GRAPH_REPLAY", "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    llama_config c = tiny_gqa();
    llama *m = llama_new(ctx, &c, 5);
    KT_NOTNULL(m);
    llama_test_randomize(m, 30, 0.3);
    llama_cache *cache = llama_cache_new(m, 1, c.context);
    KT_NOTNULL(cache);
    float z[VOCAB];
    KT_OK(llama_cache_step(m, cache, (const int32_t[]){1, 17, 5}, PROMPT, z));
    int32_t next = argmax(z);
    for (int t = 0; t < GEN; t++) {
        toks[t] = next;
        KT_OK(llama_cache_step(m, cache, &next, 1, logits + t * VOCAB));
        next = argmax(logits + t * VOCAB);
    }
    KT_CHECK(cache->pos == PROMPT + GEN && cache->decode.g, "pos %lld, decode graph %p", (long long)cache->pos,
             (void *)cache->decode.g);
    *st = cache->decode.g ? kiln_graph_get_stats(cache->decode.g) : (kiln_graph_stats){0};
    llama_cache_free(cache);
    llama_free(m);
    kiln_ctx_free(ctx);
    unsetenv("KILN_GRAPH_REPLAY");
}

static void check_device(const char *name) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    float cpu[GEN * VOCAB], on[GEN * VOCAB], off[GEN * VOCAB];
    int32_t tc[GEN], t_on[GEN], t_off[GEN];
    kiln_graph_stats sc, s_on, s_off;
    generate(NULL, true, cpu, tc, &sc);
    generate(be, true, on, t_on, &s_on);
    generate(be, false, off, t_off, &s_off);
    KT_CHECK(!memcmp(tc, t_on, sizeof tc), "%s generated other tokens than the CPU", name);
    for (int t = 0; t < GEN; t++) {
        double cv[VOCAB], dv[VOCAB];
        for (int i = 0; i < VOCAB; i++) cv[i] = cpu[t * VOCAB + i], dv[i] = on[t * VOCAB + i];
        double e = bo_error_values(dv, cv, VOCAB);
        KT_CHECK(e <= BO_TRANS, "token %d: %s's logits differ from the CPU's by %g", t, name, e);
    }
    KT_CHECK(!memcmp(on, off, sizeof on), "%s: replayed logits differ from node by node", name);
    KT_CHECK(s_on.computes == GEN && s_on.recordings == 1 && s_on.replays == GEN - 2 && s_on.nodes_fallback == 0,
             "%s: %lld computes, %lld recordings, %lld replays, %lld nodes on the cpu", name,
             (long long)s_on.computes, (long long)s_on.recordings, (long long)s_on.replays,
             (long long)s_on.nodes_fallback);
    KT_CHECK(s_off.recordings == 0 && s_off.nodes_fallback == 0, "%s, KILN_GRAPH_REPLAY=0: %lld recordings", name,
             (long long)s_off.recordings);
    printf("  %s: a token is %lld kernels node by node, one recording's launch replayed\n", name,
            (long long)(s_off.nodes_on_backend / GEN));
}

KT_TEST(llama_decode_graph_cuda) { check_device("cuda"); }
KT_TEST(llama_decode_graph_vulkan) { check_device("vulkan"); }
