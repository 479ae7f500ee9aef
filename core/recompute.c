/* recompute.c — gradient checkpointing as a graph rewrite (DESIGN
 * principle 5). kiln_checkpoint_begin/end tag the nodes built between them
 * with a segment; once kiln_graph_backward has appended a backward pass,
 * every backward node that reads a segment's activation reads a copy of it
 * instead, recomputed from what the segment keeps: its inputs, the
 * parameters, and the nodes that something outside the segment reads (its
 * outputs). Each copy is placed just before its first reader, so the
 * planner frees the forward activations after the forward pass and holds a
 * segment's copies only while its backward runs. A copy is the same op on
 * the same values, so gradients are bit for bit those without the rewrite;
 * dropout's mask depends on (seed, run, index) only, so a copy draws the
 * forward's mask. Nothing here names a backend. */
#include "graph.h"

kiln_status kiln_checkpoint_begin(kiln_ctx *ctx) {
    if (!ctx) return kiln__errs(KILN_ERR_ARG, "kiln_checkpoint_begin: ctx is NULL");
    if (ctx->segment_open)
        return kiln__errs(KILN_ERR_STATE, "kiln_checkpoint_begin: segment %d is still open (segments do not nest; "
                                          "call kiln_checkpoint_end first)", ctx->segment_open);
    ctx->segment_open = ++ctx->n_segments;
    return KILN_OK;
}

kiln_status kiln_checkpoint_end(kiln_ctx *ctx) {
    if (!ctx) return kiln__errs(KILN_ERR_ARG, "kiln_checkpoint_end: ctx is NULL");
    if (!ctx->segment_open)
        return kiln__errs(KILN_ERR_STATE, "kiln_checkpoint_end: no segment is open (no kiln_checkpoint_begin before it)");
    ctx->segment_open = 0;
    return KILN_OK;
}

typedef struct {
    kiln_graph *g;
    uint64_t gen;        /* forward nodes: visit == gen, slot == index */
    int n0;              /* forward nodes are g->nodes[0, n0) */
    bool *kept;          /* [n0]: read outside its segment, or an output */
    kiln_tensor **copy;  /* [n0]: its recomputed copy, once made */
    kiln_tensor **made;  /* the copies, in the order made (sources first) */
    int n_made, cap_made;
} rewrite;

/* t, or the copy the backward reads in its place (made with its sources). */
static kiln_tensor *recomputed(rewrite *r, kiln_tensor *t, kiln_status *s) {
    if (*s || !t || t->visit != r->gen || t->slot >= r->n0 || !t->segment || r->kept[t->slot]) return t;
    if (r->copy[t->slot]) return r->copy[t->slot];
    const kiln_op_info *info = &kiln__op_table[t->op];
    if (info->kind == KILN_KIND_INPLACE || (t->op == KILN_OP_BATCH_NORM && t->ip[2])) {
        *s = kiln__errs(KILN_ERR_UNSUPPORTED, "kiln_graph_backward: checkpoint segment %d holds %s ('%s'), which "
                                              "writes in place: recomputing it would write twice",
                        t->segment, info->name, t->name);
        return t;
    }
    kiln_tensor *c = kiln__arena_alloc(r->g->ctx, sizeof *c);
    if (!c) {
        *s = kiln_last_status();
        return t;
    }
    /* the node as its constructor made it: no storage, no device copy */
    c->ctx = t->ctx;
    c->dtype = t->dtype;
    c->ndim = t->ndim;
    memcpy(c->shape, t->shape, sizeof c->shape);
    memcpy(c->stride, t->stride, sizeof c->stride);
    c->op = t->op;
    c->nsrc = t->nsrc;
    memcpy(c->ip, t->ip, sizeof c->ip);
    memcpy(c->fp, t->fp, sizeof c->fp);
    c->flags = t->flags & KILN_FLAG_REQUIRES_GRAD;
    c->id = r->g->ctx->n_tensors++;
    memcpy(c->name, t->name, sizeof c->name);
    for (int k = 0; k < t->nsrc; k++) c->src[k] = recomputed(r, t->src[k], s);
    if (t->view_src) {
        c->view_src = recomputed(r, t->view_src, s);
        c->view_offs = t->view_offs;
        if (c->view_src->data) c->data = (char *)c->view_src->data + c->view_offs;
    }
    if (*s) return t;
    if (r->n_made == r->cap_made) {
        void *p = kiln__realloc(r->made, (size_t)(r->cap_made = r->cap_made ? 2 * r->cap_made : 64) * sizeof *r->made);
        if (!p) {
            *s = kiln__errs(KILN_ERR_OOM, "kiln_graph_backward: out of memory recomputing checkpoints");
            return t;
        }
        r->made = p;
    }
    r->made[r->n_made++] = c;
    return r->copy[t->slot] = c;
}

