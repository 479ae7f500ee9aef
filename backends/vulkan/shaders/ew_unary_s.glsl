// ew_unary_s.glsl — a unary op (EW_OPS, ew_unary_ops.glsl) with x any
// strided view, y contiguous, one element an invocation, flat indices
// i0 .. i0 + n - 1 of the output (i0 > 0: the tail of ew_unary_v4).
// EW_T16: f16 storage, computed in f32.
#include "ew_fast.glsl"
#include "ew_half.glsl"
#include "ew_io.glsl"
#include "ew_unary_ops.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { EW_STORE_T x[]; };
layout(std430, binding = 1) writeonly buffer Y { EW_STORE_T y[]; };
layout(push_constant) uniform P {
    uint n, x0, y0, nd, i0, sl, op;
    float p; // fp[0]
    uint shape[EW_MAX_DIMS], mg[EW_MAX_DIMS], st[EW_MAX_DIMS];
} p;

void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint j = p.i0 + i, off;
    EW_WALK1(j, p.nd, p.shape, p.mg, p.sl, p.st, off)
    y[p.y0 + j] = ew_st(unary(p.op, ew_ld(x[p.x0 + off]), p.p));
}
