/* engine.c — serve's engine over one llama_cache per slot, each slot's
 * entries run as one llama_cache_step after another (until llama_slots'
 * batched step is merged: then this file wraps it). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

struct engine {
    llama *m;
    int n_slots;
    llama_cache **cache;
};

engine *engine_new(llama *m, int n_slots, int64_t len) {
    engine *g = calloc(1, sizeof *g);
    if (g) g->cache = calloc((size_t)n_slots, sizeof *g->cache);
    if (!g || !g->cache) {
        free(g);
        kiln_set_error(KILN_ERR_OOM, "engine_new: out of memory for %d slots", n_slots);
        return NULL;
    }
    g->m = m, g->n_slots = n_slots;
    for (int i = 0; i < n_slots; i++)
        if (!(g->cache[i] = llama_cache_new(m, 1, len))) {
            engine_free(g);
            return NULL;
        }
    return g;
}

void engine_free(engine *g) {
    if (!g) return;
    for (int i = 0; i < g->n_slots; i++) llama_cache_free(g->cache[i]);
    free(g->cache), free(g);
}

static kiln_status check_slot(const engine *g, const char *call, int slot) {
    if (slot < 0 || slot >= g->n_slots)
        return kiln_set_error(KILN_ERR_ARG, "%s: slot %d is out of range (0 to %d)", call, slot, g->n_slots - 1);
    return KILN_OK;
}

kiln_status engine_clear(engine *g, int slot) {
    kiln_status s = check_slot(g, "engine_clear", slot);
    if (!s) g->cache[slot]->pos = 0;
    return s;
}

int64_t engine_pos(const engine *g, int slot) {
    return check_slot(g, "engine_pos", slot) ? -1 : g->cache[slot]->pos;
}

kiln_status engine_step(engine *g, int n, const int *slots, const int32_t *tokens, const bool *want, float *logits) {
    int64_t vocab = g->m->cfg.vocab, out = 0;
    /* a run: consecutive entries of one slot, ending at one that wants its logits */
    for (int i = 0; i < n;) {
        kiln_status s = check_slot(g, "engine_step", slots[i]);
        if (s) return s;
        llama_cache *c = g->cache[slots[i]];
        int j = i;
        while (j + 1 < n && slots[j + 1] == slots[i] && !want[j]) j++;
        if (c->pos + (j - i + 1) > c->len)
            return kiln_set_error(KILN_ERR_ARG, "engine_step: slot %d is full (%lld of %lld positions)", slots[i],
                                  (long long)c->pos, (long long)c->len);
        float *z = want[j] ? logits + out * vocab : NULL;
        if (!z) { /* llama_cache_step always writes the last logits */
            float *tmp = malloc((size_t)vocab * sizeof *tmp);
            if (!tmp) return kiln_set_error(KILN_ERR_OOM, "engine_step: out of memory");
            s = llama_cache_step(g->m, c, tokens + i, j - i + 1, tmp);
            free(tmp);
        } else {
            s = llama_cache_step(g->m, c, tokens + i, j - i + 1, z);
            out++;
        }
        if (s) return s;
        i = j + 1;
    }
    return KILN_OK;
}
