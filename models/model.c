/* model.c — parameters and graphs shared by the models (see model.h). */
#include "model.h"

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
