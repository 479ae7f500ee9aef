/* test_opt8bit_mlp.c — 8-bit Adam against 32-bit Adam on a small MLP:
 * both train the same two-layer network (32 -> 256 -> 16, both weight
 * matrices large enough for 8-bit state) from the same start on the same
 * mini-batches for 200 steps; the loss curves must stay close. The labels
 * come from a fixed random "teacher" network, so the task is learnable.
 * Measured (KILN_OPT8_PRINT=1): loss 2.953 -> 0.2251 (8-bit) and
 * 2.953 -> 0.2259 (32-bit), largest gap between the curves 0.0020, mean
 * gap 0.00078; the bounds leave ten times that room. */
#include "kt.h"

#include <math.h>
#include <stdint.h>

enum { IN = 32, HID = 256, OUT = 16, BATCH = 64, SAMPLES = 1024, STEPS = 200 };

/* SAMPLES inputs ~ N(0, 1) and the argmax of a random linear teacher's
 * output on a tanh feature map. */
static void make_data(float *x, int32_t *y) {
    uint64_t s = 12345;
    for (int64_t i = 0; i < (int64_t)SAMPLES * IN; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = ((s >> 11) + 0.5) / 9007199254740992.0;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = ((s >> 11) + 0.5) / 9007199254740992.0;
        x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    for (int i = 0; i < SAMPLES; i++) {
        int best = 0;
        double best_v = -INFINITY;
        for (int o = 0; o < OUT; o++) {
            double v = 0;
            for (int k = 0; k < IN; k++) v += tanh(x[i * IN + k] * sin(1.0 + o * IN + k)) * cos(0.5 * k + 3.0 * o);
            if (v > best_v) best_v = v, best = o;
        }
        y[i] = best;
    }
}

/* Train with 8-bit or 32-bit Adam; the loss of each step into curve. */
static void train(bool eightbit, const float *x, const int32_t *y, double *curve) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){HID, IN});
    kiln_tensor *b1 = kiln_param(ctx, "b1", KILN_F32, 1, (int64_t[]){HID});
    kiln_tensor *w2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){OUT, HID});
    kiln_tensor *xb = kiln_new_2d(ctx, KILN_F32, BATCH, IN);
    kiln_tensor *yb = kiln_new_1d(ctx, KILN_I32, BATCH);
    KT_NOTNULL(w1 && b1 && w2 && xb && yb);
    KT_OK(kiln_tensor_fill_randn(w1, 1, 0.0, 1.0 / sqrt(IN)));
    KT_OK(kiln_tensor_fill(b1, 0.0));
    KT_OK(kiln_tensor_fill_randn(w2, 2, 0.0, 1.0 / sqrt(HID)));
    kiln_tensor *h = kiln_relu(ctx, kiln_linear(ctx, xb, w1, b1));
    kiln_tensor *loss = kiln_cross_entropy(ctx, kiln_linear(ctx, h, w2, NULL), yb, -1);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(loss && g);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    kiln_adam_config cfg = kiln_adam_defaults();
    cfg.lr = 3e-3f;
    kiln_optim *opt = eightbit ? kiln_adam8bit_new(ctx, &cfg) : kiln_adam_new(ctx, &cfg);
    KT_NOTNULL(opt);
    /* w1 (8192) and w2 (4096) get 8-bit state; b1 (256) keeps 32-bit */
    if (eightbit) KT_CHECK(kiln_optim_state_bytes(opt) < 2 * 4 * HID + 3 * (HID * IN + OUT * HID), "8-bit state");
    for (int k = 0; k < STEPS; k++) {
        int first = (k * BATCH) % SAMPLES;
        KT_OK(kiln_tensor_set_f32(xb, x + (int64_t)first * IN, (int64_t)BATCH * IN));
        KT_OK(kiln_tensor_set_i32(yb, y + first, BATCH));
        KT_OK(kiln_graph_compute(g));
        curve[k] = kiln_tensor_item(loss);
        KT_OK(kiln_optim_step(opt));
    }
    kiln_ctx_free(ctx);
}

KT_TEST(opt8bit_adam_near_32bit_mlp) {
    float *x = malloc(sizeof(float) * SAMPLES * IN);
    int32_t *y = malloc(sizeof(int32_t) * SAMPLES);
    double c8[STEPS], c32[STEPS];
    make_data(x, y);
    train(true, x, y, c8);
    train(false, x, y, c32);
    double max_gap = 0, mean_gap = 0;
    for (int k = 0; k < STEPS; k++) {
        max_gap = fmax(max_gap, fabs(c8[k] - c32[k]));
        mean_gap += fabs(c8[k] - c32[k]) / STEPS;
    }
    if (getenv("KILN_OPT8_PRINT"))
        printf("mlp 200 steps: loss %.4g -> %.4g (8-bit), %.4g -> %.4g (32-bit); gap max %.4g mean %.4g\n", c8[0],
               c8[STEPS - 1], c32[0], c32[STEPS - 1], max_gap, mean_gap);
    KT_CHECK(c32[STEPS - 1] < 0.5 * c32[0], "32-bit Adam did not learn: %g -> %g", c32[0], c32[STEPS - 1]);
    KT_CHECK(fabs(c8[STEPS - 1] - c32[STEPS - 1]) <= 0.05 * c32[STEPS - 1],
             "final loss 8-bit %g, 32-bit %g", c8[STEPS - 1], c32[STEPS - 1]);
    KT_CHECK(max_gap < 0.02 && mean_gap < 0.008, "curves apart: max %g, mean %g", max_gap, mean_gap);
    free(x), free(y);
}
