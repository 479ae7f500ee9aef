/* fuse.c — the rewrite: which nodes of a planned graph run as one fused
 * step, chosen from op facts for the fused forms the graph's backend runs
 * (vt->fuses), and invisible in the results:
 *  - KILN_FUSE_CHAIN: element-wise chains run as one tiled pass. A chain is
 *    a run of consecutive nodes, each an element-wise op on f32/f64 whose
 *    other operands tile with its output (kiln__fuse_operand), where every
 *    node but the last is read only by the next one and is not an output:
 *    nothing else ever sees the intermediates, so they are never written;
 *  - KILN_FUSE_SIDE: a chain may also take a side link, a node that does
 *    not read the link before it, when the next node reads both (the
 *    ReLU's mask beside the gradient it masks: a residual gradient's add,
 *    the cmp, the mul);
 *  - KILN_FUSE_NORM_RELU: a training batch_norm read only by the ReLU
 *    right after it, or by an add of a residual read only by that ReLU (a
 *    BasicBlock's tail), makes a chain of two or three: the norm's kernel
 *    adds the residual and clamps as it writes the ReLU's output, and the
 *    norm's and the add's own are never stored; backward, the ReLU's mask
 *    (cmp), its mul and the batch_norm_grad that alone reads the product
 *    make one, the norm's gradient masking gy as it reads it;
 *  - KILN_FUSE_ACC: a matmul read only by the ACC_GRAD that adds it into a
 *    gradient (the weight gradient of every linear layer) adds into the
 *    gradient itself (GEMM with beta = 1), so it needs no buffer and the
 *    extra pass is gone; a DFP matmul (ops/dfp.c) and a convolution's
 *    weight gradient (CONV2D_GRAD_W, read through its reshape) the same way.
 * Every node of a fused step is one the backend supports. The CPU runs all
 * four forms, Vulkan and CUDA the chains and ACC (their chain kernels run
 * element-wise ops, one link after another); a backend that runs none gets
 * every node alone, as does every graph under $KILN_FUSE=0. */
#include "graph.h"

static bool elementwise(const kiln_tensor *t) {
    return ((t->op >= KILN_OP_NEG && t->op <= KILN_OP_GELU_TANH_GRAD) || (t->op >= KILN_OP_ADD && t->op <= KILN_OP_CMP)) &&
           kiln__is_compute_float(t->dtype);
}

/* s [1, C, 1, ...] against t [N, C, ...] of the same rank (C > 1, at least 3 dims) */
static bool per_channel(const kiln_tensor *s, const kiln_tensor *t) {
    if (s->ndim != t->ndim || t->ndim < 3 || s->shape[1] != t->shape[1] || t->shape[1] == 1) return false;
    for (int d = 0; d < s->ndim; d++)
        if (d != 1 && s->shape[d] != 1) return false;
    return true;
}

kiln_fuse_operand kiln__fuse_operand(const kiln_tensor *s, const kiln_tensor *t) {
    if (s->dtype != t->dtype || !kiln_tensor_is_contiguous(s)) return KILN_OPND_BAD;
    int64_t n = kiln_tensor_numel(s), c = t->shape[t->ndim - 1];
    if (kiln__same_shape(s, t)) return KILN_OPND_FULL;
    if (n == 1) return KILN_OPND_SCALAR;
    if (n == c && s->shape[s->ndim - 1] == c && s->ndim <= t->ndim) return KILN_OPND_ROW;
    if (per_channel(s, t)) return KILN_OPND_CHAN;
    return KILN_OPND_BAD;
}

/* Can t start a chain? */
static bool chain_head(const kiln_tensor *t) {
    if (!elementwise(t)) return false;
    for (int k = 0; k < t->nsrc; k++)
        if (kiln__fuse_operand(t->src[k], t) == KILN_OPND_BAD) return false;
    return true;
}

