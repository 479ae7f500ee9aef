/* cnn.c — the small convolutional net for 28x28 images (see cnn.h). */
#include "cnn.h"

#include <stdlib.h>

cnn_config cnn_defaults(void) { return (cnn_config){.channels = 1, .size = 28, .c1 = 16, .c2 = 32, .hidden = 128, .classes = 10}; }

cnn *cnn_new(kiln_ctx *ctx, const cnn_config *cfg, uint64_t seed) {
    cnn_config c = cfg ? *cfg : cnn_defaults();
    if (!ctx || c.channels < 1 || c.size < 4 || c.size % 4 || c.c1 < 1 || c.c2 < 1 || c.hidden < 0 || c.classes < 1) {
        kiln_set_error(KILN_ERR_ARG, "cnn_new: %s",
                       ctx ? "channels, c1, c2, classes must be >= 1 and size a multiple of 4" : "ctx is NULL");
        return NULL;
    }
    cnn *m = calloc(1, sizeof *m);
    if (!m) {
        kiln_set_error(KILN_ERR_OOM, "cnn_new: out of memory");
        return NULL;
    }
    m->ctx = ctx;
    m->cfg = c;
    int64_t q = c.size / 4, flat = c.c2 * q * q;
    double fan1 = (double)(c.channels * 9), fan2 = (double)(c.c1 * 9);
    m->conv1_w = model_param(ctx, "conv1.weight", 4, (int64_t[]){c.c1, c.channels, 3, 3}, MODEL_INIT_LINEAR, fan1, seed);
    m->conv1_b = model_param(ctx, "conv1.bias", 1, (int64_t[]){c.c1}, MODEL_INIT_LINEAR, fan1, seed);
    m->conv2_w = model_param(ctx, "conv2.weight", 4, (int64_t[]){c.c2, c.c1, 3, 3}, MODEL_INIT_LINEAR, fan2, seed);
    m->conv2_b = model_param(ctx, "conv2.bias", 1, (int64_t[]){c.c2}, MODEL_INIT_LINEAR, fan2, seed);
    if (c.hidden > 0) {
        m->hidden_w = model_param(ctx, "fc1.weight", 2, (int64_t[]){c.hidden, flat}, MODEL_INIT_LINEAR, (double)flat, seed);
        m->hidden_b = model_param(ctx, "fc1.bias", 1, (int64_t[]){c.hidden}, MODEL_INIT_LINEAR, (double)flat, seed);
    }
    int64_t in = c.hidden > 0 ? c.hidden : flat;
    m->fc_w = model_param(ctx, c.hidden > 0 ? "fc2.weight" : "fc.weight", 2, (int64_t[]){c.classes, in},
                          MODEL_INIT_LINEAR, (double)in, seed);
    m->fc_b = model_param(ctx, c.hidden > 0 ? "fc2.bias" : "fc.bias", 1, (int64_t[]){c.classes}, MODEL_INIT_LINEAR,
                          (double)in, seed);
    kiln_tensor *list[8] = {m->conv1_w, m->conv1_b, m->conv2_w, m->conv2_b, m->hidden_w, m->hidden_b, m->fc_w, m->fc_b};
    for (int i = 0; i < 8; i++) {
        if (i == 4 && c.hidden == 0) i = 6;
        if (!list[i]) {
            free(m);
            return NULL;
        }
        m->params[m->n_params++] = list[i];
    }
    return m;
}

void cnn_free(cnn *m) { free(m); }

/* conv -> 2x2 max-pool -> + bias -> ReLU: the same values as conv with
 * its bias, ReLU, then the pool (a max commutes with adding a per-channel
 * constant and with ReLU, both monotone, also under rounding), but the
 * bias add and ReLU and their gradients touch a quarter of the pixels, and
 * the pool reads the convolution's product in place (ops/conv.c), so the
 * layer makes no permuted copy in either direction. */
static kiln_tensor *conv_block(cnn *m, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, bool dfp) {
    kiln_ctx *ctx = m->ctx;
    kiln_conv2d_params same = {.padding = {1, 1}};
    kiln_tensor *h = (dfp ? kiln_dfp_conv2d : kiln_conv2d)(ctx, x, w, NULL, &same);
    h = kiln_max_pool2d(ctx, h, 2, 2, 0, 0);
    return kiln_relu(ctx, kiln_add(ctx, h, kiln_reshape(ctx, b, 4, (int64_t[]){1, kiln_tensor_dim(b, 0), 1, 1})));
}

kiln_tensor *cnn_forward(cnn *m, kiln_tensor *x) {
    kiln_ctx *ctx = m->ctx;
    const unsigned d = m->cfg.dfp;
    kiln_tensor *h = conv_block(m, x, m->conv1_w, m->conv1_b, d & 1);
    h = conv_block(m, h, m->conv2_w, m->conv2_b, d & 2);
    h = kiln_flatten(ctx, h, 1);
    if (m->hidden_w) h = kiln_relu(ctx, (d & 4 ? kiln_dfp_linear : kiln_linear)(ctx, h, m->hidden_w, m->hidden_b));
    return (d & 8 ? kiln_dfp_linear : kiln_linear)(ctx, h, m->fc_w, m->fc_b);
}

static kiln_status build(cnn *m, int64_t batch, model_graph *out, bool train) {
    kiln_ctx *ctx = m->ctx;
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, train);
    *out = (model_graph){0};
    out->input = kiln_new_4d(ctx, KILN_F32, batch, m->cfg.channels, m->cfg.size, m->cfg.size);
    out->labels = kiln_tensor_new(ctx, KILN_I32, 1, (int64_t[]){batch});
    kiln_tensor *logits = out->input && out->labels ? cnn_forward(m, out->input) : NULL;
    kiln_tensor *loss = kiln_cross_entropy(ctx, logits, out->labels, -100);
    kiln_status s = model_graph_finish(ctx, out, logits, loss, train);
    kiln_ctx_set_grad_enabled(ctx, was);
    return s;
}

kiln_status cnn_train_graph(cnn *m, int64_t batch, model_graph *out) { return build(m, batch, out, true); }
kiln_status cnn_eval_graph(cnn *m, int64_t batch, model_graph *out) { return build(m, batch, out, false); }
int64_t cnn_param_count(const cnn *m) { return model_count(m->params, m->n_params); }
