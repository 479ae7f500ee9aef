/* test_schedule.c — learning-rate schedules: values at key steps against
 * the closed forms of include/kiln.h (transformers'
 * get_{constant,cosine,linear}_schedule_with_warmup), min_lr_ratio, no
 * schedule keeping the base lr's bits, config errors, and warmup + cosine
 * over a training loop of SGD steps (the lr each step used, read back from
 * the parameter's movement), on the CPU and on Vulkan. */
#include "kt.h"
#include "kt_device.h"
#include "../optim/optim_impl.h"

#include <math.h>

static kiln_optim *one_sgd(kiln_ctx *ctx, float lr, kiln_tensor **pp) {
    kiln_tensor *p = kiln_param(ctx, "p", KILN_F32, 1, (int64_t[]){4});
    if (pp) *pp = p;
    return p ? kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = lr}) : NULL;
}

#define LR_AT(opt, s, want)                                                                                    \
    KT_CHECK(fabs((double)kiln_optim_lr_at(opt, s) - (want)) <= 1e-7 * fabs(want) + 1e-12,                     \
             "%s: lr at step %d = %.9g, want %.9g", #want, (int)(s), (double)kiln_optim_lr_at(opt, s), (double)(want))

KT_TEST(schedule_key_steps) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_optim *opt = one_sgd(ctx, 0.1f, NULL);
    KT_NOTNULL(opt);
    const double lr = 0.1f; /* the float's value */
    /* no schedule: the base lr's bits at every step */
    for (int s = 0; s < 5; s++) KT_CHECK(kiln_optim_lr_at(opt, s) == 0.1f, "no schedule, step %d", s);
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, 10, 110, 0.0f}));
    LR_AT(opt, 0, 0.0);
    LR_AT(opt, 1, lr * 0.1);
    LR_AT(opt, 5, lr * 0.5);
    LR_AT(opt, 10, lr);
    LR_AT(opt, 35, lr * 0.5 * (1 + cos(M_PI * 0.25)));
    LR_AT(opt, 60, lr * 0.5);
    LR_AT(opt, 110, 0.0);
    LR_AT(opt, 500, 0.0);
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, 10, 110, 0.1f}));
    LR_AT(opt, 5, lr * 0.5);
    LR_AT(opt, 60, lr * (0.1 + 0.9 * 0.5));
    LR_AT(opt, 110, lr * 0.1);
    LR_AT(opt, 500, lr * 0.1);
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_LINEAR, 10, 110, 0.0f}));
    LR_AT(opt, 3, lr * 0.3);
    LR_AT(opt, 10, lr);
    LR_AT(opt, 35, lr * 0.75);
    LR_AT(opt, 60, lr * 0.5);
    LR_AT(opt, 110, 0.0);
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_LINEAR, 10, 110, 0.2f}));
    LR_AT(opt, 60, lr * (0.2 + 0.8 * 0.5));
    LR_AT(opt, 200, lr * 0.2);
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_CONSTANT, 4, 0, 0.0f}));
    LR_AT(opt, 1, lr * 0.25);
    LR_AT(opt, 4, lr);
    LR_AT(opt, 1000, lr);
    /* no warmup: full lr at step 0; the base lr scales the whole curve */
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, 0, 100, 0.0f}));
    LR_AT(opt, 0, lr);
    LR_AT(opt, 50, lr * 0.5);
    KT_OK(kiln_optim_set_lr(opt, 0.5f));
    LR_AT(opt, 50, 0.25);
    KT_CHECK(kiln_optim_lr(opt) == 0.5f, "the base lr stays");
    KT_OK(kiln_optim_set_schedule(opt, NULL));
    KT_CHECK(kiln_optim_lr_at(opt, 50) == 0.5f, "schedule removed");
    kiln_ctx_free(ctx);
}

KT_TEST(schedule_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_optim *opt = one_sgd(ctx, 0.1f, NULL);
    KT_NOTNULL(opt);
    KT_CHECK(kiln_optim_set_schedule(opt, &(kiln_schedule){(kiln_schedule_kind)7, 0, 10, 0}) == KILN_ERR_ARG, "kind");
    KT_CHECK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, -1, 10, 0}) == KILN_ERR_ARG, "warmup");
    KT_CHECK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_LINEAR, 20, 10, 0}) == KILN_ERR_ARG, "total");
    KT_CHECK(strstr(kiln_last_error(), "total_steps") != NULL, "message: %s", kiln_last_error());
    KT_CHECK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, 0, 10, 1.5f}) == KILN_ERR_ARG,
             "ratio");
    KT_CHECK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, 0, 10, NAN}) == KILN_ERR_ARG, "NaN");
    KT_CHECK(kiln_optim_set_schedule(NULL, NULL) == KILN_ERR_ARG, "NULL optimizer");
    KT_CHECK(kiln_optim_lr_at(opt, 3) == 0.1f, "a refused schedule leaves none");
    kiln_ctx_free(ctx);
}

