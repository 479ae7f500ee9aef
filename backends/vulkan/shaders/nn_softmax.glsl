// nn_softmax.glsl — softmax (log_softmax with SM_LOG) over rows of n
// (f32 contiguous), after common.glsl; rows as NN_T elements (vec4 with
// NN_V4, see nn_rows.glsl). The causal mask hides the columns past
// nn_visible(); what it hides is 0 (-inf for log_softmax), and so is a
// row with nothing visible. Push constants count NN_T elements: nq per
// row, bases x0 and y0.
#include "nn_rows.glsl"
layout(std430, binding = 0) readonly buffer X { NN_T x[]; };
#ifdef SM_LOG
layout(std430, binding = 1) writeonly buffer Y { NN_T y[]; };
#else
layout(std430, binding = 1) buffer Y { NN_T y[]; };
#endif
layout(push_constant) uniform P { uint rows, n, mrows, causal, w, nq, x0, y0; } p;

// Element j of the row at xr, its hidden columns -inf.
NN_T sm_load(uint xr, uint j, uint nv) { return mix(NN_T(nn_neg_inf()), x[xr + j], nn_vis(j, nv)); }

void main() {
    uint row = nn_row(p.w);
    bool ok = row < p.rows;
    uint nv = ok ? nn_visible(row, p.n, p.mrows, p.causal) : 0u;
    uint qv = (nv + NN_VW - 1u) / NN_VW; // elements with a visible column
    uint xr = p.x0 + row * p.nq;
    uint yr = p.y0 + row * p.nq;
    float m = nn_neg_inf(), s = 0.0;
    for (uint j = nn_lane; j < qv; j += nn_W) m = max(m, nn_hmax(sm_load(xr, j, nv)));
#ifdef SM_LOG
    if (m > nn_neg_inf())
        for (uint j = nn_lane; j < qv; j += nn_W) s += nn_hsum(exp(sm_load(xr, j, nv) - m));
    vec2 ms = nn_softmax_combine(m, s);
    if (!ok) return;
    float lse = ms.x + log(ms.y);
    for (uint j = nn_lane; j < qv; j += nn_W) y[yr + j] = sm_load(xr, j, nv) - lse;
    for (uint j = qv + nn_lane; j < p.nq; j += nn_W) y[yr + j] = NN_T(nn_neg_inf());
#else
    // One exp per element: exp(x - m) for the lane's own maximum m is
    // parked in y (the lane rewrites only its own elements), then scaled
    // by exp(m - M) / S. A lane whose columns are all -inf parks 0.
    float mz = m > nn_neg_inf() ? m : 0.0;
    for (uint j = nn_lane; j < qv; j += nn_W) {
        NN_T e = exp(sm_load(xr, j, nv) - mz);
        s += nn_hsum(e);
        y[yr + j] = e; // qv is 0 past the last row
    }
    vec2 ms = nn_softmax_combine(m, s);
    if (!ok) return;
    float f = exp(m - ms.x) / ms.y;
    for (uint j = nn_lane; j < qv; j += nn_W) y[yr + j] *= f;
    for (uint j = qv + nn_lane; j < p.nq; j += nn_W) y[yr + j] = NN_T0;
#endif
}
