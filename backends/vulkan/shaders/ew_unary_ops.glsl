// ew_unary_ops.glsl — the unary ops NEG .. GELU_TANH_GRAD, numbered by
// their offset from KILN_OP_NEG. llvmpipe runs both sides of every branch
// (masked), so a switch over all twenty costs the sum of them; a kernel
// defines EW_OPS, a bit mask of the ops it is built for, and gets only
// those cases (vk_elementwise.c groups them).
#ifndef EW_OPS
#define EW_OPS 0xfffff
#endif
#include "ew_math.glsl"

float unary(uint op, float x, float a) {
    float t;
    switch (op) {
#if (EW_OPS >> 0) & 1
    case 0u: return ew_neg(x);
#endif
#if (EW_OPS >> 1) & 1
    case 1u: return x * a;
#endif
#if (EW_OPS >> 2) & 1
    case 2u: return x + a;
#endif
#if (EW_OPS >> 3) & 1
    case 3u: return ew_exp(x);
#endif
#if (EW_OPS >> 4) & 1
    case 4u: return ew_log(x);
#endif
#if (EW_OPS >> 5) & 1
    case 5u: return ew_sqrt(x);
#endif
#if (EW_OPS >> 6) & 1
    case 6u: return ew_div(1.0, ew_sqrt(x));
#endif
#if (EW_OPS >> 7) & 1
    case 7u: return ew_abs(x);
#endif
#if (EW_OPS >> 8) & 1
    case 8u: return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : 0.0;
#endif
#if (EW_OPS >> 9) & 1
    case 9u: return ew_pow(x, a);
#endif
#if (EW_OPS >> 10) & 1
    case 10u: return ew_tanh(x);
#endif
#if (EW_OPS >> 11) & 1
    case 11u: return ew_sigmoid2(x, t);
#endif
#if (EW_OPS >> 12) & 1
    case 12u: return x < 0.0 ? 0.0 : x; // NaN stays NaN
#endif
#if (EW_OPS >> 13) & 1
    case 13u: return x > 0.0 ? x : x * a;
#endif
#if (EW_OPS >> 14) & 1
    case 14u: return ew_gelu(x);
#endif
#if (EW_OPS >> 15) & 1
    case 15u: return ew_mul_sigmoid(x, ew_gelu_tanh_arg2(x));
#endif
#if (EW_OPS >> 16) & 1
    case 16u: return ew_mul_sigmoid(x, x);
#endif
#if (EW_OPS >> 17) & 1
    case 17u: return ew_isnan(x) ? x : ew_max_c(x, 0.0) + ew_log1p_pos(ew_exp(-ew_abs(x)));
#endif
#if (EW_OPS >> 18) & 1
    case 18u: return ew_gelu_grad(x);
#endif
#if (EW_OPS >> 19) & 1
    case 19u: return ew_gelu_tanh_grad(x);
#endif
    }
    return x; // not an op of this build
}
