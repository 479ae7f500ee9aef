// ew_binary_v4.glsl — a binary op (EW_OPS, ew_binary_ops.glsl) on f32
// with the output contiguous from a multiple of 4 elements, four elements
// an invocation. Each source is either read as uvec4 from a multiple of 4
// and repeating every d quads (d = all of them for a source shaped like
// the output, the row for a bias broadcast over the rows, its length a
// multiple of 4), or splat (EW_A_SCALAR, EW_B_SCALAR): one element for d
// quads in turn (d = all of them for a scalar, the row for a column
// broadcast over rows of a multiple of 4). The host runs the n % 4 left
// over with ew_binary_s.
#include "ew_fast.glsl"
#include "ew_binary_ops.glsl"
layout(local_size_x = 256) in;
#ifdef EW_A_SCALAR
layout(std430, binding = 0) readonly buffer A { uint a[]; };
#else
layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
#endif
#ifdef EW_B_SCALAR
layout(std430, binding = 1) readonly buffer B { uint b[]; };
#else
layout(std430, binding = 1) readonly buffer B { uvec4 b[]; };
#endif
layout(std430, binding = 2) writeonly buffer Y { uvec4 y[]; };
layout(push_constant) uniform P {
    uint nq, a0, b0, y0, opc;    // a0, b0: quads (elements when splat); opc: op | cmp << 8
    uint ma, la, da, mb, lb, db; // each source's period d in quads, with its magic (ew_udiv)
} p;

void main() {
    uint g = kiln_gid();
    if (g >= p.nq) return;
#ifdef EW_A_SCALAR
    vec4 u = vec4(uintBitsToFloat(a[p.a0 + ew_udiv(g, p.ma, p.la)]));
#else
    vec4 u = uintBitsToFloat(a[p.a0 + g - ew_udiv(g, p.ma, p.la) * p.da]);
#endif
#ifdef EW_B_SCALAR
    vec4 v = vec4(uintBitsToFloat(b[p.b0 + ew_udiv(g, p.mb, p.lb)]));
#else
    vec4 v = uintBitsToFloat(b[p.b0 + g - ew_udiv(g, p.mb, p.lb) * p.db]);
#endif
    uint op = p.opc & 255u, cmp = p.opc >> 8;
    // four calls, not an unrolled loop: spirv-opt's unroller drops the
    // NoContraction (precise) decorations on the copies it makes
    y[p.y0 + g] = floatBitsToUint(vec4(binary(op, cmp, u.x, v.x), binary(op, cmp, u.y, v.y), binary(op, cmp, u.z, v.z),
                                       binary(op, cmp, u.w, v.w)));
}
