/* graph_exec.c — the executor: one loop that runs a planned graph on any
 * backend (backend.h says how the parts fit). Each step is one node, a
 * fused chain or a product adding into a gradient; it runs on the graph's
 * backend when that claims it, else on the host backend, through the
 * vtable either way. On a graph whose backend is the host nothing is
 * copied or tracked (but for tensors a device graph of the same context
 * left newer on the device); on a device backend graph_device.c moves the
 * operands, and a graph computed again under an unchanged key runs as a
 * recording of its kernels (graph_replay.c: every step's operands brought
 * first, then the kernels recorded or replayed). */
#include "graph.h"

#include <stdio.h>
#include <time.h>

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* $KILN_BACKEND_DEBUG=1: name each op that falls back, once. */
static void note_fallback(const kiln_backend *b, const kiln_tensor *t) {
    static bool said[KILN_OP_COUNT];
    static int debug = -1;
    if (debug < 0) {
        const char *env = getenv("KILN_BACKEND_DEBUG");
        debug = env && *env && strcmp(env, "0");
    }
    if (!debug || said[t->op]) return;
    said[t->op] = true;
    char buf[96];
    fprintf(stderr, "kiln: %s does not run %s (%s %s); it runs on the CPU\n", b->name, kiln__op_table[t->op].name,
            kiln_dtype_name(t->dtype), kiln__shape_str(t, buf));
}

/* ---- gradient hooks ---- */

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

/* ---- host memory ---- */

/* Storage for node i: its own (outputs), its owner's (views, in place), or
 * the planned place in the graph's buffer. */
static void resolve(kiln_graph *g, int i) {
    kiln_tensor *t = g->nodes[i];
    if (t->view_src) t->data = t->view_src->data ? (char *)t->view_src->data + t->view_offs : NULL;
    else if (!t->storage_bytes) t->data = g->buf ? (char *)g->buf + g->offs[i] : NULL;
}

/* Before a host kernel reads or writes t's operands: bring back any whose
 * current bytes are on a device, and say the host now holds t's (and the
 * sources it writes: an optimizer step's state tensors, batch norm's
 * running statistics). */
static kiln_status host_operands(kiln_tensor *t) {
    for (int k = 0; k < t->nsrc; k++) {
        kiln_status s = kiln__writes_src(t, k) ? kiln__host_write(t->src[k]) : kiln__host_read(t->src[k]);
        if (s) return s;
    }
    return kiln__host_write(t);
}

/* The planned buffer on the host: one even for no bytes, so that every
 * node gets a real pointer. */
static kiln_status host_buffer(kiln_graph *g) {
    if (g->buf && g->buf_bytes >= g->planned_bytes) return KILN_OK;
    kiln__owned_free(g->ctx, g->buf);
    g->buf_bytes = 0;
    if (!(g->buf = kiln__owned_alloc(g->ctx, g->planned_bytes))) return kiln_last_status();
    g->buf_bytes = g->planned_bytes;
    return KILN_OK;
}

/* ---- the loop ---- */

/* Before host kernels run nodes i..end (and ACC_GRAD acc when >= 0): the
 * deferred zeros of what they read or write, but the gradient a product
 * adds into (run stores it there instead). */
static void settle_zeros(kiln_graph *g, int i, int end, int acc) {
    for (int j = i; j <= end; j++) {
        kiln_tensor *t = g->nodes[j];
        for (int k = 0; k < t->nsrc; k++) kiln__zeros_settle(t->src[k]);
        kiln__zeros_settle(t);
    }
    for (int k = 1; acc >= 0 && k < g->nodes[acc]->nsrc; k++) kiln__zeros_settle(g->nodes[acc]->src[k]);
}

/* Run the step of nodes i..end (and ACC_GRAD acc when >= 0) on r. */
static kiln_status run(kiln_backend *r, kiln_graph *g, int i, int end, int acc, const kiln_exec *ex) {
    kiln_tensor *t = g->nodes[i];
    if (end > i) return r->vt->compute_chain(r, g->nodes + i, end - i + 1, ex);
    if (acc < 0) return r->vt->compute(r, t, ex);
    /* a product adding into the gradient its ACC_GRAD would add it to, or
     * storing there when the gradient's zeros were deferred (a device
     * brought them already) */
    kiln_tensor *grad = g->nodes[acc]->src[0], *o = kiln__owner(grad);
    kiln_exec ea = *ex;
    ea.accumulate = kiln__is_device(r) || !(o->flags & KILN_FLAG_ZEROS);
    if (!kiln__is_device(r)) o->flags &= ~(uint32_t)KILN_FLAG_ZEROS;
    t->data = grad->data;
    t->dbuf = grad->dbuf;
    t->doff = grad->doff;
    return r->vt->compute(r, t, &ea);
}

