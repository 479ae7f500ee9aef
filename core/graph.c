/* graph.c — graphs: collecting nodes in order, the backward pass, the
 * graph's backend and what it tells. Memory for intermediates is placed
 * by planner.c, fused forms chosen by fuse.c, and graph_exec.c runs it. */
#include "graph.h"

kiln_graph *kiln_graph_new(kiln_ctx *ctx) {
    if (!ctx) return kiln__err(KILN_ERR_ARG, "kiln_graph_new: ctx is NULL");
    kiln_graph *g = kiln__arena_alloc(ctx, sizeof *g);
    if (!g) return NULL;
    g->ctx = ctx;
    g->training = true;
    return g;
}

static bool stop_at_leaf(const kiln_tensor *t, void *arg) {
    (void)arg;
    return t->op == KILN_OP_NONE;
}

/* Append t and its missing ancestors (leaves are not graph nodes). */
static kiln_status graph_append(kiln_graph *g, kiln_tensor *t) {
    kiln_ctx *ctx = g->ctx;
    uint64_t gen = ++ctx->visit_gen;
    for (int i = 0; i < g->n; i++) g->nodes[i]->visit = gen;
    kiln_tensor **list = NULL;
    int m = kiln__topo(&t, 1, gen, stop_at_leaf, NULL, &list);
    if (m < 0) return KILN_ERR_OOM;
    kiln_status s = kiln__owned_grow(ctx, (void **)&g->nodes, &g->cap, g->n + m, sizeof *g->nodes);
    for (int i = 0; i < m && !s; i++)
        if (list[i]->op != KILN_OP_NONE) g->nodes[g->n++] = list[i];
    free(list);
    g->planned = false;
    return s;
}

kiln_status kiln_graph_add(kiln_graph *g, kiln_tensor *out) {
    if (!g) return kiln__errs(KILN_ERR_ARG, "kiln_graph_add: graph is NULL");
    if (!out) return kiln__errs(kiln_last_status() ? kiln_last_status() : KILN_ERR_ARG,
                                "kiln_graph_add: output is NULL%s%s", kiln_last_status() ? " after: " : "",
                                kiln_last_status() ? kiln_last_error() : "");
    if (out->ctx != g->ctx) return kiln__errs(KILN_ERR_ARG, "kiln_graph_add: output belongs to another context");
    /* the owner of out's storage keeps it between computes */
    kiln_tensor *owner = out->view_src ? out->view_src : out;
    owner->flags |= KILN_FLAG_OUTPUT;
    return graph_append(g, out);
}

static bool contains(const kiln_graph *g, const kiln_tensor *t) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i] == t) return true;
    return false;
}

static bool stop_never(const kiln_tensor *t, void *arg) {
    (void)arg;
    return !(t->flags & KILN_FLAG_REQUIRES_GRAD);
}

