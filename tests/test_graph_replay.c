/* test_graph_replay.c — a device graph computed many times runs as one
 * recording (core/graph_replay.c; CUDA: a captured CUDA graph, on the fake
 * toolkit here; Vulkan: a command buffer, on lavapipe): with inputs changing at every compute its results equal
 * the node-by-node path's ($KILN_GRAPH_REPLAY=0) bit for bit, it records
 * at the second compute and replays after (kiln_graph_stats, and the fake
 * toolkit's own count of graph launches when it is the one loaded); a
 * moved input records anew; a training step (forward, backward, then
 * AdamW with a schedule, 8-bit AdamW or SGD: the step number and lr change
 * at every step as values of the hyper leaf, so the optimizer's graph
 * replays too, and SGD's first-step flag changes its key once; and AdamW
 * after a dropout, whose kernels read the run number from device memory:
 * each step's mask is the CPU's and new) and a decoding
 * step (position, mask and KV cache changing per token) match the plain
 * path over several steps. */
#include "kt_device.h"
#include "backend.h"
#include "../optim/optim_impl.h"

#include <dlfcn.h>

/* Graphs the fake CUDA toolkit launched, or -1 with another runtime. */
static long fake_graph_launches(void) {
    void (*counts)(long *, long *) = (void (*)(long *, long *))dlsym(RTLD_DEFAULT, "emu_graph_counts");
    long launches = -1, ops = 0;
    if (counts) counts(&launches, &ops);
    return launches;
}

static void set_replay(bool on) {
    if (on) unsetenv("KILN_GRAPH_REPLAY");
    else setenv("KILN_GRAPH_REPLAY", "0", 1);
}

/* values in [-1, 1) that differ with seed */
static void fill(kiln_tensor *t, int seed) {
    int64_t n = kiln_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 7919 + seed * 104729) % 2000) / 1000.0f - 1.0f;
    KT_OK(kiln_tensor_set_f32(t, v, n));
    free(v);
}

/* Vulkan's validation layer (on under the test runner) said nothing since before */
static void no_messages(kiln_backend *be, int64_t before) {
    int64_t n = kiln_backend_validation_messages(be) - before;
    KT_CHECK(n == 0, "%lld validation messages", (long long)n);
}

static bool same_bits(const float *a, const float *b, int64_t n) { return !memcmp(a, b, (size_t)n * sizeof *a); }

/* ---- inputs changing at every compute ---- */

enum { COMPUTES = 5, M = 16 };

/* y = layer_norm(relu(a b + c) * a) summed by rows, computed COMPUTES
 * times with a new a each time: every result into out[COMPUTES][M] */
static void run_inputs(kiln_backend *be, bool replay, float *out, kiln_graph_stats *st, long *launches) {
    set_replay(replay);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, M, M), *b = kiln_new_2d(ctx, KILN_F32, M, M),
                *c = kiln_new_1d(ctx, KILN_F32, M);
    fill(b, 1);
    fill(c, 2);
    kiln_tensor *h = kiln_mul(ctx, kiln_relu(ctx, kiln_add(ctx, kiln_matmul(ctx, a, b), c)), a);
    kiln_tensor *y = kiln_sum(ctx, kiln_layer_norm(ctx, h, NULL, NULL, 1e-5), 1, false);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    long before = fake_graph_launches();
    for (int i = 0; i < COMPUTES; i++) {
        fill(a, 10 + i);
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_tensor_get_f32(y, out + i * M, M));
    }
    *launches = before < 0 ? -1 : fake_graph_launches() - before;
    *st = kiln_graph_get_stats(g);
    kiln_ctx_free(ctx);
    unsetenv("KILN_GRAPH_REPLAY");
}

