#version 450
#include "common.glsl"
#include "nn_rows.glsl"
#include "nn_ce_rows.glsl"
// cross_entropy backward, pass 2 of 2: every row of
// gx = (softmax(x) - one_hot(label)) * gy / count, 0 on rows whose label
// is ignored (or outside [0, c): the CPU fails the compute there); count
// is pass 1's number of kept rows (1 when there are none).
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer L { int lab[]; };
layout(std430, binding = 2) readonly buffer G { float gy[]; };
layout(std430, binding = 3) readonly buffer N { uint cnt[]; };
layout(std430, binding = 4) writeonly buffer GX { float gx[]; };
layout(push_constant) uniform P { uint rows, c, wd; int ignore; uint x0, l0, gy0, n0, gx0; } p;
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    float scale = gy[p.gy0] / float(max(cnt[p.n0], 1u));
    int l = ok ? lab[p.l0 + row] : p.ignore;
    bool kept = l != p.ignore && l >= 0 && uint(l) < p.c;
    uint cl = kept ? p.c : 0u, xr = p.x0 + row * p.c;
    float m, s;
    NN_LANE_SOFTMAX(x, xr, cl, m, s)
    vec2 ms = nn_ce_combine(m, s);
    if (!ok) return;
    uint gr = p.gx0 + row * p.c;
    if (!kept) {
        for (uint j = nn_lane; j < p.c; j += p.wd) gx[gr + j] = 0.0;
        return;
    }
    float lse = ms.x + log(ms.y);
    for (uint j = nn_lane; j < p.c; j += p.wd)
        gx[gr + j] = exp(x[xr + j] - lse) * scale - (j == uint(l) ? scale : 0.0);
}
