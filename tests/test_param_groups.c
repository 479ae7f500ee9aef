/* test_param_groups.c — parameter groups: one AdamW with a group (bias:
 * no weight decay, half the lr) gives the bits of two separate AdamWs
 * (weight: decay; bias: no decay, half lr), under a warmup + cosine
 * schedule and random gradients; a group set after steps (the graph
 * re-planned) stops the decay of its parameters while the others decay;
 * SGD and Lion groups; errors. On the CPU and on Vulkan. */
#include "kt.h"
#include "kt_device.h"
#include "../optim/optim_impl.h"

#include <math.h>

enum { NW = 40, NB = 5, STEPS = 6 };

static void make(kiln_ctx *ctx, kiln_tensor **w, kiln_tensor **b) {
    *w = kiln_param(ctx, "weight", KILN_F32, 2, (int64_t[]){8, 5});
    *b = kiln_param(ctx, "bias", KILN_F32, 1, (int64_t[]){NB});
    if (*w) kiln_tensor_fill_uniform(*w, 1, -1.0, 1.0);
    if (*b) kiln_tensor_fill_uniform(*b, 2, -1.0, 1.0);
}

static void check_adamw_groups(kiln_backend *be) {
    const kiln_schedule sc = {KILN_SCHEDULE_COSINE, 2, STEPS, 0.0f};
    kiln_adam_config c = kiln_adamw_defaults();
    c.lr = 0.01f;
    c.weight_decay = 0.3f;
    /* ctx[0]: one optimizer and a group; ctx[1]: two optimizers */
    kiln_ctx *ctx[2];
    kiln_tensor *w[2], *b[2];
    kiln_optim *one, *ow, *ob;
    for (int s = 0; s < 2; s++) {
        ctx[s] = kiln_ctx_new();
        KT_OK(kiln_ctx_set_backend(ctx[s], be));
        make(ctx[s], &w[s], &b[s]);
        KT_NOTNULL(w[s]);
        KT_NOTNULL(b[s]);
    }
    KT_NOTNULL(one = kiln_adamw_new(ctx[0], &c));
    KT_OK(kiln_optim_set_group(one, &b[0], 1, 0.5f, 0.0f));
    KT_OK(kiln_optim_set_schedule(one, &sc));
    KT_NOTNULL(ow = kiln_adamw_new_for(ctx[1], &w[1], 1, &c));
    kiln_adam_config cb = c;
    cb.lr = 0.005f;
    cb.weight_decay = 0.0f;
    KT_NOTNULL(ob = kiln_adamw_new_for(ctx[1], &b[1], 1, &cb));
    KT_OK(kiln_optim_set_schedule(ow, &sc));
    KT_OK(kiln_optim_set_schedule(ob, &sc));
    for (int k = 0; k < STEPS; k++) {
        for (int s = 0; s < 2; s++) {
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(w[s]), 10 + (uint64_t)k, 0.0, 1.0));
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(b[s]), 20 + (uint64_t)k, 0.0, 1.0));
        }
        KT_OK(kiln_optim_step(one));
        KT_OK(kiln_optim_step(ow));
        KT_OK(kiln_optim_step(ob));
        float x[NW], y[NW];
        KT_OK(kiln_tensor_get_f32(w[0], x, NW));
        KT_OK(kiln_tensor_get_f32(w[1], y, NW));
        for (int i = 0; i < NW; i++)
            KT_REQUIRE(memcmp(&x[i], &y[i], sizeof x[i]) == 0, "step %d: weight[%d] %.9g vs %.9g", k, i, x[i], y[i]);
        KT_OK(kiln_tensor_get_f32(b[0], x, NB));
        KT_OK(kiln_tensor_get_f32(b[1], y, NB));
        for (int i = 0; i < NB; i++)
            KT_REQUIRE(memcmp(&x[i], &y[i], sizeof x[i]) == 0, "step %d: bias[%d] %.9g vs %.9g", k, i, x[i], y[i]);
    }
    if (be) {
        kiln_graph_stats st = kiln_graph_get_stats(one->graph);
        KT_CHECK(st.nodes_fallback == 0, "%lld step nodes on the CPU", (long long)st.nodes_fallback);
    }
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

KT_TEST(groups_adamw_match_separate_cpu) { check_adamw_groups(NULL); }
#ifdef KILN_VULKAN
KT_TEST(groups_adamw_match_separate_vulkan) { check_adamw_groups(kt_device("vulkan")); }
#endif

/* Zero gradients: AdamW's step is decay only (p *= 1 - lr * wd, the update
 * 0 / eps). Two steps all decaying, then bias in a group without decay:
 * its bits stay while the weight keeps decaying by the same factor. */
