/* graph_device.c — the executor's operands on a backend other than the
 * host: which nodes it claims and, on a device backend, moving bytes.
 *
 * Intermediates have the same offset in the device copy of the planned
 * buffer and, when some node falls back to the host, in the host one; per
 * compute, loc[] says which copy of each holds its current bytes, and an
 * operand is copied across only when the side that reads it lacks them.
 * Leaves and outputs keep their own copies (core/backend.c). Device work
 * is recorded as the nodes come and submitted once, at the end (or before
 * a copy that needs it).
 */
#include "graph.h"

static int *slot_of(kiln_graph *g, int i) { return g->owner_slot + (size_t)i * (KILN_MAX_SRC + 1); }

/* A node with an empty operand: the device kernels assume none, and such a
 * node either writes nothing (skipped by kiln__graph_dev_bring) or makes a
 * non-empty result from empty sources (a sum over an empty axis, a
 * product over K = 0), which the host backend's kernels handle. */
static bool empty_operand(const kiln_tensor *t) {
    bool empty = kiln_tensor_numel(t) == 0;
    for (int k = 0; k < t->nsrc && !empty; k++) empty = kiln_tensor_numel(t->src[k]) == 0;
    return empty;
}

kiln_status kiln__graph_schedule(kiln_graph *g, kiln_backend *b) {
    kiln_ctx *ctx = g->ctx;
    kiln_status s = kiln__owned_grow(ctx, (void **)&g->claimed, &g->claimed_cap, g->n, sizeof *g->claimed);
    if (!s) s = kiln__owned_grow(ctx, (void **)&g->loc, &g->loc_cap, g->n, sizeof *g->loc);
    if (!s) s = kiln__owned_grow(ctx, (void **)&g->owner_slot, &g->owner_cap, g->n * (KILN_MAX_SRC + 1), sizeof(int));
    if (s) return s;
    uint64_t gen = ++ctx->visit_gen;
    for (int i = 0; i < g->n; i++) {
        g->nodes[i]->visit = gen;
        g->nodes[i]->slot = i;
    }
    for (int i = 0; i < g->n; i++) {
        kiln_tensor *t = g->nodes[i];
        for (int k = 0; k <= KILN_MAX_SRC; k++) {
            kiln_tensor *o = k < t->nsrc ? kiln__owner(t->src[k]) : k == KILN_MAX_SRC ? kiln__owner(t) : NULL;
            /* placed in the planned buffer: a node of this graph without storage of its own */
            bool placed = o && o->visit == gen && !o->storage_bytes && kiln__op_table[o->op].kind == KILN_KIND_KERNEL;
            slot_of(g, i)[k] = placed ? o->slot : -1;
        }
        g->claimed[i] = kiln__op_table[t->op].kind == KILN_KIND_VIEW || (!empty_operand(t) && b->vt->supports(b, t));
    }
    if (g->sched_backend && g->sched_backend != b) { /* the device buffer belongs to the old backend */
        kiln__devbuf_free(ctx, g->dbuf);
        g->dbuf = NULL;
        g->dbuf_bytes = 0;
    }
    g->sched_backend = b;
    g->scheduled = true;
    return KILN_OK;
}

/* Bring placed node j's bytes to the device (to_dev) or to the host. */
static kiln_status move_placed(kiln_graph *g, kiln_backend *b, int j, bool to_dev) {
    size_t off = g->offs[j], n = kiln_tensor_nbytes(g->nodes[j]);
    kiln_status s;
    if (!n) { /* an empty tensor is current everywhere */
        g->loc[j] = KILN_AT_HOST | KILN_AT_DEV;
        return KILN_OK;
    }
    if (to_dev) {
        if ((s = b->vt->upload(b, g->dbuf, off, (char *)g->buf + off, n))) return s;
        g->stats.uploads++;
        g->stats.upload_bytes += (int64_t)n;
    } else {
        if ((s = b->vt->download(b, g->dbuf, off, (char *)g->buf + off, n))) return s;
        g->stats.downloads++;
        g->stats.download_bytes += (int64_t)n;
    }
    g->loc[j] |= to_dev ? KILN_AT_DEV : KILN_AT_HOST;
    return KILN_OK;
}

/* Make operand k of node i (k == KILN_MAX_SRC: its own storage) current on
 * the side that runs it. */
