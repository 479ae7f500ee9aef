// opt_adam8.glsl — the 8-bit Adam/AdamW step (optim/opt8bit.c), in place,
// one workgroup per block of 256 elements, giving the CPU kernel's bits
// (backends/cpu/optim_8bit.c): dequantize, update as opt_adam.glsl
// (skipping non-finite gradients), requantize (opt_q8.glsl, the signed map
// for m, the unsigned one for v). Included after opt_exact.glsl and
// opt_q8.glsl (Q8_STATES=2).
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
layout(std430, binding = 2) buffer MQ { uint mq[]; };
layout(std430, binding = 3) buffer MA { float ma[]; };
layout(std430, binding = 4) buffer VQ { uint vq[]; };
layout(std430, binding = 5) buffer VA { float va[]; };
layout(std430, binding = 6) readonly buffer Maps { float maps[]; };
layout(std430, binding = 7) readonly buffer H { float hyper[]; };
// hyper: lr, beta1, beta2, eps, weight_decay, then the step number t as
// opt_adam.glsl reads it
layout(push_constant) uniform P { uint n, p0, g0, mq0, ma0, vq0, va0, mp0, h0, decoupled; } pc;
shared float s_decay, s_neg_step, s_bc2s;

void main() {
    uint l = gl_LocalInvocationIndex;
    float lr = hyper[pc.h0], b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], eps = hyper[pc.h0 + 3u],
          wd = hyper[pc.h0 + 4u];
    uint t = uint(hyper[pc.h0 + 5u]) * 65536u + uint(hyper[pc.h0 + 6u]);
    q8_maps(l, maps[pc.mp0 + l], maps[pc.mp0 + 256u + l]);
    if (l == 0u) {
        s_decay = pc.decoupled != 0u ? ff_sub_from(1.0, ff_two_prod(lr, wd)).x : 1.0; // 1 - lr wd
        s_neg_step = -ff_div(lr, ff_sub_from(1.0, ff_pow(b1, t))).x;               // -lr / (1 - b1^t)
        s_bc2s = ff_sqrt(ff_sub_from(1.0, ff_pow(b2, t))).x;                       // sqrt(1 - b2^t)
    }
    barrier();
    q8_thresholds(l);
    uint i = kiln_gid(), blk = i >> 8;
    bool live = i < pc.n;
    precise float mi = 0.0, vi = 0.0;
    if (live) {
        mi = s_map[byte_of(mq[pc.mq0 + (i >> 2)], i)] * ma[pc.ma0 + blk];
        vi = s_map[256u + byte_of(vq[pc.vq0 + (i >> 2)], i)] * va[pc.va0 + blk];
        precise float g = grad[pc.g0 + i];
        if ((floatBitsToUint(g) & 0x7f800000u) != 0x7f800000u) { // finite
            bool l2 = pc.decoupled == 0u && wd != 0.0;
            precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2;
            precise float pi = prm[pc.p0 + i] * s_decay;
            if (l2) g = g + wd * pi;
            mi = mi * b1 + g * one_b1;
            vi = vi * b2 + one_b2 * g * g;
            precise float denom = div_cr(sqrt_cr(vi), s_bc2s) + eps;
            precise float np = pi + div_cr(s_neg_step * mi, denom);
            prm[pc.p0 + i] = np;
        }
    }
    float am[2] = q8_requantize(l, float[2](mi, vi), uint[2](0u, 256u));
    if (l == 0u && live) {
        ma[pc.ma0 + blk] = am[0];
        va[pc.va0 + blk] = am[1];
    }
    if (l < 64u && blk * 256u + 4u * l < pc.n) {
        mq[pc.mq0 + blk * 64u + l] = q8_word(0u, l, blk * 256u, pc.n);
        vq[pc.vq0 + blk * 64u + l] = q8_word(1u, l, blk * 256u, pc.n);
    }
}
