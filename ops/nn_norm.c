/* nn_norm.c — layer_norm and rms_norm over the last axis: constructors and
 * backward rules.
 *
 * Backward: kiln__vjp of the reference decomposition, rebuilt from the
 * node's sources (mean, sub, mul, rsqrt, ...). Chosen over hand-written
 * formulas because it is right by construction, handles every combination
 * of weight/bias and the broadcast of w/b over the rows through the
 * element-wise rules, and is differentiable again; a fused backward kernel
 * is an optimization for later. */
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

static bool eps_ok(const char *op, double eps) {
    if (eps >= 0.0 && isfinite(eps)) return true;
    kiln__err(KILN_ERR_ARG, "%s: eps = %g must be finite and >= 0", op, eps);
    return false;
}

kiln_tensor *kiln_layer_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *weight, kiln_tensor *bias, double eps) {
    const char *op = "kiln_layer_norm";
    if (!x) return NULL;
    if (!kiln__nn_check_float(op, "x", x) || !eps_ok(op, eps)) return NULL;
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
    if (!kiln__nn_check_float(op, "x", x) || !eps_ok(op, eps)) return NULL;
    if (weight && !param_ok(op, "weight", weight, x)) return NULL;
    kiln_tensor *src[2] = {kiln__contig(ctx, x), weight ? kiln__contig(ctx, weight) : NULL};
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_RMS_NORM, x->dtype, x->ndim, x->shape, weight ? 2 : 1, src);
    if (!y) return NULL;
    y->ip[0] = weight != NULL;
    y->fp[0] = eps;
    return y;
}

/* (x - mean) * rsqrt(var + eps) [* w] [+ b], var the biased variance. */
static kiln_tensor *layer_norm_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *x = node->src[0];
    kiln_tensor *w = node->ip[0] ? node->src[1] : NULL, *b = node->ip[1] ? node->src[1 + (node->ip[0] != 0)] : NULL;
    kiln_tensor *xc = kiln_sub(ctx, x, kiln_mean(ctx, x, -1, true));
    kiln_tensor *var = kiln_mean(ctx, kiln_mul(ctx, xc, xc), -1, true);
    kiln_tensor *y = kiln_mul(ctx, xc, kiln_rsqrt(ctx, kiln_add_scalar(ctx, var, node->fp[0])));
    if (w) y = kiln_mul(ctx, y, w);
    if (b) y = kiln_add(ctx, y, b);
    return y;
}

/* x * rsqrt(mean(x^2) + eps) [* w]. */
static kiln_tensor *rms_norm_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *x = node->src[0];
    kiln_tensor *ms = kiln_mean(ctx, kiln_mul(ctx, x, x), -1, true);
    kiln_tensor *y = kiln_mul(ctx, x, kiln_rsqrt(ctx, kiln_add_scalar(ctx, ms, node->fp[0])));
    return node->ip[0] ? kiln_mul(ctx, y, node->src[1]) : y;
}

static kiln_status layer_norm_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, layer_norm_reference(ctx, node), gy, gsrc);
}

static kiln_status rms_norm_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, rms_norm_reference(ctx, node), gy, gsrc);
}

void kiln__ops_register_nn_norm(kiln_op_info *tab) {
    tab[KILN_OP_LAYER_NORM] = (kiln_op_info){"layer_norm", KILN_KIND_KERNEL, layer_norm_backward};
    tab[KILN_OP_RMS_NORM] = (kiln_op_info){"rms_norm", KILN_KIND_KERNEL, rms_norm_backward};
}
