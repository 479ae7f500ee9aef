/* nn.c — softmax, log_softmax (with their fused backward SOFTMAX_GRAD) and
 * dropout: constructors and backward rules;
 * also the nn family's op-table registration, which calls the helpers of
 * the other nn files (nn_loss.c, nn_norm.c, nn_norm_chan.c, nn_attention.c). */
#include "internal.h"
#include "nn_ops.h"

#include <math.h>

bool kiln__nn_check_float(const char *op, const char *what, const kiln_tensor *t) {
    char buf[96];
    if (kiln__is_compute_float(t->dtype)) return true;
    if (!kiln__not_quant(op, t)) return false;
    kiln__err(KILN_ERR_DTYPE, "%s: %s %s is %s; needs f32 or f64", op, what, kiln__shape_str(t, buf),
              kiln_dtype_name(t->dtype));
    return false;
}

bool kiln__nn_check_same_dtype(const char *op, const char *what, const kiln_tensor *t, const char *xname,
                               const kiln_tensor *x) {
    char buf[96];
    if (t->dtype == x->dtype) return true;
    kiln__err(KILN_ERR_DTYPE, "%s: %s %s is %s but %s is %s", op, what, kiln__shape_str(t, buf),
              kiln_dtype_name(t->dtype), xname, kiln_dtype_name(x->dtype));
    return false;
}

bool kiln__nn_check_eps(const char *op, double eps) {
    if (eps >= 0.0 && isfinite(eps)) return true;
    kiln__err(KILN_ERR_ARG, "%s: eps = %g must be finite and >= 0", op, eps);
    return false;
}

kiln_status kiln__nn_unpack_grads(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *pk, int iw, int ib, int64_t c,
                                  kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    int64_t numel = kiln_tensor_numel(x), ob = numel + (iw >= 0) * c;
    if (!pk) return kiln_last_status();
    if (kiln_tensor_requires_grad(x) && !(gsrc[0] = kiln_reshape(ctx, kiln_slice(ctx, pk, 0, 0, numel, 1), x->ndim, x->shape)))
        return kiln_last_status();
    if (iw >= 0 && kiln_tensor_requires_grad(node->src[iw]) && !(gsrc[iw] = kiln_slice(ctx, pk, 0, numel, numel + c, 1)))
        return kiln_last_status();
    if (ib >= 0 && kiln_tensor_requires_grad(node->src[ib]) && !(gsrc[ib] = kiln_slice(ctx, pk, 0, ob, ob + c, 1)))
        return kiln_last_status();
    return KILN_OK;
}

kiln_status kiln__nn_vjp_sources(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *ref, kiln_tensor *gy,
                                 kiln_tensor **gsrc) {
    kiln_tensor *grads[KILN_MAX_SRC] = {0};
    if (!ref) return kiln_last_status();
    kiln_status s = kiln__vjp(ctx, ref, gy, node->nsrc, node->src, grads);
    if (s) return s;
    for (int i = 0; i < node->nsrc; i++)
        if (kiln_tensor_requires_grad(node->src[i])) gsrc[i] = grads[i];
    return KILN_OK;
}

/* ---- softmax and log_softmax ---- */

static kiln_tensor *softmax_node(kiln_ctx *ctx, kiln_op op, const char *name, kiln_tensor *x, bool causal) {
    char buf[96];
    if (!x) return NULL;
    if (!kiln__nn_check_float(name, "x", x)) return NULL;
    if (causal && x->ndim < 2)
        return kiln__err(KILN_ERR_SHAPE, "%s: a causal mask needs x with at least 2 dims, not %s", name,
                         kiln__shape_str(x, buf));
    kiln_tensor *xc = kiln__contig(ctx, x);
    kiln_tensor *y = kiln__node_new(ctx, op, x->dtype, x->ndim, x->shape, 1, &xc);
    if (y) y->ip[0] = causal;
    return y;
}

kiln_tensor *kiln_softmax(kiln_ctx *ctx, kiln_tensor *x, bool causal) {
    return softmax_node(ctx, KILN_OP_SOFTMAX, "kiln_softmax", x, causal);
}

kiln_tensor *kiln_log_softmax(kiln_ctx *ctx, kiln_tensor *x, bool causal) {
    return softmax_node(ctx, KILN_OP_LOG_SOFTMAX, "kiln_log_softmax", x, causal);
}

/* A constant [rows, cols] of 1 where the causal mask keeps an entry, 0
 * where it hides one; it broadcasts over the leading dims. */
static kiln_tensor *causal_keep(kiln_ctx *ctx, const kiln_tensor *like) {
    int64_t rows = like->shape[like->ndim - 2], cols = like->shape[like->ndim - 1];
    kiln_tensor *keep = kiln_new_2d(ctx, like->dtype, rows, cols);
    if (!keep) return NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) kiln__types[like->dtype].set(keep->data, i * cols + j, j <= i + cols - rows);
    return keep;
}

