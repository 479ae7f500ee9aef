/* nn_norm.c — layer_norm and rms_norm over the last axis: constructors and
 * backward rules.
 *
 * Backward: one fused node (LAYER_NORM_GRAD / RMS_NORM_GRAD) computes dx,
 * dw and db in one packed buffer, read through slice views. Its own
 * backward (second derivatives) is kiln__vjp of the same formulas written
 * in ops (mean, sub, mul, rsqrt, ...), right by construction. */
#include "internal.h"
#include "nn_ops.h"

#include <math.h>

/* Checks a weight or bias: [C] of x's dtype. */
static bool param_ok(const char *op, const char *what, const kiln_tensor *p, const kiln_tensor *x) {
    char s1[96], s2[96];
    if (!kiln__nn_check_same_dtype(op, what, p, "x", x)) return false;
    if (p->ndim != 1 || p->shape[0] != x->shape[x->ndim - 1]) {
        kiln__err(KILN_ERR_SHAPE, "%s: %s %s must be [C] for x %s", op, what, kiln__shape_str(p, s1),
                  kiln__shape_str(x, s2));
        return false;
    }
    return true;
}

kiln_tensor *kiln_layer_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *weight, kiln_tensor *bias, double eps) {
    const char *op = "kiln_layer_norm";
    if (!x) return NULL;
    if (!kiln__nn_check_float(op, "x", x) || !kiln__nn_check_eps(op, eps)) return NULL;
    if (weight && !param_ok(op, "weight", weight, x)) return NULL;
    if (bias && !param_ok(op, "bias", bias, x)) return NULL;
    /* sources in order x, w, b, leaving out the absent ones */
    kiln_tensor *src[3] = {kiln__contig(ctx, x)};
    int n = 1;
    if (weight) src[n++] = kiln__contig(ctx, weight);
    if (bias) src[n++] = kiln__contig(ctx, bias);
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_LAYER_NORM, x->dtype, x->ndim, x->shape, n, src);
    if (!y) return NULL;
    y->ip[0] = weight != NULL;
    y->ip[1] = bias != NULL;
    y->fp[0] = eps;
    return y;
}

kiln_tensor *kiln_rms_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *weight, double eps) {
    const char *op = "kiln_rms_norm";
    if (!x) return NULL;
    if (!kiln__nn_check_float(op, "x", x) || !kiln__nn_check_eps(op, eps)) return NULL;
    if (weight && !param_ok(op, "weight", weight, x)) return NULL;
    kiln_tensor *src[2] = {kiln__contig(ctx, x), weight ? kiln__contig(ctx, weight) : NULL};
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_RMS_NORM, x->dtype, x->ndim, x->shape, weight ? 2 : 1, src);
    if (!y) return NULL;
    y->ip[0] = weight != NULL;
    y->fp[0] = eps;
    return y;
}

/* KILN_OP_LAYER_NORM_GRAD / KILN_OP_RMS_NORM_GRAD: src x [, w], gy (gy of
 * x's shape); ip[0] = has_w, ip[1] = has_b (layer_norm only: db is
 * wanted); fp[0] = eps. Output: one 1-D buffer holding dx (x's numel),
 * then dw [C] when has_w, then db [C] when has_b; with xhat the normalized
 * x (mean 0 for rms_norm) and g = gy [* w], per row
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rms_norm: no mean(g))
 *   dw = sum over rows of gy * xhat,  db = sum over rows of gy. */
static kiln_tensor *norm_grad_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    bool rms = node->op == KILN_OP_RMS_NORM_GRAD, has_w = node->ip[0] != 0, has_b = node->ip[1] != 0;
    kiln_tensor *x = node->src[0], *w = has_w ? node->src[1] : NULL, *gy = node->src[1 + has_w];
    int64_t c = x->shape[x->ndim - 1], rows = kiln_tensor_numel(x) / c;
    kiln_tensor *xc = rms ? x : kiln_sub(ctx, x, kiln_mean(ctx, x, -1, true));
    kiln_tensor *rstd = kiln_rsqrt(ctx, kiln_add_scalar(ctx, kiln_mean(ctx, kiln_mul(ctx, xc, xc), -1, true), node->fp[0]));
    kiln_tensor *xh = kiln_mul(ctx, xc, rstd), *g = w ? kiln_mul(ctx, gy, w) : gy;
    kiln_tensor *inner = kiln_mul(ctx, xh, kiln_mean(ctx, kiln_mul(ctx, g, xh), -1, true));
    if (!rms) inner = kiln_add(ctx, inner, kiln_mean(ctx, g, -1, true));
    kiln_tensor *parts[3] = {kiln_reshape(ctx, kiln_mul(ctx, rstd, kiln_sub(ctx, g, inner)), 1, (int64_t[]){-1})};
    int n = 1;
    int64_t rc[2] = {rows, c};
    if (has_w) parts[n++] = kiln_sum(ctx, kiln_reshape(ctx, kiln_mul(ctx, gy, xh), 2, rc), 0, false);
    if (has_b) parts[n++] = kiln_sum(ctx, kiln_reshape(ctx, gy, 2, rc), 0, false);
    return n == 1 ? parts[0] : kiln_concat(ctx, parts, n, 0);
}

static kiln_status norm_grad_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, norm_grad_reference(ctx, node), gy, gsrc);
}

/* Both norms: one fused node, then a slice view of it per wanted gradient. */
static kiln_status norm_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    bool rms = node->op == KILN_OP_RMS_NORM, has_w = node->ip[0] != 0, has_b = !rms && node->ip[1] != 0;
    kiln_tensor *x = node->src[0], *src[3] = {x};
    int n = 1;
    if (has_w) src[n++] = node->src[1];
    src[n++] = kiln__contig(ctx, gy);
    int64_t c = x->shape[x->ndim - 1], numel = kiln_tensor_numel(x), len = numel + (has_w + has_b) * c;
    kiln_tensor *pk = kiln__node_new(ctx, rms ? KILN_OP_RMS_NORM_GRAD : KILN_OP_LAYER_NORM_GRAD, x->dtype, 1,
                                     &len, n, src);
    if (!pk) return kiln_last_status();
    pk->ip[0] = has_w;
    pk->ip[1] = has_b;
    pk->fp[0] = node->fp[0];
    return kiln__nn_unpack_grads(ctx, node, pk, has_w ? 1 : -1, has_b ? 1 + has_w : -1, c, gsrc);
}

void kiln__ops_register_nn_norm(kiln_op_info *tab) {
    tab[KILN_OP_LAYER_NORM] = (kiln_op_info){"layer_norm", KILN_KIND_KERNEL, norm_backward};
    tab[KILN_OP_RMS_NORM] = (kiln_op_info){"rms_norm", KILN_KIND_KERNEL, norm_backward};
    tab[KILN_OP_LAYER_NORM_GRAD] = (kiln_op_info){"layer_norm_grad", KILN_KIND_KERNEL, norm_grad_backward};
    tab[KILN_OP_RMS_NORM_GRAD] = (kiln_op_info){"rms_norm_grad", KILN_KIND_KERNEL, norm_grad_backward};
}
