/* dfp_matmul.c — KILN_OP_DFP_MATMUL on the CPU (ops/dfp.c): quantize each
 * f32 operand to 14-bit codes with one exponent (quant/dfp.h), in its own
 * layout, and multiply (backends/cpu/gemm_dfp.h, whose packers read A as
 * [m, k] or [k, m] and B as [n, k] or [k, n]); an operand's codes are
 * reused by the other products of the same compute that read it. */
#include "gemm_dfp.h"

#include "../../quant/dfp.h"

#include <stdlib.h>
#include <string.h>

#define DFP_BITS 14

/* Each operand quantized once per compute. A DFP layer's three products
 * share their operands as graph nodes: the forward quantizes x and W, the
 * backward-data product needs W and the incoming gradient G, the
 * backward-weight product G and x (for a convolution, its im2col columns)
 * again. The codes of every operand are kept until the compute ends and
 * reused, keyed by the node, its data and the compute's serial (unique
 * process-wide, so a weight shared by two graphs and updated between their
 * computes is quantized anew). Quantizing is deterministic, so a reused
 * code is the one a second quantization would give: results are the same
 * bit for bit. Per thread: a graph runs its kernels one after another on
 * the thread that computes it, so no entry is freed while a kernel reads
 * it; the codes of the latest compute stay until the thread's next one.
 * A node's value is fixed once computed: kiln's graphs never rewrite an
 * operand in place between two of its readers (the f32 backward products
 * would read the rewrite too), so codes made from it stay its codes. */
typedef struct qentry {
    const kiln_tensor *node;
    const void *data;
    int64_t n, cap; /* values quantized; int16 room of q */
    int16_t *q;
    int e, qmax;
} qentry;
/* Entries [0, n) hold this compute's operands; every one up to cap keeps
 * its buffer for the next compute, whose i-th operand usually has the
 * i-th size again (a graph runs its nodes in one order): no allocation,
 * no page faults in a training loop's steady state. */
static _Thread_local struct {
    uint64_t serial;
    qentry *e;
    int n, cap;
} cache;

/* The codes of src (n values), from the cache or quantized into it;
 * serial 0 (a compute without one) or no memory for an entry: into *owned,
 * which the caller frees. */
static kiln_status operand(const kiln_tensor *src, int64_t n, uint64_t serial, const int16_t **q, int *e, int *qmax,
                           int16_t **owned) {
    *owned = NULL;
    if (serial && serial == cache.serial)
        for (int i = 0; i < cache.n; i++)
            if (cache.e[i].node == src && cache.e[i].data == src->data && cache.e[i].n == n) {
                *q = cache.e[i].q, *e = cache.e[i].e, *qmax = cache.e[i].qmax;
                return KILN_OK;
            }
    if (serial && serial != cache.serial) cache.serial = serial, cache.n = 0;
    qentry *slot = NULL;
    if (serial && cache.n == cache.cap) {
        int cap = cache.cap ? 2 * cache.cap : 16;
        qentry *grown = kiln__realloc(cache.e, (size_t)cap * sizeof *grown);
        if (grown) {
            memset(grown + cache.cap, 0, (size_t)(cap - cache.cap) * sizeof *grown);
            cache.e = grown, cache.cap = cap;
        }
    }
    if (serial && cache.n < cache.cap) {
        slot = &cache.e[cache.n];
        if (slot->cap < n) {
            int16_t *grown = kiln__realloc(slot->q, (size_t)n * 2);
            if (grown) slot->q = grown, slot->cap = n;
            else slot = NULL;
        }
    }
    int16_t *codes = slot ? slot->q : kiln__malloc((size_t)(n ? n : 1) * 2);
    if (!codes) return kiln__errs(KILN_ERR_OOM, "dfp_matmul: out of memory quantizing an operand");
    kiln__dfp_quantize(src->data, n, DFP_BITS, codes, e, qmax, false, 0);
    *q = codes;
    if (slot) {
        slot->node = src, slot->data = src->data, slot->n = n, slot->e = *e, slot->qmax = *qmax;
        cache.n++;
    } else
        *owned = codes;
    return KILN_OK;
}

static kiln_status dfp_matmul_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *a = node->src[0], *b = node->src[1];
    bool ta = node->ip[0], tb = node->ip[1];
    int64_t m = node->shape[0], n = node->shape[1], k = a->shape[ta ? 0 : 1];
    const int16_t *qa = NULL, *qb = NULL;
    int ea, eb, ma, mb;
    int16_t *own_a, *own_b = NULL;
    /* A stored [m, k], or [k, m] when transposed; B stored [k, n], or [n, k]
     * when transposed: the GEMM's packers read either layout */
    kiln_status s = operand(a, m * k, ex->serial, &qa, &ea, &ma, &own_a);
    if (s == KILN_OK) s = operand(b, n * k, ex->serial, &qb, &eb, &mb, &own_b);
    if (s == KILN_OK)
        s = kiln__gemm_dfp_t(ta, !tb, m, n, k, qa, ta ? m : k, ma, ea, qb, tb ? k : n, mb, eb, node->data, n,
                             ex->n_threads);
    free(own_a), free(own_b);
    return s;
}

void kiln__cpu_register_dfp(kiln_cpu_kernel *tab) { tab[KILN_OP_DFP_MATMUL] = dfp_matmul_kernel; }