/* KILN_OP_SOFTMAX_GRAD: src y (the forward's output), gy, both of one
 * shape; ip[0] = causal, ip[1] = 1 when y is a log_softmax. Per row:
 *   softmax      gx = y * (gy - sum(gy * y))
 *   log_softmax  gx = gy - exp(y) * sum(gy)
 * which is what torch's (log_)softmax of x.masked_fill(mask, -inf) gives
 * with respect to that masked input: a hidden entry has y = 0 (softmax),
 * so it gets 0 and adds nothing to the sum, or y = -inf (log_softmax), so
 * it gets gy and its gy counts in the sum, as in a non-causal
 * log_softmax of an input holding -inf there. */
kiln_tensor *kiln__softmax_grad(kiln_ctx *ctx, kiln_tensor *y, kiln_tensor *gy, bool causal, bool log_in) {
    char s1[96], s2[96];
    if (!y || !gy) return NULL;
    if (!kiln__same_shape(y, gy) || y->dtype != gy->dtype)
        return kiln__err(KILN_ERR_SHAPE, "softmax_grad: gy %s %s does not match y %s %s", kiln__shape_str(gy, s1),
                         kiln_dtype_name(gy->dtype), kiln__shape_str(y, s2), kiln_dtype_name(y->dtype));
    kiln_tensor *src[2] = {kiln__contig(ctx, y), kiln__contig(ctx, gy)};
    kiln_tensor *gx = kiln__node_new(ctx, KILN_OP_SOFTMAX_GRAD, y->dtype, y->ndim, y->shape, 2, src);
    if (gx) gx->ip[0] = causal, gx->ip[1] = log_in;
    return gx;
}

/* The kernel's function in ops, for the gradient of SOFTMAX_GRAD itself
 * (log_softmax's needs no mask: exp(y) is 0 where y is -inf). */
static kiln_tensor *softmax_grad_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *y = node->src[0], *gy = node->src[1];
    if (node->ip[1]) return kiln_sub(ctx, gy, kiln_mul(ctx, kiln_exp(ctx, y), kiln_sum(ctx, gy, -1, true)));
    kiln_tensor *yk = node->ip[0] ? kiln_mul(ctx, y, causal_keep(ctx, node)) : y;
    return kiln_mul(ctx, yk, kiln_sub(ctx, gy, kiln_sum(ctx, kiln_mul(ctx, gy, yk), -1, true)));
}

static kiln_status softmax_grad_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, softmax_grad_reference(ctx, node), gy, gsrc);
}

/* Both rules read only the forward's output y (the node itself): one
 * fused pass per row (see SOFTMAX_GRAD above for the masked entries). */
static kiln_status softmax_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (!kiln_tensor_requires_grad(node->src[0])) return KILN_OK;
    gsrc[0] = kiln__softmax_grad(ctx, node, gy, node->ip[0] != 0, node->op == KILN_OP_LOG_SOFTMAX);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- dropout ---- */

kiln_tensor *kiln_dropout(kiln_ctx *ctx, kiln_tensor *x, double p, uint64_t seed) {
    if (!x) return NULL;
    if (!kiln__nn_check_float("kiln_dropout", "x", x)) return NULL;
    if (!(p >= 0.0 && p < 1.0)) return kiln__err(KILN_ERR_ARG, "kiln_dropout: p = %g is outside [0, 1)", p);
    if (p == 0.0) return x;
    kiln_tensor *xc = kiln__contig(ctx, x);
    kiln_tensor *y = kiln__node_new(ctx, KILN_OP_DROPOUT, x->dtype, x->ndim, x->shape, 1, &xc);
    if (!y) return NULL;
    y->fp[0] = p;
    y->ip[0] = (int64_t)seed;
    return y;
}

/* The mask depends on (seed, run, index) only, so the same op on gy in the
 * same compute drops the same elements and scales the rest alike. */
static kiln_status dropout_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (!kiln_tensor_requires_grad(node->src[0])) return KILN_OK;
    gsrc[0] = kiln_dropout(ctx, gy, node->fp[0], (uint64_t)node->ip[0]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

void kiln__ops_register_nn(kiln_op_info *tab) {
    tab[KILN_OP_SOFTMAX] = (kiln_op_info){"softmax", KILN_KIND_KERNEL, softmax_backward};
    tab[KILN_OP_LOG_SOFTMAX] = (kiln_op_info){"log_softmax", KILN_KIND_KERNEL, softmax_backward};
    tab[KILN_OP_SOFTMAX_GRAD] = (kiln_op_info){"softmax_grad", KILN_KIND_KERNEL, softmax_grad_backward};
    tab[KILN_OP_DROPOUT] = (kiln_op_info){"dropout", KILN_KIND_KERNEL, dropout_backward};
    kiln__ops_register_nn_loss(tab);
    kiln__ops_register_nn_norm(tab);
    kiln__ops_register_nn_norm_chan(tab);
    kiln__ops_register_nn_attention(tab);
}