/* Append copy c after its sources that are copies not yet placed
 * (pending: visit == gen); placed ones get visit = gen + 1. */
static void place(kiln_tensor *c, uint64_t gen, kiln_tensor **out, int *n) {
    if (c->visit != gen) return;
    c->visit = gen + 1;
    for (int k = 0; k < c->nsrc; k++) place(c->src[k], gen, out, n);
    if (c->view_src) place(c->view_src, gen, out, n);
    out[(*n)++] = c;
}

kiln_status kiln__graph_recompute(kiln_graph *g, int n0) {
    kiln_ctx *ctx = g->ctx;
    rewrite r = {.g = g, .gen = ++ctx->visit_gen, .n0 = n0};
    r.kept = kiln__calloc((size_t)n0, sizeof *r.kept);
    r.copy = kiln__calloc((size_t)n0, sizeof *r.copy);
    kiln_tensor **order = NULL;
    kiln_status s = KILN_OK;
    if (!r.kept || !r.copy) {
        s = kiln__errs(KILN_ERR_OOM, "kiln_graph_backward: out of memory recomputing checkpoints");
        goto done;
    }
    for (int i = 0; i < n0; i++) {
        g->nodes[i]->visit = r.gen;
        g->nodes[i]->slot = i;
        r.kept[i] = (g->nodes[i]->flags & KILN_FLAG_OUTPUT) != 0;
    }
    /* what the forward reads across a segment's border stays */
    for (int i = 0; i < n0; i++) {
        kiln_tensor *t = g->nodes[i];
        for (int k = 0; k <= t->nsrc; k++) {
            kiln_tensor *o = k < t->nsrc ? t->src[k] : t->view_src;
            if (o && o->visit == r.gen && o->slot < n0 && o->segment != t->segment) r.kept[o->slot] = true;
        }
    }
    for (int i = n0; i < g->n && !s; i++) {
        kiln_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++) t->src[k] = recomputed(&r, t->src[k], &s);
        if (t->view_src) t->view_src = recomputed(&r, t->view_src, &s);
    }
    if (s || !r.n_made) goto done;
    /* the backward's order, each copy just before its first reader */
    int nb = g->n - n0, n = 0;
    order = kiln__malloc((size_t)(nb + r.n_made) * sizeof *order);
    if (!order || (s = kiln__owned_grow(ctx, (void **)&g->nodes, &g->cap, g->n + r.n_made, sizeof *g->nodes))) {
        if (!s) s = kiln__errs(KILN_ERR_OOM, "kiln_graph_backward: out of memory recomputing checkpoints");
        goto done;
    }
    uint64_t pending = ++ctx->visit_gen;
    ctx->visit_gen++; /* pending + 1: placed */
    for (int i = 0; i < r.n_made; i++) r.made[i]->visit = pending;
    for (int i = n0; i < g->n; i++) {
        kiln_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++) place(t->src[k], pending, order, &n);
        if (t->view_src) place(t->view_src, pending, order, &n);
        order[n++] = t;
    }
    memcpy(g->nodes + n0, order, (size_t)n * sizeof *order);
    g->n = n0 + n;
done:
    free(r.kept);
    free(r.copy);
    free(r.made);
    free(order);
    return s;
}
