/* graph.c — graphs: collecting nodes in order, the backward pass, and
 * running them. Memory for intermediates is placed by planner.c. */
#include "graph.h"

#include <stdio.h>
#include <time.h>

/* $KILN_PROFILE=1: time every kernel by op and print the totals to stderr
 * at exit (the graph runs serially, so plain statics suffice). */
static int profile = -1;
static double prof_sec[KILN_OP_COUNT + 1];
static long prof_calls[KILN_OP_COUNT + 1];

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void profile_print(void) {
    double total = 0;
    for (int i = 0; i <= KILN_OP_COUNT; i++) total += prof_sec[i];
    fprintf(stderr, "kiln profile: %.3f s in kernels\n", total);
    for (int i = 0; i <= KILN_OP_COUNT; i++)
        if (prof_calls[i])
            fprintf(stderr, "  %-20s %9.3f ms %5.1f%% %8ld calls\n", i < KILN_OP_COUNT ? kiln__op_table[i].name : "(fused chains)",
                    1e3 * prof_sec[i], 100 * prof_sec[i] / (total > 0 ? total : 1), prof_calls[i]);
}

static bool profiling(void) {
    if (profile < 0) {
        const char *env = getenv("KILN_PROFILE");
        profile = env && *env && strcmp(env, "0");
        if (profile) atexit(profile_print);
    }
    return profile;
}

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
    if (!contains(g, loss) && loss->op != KILN_OP_NONE && (s = kiln_graph_add(g, loss))) return s;
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
    for (int i = 0; i < nl && !s; i++) {
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
    g->backend = b ? b : kiln__backend_cpu();
    return KILN_OK;
}

kiln_backend *kiln_graph_backend(const kiln_graph *g) {
    kiln_backend *b = g ? kiln__graph_backend(g) : NULL;
    return b ? b : kiln__backend_cpu();
}

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
    kiln__owned_free(g->ctx, g->buf);
    g->buf = NULL;
    g->buf_bytes = 0;
    kiln__devbuf_free(g->ctx, g->dbuf);
    g->dbuf = NULL;
    g->dbuf_bytes = 0;
}

/* Storage for node i: its own (outputs), its owner's (views, in place), or
 * the planned place in the graph's buffer. */
static void resolve(kiln_graph *g, int i) {
    kiln_tensor *t = g->nodes[i];
    if (t->view_src) t->data = t->view_src->data ? (char *)t->view_src->data + t->view_offs : NULL;
    else if (!t->storage_bytes) t->data = g->buf ? (char *)g->buf + g->offs[i] : NULL;
}

/* Before a CPU kernel reads or writes t's operands: bring back any whose
 * current bytes are on a device, and say the host now holds t's (and, for
 * an in-place op such as an optimizer step, its sources': it may update
 * its state tensors too). */
static kiln_status host_operands(kiln_tensor *t) {
    bool inplace = kiln__op_table[t->op].kind == KILN_KIND_INPLACE;
    for (int k = 0; k < t->nsrc; k++) {
        kiln_status s = inplace ? kiln__host_write(t->src[k]) : kiln__host_read(t->src[k]);
        if (s) return s;
    }
    return kiln__host_write(t);
}

kiln_status kiln_graph_set_grad_hook(kiln_graph *g, kiln_grad_hook_fn fn, void *user) {
    if (!g) return kiln__errs(KILN_ERR_ARG, "kiln_graph_set_grad_hook: graph is NULL");
    g->grad_hook = fn;
    g->grad_hook_user = user;
    g->grad_last_n = -1;
    return KILN_OK;
}

/* Mark the last ACC_GRAD into each gradient (a graph with two backward
 * passes adds into a gradient twice); redone when the graph grew. */
static kiln_status grad_hook_prepare(kiln_graph *g) {
    if (g->grad_last_n == g->n) return KILN_OK;
    kiln_status s = kiln__owned_grow(g->ctx, (void **)&g->grad_last, &g->grad_last_cap, g->n, sizeof *g->grad_last);
    if (s) return s;
    for (int i = g->n - 1; i >= 0; i--) {
        kiln_tensor *t = g->nodes[i];
        g->grad_last[i] = t->op == KILN_OP_ACC_GRAD;
        for (int j = i + 1; g->grad_last[i] && j < g->n; j++)
            if (g->nodes[j]->op == KILN_OP_ACC_GRAD && g->nodes[j]->src[0] == t->src[0]) g->grad_last[i] = 0;
    }
    g->grad_last_n = g->n;
    return KILN_OK;
}

