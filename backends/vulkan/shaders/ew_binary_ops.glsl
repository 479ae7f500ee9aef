// ew_binary_ops.glsl — ADD SUB MUL DIV CMP (op 0..4, cmp a kiln_cmp_op)
// on f32 values. As in ew_unary_ops.glsl, EW_OPS (a bit mask) picks the
// ops a kernel is built for: DIV's correction step would otherwise be
// paid by every add on llvmpipe, which runs both sides of a branch.
#ifndef EW_OPS
#define EW_OPS 0x1f
#endif
#include "ew_math.glsl"

// Ordered comparisons except NE, which is true when either side is NaN.
#define EW_CMP(cmp, u, v) \
    (cmp == 0u ? u == v : cmp == 1u ? !(u == v) : cmp == 2u ? u < v : cmp == 3u ? u <= v : cmp == 4u ? u > v : u >= v)

float binary(uint op, uint cmp, float u, float v) {
    switch (op) {
#if (EW_OPS >> 0) & 1
    case 0u: return u + v;
#endif
#if (EW_OPS >> 1) & 1
    case 1u: return u - v;
#endif
#if (EW_OPS >> 2) & 1
    case 2u: return u * v;
#endif
#if (EW_OPS >> 3) & 1
    case 3u: return ew_div(u, v);
#endif
#if (EW_OPS >> 4) & 1
    case 4u: return EW_CMP(cmp, u, v) ? 1.0 : 0.0;
#endif
    }
    return u; // not an op of this build
}
