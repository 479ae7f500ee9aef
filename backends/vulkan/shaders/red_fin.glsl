// red_fin.glsl — the second pass of a split reduction: 2^lgl lanes per
// output each merge every 2^lgl-th of its S partials (red_fast_io.glsl's
// planes), then lane 0 merges the lanes through shared memory.
#if defined(RED_OUT16)
#extension GL_EXT_shader_16bit_storage : require
#ifndef RED_BF16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#endif
#include "ew_half.glsl"
#include "red_fast.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Z { uint z[]; };
#include "red_fast_y.glsl"
layout(push_constant) uniform P { uint nout, S, y0, lgl; } p;
shared float sv[256], sc[256];
shared uint si[256];
red_acc red_part(uint q, uint P) { return red_acc(uintBitsToFloat(z[q]), uintBitsToFloat(z[P + q]), z[2u * P + q]); }
void main() {
    uint g = kiln_gid(), lid = gl_LocalInvocationID.x;
    uint L = 1u << p.lgl, lane = g & (L - 1u), o = g >> p.lgl, P = p.S * p.nout;
    bool live = o < p.nout && lane < p.S;
    red_acc a = live ? red_part(lane * p.nout + o, P) : red_empty();
    for (uint s = lane + L; live && s < p.S; s += L) a = red_merge(a, red_part(s * p.nout + o, P));
    if (p.lgl != 0u) {
        sv[lid] = a.v;
        sc[lid] = a.c;
        si[lid] = a.i;
        barrier();
        if (lane != 0u) return;
        for (uint j = 1u; j < L && j < p.S; j++) a = red_merge(a, red_acc(sv[lid + j], sc[lid + j], si[lid + j]));
    }
    if (o < p.nout) red_st(p.y0 + o, red_value(a));
}
