/* quant.c — the CPU kernel of DEQUANTIZE: whole rows (or the whole tensor
 * when contiguous) through kiln__dequantize_row (SIMD where the CPU has
 * it), threaded over blocks. A strided source is a view keeping whole
 * blocks (core/tensor.c): each row starts on a block. */
#include "internal.h"
#include "coders.h"
#include "pool.h"

typedef struct deq_job {
    const kiln_tensor *q;
    const char *base;
    float *out;
    int64_t n, chunk, cols;
} deq_job;

/* chunks [c0, c1) of a contiguous source */
static void deq_chunks(void *arg, int64_t c0, int64_t c1, int tid) {
    const deq_job *j = arg;
    (void)tid;
    for (int64_t c = c0; c < c1; c++) {
        int64_t e0 = c * j->chunk, len = j->n - e0 < j->chunk ? j->n - e0 : j->chunk;
        kiln__dequantize_row(j->q->dtype, j->base + kiln__elems_bytes(j->q->dtype, e0), j->out + e0, len);
    }
}

/* rows [r0, r1) of a strided source */
static void deq_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const deq_job *j = arg;
    const kiln_tensor *q = j->q;
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = 0, i = r;
        for (int d = q->ndim - 2; d >= 0; d--) {
            off += (i % q->shape[d]) * q->stride[d];
            i /= q->shape[d];
        }
        kiln__dequantize_row(q->dtype, j->base + kiln__elems_bytes(q->dtype, off), j->out + r * j->cols, j->cols);
    }
}

static kiln_status dequantize(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *q = node->src[0];
    const int64_t n = kiln_tensor_numel(q), blk = kiln__types[q->dtype].blck;
    const int nt = n >= (1 << 16) ? ex->n_threads : 1;
    deq_job j = {q, q->data, node->data, n, 0, q->shape[q->ndim - 1]};
    if (kiln_tensor_is_contiguous(q)) {
        /* chunks of 64 blocks (one super-block for NF4_DQ) */
        j.chunk = blk * (blk >= 1024 ? 1 : 64);
        kiln__pool_for((n + j.chunk - 1) / j.chunk, 1, nt, deq_chunks, &j);
    } else
        kiln__pool_for(n / j.cols, 1, nt, deq_rows, &j);
    return KILN_OK;
}

void kiln__cpu_register_quant(kiln_cpu_kernel *tab) { tab[KILN_OP_DEQUANTIZE] = dequantize; }
