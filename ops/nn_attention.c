/* nn_attention.c — rotary position embedding and scaled dot-product
 * attention: constructors and backward rules. */
#include "internal.h"
#include "nn_ops.h"

#include <math.h>

/* ---- rope ---- */

static kiln_tensor *rope_node(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *pos, double theta, kiln_rope_mode mode,
                              bool inverse) {
    kiln_tensor *src[2] = {kiln__contig(ctx, x), pos ? kiln__contig(ctx, pos) : NULL};
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_ROPE, x->dtype, x->ndim, x->shape, pos ? 2 : 1, src);
    if (!y) return NULL;
    y->ip[0] = mode;
    y->ip[1] = inverse;
    y->ip[2] = pos != NULL;
    y->fp[0] = theta;
    return y;
}

kiln_tensor *kiln_rope(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *pos, double theta, kiln_rope_mode mode) {
    char s1[96], s2[96];
    if (!x) return NULL;
    if (!kiln__nn_check_float("kiln_rope", "x", x)) return NULL;
    if (x->ndim < 2 || x->shape[x->ndim - 1] % 2)
        return kiln__err(KILN_ERR_SHAPE, "kiln_rope: x %s must be [..., T, D] with D even", kiln__shape_str(x, s1));
    if (mode != KILN_ROPE_NEOX && mode != KILN_ROPE_INTERLEAVED)
        return kiln__err(KILN_ERR_ARG, "kiln_rope: unknown mode %d", (int)mode);
    if (!(theta > 0.0 && isfinite(theta)))
        return kiln__err(KILN_ERR_ARG, "kiln_rope: theta = %g must be finite and > 0", theta);
    if (pos) {
        if (pos->dtype != KILN_I32)
            return kiln__err(KILN_ERR_DTYPE, "kiln_rope: pos %s is %s; needs i32", kiln__shape_str(pos, s1),
                             kiln_dtype_name(pos->dtype));
        if (pos->ndim != 1 || pos->shape[0] != x->shape[x->ndim - 2])
            return kiln__err(KILN_ERR_SHAPE, "kiln_rope: pos %s must be [T] for x %s", kiln__shape_str(pos, s1),
                             kiln__shape_str(x, s2));
    }
    return rope_node(ctx, x, pos, theta, mode, false);
}

/* A rotation's transpose is the rotation by the opposite angle. */
static kiln_status rope_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (!kiln_tensor_requires_grad(node->src[0])) return KILN_OK;
    gsrc[0] = rope_node(ctx, gy, node->ip[2] ? node->src[1] : NULL, node->fp[0], (kiln_rope_mode)node->ip[0],
                        !node->ip[1]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- attention ---- */

kiln_tensor *kiln_attention(kiln_ctx *ctx, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, bool causal, double scale) {
    const char *op = "kiln_attention";
    char sq[96], sk[96], sv[96];
    if (!q || !k || !v) return NULL;
    if (!kiln__nn_check_float(op, "q", q) || !kiln__nn_check_same_dtype(op, "k", k, "q", q) ||
        !kiln__nn_check_same_dtype(op, "v", v, "q", q))
        return NULL;
    kiln__shape_str(q, sq), kiln__shape_str(k, sk), kiln__shape_str(v, sv);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return kiln__err(KILN_ERR_SHAPE, "%s: q %s, k %s and v %s must all be 4-D ([B, H, T, D])", op, sq, sk, sv);
    if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0])
        return kiln__err(KILN_ERR_SHAPE, "%s: batch sizes of q %s, k %s and v %s differ", op, sq, sk, sv);
    if (v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2])
        return kiln__err(KILN_ERR_SHAPE, "%s: k %s and v %s must have the same heads and length", op, sk, sv);
    if (q->shape[1] % k->shape[1])
        return kiln__err(KILN_ERR_SHAPE, "%s: q's %lld heads are not a multiple of k's %lld (q %s, k %s)", op,
                         (long long)q->shape[1], (long long)k->shape[1], sq, sk);
    if (k->shape[3] != q->shape[3])
        return kiln__err(KILN_ERR_SHAPE, "%s: head sizes of q %s and k %s differ", op, sq, sk);
    if (!isfinite(scale)) return kiln__err(KILN_ERR_ARG, "%s: scale = %g is not finite", op, scale);
    if (scale <= 0.0) scale = 1.0 / sqrt((double)q->shape[3]);
    kiln_tensor *src[3] = {kiln__contig(ctx, q), kiln__contig(ctx, k), kiln__contig(ctx, v)};
    int64_t shape[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_ATTENTION, q->dtype, 4, shape, 3, src);
    if (!y) return NULL;
    y->ip[0] = causal;
    y->fp[0] = scale;
    return y;
}

/* k or v [B, Hkv, S, E] -> [B, Hkv * group, S, E], each head repeated
 * group times in a row (torch's repeat_interleave on dim 1). */
static kiln_tensor *repeat_heads(kiln_ctx *ctx, kiln_tensor *t, int64_t group) {
    if (group == 1) return t;
    const int64_t *s = t->shape;
    kiln_tensor *e = kiln_reshape(ctx, t, 5, (int64_t[]){s[0], s[1], 1, s[2], s[3]});
    e = kiln_broadcast_to(ctx, e, 5, (int64_t[]){s[0], s[1], group, s[2], s[3]});
    return kiln_reshape(ctx, e, 4, (int64_t[]){s[0], s[1] * group, s[2], s[3]});
}

/* softmax(q k^T * scale [causal]) v, with the k/v heads repeated. */
static kiln_tensor *attention_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    int64_t group = q->shape[1] / k->shape[1];
    kiln_tensor *scores = kiln_matmul_t(ctx, q, false, repeat_heads(ctx, k, group), true);
    kiln_tensor *p = kiln_softmax(ctx, kiln_scale(ctx, scores, node->fp[0]), node->ip[0] != 0);
    return kiln_matmul(ctx, p, repeat_heads(ctx, v, group));
}

/* The gradient of the reference decomposition: right first; a fused
 * backward kernel (recomputing the softmax blockwise) is an optimization
 * for later. */
static kiln_status attention_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, attention_reference(ctx, node), gy, gsrc);
}

void kiln__ops_register_nn_attention(kiln_op_info *tab) {
    tab[KILN_OP_ROPE] = (kiln_op_info){"rope", KILN_KIND_KERNEL, rope_backward};
    tab[KILN_OP_ATTENTION] = (kiln_op_info){"attention", KILN_KIND_KERNEL, attention_backward};
}
