/* graph.h — the graph object shared by graph.c and planner.c. */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "backend.h"

struct kiln_graph {
    kiln_ctx *ctx;
    kiln_tensor **nodes; /* non-leaf tensors, sources before users */
    int n, cap;
    size_t *offs;        /* planned byte offset of each node in buf */
    int *chain_end;      /* index of the last node of i's fused chain (i when not fused) */
    int *acc_node;       /* matmul i adds straight into a gradient: its ACC_GRAD's index; that ACC_GRAD: -2; else -1 */
    int offs_cap, chain_cap, acc_cap;
    bool planned, training;
    bool plan_device; /* planned for a device backend (no CPU fusion) */
    size_t planned_bytes, unplanned_bytes;
    void *buf;
    size_t buf_bytes;
    uint64_t runs;
    /* device graphs (graph_device.c) */
    kiln_backend *backend;       /* set by kiln_graph_set_backend; NULL: the context's */
    kiln_backend *sched_backend; /* the backend the schedule below was made for */
    bool scheduled;
    bool *on_dev;                /* node i runs on the device (views count as on it) */
    int *owner_slot;             /* [i * (KILN_MAX_SRC + 1) + k]: index of the node owning src k's
                                  * (k = KILN_MAX_SRC: the node's own) storage when the plan
                                  * places it, else -1 */
    uint8_t *loc;                /* per placed node: KILN_AT_HOST | KILN_AT_DEV, this compute */
    int on_dev_cap, owner_cap, loc_cap;
    kiln_devbuf *dbuf;           /* the planned buffer on the device */
    size_t dbuf_bytes;
    kiln_graph_stats stats;
    /* kiln_graph_set_grad_hook: called after the last write of each gradient */
    kiln_grad_hook_fn grad_hook;
    void *grad_hook_user;
    uint8_t *grad_last; /* node i is the last ACC_GRAD into its gradient (grad_last_n nodes) */
    int grad_last_n, grad_last_cap;
    kiln_tensor **losses; /* given to kiln_graph_backward: each at most once */
    int n_losses, losses_cap;
};

/* The backend g runs on: its own, else its context's (NULL: the CPU). */
static inline kiln_backend *kiln__graph_backend(const kiln_graph *g) {
    return g->backend ? g->backend : g->ctx->backend;
}
/* After t's kernel ran: an output's own storage now holds its value. */
static inline void kiln__mark_computed(kiln_tensor *t) {
    if (t->storage_bytes) t->flags |= KILN_FLAG_COMPUTED;
}
/* Run a planned graph on a device backend. */
kiln_status kiln__graph_compute_device(kiln_graph *g, kiln_backend *b, const kiln_exec *ex);

/* Find element-wise chains and matmuls that can add straight into a
 * gradient (fill g->chain_end and g->acc_node); needs visit == gen and
 * slot == index on every node, as the planner sets them. */
kiln_status kiln__graph_fuse(kiln_graph *g, uint64_t gen);
/* Node i's result is never stored in the graph's buffer (a chain's
 * intermediate, or a matmul writing into a gradient). */
static inline bool kiln__graph_unplaced(const kiln_graph *g, int i) {
    return g->chain_end[i] != i || g->acc_node[i] >= 0;
}
/* Place every intermediate in one buffer by liveness; give outputs their
 * own storage. */
kiln_status kiln__graph_plan(kiln_graph *g);

#endif
