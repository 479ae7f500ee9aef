/* elementwise.c — CPU kernels for unary, binary, comparison and where ops,
 * f32 and f64, any source strides (broadcasts are stride 0). Math runs in
 * double; hand-tuned SIMD versions are a later step. */
#include "bcast.h"

#include <math.h>

#define PAR_MIN 32768 /* elements below which threads cost more than they give */

static double gelu(double x) { return 0.5 * x * (1.0 + erf(x * M_SQRT1_2)); }
static double gelu_grad(double x) { return 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327; }
static const double GELU_K = 0.7978845608028654; /* sqrt(2/pi) */
static double gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(GELU_K * (x + 0.044715 * x * x * x))); }
static double gelu_tanh_grad(double x) {
    double u = GELU_K * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_K * (1.0 + 3 * 0.044715 * x * x);
}
static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

static inline double unary_value(kiln_op op, double x, double p) {
    switch (op) {
    case KILN_OP_NEG: return -x;
    case KILN_OP_SCALE: return x * p;
    case KILN_OP_ADD_SCALAR: return x + p;
    case KILN_OP_EXP: return exp(x);
    case KILN_OP_LOG: return log(x);
    case KILN_OP_SQRT: return sqrt(x);
    case KILN_OP_RSQRT: return 1.0 / sqrt(x);
    case KILN_OP_ABS: return fabs(x);
    case KILN_OP_SIGN: return (x > 0) - (x < 0);
    case KILN_OP_POW: return p == 2.0 ? x * x : p == 3.0 ? x * x * x : pow(x, p);
    case KILN_OP_TANH: return tanh(x);
    case KILN_OP_SIGMOID: return sigmoid(x);
    case KILN_OP_RELU: return x > 0 ? x : 0;
    case KILN_OP_LEAKY_RELU: return x > 0 ? x : x * p;
    case KILN_OP_GELU: return gelu(x);
    case KILN_OP_GELU_TANH: return gelu_tanh(x);
    case KILN_OP_SILU: return x * sigmoid(x);
    case KILN_OP_SOFTPLUS: return softplus(x);
    case KILN_OP_GELU_GRAD: return gelu_grad(x);
    case KILN_OP_GELU_TANH_GRAD: return gelu_tanh_grad(x);
    default: return NAN;
    }
}

static inline double binary_value(kiln_op op, int cmp, double a, double b) {
    switch (op) {
    case KILN_OP_ADD: return a + b;
    case KILN_OP_SUB: return a - b;
    case KILN_OP_MUL: return a * b;
    case KILN_OP_DIV: return a / b;
    default:
        switch (cmp) {
        case KILN_CMP_EQ: return a == b;
        case KILN_CMP_NE: return a != b;
        case KILN_CMP_LT: return a < b;
        case KILN_CMP_LE: return a <= b;
        case KILN_CMP_GT: return a > b;
        default: return a >= b;
        }
    }
}

/* One body for every element-wise kernel and dtype: the switch on the op
 * sits inside the loop but is the same every iteration, so it predicts. */
#define ELEMENTWISE(T, VALUE)                                                                  \
    do {                                                                                       \
        T *y = t->data;                                                                        \
        _Pragma("omp parallel for num_threads(ex->n_threads) if (it.rows * it.cols > PAR_MIN)") \
        for (int64_t r = 0; r < it.rows; r++) {                                                \
            int64_t off[KILN_BCAST_MAX];                                                     \
            kiln_bcast_row(&it, r, off);                                                     \
            T *yr = y + r * it.cols;                                                           \
            for (int64_t j = 0; j < it.cols; j++) yr[j] = (T)(VALUE);                          \
        }                                                                                      \
    } while (0)

#define SRC(k, T) (((const T *)t->src[k]->data)[off[k] + j * it.st[k][it.nd - 1]])

static kiln_status unary_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 1, t->src);
    kiln_op op = t->op;
    double p = t->fp[0];
    if (t->dtype == KILN_F32) ELEMENTWISE(float, unary_value(op, SRC(0, float), p));
    else ELEMENTWISE(double, unary_value(op, SRC(0, double), p));
    return KILN_OK;
}

static kiln_status binary_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 2, t->src);
    kiln_op op = t->op;
    int cmp = (int)t->ip[0];
    switch (t->dtype) {
    case KILN_F32: ELEMENTWISE(float, binary_value(op, cmp, SRC(0, float), SRC(1, float))); break;
    case KILN_F64: ELEMENTWISE(double, binary_value(op, cmp, SRC(0, double), SRC(1, double))); break;
    default: ELEMENTWISE(int32_t, binary_value(op, cmp, SRC(0, int32_t), SRC(1, int32_t))); break;
    }
    return KILN_OK;
}

/* where(cond, a, b); cond may be f32, f64 or i32. */
static double cond_at(const kiln_tensor *c, int64_t i) { return kiln__types[c->dtype].get(c->data, i); }

static kiln_status where_kernel(kiln_tensor *t, const kiln_exec *ex) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, 3, t->src);
    const kiln_tensor *cond = t->src[0];
#define WHERE_VALUE(T) (cond_at(cond, off[0] + j * it.st[0][it.nd - 1]) != 0 ? SRC(1, T) : SRC(2, T))
    if (t->dtype == KILN_F32) ELEMENTWISE(float, WHERE_VALUE(float));
    else ELEMENTWISE(double, WHERE_VALUE(double));
#undef WHERE_VALUE
    return KILN_OK;
}

void kiln__cpu_register_elementwise(kiln_cpu_kernel *tab) {
    for (int op = KILN_OP_NEG; op <= KILN_OP_GELU_TANH_GRAD; op++) tab[op] = unary_kernel;
    for (int op = KILN_OP_ADD; op <= KILN_OP_CMP; op++) tab[op] = binary_kernel;
    tab[KILN_OP_WHERE] = where_kernel;
}
