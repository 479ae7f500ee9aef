#version 450
#include "common.glsl"
#include "nn_rows.glsl"
// softmax / log_softmax over rows of n, both f32 contiguous; columns the
// causal mask hides are 0 / -inf, and so is a row with nothing visible.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, n, mrows, causal, log_out, w, x0, y0; } p;
void main() {
    uint row = nn_row(p.w);
    bool ok = row < p.rows;
    uint nv = ok ? nn_visible(row, p.n, p.mrows, p.causal) : 0u;
    uint xr = p.x0 + row * p.n;
    float m, s;
    NN_LANE_SOFTMAX(x, xr, nv, m, s)
    vec2 ms = nn_softmax_combine(m, s);
    m = ms.x;
    s = ms.y;
    if (!ok) return;
    uint yr = p.y0 + row * p.n;
    if (p.log_out != 0u) {
        float lse = m + log(s);
        for (uint j = nn_lane; j < nv; j += p.w) y[yr + j] = x[xr + j] - lse;
        for (uint j = nv + nn_lane; j < p.n; j += p.w) y[yr + j] = nn_neg_inf();
    } else {
        float inv = 1.0 / s;
        for (uint j = nn_lane; j < nv; j += p.w) y[yr + j] = exp(x[xr + j] - m) * inv;
        for (uint j = nv + nn_lane; j < p.n; j += p.w) y[yr + j] = 0.0;
    }
}