/* Warmup + cosine over 30 SGD steps with a gradient of ones: each step
 * moves p by exactly the lr it used (p starts at 0, lr * 1 exact in f32
 * subtraction up to p's rounding), and the hyper leaf holds lr_at(step). */
static void check_training_loop(kiln_backend *b) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, b));
    kiln_tensor *p;
    kiln_optim *opt = one_sgd(ctx, 0.05f, &p);
    KT_NOTNULL(opt);
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, 5, 25, 0.0f}));
    double want = 0.0;
    for (int s = 0; s < 30; s++) {
        KT_OK(kiln_tensor_fill(kiln_tensor_grad(p), 1.0));
        float lr = kiln_optim_lr_at(opt, s);
        double f = s < 5 ? s / 5.0 : 0.5 * (1 + cos(M_PI * fmin(1.0, (s - 5) / 20.0)));
        KT_CHECK(lr == (float)((double)0.05f * f), "step %d: lr %.9g, closed form %.9g", s, (double)lr,
                 (double)0.05f * f);
        float before[4];
        KT_OK(kiln_tensor_get_f32(p, before, 4));
        KT_OK(kiln_optim_step(opt));
        float hy[6]; /* SGD's lr, momentum, dampening, weight_decay, then the step number's two halves */
        KT_OK(kiln_tensor_get_f32(opt->hyper, hy, 6));
        float h = hy[0];
        KT_CHECK(h == lr, "step %d: hyper lr %.9g, lr_at %.9g", s, (double)h, (double)lr);
        KT_CHECK(kiln__hyper_step(hy, 4) == s + 1, "step %d: hyper's step number %.0f", s, kiln__hyper_step(hy, 4));
        float got[4];
        KT_OK(kiln_tensor_get_f32(p, got, 4));
        KT_CHECK(got[0] == before[0] - lr, "step %d: p %.9g, want %.9g", s, (double)got[0], (double)(before[0] - lr));
        want -= lr;
        KT_CHECK(fabs(got[3] - want) <= 1e-6, "step %d: p %.9g, sum of lrs %.9g", s, (double)got[3], want);
    }
    KT_CHECK(kiln_optim_steps(opt) == 30, "steps %lld", (long long)kiln_optim_steps(opt));
    KT_CHECK(kiln_optim_lr(opt) == 0.05f, "base lr kept: %g", (double)kiln_optim_lr(opt));
    kiln_ctx_free(ctx);
}

KT_TEST(schedule_training_loop_cpu) { check_training_loop(NULL); }
#ifdef KILN_VULKAN
KT_TEST(schedule_training_loop_vulkan) { check_training_loop(kt_device("vulkan")); }
#endif

/* Warmup + cosine with AdamW fitting y = 2x - 1: the loss falls. */
KT_TEST(schedule_adamw_fits) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){1, 1});
    kiln_tensor *bias = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){1});
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){16, 1});
    kiln_tensor *y = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){16, 1});
    KT_NOTNULL(w);
    KT_NOTNULL(bias);
    KT_NOTNULL(x);
    KT_NOTNULL(y);
    float xs[16], ys[16];
    for (int i = 0; i < 16; i++) {
        xs[i] = (float)i / 8.0f - 1.0f;
        ys[i] = 2.0f * xs[i] - 1.0f;
    }
    KT_OK(kiln_tensor_set_f32(x, xs, 16));
    KT_OK(kiln_tensor_set_f32(y, ys, 16));
    kiln_tensor *d = kiln_sub(ctx, kiln_add(ctx, kiln_matmul(ctx, x, w), bias), y);
    kiln_tensor *loss = kiln_mean_all(ctx, kiln_mul(ctx, d, d));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    kiln_optim *opt = kiln_adamw_new(ctx, &(kiln_adam_config){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
                                                              .eps = 1e-8f, .weight_decay = 0.0f});
    KT_NOTNULL(opt);
    KT_OK(kiln_optim_set_schedule(opt, &(kiln_schedule){KILN_SCHEDULE_COSINE, 10, 200, 0.0f}));
    double first = 0, last = 0;
    for (int s = 0; s < 200; s++) {
        KT_OK(kiln_graph_compute(g));
        if (s == 0) first = kiln_tensor_item(loss);
        last = kiln_tensor_item(loss);
        KT_OK(kiln_optim_step(opt));
    }
    KT_CHECK(last < 1e-3 * first, "loss %g -> %g", first, last);
    kiln_ctx_free(ctx);
}
