/* test_graph_replay_dropout.c — a training step with dropout replays on a
 * device (core/graph_replay.c; CUDA on the fake toolkit here, Vulkan on
 * lavapipe): the kernels read the graph's run number from device memory
 * (vt->set_run), so a replay draws a new mask at every step. Over STEPS
 * steps of forward, backward and AdamW the graph records once, at the
 * second compute, and replays after; the losses and weights equal the
 * node-by-node path's ($KILN_GRAPH_REPLAY=0) bit for bit; each step's mask
 * is the CPU's and differs from the step before. */
#include "kt_device.h"
#include "backend.h"

enum { STEPS = 5, NB = 8, IN = 32, HID = 64, OUT = 4 };
#define P_DROP 0.25

static void fill(kiln_tensor *t, int seed) {
    int64_t n = kiln_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 7919 + seed * 104729) % 2000) / 1000.0f - 1.0f;
    KT_OK(kiln_tensor_set_f32(t, v, n));
    free(v);
}

/* per step: the loss and the dropped activations' mask; after the last, W1 */
static void run_train(kiln_backend *be, bool replay, float *loss, bool (*mask)[NB * HID], float *w1,
                      kiln_graph_stats *st) {
    if (replay) unsetenv("KILN_GRAPH_REPLAY");
    else setenv("KILN_GRAPH_REPLAY", "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, NB, IN), *labels = kiln_new_1d(ctx, KILN_I32, NB);
    kiln_tensor *W1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){HID, IN}),
                *B1 = kiln_param(ctx, "b1", KILN_F32, 1, (int64_t[]){HID}),
                *W2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){OUT, HID});
    fill(W1, 5);
    fill(B1, 6);
    fill(W2, 7);
    kiln_tensor *h = kiln_dropout(ctx, kiln_gelu(ctx, kiln_linear(ctx, x, W1, B1)), P_DROP, 11);
    kiln_tensor *l = kiln_cross_entropy(ctx, kiln_linear(ctx, h, W2, NULL), labels, -100);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, h)); /* an output: its mask is read at every step */
    KT_OK(kiln_graph_add(g, l));
    KT_OK(kiln_graph_backward(g, l));
    kiln_adam_config cfg = kiln_adamw_defaults();
    cfg.lr = 0.05f;
    kiln_optim *opt = kiln_adamw_new(ctx, &cfg);
    KT_NOTNULL(opt);
    float hv[NB * HID];
    for (int s = 0; s < STEPS; s++) {
        fill(x, 20 + s);
        int32_t lab[NB];
        for (int i = 0; i < NB; i++) lab[i] = (i * 3 + s) % OUT;
        KT_OK(kiln_tensor_set_i32(labels, lab, NB));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_optim_step(opt));
        KT_OK(kiln_tensor_get_f32(l, loss + s, 1));
        KT_OK(kiln_tensor_get_f32(h, hv, NB * HID));
        for (int i = 0; i < NB * HID; i++) mask[s][i] = hv[i] != 0.0f;
    }
    KT_OK(kiln_tensor_get_f32(W1, w1, HID * IN));
    *st = kiln_graph_get_stats(g);
    kiln_ctx_free(ctx);
    unsetenv("KILN_GRAPH_REPLAY");
}

static void check_dropout(const char *name) {
    kiln_backend *be = kt_device(name);
    if (!be) return;
    int64_t vmsg = kiln_backend_validation_messages(be);
    /* [0] node by node, [1] replayed, [2] the cpu */
    static float loss[3][STEPS], w1[3][HID * IN];
    static bool mask[3][STEPS][NB * HID];
    kiln_graph_stats st[3];
    for (int r = 0; r < 2; r++) run_train(be, r, loss[r], mask[r], w1[r], &st[r]);
    run_train(kiln_backend_get("cpu"), false, loss[2], mask[2], w1[2], &st[2]);
    KT_CHECK(st[1].recordings == 1 && st[1].replays == STEPS - 2 && st[1].nodes_fallback == 0,
             "%lld recordings, %lld replays (want 1, %d), %lld nodes on the cpu", (long long)st[1].recordings,
             (long long)st[1].replays, STEPS - 2, (long long)st[1].nodes_fallback);
    KT_CHECK(st[0].recordings == 0 && st[0].replays == 0, "KILN_GRAPH_REPLAY=0: %lld recordings, %lld replays",
             (long long)st[0].recordings, (long long)st[0].replays);
    for (int s = 0; s < STEPS; s++) {
        KT_CHECK(!memcmp(&loss[0][s], &loss[1][s], sizeof(float)), "step %d: loss %.9g replayed, %.9g node by node", s,
                 loss[1][s], loss[0][s]);
        int off_cpu = 0, changed = 0;
        for (int i = 0; i < NB * HID; i++) {
            off_cpu += mask[1][s][i] != mask[2][s][i] || mask[0][s][i] != mask[2][s][i];
            changed += s > 0 && mask[1][s][i] != mask[1][s - 1][i];
        }
        KT_CHECK(off_cpu == 0, "step %d: %d of %d mask entries differ from the cpu's", s, off_cpu, NB * HID);
        KT_CHECK(s == 0 || changed > NB * HID / 8, "step %d: only %d of %d mask entries changed since the step before",
                 s, changed, NB * HID);
    }
    KT_CHECK(!memcmp(w1[0], w1[1], sizeof w1[0]), "the weights after %d steps differ (w1[0] %.9g replayed, %.9g not)",
             STEPS, w1[1][0], w1[0][0]);
    int bad = 0;
    for (int i = 0; i < HID * IN; i++) bad += !(fabsf(w1[1][i] - w1[2][i]) <= 1e-4f);
    KT_CHECK(bad == 0, "%d of w1's %d weights differ from the cpu's by more than 1e-4", bad, HID * IN);
    int64_t n = kiln_backend_validation_messages(be) - vmsg;
    KT_CHECK(n == 0, "%lld validation messages", (long long)n);
}

KT_TEST(graph_replay_dropout_cuda) { check_dropout("cuda"); }
KT_TEST(graph_replay_dropout_vulkan) { check_dropout("vulkan"); }
