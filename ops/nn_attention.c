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

/* A multi-result node's output is one packed 1-D buffer; each result is a
 * view of n elements at start, shaped: a slice (whose gradient places the
 * result's gradient in the packed shape) then a reshape. */
static kiln_tensor *packed_part(kiln_ctx *ctx, kiln_tensor *packed, int64_t start, int ndim, const int64_t *shape) {
    int64_t n = kiln__numel(ndim, shape);
    return kiln_reshape(ctx, kiln_slice(ctx, packed, 0, start, start + n, 1), ndim, shape);
}

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
    if (!kiln__shape_check(op, 4, shape)) return NULL;
    int64_t n = kiln__numel(4, shape) + kiln__numel(3, shape); /* O, then L */
    if (!kiln__shape_check(op, 1, &n)) return NULL;
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_ATTENTION, q->dtype, 1, &n, 3, src);
    if (!y) return NULL;
    y->ip[0] = causal;
    y->fp[0] = scale;
    return packed_part(ctx, y, 0, 4, shape);
}

/* ---- attention over a KV cache, a sequence per row ---- */

/* A cache the op writes into: a contiguous leaf without gradients,
 * [B, Hkv, S, E] in the dtype, Hkv and E of the rows' new keys or values
 * x [N, Hkv, E]. */
static bool cache_ok(const char *op, const char *what, const kiln_tensor *c, const kiln_tensor *x) {
    char sc[96], sx[96];
    kiln__shape_str(c, sc), kiln__shape_str(x, sx);
    if (c->op != KILN_OP_NONE || c->view_src || !c->storage_bytes || !kiln_tensor_is_contiguous(c)) {
        kiln__err(KILN_ERR_ARG, "%s: %s %s must be a contiguous leaf (it is written in place)", op, what, sc);
        return false;
    }
    if (c->flags & KILN_FLAG_REQUIRES_GRAD) {
        kiln__err(KILN_ERR_ARG, "%s: %s '%s' requires grad; an in-place write would corrupt it", op, what, c->name);
        return false;
    }
    if (c->dtype != x->dtype) {
        kiln__err(KILN_ERR_DTYPE, "%s: %s is %s but the rows are %s", op, what, kiln_dtype_name(c->dtype),
                  kiln_dtype_name(x->dtype));
        return false;
    }
    if (c->ndim != 4 || c->shape[1] != x->shape[1] || c->shape[3] != x->shape[2] || c->shape[2] < 1) {
        kiln__err(KILN_ERR_SHAPE, "%s: %s %s must be [B, %lld, S, %lld] for rows %s", op, what, sc,
                  (long long)x->shape[1], (long long)x->shape[2], sx);
        return false;
    }
    return true;
}

kiln_tensor *kiln_attention_cached(kiln_ctx *ctx, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *k_cache,
                                   kiln_tensor *v_cache, kiln_tensor *seq, kiln_tensor *pos, int64_t window,
                                   double scale) {
    return kiln_attention_cached_softcap(ctx, q, k, v, k_cache, v_cache, seq, pos, window, scale, 0);
}

kiln_tensor *kiln_attention_cached_softcap(kiln_ctx *ctx, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                                           kiln_tensor *k_cache, kiln_tensor *v_cache, kiln_tensor *seq,
                                           kiln_tensor *pos, int64_t window, double scale, double softcap) {
    const char *op = "kiln_attention_cached";
    char sq[96], sk[96], sv[96], s1[96];
    if (!q || !k || !v || !k_cache || !v_cache || !seq || !pos) return NULL;
    if (!kiln__nn_check_float(op, "q", q) || !kiln__nn_check_same_dtype(op, "k", k, "q", q) ||
        !kiln__nn_check_same_dtype(op, "v", v, "q", q))
        return NULL;
    kiln__shape_str(q, sq), kiln__shape_str(k, sk), kiln__shape_str(v, sv);
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] ||
        v->shape[1] != k->shape[1] || k->shape[2] != q->shape[2])
        return kiln__err(KILN_ERR_SHAPE, "%s: q %s, k %s and v %s must be [N, Hq, D], [N, Hkv, D], [N, Hkv, Dv]", op,
                         sq, sk, sv);
    if (q->shape[1] % k->shape[1])
        return kiln__err(KILN_ERR_SHAPE, "%s: q's %lld heads are not a multiple of k's %lld (q %s, k %s)", op,
                         (long long)q->shape[1], (long long)k->shape[1], sq, sk);
    if (!cache_ok(op, "k_cache", k_cache, k) || !cache_ok(op, "v_cache", v_cache, v)) return NULL;
    if (v_cache->shape[0] != k_cache->shape[0] || v_cache->shape[2] != k_cache->shape[2])
        return kiln__err(KILN_ERR_SHAPE, "%s: k_cache %s and v_cache %s hold different sequences or lengths", op,
                         kiln__shape_str(k_cache, sk), kiln__shape_str(v_cache, sv));
    kiln_tensor *const idx[2] = {seq, pos};
    for (int i = 0; i < 2; i++)
        if (idx[i]->dtype != KILN_I32 || idx[i]->ndim != 1 || idx[i]->shape[0] != q->shape[0])
            return kiln__err(KILN_ERR_SHAPE, "%s: %s %s %s must be i32 [%lld], a value per row of q", op,
                             i ? "pos" : "seq", kiln__shape_str(idx[i], s1), kiln_dtype_name(idx[i]->dtype),
                             (long long)q->shape[0]);
    if (window < 0) return kiln__err(KILN_ERR_ARG, "%s: window = %lld must be >= 0", op, (long long)window);
    if (!isfinite(scale)) return kiln__err(KILN_ERR_ARG, "%s: scale = %g is not finite", op, scale);
    if (!(softcap >= 0 && isfinite(softcap)))
        return kiln__err(KILN_ERR_ARG, "%s: softcap = %g must be finite and >= 0 (0: none)", op, softcap);
    if (scale <= 0.0) scale = 1.0 / sqrt((double)q->shape[2]);
    kiln_tensor *src[7] = {kiln__contig(ctx, q),   kiln__contig(ctx, k), kiln__contig(ctx, v), k_cache,
                           v_cache,                kiln__contig(ctx, seq), kiln__contig(ctx, pos)};
    int64_t shape[3] = {q->shape[0], q->shape[1], v->shape[2]};
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_ATTENTION_CACHED, q->dtype, 3, shape, 7, src);
    if (!y) return NULL;
    y->ip[0] = window;
    y->fp[0] = scale;
    y->fp[1] = softcap;
    return y;
}