static void check_late_group(kiln_backend *be) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *w, *b;
    make(ctx, &w, &b);
    KT_NOTNULL(w);
    KT_NOTNULL(b);
    kiln_adam_config c = kiln_adamw_defaults();
    c.lr = 0.1f;
    c.weight_decay = 0.5f;
    kiln_optim *opt = kiln_adamw_new(ctx, &c);
    KT_NOTNULL(opt);
    const float decay = (float)(1.0 - (double)0.1f * (double)0.5f);
    float w0[NW], b0[NB], w1[NW], b1[NB];
    for (int k = 0; k < 5; k++) {
        if (k == 2) KT_OK(kiln_optim_set_group(opt, &b, 1, 1.0f, 0.0f));
        KT_OK(kiln_tensor_get_f32(w, w0, NW));
        KT_OK(kiln_tensor_get_f32(b, b0, NB));
        KT_OK(kiln_optim_step(opt));
        KT_OK(kiln_tensor_get_f32(w, w1, NW));
        KT_OK(kiln_tensor_get_f32(b, b1, NB));
        for (int i = 0; i < NW; i++)
            KT_REQUIRE(w1[i] == w0[i] * decay, "step %d: weight[%d] %.9g, want %.9g", k, i, w1[i], w0[i] * decay);
        for (int i = 0; i < NB; i++) {
            float want = k < 2 ? b0[i] * decay : b0[i];
            KT_REQUIRE(b1[i] == want, "step %d: bias[%d] %.9g, want %.9g", k, i, b1[i], want);
        }
    }
    kiln_ctx_free(ctx);
}

KT_TEST(groups_late_no_decay_cpu) { check_late_group(NULL); }
#ifdef KILN_VULKAN
KT_TEST(groups_late_no_decay_vulkan) { check_late_group(kt_device("vulkan")); }
#endif

/* SGD: a group with lr_scale 0 freezes its parameters; Lion: a group's
 * weight decay applies to its parameters only. */
KT_TEST(groups_sgd_lion) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w, *b;
    make(ctx, &w, &b);
    KT_NOTNULL(w);
    KT_NOTNULL(b);
    kiln_optim *sgd = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f});
    KT_NOTNULL(sgd);
    KT_OK(kiln_optim_set_group(sgd, &b, 1, 0.0f, 0.0f));
    float b0[NB], b1[NB], w0[NW], w1[NW];
    KT_OK(kiln_tensor_get_f32(b, b0, NB));
    KT_OK(kiln_tensor_get_f32(w, w0, NW));
    KT_OK(kiln_tensor_fill(kiln_tensor_grad(w), 1.0));
    KT_OK(kiln_tensor_fill(kiln_tensor_grad(b), 1.0));
    KT_OK(kiln_optim_step(sgd));
    KT_OK(kiln_tensor_get_f32(b, b1, NB));
    KT_OK(kiln_tensor_get_f32(w, w1, NW));
    KT_CHECK(memcmp(b0, b1, sizeof b0) == 0, "frozen bias moved");
    KT_CHECK(w1[0] == w0[0] - 0.1f, "weight %.9g", (double)w1[0]);
    kiln_optim *lion = kiln_lion_new(ctx, &(kiln_lion_config){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f});
    KT_NOTNULL(lion);
    KT_OK(kiln_optim_set_group(lion, &w, 1, 1.0f, 0.5f));
    KT_OK(kiln_tensor_get_f32(b, b0, NB));
    KT_OK(kiln_tensor_get_f32(w, w0, NW));
    KT_OK(kiln_optim_step(lion)); /* zero gradients: sign 0, decay only */
    KT_OK(kiln_tensor_get_f32(b, b1, NB));
    KT_OK(kiln_tensor_get_f32(w, w1, NW));
    KT_CHECK(memcmp(b0, b1, sizeof b0) == 0, "bias decayed without weight decay");
    const float decay = (float)(1.0 - (double)0.1f * (double)0.5f);
    for (int i = 0; i < NW; i++) KT_CHECK(w1[i] == w0[i] * decay, "weight[%d] %.9g", i, (double)w1[i]);
    kiln_ctx_free(ctx);
}

KT_TEST(groups_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w, *b;
    make(ctx, &w, &b);
    KT_NOTNULL(w);
    KT_NOTNULL(b);
    kiln_optim *opt = kiln_adamw_new_for(ctx, &w, 1, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_set_group(opt, &b, 1, 1.0f, 0.0f) == KILN_ERR_ARG, "foreign parameter");
    KT_CHECK(strstr(kiln_last_error(), "'bias'") != NULL, "message: %s", kiln_last_error());
    KT_CHECK(kiln_optim_set_group(opt, &w, 1, -1.0f, 0.0f) == KILN_ERR_ARG, "negative lr_scale");
    KT_CHECK(kiln_optim_set_group(opt, &w, 1, 1.0f, NAN) == KILN_ERR_ARG, "NaN weight decay");
    KT_CHECK(kiln_optim_set_group(opt, &w, 0, 1.0f, 0.0f) == KILN_ERR_ARG, "no parameters");
    KT_CHECK(kiln_optim_set_group(NULL, &w, 1, 1.0f, 0.0f) == KILN_ERR_ARG, "NULL optimizer");
    kiln_ctx_free(ctx);
}