static void check_inputs(const char *name) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    int64_t vmsg = kiln_backend_validation_messages(be);
    float plain[COMPUTES * M], replayed[COMPUTES * M];
    kiln_graph_stats ps, rs;
    long pl, rl;
    run_inputs(be, false, plain, &ps, &pl);
    run_inputs(be, true, replayed, &rs, &rl);
    for (int i = 0; i < COMPUTES; i++)
        KT_CHECK(same_bits(plain + i * M, replayed + i * M, M), "compute %d: replayed %.9g, node by node %.9g", i,
                 replayed[i * M], plain[i * M]);
    KT_CHECK(ps.recordings == 0 && ps.replays == 0, "KILN_GRAPH_REPLAY=0: %lld recordings, %lld replays",
             (long long)ps.recordings, (long long)ps.replays);
    /* the first compute runs node by node, the second records, the rest replay */
    KT_CHECK(rs.recordings == 1 && rs.replays == COMPUTES - 2, "%lld recordings, %lld replays (want 1, %d)",
             (long long)rs.recordings, (long long)rs.replays, COMPUTES - 2);
    KT_CHECK(rs.nodes_on_backend == ps.nodes_on_backend && rs.nodes_fallback == 0, "nodes %lld on %s (plain %lld), %lld on the cpu",
             (long long)rs.nodes_on_backend, name, (long long)ps.nodes_on_backend, (long long)rs.nodes_fallback);
    KT_CHECK(rs.uploads == ps.uploads, "%lld uploads, %lld node by node", (long long)rs.uploads, (long long)ps.uploads);
    if (rl >= 0 && !strcmp(name, "cuda")) /* the fake toolkit: a graph launch per compute from the second on */
        KT_CHECK(rl == COMPUTES - 1 && pl == 0, "the fake toolkit launched %ld graphs (want %d), %ld node by node", rl,
                 COMPUTES - 1, pl);
    no_messages(be, vmsg);
}

KT_TEST(graph_replay_inputs_cuda) { check_inputs("cuda"); }

/* ---- an input moved to other device memory (a recording that kept the
 * old buffer would read zeros, or on Vulkan a destroyed VkBuffer) ---- */

static void check_moved(const char *name) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    int64_t vmsg = kiln_backend_validation_messages(be);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, M, M), *b = kiln_new_2d(ctx, KILN_F32, M, M);
    fill(a, 3);
    fill(b, 4);
    kiln_tensor *y = kiln_sum(ctx, kiln_relu(ctx, kiln_matmul(ctx, a, b)), 1, false);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    float want[M], got[M];
    for (int i = 0; i < 3; i++) KT_OK(kiln_graph_compute(g)); /* plain, recorded, replayed */
    KT_OK(kiln_tensor_get_f32(y, want, M));
    /* a's device copy freed and made again elsewhere (the old block held,
     * zeroed, so a replay reading it would see zeros) */
    kiln_devbuf *old = a->dev;
    size_t bytes = kiln_tensor_nbytes(a);
    kiln_devbuf *hold = kiln__devbuf_new(ctx, be, bytes);
    KT_NOTNULL(hold);
    kiln__devbuf_free(ctx, old);
    a->dev = NULL;
    a->where = KILN_AT_HOST;
    kiln_devbuf *taken = kiln__devbuf_new(ctx, be, bytes); /* takes old's block from the cache */
    KT_NOTNULL(taken);
    KT_OK(be->vt->zero(be, taken, 0, bytes));
    for (int i = 0; i < 3; i++) {
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_tensor_get_f32(y, got, M));
        KT_CHECK(same_bits(want, got, M), "compute %d after a moved: %.9g, want %.9g", i, got[0], want[0]);
    }
    kiln_graph_stats st = kiln_graph_get_stats(g);
    KT_CHECK(a->dev != old || hold == old, "a's device copy did not move");
    KT_CHECK(st.recordings == 2 && st.replays == 2, "%lld recordings, %lld replays (want 2, 2)", (long long)st.recordings,
             (long long)st.replays);
    kiln_ctx_free(ctx);
    no_messages(be, vmsg);
}

KT_TEST(graph_replay_moved_cuda) { check_moved("cuda"); }

/* ---- a training step ---- */

/* W1 of 4096 elements: 8-bit AdamW keeps 8-bit moments for it (and 32-bit ones for B1, W2) */
enum { STEPS = 6, NB = 8, IN = 64, HID = 64, OUT = 4 };
typedef enum {
    TRAIN_ADAMW, TRAIN_ADAMW8, TRAIN_SGD, TRAIN_DROPOUT, TRAIN_CLIP, TRAIN_GALORE, TRAIN_APOLLO, TRAIN_GALORE_REFRESH
} train_opt;
static const char *const train_opt_name[] = {"AdamW", "8-bit AdamW", "SGD", "AdamW after dropout",
                                              "AdamW with gradient clipping", "GaLore", "APOLLO",
                                              "GaLore refreshing every 2 steps"};

