// nn_norm_grad_dx.glsl — norm backward, pass 3 of 3 (after common.glsl;
// RMS for rms_norm, rows as NN_T elements, nn_rows.glsl): with
// xhat = (x - mean) * rstd and g = gy [* w], per row
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (rms_norm: no mean(g)
// term). The row statistics parked in dx by pass 1 are read before the
// reduction's barrier and overwritten after it (with one lane per row,
// the lane itself reads them before it writes).
#include "nn_rows.glsl"
layout(std430, binding = 0) readonly buffer X { NN_T x[]; };
layout(std430, binding = 1) readonly buffer W { NN_T w[]; };
layout(std430, binding = 2) readonly buffer GY { NN_T gy[]; };
layout(std430, binding = 3) buffer O { NN_T o[]; };
layout(push_constant) uniform P { uint rows, c, has_w, wd, nq, x0, w0, gy0, o0; } p;
#include "nn_norm_parked.glsl"
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    uint at = row * p.nq, ql = ok ? p.nq : 0u;
    float rstd = 0.0, mean = 0.0;
    if (ok) nn_norm_parked(at, rstd, mean);
    memoryBarrierBuffer(); // with the reduction's barrier: the reads above precede the stores below
    vec2 s = vec2(0.0);
    if (p.has_w != 0u)
        for (uint j = nn_lane; j < ql; j += nn_W) {
            NN_T g = gy[p.gy0 + at + j] * w[p.w0 + j];
            s += vec2(nn_hsum(g), nn_hsum(g * (x[p.x0 + at + j] - mean))) ;
        }
    else
        for (uint j = nn_lane; j < ql; j += nn_W) {
            NN_T g = gy[p.gy0 + at + j];
            s += vec2(nn_hsum(g), nn_hsum(g * (x[p.x0 + at + j] - mean)));
        }
    s = nn_sum2(s);
    if (!ok) return;
#ifdef RMS
    float ca = 0.0;
#else
    float ca = s.x / float(p.c);
#endif
    float cb = s.y * rstd / float(p.c);
    if (p.has_w != 0u)
        for (uint j = nn_lane; j < p.nq; j += nn_W) {
            NN_T g = gy[p.gy0 + at + j] * w[p.w0 + j];
            o[p.o0 + at + j] = rstd * (g - ca - (x[p.x0 + at + j] - mean) * rstd * cb);
        }
    else
        for (uint j = nn_lane; j < p.nq; j += nn_W) {
            NN_T g = gy[p.gy0 + at + j];
            o[p.o0 + at + j] = rstd * (g - ca - (x[p.x0 + at + j] - mean) * rstd * cb);
        }
}
