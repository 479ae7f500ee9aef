/* test_backend_ops.c — the cross-backend op table: every public op, on
 * every device backend there is, against the CPU backend, forward and
 * backward (harness: backend_ops_util.h). One test per op family loops over
 * its cases, so a failure names the family and the case; each case prints
 * its errors, how many nodes ran on the device and how many fell back.
 * Sizes are small (lavapipe is slow) but odd, so kernels meet tails; inputs
 * include broadcasts and non-contiguous views (transposes, strided slices).
 * Every case must run wholly on the device unless marked BO_MAY_FALL_BACK
 * (f64 and bf16 only). The optimizers' step ops are in test_backend_optim.c,
 * the quantized dtypes' ops (dequantize, qmatmul, get_rows) in
 * test_backend_quant.c. */
#include "backend_ops_util.h"

#define CTX (io->ctx)
#define IN(...) bo_in(io, BO_SHAPE(__VA_ARGS__))
#define F32 KILN_F32
#define F16 KILN_F16
#define F64 KILN_F64
#define BF16 KILN_BF16
#define I32 KILN_I32

/* ---- unary element-wise ------------------------------------------------------ */

typedef kiln_tensor *(*unary_fn)(kiln_ctx *, kiln_tensor *);
typedef struct unary_op {
    unary_fn f;
    double lo, hi; /* input range: inside the op's domain */
} unary_op;

static kiln_tensor *scale25(kiln_ctx *c, kiln_tensor *x) { return kiln_scale(c, x, 2.5); }
static kiln_tensor *add075(kiln_ctx *c, kiln_tensor *x) { return kiln_add_scalar(c, x, 0.75); }
static kiln_tensor *pow3(kiln_ctx *c, kiln_tensor *x) { return kiln_pow(c, x, 3.0); }
static kiln_tensor *pow_half(kiln_ctx *c, kiln_tensor *x) { return kiln_pow(c, x, 0.5); }
static kiln_tensor *leaky01(kiln_ctx *c, kiln_tensor *x) { return kiln_leaky_relu(c, x, 0.1); }

static const unary_op U_NEG = {kiln_neg, -1, 1}, U_SCALE = {scale25, -1, 1}, U_ADDS = {add075, -1, 1},
                      U_EXP = {kiln_exp, -2, 2}, U_LOG = {kiln_log, 0.1, 3}, U_SQRT = {kiln_sqrt, 0.1, 3},
                      U_RSQRT = {kiln_rsqrt, 0.1, 3}, U_ABS = {kiln_abs, -1, 1}, U_POW3 = {pow3, -1.5, 1.5},
                      U_POWH = {pow_half, 0.1, 3}, U_TANH = {kiln_tanh, -3, 3}, U_SIGM = {kiln_sigmoid, -5, 5},
                      U_RELU = {kiln_relu, -1, 1}, U_LEAKY = {leaky01, -1, 1}, U_GELU = {kiln_gelu, -4, 4},
                      U_GELUT = {kiln_gelu_tanh, -4, 4}, U_SILU = {kiln_silu, -5, 5},
                      U_SOFTP = {kiln_softplus, -25, 25};

static kiln_tensor *b_unary(bo_io *io) {
    const unary_op *u = io->arg;
    return u->f(CTX, bo_in_range(io, u->lo, u->hi, BO_SHAPE(4, 33)));
}
/* the op on a transpose, a strided slice and a broadcast (stride 0) */
static kiln_tensor *b_unary_t(bo_io *io) {
    const unary_op *u = io->arg;
    return u->f(CTX, kiln_transpose(CTX, bo_in_range(io, u->lo, u->hi, BO_SHAPE(9, 5)), 0, 1));
}
static kiln_tensor *b_unary_slice(bo_io *io) {
    const unary_op *u = io->arg;
    return u->f(CTX, kiln_slice(CTX, bo_in_range(io, u->lo, u->hi, BO_SHAPE(3, 20)), 1, 1, -1, 3));
}
static kiln_tensor *b_unary_bcast(bo_io *io) {
    const unary_op *u = io->arg;
    return u->f(CTX, kiln_broadcast_to(CTX, bo_in_range(io, u->lo, u->hi, BO_SHAPE(1, 7)), BO_SHAPE(3, 7)));
}

/* relu with NaN in every fifth element: NaN out, and the gradient passes
 * there (torch's rule) */
static kiln_tensor *b_relu_nan(bo_io *io) {
    kiln_tensor *x = IN(4, 33);
    float *xf = kiln_tensor_dtype(x) == F32 ? kiln_tensor_data(x) : NULL;
    uint16_t *xh = kiln_tensor_dtype(x) == F16 ? kiln_tensor_data(x) : NULL;
    for (int64_t i = 0; i < 4 * 33; i += 5) {
        if (xf) xf[i] = NAN;
        if (xh) xh[i] = 0x7e00; /* an f16 NaN */
    }
    return kiln_relu(CTX, x);
}

static const bo_case unary_cases[] = {
    {"neg", b_unary, F32, BO_EXACT, 0, &U_NEG},
    {"scale", b_unary, F32, BO_EXACT, 0, &U_SCALE},
    {"add_scalar", b_unary, F32, BO_EXACT, 0, &U_ADDS},
    {"exp", b_unary, F32, BO_TRANS, 0, &U_EXP},
    {"log", b_unary, F32, BO_TRANS, 0, &U_LOG},
    {"sqrt", b_unary, F32, BO_TRANS, 0, &U_SQRT},
    {"rsqrt", b_unary, F32, BO_TRANS, 0, &U_RSQRT},
    {"abs", b_unary, F32, BO_EXACT, 0, &U_ABS},
    {"pow3", b_unary, F32, BO_TRANS, 0, &U_POW3},
    {"pow_half", b_unary, F32, BO_TRANS, 0, &U_POWH},
    {"tanh", b_unary, F32, BO_TRANS, 0, &U_TANH},
    {"sigmoid", b_unary, F32, BO_TRANS, 0, &U_SIGM},
    {"relu", b_unary, F32, BO_EXACT, 0, &U_RELU},
    {"leaky_relu", b_unary, F32, BO_EXACT, 0, &U_LEAKY},
    {"gelu", b_unary, F32, BO_TRANS, 0, &U_GELU},
    {"gelu_tanh", b_unary, F32, BO_TRANS, 0, &U_GELUT},
    {"silu", b_unary, F32, BO_TRANS, 0, &U_SILU},
    {"softplus", b_unary, F32, BO_TRANS, 0, &U_SOFTP},
    {"exp_transposed", b_unary_t, F32, BO_TRANS, 0, &U_EXP},
    {"relu_transposed", b_unary_t, F32, BO_EXACT, 0, &U_RELU},
    {"relu_nan", b_relu_nan, F32, BO_EXACT, 0, NULL},
    {"relu_nan", b_relu_nan, F16, BO_HALF, 0, NULL},
    {"tanh_slice", b_unary_slice, F32, BO_TRANS, 0, &U_TANH},
    {"gelu_bcast", b_unary_bcast, F32, BO_TRANS, 0, &U_GELU},
    {"exp", b_unary, F16, BO_HALF, 0, &U_EXP},
    {"silu", b_unary, F16, BO_HALF, 0, &U_SILU},
    {"gelu_transposed", b_unary_t, F16, BO_HALF, 0, &U_GELU},
    {"silu", b_unary, BF16, BO_BF16, 0, &U_SILU},
    {"gelu_transposed", b_unary_t, BF16, BO_BF16, 0, &U_GELU},
    {"exp", b_unary, F64, BO_TRANS, BO_MAY_FALL_BACK, &U_EXP},
    {"gelu_tanh_transposed", b_unary_t, F64, BO_TRANS, BO_MAY_FALL_BACK, &U_GELUT},
    {"gelu", b_unary, BF16, BO_BF16, 0, &U_GELU},
};
KT_TEST(backend_ops_unary) { bo_run_cases("unary", unary_cases, BO_COUNT(unary_cases)); }

/* ---- binary element-wise --------------------------------------------------- */

typedef kiln_tensor *(*binary_fn)(kiln_ctx *, kiln_tensor *, kiln_tensor *);
static const binary_fn B_ADD = kiln_add, B_SUB = kiln_sub, B_MUL = kiln_mul, B_DIV = kiln_div;

/* b stays in [0.5, 2] so that div is tame */
static kiln_tensor *b_bin_same(bo_io *io) {
    const binary_fn *f = io->arg;
    return (*f)(CTX, IN(5, 7), bo_in_range(io, 0.5, 2, BO_SHAPE(5, 7)));
}
static kiln_tensor *b_bin_bcast(bo_io *io) { /* [4,1,7] op [3,1] -> [4,3,7] */
    const binary_fn *f = io->arg;
    return (*f)(CTX, IN(4, 1, 7), bo_in_range(io, 0.5, 2, BO_SHAPE(3, 1)));
}
static kiln_tensor *b_bin_bcast4(bo_io *io) { /* [2,1,3,4] op [1,5,1,4] -> [2,5,3,4] */
    const binary_fn *f = io->arg;
    return (*f)(CTX, IN(2, 1, 3, 4), bo_in_range(io, 0.5, 2, BO_SHAPE(1, 5, 1, 4)));
}
static kiln_tensor *b_bin_views(bo_io *io) { /* transpose op strided slice -> [5,7] */
    const binary_fn *f = io->arg;
    kiln_tensor *a = kiln_transpose(CTX, IN(7, 5), 0, 1);
    kiln_tensor *b = kiln_slice(CTX, bo_in_range(io, 0.5, 2, BO_SHAPE(10, 7)), 0, 0, 10, 2);
    return (*f)(CTX, a, b);
}
static kiln_tensor *b_bin_scalar(bo_io *io) { /* a [1] constant made by kiln_scalar */
    const binary_fn *f = io->arg;
    return (*f)(CTX, IN(3, 11), kiln_scalar(CTX, io->dt, 1.25));
}

