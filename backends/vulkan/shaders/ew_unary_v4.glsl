// ew_unary_v4.glsl — a unary op (EW_OPS, ew_unary_ops.glsl) on f32 where x
// and y are contiguous and both start at a multiple of 4 elements: four
// elements an invocation, moved as uvec4. The host runs the n % 4 left
// over with ew_unary_s.glsl.
#include "ew_unary_ops.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { uvec4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { uvec4 y[]; };
layout(push_constant) uniform P {
    uint nq, x0, y0, op; // nq quads; x0, y0 in quads
    float p;             // fp[0]
} p;

void main() {
    uint g = kiln_gid();
    if (g >= p.nq) return;
    vec4 v = uintBitsToFloat(x[p.x0 + g]);
    // four calls, not an unrolled loop: spirv-opt's unroller drops the
    // NoContraction (precise) decorations on the copies it makes
    y[p.y0 + g] = floatBitsToUint(vec4(unary(p.op, v.x, p.p), unary(p.op, v.y, p.p), unary(p.op, v.z, p.p), unary(p.op, v.w, p.p)));
}