/* After nodes lo..hi ran: the hook for each gradient they finished (an
 * ACC_GRAD, or the matmul that added into the gradient for it). */
static void grad_hook_fire(kiln_graph *g, int lo, int hi) {
    for (int j = lo; j <= hi; j++) {
        int acc = g->acc_node[j];
        if (acc >= 0 && g->grad_last[acc]) g->grad_hook(g->grad_hook_user, g->nodes[acc]->src[0]);
        else if (acc != -2 && g->grad_last[j]) g->grad_hook(g->grad_hook_user, g->nodes[j]->src[0]);
    }
}

kiln_status kiln_graph_compute(kiln_graph *g) {
    if (!g) return kiln__errs(KILN_ERR_ARG, "kiln_graph_compute: graph is NULL");
    kiln_status s;
    kiln_backend *b = kiln__graph_backend(g);
    bool dev = kiln__is_device(b);
    if ((!g->planned || g->plan_device != dev) && (s = kiln__graph_plan(g))) return s;
    g->plan_device = dev;
    static uint64_t serials; /* any graph's computes, all threads */
    kiln_exec ex = {.run = ++g->runs,
                    .serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED),
                    .training = g->training,
                    .n_threads = kiln__threads()};
    g->stats.computes++;
    if (g->grad_hook && (s = grad_hook_prepare(g))) return s;
    if (dev) {
        /* a device graph runs as one schedule: every gradient is final at its end */
        if ((s = kiln__graph_compute_device(g, b, &ex)) || !g->grad_hook) return s;
        for (int i = 0; i < g->n; i++)
            if (g->grad_last[i]) g->grad_hook(g->grad_hook_user, g->nodes[i]->src[0]);
        return KILN_OK;
    }
    /* tensors may hold newer bytes on a device only once device memory exists */
    bool mixed = g->ctx->n_devbufs > 0;
    if (!g->buf || g->buf_bytes < g->planned_bytes) { /* a buffer even for no bytes: every node gets a real pointer */
        kiln__owned_free(g->ctx, g->buf);
        g->buf_bytes = 0;
        if (!(g->buf = kiln__owned_alloc(g->ctx, g->planned_bytes))) return kiln_last_status();
        g->buf_bytes = g->planned_bytes;
    }
    s = KILN_OK;
    for (int i = 0; i < g->n; i++) {
        kiln_tensor *t = g->nodes[i];
        resolve(g, i);
        if (kiln__op_table[t->op].kind == KILN_KIND_VIEW) continue;
        int end = g->chain_end[i], acc = g->acc_node[i], slot = end > i ? KILN_OP_COUNT : (int)t->op;
        if (acc == -2) continue; /* its matmul already added into the gradient */
        for (int j = i; mixed && j <= end && !s; j++) s = host_operands(g->nodes[j]);
        if (mixed && acc >= 0 && !s) s = host_operands(g->nodes[acc]);
        if (s) return s;
        g->stats.nodes_on_backend += end - i + 1;
        double t0 = profiling() ? now_sec() : 0;
        int first = i;
        if (end > i) { /* a fused element-wise chain: only its last node is written */
            for (int j = i + 1; j <= end; j++) resolve(g, j);
            s = kiln__cpu_compute_chain(g->nodes + i, end - i + 1, &ex);
            i = end;
        } else if (acc >= 0) { /* a matmul adding into the gradient its ACC_GRAD would add it to */
            kiln_exec ea = ex;
            ea.accumulate = true;
            t->data = g->nodes[acc]->src[0]->data;
            s = kiln__cpu_compute(t, &ea);
        } else {
            s = kiln__cpu_compute(t, &ex);
        }
        if (s) return s;
        for (int j = first; j <= i; j++) kiln__mark_computed(g->nodes[j]);
        if (profile) {
            prof_sec[slot] += now_sec() - t0;
            prof_calls[slot]++;
        }
        if (g->grad_hook) grad_hook_fire(g, first, i);
    }
    return KILN_OK;
}
