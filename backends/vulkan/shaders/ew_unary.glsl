// ew_unary.glsl — every unary op (NEG .. GELU_TANH_GRAD) in one kernel, the
// op a push constant (its offset from KILN_OP_NEG in the kiln_op enum);
// the input may be any strided view, the output is contiguous.
#include "ew_index.glsl"
#include "ew_half.glsl"
#include "ew_io.glsl"
#include "ew_math.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { EW_STORE_T x[]; };
layout(std430, binding = 1) writeonly buffer Y { EW_STORE_T y[]; };
layout(push_constant) uniform P {
    uint n, x0, y0, nd, op;
    float p; // fp[0]
    uint shape[EW_MAX_DIMS], st[EW_MAX_DIMS];
} p;

float unary(uint op, float x, float a) {
    float t;
    switch (op) {
    case 0u: return ew_neg(x);
    case 1u: return x * a;
    case 2u: return x + a;
    case 3u: return ew_exp(x);
    case 4u: return ew_log(x);
    case 5u: return ew_sqrt(x);
    case 6u: return ew_div(1.0, ew_sqrt(x));
    case 7u: return ew_abs(x);
    case 8u: return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : 0.0;
    case 9u: return ew_pow(x, a);
    case 10u: return ew_tanh(x);
    case 11u: return ew_sigmoid2(x, t);
    case 12u: return x > 0.0 ? x : 0.0;
    case 13u: return x > 0.0 ? x : x * a;
    case 14u: return ew_gelu(x);
    case 15u: return ew_mul_sigmoid(x, ew_gelu_tanh_arg2(x));
    case 16u: return ew_mul_sigmoid(x, x);
    case 17u: return ew_isnan(x) ? x : ew_max_c(x, 0.0) + ew_log1p_pos(ew_exp(-ew_abs(x)));
    case 18u: return ew_gelu_grad(x);
    default: return ew_gelu_tanh_grad(x);
    }
}

void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint off;
    EW_OFFSET(i, p.nd, p.shape, p.st, off)
    y[p.y0 + i] = ew_st(unary(p.op, ew_ld(x[p.x0 + off]), p.p));
}