static uint32_t attention_cached_writes(const kiln_tensor *node) {
    (void)node;
    return 1u << 3 | 1u << 4; /* the caches */
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

/* softmax(q k^T * scale [causal]) v, with the k/v heads repeated: what the
 * blocked kernels compute, built from ops (it stores the T x S scores). */
static kiln_tensor *attention_reference(kiln_ctx *ctx, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, bool causal,
                                        double scale) {
    int64_t group = q->shape[1] / k->shape[1];
    kiln_tensor *scores = kiln_matmul_t(ctx, q, false, repeat_heads(ctx, k, group), true);
    kiln_tensor *p = kiln_softmax(ctx, kiln_scale(ctx, scores, scale), causal);
    return kiln_matmul(ctx, p, repeat_heads(ctx, v, group));
}

/* The gradient dO of the packed forward's O part. The backward of the O
 * view is a slice_scatter of dO into zeros of the packed shape: reading
 * dO from its source skips making that buffer. */
static kiln_tensor *packed_out_grad(kiln_ctx *ctx, kiln_tensor *gy, int64_t no, const int64_t *oshape) {
    kiln_tensor *g = gy;
    if (gy->op == KILN_OP_SLICE_SCATTER && gy->ip[0] == 0 && gy->ip[1] == 0 && gy->ip[2] == 1 &&
        gy->src[0]->ndim == 1 && gy->src[0]->shape[0] == no)
        g = gy->src[0];
    else
        g = kiln_slice(ctx, gy, 0, 0, no, 1);
    return kiln__contig(ctx, kiln_reshape(ctx, g, 4, oshape));
}

/* Blocked backward (FlashAttention-2): one ATTENTION_GRAD node recomputes
 * the probabilities tile by tile from q, k and the forward's L. */
static kiln_status attention_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    int64_t oshape[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
    int64_t nq = kiln_tensor_numel(q), nk = kiln_tensor_numel(k), nv = kiln_tensor_numel(v);
    kiln_tensor *src[5] = {q, k, v, node, packed_out_grad(ctx, gy, kiln__numel(4, oshape), oshape)};
    int64_t n = nq + nk + nv;
    kiln_tensor *g = kiln__node_new(ctx, KILN_OP_ATTENTION_GRAD, node->dtype, 1, &n, 5, src);
    if (!g) return kiln_last_status();
    g->ip[0] = node->ip[0];
    g->fp[0] = node->fp[0];
    const int64_t start[3] = {0, nq, nq + nk};
    for (int i = 0; i < 3; i++) {
        if (!kiln_tensor_requires_grad(node->src[i])) continue;
        gsrc[i] = packed_part(ctx, g, start[i], 4, node->src[i]->shape);
        if (!gsrc[i]) return kiln_last_status();
    }
    return KILN_OK;
}

/* Second derivatives: the gradient of the reference decomposition's
 * vector-Jacobian product, packed as the node's output. O and L (src 3)
 * are a cache of q, k, v: the reference reads q, k, v only, so all of the
 * dependence flows through them and src 3 gets no gradient. */
static kiln_status attention_grad_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *qkv[3] = {node->src[0], node->src[1], node->src[2]}, *g[3], *flat[3];
    kiln_tensor *ref = attention_reference(ctx, qkv[0], qkv[1], qkv[2], node->ip[0] != 0, node->fp[0]);
    if (!ref) return kiln_last_status();
    kiln_status s = kiln__vjp(ctx, ref, node->src[4], 3, qkv, g);
    if (s) return s;
    for (int i = 0; i < 3; i++) {
        if (!g[i]) g[i] = kiln__full_like(ctx, qkv[i], 0.0);
        flat[i] = kiln_reshape(ctx, g[i], 1, (int64_t[]){kiln_tensor_numel(qkv[i])});
        if (!flat[i]) return kiln_last_status();
    }
    return kiln__nn_vjp_sources(ctx, node, kiln_concat(ctx, flat, 3, 0), gy, gsrc);
}

void kiln__ops_register_nn_attention(kiln_op_info *tab) {
    tab[KILN_OP_ROPE] = (kiln_op_info){"rope", KILN_KIND_KERNEL, rope_backward};
    tab[KILN_OP_ATTENTION] = (kiln_op_info){"attention", KILN_KIND_KERNEL, attention_backward};
    tab[KILN_OP_ATTENTION_GRAD] = (kiln_op_info){"attention_grad", KILN_KIND_KERNEL, attention_grad_backward};
    /* inference only: no gradient flows (the caches are written in place) */
    tab[KILN_OP_ATTENTION_CACHED] = (kiln_op_info){"attention_cached", KILN_KIND_KERNEL, NULL};
    kiln__op_writes_src[KILN_OP_ATTENTION_CACHED] = attention_cached_writes;
}
