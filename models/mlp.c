/* mlp.c — the Fashion-MNIST multilayer perceptron (see mlp.h). */
#include "mlp.h"

#include <stdlib.h>

mlp_config mlp_defaults(void) { return (mlp_config){.inputs = 784, .hidden = 256, .classes = 10}; }

mlp *mlp_new(kiln_ctx *ctx, const mlp_config *cfg, uint64_t seed) {
    mlp_config c = cfg ? *cfg : mlp_defaults();
    if (!ctx || c.inputs < 1 || c.hidden < 1 || c.classes < 1) {
        kiln_set_error(KILN_ERR_ARG, "mlp_new: %s", ctx ? "inputs, hidden and classes must be >= 1" : "ctx is NULL");
        return NULL;
    }
    mlp *m = calloc(1, sizeof *m);
    if (!m) {
        kiln_set_error(KILN_ERR_OOM, "mlp_new: out of memory");
        return NULL;
    }
    m->ctx = ctx;
    m->cfg = c;
    m->fc1_w = model_param(ctx, "fc1.weight", 2, (int64_t[]){c.hidden, c.inputs}, MODEL_INIT_LINEAR, (double)c.inputs, seed);
    m->fc1_b = model_param(ctx, "fc1.bias", 1, (int64_t[]){c.hidden}, MODEL_INIT_LINEAR, (double)c.inputs, seed);
    m->fc2_w = model_param(ctx, "fc2.weight", 2, (int64_t[]){c.classes, c.hidden}, MODEL_INIT_LINEAR, (double)c.hidden, seed);
    m->fc2_b = model_param(ctx, "fc2.bias", 1, (int64_t[]){c.classes}, MODEL_INIT_LINEAR, (double)c.hidden, seed);
    kiln_tensor *list[4] = {m->fc1_w, m->fc1_b, m->fc2_w, m->fc2_b};
    for (int i = 0; i < 4; i++) {
        if (!list[i]) {
            free(m);
            return NULL;
        }
        m->params[m->n_params++] = list[i];
    }
    return m;
}

void mlp_free(mlp *m) { free(m); }

kiln_tensor *mlp_forward(mlp *m, kiln_tensor *x) {
    kiln_ctx *ctx = m->ctx;
    kiln_tensor *h = (m->cfg.dfp & 1 ? kiln_dfp_linear : kiln_linear)(ctx, x, m->fc1_w, m->fc1_b);
    return (m->cfg.dfp & 2 ? kiln_dfp_linear : kiln_linear)(ctx, kiln_relu(ctx, h), m->fc2_w, m->fc2_b);
}

static kiln_status build(mlp *m, int64_t batch, model_graph *out, bool train) {
    kiln_ctx *ctx = m->ctx;
    bool was = kiln_ctx_grad_enabled(ctx);
    kiln_ctx_set_grad_enabled(ctx, train);
    *out = (model_graph){0};
    out->input = kiln_new_2d(ctx, KILN_F32, batch, m->cfg.inputs);
    out->labels = kiln_tensor_new(ctx, KILN_I32, 1, (int64_t[]){batch});
    kiln_tensor *logits = out->input && out->labels ? mlp_forward(m, out->input) : NULL;
    kiln_tensor *loss = kiln_cross_entropy(ctx, logits, out->labels, -100);
    kiln_status s = model_graph_finish(ctx, out, logits, loss, train);
    kiln_ctx_set_grad_enabled(ctx, was);
    return s;
}

kiln_status mlp_train_graph(mlp *m, int64_t batch, model_graph *out) { return build(m, batch, out, true); }
kiln_status mlp_eval_graph(mlp *m, int64_t batch, model_graph *out) { return build(m, batch, out, false); }
int64_t mlp_param_count(const mlp *m) { return model_count(m->params, m->n_params); }