static const bo_case binary_cases[] = {
    {"add", b_bin_same, F32, BO_EXACT, 0, &B_ADD},
    {"sub", b_bin_same, F32, BO_EXACT, 0, &B_SUB},
    {"mul", b_bin_same, F32, BO_EXACT, 0, &B_MUL},
    {"div", b_bin_same, F32, BO_EXACT, 0, &B_DIV},
    {"add_bcast", b_bin_bcast, F32, BO_EXACT, 0, &B_ADD},
    {"sub_bcast", b_bin_bcast, F32, BO_EXACT, 0, &B_SUB},
    {"mul_bcast", b_bin_bcast, F32, BO_EXACT, 0, &B_MUL},
    {"div_bcast", b_bin_bcast, F32, BO_EXACT, 0, &B_DIV},
    {"add_bcast4d", b_bin_bcast4, F32, BO_EXACT, 0, &B_ADD},
    {"mul_bcast4d", b_bin_bcast4, F32, BO_EXACT, 0, &B_MUL},
    {"add_views", b_bin_views, F32, BO_EXACT, 0, &B_ADD},
    {"sub_views", b_bin_views, F32, BO_EXACT, 0, &B_SUB},
    {"mul_views", b_bin_views, F32, BO_EXACT, 0, &B_MUL},
    {"div_views", b_bin_views, F32, BO_EXACT, 0, &B_DIV},
    {"mul_scalar", b_bin_scalar, F32, BO_EXACT, 0, &B_MUL},
    {"div_scalar", b_bin_scalar, F32, BO_EXACT, 0, &B_DIV},
    {"add", b_bin_same, F16, BO_HALF, 0, &B_ADD},
    {"mul_bcast", b_bin_bcast, F16, BO_HALF, 0, &B_MUL},
    {"div_views", b_bin_views, F16, BO_HALF, 0, &B_DIV},
    {"mul_bcast", b_bin_bcast, BF16, BO_BF16, 0, &B_MUL},
    {"div_views", b_bin_views, BF16, BO_BF16, 0, &B_DIV},
    {"mul_bcast", b_bin_bcast, F64, BO_EXACT, BO_MAY_FALL_BACK, &B_MUL},
    {"div_views", b_bin_views, F64, BO_EXACT, BO_MAY_FALL_BACK, &B_DIV},
    {"add", b_bin_same, BF16, BO_BF16, 0, &B_ADD},
};
KT_TEST(backend_ops_binary) { bo_run_cases("binary", binary_cases, BO_COUNT(binary_cases)); }

/* ---- comparisons, where, masked_fill --------------------------------------- */

static const kiln_cmp_op C_EQ = KILN_CMP_EQ, C_NE = KILN_CMP_NE, C_LT = KILN_CMP_LT, C_LE = KILN_CMP_LE,
                         C_GT = KILN_CMP_GT, C_GE = KILN_CMP_GE;

/* small integers, so that ties (EQ, LE, GE) happen */
static kiln_tensor *b_cmp(bo_io *io) {
    kiln_tensor *a = bo_ints(io, io->dt, false, -2, 2, BO_SHAPE(6, 8)), *b = bo_ints(io, io->dt, false, -2, 2, BO_SHAPE(8));
    return kiln_cmp(CTX, a, b, *(const kiln_cmp_op *)io->arg);
}
static kiln_tensor *b_cmp_views(bo_io *io) {
    kiln_tensor *a = bo_ints(io, io->dt, false, -2, 2, BO_SHAPE(8, 6)), *b = bo_ints(io, io->dt, false, -2, 2, BO_SHAPE(12, 8));
    return kiln_cmp(CTX, kiln_transpose(CTX, a, 0, 1), kiln_slice(CTX, b, 0, 1, 12, 2), *(const kiln_cmp_op *)io->arg);
}
/* cond [4,1,6] (0/1 in io->arg's dtype), a [3,6], b [6] -> [4,3,6] */
static kiln_tensor *b_where(bo_io *io) {
    kiln_tensor *cond = bo_ints(io, *(const kiln_dtype *)io->arg, false, 0, 1, BO_SHAPE(4, 1, 6));
    return kiln_where(CTX, cond, IN(3, 6), IN(6));
}
static kiln_tensor *b_where_views(bo_io *io) {
    kiln_tensor *cond = bo_ints(io, io->dt, false, 0, 1, BO_SHAPE(6, 5));
    return kiln_where(CTX, kiln_transpose(CTX, cond, 0, 1), kiln_slice(CTX, IN(5, 12), 1, 0, 12, 2), IN(5, 1));
}
static kiln_tensor *b_masked_fill(bo_io *io) {
    kiln_tensor *mask = bo_ints(io, io->dt, false, 0, 1, BO_SHAPE(6));
    return kiln_masked_fill(CTX, IN(5, 6), mask, *(const double *)io->arg);
}
static const kiln_dtype D_F32 = KILN_F32, D_I32 = KILN_I32;
static const double V_FILL = -2.5, V_NEG_INF = -INFINITY;