/* Can t follow prev in a chain (reading it as one of its operands)? */
static bool chain_link(const kiln_tensor *prev, const kiln_tensor *t) {
    if (!elementwise(t)) return false;
    bool linked = false;
    for (int k = 0; k < t->nsrc; k++) {
        if (t->src[k] == prev) linked = kiln__same_shape(prev, t);
        else if (kiln__fuse_operand(t->src[k], t) == KILN_OPND_BAD) return false;
    }
    return linked && elementwise(prev);
}

/* Can s, which does not read prev, be a side link between prev and t, t
 * reading both (the ReLU's mask beside the gradient it masks: add, cmp,
 * mul)? */
static bool side_link(const kiln_tensor *prev, const kiln_tensor *s, const kiln_tensor *t) {
    bool reads_s = false;
    for (int k = 0; k < t->nsrc; k++) reads_s |= t->src[k] == s;
    for (int k = 0; k < s->nsrc; k++)
        if (s->src[k] == prev) return false;
    return reads_s && chain_head(s) && kiln__same_shape(s, t) && chain_link(prev, t);
}

/* May node i be a chain's link before its last: read once (by the next
 * link, or by the one after a side link), no output, no storage of its own? */
static bool inner(const kiln_graph *g, const int *readers, int i) {
    const kiln_tensor *t = g->nodes[i];
    return readers[i] == 1 && !(t->flags & KILN_FLAG_OUTPUT) && !t->storage_bytes;
}

/* Is node i read only by node i + 1, which the backend runs? */
static bool only_next(const kiln_graph *g, const int *readers, kiln_backend *b, int i) {
    return i + 1 < g->n && inner(g, readers, i) && g->nodes[i + 1]->dtype == g->nodes[i]->dtype &&
           b->vt->supports(b, g->nodes[i + 1]);
}

/* The nodes of a norm's chain from node i: a training batch_norm, [an add
 * of it and a residual of its shape,] then a ReLU, each read only by the
 * next (a BasicBlock's tail); 0 when node i starts none. */
static int norm_relu(const kiln_graph *g, const int *readers, kiln_backend *b, int i) {
    kiln_tensor *t = g->nodes[i], *a = i + 1 < g->n ? g->nodes[i + 1] : NULL;
    if (t->op != KILN_OP_BATCH_NORM || !b->vt->supports(b, t) || !only_next(g, readers, b, i)) return 0;
    int n = 1;
    if (a->op == KILN_OP_ADD && (a->src[0] == t) != (a->src[1] == t) && kiln__same_shape(a, t) &&
        kiln__fuse_operand(a->src[a->src[0] == t], a) == KILN_OPND_FULL && only_next(g, readers, b, i + 1))
        t = a, n = 2;
    const kiln_tensor *r = g->nodes[i + n];
    return r->op == KILN_OP_RELU && r->src[0] == t ? n + 1 : 0;
}

/* Is v a whole reshape of a CONV2D_GRAD_W, read by one node? */
static bool reshaped_grad_w(const kiln_tensor *v, const int *readers, uint64_t gen) {
    const kiln_tensor *p = v->view_src;
    return v->op == KILN_OP_VIEW && p && v->src[0] == p && p->op == KILN_OP_CONV2D_GRAD_W && !v->view_offs &&
           kiln_tensor_is_contiguous(v) && v->visit == gen && readers[v->slot] == 1 && !(v->flags & KILN_FLAG_OUTPUT);
}

/* Is node i the ReLU's gradient mask (cmp y != scalar, read only by the
 * mul at i + 1 that masks a gradient g with it), that product read only as
 * gy by the batch_norm_grad at i + 2? */
static bool relu_mask_norm_grad(const kiln_graph *g, const int *readers, kiln_backend *b, int i) {
    kiln_tensor *c = g->nodes[i];
    if (c->op != KILN_OP_CMP || c->ip[0] != KILN_CMP_NE || !elementwise(c) || !b->vt->supports(b, c) ||
        kiln__fuse_operand(c->src[0], c) != KILN_OPND_FULL || kiln__fuse_operand(c->src[1], c) != KILN_OPND_SCALAR ||
        !only_next(g, readers, b, i) || !only_next(g, readers, b, i + 1))
        return false;
    kiln_tensor *m = g->nodes[i + 1], *n = g->nodes[i + 2];
    return m->op == KILN_OP_MUL && (m->src[0] == c) != (m->src[1] == c) && kiln__same_shape(m, c) &&
           kiln__fuse_operand(m->src[m->src[0] == c], m) == KILN_OPND_FULL && n->op == KILN_OP_BATCH_NORM_GRAD &&
           n->src[1 + (n->ip[0] != 0)] == m && n->src[0] != m && (n->ip[0] == 0 || n->src[1] != m) &&
           kiln__same_shape(m, n->src[0]);
}

