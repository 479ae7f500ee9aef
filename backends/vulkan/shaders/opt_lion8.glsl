// opt_lion8.glsl — the 8-bit Lion step (optim/opt8bit.c), in place, one
// workgroup per block of 256 elements, giving the CPU kernel's bits
// (backends/cpu/optim_8bit.c): dequantize m (signed map), update as
// opt_lion.glsl (1 - lr wd in float-float, the CPU's double rounded once;
// elements with a non-finite gradient keep p and m), requantize
// (opt_q8.glsl). Included after opt_exact.glsl and opt_q8.glsl
// (Q8_STATES=1).
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
layout(std430, binding = 2) buffer MQ { uint mq[]; };
layout(std430, binding = 3) buffer MA { float ma[]; };
layout(std430, binding = 4) readonly buffer Maps { float maps[]; };
layout(std430, binding = 5) readonly buffer H { float hyper[]; };
layout(push_constant) uniform P { uint n, p0, g0, mq0, ma0, mp0, h0; } pc;
shared float s_decay;

void main() {
    uint l = gl_LocalInvocationIndex;
    float lr = hyper[pc.h0], b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], wd = hyper[pc.h0 + 3u];
    q8_maps(l, maps[pc.mp0 + l], maps[pc.mp0 + 256u + l]);
    if (l == 0u) s_decay = ff_sub_from(1.0, ff_two_prod(lr, wd)).x; // 1 - lr wd
    barrier();
    q8_thresholds(l);
    uint i = kiln_gid(), blk = i >> 8;
    bool live = i < pc.n;
    precise float mi = 0.0;
    if (live) {
        mi = s_map[byte_of(mq[pc.mq0 + (i >> 2)], i)] * ma[pc.ma0 + blk];
        float g = grad[pc.g0 + i];
        if ((floatBitsToUint(g) & 0x7f800000u) != 0x7f800000u) { // finite
            precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2; // the CPU's (float)(1.0 - (double)b)
            precise float pi = prm[pc.p0 + i] * s_decay;
            precise float c = mi * b1 + g * one_b1;
            precise float sgn = float(c > 0.0) - float(c < 0.0);
            precise float np = pi + (-lr) * sgn;
            prm[pc.p0 + i] = np;
            mi = mi * b2 + g * one_b2;
        }
    }
    float am[1] = q8_requantize(l, float[1](mi), uint[1](0u));
    if (l == 0u && live) ma[pc.ma0 + blk] = am[0];
    if (l < 64u && blk * 256u + 4u * l < pc.n) mq[pc.mq0 + blk * 64u + l] = q8_word(0u, l, blk * 256u, pc.n);
}