static const bo_case cmp_cases[] = {
    {"cmp_eq", b_cmp, F32, 0, BO_NO_GRAD, &C_EQ},
    {"cmp_ne", b_cmp, F32, 0, BO_NO_GRAD, &C_NE},
    {"cmp_lt", b_cmp, F32, 0, BO_NO_GRAD, &C_LT},
    {"cmp_le", b_cmp, F32, 0, BO_NO_GRAD, &C_LE},
    {"cmp_gt", b_cmp, F32, 0, BO_NO_GRAD, &C_GT},
    {"cmp_ge", b_cmp, F32, 0, BO_NO_GRAD, &C_GE},
    {"cmp_le_views", b_cmp_views, F32, 0, BO_NO_GRAD, &C_LE},
    {"cmp_eq", b_cmp, I32, 0, BO_NO_GRAD, &C_EQ},
    {"cmp_gt_views", b_cmp_views, I32, 0, BO_NO_GRAD, &C_GT},
    {"cmp_lt", b_cmp, F16, 0, BO_NO_GRAD, &C_LT},
    {"where", b_where, F32, BO_EXACT, 0, &D_F32},
    {"where_i32_cond", b_where, F32, BO_EXACT, 0, &D_I32},
    {"where_views", b_where_views, F32, BO_EXACT, 0, NULL},
    {"where", b_where, F16, BO_HALF, 0, &D_F32},
    {"where", b_where, BF16, BO_BF16, 0, &D_F32},
    {"masked_fill", b_masked_fill, F32, BO_EXACT, 0, &V_FILL},
    {"masked_fill_neg_inf", b_masked_fill, F32, BO_EXACT, 0, &V_NEG_INF},
    {"cmp_le_views", b_cmp_views, F64, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, &C_LE},
    {"where", b_where, F64, BO_EXACT, BO_MAY_FALL_BACK, &D_F32},
    {"where_views", b_where_views, F64, BO_EXACT, BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_cmp_where) { bo_run_cases("cmp_where", cmp_cases, BO_COUNT(cmp_cases)); }

/* ---- cast ---------------------------------------------------------------------- */

static kiln_tensor *b_cast(bo_io *io) {
    kiln_dtype to = *(const kiln_dtype *)io->arg;
    kiln_tensor *x = io->dt == KILN_I32 ? bo_ints(io, KILN_I32, false, -1000, 1000, BO_SHAPE(5, 9))
                                        : bo_in_range(io, -6, 6, BO_SHAPE(5, 9));
    return kiln_cast(CTX, x, to);
}
static kiln_tensor *b_cast_t(bo_io *io) {
    return kiln_cast(CTX, kiln_transpose(CTX, bo_in_range(io, -6, 6, BO_SHAPE(9, 5)), 0, 1), *(const kiln_dtype *)io->arg);
}
static const kiln_dtype D_F16 = KILN_F16, D_F64 = KILN_F64, D_BF16 = KILN_BF16;

static const bo_case cast_cases[] = {
    {"to_f16", b_cast, F32, BO_HALF, 0, &D_F16},
    {"to_f32", b_cast, F16, BO_HALF, 0, &D_F32},
    {"to_i32", b_cast, F32, 0, BO_NO_GRAD, &D_I32},
    {"to_f32", b_cast, I32, BO_EXACT, BO_NO_GRAD, &D_F32},
    {"to_f16_transposed", b_cast_t, F32, BO_HALF, 0, &D_F16},
    {"to_i32", b_cast, F16, 0, BO_NO_GRAD, &D_I32},
    {"to_f64", b_cast, F32, BO_EXACT, BO_MAY_FALL_BACK, &D_F64},
    {"to_bf16", b_cast, F32, BO_BF16, 0, &D_BF16},
    {"to_f32", b_cast, F64, BO_EXACT, BO_MAY_FALL_BACK, &D_F32},
    {"to_f16_transposed", b_cast_t, F64, BO_HALF, BO_MAY_FALL_BACK, &D_F16},
    {"to_i32", b_cast, F64, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, &D_I32},
    {"to_f64", b_cast, I32, BO_EXACT, BO_NO_GRAD | BO_MAY_FALL_BACK, &D_F64},
};
KT_TEST(backend_ops_cast) { bo_run_cases("cast", cast_cases, BO_COUNT(cast_cases)); }

/* ---- reductions ------------------------------------------------------------ */

typedef kiln_tensor *(*reduce_fn)(kiln_ctx *, kiln_tensor *, int, bool);
typedef struct reduce_op {
    reduce_fn f;
    int axis;
    bool keepdim;
} reduce_op;
typedef kiln_tensor *(*reduce_all_fn)(kiln_ctx *, kiln_tensor *);

static const reduce_op R_SUM0 = {kiln_sum, 0, false}, R_SUM1K = {kiln_sum, 1, true}, R_SUMN = {kiln_sum, -1, false},
                       R_MEAN1 = {kiln_mean, 1, false}, R_MEANNK = {kiln_mean, -1, true},
                       R_MAXN = {kiln_max, -1, false}, R_MAX0K = {kiln_max, 0, true}, R_MIN1 = {kiln_min, 1, false},
                       R_MINNK = {kiln_min, -1, true}, R_ARGN = {kiln_argmax, -1, false},
                       R_ARG0K = {kiln_argmax, 0, true}, R_ARG1 = {kiln_argmax, 1, false};
static const reduce_all_fn RA_SUM = kiln_sum_all, RA_MEAN = kiln_mean_all, RA_MAX = kiln_max_all,
                           RA_MIN = kiln_min_all;

static kiln_tensor *b_reduce(bo_io *io) {
    const reduce_op *r = io->arg;
    return r->f(CTX, IN(5, 6, 7), r->axis, r->keepdim);
}
static kiln_tensor *b_reduce_t(bo_io *io) { /* over a permuted view */
    const reduce_op *r = io->arg;
    return r->f(CTX, kiln_permute(CTX, IN(6, 7, 5), (int[]){2, 0, 1}), r->axis, r->keepdim);
}
static kiln_tensor *b_reduce_ties(bo_io *io) { /* integers: ties pick the first (max/argmax) */
    const reduce_op *r = io->arg;
    return r->f(CTX, bo_ints(io, io->dt, io->grad, -2, 2, BO_SHAPE(5, 6, 7)), r->axis, r->keepdim);
}
static kiln_tensor *b_reduce_long(bo_io *io) { /* rows longer than a workgroup */
    const reduce_op *r = io->arg;
    return r->f(CTX, IN(3, 1000), r->axis, r->keepdim);
}
static kiln_tensor *b_reduce_all(bo_io *io) { return (*(const reduce_all_fn *)io->arg)(CTX, IN(5, 6, 7)); }
static kiln_tensor *b_reduce_all_long(bo_io *io) { return (*(const reduce_all_fn *)io->arg)(CTX, IN(3, 1500)); }

static const bo_case reduce_cases[] = {
    {"sum_axis0", b_reduce, F32, BO_TRANS, 0, &R_SUM0},
    {"sum_axis1_keepdim", b_reduce, F32, BO_TRANS, 0, &R_SUM1K},
    {"sum_last", b_reduce, F32, BO_TRANS, 0, &R_SUMN},
    {"mean_axis1", b_reduce, F32, BO_TRANS, 0, &R_MEAN1},
    {"mean_last_keepdim", b_reduce, F32, BO_TRANS, 0, &R_MEANNK},
    {"max_last", b_reduce, F32, BO_EXACT, 0, &R_MAXN},
    {"max_axis0_keepdim", b_reduce, F32, BO_EXACT, 0, &R_MAX0K},
    {"min_axis1", b_reduce, F32, BO_EXACT, 0, &R_MIN1},
    {"min_last_keepdim", b_reduce, F32, BO_EXACT, 0, &R_MINNK},
    {"argmax_last", b_reduce, F32, 0, BO_NO_GRAD, &R_ARGN},
    {"argmax_axis0_keepdim", b_reduce, F32, 0, BO_NO_GRAD, &R_ARG0K},
    {"sum_permuted", b_reduce_t, F32, BO_TRANS, 0, &R_SUM0},
    {"max_permuted", b_reduce_t, F32, BO_EXACT, 0, &R_MAXN},
    {"argmax_permuted", b_reduce_t, F32, 0, BO_NO_GRAD, &R_ARG1},
    {"max_ties", b_reduce_ties, F32, BO_EXACT, 0, &R_MAXN},
    {"min_ties", b_reduce_ties, F32, BO_EXACT, 0, &R_MIN1},
    {"argmax_ties", b_reduce_ties, F32, 0, BO_NO_GRAD, &R_ARGN},
    {"sum_long_rows", b_reduce_long, F32, BO_TRANS, 0, &R_SUMN},
    {"max_long_rows", b_reduce_long, F32, BO_EXACT, 0, &R_MAXN},
    {"sum_long_cols", b_reduce_long, F32, BO_TRANS, 0, &R_SUM0},
    {"sum_all", b_reduce_all, F32, BO_TRANS, 0, &RA_SUM},
    {"mean_all", b_reduce_all, F32, BO_TRANS, 0, &RA_MEAN},
    {"max_all", b_reduce_all, F32, BO_EXACT, 0, &RA_MAX},
    {"min_all", b_reduce_all, F32, BO_EXACT, 0, &RA_MIN},
    {"sum_all_long", b_reduce_all_long, F32, BO_TRANS, 0, &RA_SUM},
    {"sum_last", b_reduce, F16, BO_HALF, 0, &R_SUMN},
    {"max_axis0_keepdim", b_reduce, F16, BO_HALF, 0, &R_MAX0K},
    {"sum_last", b_reduce, BF16, BO_BF16, 0, &R_SUMN},
    {"max_axis0_keepdim", b_reduce, BF16, BO_BF16, 0, &R_MAX0K},
    {"sum_axis1_keepdim", b_reduce, F64, BO_TRANS, BO_MAY_FALL_BACK, &R_SUM1K},
    {"max_permuted", b_reduce_t, F64, BO_EXACT, BO_MAY_FALL_BACK, &R_MAXN},
    {"argmax_ties", b_reduce_ties, F64, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, &R_ARGN},
    {"sum_all_long", b_reduce_all_long, F64, BO_TRANS, BO_MAY_FALL_BACK, &RA_SUM},
};
KT_TEST(backend_ops_reduce) { bo_run_cases("reduce", reduce_cases, BO_COUNT(reduce_cases)); }

/* ---- matmul ------------------------------------------------------------------- */

static kiln_tensor *b_mm(bo_io *io) { return kiln_matmul(CTX, IN(5, 7), IN(7, 3)); }
static kiln_tensor *b_mm_odd(bo_io *io) { return kiln_matmul(CTX, IN(33, 65), IN(65, 17)); }
static kiln_tensor *b_mm_big(bo_io *io) { return kiln_matmul(CTX, IN(64, 128), IN(128, 96)); }
static kiln_tensor *b_mm_row(bo_io *io) { return kiln_matmul(CTX, IN(1, 64), IN(64, 9)); }
static kiln_tensor *b_mm_col(bo_io *io) { return kiln_matmul(CTX, IN(9, 64), IN(64, 1)); }
static kiln_tensor *b_mm_ta(bo_io *io) { return kiln_matmul_t(CTX, IN(7, 5), true, IN(7, 3), false); }
static kiln_tensor *b_mm_tb(bo_io *io) { return kiln_matmul_t(CTX, IN(5, 7), false, IN(3, 7), true); }
static kiln_tensor *b_mm_tab(bo_io *io) { return kiln_matmul_t(CTX, IN(7, 5), true, IN(3, 7), true); }
static kiln_tensor *b_mm_batch2d(bo_io *io) { return kiln_matmul(CTX, IN(2, 3, 5, 7), IN(7, 4)); }
static kiln_tensor *b_mm_batch_bcast(bo_io *io) { return kiln_matmul(CTX, IN(2, 1, 5, 7), IN(3, 7, 4)); }
static kiln_tensor *b_mm_batch_tb(bo_io *io) { return kiln_matmul_t(CTX, IN(2, 5, 7), false, IN(2, 4, 7), true); }
static kiln_tensor *b_mm_views(bo_io *io) { /* transpose @ strided slice */
    return kiln_matmul(CTX, kiln_transpose(CTX, IN(7, 5), 0, 1), kiln_slice(CTX, IN(14, 3), 0, 0, 14, 2));
}
static kiln_tensor *b_mm_permuted(bo_io *io) { /* [2,5,3,7] permuted to [2,3,5,7] @ [7,4] */
    return kiln_matmul(CTX, kiln_permute(CTX, IN(2, 5, 3, 7), (int[]){0, 2, 1, 3}), IN(7, 4));
}
static kiln_tensor *b_linear(bo_io *io) { return kiln_linear(CTX, IN(4, 6), IN(5, 6), IN(5)); }
static kiln_tensor *b_linear_nobias(bo_io *io) { return kiln_linear(CTX, IN(2, 3, 6), IN(5, 6), NULL); }

static const bo_case matmul_cases[] = {
    {"matmul", b_mm, F32, BO_TRANS, 0, NULL},
    {"matmul_odd", b_mm_odd, F32, BO_TRANS, 0, NULL},
    {"matmul_64x128x96", b_mm_big, F32, BO_TRANS, 0, NULL},
    {"matmul_one_row", b_mm_row, F32, BO_TRANS, 0, NULL},
    {"matmul_one_col", b_mm_col, F32, BO_TRANS, 0, NULL},
    {"matmul_trans_a", b_mm_ta, F32, BO_TRANS, 0, NULL},
    {"matmul_trans_b", b_mm_tb, F32, BO_TRANS, 0, NULL},
    {"matmul_trans_ab", b_mm_tab, F32, BO_TRANS, 0, NULL},
    {"matmul_batch_2d", b_mm_batch2d, F32, BO_TRANS, 0, NULL},
    {"matmul_batch_bcast", b_mm_batch_bcast, F32, BO_TRANS, 0, NULL},
    {"matmul_batch_trans_b", b_mm_batch_tb, F32, BO_TRANS, 0, NULL},
    {"matmul_views", b_mm_views, F32, BO_TRANS, 0, NULL},
    {"matmul_permuted", b_mm_permuted, F32, BO_TRANS, 0, NULL},
    {"linear_bias", b_linear, F32, BO_TRANS, 0, NULL},
    {"linear_nobias_3d", b_linear_nobias, F32, BO_TRANS, 0, NULL},
    {"matmul", b_mm_odd, F16, BO_HALF, 0, NULL},
    {"matmul_trans_b", b_mm_tb, F16, BO_HALF, 0, NULL},
    {"matmul_batch_bcast", b_mm_batch_bcast, F16, BO_HALF, 0, NULL},
    {"linear_bias", b_linear, F16, BO_HALF, 0, NULL},
    {"matmul", b_mm_odd, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"matmul_batch_bcast", b_mm_batch_bcast, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"matmul_views", b_mm_views, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"matmul", b_mm_odd, BF16, BO_BF16, 0, NULL},
    {"matmul_trans_b", b_mm_tb, BF16, BO_BF16, 0, NULL},
    {"matmul_batch_bcast", b_mm_batch_bcast, BF16, BO_BF16, 0, NULL},
    {"linear_bias", b_linear, BF16, BO_BF16, 0, NULL},
};
KT_TEST(backend_ops_matmul) { bo_run_cases("matmul", matmul_cases, BO_COUNT(matmul_cases)); }

/* ---- DFP matmul (CPU and CUDA; another device runs it on the CPU) ------------ */

static kiln_tensor *b_dfp_linear(bo_io *io) { return kiln_dfp_linear(CTX, IN(2, 5, 37), IN(7, 37), IN(7)); }
static kiln_tensor *b_dfp_ta(bo_io *io) { return kiln_dfp_matmul_t(CTX, IN(41, 6), true, IN(41, 9), false); }
static kiln_tensor *b_dfp_tb(bo_io *io) { return kiln_dfp_matmul_t(CTX, IN(6, 70), false, IN(9, 70), true); }
static kiln_tensor *b_dfp_big(bo_io *io) { /* k of several INT32 chunks and tiles */
    return kiln_dfp_matmul_t(CTX, bo_in_range(io, -3, 3, BO_SHAPE(33, 300)), false, IN(300, 19), false);
}
static kiln_tensor *b_dfp_conv(bo_io *io) {
    kiln_tensor *x = IN(2, 3, 7, 6), *w = IN(4, 3, 3, 3);
    return kiln_dfp_conv2d(CTX, x, w, IN(4), &(kiln_conv2d_params){.stride = {2, 1}, .padding = {1, 1}});
}
static kiln_tensor *b_dfp_conv_s1(bo_io *io) { /* stride 1: x's gradient is one product of gy's codes (ip[2] = 2) */
    kiln_tensor *x = IN(2, 3, 6, 7), *w = IN(5, 3, 3, 2);
    return kiln_dfp_conv2d(CTX, x, w, IN(5), &(kiln_conv2d_params){.padding = {1, 2}});
}
static kiln_tensor *b_dfp_conv_dil(bo_io *io) {
    kiln_tensor *x = IN(1, 2, 9, 8), *w = IN(3, 2, 2, 3);
    return kiln_dfp_conv2d(CTX, x, w, NULL, &(kiln_conv2d_params){.padding = {0, 2}, .dilation = {2, 2}});
}

/* the product is the CPU's bit for bit on CUDA; the rest of the graph is f32 */
static const bo_case dfp_cases[] = {
    {"dfp_linear", b_dfp_linear, F32, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"dfp_matmul_trans_a", b_dfp_ta, F32, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"dfp_matmul_trans_b", b_dfp_tb, F32, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"dfp_matmul_k300", b_dfp_big, F32, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"dfp_conv2d", b_dfp_conv, F32, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"dfp_conv2d_dilation", b_dfp_conv_dil, F32, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"dfp_conv2d_stride1", b_dfp_conv_s1, F32, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    /* the products alone, forward: equal bit for bit (tolerance 0) */
    {"dfp_matmul_k300_exact", b_dfp_big, F32, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, NULL},
    {"dfp_matmul_trans_a_exact", b_dfp_ta, F32, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, NULL},
    {"dfp_conv2d_dilation_exact", b_dfp_conv_dil, F32, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_dfp) { bo_run_cases("dfp", dfp_cases, BO_COUNT(dfp_cases)); }

/* ---- shape and movement ---------------------------------------------------- */

static kiln_tensor *b_reshape(bo_io *io) { return kiln_reshape(CTX, IN(4, 6), BO_SHAPE(2, -1, 4)); }
static kiln_tensor *b_reshape_t(bo_io *io) { /* a transpose cannot be viewed: reshape copies */
    return kiln_reshape(CTX, kiln_transpose(CTX, IN(4, 6), 0, 1), BO_SHAPE(3, 8));
}
static kiln_tensor *b_view_flatten(bo_io *io) {
    return kiln_flatten(CTX, kiln_view(CTX, IN(2, 3, 4), BO_SHAPE(2, 12, 1)), 1);
}
static kiln_tensor *b_contig_t(bo_io *io) { return kiln_contiguous(CTX, kiln_transpose(CTX, IN(5, 7), 0, 1)); }
static kiln_tensor *b_contig_perm(bo_io *io) {
    return kiln_contiguous(CTX, kiln_permute(CTX, IN(2, 3, 4, 5), (int[]){3, 1, 0, 2}));
}
static kiln_tensor *b_contig_slice(bo_io *io) { return kiln_contiguous(CTX, kiln_slice(CTX, IN(9, 4), 0, 1, -1, 3)); }
static kiln_tensor *b_slice(bo_io *io) { /* a view as the output; backward is slice_scatter */
    return kiln_slice(CTX, IN(4, 11), 1, 2, -2, 3);
}
static kiln_tensor *b_slice_2(bo_io *io) { /* a slice of a slice of a transpose */
    kiln_tensor *t = kiln_transpose(CTX, IN(6, 10), 0, 1);
    return kiln_contiguous(CTX, kiln_slice(CTX, kiln_slice(CTX, t, 0, 1, 9, 2), 1, 2, 6, 1));
}
static kiln_tensor *b_concat0(bo_io *io) {
    kiln_tensor *parts[3] = {IN(2, 5), IN(3, 5), IN(1, 5)};
    return kiln_concat(CTX, parts, 3, 0);
}
static kiln_tensor *b_concat1_views(bo_io *io) {
    kiln_tensor *parts[3] = {IN(4, 2), kiln_transpose(CTX, IN(3, 4), 0, 1), kiln_slice(CTX, IN(4, 6), 1, 0, 6, 2)};
    return kiln_concat(CTX, parts, 3, 1);
}
static kiln_tensor *b_concat_last(bo_io *io) {
    kiln_tensor *parts[2] = {IN(2, 3, 4), IN(2, 3, 1)};
    return kiln_concat(CTX, parts, 2, -1);
}
static kiln_tensor *b_pad2d(bo_io *io) {
    return kiln_pad(CTX, IN(3, 4), (int64_t[]){1, 2, 0, 3}, *(const double *)io->arg);
}
static kiln_tensor *b_pad3d_t(bo_io *io) {
    return kiln_pad(CTX, kiln_transpose(CTX, IN(2, 5, 3), 1, 2), (int64_t[]){0, 1, 2, 0, 1, 1}, -1.0);
}
static const double PAD_HALF = 0.5, PAD_ZERO = 0.0;
static kiln_tensor *b_bcast_to(bo_io *io) {
    return kiln_contiguous(CTX, kiln_broadcast_to(CTX, IN(3, 1, 5), BO_SHAPE(2, 3, 4, 5)));
}
static kiln_tensor *b_bcast_mul(bo_io *io) { /* a broadcast view into a kernel */
    return kiln_mul(CTX, kiln_broadcast_to(CTX, IN(3, 1), BO_SHAPE(3, 6)), IN(3, 6));
}
static kiln_tensor *b_repeat(bo_io *io) { return kiln_repeat(CTX, IN(2, 3), (int64_t[]){2, 3}); }
static kiln_tensor *b_repeat3(bo_io *io) { return kiln_repeat(CTX, IN(2, 1, 3), (int64_t[]){1, 4, 2}); }
/* in place into a constant: a permuted source into a middle slab, and a
 * second write read through the first (the KV cache's pattern) */
static kiln_tensor *b_slice_assign(bo_io *io) {
    kiln_tensor *dst = bo_const(io, io->dt, -1, 1, BO_SHAPE(2, 3, 9, 4));
    kiln_tensor *src = kiln_permute(CTX, IN(2, 4, 3, 2), (int[]){0, 2, 3, 1});
    kiln_tensor *t = kiln_slice_assign(CTX, dst, src, 2, 5);
    return kiln_slice_assign(CTX, kiln_slice(CTX, t, 2, 1, 8, 1), IN(2, 3, 1, 4), -2, 0);
}
static kiln_tensor *b_detach(bo_io *io) { return kiln_mul(CTX, IN(4, 5), kiln_detach(CTX, IN(4, 5))); }

static const bo_case movement_cases[] = {
    {"reshape", b_reshape, F32, BO_EXACT, 0, NULL},
    {"reshape_transposed", b_reshape_t, F32, BO_EXACT, 0, NULL},
    {"view_flatten", b_view_flatten, F32, BO_EXACT, 0, NULL},
    {"contiguous_transpose", b_contig_t, F32, BO_EXACT, 0, NULL},
    {"contiguous_permute4d", b_contig_perm, F32, BO_EXACT, 0, NULL},
    {"contiguous_slice", b_contig_slice, F32, BO_EXACT, 0, NULL},
    {"slice", b_slice, F32, BO_EXACT, 0, NULL},
    {"slice_of_slice", b_slice_2, F32, BO_EXACT, 0, NULL},
    {"concat_axis0", b_concat0, F32, BO_EXACT, 0, NULL},
    {"concat_axis1_views", b_concat1_views, F32, BO_EXACT, 0, NULL},
    {"concat_last", b_concat_last, F32, BO_EXACT, 0, NULL},
    {"pad_2d", b_pad2d, F32, BO_EXACT, 0, &PAD_HALF},
    {"pad_2d_zero", b_pad2d, F32, BO_EXACT, 0, &PAD_ZERO},
    {"pad_3d_transposed", b_pad3d_t, F32, BO_EXACT, 0, NULL},
    {"broadcast_to", b_bcast_to, F32, BO_EXACT, 0, NULL},
    {"broadcast_mul", b_bcast_mul, F32, BO_EXACT, 0, NULL},
    {"repeat", b_repeat, F32, BO_EXACT, 0, NULL},
    {"repeat_3d", b_repeat3, F32, BO_EXACT, 0, NULL},
    {"detach", b_detach, F32, BO_EXACT, 0, NULL},
    {"slice_assign", b_slice_assign, F32, BO_EXACT, 0, NULL},
    {"slice_assign", b_slice_assign, F16, BO_HALF, 0, NULL},
    {"contiguous_transpose", b_contig_t, F16, BO_HALF, 0, NULL},
    {"concat_axis1_views", b_concat1_views, F16, BO_HALF, 0, NULL},
    {"pad_2d", b_pad2d, F16, BO_HALF, 0, &PAD_HALF},
    {"pad_2d_zero", b_pad2d, F16, BO_HALF, 0, &PAD_ZERO},
    {"contiguous_permute4d", b_contig_perm, F64, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"concat_axis1_views", b_concat1_views, F64, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"pad_2d", b_pad2d, F64, BO_EXACT, BO_MAY_FALL_BACK, &PAD_HALF},
    {"slice_assign", b_slice_assign, F64, BO_EXACT, BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_movement) { bo_run_cases("movement", movement_cases, BO_COUNT(movement_cases)); }

/* ---- rows and indices ------------------------------------------------------ */

/* repeated indices, so the backward adds several rows into one */
static kiln_tensor *b_get_rows(bo_io *io) {
    return kiln_get_rows(CTX, IN(10, 6), bo_ints(io, KILN_I32, false, 0, 9, BO_SHAPE(13)));
}
static kiln_tensor *b_get_rows_2d(bo_io *io) {
    return kiln_get_rows(CTX, IN(7, 5), bo_ints(io, KILN_I32, false, 0, 6, BO_SHAPE(2, 3)));
}
static kiln_tensor *b_get_rows_const(bo_io *io) { /* no gradient for an f16 table */
    kiln_tensor *table = bo_const(io, io->dt, -1, 1, BO_SHAPE(10, 6));
    return kiln_get_rows(CTX, table, bo_ints(io, KILN_I32, false, 0, 9, BO_SHAPE(4, 3)));
}
/* labels in [-1, 6] with n = 5: out-of-range labels give zero rows */
static kiln_tensor *b_one_hot(bo_io *io) {
    return kiln_one_hot(CTX, bo_ints(io, KILN_I32, false, -1, 6, BO_SHAPE(3, 8)), 5, io->dt);
}

static const bo_case rows_cases[] = {
    {"get_rows", b_get_rows, F32, BO_EXACT, 0, NULL},
    {"get_rows_2d_idx", b_get_rows_2d, F32, BO_EXACT, 0, NULL},
    {"get_rows_table", b_get_rows_const, F16, BO_EXACT, BO_NO_GRAD, NULL},
    {"one_hot", b_one_hot, F32, 0, BO_NO_GRAD, NULL},
    {"one_hot", b_one_hot, F16, 0, BO_NO_GRAD, NULL},
    {"get_rows", b_get_rows, F64, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"one_hot", b_one_hot, F64, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_rows) { bo_run_cases("rows", rows_cases, BO_COUNT(rows_cases)); }

/* ---- softmax --------------------------------------------------------------------- */

/* 1 where column j of the last two dims is masked by causal, for [rows, cols] */
static kiln_tensor *causal_mask(bo_io *io, int64_t rows, int64_t cols) {
    kiln_tensor *m = kiln_new_2d(CTX, io->dt, rows, cols);
    double *v = malloc((size_t)(rows * cols) * sizeof *v);
    if (!m || !v) return free(v), NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) v[i * cols + j] = j > i + (cols - rows);
    kiln_status s = kiln_tensor_set_f64(m, v, rows * cols);
    free(v);
    return s ? NULL : m;
}

static kiln_tensor *b_softmax(bo_io *io) { return kiln_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(4, 9)), false); }
static kiln_tensor *b_softmax_causal(bo_io *io) {
    return kiln_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(2, 5, 5)), true);
}
static kiln_tensor *b_softmax_causal_rect(bo_io *io) { /* more columns than rows: the KV-cache alignment */
    return kiln_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(3, 7)), true);
}
static kiln_tensor *b_softmax_wide(bo_io *io) { return kiln_softmax(CTX, bo_in_range(io, -8, 8, BO_SHAPE(3, 700)), false); }
static kiln_tensor *b_softmax_t(bo_io *io) {
    return kiln_softmax(CTX, kiln_transpose(CTX, bo_in_range(io, -4, 4, BO_SHAPE(9, 4)), 0, 1), false);
}
static kiln_tensor *b_log_softmax(bo_io *io) {
    return kiln_log_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(4, 9)), false);
}
static kiln_tensor *b_log_softmax_wide(bo_io *io) {
    return kiln_log_softmax(CTX, bo_in_range(io, -8, 8, BO_SHAPE(3, 700)), false);
}
/* the masked entries are -inf: zero them for the loss (forward compared as is in _raw) */
static kiln_tensor *b_log_softmax_causal(bo_io *io) {
    kiln_tensor *y = kiln_log_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(2, 4, 6)), true);
    return kiln_masked_fill(CTX, y, causal_mask(io, 4, 6), 0.0);
}
static kiln_tensor *b_log_softmax_causal_raw(bo_io *io) {
    return kiln_log_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(2, 4, 6)), true);
}
/* the gradient with gy nonzero at the masked entries (the loss is -inf,
 * not compared): gy passes there; rows of 8 take the vec4 kernel, and the
 * first row of [5, 4] sees nothing */