/* per step: the loss and the dropout's mask (TRAIN_DROPOUT) and, after the last, W1 and W2 */
static void run_train(kiln_backend *be, train_opt which, bool replay, float *loss, bool (*mask)[NB * HID], float *w1,
                      float *w2, kiln_graph_stats *st, kiln_graph_stats *ost, kiln_graph_stats *cst) {
    set_replay(replay);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, NB, IN), *labels = kiln_new_1d(ctx, KILN_I32, NB);
    kiln_tensor *W1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){HID, IN}),
                *B1 = kiln_param(ctx, "b1", KILN_F32, 1, (int64_t[]){HID}),
                *W2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){OUT, HID});
    fill(W1, 5);
    fill(B1, 6);
    fill(W2, 7);
    kiln_tensor *h = kiln_gelu(ctx, kiln_linear(ctx, x, W1, B1));
    if (which == TRAIN_DROPOUT) h = kiln_dropout(ctx, h, 0.25, 11);
    kiln_tensor *l = kiln_cross_entropy(ctx, kiln_linear(ctx, h, W2, NULL), labels, -100);
    kiln_graph *g = kiln_graph_new(ctx);
    if (which == TRAIN_DROPOUT) KT_OK(kiln_graph_add(g, h)); /* an output: its mask is read at every step */
    KT_OK(kiln_graph_add(g, l));
    KT_OK(kiln_graph_backward(g, l));
    kiln_adam_config cfg = kiln_adamw_defaults();
    cfg.lr = 0.05f;
    kiln_galore_config gc = kiln_galore_defaults(); /* the projector drawn at step 1 only */
    gc.adamw.lr = 0.05f, gc.rank = 4, gc.update_gap = which == TRAIN_GALORE_REFRESH ? 2 : 100;
    kiln_apollo_config ac = kiln_apollo_defaults(); /* one projector for every step */
    ac.adamw.lr = 0.05f, ac.rank = 4, ac.update_gap = 100;
    kiln_optim *opt = which == TRAIN_ADAMW8   ? kiln_adamw8bit_new(ctx, &cfg)
                      : which == TRAIN_SGD    ? kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f})
                      : which == TRAIN_GALORE || which == TRAIN_GALORE_REFRESH ? kiln_galore_adamw_new(ctx, &gc)
                      : which == TRAIN_APOLLO ? kiln_apollo_new(ctx, &ac)
                                              : kiln_adamw_new(ctx, &cfg);
    KT_NOTNULL(opt);
    if (which == TRAIN_CLIP) KT_OK(kiln_optim_set_clip_grad_norm(opt, 0.05f)); /* below every step's norm */
    KT_OK(kiln_optim_set_schedule(
        opt, &(kiln_schedule){.kind = KILN_SCHEDULE_COSINE, .warmup_steps = 2, .total_steps = STEPS, .min_lr_ratio = 0.1f}));
    for (int s = 0; s < STEPS; s++) {
        fill(x, 20 + s);
        int32_t lab[NB];
        for (int i = 0; i < NB; i++) lab[i] = (i * 3 + s) % OUT;
        KT_OK(kiln_tensor_set_i32(labels, lab, NB));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_optim_step(opt));
        KT_OK(kiln_tensor_get_f32(l, loss + s, 1));
        static float hv[NB * HID];
        if (which == TRAIN_DROPOUT) KT_OK(kiln_tensor_get_f32(h, hv, NB * HID));
        for (int i = 0; which == TRAIN_DROPOUT && i < NB * HID; i++) mask[s][i] = hv[i] != 0.0f;
    }
    KT_OK(kiln_tensor_get_f32(W1, w1, HID * IN));
    KT_OK(kiln_tensor_get_f32(W2, w2, OUT * HID));
    *st = kiln_graph_get_stats(g);
    *ost = kiln_graph_get_stats(opt->graph);
    *cst = opt->scale_graph ? kiln_graph_get_stats(opt->scale_graph) : (kiln_graph_stats){0};
    kiln_ctx_free(ctx);
    unsetenv("KILN_GRAPH_REPLAY");
}

