// nn_norm.glsl — layer_norm (rms_norm with RMS) over rows of c (f32
// contiguous), after common.glsl; rows as NN_T elements (nn_rows.glsl):
// y = (x - mean) * rstd [* w] [+ b]; absent w/b are bound to x and unread.
// Push constants count NN_T elements: nq per row, the bases.
#include "nn_rows.glsl"
layout(std430, binding = 0) readonly buffer X { NN_T x[]; };
layout(std430, binding = 1) readonly buffer W { NN_T w[]; };
layout(std430, binding = 2) readonly buffer B { NN_T b[]; };
layout(std430, binding = 3) writeonly buffer Y { NN_T y[]; };
layout(push_constant) uniform P { uint rows, c, has_w, has_b, wd, nq; float eps; uint x0, w0, b0, y0; } p;
#include "nn_norm_stats.glsl"
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    uint xr = p.x0 + row * p.nq;
    float mean, rstd;
    nn_norm_stats(xr, ok, p.c, p.nq, p.eps, mean, rstd);
    if (!ok) return;
    uint yr = p.y0 + row * p.nq;
    if (p.has_w != 0u && p.has_b != 0u)
        for (uint j = nn_lane; j < p.nq; j += nn_W) y[yr + j] = (x[xr + j] - mean) * rstd * w[p.w0 + j] + b[p.b0 + j];
    else if (p.has_w != 0u)
        for (uint j = nn_lane; j < p.nq; j += nn_W) y[yr + j] = (x[xr + j] - mean) * rstd * w[p.w0 + j];
    else if (p.has_b != 0u)
        for (uint j = nn_lane; j < p.nq; j += nn_W) y[yr + j] = (x[xr + j] - mean) * rstd + b[p.b0 + j];
    else
        for (uint j = nn_lane; j < p.nq; j += nn_W) y[yr + j] = (x[xr + j] - mean) * rstd;
}
