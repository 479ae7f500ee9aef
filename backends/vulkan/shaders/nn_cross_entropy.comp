#version 450
#include "common.glsl"
#include "nn_rows.glsl"
#include "nn_ce_rows.glsl"
// cross_entropy forward, pass 1 of 2: a group of W lanes per row, rows in
// parallel over as many workgroups as they fill; the group's first lane
// writes the row's (loss, kept) pair to scratch: (m + log(sum exp(x - m))
// - x[label], 1), or (0, 0) when the label is ignore_index or outside
// [0, c) (which fails the CPU compute; a shader cannot, so the row counts
// as ignored and its label is never read). nn_ce_sum.comp adds them up.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer L { int lab[]; };
layout(std430, binding = 2) writeonly buffer R { float part[]; };
layout(push_constant) uniform P { uint rows, c, wd; int ignore; uint x0, l0, s0; } p;
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    int l = ok ? lab[p.l0 + row] : p.ignore;
    bool kept = l != p.ignore && l >= 0 && uint(l) < p.c;
    uint cl = kept ? p.c : 0u, xr = p.x0 + row * p.c;
    float m, s;
    NN_LANE_SOFTMAX(x, xr, cl, m, s)
    vec2 ms = nn_ce_combine(m, s);
    if (!ok || nn_lane != 0u) return;
    float loss = kept ? ms.x + log(ms.y) - x[xr + uint(l)] : 0.0;
    part[p.s0 + 2u * row] = loss;
    part[p.s0 + 2u * row + 1u] = kept ? 1.0 : 0.0;
}
