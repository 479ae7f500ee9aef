/* graph_replay.c — a device graph computed again as one launch. kiln
 * builds a graph once and computes it many times (training steps, decoded
 * tokens); node by node, each compute pays a launch (CUDA) or a recorded
 * dispatch (Vulkan) per step. Here the backend records the steps' kernels
 * once (a CUDA graph, a Vulkan command buffer: vt->record_begin/end) and
 * later computes run that recording (vt->replay) while nothing it baked in
 * has changed. It records at the second compute under the same key, not
 * the first: a graph computed once (llama's decoding builds one per
 * token) or whose key changes at every compute (GaLore's and APOLLO's step
 * numbers, node parameters) would pay for a recording it never runs again.
 * Values that change at every run belong in device memory instead, where
 * a replay reads them anew (the optimizers' lr and step number: their
 * hyper leaf). What it baked in is the key: each node's op, dtype, shape,
 * strides and parameters, its operands' and its own device memory (as
 * vt->buffer_id names it) and offsets, the
 * plan's fused forms, training mode and the matmul precision; a changed
 * word (a new slice position, a longer KV cache, a buffer allocated anew)
 * records again. The key is compared whole, not hashed, so a change is
 * never missed. A graph keeps the last KILN_REPLAY_KEYS keys (core/graph.h),
 * each with its recording, the least lately used one giving way to a new
 * key: a step with two keys (GaLore's refresh steps and the others)
 * replays each instead of recording again after every switch.
 *
 * A compute through a recording first brings every step's operands (the
 * uploads, in the executor's order, before any kernel is queued, so a CUDA
 * capture sees no copy from the host) and then records or replays the
 * steps' kernels. Only graphs that run wholly on the device take this path
 * (a fallback to the host would need the device's results mid-graph);
 * training dropout reads its run number from device memory (vt->set_run).
 * Under $KILN_PROFILE the recording holds the steps' timers too (CUDA
 * event nodes, Vulkan timestamps in the command buffer), read after each
 * replay. $KILN_GRAPH_REPLAY=0 turns it off. kiln_graph_stats counts
 * recordings and replays. */
#include "graph.h"

static bool replay_env(void) {
    const char *env = getenv("KILN_GRAPH_REPLAY"); /* read each time: tests compare both paths */
    return !env || strcmp(env, "0");
}

bool kiln__replay_wanted(kiln_graph *g, kiln_backend *b) {
    if (!b->vt->record_begin || !replay_env()) return false;
    for (int i = 0; i < g->n; i++) {
        kiln_tensor *t = g->nodes[i];
        if (kiln__op_table[t->op].kind == KILN_KIND_VIEW || g->acc_node[i] == -2) continue;
        if (!g->claimed[i] || !b->vt->recordable(b, t)) return false;
    }
    return true;
}

static void key_drop(kiln_graph *g, kiln_replay_key *k) {
    if (k->rec) kiln__record_free(g->ctx, k->rec);
    k->rec = NULL;
    k->state = KILN_REC_NONE;
}

void kiln__replay_drop(kiln_graph *g) {
    for (int i = 0; i < KILN_REPLAY_KEYS; i++) key_drop(g, &g->rk[i]);
}

/* ---- the key ---- */

typedef struct key_writer {
    uint64_t *w;
    int n;
    uint64_t (*buffer_id)(const kiln_devbuf *d);
} key_writer;

static void put(key_writer *k, uint64_t v) { k->w[k->n++] = v; }
static void put_f(key_writer *k, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put(k, u);
}
static void put_layout(key_writer *k, const kiln_tensor *t) {
    put(k, (uint64_t)t->dtype << 32 | (uint32_t)t->ndim);
    for (int d = 0; d < t->ndim; d++) {
        put(k, (uint64_t)t->shape[d]);
        put(k, (uint64_t)t->stride[d]);
    }
    put(k, t->dbuf ? k->buffer_id(t->dbuf) : 0);
    put(k, (uint64_t)t->doff);
}

/* The most words node t's part of the key takes. */
static int key_words(const kiln_tensor *t) {
    return 4 + KILN_MAX_IP + KILN_MAX_FP + (1 + t->nsrc) * (4 + 2 * KILN_MAX_DIMS);
}

