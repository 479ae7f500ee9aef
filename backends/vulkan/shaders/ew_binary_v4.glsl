// ew_binary_v4.glsl — a binary op (EW_OPS, ew_binary_ops.glsl) on f32
// (EW_T16: f16, computed in f32) with the output contiguous from a
// multiple of 4 elements, four elements an invocation. Each source is
// either read as one vector from a multiple of 4
// and repeating every d quads (d = all of them for a source shaped like
// the output, the row for a bias broadcast over the rows, its length a
// multiple of 4), or splat (EW_A_SCALAR, EW_B_SCALAR): one element for d
// quads in turn (d = all of them for a scalar, the row for a column
// broadcast over rows of a multiple of 4). The host runs the n % 4 left
// over with ew_binary_s.
#include "ew_fast.glsl"
#include "ew_half.glsl"
#include "ew_io.glsl"
#include "ew_binary_ops.glsl"
layout(local_size_x = 256) in;
#ifdef EW_A_SCALAR
layout(std430, binding = 0) readonly buffer A { EW_STORE_T a[]; };
#else
layout(std430, binding = 0) readonly buffer A { EW_STORE4_T a[]; };
#endif
#ifdef EW_B_SCALAR
layout(std430, binding = 1) readonly buffer B { EW_STORE_T b[]; };
#else
layout(std430, binding = 1) readonly buffer B { EW_STORE4_T b[]; };
#endif
layout(std430, binding = 2) writeonly buffer Y { EW_STORE4_T y[]; };
layout(push_constant) uniform P {
    uint nq, a0, b0, y0, opc;    // a0, b0: quads (elements when splat); opc: op | cmp << 8
    uint ma, la, da, mb, lb, db; // each source's period d in quads, with its magic (ew_udiv)
} p;

void main() {
    uint g = kiln_gid();
    if (g >= p.nq) return;
#ifdef EW_A_SCALAR
    vec4 u = vec4(ew_ld(a[p.a0 + ew_udiv(g, p.ma, p.la)]));
#else
    vec4 u = ew_ld4(a[p.a0 + g - ew_udiv(g, p.ma, p.la) * p.da]);
#endif
#ifdef EW_B_SCALAR
    vec4 v = vec4(ew_ld(b[p.b0 + ew_udiv(g, p.mb, p.lb)]));
#else
    vec4 v = ew_ld4(b[p.b0 + g - ew_udiv(g, p.mb, p.lb) * p.db]);
#endif
    uint op = p.opc & 255u, cmp = p.opc >> 8;
    // four calls, not an unrolled loop: spirv-opt's unroller drops the
    // NoContraction (precise) decorations on the copies it makes
    y[p.y0 + g] = ew_st4(vec4(binary(op, cmp, u.x, v.x), binary(op, cmp, u.y, v.y), binary(op, cmp, u.z, v.z),
                              binary(op, cmp, u.w, v.w)));
}
