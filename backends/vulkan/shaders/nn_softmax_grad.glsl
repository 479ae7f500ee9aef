// nn_softmax_grad.glsl — SOFTMAX_GRAD over rows of n (f32 contiguous),
// after common.glsl; rows as NN_T elements (nn_rows.glsl). Over the
// visible columns softmax gx = y * (gy - sum(gy * y)), log_softmax
// (SM_LOG) gx = gy - exp(y) * sum(gy); hidden columns get 0. Push
// constants count NN_T elements: nq per row, the bases.
#include "nn_rows.glsl"
layout(std430, binding = 0) readonly buffer Y { NN_T y[]; };
layout(std430, binding = 1) readonly buffer GY { NN_T gy[]; };
layout(std430, binding = 2) writeonly buffer GX { NN_T gx[]; };
layout(push_constant) uniform P { uint rows, n, mrows, causal, w, nq, y0, gy0, gx0; } p;
void main() {
    uint row = nn_row(p.w);
    bool ok = row < p.rows;
    uint nv = ok ? nn_visible(row, p.n, p.mrows, p.causal) : 0u;
    uint qv = (nv + NN_VW - 1u) / NN_VW;
    uint yr = p.y0 + row * p.nq, gr = p.gy0 + row * p.nq;
    float s = 0.0;
    for (uint j = nn_lane; j < qv; j += nn_W) {
#ifdef SM_LOG
        s += nn_hsum(mix(NN_T0, gy[gr + j], nn_vis(j, nv)));
#else
        s += nn_hsum(mix(NN_T0, gy[gr + j] * y[yr + j], nn_vis(j, nv)));
#endif
    }
    s = nn_sum(s);
    if (!ok) return;
    uint xr = p.gx0 + row * p.nq;
    for (uint j = nn_lane; j < qv; j += nn_W) {
#ifdef SM_LOG
        NN_T v = gy[gr + j] - exp(y[yr + j]) * s;
#else
        NN_T v = y[yr + j] * (gy[gr + j] - s);
#endif
        gx[xr + j] = mix(NN_T0, v, nn_vis(j, nv));
    }
    for (uint j = qv + nn_lane; j < p.nq; j += nn_W) gx[xr + j] = NN_T0;
}