static kiln_tensor *b_log_softmax_causal_v4(bo_io *io) {
    return kiln_log_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(2, 4, 8)), true);
}
static kiln_tensor *b_log_softmax_causal_tall(bo_io *io) {
    return kiln_log_softmax(CTX, bo_in_range(io, -4, 4, BO_SHAPE(5, 4)), true);
}

static const bo_case softmax_cases[] = {
    {"softmax", b_softmax, F32, BO_TRANS, 0, NULL},
    {"softmax_causal", b_softmax_causal, F32, BO_TRANS, 0, NULL},
    {"softmax_causal_rect", b_softmax_causal_rect, F32, BO_TRANS, 0, NULL},
    {"softmax_wide", b_softmax_wide, F32, BO_TRANS, 0, NULL},
    {"softmax_transposed", b_softmax_t, F32, BO_TRANS, 0, NULL},
    {"log_softmax", b_log_softmax, F32, BO_TRANS, 0, NULL},
    {"log_softmax_wide", b_log_softmax_wide, F32, BO_TRANS, 0, NULL},
    {"log_softmax_causal", b_log_softmax_causal, F32, BO_TRANS, 0, NULL},
    {"log_softmax_causal_raw", b_log_softmax_causal_raw, F32, BO_TRANS, BO_NO_GRAD, NULL},
    {"log_softmax_causal_gy", b_log_softmax_causal_raw, F32, BO_TRANS, 0, NULL},
    {"log_softmax_causal_gy_v4", b_log_softmax_causal_v4, F32, BO_TRANS, 0, NULL},
    {"log_softmax_causal_gy_tall", b_log_softmax_causal_tall, F32, BO_TRANS, 0, NULL},
    {"softmax", b_softmax, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"log_softmax_causal", b_log_softmax_causal, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"softmax_wide", b_softmax_wide, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_softmax) { bo_run_cases("softmax", softmax_cases, BO_COUNT(softmax_cases)); }

/* ---- losses ---------------------------------------------------------------------- */

/* labels in [-1, 4], -1 ignored */
static kiln_tensor *b_ce(bo_io *io) {
    return kiln_cross_entropy(CTX, bo_in_range(io, -3, 3, BO_SHAPE(9, 5)), bo_ints(io, I32, false, -1, 4, BO_SHAPE(9)), -1);
}
static kiln_tensor *b_ce_3d(bo_io *io) {
    kiln_tensor *labels = bo_ints(io, I32, false, 0, 6, BO_SHAPE(2, 3));
    return kiln_cross_entropy(CTX, bo_in_range(io, -3, 3, BO_SHAPE(2, 3, 7)), labels, -100);
}
static kiln_tensor *b_ce_all_ignored(bo_io *io) {
    return kiln_cross_entropy(CTX, IN(4, 5), bo_ints(io, I32, false, 3, 3, BO_SHAPE(4)), 3);
}
static kiln_tensor *b_ce_wide(bo_io *io) { /* a vocabulary wider than a workgroup */
    kiln_tensor *labels = bo_ints(io, I32, false, 0, 599, BO_SHAPE(4));
    return kiln_cross_entropy(CTX, bo_in_range(io, -5, 5, BO_SHAPE(4, 600)), labels, -100);
}
static kiln_tensor *b_ce_t(bo_io *io) { /* logits from a transpose */
    kiln_tensor *logits = kiln_transpose(CTX, bo_in_range(io, -3, 3, BO_SHAPE(5, 6)), 0, 1);
    return kiln_cross_entropy(CTX, logits, bo_ints(io, I32, false, 0, 4, BO_SHAPE(6)), -100);
}
static kiln_tensor *b_mse(bo_io *io) { return kiln_mse(CTX, IN(4, 5), IN(4, 5)); }
static kiln_tensor *b_mse_views(bo_io *io) {
    return kiln_mse(CTX, kiln_transpose(CTX, IN(5, 4), 0, 1), kiln_slice(CTX, IN(4, 10), 1, 0, 10, 2));
}

static const bo_case loss_cases[] = {
    {"cross_entropy_ignore", b_ce, F32, BO_TRANS, 0, NULL},
    {"cross_entropy_3d", b_ce_3d, F32, BO_TRANS, 0, NULL},
    {"cross_entropy_all_ignored", b_ce_all_ignored, F32, BO_TRANS, 0, NULL},
    {"cross_entropy_wide", b_ce_wide, F32, BO_TRANS, 0, NULL},
    {"cross_entropy_transposed", b_ce_t, F32, BO_TRANS, 0, NULL},
    {"mse", b_mse, F32, BO_TRANS, 0, NULL},
    {"mse_views", b_mse_views, F32, BO_TRANS, 0, NULL},
    {"cross_entropy_ignore", b_ce, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
    {"cross_entropy_wide", b_ce_wide, F64, BO_TRANS, BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_loss) { bo_run_cases("loss", loss_cases, BO_COUNT(loss_cases)); }

/* ---- norms ----------------------------------------------------------------------- */

typedef struct norm_arg {
    bool rms, weight, bias;
    int64_t c; /* normalized size */
} norm_arg;
static const norm_arg N_LN_WB = {false, true, true, 16}, N_LN_W = {false, true, false, 16},
                      N_LN = {false, false, false, 16}, N_LN_WIDE = {false, true, true, 700},
                      N_RMS_W = {true, true, false, 16}, N_RMS = {true, false, false, 16},
                      N_RMS_WIDE = {true, true, false, 700};

static kiln_tensor *b_norm(bo_io *io) {
    const norm_arg *a = io->arg;
    kiln_tensor *x = bo_in_range(io, -2, 3, BO_SHAPE(3, 4, a->c));
    kiln_tensor *w = a->weight ? bo_in_range(io, 0.5, 1.5, BO_SHAPE(a->c)) : NULL;
    kiln_tensor *b = a->bias ? IN(a->c) : NULL;
    return a->rms ? kiln_rms_norm(CTX, x, w, 1e-5) : kiln_layer_norm(CTX, x, w, b, 1e-5);
}
static kiln_tensor *b_norm_t(bo_io *io) { /* normalize over a transposed input */
    const norm_arg *a = io->arg;
    kiln_tensor *x = kiln_transpose(CTX, bo_in_range(io, -2, 3, BO_SHAPE(a->c, 5)), 0, 1);
    kiln_tensor *w = a->weight ? bo_in_range(io, 0.5, 1.5, BO_SHAPE(a->c)) : NULL;
    kiln_tensor *b = a->bias ? IN(a->c) : NULL;
    return a->rms ? kiln_rms_norm(CTX, x, w, 1e-5) : kiln_layer_norm(CTX, x, w, b, 1e-5);
}

static const bo_case norm_cases[] = {
    {"layer_norm_wb", b_norm, F32, BO_TRANS, 0, &N_LN_WB},
    {"layer_norm_w", b_norm, F32, BO_TRANS, 0, &N_LN_W},
    {"layer_norm", b_norm, F32, BO_TRANS, 0, &N_LN},
    {"layer_norm_wide", b_norm, F32, BO_TRANS, 0, &N_LN_WIDE},
    {"layer_norm_transposed", b_norm_t, F32, BO_TRANS, 0, &N_LN_WB},
    {"rms_norm_w", b_norm, F32, BO_TRANS, 0, &N_RMS_W},
    {"rms_norm", b_norm, F32, BO_TRANS, 0, &N_RMS},
    {"rms_norm_wide", b_norm, F32, BO_TRANS, 0, &N_RMS_WIDE},
    {"rms_norm_transposed", b_norm_t, F32, BO_TRANS, 0, &N_RMS_W},
    {"layer_norm_wb", b_norm, F64, BO_TRANS, BO_MAY_FALL_BACK, &N_LN_WB},
    {"rms_norm_wide", b_norm, F64, BO_TRANS, BO_MAY_FALL_BACK, &N_RMS_WIDE},
};
KT_TEST(backend_ops_norm) { bo_run_cases("norm", norm_cases, BO_COUNT(norm_cases)); }

/* ---- rope ------------------------------------------------------------------------ */

typedef struct rope_arg {
    kiln_rope_mode mode;
    bool pos;
} rope_arg;
static const rope_arg RP_NEOX = {KILN_ROPE_NEOX, false}, RP_INTL = {KILN_ROPE_INTERLEAVED, false},
                      RP_NEOX_POS = {KILN_ROPE_NEOX, true}, RP_INTL_POS = {KILN_ROPE_INTERLEAVED, true};

static kiln_tensor *b_rope(bo_io *io) {
    const rope_arg *a = io->arg;
    kiln_tensor *pos = a->pos ? bo_ints(io, I32, false, 0, 40, BO_SHAPE(6)) : NULL;
    return kiln_rope(CTX, IN(2, 3, 6, 8), pos, 10000.0, a->mode);
}
static kiln_tensor *b_rope_t(bo_io *io) { /* [B, T, H, D] transposed to [B, H, T, D], as attention does */
    const rope_arg *a = io->arg;
    kiln_tensor *pos = a->pos ? bo_ints(io, I32, false, 0, 40, BO_SHAPE(5)) : NULL;
    return kiln_rope(CTX, kiln_transpose(CTX, IN(2, 5, 3, 16), 1, 2), pos, 500.0, a->mode);
}

static const bo_case rope_cases[] = {
    {"rope_neox", b_rope, F32, BO_TRANS, 0, &RP_NEOX},
    {"rope_interleaved", b_rope, F32, BO_TRANS, 0, &RP_INTL},
    {"rope_neox_pos", b_rope, F32, BO_TRANS, 0, &RP_NEOX_POS},
    {"rope_interleaved_pos", b_rope, F32, BO_TRANS, 0, &RP_INTL_POS},
    {"rope_neox_transposed", b_rope_t, F32, BO_TRANS, 0, &RP_NEOX_POS},
    {"rope_interleaved_transposed", b_rope_t, F32, BO_TRANS, 0, &RP_INTL},
    {"rope_neox_pos", b_rope, F64, BO_TRANS, BO_MAY_FALL_BACK, &RP_NEOX_POS},
    {"rope_interleaved_transposed", b_rope_t, F64, BO_TRANS, BO_MAY_FALL_BACK, &RP_INTL},
};
KT_TEST(backend_ops_rope) { bo_run_cases("rope", rope_cases, BO_COUNT(rope_cases)); }

/* ---- attention --------------------------------------------------------------- */

typedef struct attn_arg {
    int64_t b, hq, hkv, t, s, d, dv;
    bool causal;
    double scale;
} attn_arg;
static const attn_arg A_PLAIN = {1, 2, 2, 5, 5, 8, 8, false, 0}, A_CAUSAL = {2, 2, 2, 6, 6, 8, 8, true, 0},
                      A_GQA = {2, 4, 2, 4, 6, 8, 4, true, 0}, A_SCALE = {1, 3, 1, 3, 7, 16, 8, false, 0.3},
                      A_CACHE = {1, 2, 1, 1, 9, 8, 8, true, 0}, A_LONG = {1, 2, 2, 40, 40, 32, 32, true, 0},
                      /* the plain-float kernels (D over 128, or not a multiple of 4) past 127 keys */
                      A_D132 = {1, 1, 1, 3, 200, 132, 132, false, 0}, A_D160 = {1, 2, 1, 70, 210, 160, 36, true, 0},
                      A_D132_1 = {1, 2, 1, 1, 260, 132, 132, true, 0}, A_D136_1 = {1, 1, 1, 1, 9000, 136, 8, false, 0},
                      /* the tiled kernels: rows and keys not multiples of a tile, the models' head sizes, GQA,
                       * decoding with the keys split over blocks, 2,000+ keys, queries that see no key */
                      A_D80 = {1, 4, 2, 37, 45, 80, 96, true, 0}, A_D64_LONG = {1, 2, 1, 70, 2050, 64, 64, false, 0},
                      A_D64_1 = {2, 4, 2, 1, 2100, 64, 64, true, 0}, A_D128_1 = {1, 4, 1, 1, 520, 128, 128, false, 0},
                      A_BLIND = {1, 2, 2, 20, 12, 64, 64, true, 0};

static kiln_tensor *b_attn(bo_io *io) {
    const attn_arg *a = io->arg;
    kiln_tensor *q = bo_in_range(io, -2, 2, BO_SHAPE(a->b, a->hq, a->t, a->d));
    kiln_tensor *k = bo_in_range(io, -2, 2, BO_SHAPE(a->b, a->hkv, a->s, a->d));
    return kiln_attention(CTX, q, k, IN(a->b, a->hkv, a->s, a->dv), a->causal, a->scale);
}
static kiln_tensor *b_attn_t(bo_io *io) { /* q, k, v as [B, T, H, D] transposed, as a model makes them */
    kiln_tensor *q = kiln_transpose(CTX, bo_in_range(io, -2, 2, BO_SHAPE(2, 5, 4, 8)), 1, 2);
    kiln_tensor *k = kiln_transpose(CTX, bo_in_range(io, -2, 2, BO_SHAPE(2, 5, 2, 8)), 1, 2);
    return kiln_attention(CTX, q, k, kiln_transpose(CTX, IN(2, 5, 2, 8), 1, 2), true, 0);
}

static const bo_case attention_cases[] = {
    {"attention", b_attn, F32, BO_TRANS, 0, &A_PLAIN},
    {"attention_causal", b_attn, F32, BO_TRANS, 0, &A_CAUSAL},
    {"attention_gqa_causal", b_attn, F32, BO_TRANS, 0, &A_GQA},
    {"attention_scale_mqa", b_attn, F32, BO_TRANS, 0, &A_SCALE},
    {"attention_kv_cache", b_attn, F32, BO_TRANS, 0, &A_CACHE},
    {"attention_40x40_d32", b_attn, F32, BO_TRANS, 0, &A_LONG},
    {"attention_transposed_gqa", b_attn_t, F32, BO_TRANS, 0, NULL},
    {"attention_200keys_d132", b_attn, F32, BO_TRANS, 0, &A_D132},
    {"attention_210keys_d160_causal", b_attn, F32, BO_TRANS, 0, &A_D160},
    {"attention_decode_260keys_d132", b_attn, F32, BO_TRANS, 0, &A_D132_1},
    {"attention_decode_9000keys_d136", b_attn, F32, BO_TRANS, 0, &A_D136_1},
    {"attention_gqa_causal_37x45_d80", b_attn, F32, BO_TRANS, 0, &A_D80},
    {"attention_2050keys_d64", b_attn, F32, BO_TRANS, 0, &A_D64_LONG},
    {"attention_decode_gqa_2100keys_d64", b_attn, F32, BO_TRANS, 0, &A_D64_1},
    {"attention_decode_mqa_520keys_d128", b_attn, F32, BO_TRANS, 0, &A_D128_1},
    {"attention_causal_rows_without_keys", b_attn, F32, BO_TRANS, 0, &A_BLIND},
    {"attention_causal", b_attn, F64, BO_TRANS, BO_MAY_FALL_BACK, &A_CAUSAL},
    {"attention_gqa_causal", b_attn, F64, BO_TRANS, BO_MAY_FALL_BACK, &A_GQA},
};
KT_TEST(backend_ops_attention) { bo_run_cases("attention", attention_cases, BO_COUNT(attention_cases)); }

/* ---- convolution and pooling ----------------------------------------------- */

typedef struct conv_arg {
    int64_t n, c, h, w, o, kh, kw;
    kiln_conv2d_params p;
    bool bias;
} conv_arg;
static const conv_arg CV_BASIC = {2, 3, 7, 7, 4, 3, 3, {{1, 1}, {0, 0}, {1, 1}, 1, {0, 0}}, true},
                      CV_STRIDE = {2, 3, 8, 7, 5, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 1, {0, 0}}, true},
                      CV_DIL = {1, 2, 9, 9, 3, 3, 3, {{1, 1}, {2, 2}, {2, 2}, 1, {0, 0}}, false},
                      CV_GROUPS = {2, 4, 6, 7, 6, 3, 2, {{1, 2}, {1, 0}, {1, 1}, 2, {0, 0}}, true},
                      CV_DEPTH = {1, 4, 6, 6, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 4, {0, 0}}, false},
                      CV_1X1 = {2, 8, 4, 5, 6, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1, {0, 0}}, true},
                      CT_BASIC = {1, 4, 4, 4, 3, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 1, {1, 1}}, true},
                      CT_GROUPS = {2, 4, 3, 3, 4, 3, 2, {{1, 2}, {0, 1}, {1, 1}, 2, {0, 1}}, false},
                      CT_DIL = {1, 2, 4, 5, 3, 2, 2, {{2, 1}, {0, 0}, {2, 2}, 1, {1, 0}}, true};

