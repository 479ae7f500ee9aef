/* quant.c — quantized tensors: kiln_quantize makes one from f32 values
 * (the formats' scalar references, quant/), kiln_dequantize reads one back
 * as an f32 node (kernel in backends/cpu/quant.c). Quantized tensors are
 * constants: DEQUANTIZE has no backward rule, and a quantized leaf cannot
 * require grad (kiln__is_float is false for it). */
#include "backend.h"
#include "../quant/quant.h"

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
    const int64_t blk = kiln__types[dtype].blck, nb = kiln_tensor_numel(src) / blk;
    const float *x = src->data;
    char *y = q->data;
#pragma omp parallel for num_threads(kiln__threads()) if (nb * blk >= (1 << 16)) schedule(static)
    for (int64_t b = 0; b < nb; b++) kiln__types[dtype].from_f32(x + b * blk, y + kiln__elems_bytes(dtype, b * blk), blk);
    return q;
}

kiln_tensor *kiln_dequantize(kiln_ctx *ctx, kiln_tensor *q) {
    if (!q) return NULL;
    if (!kiln__is_quant(q->dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_dequantize: '%s' is %s, not a quantized dtype", q->name,
                         kiln_dtype_name(q->dtype));
    return kiln__node_new(ctx, KILN_OP_DEQUANTIZE, KILN_F32, q->ndim, q->shape, 1, &q);
}

void kiln__ops_register_quant(kiln_op_info *tab) {
    /* no backward: a quantized tensor is a constant */
    tab[KILN_OP_DEQUANTIZE] = (kiln_op_info){"dequantize", KILN_KIND_KERNEL, NULL};
}
