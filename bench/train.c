/* train.c — training steps per second of three models built from the
 * public API on random data of the right shapes, each step = forward,
 * backward and the optimizer's update (kiln_graph_compute + kiln_optim_step),
 * against PyTorch running the same models (bench/torch_ref.py):
 *
 *   mlp  784-256-256-10, relu, batch 128, cross-entropy, Adam (lr 1e-3)
 *   cnn  conv2d 1->16 3x3, relu, max_pool2d 2, conv2d 16->32 3x3, relu,
 *        max_pool2d 2, linear 800->10; 28x28 inputs, batch 128, Adam
 *   gpt  vocab 256, context 128, 4 layers, d_model 256, 4 heads, MLP 4x
 *        with gelu, pre-layernorm, learned positional embedding, untied
 *        head (no bias), batch 16, AdamW (lr 3e-4, weight decay 0.01);
 *        reported in tokens/s (16 x 128 tokens a step)
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct model {
    kiln_ctx *ctx;
    kiln_graph *g;
    kiln_optim *opt;
    int nt;
} model;

/* std > 0: normal(0, std) values; otherwise the constant -std (-1.0 for ones, -0.0 for zeros). */
static kiln_tensor *param(kiln_ctx *ctx, const char *name, int ndim, const int64_t *shape, double std, uint64_t seed) {
    kiln_tensor *p = kiln_param(ctx, name, KILN_F32, ndim, shape);
    bench_check(p != NULL, name);
    bench_check((std > 0 ? kiln_tensor_fill_randn(p, seed, 0.0, std) : kiln_tensor_fill(p, -std)) == KILN_OK, name);
    return p;
}

static kiln_tensor *labels(kiln_ctx *ctx, int ndim, const int64_t *shape, int classes, uint64_t seed) {
    kiln_tensor *t = kiln_tensor_new(ctx, KILN_I32, ndim, shape);
    bench_check(t != NULL, "labels");
    int64_t n = kiln_tensor_numel(t);
    int32_t *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (int32_t)((seed + (uint64_t)i * 2654435761u) % (uint64_t)classes);
    bench_check(kiln_tensor_set_i32(t, v, n) == KILN_OK, "labels");
    free(v);
    return t;
}

static kiln_tensor *input(kiln_ctx *ctx, int ndim, const int64_t *shape) {
    kiln_tensor *t = kiln_tensor_new(ctx, KILN_F32, ndim, shape);
    bench_check(t && kiln_tensor_fill_uniform(t, 7, 0.0, 1.0) == KILN_OK, "input");
    return t;
}

static void finish(model *m, kiln_tensor *loss, bool adamw) {
    m->g = kiln_graph_new(m->ctx);
    bench_check(loss && m->g && kiln_graph_add(m->g, loss) == KILN_OK && kiln_graph_backward(m->g, loss) == KILN_OK,
                "training graph");
    kiln_adam_config c = adamw ? kiln_adamw_defaults() : kiln_adam_defaults();
    if (adamw) c.lr = 3e-4f;
    m->opt = adamw ? kiln_adamw_new(m->ctx, &c) : kiln_adam_new(m->ctx, &c);
    bench_check(m->opt != NULL, "optimizer");
}

static void build_mlp(model *m) {
    kiln_ctx *ctx = m->ctx;
    kiln_tensor *x = input(ctx, 2, (int64_t[]){128, 784}), *y = labels(ctx, 1, (int64_t[]){128}, 10, 1);
    static const int64_t dims[4] = {784, 256, 256, 10};
    kiln_tensor *h = x;
    for (int l = 0; l < 3; l++) {
        char wn[8], bn[8];
        snprintf(wn, sizeof wn, "w%d", l);
        snprintf(bn, sizeof bn, "b%d", l);
        kiln_tensor *w = param(ctx, wn, 2, (int64_t[]){dims[l + 1], dims[l]}, 0.05, 10 + (uint64_t)l);
        kiln_tensor *b = param(ctx, bn, 1, (int64_t[]){dims[l + 1]}, 0.05, 20 + (uint64_t)l);
        h = kiln_linear(ctx, h, w, b);
        if (l < 2) h = kiln_relu(ctx, h);
    }
    finish(m, kiln_cross_entropy(ctx, h, y, -100), false);
}

