/* autodiff.c — the reverse-mode driver. It never knows an op's math: each
 * op's backward rule (ops/) builds its input gradients from other ops, and
 * this file walks the graph backwards, calls the rules and sums the
 * gradients of tensors used more than once. */
#include "internal.h"

int kiln__topo(kiln_tensor *const *roots, int nroots, uint64_t gen, bool (*stop)(const kiln_tensor *t, void *arg),
               void *arg, kiln_tensor ***list) {
    int cap = 64, n = 0, sp = 0, scap = 64;
    kiln_tensor **out = kiln__malloc((size_t)cap * sizeof *out);
    struct frame { kiln_tensor *t; int next; } *stack = kiln__malloc((size_t)scap * sizeof *stack);
    if (!out || !stack) goto oom;
    for (int r = 0; r < nroots; r++) {
        if (!roots[r] || roots[r]->visit == gen) continue;
        roots[r]->visit = gen;
        stack[sp++] = (struct frame){roots[r], 0};
        while (sp) {
            struct frame *f = &stack[sp - 1];
            kiln_tensor *t = f->t;
            bool leaf = stop && stop(t, arg);
            if (!leaf && f->next < t->nsrc) {
                kiln_tensor *s = t->src[f->next++];
                if (s->visit == gen) continue;
                s->visit = gen;
                if (sp == scap) {
                    void *p = kiln__realloc(stack, (size_t)(scap *= 2) * sizeof *stack);
                    if (!p) goto oom;
                    stack = p;
                }
                stack[sp++] = (struct frame){s, 0};
                continue;
            }
            if (n == cap) {
                void *p = kiln__realloc(out, (size_t)(cap *= 2) * sizeof *out);
                if (!p) goto oom;
                out = p;
            }
            out[n++] = t;
            sp--;
        }
    }
    free(stack);
    *list = out;
    return n;
oom:
    free(out);
    free(stack);
    kiln__err(KILN_ERR_OOM, "out of memory walking the graph");
    return -1;
}

kiln_tensor *kiln__sum_to(kiln_ctx *ctx, kiln_tensor *g, const kiln_tensor *like) {
    if (!g) return NULL;
    int extra = g->ndim - like->ndim;
    if (extra > 1 && kiln_tensor_is_contiguous(g)) { /* the leading dims as one: a single pass over g */
        int64_t shape[KILN_MAX_DIMS];
        shape[0] = kiln__numel(extra, g->shape);
        memcpy(shape + 1, g->shape + extra, (size_t)like->ndim * sizeof *shape);
        g = kiln_sum(ctx, kiln_reshape(ctx, g, like->ndim + 1, shape), 0, false);
    }
    while (g && g->ndim > like->ndim) g = kiln_sum(ctx, g, 0, false);
    for (int i = 0; g && i < like->ndim; i++)
        if (like->shape[i] == 1 && g->shape[i] != 1) g = kiln_sum(ctx, g, i, true);
    return g;
}

/* A gradient that is a sum of slice_scatters of one shape along one axis
 * (step 1, disjoint ranges): the gradient of a tensor split into parts
 * (an attention's q, k and v sliced from one projection). Once the parts
 * cover the whole axis, the sum is their concatenation: one copy, instead
 * of a zero-filled full-size tensor per part and an add for each. */
#define MAX_PARTS 8
typedef struct {
    kiln_tensor *sum; /* the gradient these parts add up to; the record is stale when g[j] is another */
    int n, axis;
    int64_t start[MAX_PARTS];
    kiln_tensor *part[MAX_PARTS];
} scatter_parts;

static bool is_scatter(const kiln_tensor *t) { return t->op == KILN_OP_SLICE_SCATTER && t->ip[2] == 1; }

/* Add part t (a slice_scatter like p's) to p; false when it overlaps one or p is full. */
static bool parts_insert(scatter_parts *p, const kiln_tensor *t) {
    int64_t axis = t->ip[0], s = t->ip[1], e = s + t->src[0]->shape[axis];
    int i = 0;
    while (i < p->n && p->start[i] < s) i++;
    if (p->n == MAX_PARTS || (i > 0 && p->start[i - 1] + p->part[i - 1]->shape[axis] > s) ||
        (i < p->n && p->start[i] < e))
        return false;
    memmove(&p->start[i + 1], &p->start[i], (size_t)(p->n - i) * sizeof *p->start);
    memmove(&p->part[i + 1], &p->part[i], (size_t)(p->n - i) * sizeof *p->part);
    p->start[i] = s;
    p->part[i] = t->src[0];
    p->n++;
    return true;
}

