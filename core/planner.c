/* planner.c — liveness-based placement of intermediates (as ggml-alloc):
 * walk the nodes in execution order, give each kernel output a place in
 * one buffer when it is produced, and return the place when the last node
 * that reads it (directly or through a view) has run. A chain of
 * element-wise ops then needs two buffers, whatever its depth. A fused
 * chain (core/fuse.c, where the graph's backend runs them) counts as one
 * node at its end: what its members read stays live until the chain is
 * done, and its intermediates get no place; nor does a matmul that adds
 * straight into a gradient. */
#include "graph.h"

typedef struct {
    size_t off, size;
} block;

typedef struct {
    block *free; /* sorted by offset, coalesced */
    int n, cap;
    size_t top, peak;
} fit_alloc;

static size_t align_up(size_t n) { return (n + KILN_ALIGN - 1) & ~(size_t)(KILN_ALIGN - 1); }

/* First fit among freed blocks, else grow the top. An empty tensor takes
 * no place (its node writes nothing). */
static size_t fa_alloc(fit_alloc *a, size_t size) {
    if (!size) return 0;
    for (int i = 0; i < a->n; i++) {
        if (a->free[i].size < size) continue;
        size_t off = a->free[i].off;
        a->free[i].off += size;
        a->free[i].size -= size;
        if (!a->free[i].size) memmove(&a->free[i], &a->free[i + 1], (size_t)(--a->n - i) * sizeof(block));
        return off;
    }
    /* a free block touching the top can be extended */
    if (a->n && a->free[a->n - 1].off + a->free[a->n - 1].size == a->top) {
        size_t off = a->free[--a->n].off;
        a->top = off + size;
        if (a->top > a->peak) a->peak = a->top;
        return off;
    }
    size_t off = a->top;
    a->top += size;
    if (a->top > a->peak) a->peak = a->top;
    return off;
}

static int fa_free(fit_alloc *a, size_t off, size_t size) {
    if (!size) return 0;
    int i = 0;
    while (i < a->n && a->free[i].off < off) i++;
    if (i > 0 && a->free[i - 1].off + a->free[i - 1].size == off) { /* merge left */
        a->free[i - 1].size += size;
        if (i < a->n && a->free[i - 1].off + a->free[i - 1].size == a->free[i].off) {
            a->free[i - 1].size += a->free[i].size;
            memmove(&a->free[i], &a->free[i + 1], (size_t)(--a->n - i) * sizeof(block));
        }
    } else if (i < a->n && off + size == a->free[i].off) { /* merge right */
        a->free[i].off = off;
        a->free[i].size += size;
    } else {
        if (a->n == a->cap) {
            int cap = a->cap ? 2 * a->cap : 16;
            void *p = kiln__realloc(a->free, (size_t)cap * sizeof(block));
            if (!p) return -1;
            a->free = p;
            a->cap = cap;
        }
        memmove(&a->free[i + 1], &a->free[i], (size_t)(a->n - i) * sizeof(block));
        a->free[i] = (block){off, size};
        a->n++;
    }
    /* give a block at the top back to the top */
    if (a->n && a->free[a->n - 1].off + a->free[a->n - 1].size == a->top) a->top = a->free[--a->n].off;
    return 0;
}

static kiln_tensor *owner(kiln_tensor *t) { return t->view_src ? t->view_src : t; }

/* Nodes whose storage the plan places: kernel outputs that are not outputs. */
static bool planned_here(const kiln_tensor *t) {
    return !t->view_src && !(t->flags & KILN_FLAG_OUTPUT) && kiln__op_table[t->op].kind == KILN_KIND_KERNEL;
}

kiln_status kiln__graph_plan(kiln_graph *g) {
    kiln_ctx *ctx = g->ctx;
    kiln_status s = kiln__owned_grow(ctx, (void **)&g->offs, &g->offs_cap, g->n, sizeof *g->offs);
    if (s) return s;
    int *last = kiln__malloc((size_t)(g->n ? g->n : 1) * sizeof *last);
    fit_alloc fa = {0};
    if (!last) return kiln__errs(KILN_ERR_OOM, "planner: out of memory");
    uint64_t gen = ++ctx->visit_gen;
    for (int i = 0; i < g->n; i++) {
        g->nodes[i]->visit = gen;
        g->nodes[i]->slot = i;
        last[i] = i;
    }
    kiln_backend *b = kiln__graph_backend(g);
    if ((s = kiln__graph_fuse(g, b, gen))) {
        free(last);
        return s;
    }
    /* last use of each node's storage: reads of it or of its views */
    for (int i = 0; i < g->n; i++) {
        kiln_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++) {
            kiln_tensor *o = owner(t->src[k]);
            int end = g->chain_end[i];
            if (o->visit == gen && last[o->slot] < end) last[o->slot] = end;
        }
        kiln_tensor *o = owner(t);
        if (o != t && o->visit == gen && last[o->slot] < i) last[o->slot] = i;
    }
    g->unplanned_bytes = 0;
    for (int i = 0; i < g->n && !s; i++) {
        kiln_tensor *t = g->nodes[i];
        size_t size = align_up(kiln_tensor_nbytes(t));
        if (t->flags & KILN_FLAG_OUTPUT && !t->view_src && !t->storage_bytes) {
            /* outputs keep storage of their own, readable after compute */
            /* on failure storage_bytes stays 0, so the next plan tries again */
            size_t own = kiln__storage_size(size);
            if (!(t->data = kiln__owned_alloc(ctx, own))) {
                s = kiln_last_status();
                break;
            }
            t->storage_bytes = own;
            ctx->storage_bytes += own;
        }
        g->offs[i] = 0;
        if (planned_here(t)) g->unplanned_bytes += size;
        if (planned_here(t) && !kiln__graph_unplaced(g, i)) g->offs[i] = fa_alloc(&fa, size);
        /* free what dies here: the storage this node (or, at the end of
         * a fused chain, any of its members) reads or views, or its own if
         * nothing reads it */
        int first = i;
        while (first > 0 && g->chain_end[first - 1] == i) first--;
        for (int j = first; j <= i && !s; j++) {
            kiln_tensor *u = g->nodes[j];
            for (int k = 0; k <= u->nsrc && !s; k++) {
                kiln_tensor *o = owner(k < u->nsrc ? u->src[k] : u);
                if (o->visit != gen || last[o->slot] != i || !planned_here(o) || kiln__graph_unplaced(g, o->slot))
                    continue;
                last[o->slot] = -1; /* storage read twice is freed once */
                if (fa_free(&fa, g->offs[o->slot], align_up(kiln_tensor_nbytes(o))))
                    s = kiln__errs(KILN_ERR_OOM, "planner: out of memory");
            }
        }
    }
    free(last);
    free(fa.free);
    if (s) return s;
    g->planned_bytes = fa.peak;
    g->planned = true;
    g->plan_backend = b;
    g->scheduled = false;
    return KILN_OK;
}
