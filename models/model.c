/* model.c — parameters and graphs shared by the models (see model.h). */
#include "model.h"
#include "data.h"

/* splitmix64's finalizer: a well-mixed 64-bit value from any input. */
static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t model_param_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return mix(seed ^ mix(h));
}

kiln_tensor *model_param(kiln_ctx *ctx, const char *name, int ndim, const int64_t *shape, model_init init,
                         double arg, uint64_t seed) {
    kiln_tensor *p = kiln_param(ctx, name, KILN_F32, ndim, shape);
    if (!p) return NULL;
    uint64_t s = model_param_seed(seed, name);
    kiln_status st = KILN_OK;
    switch (init) {
    case MODEL_INIT_ZEROS: break; /* kiln_param's storage starts zeroed */
    case MODEL_INIT_ONES: st = kiln_tensor_fill(p, 1.0); break;
    case MODEL_INIT_NORMAL: st = kiln_tensor_fill_randn(p, s, 0.0, arg); break;
    case MODEL_INIT_LINEAR: st = kiln_tensor_init_linear(p, s, (int64_t)arg); break;
    }
    return st ? NULL : p;
}

bool model_bn_init(model_bn *bn, kiln_ctx *ctx, const char *prefix, int64_t channels) {
    char name[4][64];
    static const char *const what[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++)
        if (snprintf(name[i], sizeof name[i], "%s.%s", prefix, what[i]) >= (int)sizeof name[i]) {
            kiln_set_error(KILN_ERR_ARG, "model_bn_init: prefix '%s' is too long", prefix);
            return false;
        }
    const int64_t shape[1] = {channels};
    bn->weight = model_param(ctx, name[0], 1, shape, MODEL_INIT_ONES, 0, 0);
    bn->bias = model_param(ctx, name[1], 1, shape, MODEL_INIT_ZEROS, 0, 0);
    bn->running_mean = bn->bias ? kiln_buffer(ctx, name[2], KILN_F32, 1, shape) : NULL;
    bn->running_var = bn->running_mean ? kiln_buffer(ctx, name[3], KILN_F32, 1, shape) : NULL;
    return bn->running_var && !kiln_tensor_fill(bn->running_var, 1.0);
}

kiln_tensor *model_bn_forward(kiln_ctx *ctx, const model_bn *bn, kiln_tensor *x, bool training) {
    return kiln_batch_norm(ctx, x, bn->running_mean, bn->running_var, bn->weight, bn->bias, training,
                           MODEL_BN_MOMENTUM, MODEL_BN_EPS);
}

kiln_status model_graph_finish(kiln_ctx *ctx, model_graph *g, kiln_tensor *logits, kiln_tensor *loss, bool backward) {
    g->logits = logits;
    g->loss = loss;
    if (!(g->graph = kiln_graph_new(ctx))) return kiln_last_status();
    kiln_status s = kiln_graph_add(g->graph, logits);
    if (!s) s = kiln_graph_add(g->graph, loss);
    if (!s && backward) s = kiln_graph_backward(g->graph, loss);
    if (!s && !backward) kiln_graph_set_training(g->graph, false);
    return s;
}

int64_t model_count(kiln_tensor *const *list, int n) {
    int64_t c = 0;
    for (int i = 0; i < n; i++) c += list[i] ? kiln_tensor_numel(list[i]) : 0;
    return c;
}

double model_accuracy(model_graph *g, kiln_tensor *inputs, kiln_tensor *labels, int64_t max_batches) {
    int64_t batch = kiln_tensor_dim(g->input, 0), classes = kiln_tensor_dim(g->logits, 1), correct = 0, seen = 0;
    data_loader *dl = data_loader_new(inputs, labels, batch, 0, false, false);
    if (!dl) return -1;
    int64_t rows = 0;
    /* a short last batch has label DATA_IGNORE in its unused rows, which
     * the loss skips and the count below leaves out */
    for (int64_t b = 0; (!max_batches || b < max_batches) && (rows = data_loader_next(dl, g->input, g->labels)) > 0; b++) {
        if (kiln_graph_compute(g->graph)) {
            rows = -1;
            break;
        }
        const int32_t *y = kiln_tensor_data(g->labels);
        const float *logits = kiln_tensor_data(g->logits); /* copied back from a device if need be */
        if (!y || !logits) {
            rows = -1;
            break;
        }
        for (int64_t r = 0; r < rows; r++) {
            int best = 0;
            for (int c = 1; c < classes; c++)
                if (logits[r * classes + c] > logits[r * classes + best]) best = c;
            correct += best == y[r];
        }
        seen += rows;
    }
    data_loader_free(dl);
    return rows < 0 || seen == 0 ? -1 : (double)correct / (double)seen;
}

static struct {
    model_linear_hook fn;
    void *user;
} hooks[16];
static int n_hooks;

kiln_status model_linear_hook_add(model_linear_hook fn, void *user) {
    if (!fn) return kiln_set_error(KILN_ERR_ARG, "model_linear_hook_add: fn is NULL");
    if (n_hooks == (int)(sizeof hooks / sizeof *hooks))
        return kiln_set_error(KILN_ERR_STATE, "model_linear_hook_add: %d hooks are registered already", n_hooks);
    hooks[n_hooks].fn = fn, hooks[n_hooks].user = user;
    n_hooks++;
    return KILN_OK;
}

void model_linear_hook_remove(model_linear_hook fn, void *user) {
    for (int i = 0; i < n_hooks; i++)
        if (hooks[i].fn == fn && hooks[i].user == user) {
            hooks[i] = hooks[--n_hooks];
            return;
        }
}

kiln_tensor *model_linear(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *perm, kiln_tensor *b) {
    kiln_tensor *x0 = x;
    if (perm && x) { /* x [..., in] -> [n, in] -> columns gathered by perm -> [..., in] */
        const int nd = kiln_tensor_ndim(x);
        int64_t shape[8];
        if (nd < 1 || nd > 8) {
            kiln_set_error(KILN_ERR_SHAPE, "model_linear: x has %d dims (1 to 8 with a perm)", nd);
            return NULL;
        }
        for (int i = 0; i < nd; i++) shape[i] = kiln_tensor_dim(x, i);
        kiln_tensor *x2 = kiln_reshape(ctx, kiln_contiguous(ctx, x), 2, (int64_t[]){-1, shape[nd - 1]});
        x2 = kiln_transpose(ctx, kiln_get_rows(ctx, kiln_transpose(ctx, x2, 0, 1), perm), 0, 1);
        x = kiln_reshape(ctx, kiln_contiguous(ctx, x2), nd, shape);
    }
    kiln_tensor *y = kiln_linear(ctx, x, w, b);
    for (int i = 0; i < n_hooks && y; i++) y = hooks[i].fn(hooks[i].user, ctx, x0, w, y);
    return y;
}
