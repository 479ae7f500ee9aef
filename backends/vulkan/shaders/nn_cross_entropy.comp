#version 450
#include "common.glsl"
#include "nn_rows.glsl"
// cross_entropy forward in one workgroup (the loss is one number and there
// is no scratch for per-row partials): its groups of W take rows in turn,
// each row's loss m + log(sum exp(x - m)) - x[label] is added by the
// group's first lane, and the sums and counts reduce at the end. A row
// whose label is ignore_index is skipped; so is a label outside [0, c),
// which fails the CPU compute (a shader cannot) and is never read here.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer L { int lab[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, c, wd; int ignore; uint x0, l0, y0; } p;
void main() {
    nn_row(p.wd);
    uint groups = 256u / p.wd, g = gl_LocalInvocationID.x / p.wd;
    float total = 0.0, count = 0.0;
    for (uint r0 = 0u; r0 < p.rows; r0 += groups) {
        uint row = r0 + g;
        int l = row < p.rows ? lab[p.l0 + row] : p.ignore;
        bool kept = l != p.ignore && l >= 0 && uint(l) < p.c;
        uint cl = kept ? p.c : 0u, xr = p.x0 + row * p.c;
        float m, s;
        NN_LANE_SOFTMAX(x, xr, cl, m, s)
        vec2 ms = nn_softmax_combine(m, s);
        if (kept && nn_lane == 0u) {
            total += ms.x + log(ms.y) - x[xr + uint(l)];
            count += 1.0;
        }
    }
    // the groups' first lanes' sums, added up by invocation 0
    nn_publish(vec2(total, count));
    if (nn_tid != 0u) return;
    vec2 tc = vec2(0.0);
    for (uint k = 0u; k < 256u; k += p.wd) tc += nn_red[k];
    y[p.y0] = tc.y > 0.0 ? tc.x / tc.y : 0.0;
}
