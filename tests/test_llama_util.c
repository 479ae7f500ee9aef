/* test_llama_util.c — see test_llama_util.h. */
#include "test_llama_util.h"

#include <math.h>
#include <stdlib.h>

float *llama_test_logits(llama *m, const int32_t *tokens, int64_t n) {
    model_graph g;
    if (llama_eval_graph(m, 1, n, &g)) return NULL;
    float *out = malloc((size_t)(n * m->cfg.vocab) * sizeof *out);
    if (!out || kiln_tensor_set_i32(g.input, tokens, n) || kiln_graph_compute(g.graph) ||
        kiln_tensor_get_f32(g.logits, out, n * m->cfg.vocab)) {
        free(out);
        return NULL;
    }
    return out;
}

/* a plain loop: gcc 12's aarch64 vectorizer fails on an fmax reduction */
double llama_test_max_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (b ? b[i] : 0.0f));
        if (d > m) m = d;
    }
    return m;
}

void llama_test_randomize(llama *m, uint64_t seed, double sd) {
    for (int i = 0; i < m->n_params; i++) {
        const bool norm = kiln_tensor_ndim(m->params[i]) == 1;
        kiln_tensor_fill_randn(m->params[i], seed + (uint64_t)i, norm ? 1.0 : 0.0, norm ? 0.1 : sd);
    }
}
