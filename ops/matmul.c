/* matmul.c — matrix products: kiln_matmul, kiln_matmul_t and kiln_linear.
 * Constructors with their shape/dtype checks (batch dims broadcast as
 * NumPy's matmul) and the backward rule; the kernel is backends/cpu/matmul.c. */
#include "internal.h"

/* The operand as the kernel wants it: contiguous. A matrix transposed in
 * its last two dims (kiln_transpose of a contiguous tensor) is not copied:
 * its transpose is contiguous, so the kernel reads that with the transpose
 * flag flipped. */
static kiln_tensor *operand(kiln_ctx *ctx, kiln_tensor *x, bool *trans) {
    if (kiln_tensor_is_contiguous(x)) return x;
    kiln_tensor flipped = *x;
    int i = x->ndim - 2, j = x->ndim - 1;
    flipped.shape[i] = x->shape[j], flipped.shape[j] = x->shape[i];
    flipped.stride[i] = x->stride[j], flipped.stride[j] = x->stride[i];
    if (kiln_tensor_is_contiguous(&flipped)) {
        *trans = !*trans;
        return kiln_transpose(ctx, x, -2, -1);
    }
    return kiln__contig(ctx, x);
}

kiln_tensor *kiln_matmul_t(kiln_ctx *ctx, kiln_tensor *a, bool trans_a, kiln_tensor *b, bool trans_b) {
    char sa[96], sb[96];
    if (!a || !b) return NULL;
    /* f32 x . W^T with W quantized [n, k]: the fused quantized matmul;
     * any other quantized operand is dequantized first */
    if (!trans_a && trans_b && a->ndim == 2 && a->dtype == KILN_F32 && kiln__is_quant(b->dtype) && b->ndim == 2 &&
        kiln_tensor_is_contiguous(b))
        return kiln__qmatmul(ctx, "kiln_matmul", a, b);
    if (kiln__is_quant(a->dtype) && !(a = kiln_dequantize(ctx, a))) return NULL;
    if (kiln__is_quant(b->dtype) && !(b = kiln_dequantize(ctx, b))) return NULL;
    if (!kiln__is_float(a->dtype) || a->dtype != b->dtype) /* f16/bf16: the output has their dtype, as torch */
        return kiln__err(KILN_ERR_DTYPE, "kiln_matmul: needs two operands of one float dtype, not %s and %s",
                         kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if (a->ndim < 2 || b->ndim < 2)
        return kiln__err(KILN_ERR_SHAPE,
                         "kiln_matmul: operands must be at least 2-D, got a %s and b %s (reshape a vector to "
                         "[1, K] or [K, 1])",
                         kiln__shape_str(a, sa), kiln__shape_str(b, sb));
    int64_t m = a->shape[a->ndim - (trans_a ? 1 : 2)], ka = a->shape[a->ndim - (trans_a ? 2 : 1)];
    int64_t kb = b->shape[b->ndim - (trans_b ? 1 : 2)], n = b->shape[b->ndim - (trans_b ? 2 : 1)];
    if (ka != kb)
        return kiln__err(KILN_ERR_SHAPE, "kiln_matmul: inner dims differ: a %s%s has K = %lld, b %s%s has K = %lld",
                         kiln__shape_str(a, sa), trans_a ? " (transposed)" : "", (long long)ka, kiln__shape_str(b, sb),
                         trans_b ? " (transposed)" : "", (long long)kb);
    /* batch dims: aligned at the right, a 1 stretches */
    int nba = a->ndim - 2, nbb = b->ndim - 2, nb = nba > nbb ? nba : nbb;
    int64_t shape[KILN_MAX_DIMS];
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - nba), ib = i - (nb - nbb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return kiln__err(KILN_ERR_SHAPE, "kiln_matmul: batch dims of a %s and b %s do not broadcast (%lld vs %lld)",
                             kiln__shape_str(a, sa), kiln__shape_str(b, sb), (long long)da, (long long)db);
        shape[i] = da == 1 ? db : da;
    }
    shape[nb] = m;
    shape[nb + 1] = n;
    if (!kiln__shape_check("kiln_matmul", nb + 2, shape)) return NULL;
    bool ta = trans_a, tb = trans_b;
    kiln_tensor *src[2] = {operand(ctx, a, &ta), operand(ctx, b, &tb)};
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_MATMUL, a->dtype, nb + 2, shape, 2, src);
    if (t) {
        t->ip[0] = ta;
        t->ip[1] = tb;
    }
    return t;
}

kiln_tensor *kiln_matmul(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b) {
    return kiln_matmul_t(ctx, a, false, b, false);
}

