#version 450
#include "common.glsl"
#include "nn_ce_kahan.glsl"
// cross_entropy forward, pass 2 of 2: the mean of the rows' losses over
// the kept rows (0 when there are none) from pass 1's (loss, kept) pairs,
// in one workgroup and a fixed order, so every run gives the same bits
// whatever the device: lane i adds rows i, i + 256, ... with compensation,
// then lane 0 adds the lanes' sums and compensations in lane order. Counts
// are integers, exact.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer R { float part[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows, s0, y0; } p;
shared float s_sum[256], s_err[256];
shared uint s_n[256];
void main() {
    uint i = gl_LocalInvocationID.x, n = 0u;
    nn_ce_acc a = nn_ce_acc(0.0, 0.0);
    for (uint r = i; r < p.rows; r += 256u) {
        nn_ce_add(a, part[p.s0 + 2u * r]);
        n += uint(part[p.s0 + 2u * r + 1u]);
    }
    s_sum[i] = a.sum;
    s_err[i] = a.err;
    s_n[i] = n;
    barrier();
    if (i != 0u) return;
    nn_ce_acc t = nn_ce_acc(0.0, 0.0);
    n = 0u;
    for (uint k = 0u; k < 256u; k++) {
        nn_ce_add(t, s_sum[k]);
        nn_ce_add(t, -s_err[k]);
        n += s_n[k];
    }
    y[p.y0] = n > 0u ? t.sum / float(n) : 0.0;
}
