/* llama_slots.h — batched decoding: n_slots independent sequences over one
 * llama, each in a slot of one KV cache ([n_slots, kv_heads, len, hd] per
 * layer), run together by llama_slots_step: every step's tokens (a prompt
 * chunk of one slot, the next token of others, each at its slot's own
 * position) go through ONE forward pass, so the linear layers read their
 * weights once for all the sequences (continuous batching: what makes a
 * server's throughput grow with its users), and each token attends over
 * its own slot's positions only (kiln_attention_cached). A slot's logits
 * are a single sequence's through llama_cache_step, up to float rounding
 * from the batch's shape (tests/test_llama_slots.c says how close).
 *
 *     llama_slots *s = llama_slots_new(m, 4, 512);
 *     // slot 0's prompt (3 tokens) and slot 1's next token, one pass
 *     int slots[] = {0, 0, 0, 1};
 *     int32_t tokens[] = {1, 15043, 29892, next1};
 *     bool want[] = {false, false, true, true};
 *     float logits[2 * vocab]; // slot 0's last prompt position, then slot 1's
 *     if (llama_slots_step(s, 4, slots, tokens, want, logits)) puts(kiln_last_error());
 *     ...
 *     llama_slots_clear(s, 1); // slot 1's sequence is done: free for another
 *     llama_slots_free(s);
 *
 * Every step computes a rows graph (llama.h's llama_rows_graph) of its n
 * entries whose k wanted rows are gathered before the head. Graphs for
 * the steps that recur are stored, made in the model's context at their
 * first compute and computed again, so a device replays one recording
 * per step: a decoding step's (at most n_slots entries that all want
 * logits), and on a device up to 8 others (a prompt chunk beside the
 * generating slots), each made at the second of the last 8 steps with
 * its (n, k). Any other step makes its own graph between
 * kiln_ctx_get_mark and kiln_ctx_rewind: the context does not grow from
 * step to step. So a slots object holds at most n_slots + 8 graphs; their
 * device buffers go with llama_slots_free, their metadata with the
 * context. Rewinding the context to a mark made before the slots' first
 * step frees them: the slots must not step again then. One thread
 * at a time per model. */
#ifndef LLAMA_SLOTS_H
#define LLAMA_SLOTS_H

#include "llama.h"

typedef struct llama_slots llama_slots;

/* n_slots independent sequences over one model, each with up to len
 * positions of KV cache (len <= the model's context). NULL on failure
 * (kiln_last_error). */
llama_slots *llama_slots_new(llama *m, int n_slots, int64_t len);
void llama_slots_free(llama_slots *s); /* the struct; the cache lives in the model's context */

/* Forget slot's sequence (its positions become free for a new one). */
kiln_status llama_slots_clear(llama_slots *s, int slot);

/* Cut slot back to its first n positions (those from n on are forgotten;
 * the next step appends at n): a new sequence that shares a prefix of n
 * tokens with the held one keeps them instead of computing them again (a
 * server's prompt cache). n outside 0 .. the positions held is an error
 * naming it, and changes nothing. */
kiln_status llama_slots_keep(llama_slots *s, int slot, int64_t n);

/* Positions slot holds so far (-1 for a slot out of range). */
int64_t llama_slots_pos(const llama_slots *s, int slot);

/* The stored rows graph that serves steps of n entries of which k want
 * logits; NULL if none was made. */
const llama_rows_graph *llama_slots_graph(const llama_slots *s, int n, int k);

/* One batched step: n entries; entry i appends tokens[i] to slot slots[i]
 * at that slot's next position (a slot may appear several times, in
 * order: a prompt chunk). For entries with want[i] true, their logits
 * [vocab] go to logits in entry order (want NULL: none). All entries go
 * through one forward pass. n = 0 does nothing. Errors (a slot out of
 * range, a slot that would be full, a token outside the vocabulary) name
 * the entry and the value, and change nothing. */
kiln_status llama_slots_step(llama_slots *s, int n, const int *slots, const int32_t *tokens, const bool *want,
                             float *logits);

#endif
