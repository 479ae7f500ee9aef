#version 450
#include "common.glsl"
#extension GL_EXT_shader_16bit_storage : require
#include "ew_half.glsl"
// acc_grad_bf16: g[g0 + i] += d[d0 + i] for bf16 gradients, as the CPU does it:
// both widened to f32, added, rounded once to bf16 (on bits, round to nearest even).
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer G { uint16_t g[]; };
layout(std430, binding = 1) readonly buffer D { uint16_t d[]; };
layout(push_constant) uniform P { uint n, g0, d0; } p;
float widen(uint h) { return uintBitsToFloat(ew_bf16_to_f32(h)); }
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    precise float s = widen(uint(g[p.g0 + i])) + widen(uint(d[p.d0 + i]));
    g[p.g0 + i] = uint16_t(ew_f32_to_bf16(floatBitsToUint(s)));
}
