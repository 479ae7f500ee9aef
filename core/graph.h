/* graph.h — the graph object shared by graph.c (building), planner.c and
 * fuse.c (planning), graph_exec.c (the executor) and graph_device.c (its
 * operands' moves on a device backend); see backend.h for how they fit. */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "backend.h"

/* Graph replay (graph_replay.c): a key (n words) seen on backend, what
 * became of it (KILN_REC_*), its recording when one was made, the kernels
 * one run of it counts, and the compute that last used it. A graph keeps
 * KILN_REPLAY_KEYS of them, so a step that alternates two keys (GaLore's
 * refresh steps beside its others) replays both. */
typedef struct kiln_replay_key {
    kiln_record *rec;
    kiln_backend *backend;
    int state;
    uint64_t *key;
    int n, cap;
    int64_t nodes;
    uint64_t used;
} kiln_replay_key;
enum { KILN_REPLAY_KEYS = 2 };

struct kiln_graph {
    kiln_ctx *ctx;
    kiln_tensor **nodes; /* non-leaf tensors, sources before users */
    int n, cap;
    size_t *offs;        /* planned byte offset of each node in buf */
    int *chain_end;      /* index of the last node of i's fused chain (i when not fused) */
    int *acc_node;       /* matmul i adds straight into a gradient: its ACC_GRAD's index; that ACC_GRAD: -2; else -1 */
    int offs_cap, chain_cap, acc_cap;
    bool planned, training;
    kiln_backend *plan_backend; /* the backend the plan's fused forms were chosen for */
    size_t planned_bytes, unplanned_bytes;
    void *buf;
    size_t buf_bytes;
    uint64_t runs;
    kiln_backend *backend;       /* set by kiln_graph_set_backend; NULL: the context's */
    /* graphs on a backend other than the host (graph_device.c) */
    kiln_backend *sched_backend; /* the backend the schedule below was made for */
    bool scheduled;
    bool *claimed;               /* node i runs on the graph's backend, not the host (views count as claimed) */
    int *owner_slot;             /* [i * (KILN_MAX_SRC + 1) + k]: index of the node owning src k's
                                  * (k = KILN_MAX_SRC: the node's own) storage when the plan
                                  * places it, else -1 */
    uint8_t *loc;                /* per placed node: KILN_AT_HOST | KILN_AT_DEV, this compute */
    int claimed_cap, owner_cap, loc_cap;
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
    /* graph replay (graph_replay.c): the keys of the last computes
     * through it, each with what became of it, a scratch key, and a clock
     * of computes that says which key was used least lately */
    kiln_replay_key rk[KILN_REPLAY_KEYS];
    uint64_t *key_new;
    int key_new_cap;
    uint64_t rk_clock;
};

/* The backend g runs on: its own, else its context's, else the host
 * backend (NULL only when none is registered). */
static inline kiln_backend *kiln__graph_backend(const kiln_graph *g) {
    return g->backend ? g->backend : g->ctx->backend ? g->ctx->backend : kiln__backend_host();
}
/* After t's kernel ran: an output's own storage now holds its value. */
static inline void kiln__mark_computed(kiln_tensor *t) {
    if (t->storage_bytes) t->flags |= KILN_FLAG_COMPUTED;
}

/* Choose the fused forms of the planned graph that b runs (fill
 * g->chain_end and g->acc_node); needs visit == gen and slot == index on
 * every node, as the planner sets them. */
kiln_status kiln__graph_fuse(kiln_graph *g, kiln_backend *b, uint64_t gen);
/* Node i's result is never stored in the graph's buffer (a chain's
 * intermediate, or a matmul writing into a gradient). */
static inline bool kiln__graph_unplaced(const kiln_graph *g, int i) {
    return g->chain_end[i] != i || g->acc_node[i] >= 0;
}
/* The executor's steps of a planned, scheduled graph, in order: with
 * KILN_STEP_BRING each step's storage is resolved and its operands moved
 * (residency books kept) and with KILN_STEP_RUN its kernels run (a
 * device records them); *nodes counts the kernels run. A device graph
 * may bring all its steps first and run them after when every node runs
 * on the device (graph_replay.c). */
enum { KILN_STEP_BRING = 1, KILN_STEP_RUN = 2 };
/* a replay key: none; seen once (run node by node); recorded (its rec); its recording failed */
enum { KILN_REC_NONE, KILN_REC_SEEN, KILN_REC_MADE, KILN_REC_FAILED };
kiln_status kiln__graph_steps(kiln_graph *g, kiln_backend *b, kiln_exec *ex, int what, int64_t *nodes);
/* Graph replay (graph_replay.c): is g, on device backend b, computed
 * through a recording? Then kiln__graph_replay does the whole compute but
 * the final flush: brings every step's operands, then replays the
 * recording made under the same key, or records anew and runs that. */
bool kiln__replay_wanted(kiln_graph *g, kiln_backend *b);
kiln_status kiln__graph_replay(kiln_graph *g, kiln_backend *b, kiln_exec *ex);
/* Drop g's recording (graph_replay.c). */
void kiln__replay_drop(kiln_graph *g);
/* Gradient checkpointing (recompute.c), when some forward node
 * g->nodes[0, n0) is in a segment: the backward nodes g->nodes[n0, n)
 * read recomputed copies of the segments' activations. */
kiln_status kiln__graph_recompute(kiln_graph *g, int n0);
/* Place every intermediate in one buffer by liveness; give outputs their
 * own storage; the fused forms are those of g's backend. */
kiln_status kiln__graph_plan(kiln_graph *g);

/* ---- the executor's side for a backend other than the host (graph_device.c) ---- */

/* Which nodes b claims (g->claimed) and, for a device backend, where each
 * operand's storage lives. */
kiln_status kiln__graph_schedule(kiln_graph *g, kiln_backend *b);
/* The planned buffer's device copy, and its host copy when some node
 * falls back; loc[] reset for this compute. */
kiln_status kiln__graph_dev_buffers(kiln_graph *g, kiln_backend *b);
/* Node i's data (host) and dbuf/doff (device) for this compute. */
kiln_status kiln__graph_dev_resolve(kiln_graph *g, kiln_backend *b, int i);
/* Before the step of nodes i..end (and ACC_GRAD acc when >= 0) runs on
 * the device (to_dev) or the host: bring its operands' current bytes to
 * that side. *none: the step writes nothing (an empty result), and is done. */
kiln_status kiln__graph_dev_bring(kiln_graph *g, kiln_backend *b, int i, int end, int acc, bool to_dev, bool *none);
/* After it ran on side at: the storage it wrote is current only there. */
void kiln__graph_dev_written(kiln_graph *g, int i, int end, int acc, uint8_t at);

#endif
