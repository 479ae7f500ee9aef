#version 450
#include "common.glsl"
#include "nn_rows.glsl"
// cross_entropy backward, pass 1 of 3: the number of kept rows (label not
// ignore_index and inside [0, c)), in one workgroup, parked as a float in
// gx[0]; pass 2 does every row but row 0 and pass 3 row 0, which reads the
// count before it overwrites it.
layout(std430, binding = 0) readonly buffer L { int lab[]; };
layout(std430, binding = 1) writeonly buffer GX { float gx[]; };
layout(push_constant) uniform P { uint rows, c; int ignore; uint l0, gx0; } p;
void main() {
    nn_row(1u);
    float n = 0.0;
    for (uint r = nn_tid; r < p.rows; r += 256u) {
        int l = lab[p.l0 + r];
        if (l != p.ignore && l >= 0 && uint(l) < p.c) n += 1.0;
    }
    nn_publish(vec2(n, 0.0));
    if (nn_tid != 0u) return;
    for (uint k = 1u; k < 256u; k++) n += nn_red[k].x;
    gx[p.gx0] = n;
}
