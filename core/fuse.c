/* fuse.c — two rewrites of how a planned graph runs, both invisible in
 * its results:
 *  - element-wise chains run as one tiled pass (backends/cpu/fused.c). A
 *    chain is a run of consecutive nodes, each an element-wise op the
 *    backend can tile, where every node but the last is read only by the
 *    next one and is not an output: nothing else ever sees the
 *    intermediates, so they are never written;
 *  - a matmul read only by the ACC_GRAD that adds it into a gradient (the
 *    weight gradient of every linear layer) adds into the gradient itself
 *    (GEMM with beta = 1), so it needs no buffer and the extra pass is gone;
 *    a DFP matmul (ops/dfp.c) the same way.
 * $KILN_FUSE=0 turns both off (every node then runs alone). */
#include "graph.h"

kiln_status kiln__graph_fuse(kiln_graph *g, uint64_t gen) {
    kiln_status s = kiln__owned_grow(g->ctx, (void **)&g->chain_end, &g->chain_cap, g->n, sizeof *g->chain_end);
    if (!s) s = kiln__owned_grow(g->ctx, (void **)&g->acc_node, &g->acc_cap, g->n, sizeof *g->acc_node);
    if (s) return s;
    int *readers = kiln__calloc((size_t)(g->n ? g->n : 1), sizeof *readers);
    if (!readers) return kiln__errs(KILN_ERR_OOM, "graph: out of memory finding fused chains");
    for (int i = 0; i < g->n; i++) {
        kiln_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++)
            if (t->src[k]->visit == gen) readers[t->src[k]->slot]++;
        if (t->view_src && t->view_src->visit == gen) readers[t->view_src->slot]++;
    }
    const char *env = getenv("KILN_FUSE");
    /* the fused kernels are the CPU's; a device graph runs every node alone */
    bool on = !(env && !strcmp(env, "0")) && !kiln__is_device(kiln__graph_backend(g));
    for (int i = 0; i < g->n; i++) g->chain_end[i] = i, g->acc_node[i] = -1;
    for (int i = 0; on && i < g->n; i++) {
        kiln_tensor *acc = g->nodes[i], *m = acc->src[1];
        if (acc->op != KILN_OP_ACC_GRAD ||
            /* a DFP product too (backends/cpu/dfp_matmul.c adds it in), unless its B is a convolution's columns */
            !(m->op == KILN_OP_MATMUL || (m->op == KILN_OP_DFP_MATMUL && m->ip[2] == 0)) || m->visit != gen ||
            readers[m->slot] != 1 ||
            m->ndim != 2 || m->dtype != acc->dtype || (m->flags & KILN_FLAG_OUTPUT) || m->storage_bytes)
            continue;
        g->acc_node[m->slot] = i;
        g->acc_node[i] = -2;
    }
    for (int i = 0; on && i < g->n; i++) {
        if (!kiln__cpu_chain_head(g->nodes[i])) continue;
        int e = i;
        while (e + 1 < g->n && readers[e] == 1 && !(g->nodes[e]->flags & KILN_FLAG_OUTPUT) &&
               !g->nodes[e]->storage_bytes && kiln__cpu_chain_link(g->nodes[e], g->nodes[e + 1]))
            e++;
        for (int j = i; j <= e; j++) g->chain_end[j] = e;
        i = e;
    }
    free(readers);
    return KILN_OK;
}
