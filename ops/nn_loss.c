/* nn_loss.c — the losses: cross_entropy (a fused kernel with a backward
 * rule built from ops) and mse (a composite of element-wise ops). */
#include "internal.h"
#include "nn_ops.h"

kiln_tensor *kiln_cross_entropy(kiln_ctx *ctx, kiln_tensor *logits, kiln_tensor *labels, int32_t ignore_index) {
    char s1[96], s2[96];
    if (!logits || !labels) return NULL;
    if (!kiln__nn_check_float("kiln_cross_entropy", "logits", logits)) return NULL;
    if (labels->dtype != KILN_I32)
        return kiln__err(KILN_ERR_DTYPE, "kiln_cross_entropy: labels %s are %s; need i32", kiln__shape_str(labels, s1),
                         kiln_dtype_name(labels->dtype));
    if (logits->ndim < 2)
        return kiln__err(KILN_ERR_SHAPE, "kiln_cross_entropy: logits %s need at least 2 dims ([N, C])",
                         kiln__shape_str(logits, s1));
    if (!kiln__shape_eq(labels->ndim, labels->shape, logits->ndim - 1, logits->shape))
        return kiln__err(KILN_ERR_SHAPE,
                         "kiln_cross_entropy: labels %s must have the shape of logits %s without its last axis",
                         kiln__shape_str(labels, s1), kiln__shape_str(logits, s2));
    kiln_tensor *src[2] = {kiln__contig(ctx, logits), kiln__contig(ctx, labels)};
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_CROSS_ENTROPY, logits->dtype, 1, (int64_t[]){1}, 2, src);
    if (y) y->ip[0] = ignore_index;
    return y;
}

/* d loss / d logits = (softmax(logits) - one_hot(labels)) * keep * gy / count,
 * keep = 1 on rows whose label is not ignore_index, count = sum(keep)
 * (1 when every row is ignored: the loss is then 0, see the kernel). keep
 * comes from comparing the labels rather than from sum(one_hot), so an
 * ignore_index inside [0, C) (a padding class 0, say) is ignored too.
 * The fused kernel computes this; here it is in ops, for the gradient of
 * CROSS_ENTROPY_GRAD itself. */
static kiln_tensor *cross_entropy_grad_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *x = node->src[0], *labels = node->src[1], *gy = node->src[2];
    kiln_dtype dt = x->dtype;
    int64_t c = x->shape[x->ndim - 1], kshape[KILN_MAX_DIMS];
    memcpy(kshape, x->shape, sizeof kshape);
    kshape[x->ndim - 1] = 1;
    /* compared in f64: every i32 label is exact there */
    kiln_tensor *keep = kiln_cmp(ctx, kiln_cast(ctx, labels, KILN_F64),
                                 kiln_scalar(ctx, KILN_F64, (double)node->ip[0]), KILN_CMP_NE);
    if (keep && dt != KILN_F64) keep = kiln_cast(ctx, keep, dt);
    keep = kiln_reshape(ctx, keep, x->ndim, kshape);
    kiln_tensor *count = kiln_sum_all(ctx, keep);
    kiln_tensor *denom = kiln_add(ctx, count, kiln_cmp(ctx, count, kiln_scalar(ctx, dt, 0.0), KILN_CMP_EQ));
    kiln_tensor *diff = kiln_sub(ctx, kiln_softmax(ctx, x, false), kiln_one_hot(ctx, labels, c, dt));
    return kiln_mul(ctx, kiln_mul(ctx, diff, keep), kiln_div(ctx, gy, denom));
}

static kiln_status cross_entropy_grad_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, cross_entropy_grad_reference(ctx, node), gy, gsrc);
}

/* KILN_OP_CROSS_ENTROPY_GRAD: src logits [..., C], labels [...] (i32), gy
 * [1] (the loss's gradient); ip[0] = ignore_index; output d loss / d
 * logits, logits' shape, in one pass per row. */
static kiln_status cross_entropy_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    if (!kiln_tensor_requires_grad(x)) return KILN_OK;
    kiln_tensor *src[3] = {x, node->src[1], kiln__contig(ctx, gy)};
    kiln_tensor *gx = kiln__node_new(ctx, KILN_OP_CROSS_ENTROPY_GRAD, x->dtype, x->ndim, x->shape, 3, src);
    if (gx) gx->ip[0] = node->ip[0];
    gsrc[0] = gx;
    return gx ? KILN_OK : kiln_last_status();
}

/* Equal shapes only: mse of a [N, 1] prediction against [N] targets would
 * broadcast to [N, N] in torch (with a warning), which is never meant. */
kiln_tensor *kiln_mse(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b) {
    char s1[96], s2[96];
    if (!a || !b) return NULL;
    if (!kiln__nn_check_float("kiln_mse", "a", a) || !kiln__nn_check_float("kiln_mse", "b", b)) return NULL;
    if (a->dtype != b->dtype)
        return kiln__err(KILN_ERR_DTYPE, "kiln_mse: a is %s but b is %s", kiln_dtype_name(a->dtype),
                         kiln_dtype_name(b->dtype));
    if (!kiln__same_shape(a, b))
        return kiln__err(KILN_ERR_SHAPE, "kiln_mse: shapes %s and %s differ (mse does not broadcast)",
                         kiln__shape_str(a, s1), kiln__shape_str(b, s2));
    kiln_tensor *d = kiln_sub(ctx, a, b);
    return kiln_mean_all(ctx, kiln_mul(ctx, d, d));
}

void kiln__ops_register_nn_loss(kiln_op_info *tab) {
    tab[KILN_OP_CROSS_ENTROPY] = (kiln_op_info){"cross_entropy", KILN_KIND_KERNEL, cross_entropy_backward};
    tab[KILN_OP_CROSS_ENTROPY_GRAD] =
        (kiln_op_info){"cross_entropy_grad", KILN_KIND_KERNEL, cross_entropy_grad_backward};
}