static void build_cnn(model *m) {
    kiln_ctx *ctx = m->ctx;
    kiln_tensor *x = input(ctx, 4, (int64_t[]){128, 1, 28, 28}), *y = labels(ctx, 1, (int64_t[]){128}, 10, 2);
    kiln_tensor *w1 = param(ctx, "c1.w", 4, (int64_t[]){16, 1, 3, 3}, 0.3, 1);
    kiln_tensor *b1 = param(ctx, "c1.b", 1, (int64_t[]){16}, 0.1, 2);
    kiln_tensor *w2 = param(ctx, "c2.w", 4, (int64_t[]){32, 16, 3, 3}, 0.08, 3);
    kiln_tensor *b2 = param(ctx, "c2.b", 1, (int64_t[]){32}, 0.1, 4);
    kiln_tensor *w3 = param(ctx, "fc.w", 2, (int64_t[]){10, 800}, 0.03, 5);
    kiln_tensor *b3 = param(ctx, "fc.b", 1, (int64_t[]){10}, 0.03, 6);
    kiln_conv2d_params cp = {0};
    kiln_tensor *h = kiln_max_pool2d(ctx, kiln_relu(ctx, kiln_conv2d(ctx, x, w1, b1, &cp)), 2, 2, 0, 0);
    h = kiln_max_pool2d(ctx, kiln_relu(ctx, kiln_conv2d(ctx, h, w2, b2, &cp)), 2, 2, 0, 0);
    h = kiln_linear(ctx, kiln_flatten(ctx, h, 1), w3, b3);
    finish(m, kiln_cross_entropy(ctx, h, y, -100), false);
}

enum { GPT_V = 256, GPT_T = 128, GPT_L = 4, GPT_D = 256, GPT_H = 4, GPT_B = 16 };

static kiln_tensor *gpt_param(kiln_ctx *ctx, int l, const char *what, int ndim, const int64_t *shape, double std) {
    static uint64_t seed = 100;
    char name[32];
    snprintf(name, sizeof name, "h%d.%s", l, what);
    return param(ctx, name, ndim, shape, std, seed++);
}

static void build_gpt(model *m) {
    kiln_ctx *ctx = m->ctx;
    const int64_t B = GPT_B, T = GPT_T, D = GPT_D, H = GPT_H, Dh = GPT_D / GPT_H;
    kiln_tensor *idx = labels(ctx, 2, (int64_t[]){B, T}, GPT_V, 3), *y = labels(ctx, 2, (int64_t[]){B, T}, GPT_V, 4);
    kiln_tensor *pos = kiln_tensor_new(ctx, KILN_I32, 1, (int64_t[]){T});
    int32_t pv[GPT_T];
    for (int i = 0; i < GPT_T; i++) pv[i] = i;
    bench_check(pos && kiln_tensor_set_i32(pos, pv, T) == KILN_OK, "positions");
    kiln_tensor *wte = gpt_param(ctx, -1, "wte", 2, (int64_t[]){GPT_V, D}, 0.02);
    kiln_tensor *wpe = gpt_param(ctx, -1, "wpe", 2, (int64_t[]){T, D}, 0.02);
    kiln_tensor *x = kiln_add(ctx, kiln_get_rows(ctx, wte, idx), kiln_get_rows(ctx, wpe, pos));
    for (int l = 0; l < GPT_L; l++) {
        kiln_tensor *ln1w = gpt_param(ctx, l, "ln1.w", 1, (int64_t[]){D}, -1.0);
        kiln_tensor *ln1b = gpt_param(ctx, l, "ln1.b", 1, (int64_t[]){D}, -0.0);
        kiln_tensor *wqkv = gpt_param(ctx, l, "attn.w", 2, (int64_t[]){3 * D, D}, 0.02);
        kiln_tensor *bqkv = gpt_param(ctx, l, "attn.b", 1, (int64_t[]){3 * D}, -0.0);
        kiln_tensor *wo = gpt_param(ctx, l, "proj.w", 2, (int64_t[]){D, D}, 0.02);
        kiln_tensor *bo = gpt_param(ctx, l, "proj.b", 1, (int64_t[]){D}, -0.0);
        kiln_tensor *ln2w = gpt_param(ctx, l, "ln2.w", 1, (int64_t[]){D}, -1.0);
        kiln_tensor *ln2b = gpt_param(ctx, l, "ln2.b", 1, (int64_t[]){D}, -0.0);
        kiln_tensor *w1 = gpt_param(ctx, l, "fc.w", 2, (int64_t[]){4 * D, D}, 0.02);
        kiln_tensor *b1 = gpt_param(ctx, l, "fc.b", 1, (int64_t[]){4 * D}, -0.0);
        kiln_tensor *w2 = gpt_param(ctx, l, "fc2.w", 2, (int64_t[]){D, 4 * D}, 0.02);
        kiln_tensor *b2 = gpt_param(ctx, l, "fc2.b", 1, (int64_t[]){D}, -0.0);
        /* attention: qkv [B, T, 3D] -> [B, 3H, T, Dh] -> q, k, v [B, H, T, Dh] */
        kiln_tensor *qkv = kiln_linear(ctx, kiln_layer_norm(ctx, x, ln1w, ln1b, 1e-5), wqkv, bqkv);
        qkv = kiln_permute(ctx, kiln_reshape(ctx, qkv, 4, (int64_t[]){B, T, 3 * H, Dh}), (int[]){0, 2, 1, 3});
        kiln_tensor *q = kiln_slice(ctx, qkv, 1, 0, H, 1), *k = kiln_slice(ctx, qkv, 1, H, 2 * H, 1),
                    *v = kiln_slice(ctx, qkv, 1, 2 * H, 3 * H, 1);
        kiln_tensor *a = kiln_permute(ctx, kiln_attention(ctx, q, k, v, true, 0.0), (int[]){0, 2, 1, 3});
        a = kiln_reshape(ctx, a, 3, (int64_t[]){B, T, D});
        x = kiln_add(ctx, x, kiln_linear(ctx, a, wo, bo));
        /* MLP */
        kiln_tensor *f = kiln_linear(ctx, kiln_layer_norm(ctx, x, ln2w, ln2b, 1e-5), w1, b1);
        x = kiln_add(ctx, x, kiln_linear(ctx, kiln_gelu(ctx, f), w2, b2));
    }
    kiln_tensor *lnfw = gpt_param(ctx, -1, "lnf.w", 1, (int64_t[]){D}, -1.0);
    kiln_tensor *lnfb = gpt_param(ctx, -1, "lnf.b", 1, (int64_t[]){D}, -0.0);
    kiln_tensor *head = gpt_param(ctx, -1, "head.w", 2, (int64_t[]){GPT_V, D}, 0.02);
    kiln_tensor *logits = kiln_linear(ctx, kiln_layer_norm(ctx, x, lnfw, lnfb, 1e-5), head, NULL);
    finish(m, kiln_cross_entropy(ctx, logits, y, -100), true);
}