static kiln_tensor *b_conv(bo_io *io) {
    const conv_arg *a = io->arg;
    int g = a->p.groups ? a->p.groups : 1;
    kiln_tensor *x = IN(a->n, a->c, a->h, a->w), *w = IN(a->o, a->c / g, a->kh, a->kw);
    return kiln_conv2d(CTX, x, w, a->bias ? IN(a->o) : NULL, &a->p);
}
static kiln_tensor *b_conv_t(bo_io *io) {
    const conv_arg *a = io->arg;
    int g = a->p.groups ? a->p.groups : 1;
    kiln_tensor *x = IN(a->n, a->c, a->h, a->w), *w = IN(a->c, a->o / g, a->kh, a->kw);
    return kiln_conv_transpose2d(CTX, x, w, a->bias ? IN(a->o) : NULL, &a->p);
}
static kiln_tensor *b_conv_perm(bo_io *io) { /* NHWC data permuted to NCHW */
    kiln_tensor *x = kiln_permute(CTX, IN(2, 6, 5, 3), (int[]){0, 3, 1, 2});
    return kiln_conv2d(CTX, x, IN(4, 3, 3, 3), IN(4), &(kiln_conv2d_params){.padding = {1, 1}});
}

typedef struct pool_arg {
    bool max;
    int kh, kw, stride, padding;
} pool_arg;
static const pool_arg P_MAX2 = {true, 2, 2, 0, 0}, P_MAX3 = {true, 3, 3, 2, 1}, P_MAX32 = {true, 3, 2, 1, 1},
                      P_AVG2 = {false, 2, 2, 0, 0}, P_AVG3 = {false, 3, 3, 2, 1};