static void check_train_with(const char *name, train_opt which) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    const char *on = train_opt_name[which];
    int64_t vmsg = kiln_backend_validation_messages(be);
    static float loss[3][STEPS], w1[3][HID * IN], w2[3][OUT * HID];
    static bool mask[3][STEPS][NB * HID];
    kiln_graph_stats st[3], ost[3], cst[3];
    for (int r = 0; r < 2; r++) run_train(be, which, r, loss[r], mask[r], w1[r], w2[r], &st[r], &ost[r], &cst[r]);
    run_train(kiln_backend_get("cpu"), which, false, loss[2], mask[2], w1[2], w2[2], &st[2], &ost[2], &cst[2]);
    for (int s = 0; s < STEPS; s++)
        KT_CHECK(loss[0][s] == loss[1][s], "%s, step %d: loss %.9g replayed, %.9g node by node", on, s, loss[1][s],
                 loss[0][s]);
    KT_CHECK(same_bits(w1[0], w1[1], HID * IN) && same_bits(w2[0], w2[1], OUT * HID),
             "%s: the weights after %d steps differ (w1[0] %.9g vs %.9g)", on, STEPS, w1[1][0], w1[0][0]);
    /* and they are the CPU's (a step number or lr the replays did not see
     * anew would give other bias corrections, other weights) */
    int bad = 0;
    for (int i = 0; i < HID * IN; i++) bad += !(fabsf(w1[1][i] - w1[2][i]) <= 1e-4f);
    KT_CHECK(bad == 0, "%s: %d of w1's %d weights differ from the cpu's by more than 1e-4", on, bad, HID * IN);
    /* a replay that read a stale run number would repeat the recording's mask */
    for (int s = 0; which == TRAIN_DROPOUT && s < STEPS; s++) {
        int off_cpu = 0, changed = 0;
        for (int i = 0; i < NB * HID; i++) {
            off_cpu += mask[1][s][i] != mask[2][s][i] || mask[0][s][i] != mask[2][s][i];
            changed += s > 0 && mask[1][s][i] != mask[1][s - 1][i];
        }
        KT_CHECK(off_cpu == 0, "%s, step %d: %d of %d mask entries differ from the cpu's", on, s, off_cpu, NB * HID);
        KT_CHECK(s == 0 || changed > NB * HID / 8, "%s, step %d: only %d of %d mask entries changed since the step before",
                 on, s, changed, NB * HID);
    }
    KT_CHECK(st[1].recordings == 1 && st[1].replays == STEPS - 2 && st[1].nodes_fallback == 0,
             "%s: forward and backward: %lld recordings, %lld replays, %lld nodes on the cpu", on,
             (long long)st[1].recordings, (long long)st[1].replays, (long long)st[1].nodes_fallback);
    /* the step number and the scheduled lr are values in the hyper leaf,
     * not in the nodes: one key for every step (SGD's first step has its
     * own, and so has GaLore's, which draws the projector). Refreshing
     * every 2 steps, GaLore alternates two keys, both kept: steps 2 and 4
     * record the plain key (step 3's refresh cannot be recorded: its SVD
     * reads the gradient on the host), step 6 replays it. */
    int want = which == TRAIN_SGD || which == TRAIN_GALORE ? STEPS - 3 : which == TRAIN_GALORE_REFRESH ? 1 : STEPS - 2;
    KT_CHECK(ost[1].computes == STEPS && ost[1].recordings == 1 && ost[1].replays == want && ost[1].nodes_fallback == 0,
             "%s's graph: %lld computes, %lld recordings, %lld replays (want %d, 1, %d), %lld nodes on the cpu", on,
             (long long)ost[1].computes, (long long)ost[1].recordings, (long long)ost[1].replays, STEPS, want,
             (long long)ost[1].nodes_fallback);
    /* clipping's coefficient is a leaf's value, not the nodes' parameter: one key for every step */
    KT_CHECK(which != TRAIN_CLIP || (cst[1].computes == STEPS && cst[1].recordings == 1 && cst[1].replays == STEPS - 2 &&
                                     cst[1].nodes_fallback == 0),
             "%s: the clipping graph: %lld computes, %lld recordings, %lld replays", on, (long long)cst[1].computes,
             (long long)cst[1].recordings, (long long)cst[1].replays);
    no_messages(be, vmsg);
}

static void check_train(const char *name, train_opt first, train_opt last) {
    for (train_opt o = first; o <= last; o++) check_train_with(name, o);
}

/* two tests: each under the runner's alarm on the CUDA emulator */
KT_TEST(graph_replay_train_cuda) { check_train("cuda", TRAIN_ADAMW, TRAIN_DROPOUT); }
KT_TEST(graph_replay_train_clip_lowrank_cuda) { check_train("cuda", TRAIN_CLIP, TRAIN_APOLLO); }
KT_TEST(graph_replay_train_galore_refresh_cuda) { check_train("cuda", TRAIN_GALORE_REFRESH, TRAIN_GALORE_REFRESH); }

/* ---- a decoding step ---- */

