#version 450
#include "common.glsl"
#include "nn_rows.glsl"
// layer_norm / rms_norm over rows of c (f32 contiguous):
// y = (x - mean) * rstd [* w] [+ b]; absent w/b are bound to x and unread.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, c, rms, has_w, has_b, wd; float eps; uint x0, w0, b0, y0; } p;
#include "nn_norm_stats.glsl"
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    uint xr = p.x0 + row * p.c;
    float mean, rstd;
    nn_norm_stats(xr, ok, p.c, p.rms != 0u, p.eps, mean, rstd);
    if (!ok) return;
    uint yr = p.y0 + row * p.c;
    for (uint j = nn_lane; j < p.c; j += p.wd) {
        float v = (x[xr + j] - mean) * rstd;
        if (p.has_w != 0u) v *= w[p.w0 + j];
        if (p.has_b != 0u) v += b[p.b0 + j];
        y[yr + j] = v;
    }
}
