#version 450
#include "common.glsl"
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "ew_half.glsl"
// acc_grad_f16: g[g0 + i] += d[d0 + i] for f16 gradients, as the CPU does it:
// both widened to f32, added, rounded once to f16 (on bits, round to nearest even).
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer G { float16_t g[]; };
layout(std430, binding = 1) readonly buffer D { float16_t d[]; };
layout(push_constant) uniform P { uint n, g0, d0; } p;
float widen(float16_t h) { return uintBitsToFloat(ew_f16_to_f32(packFloat2x16(f16vec2(h, float16_t(0.0))) & 0xffffu)); }
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    precise float s = widen(g[p.g0 + i]) + widen(d[p.d0 + i]);
    g[p.g0 + i] = unpackFloat2x16(ew_f32_to_f16(floatBitsToUint(s))).x;
}
