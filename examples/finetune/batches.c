/* batches.c — the windows of the token stream that batches are cut from,
 * their order in each epoch, and the mean loss over a set of them. */
#include "finetune.h"

#include <math.h>
#include <stdlib.h>

windows windows_of(const corpus *c, int64_t first, int64_t n, int64_t seq) {
    return (windows){.c = c, .first = first, .n = n, .seq = seq, .count = n > seq ? (n - 1) / seq : 0};
}

/* splitmix64: the permutation's generator, a function of (seed, epoch) */
static uint64_t mix(uint64_t *s) {
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void windows_order(int64_t *order, int64_t count, uint64_t seed, int64_t epoch) {
    uint64_t s = seed ^ ((uint64_t)epoch * 0xd1b54a32d192ed03ull);
    for (int64_t i = 0; i < count; i++) order[i] = i;
    for (int64_t i = count - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)(mix(&s) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

int64_t fill_batch(const model_graph *g, const windows *w, const int64_t *idx, int64_t k, int64_t batch) {
    int64_t seq = w->seq, counted = 0;
    int32_t *in = kiln_tensor_data(g->input), *lab = kiln_tensor_data(g->labels);
    if (!in || !lab) return -1;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < seq; t++) {
            int64_t at = b < k ? w->first + idx[b] * seq + t : -1;
            bool counts = at >= 0 && w->c->train[at + 1];
            in[b * seq + t] = at >= 0 ? w->c->ids[at] : 0;
            lab[b * seq + t] = counts ? w->c->ids[at + 1] : -100;
            counted += counts;
        }
    return counted;
}

double mean_loss(const model_graph *g, const windows *w, int64_t batch, int64_t max) {
    int64_t n = max > 0 && max < w->count ? max : w->count, *idx = malloc((size_t)batch * sizeof *idx);
    double sum = 0, labels = 0;
    for (int64_t i = 0; idx && i < n; i += batch) {
        int64_t k = n - i < batch ? n - i : batch;
        for (int64_t j = 0; j < k; j++) idx[j] = i + j;
        int64_t counted = fill_batch(g, w, idx, k, batch);
        if (counted < 0 || kiln_graph_compute(g->graph)) labels = -1, i = n;
        sum += kiln_tensor_item(g->loss) * (double)counted;
        labels += (double)counted;
    }
    free(idx);
    return labels > 0 ? sum / labels : NAN;
}
