// opt_galore_adam8.glsl — 8-bit GaLore's Adam on the low-rank gradient
// (backends/cpu/optim_galore.c, lowrank_adam8), in place: R becomes
// N = m / (sqrt(v) + eps sqrt(1 - beta2^t)) (bitsandbytes' form), the
// moments dequantized, updated and requantized per block of 256 with the
// CPU's coding (opt_q8.glsl, Q8_STATES=2); non-finite elements of R are skipped (state
// kept, N 0). One workgroup per block. Included after opt_exact.glsl.
layout(std430, binding = 0) buffer R { float low[]; };
layout(std430, binding = 1) buffer MQ { uint mq[]; };
layout(std430, binding = 2) buffer VQ { uint vq[]; };
layout(std430, binding = 3) buffer A { float absmax[]; }; // [2, nb]: m's, then v's
layout(std430, binding = 4) readonly buffer Maps { float maps[]; };
layout(std430, binding = 5) readonly buffer H { float hyper[]; };
layout(push_constant) uniform P { uint n, r0, mq0, vq0, a0, nb, mp0, h0; } pc;
shared float s_eps;
void main() {
    uint t = uint(hyper[pc.h0 + 5u]) * 65536u + uint(hyper[pc.h0 + 6u]); // the step number (optim/optim.c)
    uint l = gl_LocalInvocationIndex;
    float b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], eps = hyper[pc.h0 + 3u];
    if (l == 0u) s_eps = ff_mul(vec2(eps, 0.0), ff_sqrt(ff_sub_from(1.0, ff_pow(b2, t)))).x;
    q8_maps(l, maps[pc.mp0 + l], maps[pc.mp0 + 256u + l]);
    barrier();
    q8_thresholds(l);
    uint i = kiln_gid(), blk = i >> 8;
    bool live = i < pc.n;
    precise float mi = 0.0, vi = 0.0;
    if (live) {
        mi = s_map[byte_of(mq[pc.mq0 + (i >> 2)], i)] * absmax[pc.a0 + blk];
        vi = s_map[256u + byte_of(vq[pc.vq0 + (i >> 2)], i)] * absmax[pc.a0 + pc.nb + blk];
        precise float g = low[pc.r0 + i], nv = 0.0;
        if ((floatBitsToUint(g) & 0x7f800000u) != 0x7f800000u) { // finite
            precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2;
            mi = mi * b1 + g * one_b1;
            vi = vi * b2 + one_b2 * g * g;
            precise float denom = sqrt_cr(vi) + s_eps;
            nv = div_cr(mi, denom);
        }
        low[pc.r0 + i] = nv;
    }
    float am[2] = q8_requantize(l, float[2](mi, vi), uint[2](0u, 256u));
    if (l == 0u && live) {
        absmax[pc.a0 + blk] = am[0];
        absmax[pc.a0 + pc.nb + blk] = am[1];
    }
    uint e0 = blk * 256u;
    if (l < 64u && e0 + 4u * l < pc.n) {
        mq[pc.mq0 + blk * 64u + l] = q8_word(0u, l, e0, pc.n);
        vq[pc.vq0 + blk * 64u + l] = q8_word(1u, l, e0, pc.n);
    }
}
