/* vecmath.h — f32 element-wise and reduction kernels over contiguous runs,
 * one table per instruction set (scalar, AVX2+FMA, AVX-512, NEON) chosen at
 * run time from kiln__cpu_caps(), plus the double formulas that are the
 * reference for every unary op (the f64 kernels and the scalar table use them).
 *
 * elementwise.c and reduce.c split a tensor into runs whose last axis is
 * contiguous (stride 1) or broadcast (stride 0) and hand each run to these:
 *
 *     const kiln_vm *vm = kiln__vm();
 *     vm->binary(KILN_OP_ADD, 0, a, 1, bias, 1, y, d, false);  // y = a + bias
 *     vm->binary(KILN_OP_MUL, 0, a, 1, &s, 0, y, d, false);    // y = a * s
 *
 * The SIMD tables are written once in vecmath_body.h over a small vector
 * vocabulary that vecmath_{avx512,avx2,neon}.c define. Their exp, log,
 * tanh and normal CDF are polynomial approximations good to a few ulp
 * (tests/test_simd_elementwise.c measures them against this file's doubles). */
#ifndef KILN_CPU_VECMATH_H
#define KILN_CPU_VECMATH_H

#include "internal.h"

#include <math.h>

typedef struct kiln_vm {
    const char *name;
    /* y[i] = op(x[i]) for i < n, any unary op KILN_OP_NEG..KILN_OP_GELU_TANH_GRAD;
     * p is the op's parameter; nt: non-temporal stores (large outputs). */
    void (*unary)(kiln_op op, float p, const float *x, float *y, int64_t n, bool nt);
    /* y = a op b (ADD, SUB, MUL, DIV, or CMP with cmp a kiln_cmp_op giving 0/1);
     * sa, sb: 1 reads a run, 0 repeats element 0. */
    void (*binary)(kiln_op op, int cmp, const float *a, int sa, const float *b, int sb, float *y, int64_t n, bool nt);
    /* y = c != 0 ? a : b; c holds f32 values, or i32 when c_i32. */
    void (*where)(const void *c, bool c_i32, int sc, const float *a, int sa, const float *b, int sb, float *y, int64_t n,
                  bool nt);
    double (*sum)(const float *x, int64_t n);                   /* n >= 0 */
    float (*maxmin)(bool is_max, const float *x, int64_t n);    /* n >= 1; a NaN wins */
    int64_t (*argmax)(const float *x, int64_t n);               /* first largest, or first NaN */
    /* acc[j] += x[r*ld + j] for r < rows, j < n. */
    void (*col_sum)(const float *x, int64_t ld, int64_t rows, int64_t n, double *acc);
    /* acc[j] = max (min) of acc[j] and x[r*ld + j]; a NaN wins. */
    void (*col_maxmin)(bool is_max, const float *x, int64_t ld, int64_t rows, int64_t n, float *acc);
} kiln_vm;

/* The table for the caps in force (one load and a branch). */
const kiln_vm *kiln__vm(void);
/* A given table, or NULL where this build or CPU lacks it (tests). */
const kiln_vm *kiln__vm_for(int level);

/* ---- double reference formulas, written to stay accurate in the tails ---- */

static inline double kiln__sigmoid_ref(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
/* Φ(x) = erfc(-x/√2)/2 keeps full precision for x << 0. */
static inline double kiln__gelu_ref(double x) { return 0.5 * x * erfc(-x * M_SQRT1_2); }
static inline double kiln__gelu_grad_ref(double x) {
    return 0.5 * erfc(-x * M_SQRT1_2) + x * exp(-0.5 * x * x) * 0.3989422804014327;
}
static const double KILN_GELU_K = 0.7978845608028654; /* sqrt(2/pi) */
/* 0.5 x (1 + tanh u) = x σ(2u), without the cancellation at x << 0. */
static inline double kiln__gelu_tanh_ref(double x) {
    return x * kiln__sigmoid_ref(2 * KILN_GELU_K * (x + 0.044715 * x * x * x));
}
/* 0.5 (1 + th) + 0.5 x (1 - th²) u' with 1 + th = 2σ(2u), 1 - th² = 4σ(2u)σ(-2u). */
static inline double kiln__gelu_tanh_grad_ref(double x) {
    double u2 = 2 * KILN_GELU_K * (x + 0.044715 * x * x * x), s = kiln__sigmoid_ref(u2), sm = kiln__sigmoid_ref(-u2);
    return s + 2 * x * s * sm * KILN_GELU_K * (1.0 + 3 * 0.044715 * x * x);
}
static inline double kiln__softplus_ref(double x) { return x > 20 ? x : log1p(exp(x)); }

static inline double kiln__unary_ref(kiln_op op, double x, double p) {
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
    case KILN_OP_SIGMOID: return kiln__sigmoid_ref(x);
    case KILN_OP_RELU: return x < 0 ? 0 : x; /* NaN stays NaN, -0 stays -0, as torch */
    case KILN_OP_LEAKY_RELU: return x > 0 ? x : x * p;
    case KILN_OP_GELU: return kiln__gelu_ref(x);
    case KILN_OP_GELU_TANH: return kiln__gelu_tanh_ref(x);
    case KILN_OP_SILU: return x * kiln__sigmoid_ref(x);
    case KILN_OP_SOFTPLUS: return kiln__softplus_ref(x);
    case KILN_OP_GELU_GRAD: return kiln__gelu_grad_ref(x);
    case KILN_OP_GELU_TANH_GRAD: return kiln__gelu_tanh_grad_ref(x);
    default: return NAN;
    }
}

static inline double kiln__binary_ref(kiln_op op, int cmp, double a, double b) {
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

#endif
