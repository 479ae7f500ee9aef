#version 450
#include "common.glsl"
#include "ew_math.glsl"
// quant_qx: the activations of QMATMUL's integer products (quant_qmv.glsl,
// quant_qmv_32.glsl) as the CPU's kiln__qmm_quantize_x (its Q8_0) makes
// them, bit for bit: per block of 32 of x, d = amax / 127, the codes
// round(x / d) (1 / d rounded, then a product) four to a word, and d
// rounded to f16; with p.with_s, Q8_1's s = f16(sum(q) d) too. The divisions are
// ew_div's (Vulkan lets the device's be 2.5 ulp off) and roundf's halves
// away from zero are done by hand (GLSL's round() may take either way).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint xq[]; };
layout(std430, binding = 2) writeonly buffer D { float dx[]; };
layout(std430, binding = 3) writeonly buffer S { float sx[]; };
layout(push_constant) uniform P { uint nblk, x0, q0, d0, s0, with_s; } p;

// kiln__f32_to_f16 for f >= 0 (an amax / 127, a |sum(q) d|, or inf): ties to even
uint f16_bits(float f) {
    uint u = floatBitsToUint(f), e = u >> 23u, m = u & 0x7fffffu;
    int he = int(e) - 127 + 15;
    if (e == 0xffu || he >= 31) return 0x7c00u;
    if (he <= 0) {
        if (he < -10) return 0u;
        m |= 0x800000u;
        uint shift = uint(14 - he), hm = m >> shift, rem = m & ((1u << shift) - 1u), hf = 1u << (shift - 1u);
        if (rem > hf || (rem == hf && (hm & 1u) != 0u)) hm++;
        return hm;
    }
    uint hm = m >> 13u, rem = m & 0x1fffu, h = uint(he) << 10u | hm;
    if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u) != 0u)) h++; // may carry into the exponent: correct
    return h;
}
// and back (h without its sign)
float f16_value(uint h) {
    uint e = h >> 10u, m = h & 0x3ffu;
    if (e == 0x1fu) return uintBitsToFloat(0x7f800000u | m << 13u);
    return e != 0u ? uintBitsToFloat((e + 112u) << 23u | m << 13u) : float(m) * uintBitsToFloat(0x33800000u);
}

// roundf: halves away from zero (v - trunc(v) is exact)
float round_away(float v) {
    float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

void main() {
    uint b = kiln_gid();
    if (b >= p.nblk) return;
    uint x0 = p.x0 + 32u * b;
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        float v = abs(x[x0 + j]);
        if (v > amax) amax = v; // fmaxf's: a NaN is passed over
    }
    float d = ew_div(amax, 127.0), id = d != 0.0 ? ew_div(1.0, d) : 0.0;
    dx[p.d0 + b] = f16_value(f16_bits(d));
    int sum = 0;
    for (uint w = 0u; w < 8u; w++) {
        uint packed = 0u;
        for (uint j = 0u; j < 4u; j++) {
            precise float v = x[x0 + 4u * w + j] * id;
            int q = int(round_away(v));
            sum += q;
            packed |= (uint(q) & 0xffu) << (8u * j);
        }
        xq[p.q0 + 8u * b + w] = packed;
    }
    if (p.with_s != 0u) {
        precise float s = float(sum) * d;
        float h = f16_value(f16_bits(abs(s)));
        sx[p.s0 + b] = (floatBitsToUint(s) >> 31u) != 0u ? -h : h; // -0 kept
    }
}