static kiln_status bring(kiln_graph *g, kiln_backend *b, int i, int k, bool to_dev) {
    kiln_tensor *t = g->nodes[i];
    int j = slot_of(g, i)[k];
    if (j >= 0) {
        uint8_t want = to_dev ? KILN_AT_DEV : KILN_AT_HOST;
        return g->loc[j] & want ? KILN_OK : move_placed(g, b, j, to_dev);
    }
    kiln_tensor *o = kiln__owner(k < KILN_MAX_SRC ? t->src[k] : t);
    if (!to_dev) {
        int64_t before = o->dev && !(o->where & KILN_AT_HOST) ? (int64_t)o->storage_bytes : -1;
        kiln_status s = kiln__host_read(o);
        if (!s && before >= 0) {
            g->stats.downloads++;
            g->stats.download_bytes += before;
        }
        return s;
    }
    return kiln__dev_read(b, o, &g->stats);
}

kiln_status kiln__graph_dev_resolve(kiln_graph *g, kiln_backend *b, int i) {
    kiln_tensor *t = g->nodes[i];
    if (t->view_src) {
        kiln_tensor *o = t->view_src;
        kiln_status s = slot_of(g, i)[KILN_MAX_SRC] < 0 ? kiln__dev_alloc(b, o) : KILN_OK;
        if (s) return s;
        t->data = o->data ? (char *)o->data + t->view_offs : NULL;
        t->dbuf = o->dbuf;
        t->doff = o->doff + t->view_offs;
    } else if (t->storage_bytes) {
        return kiln__dev_alloc(b, t);
    } else {
        t->data = g->buf ? (char *)g->buf + g->offs[i] : NULL;
        t->dbuf = g->dbuf;
        t->doff = g->offs[i];
    }
    return KILN_OK;
}

/* Operand k of node i was written on side `at`: only that copy is current. */
static void written(kiln_graph *g, int i, int k, uint8_t at) {
    int j = slot_of(g, i)[k];
    if (j >= 0) g->loc[j] = at;
    else kiln__owner(k < KILN_MAX_SRC ? g->nodes[i]->src[k] : g->nodes[i])->where = at;
}

/* Is src k of node j the chain's previous node (never stored, never moved)? */
static bool chain_link(const kiln_graph *g, int i, int j, int k) {
    return j > i && g->nodes[j]->src[k] == g->nodes[j - 1];
}

kiln_status kiln__graph_dev_bring(kiln_graph *g, kiln_backend *b, int i, int end, int acc, bool to_dev, bool *none) {
    /* an empty result: its (empty) bytes are current on both sides */
    if ((*none = !kiln_tensor_numel(g->nodes[end]))) {
        written(g, acc >= 0 ? acc : end, KILN_MAX_SRC, KILN_AT_HOST | KILN_AT_DEV);
        return KILN_OK;
    }
    kiln_status s = KILN_OK;
    for (int j = i; j <= end && !s; j++)
        for (int k = 0; k < g->nodes[j]->nsrc && !s; k++)
            if (!chain_link(g, i, j, k)) s = bring(g, b, j, k, to_dev);
    /* what is written in place is read first: the node's own storage, or the gradient a product adds into */
    if (!s && kiln__op_table[g->nodes[i]->op].kind == KILN_KIND_INPLACE) s = bring(g, b, i, KILN_MAX_SRC, to_dev);
    if (!s && acc >= 0) s = bring(g, b, acc, KILN_MAX_SRC, to_dev);
    return s;
}

void kiln__graph_dev_written(kiln_graph *g, int i, int end, int acc, uint8_t at) {
    /* an optimizer step also updates its state tensors, in place (batch
     * norm its running statistics) */
    kiln_tensor *t = g->nodes[i];
    for (int k = 0; k < t->nsrc; k++)
        if (kiln__writes_src(t, k)) written(g, i, k, at);
    written(g, acc >= 0 ? acc : end, KILN_MAX_SRC, at);
}

kiln_status kiln__graph_dev_buffers(kiln_graph *g, kiln_backend *b) {
    bool any_host = false;
    for (int i = 0; i < g->n; i++) any_host |= !g->claimed[i];
    if (g->dbuf_bytes < g->planned_bytes) {
        kiln__devbuf_free(g->ctx, g->dbuf);
        g->dbuf_bytes = 0;
        if (!(g->dbuf = kiln__devbuf_new(g->ctx, b, g->planned_bytes))) return kiln_last_status();
        g->dbuf_bytes = g->planned_bytes;
    }
    /* the host copy of the planned buffer exists only for nodes that fall back */
    if (any_host && (!g->buf || g->buf_bytes < g->planned_bytes)) {
        kiln__owned_free(g->ctx, g->buf);
        g->buf_bytes = 0;
        if (!(g->buf = kiln__owned_alloc(g->ctx, g->planned_bytes))) return kiln_last_status();
        g->buf_bytes = g->planned_bytes;
    }
    memset(g->loc, 0, (size_t)g->n);
    return KILN_OK;
}
