/* sampler.c — the distributed sampler (kiln_dist.h): one order per epoch
 * from (seed, epoch), the same on every rank; each global batch cut into
 * size consecutive pieces, rank r taking piece r. */
#include "kiln_dist.h"

#include <stdlib.h>

struct kiln_dist_sampler {
    int64_t n_items, batch, local, cached_epoch;
    int rank, size;
    uint64_t seed;
    bool shuffle;
    int64_t *perm; /* the order of cached_epoch */
};

/* splitmix64: a small, portable generator for the shuffle */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

kiln_dist_sampler *kiln_dist_sampler_new(int64_t n_items, int64_t global_batch, uint64_t seed, bool shuffle) {
    int size = kiln_dist_size();
    if (n_items < 1 || global_batch < 1 || global_batch > n_items || global_batch % size)
        return kiln_set_error(KILN_ERR_ARG,
                              "kiln_dist_sampler_new: %lld items, global batch %lld on %d ranks (the batch must be "
                              "at most the items and a multiple of the ranks)",
                              (long long)n_items, (long long)global_batch, size),
               NULL;
    kiln_dist_sampler *s = calloc(1, sizeof *s);
    if (s) s->perm = malloc((size_t)n_items * sizeof *s->perm);
    if (!s || !s->perm) {
        if (s) free(s);
        return kiln_set_error(KILN_ERR_OOM, "kiln_dist_sampler_new: out of memory"), NULL;
    }
    *s = (kiln_dist_sampler){.n_items = n_items, .batch = global_batch, .local = global_batch / size,
                             .cached_epoch = -1, .rank = kiln_dist_rank(), .size = size, .seed = seed,
                             .shuffle = shuffle, .perm = s->perm};
    return s;
}

void kiln_dist_sampler_free(kiln_dist_sampler *s) {
    if (!s) return;
    free(s->perm);
    free(s);
}

int64_t kiln_dist_sampler_batches(const kiln_dist_sampler *s) { return s ? s->n_items / s->batch : 0; }
int64_t kiln_dist_sampler_local_batch(const kiln_dist_sampler *s) { return s ? s->local : 0; }

kiln_status kiln_dist_sampler_batch(kiln_dist_sampler *s, int64_t epoch, int64_t b, int64_t *idx) {
    if (!s || !idx || epoch < 0 || b < 0 || b >= kiln_dist_sampler_batches(s))
        return kiln_set_error(KILN_ERR_ARG, "kiln_dist_sampler_batch: bad sampler, epoch or batch index");
    if (s->cached_epoch != epoch) {
        for (int64_t i = 0; i < s->n_items; i++) s->perm[i] = i;
        uint64_t st = s->seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(epoch + 1));
        for (int64_t i = s->n_items - 1; s->shuffle && i > 0; i--) { /* Fisher-Yates */
            int64_t j = (int64_t)(mix(&st) % (uint64_t)(i + 1));
            int64_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
        s->cached_epoch = epoch;
    }
    const int64_t *src = s->perm + b * s->batch + (int64_t)s->rank * s->local;
    for (int64_t i = 0; i < s->local; i++) idx[i] = src[i];
    return KILN_OK;
}
