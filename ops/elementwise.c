/* elementwise.c — unary and binary element-wise ops, comparisons and
 * where: constructors, dtype/broadcast checks and backward rules. */
#include "internal.h"

#include <math.h>
#include <stdio.h>

static kiln_tensor *unary(kiln_ctx *ctx, kiln_op op, kiln_tensor *x, double p) {
    char who[48];
    if (!x) return NULL;
    snprintf(who, sizeof who, "kiln_%s", kiln__op_table[op].name);
    if (!kiln__not_quant(who, x)) return NULL;
    if (!kiln__is_float(x->dtype))
        return kiln__err(KILN_ERR_DTYPE, "%s: needs a float input (f32, f64, f16, bf16), not %s", who,
                         kiln_dtype_name(x->dtype));
    kiln_tensor *t = kiln__node_new(ctx, op, x->dtype, x->ndim, x->shape, 1, &x);
    if (t) t->fp[0] = p;
    return t;
}

kiln_tensor *kiln_neg(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_NEG, x, 0); }
kiln_tensor *kiln_scale(kiln_ctx *ctx, kiln_tensor *x, double s) { return unary(ctx, KILN_OP_SCALE, x, s); }
kiln_tensor *kiln_add_scalar(kiln_ctx *ctx, kiln_tensor *x, double s) { return unary(ctx, KILN_OP_ADD_SCALAR, x, s); }
kiln_tensor *kiln_exp(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_EXP, x, 0); }
kiln_tensor *kiln_log(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_LOG, x, 0); }
kiln_tensor *kiln_sqrt(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_SQRT, x, 0); }
kiln_tensor *kiln_rsqrt(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_RSQRT, x, 0); }
kiln_tensor *kiln_abs(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_ABS, x, 0); }
kiln_tensor *kiln_pow(kiln_ctx *ctx, kiln_tensor *x, double p) { return unary(ctx, KILN_OP_POW, x, p); }
kiln_tensor *kiln_tanh(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_TANH, x, 0); }
kiln_tensor *kiln_sigmoid(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_SIGMOID, x, 0); }
kiln_tensor *kiln_relu(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_RELU, x, 0); }
kiln_tensor *kiln_leaky_relu(kiln_ctx *ctx, kiln_tensor *x, double slope) {
    return unary(ctx, KILN_OP_LEAKY_RELU, x, slope);
}
kiln_tensor *kiln_gelu(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_GELU, x, 0); }
kiln_tensor *kiln_gelu_tanh(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_GELU_TANH, x, 0); }
kiln_tensor *kiln_silu(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_SILU, x, 0); }
kiln_tensor *kiln_softplus(kiln_ctx *ctx, kiln_tensor *x) { return unary(ctx, KILN_OP_SOFTPLUS, x, 0); }

/* Binary ops: one float dtype (comparisons also take i32), NumPy broadcasting. */
static kiln_tensor *binary(kiln_ctx *ctx, kiln_op op, kiln_tensor *a, kiln_tensor *b) {
    char who[48];
    if (!a || !b) return NULL;
    snprintf(who, sizeof who, "kiln_%s", kiln__op_table[op].name);
    if (!kiln__not_quant(who, a) || !kiln__not_quant(who, b)) return NULL;
    if (a->dtype != b->dtype)
        return kiln__err(KILN_ERR_DTYPE, "%s: dtypes differ: %s vs %s", who, kiln_dtype_name(a->dtype),
                         kiln_dtype_name(b->dtype));
    if (!kiln__is_float(a->dtype) && !(op == KILN_OP_CMP && a->dtype == KILN_I32))
        return kiln__err(KILN_ERR_DTYPE, "%s: needs float inputs (f32, f64, f16, bf16), not %s", who,
                         kiln_dtype_name(a->dtype));
    int64_t shape[KILN_MAX_DIMS];
    int nd = kiln__broadcast_shape(who, a, b, shape);
    if (nd < 0 || !kiln__shape_check(who, nd, shape)) return NULL;
    kiln_tensor *src[2] = {a, b};
    return kiln__node_new(ctx, op, a->dtype, nd, shape, 2, src);
}