/* a + b, the gradient of one tensor; p records a's parts. */
static kiln_tensor *grad_sum(kiln_ctx *ctx, scatter_parts *p, kiln_tensor *a, kiln_tensor *b) {
    if (p->sum != a) {
        p->n = 0;
        p->axis = (int)a->ip[0];
        if (is_scatter(a)) parts_insert(p, a);
    }
    p->sum = NULL;
    if (!p->n || !is_scatter(b) || b->ip[0] != p->axis || !kiln__same_shape(a, b) || b->dtype != a->dtype ||
        !parts_insert(p, b))
        return kiln_add(ctx, a, b);
    int axis = p->axis;
    int64_t end = 0;
    for (int i = 0; i < p->n && end >= 0; i++) end = p->start[i] == end ? end + p->part[i]->shape[axis] : -1;
    if (end == a->shape[axis]) return kiln_concat(ctx, p->part, p->n, axis);
    return p->sum = kiln_add(ctx, a, b); /* the sum so far; a later part may complete the parts */
}

typedef struct {
    int n;
    kiln_tensor *const *targets;
} vjp_stop;

/* Do not descend below a target, nor into tensors that carry no gradient. */
static bool stop_at(const kiln_tensor *t, void *arg) {
    vjp_stop *s = arg;
    for (int i = 0; i < s->n; i++)
        if (s->targets[i] == t) return true;
    return !(t->flags & KILN_FLAG_REQUIRES_GRAD);
}

static bool is_target(const kiln_tensor *t, int n, kiln_tensor *const *targets) {
    for (int i = 0; i < n; i++)
        if (targets[i] == t) return true;
    return false;
}

/* t's index in this walk, or -1. slot survives nested walks (they restore it). */
static int in_walk(const kiln_tensor *t, kiln_tensor *const *order, int m) {
    return t->slot >= 0 && t->slot < m && order[t->slot] == t ? t->slot : -1;
}

kiln_status kiln__vjp(kiln_ctx *ctx, kiln_tensor *out, kiln_tensor *gy, int n, kiln_tensor *const *targets,
                      kiln_tensor **grads) {
    char s1[96], s2[96];
    for (int i = 0; i < n; i++) grads[i] = NULL;
    if (!out || !gy) return kiln_last_status() ? kiln_last_status() : KILN_ERR_ARG;
    /* Nested calls (a composite op's rule) reuse slot: save and restore it. */
    uint64_t gen = ++ctx->visit_gen;
    kiln_tensor **order = NULL;
    vjp_stop st = {n, targets};
    int m = kiln__topo(&out, 1, gen, stop_at, &st, &order);
    if (m < 0) return KILN_ERR_OOM;
    kiln_tensor **g = kiln__calloc((size_t)m, sizeof *g);
    scatter_parts *parts = kiln__calloc((size_t)m, sizeof *parts);
    int *saved_slot = kiln__malloc((size_t)m * sizeof *saved_slot);
    kiln_status status = KILN_OK;
    if (!g || !parts || !saved_slot) {
        status = kiln__errs(KILN_ERR_OOM, "out of memory in backward");
        goto done;
    }
    for (int i = 0; i < m; i++) {
        saved_slot[i] = order[i]->slot;
        order[i]->slot = i;
    }
    bool grad_mode = ctx->grad_enabled;
    ctx->grad_enabled = true; /* backward graphs are themselves differentiable */
    g[m - 1] = gy;
    for (int i = m - 1; i >= 0 && !status; i--) {
        kiln_tensor *t = order[i];
        if (!g[i] || t->op == KILN_OP_NONE || is_target(t, n, targets)) continue;
        const kiln_op_info *info = &kiln__op_table[t->op];
        if (!info->backward) continue; /* not differentiable: no gradient flows */
        kiln_tensor *gsrc[KILN_MAX_SRC] = {0};
        if ((status = info->backward(ctx, t, g[i], gsrc))) break;
        for (int k = 0; k < t->nsrc && !status; k++) {
            kiln_tensor *s = t->src[k], *gk = gsrc[k];
            int j = in_walk(s, order, m);
            if (!gk || j < 0 || !(s->flags & KILN_FLAG_REQUIRES_GRAD)) continue;
            if (!kiln__same_shape(gk, s)) {
                status = kiln__errs(KILN_ERR_SHAPE, "backward of %s gave a %s gradient for source %d of shape %s",
                                    info->name, kiln__shape_str(gk, s1), k, kiln__shape_str(s, s2));
                break;
            }
            if (gk->dtype != s->dtype) gk = kiln_cast(ctx, gk, s->dtype);
            g[j] = g[j] && gk ? grad_sum(ctx, &parts[j], g[j], gk) : gk;
            if (!g[j]) status = kiln_last_status() ? kiln_last_status() : KILN_ERR_STATE;
        }
    }
    ctx->grad_enabled = grad_mode;
    for (int i = 0; i < n && !status; i++)
        if (targets[i] && in_walk(targets[i], order, m) >= 0) grads[i] = g[targets[i]->slot];
    for (int i = 0; i < m; i++) order[i]->slot = saved_slot[i];
done:
    free(g);
    free(parts);
    free(saved_slot);
    free(order);
    return status;
}
