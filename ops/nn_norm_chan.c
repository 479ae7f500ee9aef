/* nn_norm_chan.c — normalizations over the channels of x [N, C, *]:
 * batch_norm (torch.nn.functional.batch_norm) and group_norm (a
 * layer_norm of each sample's group of channels, then the per-channel
 * affine map, in ops).
 *
 * batch_norm in training mode is one fused node, BATCH_NORM: per channel
 * the batch's mean and biased variance over N and the spatial dims, y =
 * (x - mean) / sqrt(var + eps) [* w] [+ b], and, with running statistics,
 * running = (1 - momentum) * running + momentum * batch (the variance
 * unbiased, as torch) written in place by the same pass, which
 * kiln__op_writes_src tells the executor. Its backward is one fused node,
 * BATCH_NORM_GRAD, which recomputes the statistics from x and gives dx,
 * dw, db packed as layer_norm's does; its own backward is kiln__vjp of
 * the same formulas in ops. On the host x may be a [C, N, *] tensor
 * permuted (ip[3] = 1, a convolution's product): both nodes read it in
 * place, and BATCH_NORM_GRAD packs dx in that order. In eval mode
 * batch_norm is a per-channel affine map of the running statistics,
 * written in ops (any backend runs it; the CPU fuses it into one pass). */
#include "internal.h"
#include "nn_ops.h"

#include <math.h>

/* A [C] tensor of x's dtype (running statistics, weight, bias). */
static bool chan_ok(const char *op, const char *what, const kiln_tensor *p, const kiln_tensor *x) {
    char s1[96], s2[96];
    if (!kiln__nn_check_same_dtype(op, what, p, "x", x)) return false;
    if (p->ndim != 1 || p->shape[0] != x->shape[1]) {
        kiln__err(KILN_ERR_SHAPE, "%s: %s %s must be [C] for x %s", op, what, kiln__shape_str(p, s1),
                  kiln__shape_str(x, s2));
        return false;
    }
    return true;
}

/* x [N, C, *]: a float tensor of at least 2 dims. */
static bool x_ok(const char *op, const kiln_tensor *x) {
    char s[96];
    if (!kiln__nn_check_float(op, "x", x)) return false;
    if (x->ndim >= 2) return true;
    kiln__err(KILN_ERR_SHAPE, "%s: x %s must be [N, C] or [N, C, ...]", op, kiln__shape_str(x, s));
    return false;
}

/* A running statistic the training pass writes: a leaf with storage of
 * its own that requires no grad (kiln_buffer makes one). */
static bool running_ok(const char *op, const char *what, const kiln_tensor *r, const kiln_tensor *x) {
    if (!chan_ok(op, what, r, x)) return false;
    if (r->op == KILN_OP_NONE && r->storage_bytes && !kiln_tensor_requires_grad(r)) return true;
    kiln__err(KILN_ERR_ARG, "%s: %s '%s' must be a leaf that requires no grad (a kiln_buffer): training updates it "
              "in place", op, what, r->name);
    return false;
}

