/* graph.h — the graph object shared by graph.c and planner.c. */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "internal.h"

struct kiln_graph {
    kiln_ctx *ctx;
    kiln_tensor **nodes; /* non-leaf tensors, sources before users */
    int n, cap;
    size_t *offs;        /* planned byte offset of each node in buf */
    int *chain_end;      /* index of the last node of i's fused chain (i when not fused) */
    int *acc_node;       /* matmul i adds straight into a gradient: its ACC_GRAD's index; that ACC_GRAD: -2; else -1 */
    int offs_cap, chain_cap, acc_cap;
    bool planned, training;
    size_t planned_bytes, unplanned_bytes;
    void *buf;
    size_t buf_bytes;
    uint64_t runs;
};

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