kiln_tensor *kiln_add(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b) { return binary(ctx, KILN_OP_ADD, a, b); }
kiln_tensor *kiln_sub(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b) { return binary(ctx, KILN_OP_SUB, a, b); }
kiln_tensor *kiln_mul(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b) { return binary(ctx, KILN_OP_MUL, a, b); }
kiln_tensor *kiln_div(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b) { return binary(ctx, KILN_OP_DIV, a, b); }

kiln_tensor *kiln_cmp(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b, kiln_cmp_op op) {
    if ((unsigned)op > KILN_CMP_GE) return kiln__err(KILN_ERR_ARG, "kiln_cmp: unknown comparison %d", (int)op);
    kiln_tensor *t = binary(ctx, KILN_OP_CMP, a, b);
    if (t) t->ip[0] = op;
    return t;
}

kiln_tensor *kiln_where(kiln_ctx *ctx, kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b) {
    if (!cond || !a || !b) return NULL;
    if (!kiln__not_quant("kiln_where", cond) || !kiln__not_quant("kiln_where", a) || !kiln__not_quant("kiln_where", b))
        return NULL;
    if (a->dtype != b->dtype || !kiln__is_float(a->dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_where: a and b need one float dtype, not %s and %s",
                         kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if (!kiln__is_float(cond->dtype) && cond->dtype != KILN_I32)
        return kiln__err(KILN_ERR_DTYPE, "kiln_where: cond must be a float or i32, not %s", kiln_dtype_name(cond->dtype));
    int64_t ab[KILN_MAX_DIMS], all[KILN_MAX_DIMS];
    int nd = kiln__broadcast_shape("kiln_where", a, b, ab);
    if (nd < 0) return NULL;
    kiln_tensor shape_ab = {.ndim = nd};
    memcpy(shape_ab.shape, ab, sizeof ab);
    nd = kiln__broadcast_shape("kiln_where", cond, &shape_ab, all);
    if (nd < 0 || !kiln__shape_check("kiln_where", nd, all)) return NULL;
    kiln_tensor *src[3] = {cond, a, b};
    return kiln__node_new(ctx, KILN_OP_WHERE, a->dtype, nd, all, 3, src);
}

kiln_tensor *kiln_masked_fill(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *mask, double value) {
    if (!x || !mask) return NULL;
    return kiln_where(ctx, mask, kiln_scalar(ctx, x->dtype, value), x);
}

/* ---- backward rules ---- */

#define RET(expr_)                                                       \
    do {                                                                 \
        gsrc[0] = (expr_);                                               \
        return gsrc[0] ? KILN_OK : kiln_last_status();                   \
    } while (0)

static kiln_tensor *zero_of(kiln_ctx *ctx, const kiln_tensor *t) { return kiln_scalar(ctx, t->dtype, 0.0); }

static kiln_tensor *normal_pdf(kiln_ctx *ctx, kiln_tensor *x) {
    return kiln_scale(ctx, kiln_exp(ctx, kiln_scale(ctx, kiln_mul(ctx, x, x), -0.5)), 0.3989422804014327);
}

/* The second derivative of the tanh form 0.5 x (1 + tanh(u)), u = k (x + c x^3):
 * (1 - t^2) (u' - x t u'^2 + 3 c k x^2) with t = tanh(u), u' = k (1 + 3 c x^2). */
static kiln_tensor *gelu_tanh_second(kiln_ctx *ctx, kiln_tensor *x) {
    const double k = 0.7978845608028654, c = 0.044715;
    kiln_tensor *x2 = kiln_mul(ctx, x, x);
    kiln_tensor *t = kiln_tanh(ctx, kiln_scale(ctx, kiln_add(ctx, x, kiln_scale(ctx, kiln_mul(ctx, x2, x), c)), k));
    kiln_tensor *up = kiln_add_scalar(ctx, kiln_scale(ctx, x2, 3 * c * k), k);
    kiln_tensor *sech2 = kiln_add_scalar(ctx, kiln_neg(ctx, kiln_mul(ctx, t, t)), 1.0);
    kiln_tensor *inner = kiln_sub(ctx, kiln_add(ctx, up, kiln_scale(ctx, x2, 3 * c * k)),
                                  kiln_mul(ctx, kiln_mul(ctx, x, t), kiln_mul(ctx, up, up)));
    return kiln_mul(ctx, sech2, inner);
}

static kiln_status unary_backward(kiln_ctx *ctx, kiln_tensor *t, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = t->src[0];
    double p = t->fp[0];
    switch (t->op) {
    case KILN_OP_NEG: RET(kiln_neg(ctx, gy));
    case KILN_OP_SCALE: RET(kiln_scale(ctx, gy, p));
    case KILN_OP_ADD_SCALAR: RET(gy);
    case KILN_OP_EXP: RET(kiln_mul(ctx, gy, t));
    case KILN_OP_LOG: RET(kiln_div(ctx, gy, x));
    case KILN_OP_SQRT: RET(kiln_div(ctx, gy, kiln_scale(ctx, t, 2.0)));
    case KILN_OP_RSQRT: /* d x^-1/2 = -1/2 y^3 */
        RET(kiln_mul(ctx, gy, kiln_scale(ctx, kiln_pow(ctx, t, 3.0), -0.5)));
    case KILN_OP_ABS: RET(kiln_mul(ctx, gy, unary(ctx, KILN_OP_SIGN, x, 0)));
    case KILN_OP_POW: RET(kiln_mul(ctx, gy, kiln_scale(ctx, kiln_pow(ctx, x, p - 1.0), p)));
    case KILN_OP_TANH: /* 1 - y^2 */
        RET(kiln_mul(ctx, gy, kiln_add_scalar(ctx, kiln_neg(ctx, kiln_mul(ctx, t, t)), 1.0)));
    case KILN_OP_SIGMOID: /* y (1 - y) */
        RET(kiln_mul(ctx, gy, kiln_mul(ctx, t, kiln_add_scalar(ctx, kiln_neg(ctx, t), 1.0))));
    case KILN_OP_RELU: /* y != 0 exactly where x > 0 or x is NaN (torch's rule: gy passes unless y <= 0):
                        * reading y leaves x unread, so the op making x (a bias add) and the ReLU run as
                        * one fused pass and x is never stored */
        RET(kiln_mul(ctx, gy, kiln_cmp(ctx, t, zero_of(ctx, t), KILN_CMP_NE)));
    case KILN_OP_LEAKY_RELU: /* 1 where x > 0, slope elsewhere */
        RET(kiln_mul(ctx, gy,
                     kiln_add_scalar(ctx, kiln_scale(ctx, kiln_cmp(ctx, x, zero_of(ctx, x), KILN_CMP_GT), 1.0 - p), p)));
    case KILN_OP_GELU: RET(kiln_mul(ctx, gy, unary(ctx, KILN_OP_GELU_GRAD, x, 0)));
    case KILN_OP_GELU_TANH: RET(kiln_mul(ctx, gy, unary(ctx, KILN_OP_GELU_TANH_GRAD, x, 0)));
    case KILN_OP_SILU: { /* s (1 + x (1 - s)) */
        kiln_tensor *s = kiln_sigmoid(ctx, x);
        RET(kiln_mul(ctx, gy,
                     kiln_mul(ctx, s, kiln_add_scalar(ctx, kiln_mul(ctx, x, kiln_add_scalar(ctx, kiln_neg(ctx, s), 1.0)),
                                                      1.0))));
    }
    case KILN_OP_SOFTPLUS: RET(kiln_mul(ctx, gy, kiln_sigmoid(ctx, x)));
    case KILN_OP_GELU_GRAD: /* d/dx (Phi + x phi) = phi (2 - x^2) */
        RET(kiln_mul(ctx, gy,
                     kiln_mul(ctx, normal_pdf(ctx, x), kiln_add_scalar(ctx, kiln_neg(ctx, kiln_mul(ctx, x, x)), 2.0))));
    case KILN_OP_GELU_TANH_GRAD: RET(kiln_mul(ctx, gy, gelu_tanh_second(ctx, x)));
    default: return kiln__errs(KILN_ERR_STATE, "%s: no backward rule", kiln__op_table[t->op].name);
    }
}

/* sign and comparisons are flat almost everywhere: no gradient flows. */

static kiln_status binary_backward(kiln_ctx *ctx, kiln_tensor *t, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *a = t->src[0], *b = t->src[1], *ga = NULL, *gb = NULL;
    bool need_a = kiln_tensor_requires_grad(a), need_b = kiln_tensor_requires_grad(b);
    switch (t->op) {
    case KILN_OP_ADD: ga = gy, gb = gy; break;
    case KILN_OP_SUB: ga = gy, gb = need_b ? kiln_neg(ctx, gy) : NULL; break;
    case KILN_OP_MUL:
        ga = need_a ? kiln_mul(ctx, gy, b) : NULL;
        gb = need_b ? kiln_mul(ctx, gy, a) : NULL;
        break;
    case KILN_OP_DIV: /* d(a/b)/db = -y/b */
        ga = need_a ? kiln_div(ctx, gy, b) : NULL;
        gb = need_b ? kiln_neg(ctx, kiln_div(ctx, kiln_mul(ctx, gy, t), b)) : NULL;
        break;
    default: break;
    }
    if (need_a && !(gsrc[0] = kiln__sum_to(ctx, ga, a))) return kiln_last_status();
    if (need_b && !(gsrc[1] = kiln__sum_to(ctx, gb, b))) return kiln_last_status();
    return KILN_OK;
}

static kiln_status where_backward(kiln_ctx *ctx, kiln_tensor *t, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *cond = t->src[0], *zero = zero_of(ctx, gy);
    for (int i = 1; i <= 2; i++) {
        if (!kiln_tensor_requires_grad(t->src[i])) continue;
        kiln_tensor *g = i == 1 ? kiln_where(ctx, cond, gy, zero) : kiln_where(ctx, cond, zero, gy);
        if (!(gsrc[i] = kiln__sum_to(ctx, g, t->src[i]))) return kiln_last_status();
    }
    return KILN_OK;
}

void kiln__ops_register_elementwise(kiln_op_info *tab) {
    static const struct { kiln_op op; const char *name; } unaries[] = {
        {KILN_OP_NEG, "neg"},         {KILN_OP_SCALE, "scale"},
        {KILN_OP_ADD_SCALAR, "add_scalar"}, {KILN_OP_EXP, "exp"},
        {KILN_OP_LOG, "log"},         {KILN_OP_SQRT, "sqrt"},
        {KILN_OP_RSQRT, "rsqrt"},     {KILN_OP_ABS, "abs"},
        {KILN_OP_POW, "pow"},         {KILN_OP_TANH, "tanh"},
        {KILN_OP_SIGMOID, "sigmoid"}, {KILN_OP_RELU, "relu"},
        {KILN_OP_LEAKY_RELU, "leaky_relu"}, {KILN_OP_GELU, "gelu"},
        {KILN_OP_GELU_TANH, "gelu_tanh"}, {KILN_OP_SILU, "silu"},
        {KILN_OP_SOFTPLUS, "softplus"}, {KILN_OP_GELU_GRAD, "gelu_grad"},
        {KILN_OP_GELU_TANH_GRAD, "gelu_tanh_grad"},
    };
    for (size_t i = 0; i < sizeof unaries / sizeof *unaries; i++)
        tab[unaries[i].op] = (kiln_op_info){unaries[i].name, KILN_KIND_KERNEL, unary_backward};
    tab[KILN_OP_SIGN] = (kiln_op_info){"sign", KILN_KIND_KERNEL, NULL};
    tab[KILN_OP_ADD] = (kiln_op_info){"add", KILN_KIND_KERNEL, binary_backward};
    tab[KILN_OP_SUB] = (kiln_op_info){"sub", KILN_KIND_KERNEL, binary_backward};
    tab[KILN_OP_MUL] = (kiln_op_info){"mul", KILN_KIND_KERNEL, binary_backward};
    tab[KILN_OP_DIV] = (kiln_op_info){"div", KILN_KIND_KERNEL, binary_backward};
    tab[KILN_OP_CMP] = (kiln_op_info){"cmp", KILN_KIND_KERNEL, NULL};
    tab[KILN_OP_WHERE] = (kiln_op_info){"where", KILN_KIND_KERNEL, where_backward};
}