kiln_status kiln_graph_backward(kiln_graph *g, kiln_tensor *loss) {
    char buf[96];
    if (!g || !loss) return kiln__errs(KILN_ERR_ARG, "kiln_graph_backward: NULL %s", g ? "loss" : "graph");
    kiln_ctx *ctx = g->ctx;
    if (kiln_tensor_numel(loss) != 1)
        return kiln__errs(KILN_ERR_SHAPE, "kiln_graph_backward: the loss must have one element, not shape %s",
                          kiln__shape_str(loss, buf));
    if (!kiln__is_float(loss->dtype))
        return kiln__errs(KILN_ERR_DTYPE, "kiln_graph_backward: the loss is %s, not a float", kiln_dtype_name(loss->dtype));
    if (!(loss->flags & KILN_FLAG_REQUIRES_GRAD))
        return kiln__errs(KILN_ERR_STATE, "kiln_graph_backward: the loss does not depend on any tensor that requires grad");
    /* as torch's second loss.backward(): a second pass would add every gradient twice per compute */
    for (int i = 0; i < g->n_losses; i++)
        if (g->losses[i] == loss)
            return kiln__errs(KILN_ERR_STATE, "kiln_graph_backward: the graph already holds the backward pass of this "
                                              "loss ('%s'); each compute adds its gradients once", loss->name);
    kiln_status s = kiln__owned_grow(ctx, (void **)&g->losses, &g->losses_cap, g->n_losses + 1, sizeof *g->losses);
    if (s) return s;
    if (ctx->segment_open)
        return kiln__errs(KILN_ERR_STATE, "kiln_graph_backward: checkpoint segment %d is still open (call "
                                          "kiln_checkpoint_end before the backward pass)", ctx->segment_open);
    if (!contains(g, loss) && loss->op != KILN_OP_NONE && (s = kiln_graph_add(g, loss))) return s;
    int n0 = g->n;
    /* the leaves to differentiate: every leaf that requires grad under loss */
    kiln_tensor **all = NULL, **leaves = NULL, **grads = NULL;
    int m = kiln__topo(&loss, 1, ++ctx->visit_gen, stop_never, NULL, &all), nl = 0;
    if (m < 0) return KILN_ERR_OOM;
    leaves = kiln__malloc((size_t)m * sizeof *leaves);
    grads = kiln__malloc((size_t)m * sizeof *grads);
    if (!leaves || !grads) {
        s = kiln__errs(KILN_ERR_OOM, "kiln_graph_backward: out of memory");
        goto done;
    }
    for (int i = 0; i < m; i++)
        if (all[i]->op == KILN_OP_NONE && all[i]->grad) leaves[nl++] = all[i];
    kiln_tensor *seed = kiln__full_like(ctx, loss, 1.0);
    if (!seed) {
        s = kiln_last_status();
        goto done;
    }
    if ((s = kiln__vjp(ctx, loss, seed, nl, leaves, grads))) goto done;
    bool segments = false;
    for (int i = 0; i < n0 && !segments; i++) segments = g->nodes[i]->segment != 0;
    for (int j = 0; j < nl && !s; j++) {
        /* the leaves nearest the loss first: each layer's weight gradients
         * then follow its activation gradients (with checkpoints, its
         * recomputation), not the whole pass, and what they read is freed
         * a layer at a time */
        int i = nl - 1 - j;
        if (!grads[i]) continue;
        kiln_tensor *src[2] = {leaves[i]->grad, kiln__contig(ctx, grads[i])};
        if (!src[1]) {
            s = kiln_last_status();
            break;
        }
        kiln_tensor *acc = kiln__node_new(ctx, KILN_OP_ACC_GRAD, src[0]->dtype, src[0]->ndim, src[0]->shape, 2, src);
        if (!acc) {
            s = kiln_last_status();
            break;
        }
        acc->flags &= ~(uint32_t)KILN_FLAG_REQUIRES_GRAD;
        acc->view_src = src[0];
        s = graph_append(g, acc);
    }
    /* a refused rewrite leaves the graph as it was */
    if (!s && segments && (s = kiln__graph_recompute(g, n0))) g->n = n0;
    if (!s) g->losses[g->n_losses++] = loss;
done:
    free(all);
    free(leaves);
    free(grads);
    return s;
}

void kiln_graph_set_training(kiln_graph *g, bool training) { g->training = training; }

kiln_status kiln_graph_set_backend(kiln_graph *g, kiln_backend *b) {
    if (!g) return kiln__errs(KILN_ERR_ARG, "kiln_graph_set_backend: graph is NULL");
    g->backend = b ? b : kiln__backend_host();
    return KILN_OK;
}

kiln_backend *kiln_graph_backend(const kiln_graph *g) { return g ? kiln__graph_backend(g) : kiln__backend_host(); }

kiln_graph_stats kiln_graph_get_stats(const kiln_graph *g) { return g ? g->stats : (kiln_graph_stats){0}; }
int kiln_graph_n_nodes(const kiln_graph *g) { return g ? g->n : 0; }
kiln_tensor *kiln_graph_node(const kiln_graph *g, int i) { return g && i >= 0 && i < g->n ? g->nodes[i] : NULL; }
const char *kiln_op_name_of(const kiln_tensor *t) { return t ? kiln__op_table[t->op].name : "(null)"; }

size_t kiln_graph_planned_bytes(kiln_graph *g) {
    if (!g || (!g->planned && kiln__graph_plan(g))) return 0;
    return g->planned_bytes;
}

size_t kiln_graph_unplanned_bytes(kiln_graph *g) {
    if (!g || (!g->planned && kiln__graph_plan(g))) return 0;
    return g->unplanned_bytes;
}

void kiln_graph_free_buffers(kiln_graph *g) {
    if (!g) return;
    kiln__replay_drop(g);
    kiln__owned_free(g->ctx, g->buf);
    g->buf = NULL;
    g->buf_bytes = 0;
    kiln__devbuf_free(g->ctx, g->dbuf);
    g->dbuf = NULL;
    g->dbuf_bytes = 0;
}
