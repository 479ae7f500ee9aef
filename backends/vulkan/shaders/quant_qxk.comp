#version 450
#include "common.glsl"
#include "ew_math.glsl"
// quant_qxk: the activations of QMATMUL's K products (quant_qmv_k.glsl) as
// Q8_K, kiln__quantize_q8_K_ref's codes and scale bit for bit: per block of
// 256 of x, max the first x of largest magnitude, iscale = -127 / max,
// the codes nearest(iscale x) (ties to even) capped at 127, four to a
// word, d = 1 / iscale. The divisions are ew_div's (Vulkan lets the
// device's be 2.5 ulp off), the rounding is done by hand.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint xq[]; };
layout(std430, binding = 2) writeonly buffer D { float dx[]; };
layout(push_constant) uniform P { uint nblk, x0, q0, d0; } p;

// the nearest integer, ties to even (v - trunc(v) is exact)
int nearest_even(float v) {
    float t = trunc(v), f = abs(v - t);
    bool up = f > 0.5 || (f == 0.5 && mod(t, 2.0) != 0.0);
    return int(up ? t + sign(v) : t);
}

void main() {
    uint b = kiln_gid();
    if (b >= p.nblk) return;
    uint x0 = p.x0 + 256u * b;
    float amax = 0.0, mx = 0.0;
    for (uint j = 0u; j < 256u; j++) {
        float v = x[x0 + j];
        if (abs(v) > amax) amax = abs(v), mx = v;
    }
    float iscale = amax != 0.0 ? ew_div(-127.0, mx) : 0.0;
    for (uint w = 0u; w < 64u; w++) {
        uint packed = 0u;
        for (uint j = 0u; j < 4u; j++) {
            precise float v = iscale * x[x0 + 4u * w + j];
            packed |= (uint(min(nearest_even(v), 127)) & 0xffu) << (8u * j);
        }
        xq[p.q0 + 64u * b + w] = packed;
    }
    dx[p.d0 + b] = amax != 0.0 ? ew_div(1.0, iscale) : 0.0;
}
