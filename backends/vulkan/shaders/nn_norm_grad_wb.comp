#version 450
#include "common.glsl"
// Norm backward, pass 2 of 3: dw[j] = sum over rows of gy * xhat and
// db[j] = sum of gy, one column per x-invocation, the rows split over the
// 8 y-invocations and summed in shared memory (one writer per output, no
// atomics). Row statistics come from pass 1 (rstd at dx[r*c], mean at
// dx[r*c+1]; with c = 1 the mean is x itself).
layout(local_size_x = 32, local_size_y = 8) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer GY { float gy[]; };
layout(std430, binding = 2) buffer O { float o[]; };
layout(push_constant) uniform P { uint rows, c, rms, has_w, has_b, x0, gy0, o0; } p;
shared vec2 part[8][32];
void main() {
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint col = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 32u + lx;
    vec2 acc = vec2(0.0);
    if (col < p.c) {
        for (uint r = ly; r < p.rows; r += 8u) {
            uint at = r * p.c;
            float rstd = o[p.o0 + at];
            float mean = p.rms != 0u ? 0.0 : p.c >= 2u ? o[p.o0 + at + 1u] : x[p.x0 + at];
            float g = gy[p.gy0 + at + col];
            acc += vec2(g * (x[p.x0 + at + col] - mean) * rstd, g);
        }
    }
    part[ly][lx] = acc;
    barrier();
    if (ly != 0u || col >= p.c) return;
    for (uint k = 1u; k < 8u; k++) acc += part[k][lx];
    uint at = p.o0 + p.rows * p.c + col;
    if (p.has_w != 0u) o[at] = acc.x, at += p.c;
    if (p.has_b != 0u) o[at] = acc.y;
}