kiln_status kiln__graph_fuse(kiln_graph *g, kiln_backend *b, uint64_t gen) {
    kiln_status s = kiln__owned_grow(g->ctx, (void **)&g->chain_end, &g->chain_cap, g->n, sizeof *g->chain_end);
    if (!s) s = kiln__owned_grow(g->ctx, (void **)&g->acc_node, &g->acc_cap, g->n, sizeof *g->acc_node);
    if (s) return s;
    for (int i = 0; i < g->n; i++) g->chain_end[i] = i, g->acc_node[i] = -1;
    const char *env = getenv("KILN_FUSE");
    unsigned forms = b && !(env && !strcmp(env, "0")) ? b->vt->fuses : 0;
    if (!forms) return KILN_OK;
    int *readers = kiln__calloc((size_t)(g->n ? g->n : 1), sizeof *readers);
    if (!readers) return kiln__errs(KILN_ERR_OOM, "graph: out of memory finding fused chains");
    for (int i = 0; i < g->n; i++) {
        kiln_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++)
            if (t->src[k]->visit == gen) readers[t->src[k]->slot]++;
        if (t->view_src && t->view_src->visit == gen) readers[t->view_src->slot]++;
    }
    for (int i = 0; (forms & KILN_FUSE_ACC) && i < g->n; i++) {
        kiln_tensor *acc = g->nodes[i], *m = acc->src[1];
        if (acc->op != KILN_OP_ACC_GRAD) continue;
        /* a convolution's weight gradient, [O, K], reaches the [O, C, kh, kw] gradient through a reshape */
        bool via = reshaped_grad_w(m, readers, gen);
        if (via) m = m->view_src;
        if (!(m->op == KILN_OP_MATMUL || (m->op == KILN_OP_DFP_MATMUL && m->ip[2] == 0) ||
              m->op == KILN_OP_CONV2D_GRAD_W) ||
            /* a view reads its source twice (src[0] and view_src) */
            m->visit != gen || readers[m->slot] != 1 + via || m->ndim != 2 || m->dtype != acc->dtype ||
            (m->flags & KILN_FLAG_OUTPUT) || m->storage_bytes || !b->vt->supports(b, m))
            continue;
        g->acc_node[m->slot] = i;
        g->acc_node[i] = -2;
    }
    for (int i = 0; (forms & KILN_FUSE_CHAIN) && i < g->n; i++) {
        int nr = 0;
        if (forms & KILN_FUSE_NORM_RELU) nr = relu_mask_norm_grad(g, readers, b, i) ? 3 : norm_relu(g, readers, b, i);
        if (nr) {
            for (int j = i; j < i + nr; j++) g->chain_end[j] = i + nr - 1;
            i += nr - 1;
            continue;
        }
        if (!chain_head(g->nodes[i]) || !b->vt->supports(b, g->nodes[i])) continue;
        int e = i;
        while (e + 1 < g->n && inner(g, readers, e) && b->vt->supports(b, g->nodes[e + 1])) {
            kiln_tensor *prev = g->nodes[e], *t = g->nodes[e + 1];
            if (chain_link(prev, t)) {
                e++;
            } else if ((forms & KILN_FUSE_SIDE) && e + 2 < g->n && inner(g, readers, e + 1) &&
                       side_link(prev, t, g->nodes[e + 2]) && b->vt->supports(b, g->nodes[e + 2])) {
                e += 2;
            } else {
                break;
            }
        }
        for (int j = i; j <= e; j++) g->chain_end[j] = e;
        i = e;
    }
    free(readers);
    return KILN_OK;
}
