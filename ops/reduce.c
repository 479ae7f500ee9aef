/* reduce.c — sum, mean, max, min and argmax over one axis or over all
 * elements. ip[0] = axis (-1: all elements, result [1]), ip[1] = keepdim. */
#include "internal.h"

/* who: the call made (kiln_mean makes a SUM), for messages */
static kiln_tensor *reduce(kiln_ctx *ctx, const char *who, kiln_op op, kiln_tensor *x, int axis, bool keepdim,
                           bool all) {
    if (!x) return NULL;
    if (!kiln__not_quant(who, x)) return NULL;
    if (!kiln__is_float(x->dtype))
        return kiln__err(KILN_ERR_DTYPE, "%s: needs a float input (f32, f64, f16, bf16), not %s", who,
                         kiln_dtype_name(x->dtype));
    int64_t shape[KILN_MAX_DIMS] = {1};
    int nd = 1, a = -1;
    char buf[96];
    bool extreme = op != KILN_OP_SUM; /* max, min, argmax: no value over no elements (torch.amax refuses too) */
    if (extreme && all && !kiln_tensor_numel(x))
        return kiln__err(KILN_ERR_SHAPE, "%s: %s has no elements", who, kiln__shape_str(x, buf));
    if (!all) {
        if ((a = kiln__axis(x->ndim, axis)) < 0)
            return kiln__err(KILN_ERR_ARG, "%s: axis %d is out of range for shape %s", who, axis,
                             kiln__shape_str(x, buf));
        if (extreme && !x->shape[a])
            return kiln__err(KILN_ERR_SHAPE, "%s: axis %d of %s is empty", who, a, kiln__shape_str(x, buf));
        nd = 0;
        for (int d = 0; d < x->ndim; d++)
            if (d != a) shape[nd++] = x->shape[d];
            else if (keepdim) shape[nd++] = 1;
        if (nd == 0) shape[nd++] = 1; /* a 1-D input reduces to [1] */
    }
    kiln_dtype dt = op == KILN_OP_ARGMAX ? KILN_I32 : x->dtype;
    kiln_tensor *t = kiln__node_new(ctx, op, dt, nd, shape, 1, &x);
    if (t) {
        t->ip[0] = a;
        t->ip[1] = keepdim;
    }
    return t;
}

kiln_tensor *kiln_sum(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim) {
    return reduce(ctx, "kiln_sum", KILN_OP_SUM, x, axis, keepdim, false);
}
kiln_tensor *kiln_max(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim) {
    return reduce(ctx, "kiln_max", KILN_OP_MAX, x, axis, keepdim, false);
}
kiln_tensor *kiln_min(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim) {
    return reduce(ctx, "kiln_min", KILN_OP_MIN, x, axis, keepdim, false);
}
kiln_tensor *kiln_argmax(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim) {
    return reduce(ctx, "kiln_argmax", KILN_OP_ARGMAX, x, axis, keepdim, false);
}
kiln_tensor *kiln_mean(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim) {
    kiln_tensor *s = reduce(ctx, "kiln_mean", KILN_OP_SUM, x, axis, keepdim, false);
    return s ? kiln_scale(ctx, s, 1.0 / (double)x->shape[kiln__axis(x->ndim, axis)]) : NULL;
}
kiln_tensor *kiln_sum_all(kiln_ctx *ctx, kiln_tensor *x) {
    return reduce(ctx, "kiln_sum_all", KILN_OP_SUM, x, 0, false, true);
}
kiln_tensor *kiln_max_all(kiln_ctx *ctx, kiln_tensor *x) {
    return reduce(ctx, "kiln_max_all", KILN_OP_MAX, x, 0, false, true);
}
kiln_tensor *kiln_min_all(kiln_ctx *ctx, kiln_tensor *x) {
    return reduce(ctx, "kiln_min_all", KILN_OP_MIN, x, 0, false, true);
}
kiln_tensor *kiln_mean_all(kiln_ctx *ctx, kiln_tensor *x) {
    kiln_tensor *s = reduce(ctx, "kiln_mean_all", KILN_OP_SUM, x, 0, false, true);
    return s ? kiln_scale(ctx, s, 1.0 / (double)kiln_tensor_numel(x)) : NULL;
}

/* The node's value (or gradient) reshaped so it broadcasts against x. */
static kiln_tensor *as_keepdim(kiln_ctx *ctx, kiln_tensor *t, const kiln_tensor *node) {
    const kiln_tensor *x = node->src[0];
    if (node->ip[0] < 0 || node->ip[1]) return t;
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[node->ip[0]] = 1;
    return kiln_reshape(ctx, t, x->ndim, shape);
}

static kiln_status sum_backward(kiln_ctx *ctx, kiln_tensor *t, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = t->src[0];
    gsrc[0] = kiln_broadcast_to(ctx, as_keepdim(ctx, gy, t), x->ndim, x->shape);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* The gradient goes to the extreme elements, shared evenly among ties
 * (torch.amax's rule). */
static kiln_status extreme_backward(kiln_ctx *ctx, kiln_tensor *t, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = t->src[0];
    kiln_tensor *mask = kiln_cmp(ctx, x, as_keepdim(ctx, kiln_detach(ctx, t), t), KILN_CMP_EQ);
    kiln_tensor *count = t->ip[0] < 0 ? kiln_sum_all(ctx, mask) : kiln_sum(ctx, mask, (int)t->ip[0], true);
    gsrc[0] = kiln_mul(ctx, mask, kiln_div(ctx, as_keepdim(ctx, gy, t), count));
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

void kiln__ops_register_reduce(kiln_op_info *tab) {
    tab[KILN_OP_SUM] = (kiln_op_info){"sum", KILN_KIND_KERNEL, sum_backward};
    tab[KILN_OP_MAX] = (kiln_op_info){"max", KILN_KIND_KERNEL, extreme_backward};
    tab[KILN_OP_MIN] = (kiln_op_info){"min", KILN_KIND_KERNEL, extreme_backward};
    tab[KILN_OP_ARGMAX] = (kiln_op_info){"argmax", KILN_KIND_KERNEL, NULL};
}