kiln_status kiln__graph_steps(kiln_graph *g, kiln_backend *b, kiln_exec *ex, int what, int64_t *nodes) {
    kiln_backend *host = kiln__backend_host();
    bool dev = kiln__is_device(b), prof = kiln__profiling(), bring = what & KILN_STEP_BRING, go = what & KILN_STEP_RUN;
    /* on the host, tensors may hold newer bytes on a device only once device memory exists */
    bool mixed = !dev && g->ctx->n_devbufs > 0;
    kiln_status s = KILN_OK;
    for (int i = 0; i < g->n && !s; i++) {
        kiln_tensor *t = g->nodes[i];
        if (bring && dev) s = kiln__graph_dev_resolve(g, b, i);
        else if (bring) resolve(g, i);
        if (s) break;
        int end = g->chain_end[i], acc = g->acc_node[i];
        /* a view has no kernel; an ACC_GRAD whose product already added into the gradient, nothing to do */
        if (kiln__op_table[t->op].kind == KILN_KIND_VIEW || acc == -2) continue;
        kiln_backend *r = b == host || g->claimed[i] ? b : host;
        for (int j = i + 1; bring && j <= end && !s; j++) /* a chain's links: only the last is written */
            if (dev) s = kiln__graph_dev_resolve(g, b, j);
            else resolve(g, j);
        bool none = dev && !kiln_tensor_numel(g->nodes[end]); /* kiln__graph_dev_bring says so too */
        if (!s && dev && bring) s = kiln__graph_dev_bring(g, b, i, end, acc, r == b, &none);
        for (int j = i; mixed && j <= end && !s; j++) s = host_operands(g->nodes[j]);
        if (!s && mixed && acc >= 0) s = host_operands(g->nodes[acc]);
        if (s) break;
        if (!none && go) {
            if (r != b) note_fallback(b, t);
            if (!dev) settle_zeros(g, i, end, acc);
            /* $KILN_PROFILE: the host's kernels timed here, a device's by the device */
            int row = end > i ? KILN_OP_COUNT : (int)t->op;
            bool timed = prof && !kiln__is_device(r);
            ex->profile = prof && !timed ? row + 1 : 0;
            double t0 = timed ? now_sec() : 0;
            if ((s = run(r, g, i, end, acc, ex))) break;
            if (timed) kiln__profile_add(r, row, now_sec() - t0, 1);
            if (r == b) *nodes += end - i + 1;
            else g->stats.nodes_fallback += end - i + 1;
        }
        if (!none && bring && dev) kiln__graph_dev_written(g, i, end, acc, r == b ? KILN_AT_DEV : KILN_AT_HOST);
        for (int j = i; bring && j <= end; j++) kiln__mark_computed(g->nodes[j]);
        if (g->grad_hook && !dev) grad_hook_fire(g, i, end);
        i = end;
    }
    return s;
}

static bool has_op(const kiln_graph *g, kiln_op op) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->op == op) return true;
    return false;
}

kiln_status kiln_graph_compute(kiln_graph *g) {
    if (!g) return kiln__errs(KILN_ERR_ARG, "kiln_graph_compute: graph is NULL");
    kiln_status s;
    kiln_backend *host = kiln__backend_host(), *b = kiln__graph_backend(g);
    if (!host) return kiln__err_context("kiln_graph_compute");
    if ((!g->planned || g->plan_backend != b) && (s = kiln__graph_plan(g))) return s;
    static uint64_t serials; /* any graph's computes, all threads */
    kiln_exec ex = {.run = ++g->runs,
                    .serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED),
                    .training = g->training,
                    .n_threads = kiln__threads()};
    g->stats.computes++;
    if (g->grad_hook && (s = grad_hook_prepare(g))) return s;
    bool dev = kiln__is_device(b);
    if (b != host && (!g->scheduled || g->sched_backend != b) && (s = kiln__graph_schedule(g, b))) return s;
    if ((s = dev ? kiln__graph_dev_buffers(g, b) : host_buffer(g))) return s;
    if (dev && g->training && b->vt->set_run && has_op(g, KILN_OP_DROPOUT) && (s = b->vt->set_run(b, ex.run))) return s;
    if (dev && kiln__replay_wanted(g, b)) s = kiln__graph_replay(g, b, &ex);
    else s = kiln__graph_steps(g, b, &ex, KILN_STEP_BRING | KILN_STEP_RUN, &g->stats.nodes_on_backend);
    if (!dev) return s;
    /* submit even after an error, so nothing stays recorded against freed memory */
    kiln_status f = b->vt->flush ? b->vt->flush(b) : KILN_OK;
    /* a row outside a KV cache: the device skipped it, the CPU's error now */
    if (!s && !f && b->vt->rows_error && has_op(g, KILN_OP_ATTENTION_CACHED)) f = b->vt->rows_error(b);
    if ((s = s ? s : f) || !g->grad_hook) return s;
    /* a device graph runs as one schedule: every gradient is final at its end */
    for (int i = 0; i < g->n; i++)
        if (g->grad_last[i]) g->grad_hook(g->grad_hook_user, g->nodes[i]->src[0]);
    return KILN_OK;
}
