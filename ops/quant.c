/* quant.c — quantized tensors: kiln_quantize makes one from f32 values
 * (the formats' scalar references, quant/), kiln_dequantize reads one back
 * as an f32 node (kernel in backends/cpu/quant.c). Quantized tensors are
 * constants: DEQUANTIZE has no backward rule, and a quantized leaf cannot
 * require grad (kiln__is_float is false for it). */
#include "backend.h"
#include "pool.h"

#include <string.h>

/* blocks [b0, b1) of arg = {src, q}, in one call: a reference may search
 * several blocks at once (IQ4_NL's does) */
static void quantize_blocks(void *arg, int64_t b0, int64_t b1, int tid) {
    const kiln_tensor *src = ((void **)arg)[0];
    kiln_tensor *q = ((void **)arg)[1];
    const int64_t blk = kiln__types[q->dtype].blck;
    (void)tid;
    kiln__types[q->dtype].from_f32((const float *)src->data + b0 * blk,
                                   (char *)q->data + kiln__elems_bytes(q->dtype, b0 * blk), (b1 - b0) * blk);
}

kiln_tensor *kiln_quantize(kiln_ctx *ctx, kiln_tensor *src, kiln_dtype dtype) {
    char sx[96];
    if (!src) return NULL;
    if (!ctx) return kiln__err(KILN_ERR_ARG, "kiln_quantize: ctx is NULL");
    if ((unsigned)dtype >= KILN_DTYPE_COUNT || !kiln__is_quant(dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_quantize: %s is not a quantized dtype", kiln_dtype_name(dtype));
    if (src->dtype != KILN_F32)
        return kiln__err(KILN_ERR_DTYPE, "kiln_quantize: the source '%s' is %s; it must be f32", src->name,
                         kiln_dtype_name(src->dtype));
    if (!kiln_tensor_is_contiguous(src))
        return kiln__err(KILN_ERR_SHAPE, "kiln_quantize: the source '%s' %s is not contiguous", src->name,
                         kiln__shape_str(src, sx));
    if (!kiln__quant_shape_ok("kiln_quantize", dtype, src->ndim, src->shape)) return NULL;
    if (!src->data)
        return kiln__err(KILN_ERR_STATE, "kiln_quantize: '%s' (%s) has no data: compute it first", src->name,
                         kiln__op_table[src->op].name);
    if (kiln__host_read(src)) return NULL;
    kiln_tensor *q = kiln_tensor_new(ctx, dtype, src->ndim, src->shape);
    if (!q) return NULL;
    kiln_tensor_set_name(q, src->name);
    /* whole blocks per thread: the references are independent per block */
    const int64_t nb = kiln_tensor_numel(src) / kiln__types[dtype].blck;
    kiln__pool_for(nb, 1, nb * kiln__types[dtype].blck >= (1 << 16) ? kiln__threads() : 1, quantize_blocks,
                   (void *[]){src, q});
    return q;
}

kiln_tensor *kiln_dequantize(kiln_ctx *ctx, kiln_tensor *q) {
    if (!q) return NULL;
    if (!kiln__is_quant(q->dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_dequantize: '%s' is %s, not a quantized dtype", q->name,
                         kiln_dtype_name(q->dtype));
    return kiln__node_new(ctx, KILN_OP_DEQUANTIZE, KILN_F32, q->ndim, q->shape, 1, &q);
}

/* y [..., n] = x [..., k] (f32) . W^T with W quantized [n, k], contiguous
 * (kiln_linear's layout), as one QMATMUL node reading W's blocks directly
 * (backends/cpu/qmatmul.c). x of more than 2 dims is flattened to rows.
 * Returns NULL without an error set when the fused op does not apply (the
 * caller then dequantizes); errors are for bad shapes. */
kiln_tensor *kiln__qmatmul(kiln_ctx *ctx, const char *who, kiln_tensor *x, kiln_tensor *w) {
    char sx[96], sw[96];
    if (!x || !w) return NULL;
    if (!kiln__is_quant(w->dtype))
        return kiln__err(KILN_ERR_DTYPE, "%s: the weight '%s' is %s, not quantized", who, w->name,
                         kiln_dtype_name(w->dtype));
    if (x->dtype != KILN_F32)
        return kiln__err(KILN_ERR_DTYPE, "%s: the input '%s' is %s; it must be f32", who, x->name,
                         kiln_dtype_name(x->dtype));
    if (w->ndim != 2 || !kiln_tensor_is_contiguous(w))
        return kiln__err(KILN_ERR_SHAPE, "%s: the weight %s must be a contiguous 2-D [out, in] tensor", who,
                         kiln__shape_str(w, sw));
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return kiln__err(KILN_ERR_SHAPE, "%s: the input %s must have %lld features (last dim) for the weight %s", who,
                         kiln__shape_str(x, sx), (long long)w->shape[1], kiln__shape_str(w, sw));
    const int64_t k = w->shape[1], n = w->shape[0], m = kiln__numel(x->ndim - 1, x->shape); /* rows, also for k = 0 */
    if (k % 32 || k % kiln__types[w->dtype].row_blck)
        return kiln__err(KILN_ERR_SHAPE, "%s: the weight %s needs rows of whole %s blocks", who, kiln__shape_str(w, sw),
                         kiln_dtype_name(w->dtype));
    if (!kiln__shape_check(who, 2, (int64_t[]){m, n})) return NULL;
    kiln_tensor *x2 = kiln__contig(ctx, x);
    if (x2 && x2->ndim != 2) x2 = kiln_reshape(ctx, x2, 2, (int64_t[]){m, k});
    if (!x2) return NULL;
    kiln_tensor *src[2] = {x2, w};
    kiln_tensor *y = w->dtype == KILN_DFP16 /* no fused kernel: the f32 product of the dequantized weight */
                         ? kiln_matmul_t(ctx, x2, false, kiln_dequantize(ctx, w), true)
                         : kiln__node_new(ctx, KILN_OP_QMATMUL, KILN_F32, 2, (int64_t[]){m, n}, 2, src);
    if (!y || x->ndim == 2) return y;
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = n;
    return kiln_reshape(ctx, y, x->ndim, shape);
}

/* d x = g . W (W dequantized): W is a constant. */
static kiln_status qmatmul_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (kiln_tensor_requires_grad(node->src[0]) &&
        !(gsrc[0] = kiln_matmul(ctx, gy, kiln_dequantize(ctx, node->src[1]))))
        return kiln_last_status();
    return KILN_OK;
}

void kiln__ops_register_quant(kiln_op_info *tab) {
    /* no backward: a quantized tensor is a constant */
    tab[KILN_OP_DEQUANTIZE] = (kiln_op_info){"dequantize", KILN_KIND_KERNEL, NULL};
    tab[KILN_OP_QMATMUL] = (kiln_op_info){"qmatmul", KILN_KIND_KERNEL, qmatmul_backward};
}
