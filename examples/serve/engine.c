/* engine.c — serve's engine: llama_slots (models/llama_slots.h), every
 * step one batched forward pass for all the slots. A model it does not
 * take (Gemma 2's soft-capped attention) runs on one llama_cache per slot
 * instead, each slot's entries one llama_cache_step after another: served
 * the same, without the batching's throughput. */
#include "engine.h"

#include "llama_slots.h"

#include <stdlib.h>
#include <string.h>

struct engine {
    llama *m;
    int n_slots;
    llama_slots *batched;
    llama_cache **cache; /* [n_slots] where batched is NULL */
};

engine *engine_new(llama *m, int n_slots, int64_t len) {
    engine *g = calloc(1, sizeof *g);
    if (!g) {
        kiln_set_error(KILN_ERR_OOM, "engine_new: out of memory");
        return NULL;
    }
    g->m = m, g->n_slots = n_slots;
    if ((g->batched = llama_slots_new(m, n_slots, len))) return g;
    if (kiln_last_status() != KILN_ERR_UNSUPPORTED) {
        free(g);
        return NULL;
    }
    if (!(g->cache = calloc((size_t)n_slots, sizeof *g->cache))) {
        free(g);
        kiln_set_error(KILN_ERR_OOM, "engine_new: out of memory for %d slots", n_slots);
        return NULL;
    }
    for (int i = 0; i < n_slots; i++)
        if (!(g->cache[i] = llama_cache_new(m, 1, len))) {
            engine_free(g);
            return NULL;
        }
    return g;
}

bool engine_batched(const engine *g) { return g->batched != NULL; }

void engine_free(engine *g) {
    if (!g) return;
    llama_slots_free(g->batched);
    for (int i = 0; g->cache && i < g->n_slots; i++) llama_cache_free(g->cache[i]);
    free(g->cache), free(g);
}

static kiln_status check_slot(const engine *g, const char *call, int slot) {
    if (slot < 0 || slot >= g->n_slots)
        return kiln_set_error(KILN_ERR_ARG, "%s: slot %d is out of range (0 to %d)", call, slot, g->n_slots - 1);
    return KILN_OK;
}

kiln_status engine_clear(engine *g, int slot) {
    if (g->batched) return llama_slots_clear(g->batched, slot);
    kiln_status s = check_slot(g, "engine_clear", slot);
    if (!s) g->cache[slot]->pos = 0;
    return s;
}

kiln_status engine_keep(engine *g, int slot, int64_t n) {
    if (g->batched) return llama_slots_keep(g->batched, slot, n);
    kiln_status s = check_slot(g, "engine_keep", slot);
    if (!s && (n < 0 || n > g->cache[slot]->pos))
        s = kiln_set_error(KILN_ERR_ARG, "engine_keep: n = %lld is outside 0 .. %lld, the positions slot %d holds",
                           (long long)n, (long long)g->cache[slot]->pos, slot);
    if (!s) g->cache[slot]->pos = n;
    return s;
}

int64_t engine_pos(const engine *g, int slot) {
    if (g->batched) return llama_slots_pos(g->batched, slot);
    return check_slot(g, "engine_pos", slot) ? -1 : g->cache[slot]->pos;
}

kiln_status engine_step(engine *g, int n, const int *slots, const int32_t *tokens, const bool *want, float *logits) {
    if (g->batched) return llama_slots_step(g->batched, n, slots, tokens, want, logits);
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