static void step(void *p) {
    model *m = p;
    kiln_set_threads(m->nt);
    bench_check(kiln_graph_compute(m->g) == KILN_OK, "training step: compute");
    bench_check(kiln_optim_step(m->opt) == KILN_OK, "training step: optimizer");
}

static const struct {
    const char *name;
    void (*build)(model *);
    double per_step; /* 1, or tokens per step */
    const char *unit;
    double budget_s;
} models[] = {
    {"mlp", build_mlp, 1, "steps/s", 2.0},
    {"cnn", build_cnn, 1, "steps/s", 3.0},
    {"gpt", build_gpt, GPT_B * GPT_T, "tokens/s", 6.0},
};

bench_job bench_train_job(const char *name, int threads, double *per_step, double *budget_s) {
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        if (strcmp(models[i].name, name)) continue;
        model *m = calloc(1, sizeof *m);
        bench_check(m && (m->ctx = kiln_ctx_new()), "context");
        m->nt = threads;
        models[i].build(m);
        *per_step = models[i].per_step, *budget_s = models[i].budget_s;
        return (bench_job){step, m};
    }
    bench_check(false, name);
    return (bench_job){NULL, NULL};
}

void bench_train_job_free(bench_job *j) {
    model *m = j->arg;
    kiln_ctx_free(m->ctx);
    free(m);
}

double bench_train_rate(const char *name, kiln_backend *b, int threads, double budget_s, const char **unit) {
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        if (strcmp(models[i].name, name)) continue;
        model m = {.ctx = kiln_ctx_new(), .nt = threads};
        bench_check(m.ctx && kiln_ctx_set_backend(m.ctx, b) == KILN_OK, "context");
        models[i].build(&m);
        bench_job job = {step, &m};
        double med;
        bench_measure(&job, 1, 3, 200, models[i].budget_s * budget_s, &med);
        kiln_ctx_free(m.ctx);
        *unit = models[i].unit;
        return models[i].per_step / med;
    }
    return 0;
}

void bench_train(const bench_opts *o) {
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        if (o->model && strcmp(o->model, models[i].name)) continue;
        model m = {.ctx = kiln_ctx_new()};
        bench_check(m.ctx != NULL, "context");
        models[i].build(&m);
        for (int t = 0; t < o->n_threads; t++) {
            m.nt = o->threads[t];
            bench_job job = {step, &m};
            double med;
            bench_measure(&job, 1, 3, 200, models[i].budget_s * o->scale, &med);
            char name[64], key[64];
            snprintf(name, sizeof name, "train_%s %dt", models[i].name, m.nt);
            snprintf(key, sizeof key, "train_%s_%dt", models[i].name, m.nt);
            bench_report(name, models[i].per_step / med, models[i].unit, bench_torch(key), "pytorch");
        }
        kiln_ctx_free(m.ctx);
    }
}