static kiln_tensor *b_pool(bo_io *io) {
    const pool_arg *a = io->arg;
    kiln_tensor *x = IN(2, 3, 7, 6);
    return a->max ? kiln_max_pool2d(CTX, x, a->kh, a->kw, a->stride, a->padding)
                  : kiln_avg_pool2d(CTX, x, a->kh, a->kw, a->stride, a->padding);
}
static kiln_tensor *b_pool_cn(bo_io *io) { /* a conv product's [C, N, H, W] seen as [N, C, H, W] (ip[11] = 1) */
    const pool_arg *a = io->arg;
    kiln_tensor *x = kiln_permute(CTX, IN(3, 2, 7, 6), (int[]){1, 0, 2, 3});
    return kiln_max_pool2d(CTX, x, a->kh, a->kw, a->stride, a->padding);
}
static kiln_tensor *b_pool_ties(bo_io *io) { /* integers: equal maxima in a window */
    const pool_arg *a = io->arg;
    kiln_tensor *x = bo_ints(io, io->dt, true, -1, 1, BO_SHAPE(1, 2, 6, 6));
    return kiln_max_pool2d(CTX, x, a->kh, a->kw, a->stride, a->padding);
}

static const bo_case conv_cases[] = {
    {"conv2d", b_conv, F32, BO_TRANS, 0, &CV_BASIC},
    {"conv2d_stride_pad", b_conv, F32, BO_TRANS, 0, &CV_STRIDE},
    {"conv2d_dilation", b_conv, F32, BO_TRANS, 0, &CV_DIL},
    {"conv2d_groups", b_conv, F32, BO_TRANS, 0, &CV_GROUPS},
    {"conv2d_depthwise", b_conv, F32, BO_TRANS, 0, &CV_DEPTH},
    {"conv2d_1x1", b_conv, F32, BO_TRANS, 0, &CV_1X1},
    {"conv2d_permuted_input", b_conv_perm, F32, BO_TRANS, 0, NULL},
    {"conv_transpose2d", b_conv_t, F32, BO_TRANS, 0, &CT_BASIC},
    {"conv_transpose2d_groups", b_conv_t, F32, BO_TRANS, 0, &CT_GROUPS},
    {"conv_transpose2d_dilation", b_conv_t, F32, BO_TRANS, 0, &CT_DIL},
    {"max_pool2d", b_pool, F32, BO_EXACT, 0, &P_MAX2},
    {"max_pool2d_s2_p1", b_pool, F32, BO_EXACT, 0, &P_MAX3},
    {"max_pool2d_3x2_s1_p1", b_pool, F32, BO_EXACT, 0, &P_MAX32},
    {"max_pool2d_ties", b_pool_ties, F32, BO_EXACT, 0, &P_MAX3},
    {"max_pool2d_swapped_planes", b_pool_cn, F32, BO_EXACT, 0, &P_MAX2},
    {"max_pool2d_swapped_planes_s2_p1", b_pool_cn, F32, BO_EXACT, 0, &P_MAX3},
    {"avg_pool2d", b_pool, F32, BO_EXACT, 0, &P_AVG2},
    {"avg_pool2d_s2_p1", b_pool, F32, BO_EXACT, 0, &P_AVG3},
    {"conv2d_groups", b_conv, F64, BO_TRANS, BO_MAY_FALL_BACK, &CV_GROUPS},
    {"conv_transpose2d_dilation", b_conv_t, F64, BO_TRANS, BO_MAY_FALL_BACK, &CT_DIL},
    {"max_pool2d_s2_p1", b_pool, F64, BO_EXACT, BO_MAY_FALL_BACK, &P_MAX3},
    {"max_pool2d_ties", b_pool_ties, F64, BO_EXACT, BO_MAY_FALL_BACK, &P_MAX2},
    {"max_pool2d_swapped_planes", b_pool_cn, F64, BO_EXACT, BO_MAY_FALL_BACK, &P_MAX32},
};
KT_TEST(backend_ops_conv) { bo_run_cases("conv", conv_cases, BO_COUNT(conv_cases)); }

