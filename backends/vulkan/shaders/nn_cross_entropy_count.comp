#version 450
#include "common.glsl"
// cross_entropy backward, pass 1 of 2: the number of kept rows (label not
// ignore_index and inside [0, c)), in one workgroup, into a scratch uint
// that pass 2 (nn_cross_entropy_grad.comp) reads. Integers: exact, and
// the same whatever the order.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { int lab[]; };
layout(std430, binding = 1) writeonly buffer N { uint cnt[]; };
layout(push_constant) uniform P { uint rows, c; int ignore; uint l0, n0; } p;
shared uint s_n[256];
void main() {
    uint i = gl_LocalInvocationID.x, n = 0u;
    for (uint r = i; r < p.rows; r += 256u) {
        int l = lab[p.l0 + r];
        if (l != p.ignore && l >= 0 && uint(l) < p.c) n++;
    }
    s_n[i] = n;
    barrier();
    if (i != 0u) return;
    for (uint k = 1u; k < 256u; k++) n += s_n[k];
    cnt[p.n0] = n;
}
