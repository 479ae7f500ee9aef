// ew_unary_v4.glsl — a unary op (EW_OPS, ew_unary_ops.glsl) where x and y
// are contiguous and both start at a multiple of 4 elements: four elements
// an invocation, moved as one vector (f32; EW_T16: f16, computed in f32).
// The host runs the n % 4 left over with ew_unary_s.glsl.
#include "ew_half.glsl"
#include "ew_io.glsl"
#include "ew_unary_ops.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { EW_STORE4_T x[]; };
layout(std430, binding = 1) writeonly buffer Y { EW_STORE4_T y[]; };
layout(push_constant) uniform P {
    uint nq, x0, y0, op; // nq quads; x0, y0 in quads
    float p;             // fp[0]
} p;

void main() {
    uint g = kiln_gid();
    if (g >= p.nq) return;
    vec4 v = ew_ld4(x[p.x0 + g]);
    // four calls, not an unrolled loop: spirv-opt's unroller drops the
    // NoContraction (precise) decorations on the copies it makes
    y[p.y0 + g] = ew_st4(vec4(unary(p.op, v.x, p.p), unary(p.op, v.y, p.p), unary(p.op, v.z, p.p), unary(p.op, v.w, p.p)));
}
