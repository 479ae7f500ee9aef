#version 450
#include "common.glsl"
// acc_grad: g[g0 + i] += d[d0 + i], both f32 and contiguous (gradient accumulation).
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer D { float d[]; };
layout(push_constant) uniform P { uint n, g0, d0; } p;
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    g[p.g0 + i] += d[p.d0 + i];
}
