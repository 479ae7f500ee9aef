/* nn.c — softmax, log_softmax and dropout: constructors and backward rules;
 * also the nn family's op-table registration, which calls the helpers of
 * the other nn files (nn_loss.c, nn_norm.c, nn_attention.c). */
#include "internal.h"
#include "nn_ops.h"

#include <math.h>

bool kiln__nn_check_float(const char *op, const char *what, const kiln_tensor *t) {
    char buf[96];
    if (kiln__is_compute_float(t->dtype)) return true;
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

/* dx = y * (gy - sum(gy * y, -1)). Masked entries have y = 0, so they get
 * no gradient without a mask of their own. */
static kiln_status softmax_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (!kiln_tensor_requires_grad(node->src[0])) return KILN_OK;
    kiln_tensor *dot = kiln_sum(ctx, kiln_mul(ctx, gy, node), -1, true);
    gsrc[0] = kiln_mul(ctx, node, kiln_sub(ctx, gy, dot));
    return gsrc[0] ? KILN_OK : kiln_last_status();
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

/* dx = gy - softmax(x) * sum(gy, -1). The masked outputs are -inf, so the
 * softmax is recomputed (exp(y) of a -inf would work too, but not its own
 * derivative) and gy is masked first: torch's masked_fill gives masked
 * inputs no gradient, whatever arrives at the -inf outputs. */
static kiln_status log_softmax_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    if (!kiln_tensor_requires_grad(x)) return KILN_OK;
    bool causal = node->ip[0] != 0;
    if (causal) gy = kiln_mul(ctx, gy, causal_keep(ctx, node));
    kiln_tensor *p = kiln_softmax(ctx, x, causal);
    gsrc[0] = kiln_sub(ctx, gy, kiln_mul(ctx, p, kiln_sum(ctx, gy, -1, true)));
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
    tab[KILN_OP_LOG_SOFTMAX] = (kiln_op_info){"log_softmax", KILN_KIND_KERNEL, log_softmax_backward};
    tab[KILN_OP_DROPOUT] = (kiln_op_info){"dropout", KILN_KIND_KERNEL, dropout_backward};
    kiln__ops_register_nn_loss(tab);
    kiln__ops_register_nn_norm(tab);
    kiln__ops_register_nn_attention(tab);
}
