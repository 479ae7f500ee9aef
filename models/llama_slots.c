/* llama_slots.c — batched decoding over a KV cache with a slot per
 * sequence (see llama_slots.h): the bookkeeping of the slots' positions
 * and of the stored rows graphs (llama.h) that compute the steps: which
 * (entries, logits rows) keys have one, which were seen lately. */
#include "llama_slots.h"

#include <stdlib.h>

/* Stored graphs besides the decoding steps', and the recent keys a step
 * computed with a graph of its own (llama_slots.h says why). */
enum { MIXED_GRAPHS = 8, SEEN_KEYS = 8 };

struct llama_slots {
    llama *m;
    llama_cache *cache; /* batch n_slots: slot i is the cache's sequence i */
    int n_slots;
    int64_t *pos, *next; /* [n_slots] each: positions each slot holds; a step's next ones */
    int32_t *seq, *at, *rows; /* a step's scratch, cap entries each */
    int cap;
    llama_rows_graph *graphs; /* [n_slots + MIXED_GRAPHS], n_graphs of them made */
    int n_graphs, n_mixed;
    int64_t seen[SEEN_KEYS][2]; /* (n, k) of recent steps that made a graph of their own */
    int seen_next;
};

llama_slots *llama_slots_new(llama *m, int n_slots, int64_t len) {
    if (!m || n_slots < 1 || len < 1 || len > m->cfg.context) {
        kiln_set_error(KILN_ERR_ARG, "llama_slots_new: needs a model, n_slots = %d >= 1 and len = %lld in 1 .. %lld",
                       n_slots, (long long)len, m ? (long long)m->cfg.context : 0LL);
        return NULL;
    }
    llama_slots *s = calloc(1, sizeof *s);
    if (s) s->pos = calloc((size_t)n_slots * 2, sizeof *s->pos);
    if (s) s->graphs = calloc((size_t)n_slots + MIXED_GRAPHS, sizeof *s->graphs);
    if (!s || !s->pos || !s->graphs) {
        if (s) free(s->pos), free(s->graphs);
        free(s);
        kiln_set_error(KILN_ERR_OOM, "llama_slots_new: out of memory");
        return NULL;
    }
    s->m = m;
    s->n_slots = n_slots;
    s->next = s->pos + n_slots;
    if (!(s->cache = llama_cache_new(m, n_slots, len))) {
        llama_slots_free(s);
        return NULL;
    }
    return s;
}

void llama_slots_free(llama_slots *s) {
    if (!s) return;
    for (int i = 0; s->graphs && i < s->n_graphs; i++) llama_rows_free(&s->graphs[i]);
    free(s->graphs);
    llama_cache_free(s->cache);
    free(s->pos);
    free(s->seq);
    free(s);
}

kiln_status llama_slots_clear(llama_slots *s, int slot) {
    if (!s) return kiln_set_error(KILN_ERR_ARG, "llama_slots_clear: NULL slots");
    if (slot < 0 || slot >= s->n_slots)
        return kiln_set_error(KILN_ERR_ARG, "llama_slots_clear: slot %d is outside 0 .. %d", slot, s->n_slots - 1);
    s->pos[slot] = 0;
    return KILN_OK;
}

/* Only pos moves: attention reads a slot's positions below each entry's
 * own, so what lies beyond n is never read before a step writes it again. */
kiln_status llama_slots_keep(llama_slots *s, int slot, int64_t n) {
    if (!s) return kiln_set_error(KILN_ERR_ARG, "llama_slots_keep: NULL slots");
    if (slot < 0 || slot >= s->n_slots)
        return kiln_set_error(KILN_ERR_ARG, "llama_slots_keep: slot %d is outside 0 .. %d", slot, s->n_slots - 1);
    if (n < 0 || n > s->pos[slot])
        return kiln_set_error(KILN_ERR_ARG, "llama_slots_keep: n = %lld is outside 0 .. %lld, the positions slot %d "
                              "holds", (long long)n, (long long)s->pos[slot], slot);
    s->pos[slot] = n;
    return KILN_OK;
}

int64_t llama_slots_pos(const llama_slots *s, int slot) {
    return s && slot >= 0 && slot < s->n_slots ? s->pos[slot] : -1;
}

const llama_rows_graph *llama_slots_graph(const llama_slots *s, int n, int k) {
    for (int i = 0; s && i < s->n_graphs; i++)
        if (s->graphs[i].n == n && s->graphs[i].k == k) return &s->graphs[i];
    return NULL;
}

