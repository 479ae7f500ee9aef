/* test_grad_hook.c — kiln_graph_set_grad_hook (what kiln_dist starts its
 * all-reduces from) and APOLLO's first_index (what keeps a ZeRO shard's
 * projectors those of the whole list). */
#include "kt.h"

typedef struct hook_log {
    kiln_tensor *grads[8];
    float first_value[8]; /* the gradient's element 0 when the hook ran */
    int n;
} hook_log;

static void record(void *user, kiln_tensor *grad) {
    hook_log *l = user;
    if (l->n < 8) {
        l->grads[l->n] = grad;
        l->first_value[l->n] = ((const float *)kiln_tensor_data(grad))[0];
        l->n++;
    }
}

/* Two linear layers: each gradient gets one call per compute, holding its
 * final value when the hook runs. */
KT_TEST(grad_hook_once_per_gradient_when_final) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 4, 3);
    kiln_tensor *w1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){5, 3});
    kiln_tensor *b1 = kiln_param(ctx, "b1", KILN_F32, 1, (int64_t[]){5});
    kiln_tensor *w2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){2, 5});
    KT_OK(kiln_tensor_fill_randn(x, 1, 0, 1));
    KT_OK(kiln_tensor_fill_randn(w1, 2, 0, 1));
    KT_OK(kiln_tensor_fill_randn(b1, 3, 0, 1));
    KT_OK(kiln_tensor_fill_randn(w2, 4, 0, 1));
    kiln_tensor *loss = kiln_mean_all(ctx, kiln_linear(ctx, kiln_tanh(ctx, kiln_linear(ctx, x, w1, b1)), w2, NULL));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(loss);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    hook_log log = {0};
    KT_OK(kiln_graph_set_grad_hook(g, record, &log));
    for (int rep = 0; rep < 2; rep++) {
        log.n = 0;
        kiln_zero_grad(ctx);
        KT_OK(kiln_graph_compute(g));
        KT_REQUIRE(log.n == 3, "compute %d: %d hook calls for 3 gradients", rep, log.n);
        int at[3] = {-1, -1, -1};
        kiln_tensor *want[3] = {kiln_tensor_grad(w1), kiln_tensor_grad(b1), kiln_tensor_grad(w2)};
        for (int i = 0; i < log.n; i++)
            for (int k = 0; k < 3; k++)
                if (log.grads[i] == want[k]) {
                    KT_CHECK(at[k] < 0, "gradient %d reported twice", k);
                    at[k] = i;
                    float final = ((const float *)kiln_tensor_data(want[k]))[0];
                    KT_CHECK(log.first_value[i] == final, "gradient %d was %g at its hook, %g after", k,
                             (double)log.first_value[i], (double)final);
                }
        KT_CHECK(at[0] >= 0 && at[1] >= 0 && at[2] >= 0, "a gradient was not reported");
    }
    KT_OK(kiln_graph_set_grad_hook(g, NULL, NULL));
    log.n = 0;
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(log.n == 0, "a removed hook was called %d times", log.n);
    kiln_ctx_free(ctx);
}

/* APOLLO over the tail of a parameter list with first_index = its offset
 * steps those parameters bit for bit as over the whole list. */
KT_TEST(apollo_first_index_matches_whole_list) {
    kiln_ctx *a = kiln_ctx_new(), *b = kiln_ctx_new();
    kiln_tensor *pa[3], *pb[3];
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        pa[i] = kiln_param(a, name, KILN_F32, 2, (int64_t[]){12, 10});
        pb[i] = kiln_param(b, name, KILN_F32, 2, (int64_t[]){12, 10});
        KT_OK(kiln_tensor_fill_randn(pa[i], 10 + (uint64_t)i, 0, 1));
        KT_OK(kiln_tensor_fill_randn(pb[i], 10 + (uint64_t)i, 0, 1));
    }
    kiln_apollo_config c = kiln_apollo_defaults();
    c.rank = 3;
    c.update_gap = 2;
    c.seed = 11;
    c.adamw.lr = 1e-2f;
    kiln_optim *whole = kiln_apollo_new_for(a, pa, 3, &c);
    c.first_index = 1;
    kiln_optim *tail = kiln_apollo_new_for(b, pb + 1, 2, &c);
    KT_NOTNULL(whole);
    KT_NOTNULL(tail);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 3; i++) {
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(pa[i]), 50 + (uint64_t)(step * 3 + i), 0, 1));
            KT_OK(kiln_tensor_fill_randn(kiln_tensor_grad(pb[i]), 50 + (uint64_t)(step * 3 + i), 0, 1));
        }
        KT_OK(kiln_optim_step(whole));
        KT_OK(kiln_optim_step(tail));
    }
    for (int i = 1; i < 3; i++)
        KT_CHECK(!memcmp(kiln_tensor_data(pa[i]), kiln_tensor_data(pb[i]), kiln_tensor_nbytes(pa[i])),
                 "parameter %d differs", i);
    c.first_index = -1;
    KT_CHECK(!kiln_apollo_new_for(b, pb, 1, &c), "first_index -1 accepted");
    kiln_ctx_free(a);
    kiln_ctx_free(b);
}