/* The key of g's steps as resolved for this compute, into g->key_new. */
static kiln_status build_key(kiln_graph *g, kiln_backend *b, const kiln_exec *ex, int *n_words) {
    int need = 2;
    for (int i = 0; i < g->n; i++) need += key_words(g->nodes[i]);
    kiln_status s = kiln__owned_grow(g->ctx, (void **)&g->key_new, &g->key_new_cap, need, sizeof *g->key_new);
    if (s) return s;
    key_writer k = {g->key_new, 0, b->vt->buffer_id};
    put(&k, (uint64_t)ex->training);
    put(&k, (uint64_t)kiln_get_matmul_precision());
    for (int i = 0; i < g->n; i++) {
        const kiln_tensor *t = g->nodes[i];
        put(&k, (uint64_t)t->op << 32 | (uint32_t)t->nsrc);
        put(&k, (uint64_t)(uint32_t)g->chain_end[i] << 32 | (uint32_t)g->acc_node[i]);
        for (int j = 0; j < KILN_MAX_IP; j++) put(&k, (uint64_t)t->ip[j]);
        for (int j = 0; j < KILN_MAX_FP; j++) put_f(&k, t->fp[j]);
        put_layout(&k, t);
        for (int j = 0; j < t->nsrc; j++) {
            put(&k, (uint64_t)(uintptr_t)t->src[j]);
            if (t->src[j]) put_layout(&k, t->src[j]);
        }
    }
    *n_words = k.n;
    return KILN_OK;
}

/* ---- a compute through a recording ---- */

kiln_status kiln__graph_replay(kiln_graph *g, kiln_backend *b, kiln_exec *ex) {
    int64_t nodes = 0;
    int n_words = 0;
    kiln_status s = kiln__graph_steps(g, b, ex, KILN_STEP_BRING, &nodes);
    if (!s) s = build_key(g, b, ex, &n_words);
    if (s) return s;
    kiln_replay_key *k = NULL, *old = &g->rk[0];
    for (int i = 0; i < KILN_REPLAY_KEYS && !k; i++) {
        kiln_replay_key *c = &g->rk[i];
        if (c->state && c->backend == b && c->n == n_words && !memcmp(c->key, g->key_new, (size_t)n_words * sizeof *c->key))
            k = c;
        else if (c->used < old->used)
            old = c;
    }
    if (k && k->rec) {
        if ((s = b->vt->replay(b, k->rec))) return s;
        k->used = ++g->rk_clock;
        g->stats.replays++;
        g->stats.nodes_on_backend += k->nodes;
        return KILN_OK;
    }
    if (!k) { /* a key not seen lately: it takes the place of the least lately used one, runs node by node */
        key_drop(g, old);
        uint64_t *w = old->key;
        int cap = old->cap;
        old->key = g->key_new, old->cap = g->key_new_cap, old->n = n_words;
        g->key_new = w, g->key_new_cap = cap;
        old->state = KILN_REC_SEEN;
        old->backend = b;
        old->used = ++g->rk_clock;
    } else if (k->state == KILN_REC_SEEN) { /* the second compute under this key: record it */
        kiln_record *r = NULL;
        k->used = ++g->rk_clock;
        if (!b->vt->record_begin(b)) {
            s = kiln__graph_steps(g, b, ex, KILN_STEP_RUN, &nodes);
            r = b->vt->record_end(b); /* even after an error: the backend records no more */
        }
        k->state = KILN_REC_FAILED;
        if (r && s) b->vt->record_free(b, r);
        if (r && !s) {
            if ((s = kiln__record_keep(g->ctx, b, r))) return s; /* it freed r */
            k->rec = r;
            k->state = KILN_REC_MADE;
            k->nodes = nodes;
            g->stats.recordings++;
            if ((s = b->vt->replay(b, r))) return s;
            g->stats.nodes_on_backend += nodes;
            return KILN_OK;
        }
        /* not recorded (the device refused, or a kernel failed, which the
         * plain run below reports): computes under this key run node by node */
    } else {
        k->used = ++g->rk_clock;
    }
    return kiln__graph_steps(g, b, ex, KILN_STEP_RUN, &g->stats.nodes_on_backend);
}
