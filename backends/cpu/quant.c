/* quant.c — the CPU kernel of DEQUANTIZE: whole rows (or the whole tensor
 * when contiguous) through kiln__dequantize_row (SIMD where the CPU has
 * it), threaded over blocks. A strided source is a view keeping whole
 * blocks (core/tensor.c): each row starts on a block. */
#include "internal.h"
#include "../../quant/quant.h"

static kiln_status dequantize(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *q = node->src[0];
    const kiln_dtype t = q->dtype;
    const char *base = q->data;
    float *out = node->data;
    const int64_t n = kiln_tensor_numel(q), blk = kiln__types[t].blck;
    if (kiln_tensor_is_contiguous(q)) {
        /* chunks of 64 blocks (one super-block for NF4_DQ) */
        const int64_t chunk = blk * (blk >= 1024 ? 1 : 64), nc = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(ex->n_threads) if (n >= (1 << 16)) schedule(static)
        for (int64_t c = 0; c < nc; c++) {
            int64_t e0 = c * chunk, len = n - e0 < chunk ? n - e0 : chunk;
            kiln__dequantize_row(t, base + kiln__elems_bytes(t, e0), out + e0, len);
        }
        return KILN_OK;
    }
    const int nd = q->ndim;
    const int64_t cols = q->shape[nd - 1], rows = n / cols;
#pragma omp parallel for num_threads(ex->n_threads) if (n >= (1 << 16)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, i = r;
        for (int d = nd - 2; d >= 0; d--) {
            off += (i % q->shape[d]) * q->stride[d];
            i /= q->shape[d];
        }
        kiln__dequantize_row(t, base + kiln__elems_bytes(t, off), out + r * cols, cols);
    }
    return KILN_OK;
}

void kiln__cpu_register_quant(kiln_cpu_kernel *tab) { tab[KILN_OP_DEQUANTIZE] = dequantize; }
