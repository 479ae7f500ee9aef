/* dfp_matmul.c — KILN_OP_DFP_MATMUL on the CPU (ops/dfp.c): quantize each
 * f32 operand to 14-bit codes with one exponent (quant/dfp.h), lay them out
 * as the DFP GEMM's NT operands (A [m, k], B [n, k]; a transposed operand
 * is quantized in its own layout, then its codes transposed), multiply
 * (backends/cpu/gemm_dfp.h). */
#include "gemm_dfp.h"

#include "../../quant/dfp.h"

#include <stdlib.h>
#include <string.h>

#define DFP_BITS 14

/* Codes of the [rows, cols] row-major x, as [rows, cols] (flip false) or
 * [cols, rows] (flip true). */
static kiln_status quantize(const float *x, int64_t rows, int64_t cols, bool flip, int16_t **out, int *e,
                            int *qmax) {
    int64_t n = rows * cols;
    int16_t *q = malloc((size_t)(n ? n : 1) * 2), *t = NULL;
    if (!q) return kiln__errs(KILN_ERR_OOM, "dfp_matmul: out of memory quantizing an operand");
    kiln__dfp_quantize(x, n, DFP_BITS, q, e, qmax, false, 0);
    if (flip) {
        if (!(t = malloc((size_t)(n ? n : 1) * 2))) {
            free(q);
            return kiln__errs(KILN_ERR_OOM, "dfp_matmul: out of memory quantizing an operand");
        }
        for (int64_t i0 = 0; i0 < rows; i0 += 32) /* blocked transpose */
            for (int64_t j0 = 0; j0 < cols; j0 += 32)
                for (int64_t i = i0; i < rows && i < i0 + 32; i++)
                    for (int64_t j = j0; j < cols && j < j0 + 32; j++) t[j * rows + i] = q[i * cols + j];
        free(q);
        q = t;
    }
    *out = q;
    return KILN_OK;
}

static kiln_status dfp_matmul_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *a = node->src[0], *b = node->src[1];
    bool ta = node->ip[0], tb = node->ip[1];
    int64_t m = node->shape[0], n = node->shape[1], k = a->shape[ta ? 0 : 1];
    int16_t *qa = NULL, *qb = NULL;
    int ea, eb, ma, mb;
    /* A as [m, k]: stored [m, k] (as is) or [k, m] (flipped); B as [n, k]:
     * stored [n, k] when transposed, [k, n] (flipped) when not */
    kiln_status s = quantize(a->data, a->shape[0], a->shape[1], ta, &qa, &ea, &ma);
    if (s == KILN_OK) s = quantize(b->data, b->shape[0], b->shape[1], !tb, &qb, &eb, &mb);
    if (s == KILN_OK) s = kiln__gemm_dfp(m, n, k, qa, k, ma, ea, qb, k, mb, eb, node->data, n, ex->n_threads);
    free(qa), free(qb);
    return s;
}

void kiln__cpu_register_dfp(kiln_cpu_kernel *tab) { tab[KILN_OP_DFP_MATMUL] = dfp_matmul_kernel; }