/* C = op(A) op(B) with G = dC:
 *   A  B   : dA = G B^T     dB = A^T G
 *   A  B^T : dA = G B       dB = G^T A
 *   A^T B  : dA = B G^T     dB = A G
 *   A^T B^T: dA = B^T G^T   dB = G^T A^T
 * each then summed over the batch dims the operand was broadcast along. */
static kiln_status matmul_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *a = node->src[0], *b = node->src[1];
    bool ta = node->ip[0], tb = node->ip[1];
    if (kiln_tensor_requires_grad(a)) {
        kiln_tensor *g = !ta ? kiln_matmul_t(ctx, gy, false, b, !tb) : kiln_matmul_t(ctx, b, tb, gy, true);
        if (!(gsrc[0] = kiln__sum_to(ctx, g, a))) return kiln_last_status();
    }
    if (kiln_tensor_requires_grad(b) && b->ndim == 2 && a->ndim > 2 && !ta) {
        /* a 2-D b shared by a batch of a (a linear layer's weight): one
         * product over every row of the batch rather than one per matrix
         * summed afterwards; a 2-D product can also add straight into the
         * weight's gradient (KILN_FUSE_ACC) */
        int64_t rows = kiln__numel(a->ndim - 1, a->shape), k = a->shape[a->ndim - 1], n = gy->shape[gy->ndim - 1];
        kiln_tensor *a2 = kiln_reshape(ctx, a, 2, (int64_t[]){rows, k}), *g2 = kiln_reshape(ctx, gy, 2, (int64_t[]){rows, n});
        if (!(gsrc[1] = !tb ? kiln_matmul_t(ctx, a2, true, g2, false) : kiln_matmul_t(ctx, g2, true, a2, false)))
            return kiln_last_status();
    } else if (kiln_tensor_requires_grad(b)) {
        kiln_tensor *g = !tb ? kiln_matmul_t(ctx, a, !ta, gy, false) : kiln_matmul_t(ctx, gy, true, a, ta);
        if (!(gsrc[1] = kiln__sum_to(ctx, g, b))) return kiln_last_status();
    }
    return KILN_OK;
}

kiln_tensor *kiln_linear(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias) {
    char sx[96], sw[96], sb[96];
    if (!x || !w) return NULL;
    if (kiln__is_quant(w->dtype) && x->dtype == KILN_F32 && w->ndim == 2 && kiln_tensor_is_contiguous(w) &&
        x->shape[x->ndim - 1] == w->shape[1] && (!bias || (bias->ndim == 1 && bias->shape[0] == w->shape[0]))) {
        kiln_tensor *y = kiln__qmatmul(ctx, "kiln_linear", x, w);
        return bias && y ? kiln_add(ctx, y, bias) : y;
    }
    if (kiln__is_quant(w->dtype) && !(w = kiln_dequantize(ctx, w))) return NULL;
    if (w->ndim != 2)
        return kiln__err(KILN_ERR_SHAPE, "kiln_linear: the weight %s must be 2-D [out, in]", kiln__shape_str(w, sw));
    if (x->shape[x->ndim - 1] != w->shape[1])
        return kiln__err(KILN_ERR_SHAPE, "kiln_linear: the input %s has %lld features but the weight %s takes %lld",
                         kiln__shape_str(x, sx), (long long)x->shape[x->ndim - 1], kiln__shape_str(w, sw),
                         (long long)w->shape[1]);
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        return kiln__err(KILN_ERR_SHAPE, "kiln_linear: the bias %s must be [%lld] for the weight %s",
                         kiln__shape_str(bias, sb), (long long)w->shape[0], kiln__shape_str(w, sw));
    if (x->dtype != w->dtype || (bias && bias->dtype != w->dtype) || !kiln__is_float(w->dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_linear: input %s, weight %s and bias %s must share one float dtype",
                         kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype),
                         bias ? kiln_dtype_name(bias->dtype) : "-");
    /* a vector input is a batch of one row, as torch.nn.functional.linear */
    kiln_tensor *x2 = x->ndim == 1 ? kiln_reshape(ctx, x, 2, (int64_t[]){1, x->shape[0]}) : x;
    kiln_tensor *y = kiln_matmul_t(ctx, x2, false, w, true);
    if (bias) y = kiln_add(ctx, y, bias);
    return x->ndim == 1 ? kiln_reshape(ctx, y, 1, &w->shape[0]) : y;
}

void kiln__ops_register_matmul(kiln_op_info *tab) {
    tab[KILN_OP_MATMUL] = (kiln_op_info){"matmul", KILN_KIND_KERNEL, matmul_backward};
}
