/* dfp_matmul.c — KILN_OP_DFP_MATMUL on the CPU (ops/dfp.c): quantize each
 * f32 operand to 14-bit codes with one exponent (quant/dfp.h), in its own
 * layout, and multiply (backends/cpu/gemm_dfp.h, whose packers read A as
 * [m, k] or [k, m] and B as [n, k] or [k, n]). */
#include "gemm_dfp.h"

#include "../../quant/dfp.h"

#include <stdlib.h>
#include <string.h>

#define DFP_BITS 14

/* Codes of the n values of x with one exponent. */
static kiln_status quantize(const float *x, int64_t n, int16_t **out, int *e, int *qmax) {
    int16_t *q = malloc((size_t)(n ? n : 1) * 2);
    if (!q) return kiln__errs(KILN_ERR_OOM, "dfp_matmul: out of memory quantizing an operand");
    kiln__dfp_quantize(x, n, DFP_BITS, q, e, qmax, false, 0);
    *out = q;
    return KILN_OK;
}

static kiln_status dfp_matmul_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *a = node->src[0], *b = node->src[1];
    bool ta = node->ip[0], tb = node->ip[1];
    int64_t m = node->shape[0], n = node->shape[1], k = a->shape[ta ? 0 : 1];
    int16_t *qa = NULL, *qb = NULL;
    int ea, eb, ma, mb;
    /* A stored [m, k], or [k, m] when transposed; B stored [k, n], or [n, k]
     * when transposed: the GEMM's packers read either layout */
    kiln_status s = quantize(a->data, m * k, &qa, &ea, &ma);
    if (s == KILN_OK) s = quantize(b->data, n * k, &qb, &eb, &mb);
    if (s == KILN_OK)
        s = kiln__gemm_dfp_t(ta, !tb, m, n, k, qa, ta ? m : k, ma, ea, qb, tb ? k : n, mb, eb, node->data, n,
                             ex->n_threads);
    free(qa), free(qb);
    return s;
}

void kiln__cpu_register_dfp(kiln_cpu_kernel *tab) { tab[KILN_OP_DFP_MATMUL] = dfp_matmul_kernel; }
