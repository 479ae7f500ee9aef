// nn_softmax_grad.glsl — SOFTMAX_GRAD over rows of n (f32 contiguous),
// after common.glsl; rows as NN_T elements (nn_rows.glsl). Softmax: gx =
// y * (gy - sum(gy * y)) over the visible columns, 0 at hidden ones.
// Log_softmax (SM_LOG): gx = gy - exp(y) * sum(gy), the sum over the
// whole row, and gy itself at hidden columns (y = -inf there: the rule of
// a log_softmax of an input of -inf, as torch's). Push constants count
// NN_T elements: nq per row, the bases.
#include "nn_rows.glsl"
layout(std430, binding = 0) readonly buffer Y { NN_T y[]; };
layout(std430, binding = 1) readonly buffer GY { NN_T gy[]; };
layout(std430, binding = 2) writeonly buffer GX { NN_T gx[]; };
layout(push_constant) uniform P { uint rows, n, mrows, causal, w, nq, y0, gy0, gx0; } p;
void main() {
    uint row = nn_row(p.w);
    bool ok = row < p.rows;
    uint nv = ok ? nn_visible(row, p.n, p.mrows, p.causal) : 0u;
    uint yr = p.y0 + row * p.nq, gr = p.gy0 + row * p.nq, xr = p.gx0 + row * p.nq;
    float s = 0.0;
#ifdef SM_LOG
    for (uint j = nn_lane; ok && j < p.nq; j += nn_W) s += nn_hsum(gy[gr + j]);
    s = nn_sum(s);
    if (!ok) return;
    for (uint j = nn_lane; j < p.nq; j += nn_W)
        gx[xr + j] = mix(gy[gr + j], gy[gr + j] - exp(y[yr + j]) * s, nn_vis(j, nv));
#else
    uint qv = (nv + NN_VW - 1u) / NN_VW;
    for (uint j = nn_lane; j < qv; j += nn_W) s += nn_hsum(mix(NN_T0, gy[gr + j] * y[yr + j], nn_vis(j, nv)));
    s = nn_sum(s);
    if (!ok) return;
    for (uint j = nn_lane; j < qv; j += nn_W) gx[xr + j] = mix(NN_T0, y[yr + j] * (gy[gr + j] - s), nn_vis(j, nv));
    for (uint j = qv + nn_lane; j < p.nq; j += nn_W) gx[xr + j] = NN_T0;
#endif
}