enum { TOKENS = 6, S = 8, D = 8 };

/* One token's attention over a KV cache of S rows: the graph is built
 * once; per token the host sets x, the position (rope), the mask (rows
 * before the position) and the cache rows written so far. Per token: y. */
static void run_decode(kiln_backend *be, bool replay, float *ys, kiln_graph_stats *st) {
    set_replay(replay);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 1, D), *pos = kiln_new_1d(ctx, KILN_I32, 1),
                *mask = kiln_new_2d(ctx, KILN_F32, 1, S), *K = kiln_new_2d(ctx, KILN_F32, S, D),
                *V = kiln_new_2d(ctx, KILN_F32, S, D), *Wq = kiln_new_2d(ctx, KILN_F32, D, D),
                *Wk = kiln_new_2d(ctx, KILN_F32, D, D), *Wv = kiln_new_2d(ctx, KILN_F32, D, D);
    fill(Wq, 8);
    fill(Wk, 9);
    fill(Wv, 10);
    kiln_tensor *q = kiln_rope(ctx, kiln_matmul(ctx, x, Wq), pos, 10000.0, KILN_ROPE_NEOX);
    kiln_tensor *k = kiln_rope(ctx, kiln_matmul(ctx, x, Wk), pos, 10000.0, KILN_ROPE_NEOX);
    kiln_tensor *v = kiln_matmul(ctx, x, Wv);
    kiln_tensor *p = kiln_softmax(ctx, kiln_add(ctx, kiln_scale(ctx, kiln_matmul_t(ctx, q, false, K, true), 0.35), mask), false);
    kiln_tensor *y = kiln_matmul(ctx, p, V);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_add(g, k));
    KT_OK(kiln_graph_add(g, v));
    float kc[S * D] = {0}, vc[S * D] = {0}, m[S];
    for (int t = 0; t < TOKENS; t++) {
        fill(x, 30 + t);
        KT_OK(kiln_tensor_set_i32(pos, (int32_t[]){t}, 1));
        for (int j = 0; j < S; j++) m[j] = j < t || j == 0 ? 0.0f : -1e30f;
        KT_OK(kiln_tensor_set_f32(mask, m, S));
        KT_OK(kiln_tensor_set_f32(K, kc, S * D));
        KT_OK(kiln_tensor_set_f32(V, vc, S * D));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_tensor_get_f32(y, ys + t * D, D));
        KT_OK(kiln_tensor_get_f32(k, kc + t * D, D)); /* the cache grows by this token's row */
        KT_OK(kiln_tensor_get_f32(v, vc + t * D, D));
    }
    *st = kiln_graph_get_stats(g);
    kiln_ctx_free(ctx);
    unsetenv("KILN_GRAPH_REPLAY");
}

static void check_decode(const char *name) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    int64_t vmsg = kiln_backend_validation_messages(be);
    float ys[2][TOKENS * D];
    kiln_graph_stats st[2];
    for (int r = 0; r < 2; r++) run_decode(be, r, ys[r], &st[r]);
    for (int t = 0; t < TOKENS; t++)
        KT_CHECK(same_bits(ys[0] + t * D, ys[1] + t * D, D), "token %d: replayed %.9g, node by node %.9g", t,
                 ys[1][t * D], ys[0][t * D]);
    KT_CHECK(st[1].recordings == 1 && st[1].replays == TOKENS - 2 && st[1].nodes_fallback == 0,
             "%lld recordings, %lld replays, %lld nodes on the cpu", (long long)st[1].recordings,
             (long long)st[1].replays, (long long)st[1].nodes_fallback);
    no_messages(be, vmsg);
}

KT_TEST(graph_replay_decode_cuda) { check_decode("cuda"); }

KT_TEST(graph_replay_inputs_vulkan) { check_inputs("vulkan"); }
KT_TEST(graph_replay_moved_vulkan) { check_moved("vulkan"); }
KT_TEST(graph_replay_train_vulkan) { check_train("vulkan", TRAIN_ADAMW, TRAIN_DROPOUT); }
KT_TEST(graph_replay_train_clip_lowrank_vulkan) { check_train("vulkan", TRAIN_CLIP, TRAIN_APOLLO); }
KT_TEST(graph_replay_train_galore_refresh_vulkan) { check_train("vulkan", TRAIN_GALORE_REFRESH, TRAIN_GALORE_REFRESH); }
KT_TEST(graph_replay_decode_vulkan) { check_decode("vulkan"); }