/* [1, C, 1, ...] over x's dims: a [C] tensor broadcast along axis 1. */
static kiln_tensor *per_chan(kiln_ctx *ctx, kiln_tensor *p, const kiln_tensor *x) {
    int64_t shape[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = i == 1 ? x->shape[1] : 1;
    return kiln_reshape(ctx, p, x->ndim, shape);
}

/* Eval mode: y = x * scale + shift, scale = w / sqrt(rv + eps), shift =
 * b - rm * scale, each [1, C, 1, ...]. */
static kiln_tensor *batch_norm_eval(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *rm, kiln_tensor *rv, kiln_tensor *w,
                                    kiln_tensor *b, double eps) {
    kiln_tensor *scale = kiln_rsqrt(ctx, kiln_add_scalar(ctx, rv, eps));
    if (w) scale = kiln_mul(ctx, scale, w);
    kiln_tensor *shift = kiln_neg(ctx, kiln_mul(ctx, rm, scale));
    if (b) shift = kiln_add(ctx, shift, b);
    return kiln_add(ctx, kiln_mul(ctx, x, per_chan(ctx, scale, x)), per_chan(ctx, shift, x));
}

/* x [N, C, *] stored as [C, N, *] (a convolution's [O, N, OH, OW] product
 * permuted, or the copy kiln_conv2d makes of it unwrapped): on the host
 * the kernels read it there, and the copy never runs unless something
 * else reads it. */
static bool host_swapped(const kiln_ctx *ctx, kiln_tensor **x) {
    if (ctx->backend || (*x)->ndim < 3) return false;
    kiln_tensor *v = *x;
    if (v->op == KILN_OP_CONTIGUOUS && !kiln_tensor_is_contiguous(v->src[0])) v = v->src[0];
    if (kiln_tensor_is_contiguous(v)) return false;
    int64_t s = 1;
    for (int d = v->ndim - 1; d >= 2; d--) {
        if (v->shape[d] != 1 && v->stride[d] != s) return false;
        s *= v->shape[d];
    }
    if (v->stride[0] != s || v->stride[1] != v->shape[0] * s) return false;
    *x = v;
    return true;
}

kiln_tensor *kiln_batch_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *running_mean, kiln_tensor *running_var,
                             kiln_tensor *weight, kiln_tensor *bias, bool training, double momentum, double eps) {
    const char *op = "kiln_batch_norm";
    char s[96];
    if (!x) return NULL;
    if (!x_ok(op, x) || !kiln__nn_check_eps(op, eps)) return NULL;
    if (!running_mean != !running_var)
        return kiln__err(KILN_ERR_ARG, "%s: running_mean and running_var go together (both or neither)", op);
    bool has_running = running_mean != NULL;
    if (!training && !has_running)
        return kiln__err(KILN_ERR_ARG, "%s: eval mode normalizes with the running statistics, and none were given", op);
    if (!(momentum >= 0.0 && momentum <= 1.0))
        return kiln__err(KILN_ERR_ARG, "%s: momentum = %g is outside [0, 1]", op, momentum);
    if (weight && !chan_ok(op, "weight", weight, x)) return NULL;
    if (bias && !chan_ok(op, "bias", bias, x)) return NULL;
    if (!training) {
        if (!chan_ok(op, "running_mean", running_mean, x) || !chan_ok(op, "running_var", running_var, x)) return NULL;
        return batch_norm_eval(ctx, x, running_mean, running_var, weight, bias, eps);
    }
    if (has_running && (!running_ok(op, "running_mean", running_mean, x) || !running_ok(op, "running_var", running_var, x)))
        return NULL;
    /* torch's rule: one value per channel has no variance to normalize by */
    if (x->shape[1] > 0 && kiln_tensor_numel(x) / x->shape[1] < 2)
        return kiln__err(KILN_ERR_SHAPE, "%s: x %s has fewer than 2 values per channel; training needs more", op,
                         kiln__shape_str(x, s));
    bool cn = host_swapped(ctx, &x);
    kiln_tensor *src[5] = {cn ? x : kiln__contig(ctx, x)};
    int n = 1;
    if (has_running) src[n++] = running_mean, src[n++] = running_var;
    if (weight) src[n++] = kiln__contig(ctx, weight);
    if (bias) src[n++] = kiln__contig(ctx, bias);
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_BATCH_NORM, x->dtype, x->ndim, x->shape, n, src);
    if (!y) return NULL;
    y->ip[0] = weight != NULL;
    y->ip[1] = bias != NULL;
    y->ip[2] = has_running;
    y->ip[3] = cn;
    y->fp[0] = eps;
    y->fp[1] = momentum;
    return y;
}

kiln_tensor *kiln_group_norm(kiln_ctx *ctx, kiln_tensor *x, int num_groups, kiln_tensor *weight, kiln_tensor *bias,
                             double eps) {
    const char *op = "kiln_group_norm";
    char s[96];
    if (!x) return NULL;
    if (!x_ok(op, x) || !kiln__nn_check_eps(op, eps)) return NULL;
    if (num_groups < 1 || x->shape[1] % num_groups)
        return kiln__err(KILN_ERR_ARG, "%s: num_groups = %d must be >= 1 and divide the %lld channels of x %s", op,
                         num_groups, (long long)x->shape[1], kiln__shape_str(x, s));
    if (weight && !chan_ok(op, "weight", weight, x)) return NULL;
    if (bias && !chan_ok(op, "bias", bias, x)) return NULL;
    /* each (sample, group) is a row of layer_norm: its fused kernels on the CPU, and every backend runs it */
    int64_t rows[3] = {x->shape[0], num_groups, kiln__numel(x->ndim - 1, x->shape + 1) / num_groups};
    kiln_tensor *y = kiln_reshape(ctx, kiln_layer_norm(ctx, kiln_reshape(ctx, x, 3, rows), NULL, NULL, eps), x->ndim,
                                  x->shape);
    if (weight) y = kiln_mul(ctx, y, per_chan(ctx, weight, x));
    if (bias) y = kiln_add(ctx, y, per_chan(ctx, bias, x));
    return y;
}

static uint32_t batch_norm_writes(const kiln_tensor *node) { return node->ip[2] ? 6u : 0u; }