/* The stored graph for steps of n entries and k logits rows: found, or
 * made now (at its first compute) for a decoding step (a token per slot,
 * all wanting logits) or, on a device, for a key seen lately while room
 * is left; NULL: the step makes a graph of its own, its key remembered. */
static llama_rows_graph *stored(llama_slots *s, int n, int k) {
    llama_rows_graph *r = (llama_rows_graph *)llama_slots_graph(s, n, k);
    if (r) return r;
    bool decoding = k == n && n <= s->n_slots, seen = false;
    for (int i = 0; i < SEEN_KEYS; i++) seen |= s->seen[i][0] == n && s->seen[i][1] == k;
    if (decoding || (seen && s->n_mixed < MIXED_GRAPHS && llama_on_device(s->m))) {
        s->n_mixed += !decoding;
        return &s->graphs[s->n_graphs++]; /* zeroed: made at its first compute */
    }
    s->seen[s->seen_next][0] = n, s->seen[s->seen_next][1] = k;
    s->seen_next = (s->seen_next + 1) % SEEN_KEYS;
    return NULL;
}

/* room for n entries in the step's scratch (kept between steps) */
static kiln_status reserve(llama_slots *s, int n) {
    if (n <= s->cap) return KILN_OK;
    int32_t *p = realloc(s->seq, (size_t)n * 3 * sizeof *p);
    if (!p) return kiln_set_error(KILN_ERR_OOM, "llama_slots_step: out of memory for %d entries", n);
    s->seq = p, s->at = p + n, s->rows = p + 2 * n;
    s->cap = n;
    return KILN_OK;
}

/* Each entry's slot and token in range and every slot's new positions
 * within the cache; fills seq, at (the positions) and rows (the wanted
 * entries, *n_rows of them). */
static kiln_status check(llama_slots *s, int n, const int *slots, const int32_t *tokens, const bool *want,
                         int *n_rows) {
    const int64_t vocab = s->m->cfg.vocab, len = s->cache->len;
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= s->n_slots)
            return kiln_set_error(KILN_ERR_ARG, "llama_slots_step: entry %d's slot %d is outside 0 .. %d", i, slots[i],
                                  s->n_slots - 1);
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return kiln_set_error(KILN_ERR_ARG,
                                  "llama_slots_step: entry %d's token %d is outside the vocabulary 0 .. %lld", i,
                                  (int)tokens[i], (long long)(vocab - 1));
    }
    *n_rows = 0;
    for (int i = 0; i < s->n_slots; i++) s->next[i] = s->pos[i];
    for (int i = 0; i < n; i++) { /* an entry's position: its slot's next one */
        int64_t at = s->next[slots[i]]++;
        if (at >= len)
            return kiln_set_error(KILN_ERR_ARG,
                                  "llama_slots_step: slot %d is full: entry %d would be its position %lld of %lld",
                                  slots[i], i, (long long)at, (long long)len);
        s->seq[i] = slots[i], s->at[i] = (int32_t)at;
        if (want && want[i]) s->rows[(*n_rows)++] = i;
    }
    return KILN_OK;
}

kiln_status llama_slots_step(llama_slots *s, int n, const int *slots, const int32_t *tokens, const bool *want,
                             float *logits) {
    if (!s || n < 0 || (n > 0 && (!slots || !tokens)))
        return kiln_set_error(KILN_ERR_ARG, "llama_slots_step: needs slots, n = %d >= 0, and the entries' slots "
                              "and tokens", n);
    if (n == 0) return KILN_OK;
    int n_rows = 0;
    kiln_status st = reserve(s, n);
    if (!st) st = check(s, n, slots, tokens, want, &n_rows);
    if (!st && n_rows > 0 && !logits)
        st = kiln_set_error(KILN_ERR_ARG, "llama_slots_step: %d entries want logits but logits is NULL", n_rows);
    if (st) return st;
    /* made outside any mark: a stored graph stays for the next such step */
    llama_rows_graph *r = stored(s, n, n_rows);
    if (r) st = llama_rows_compute(s->m, s->cache, r, n, tokens, s->seq, s->at, n_rows, s->rows, logits);
    else st = llama_rows_compute_once(s->m, s->cache, n, tokens, s->seq, s->at, n_rows, s->rows, logits);
    for (int i = 0; i < s->n_slots && !st; i++) s->pos[i] = s->next[i];
    return st;
}
