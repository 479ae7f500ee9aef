#version 450
#include "common.glsl"
#include "nn_rows.glsl"
// SOFTMAX_GRAD over rows of n (f32 contiguous): over the visible columns
// softmax gx = y * (gy - sum(gy * y)), log_softmax gx = gy - exp(y) * sum(gy);
// hidden columns get 0.
layout(std430, binding = 0) readonly buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer GY { float gy[]; };
layout(std430, binding = 2) writeonly buffer GX { float gx[]; };
layout(push_constant) uniform P { uint rows, n, mrows, causal, log_in, w, y0, gy0, gx0; } p;
void main() {
    uint row = nn_row(p.w);
    bool ok = row < p.rows;
    uint nv = ok ? nn_visible(row, p.n, p.mrows, p.causal) : 0u;
    uint yr = p.y0 + row * p.n, gr = p.gy0 + row * p.n;
    float s = 0.0;
    if (p.log_in != 0u)
        for (uint j = nn_lane; j < nv; j += p.w) s += gy[gr + j];
    else
        for (uint j = nn_lane; j < nv; j += p.w) s += gy[gr + j] * y[yr + j];
    s = nn_sum(s);
    if (!ok) return;
    uint xr = p.gx0 + row * p.n;
    if (p.log_in != 0u)
        for (uint j = nn_lane; j < nv; j += p.w) gx[xr + j] = gy[gr + j] - exp(y[yr + j]) * s;
    else
        for (uint j = nn_lane; j < nv; j += p.w) gx[xr + j] = y[yr + j] * (gy[gr + j] - s);
    for (uint j = nv + nn_lane; j < p.n; j += p.w) gx[xr + j] = 0.0;
}
