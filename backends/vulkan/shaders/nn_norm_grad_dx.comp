#version 450
#include "common.glsl"
#include "nn_rows.glsl"
// Norm backward, pass 3 of 3: with xhat = (x - mean) * rstd and
// g = gy [* w], per row dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// (rms_norm: no mean(g) term). The row statistics parked in dx by pass 1
// are read before the reduction's barriers and overwritten after them.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer GY { float gy[]; };
layout(std430, binding = 3) buffer O { float o[]; };
layout(push_constant) uniform P { uint rows, c, rms, has_w, wd, x0, w0, gy0, o0; } p;
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    uint at = row * p.c, cl = ok ? p.c : 0u;
    float rstd = 0.0, mean = 0.0;
    if (ok) {
        rstd = o[p.o0 + at];
        mean = p.rms != 0u ? 0.0 : p.c >= 2u ? o[p.o0 + at + 1u] : x[p.x0 + at];
    }
    memoryBarrierBuffer(); // with the reduction's barrier: the reads above precede the stores below
    vec2 s = vec2(0.0);
    for (uint j = nn_lane; j < cl; j += p.wd) {
        float g = gy[p.gy0 + at + j];
        if (p.has_w != 0u) g *= w[p.w0 + j];
        s += vec2(g, g * (x[p.x0 + at + j] - mean) * rstd);
    }
    s = nn_sum2(s);
    if (!ok) return;
    float ca = p.rms != 0u ? 0.0 : s.x / float(p.c), cb = s.y / float(p.c);
    for (uint j = nn_lane; j < p.c; j += p.wd) {
        float g = gy[p.gy0 + at + j];
        if (p.has_w != 0u) g *= w[p.w0 + j];
        float xh = (x[p.x0 + at + j] - mean) * rstd;
        o[p.o0 + at + j] = rstd * (g - ca - xh * cb);
    }
}
