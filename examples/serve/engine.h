/* engine.h — the model behind serve's scheduler: n_slots sequences, each
 * with its own positions of KV cache, stepped together. The interface is
 * llama_slots' (models/llama_slots.h), which runs it in one batched pass
 * a step: one step takes entries of (slot, token), a slot's entries in
 * order (a prompt chunk), and gives the logits of the entries that want
 * them, in entry order.
 *
 *     engine *g = engine_new(m, 4, 2048);
 *     int slots[] = {0, 0, 1};  int32_t toks[] = {5, 6, 9};  bool want[] = {false, true, true};
 *     engine_step(g, 3, slots, toks, want, logits);   // logits [2, vocab]
 *     engine_clear(g, 0);                               // slot 0 takes a new sequence
 *     engine_keep(g, 1, 1);                             // slot 1 keeps its first position only
 */
#ifndef SERVE_ENGINE_H
#define SERVE_ENGINE_H

#include "kiln.h"
#include "llama.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct engine engine;

/* NULL on failure (kiln_last_error). */
engine *engine_new(llama *m, int n_slots, int64_t len);
void engine_free(engine *g);
kiln_status engine_clear(engine *g, int slot);
/* Cut slot back to its first n positions (llama_slots_keep). */
kiln_status engine_keep(engine *g, int slot, int64_t n);
int64_t engine_pos(const engine *g, int slot);
kiln_status engine_step(engine *g, int n, const int *slots, const int32_t *tokens, const bool *want, float *logits);

#endif
