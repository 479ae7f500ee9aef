#version 450
#include "common.glsl"
// attention backward, pass 1 of 3: delta_i = sum(dO_i * O_i) per query
// row, parked in the first entries of the dq region (rows <= B*Hq*T*D);
// pass 2 (dk, dv) reads it, pass 3 (dq) recomputes it and overwrites it.
// A 1-D grid over the query rows (HD and VW are not needed here).
layout(std430, binding = 0) readonly buffer F { float f[]; };   // forward O | L
layout(std430, binding = 1) readonly buffer DO { float dout[]; };
layout(std430, binding = 2) writeonly buffer G { float g[]; };  // dq | dk | dv
#include "attn_common.glsl"
void main() {
    uint row = kiln_gid();  // 1-D over the query rows
    if (row >= p.rows) return;
    float s = 0.0;
    for (uint e = 0u; e < p.dv; e++) s += dout[p.do0 + row * p.dv + e] * f[p.o0 + row * p.dv + e];
    g[p.dq0 + row] = s;
}
