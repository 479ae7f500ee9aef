// red_fin.glsl — the second pass of a split reduction: one invocation per
// output merges its S partials (red_fast_io.glsl's planes) in split order.
#include "red_fast.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Z { uint z[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint nout, S, y0; } p;
red_acc red_part(uint q, uint P) { return red_acc(uintBitsToFloat(z[q]), uintBitsToFloat(z[P + q]), z[2u * P + q]); }
void main() {
    uint o = kiln_gid();
    if (o >= p.nout) return;
    uint P = p.S * p.nout;
    red_acc a = red_part(o, P);
    for (uint s = 1u; s < p.S; s++) a = red_merge(a, red_part(s * p.nout + o, P));
    y[p.y0 + o] = floatBitsToUint(red_value(a));
}
