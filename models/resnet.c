/* resnet.c — the ResNet of BasicBlocks with batch norm (see resnet.h). */
#include "resnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

resnet_config resnet18_cifar(void) {
    return (resnet_config){.channels = 3, .size = 32, .classes = 10, .stages = 4, .widths = {64, 128, 256, 512},
                           .blocks = {2, 2, 2, 2}};
}

resnet_config resnet_tiny(void) {
    return (resnet_config){.channels = 3, .size = 8, .classes = 3, .stages = 2, .widths = {4, 8}, .blocks = {1, 1}};
}

static bool config_ok(const resnet_config *c) {
    if (c->channels < 1 || c->size < 1 || c->classes < 1 || c->stages < 1 || c->stages > RESNET_MAX_STAGES) return false;
    for (int s = 0; s < c->stages; s++)
        if (c->widths[s] < 1 || c->blocks[s] < 1 || c->blocks[s] > RESNET_MAX_BLOCKS) return false;
    return true;
}

/* torchvision's init: kaiming_normal_(mode="fan_out", nonlinearity="relu") */
static kiln_tensor *conv_param(kiln_ctx *ctx, const char *name, int64_t out, int64_t in, int64_t k, uint64_t seed) {
    return model_param(ctx, name, 4, (int64_t[]){out, in, k, k}, MODEL_INIT_NORMAL, sqrt(2.0 / (double)(out * k * k)),
                       seed);
}

static bool block_new(kiln_ctx *ctx, resnet_block *b, const char *prefix, int64_t in, int64_t out, int stride,
                      uint64_t seed) {
    char name[64];
    b->stride = stride;
    snprintf(name, sizeof name, "%s.conv1.weight", prefix);
    if (!(b->conv1_w = conv_param(ctx, name, out, in, 3, seed))) return false;
    snprintf(name, sizeof name, "%s.bn1", prefix);
    if (!model_bn_init(&b->bn1, ctx, name, out)) return false;
    snprintf(name, sizeof name, "%s.conv2.weight", prefix);
    if (!(b->conv2_w = conv_param(ctx, name, out, out, 3, seed))) return false;
    snprintf(name, sizeof name, "%s.bn2", prefix);
    if (!model_bn_init(&b->bn2, ctx, name, out)) return false;
    if (stride == 1 && in == out) return true;
    snprintf(name, sizeof name, "%s.downsample.0.weight", prefix);
    if (!(b->down_w = conv_param(ctx, name, out, in, 1, seed))) return false;
    snprintf(name, sizeof name, "%s.downsample.1", prefix);
    return model_bn_init(&b->down_bn, ctx, name, out);
}

resnet *resnet_new(kiln_ctx *ctx, const resnet_config *cfg, uint64_t seed) {
    resnet_config c = cfg ? *cfg : resnet18_cifar();
    if (!ctx || !config_ok(&c)) {
        kiln_set_error(KILN_ERR_ARG, "resnet_new: %s",
                       ctx ? "channels, size, classes, widths must be >= 1, stages 1 to 4, blocks 1 to 8" : "ctx is NULL");
        return NULL;
    }
    resnet *m = calloc(1, sizeof *m);
    if (!m) {
        kiln_set_error(KILN_ERR_OOM, "resnet_new: out of memory");
        return NULL;
    }
    m->ctx = ctx;
    m->cfg = c;
    bool ok = (m->conv1_w = conv_param(ctx, "conv1.weight", c.widths[0], c.channels, 3, seed)) &&
              model_bn_init(&m->bn1, ctx, "bn1", c.widths[0]);
    int64_t in = c.widths[0];
    for (int s = 0; ok && s < c.stages; s++)
        for (int b = 0; ok && b < c.blocks[s]; b++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d", s + 1, b);
            ok = block_new(ctx, &m->blocks[s][b], prefix, in, c.widths[s], s > 0 && b == 0 ? 2 : 1, seed);
            in = c.widths[s];
        }
    ok = ok && (m->fc_w = model_param(ctx, "fc.weight", 2, (int64_t[]){c.classes, in}, MODEL_INIT_LINEAR, (double)in, seed)) &&
         (m->fc_b = model_param(ctx, "fc.bias", 1, (int64_t[]){c.classes}, MODEL_INIT_LINEAR, (double)in, seed));
    if (!ok) {
        free(m);
        return NULL;
    }
    return m;
}

void resnet_free(resnet *m) { free(m); }

static kiln_tensor *conv(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, int stride) {
    int pad = (int)kiln_tensor_dim(w, 2) / 2;
    return kiln_conv2d(ctx, x, w, NULL, &(kiln_conv2d_params){.stride = {stride, stride}, .padding = {pad, pad}});
}

static kiln_tensor *basic_block(kiln_ctx *ctx, const resnet_block *b, kiln_tensor *x, bool training) {
    kiln_tensor *h = kiln_relu(ctx, model_bn_forward(ctx, &b->bn1, conv(ctx, x, b->conv1_w, b->stride), training));
    h = model_bn_forward(ctx, &b->bn2, conv(ctx, h, b->conv2_w, 1), training);
    kiln_tensor *sc = b->down_w ? model_bn_forward(ctx, &b->down_bn, conv(ctx, x, b->down_w, b->stride), training) : x;
    return kiln_relu(ctx, kiln_add(ctx, h, sc));
}

kiln_tensor *resnet_forward(resnet *m, kiln_tensor *x, bool training) {
    kiln_ctx *ctx = m->ctx;
    kiln_tensor *h = kiln_relu(ctx, model_bn_forward(ctx, &m->bn1, conv(ctx, x, m->conv1_w, 1), training));
    for (int s = 0; s < m->cfg.stages; s++)
        for (int b = 0; b < m->cfg.blocks[s]; b++) h = basic_block(ctx, &m->blocks[s][b], h, training);
    h = kiln_flatten(ctx, kiln_adaptive_avg_pool2d(ctx, h, 1, 1), 1);
    return kiln_linear(ctx, h, m->fc_w, m->fc_b);
}

static kiln_status build(resnet *m, int64_t batch, model_graph *out, bool train) {
    kiln_ctx *ctx = m->ctx;
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, train);
    *out = (model_graph){0};
    out->input = kiln_new_4d(ctx, KILN_F32, batch, m->cfg.channels, m->cfg.size, m->cfg.size);
    out->labels = kiln_tensor_new(ctx, KILN_I32, 1, (int64_t[]){batch});
    kiln_tensor *logits = out->input && out->labels ? resnet_forward(m, out->input, train) : NULL;
    kiln_tensor *loss = kiln_cross_entropy(ctx, logits, out->labels, -100);
    kiln_status s = model_graph_finish(ctx, out, logits, loss, train);
    kiln_ctx_set_grad_enabled(ctx, was);
    return s;
}

kiln_status resnet_train_graph(resnet *m, int64_t batch, model_graph *out) { return build(m, batch, out, true); }
kiln_status resnet_eval_graph(resnet *m, int64_t batch, model_graph *out) { return build(m, batch, out, false); }

int64_t resnet_param_count(const resnet *m) {
    const resnet_config *g = &m->cfg;
    int64_t in = g->widths[0], c = 9 * g->channels * in + 2 * in; /* the stem and its BN */
    for (int s = 0; s < g->stages; s++)
        for (int b = 0; b < g->blocks[s]; b++) {
            int64_t o = g->widths[s];
            c += 9 * in * o + 2 * o + 9 * o * o + 2 * o;
            if (m->blocks[s][b].down_w) c += in * o + 2 * o;
            in = o;
        }
    return c + (in + 1) * g->classes;
}
