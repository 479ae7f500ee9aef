/* engine.c — serve's engine: llama_slots (models/llama_slots.h), every
 * step one batched forward pass for all the slots (Gemma 2's soft-capped
 * attention too: kiln_attention_cached_softcap). */
#include "engine.h"

#include "llama_slots.h"

#include <stdlib.h>

struct engine {
    llama_slots *slots;
};

engine *engine_new(llama *m, int n_slots, int64_t len) {
    engine *g = calloc(1, sizeof *g);
    if (!g) {
        kiln_set_error(KILN_ERR_OOM, "engine_new: out of memory");
        return NULL;
    }
    if (!(g->slots = llama_slots_new(m, n_slots, len))) free(g), g = NULL;
    return g;
}

void engine_free(engine *g) {
    if (g) llama_slots_free(g->slots);
    free(g);
}

kiln_status engine_clear(engine *g, int slot) { return llama_slots_clear(g->slots, slot); }

kiln_status engine_keep(engine *g, int slot, int64_t n) { return llama_slots_keep(g->slots, slot, n); }

int64_t engine_pos(const engine *g, int slot) { return llama_slots_pos(g->slots, slot); }

kiln_status engine_step(engine *g, int n, const int *slots, const int32_t *tokens, const bool *want, float *logits) {
    return llama_slots_step(g->slots, n, slots, tokens, want, logits);
}