/* BATCH_NORM_GRAD's function in ops (layout beside the enum): with M =
 * N * S values per channel, xhat normalized by the batch statistics and
 * g = gy [* w], per channel
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 *   dw = sum(gy * xhat),  db = sum(gy). */
static kiln_tensor *batch_norm_grad_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    bool has_w = node->ip[0] != 0, has_b = node->ip[1] != 0;
    kiln_tensor *x = node->src[0], *w = has_w ? node->src[1] : NULL, *gy = node->src[1 + has_w];
    int64_t c = x->shape[1], s3[3] = {x->shape[0], c, kiln__numel(x->ndim - 2, x->shape + 2)};
    kiln_tensor *x3 = kiln_reshape(ctx, x, 3, s3), *g3 = kiln_reshape(ctx, gy, 3, s3);
#define CMEAN(t) kiln_mean(ctx, kiln_mean(ctx, (t), 2, true), 0, true)
#define CSUM(t) kiln_reshape(ctx, kiln_sum(ctx, kiln_sum(ctx, (t), 2, true), 0, true), 1, (int64_t[]){c})
    kiln_tensor *xc = kiln_sub(ctx, x3, CMEAN(x3));
    kiln_tensor *rstd = kiln_rsqrt(ctx, kiln_add_scalar(ctx, CMEAN(kiln_mul(ctx, xc, xc)), node->fp[0]));
    kiln_tensor *xh = kiln_mul(ctx, xc, rstd);
    kiln_tensor *g = w ? kiln_mul(ctx, g3, kiln_reshape(ctx, w, 3, (int64_t[]){1, c, 1})) : g3;
    kiln_tensor *inner = kiln_add(ctx, CMEAN(g), kiln_mul(ctx, xh, CMEAN(kiln_mul(ctx, g, xh))));
    kiln_tensor *dx = kiln_mul(ctx, rstd, kiln_sub(ctx, g, inner));
    if (node->ip[3]) dx = kiln_permute(ctx, dx, (const int[]){1, 0, 2}); /* packed in x's order */
    kiln_tensor *parts[3] = {kiln_reshape(ctx, dx, 1, (int64_t[]){-1})};
    int n = 1;
    if (has_w) parts[n++] = CSUM(kiln_mul(ctx, g3, xh));
    if (has_b) parts[n++] = CSUM(g3);
#undef CMEAN
#undef CSUM
    return n == 1 ? parts[0] : kiln_concat(ctx, parts, n, 0);
}

static kiln_status batch_norm_grad_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, batch_norm_grad_reference(ctx, node), gy, gsrc);
}

/* One fused node, then a view of it per wanted gradient (the running
 * statistics get none). */
static kiln_status batch_norm_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    bool has_w = node->ip[0] != 0, has_b = node->ip[1] != 0;
    int iw = 1 + 2 * (node->ip[2] != 0), ib = iw + has_w;
    kiln_tensor *x = node->src[0], *src[3] = {x};
    int n = 1;
    if (has_w) src[n++] = node->src[iw];
    src[n++] = kiln__contig(ctx, gy);
    int64_t c = x->shape[1], numel = kiln_tensor_numel(x), len = numel + (has_w + has_b) * c;
    kiln_tensor *pk = kiln__node_new(ctx, KILN_OP_BATCH_NORM_GRAD, x->dtype, 1, &len, n, src);
    if (!pk) return kiln_last_status();
    pk->ip[0] = has_w;
    pk->ip[1] = has_b;
    pk->ip[3] = node->ip[3];
    pk->fp[0] = node->fp[0];
    kiln_status s = kiln__nn_unpack_grads(ctx, node, pk, has_w ? iw : -1, has_b ? ib : -1, c, gsrc);
    if (s || !node->ip[3] || !gsrc[0]) return s;
    /* dx is in x's order, [C, N, *]: handed back permuted, so that the
     * convolution's gradient reads it without a copy */
    int64_t shape[KILN_MAX_DIMS];
    int axes[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = x->shape[d < 2 ? !d : d], axes[d] = d < 2 ? !d : d;
    gsrc[0] = kiln_permute(ctx, kiln_reshape(ctx, kiln_slice(ctx, pk, 0, 0, numel, 1), x->ndim, shape), axes);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

void kiln__ops_register_nn_norm_chan(kiln_op_info *tab) {
    tab[KILN_OP_BATCH_NORM] = (kiln_op_info){"batch_norm", KILN_KIND_KERNEL, batch_norm_backward};
    tab[KILN_OP_BATCH_NORM_GRAD] = (kiln_op_info){"batch_norm_grad", KILN_KIND_KERNEL, batch_norm_grad_backward};
    kiln__op_writes_src[KILN_OP_BATCH_NORM] = batch_norm_writes;
}