/* ---- dropout --------------------------------------------------------------------- */

/* training mode (the default); the mask depends on (seed, run, index), so
 * both backends drop the same elements on each of the two computes */
static kiln_tensor *b_dropout(bo_io *io) { return kiln_dropout(CTX, IN(6, 41), *(const double *)io->arg, 7); }
static kiln_tensor *b_dropout_t(bo_io *io) {
    return kiln_dropout(CTX, kiln_transpose(CTX, IN(41, 6), 0, 1), *(const double *)io->arg, 1234567);
}
static const double P_03 = 0.3, P_09 = 0.9;

static const bo_case dropout_cases[] = {
    {"dropout_0.3", b_dropout, F32, BO_EXACT, 0, &P_03},
    {"dropout_0.9", b_dropout, F32, BO_EXACT, 0, &P_09},
    {"dropout_transposed", b_dropout_t, F32, BO_EXACT, 0, &P_03},
    {"dropout_0.3", b_dropout, F64, BO_EXACT, BO_MAY_FALL_BACK, &P_03},
};
KT_TEST(backend_ops_dropout) { bo_run_cases("dropout", dropout_cases, BO_COUNT(dropout_cases)); }

/* ---- tensors with a dimension of size 0 ---------------------------------------- */

/* A node with an empty operand runs on the CPU (core/graph_device.c): one
 * with an empty result writes nothing, one that makes a result from empty
 * sources (a sum over an empty axis, a product over K = 0) is the CPU
 * kernel's. So every case may fall back; what is compared is that nothing
 * fails and the values and gradients (zeros, NaN means) agree. */
