/* graph.h — the graph object shared by graph.c and planner.c. */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "internal.h"

struct kiln_graph {
    kiln_ctx *ctx;
    kiln_tensor **nodes; /* non-leaf tensors, sources before users */
    int n, cap;
    size_t *offs;        /* planned byte offset of each node in buf */
    int offs_cap;
    bool planned, training;
    size_t planned_bytes, unplanned_bytes;
    void *buf;
    size_t buf_bytes;
    uint64_t runs;
};

/* Place every intermediate in one buffer by liveness; give outputs their
 * own storage. */
kiln_status kiln__graph_plan(kiln_graph *g);

#endif