static kiln_tensor *b_relu_empty(bo_io *io) { return kiln_relu(CTX, IN(0, 7)); }
static kiln_tensor *b_add_empty(bo_io *io) { return kiln_add(CTX, IN(0, 7), IN(7)); }
static kiln_tensor *b_sum_empty_axis(bo_io *io) { return kiln_sum(CTX, IN(0, 7), 0, false); }
static kiln_tensor *b_mean_empty_axis(bo_io *io) { return kiln_mean(CTX, IN(3, 0, 5), 1, true); }
static kiln_tensor *b_matmul_k0(bo_io *io) { return kiln_matmul(CTX, IN(5, 0), IN(0, 3)); }
static kiln_tensor *b_matmul_m0(bo_io *io) { return kiln_matmul(CTX, IN(0, 4), IN(4, 3)); }
static kiln_tensor *b_concat_empty(bo_io *io) {
    return kiln_concat(CTX, (kiln_tensor *[]){IN(3, 4), IN(0, 4), IN(2, 4)}, 3, 0);
}
static kiln_tensor *b_log_softmax_empty(bo_io *io) { return kiln_log_softmax(CTX, IN(0, 9), false); }
static kiln_tensor *b_linear_empty_batch(bo_io *io) { return kiln_linear(CTX, IN(0, 4), IN(3, 4), IN(3)); }
static kiln_tensor *b_slice_empty(bo_io *io) { return kiln_slice(CTX, IN(3, 5), 1, 2, 2, 1); }

static const bo_case zero_size_cases[] = {
    {"relu_empty", b_relu_empty, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"add_empty_bcast", b_add_empty, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"sum_empty_axis", b_sum_empty_axis, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"mean_empty_axis", b_mean_empty_axis, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"matmul_k0", b_matmul_k0, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"matmul_m0", b_matmul_m0, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"concat_empty_part", b_concat_empty, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"log_softmax_empty_rows", b_log_softmax_empty, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"linear_empty_batch", b_linear_empty_batch, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"slice_empty", b_slice_empty, F32, BO_EXACT, BO_MAY_FALL_BACK, NULL},
    {"matmul_k0", b_matmul_k0, F16, BO_HALF, BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_zero_size) { bo_run_cases("zero_size", zero_size_cases, BO_COUNT(zero_size_cases)); }

/* ---- the error measure itself (needs no device) ------------------------------ */

KT_TEST(backend_ops_error_measure) {
    const double ref[4] = {1, -4, 2, -INFINITY};
    double same[4] = {1, -4, 2, -INFINITY}, off[4] = {1, -4, 2.5, -INFINITY}, nan[4] = {1, NAN, 2, -INFINITY},
           inf[4] = {1, -4, INFINITY, -INFINITY}, fin[4] = {1, -4, 2, -1e30};
    KT_CHECK(bo_error_values(same, ref, 4) == 0, "equal values (and equal infinities) give 0");
    KT_CHECK(bo_error_values(off, ref, 4) == 0.125, "max|a-b| / max|ref| = 0.5 / 4, not %g", bo_error_values(off, ref, 4));
    KT_CHECK(isinf(bo_error_values(nan, ref, 4)), "a NaN is an infinite error");
    KT_CHECK(isinf(bo_error_values(inf, ref, 4)), "an infinity where the CPU has a number is an infinite error");
    KT_CHECK(isinf(bo_error_values(fin, ref, 4)), "a number where the CPU has -inf is an infinite error");
    const double zeros[2] = {0, 0}, tiny[2] = {0, 1e-9};
    KT_CHECK(fabs(bo_error_values(tiny, zeros, 2) - 1e-3) < 1e-12, "an all-zero reference normalizes by 1e-6");
}
