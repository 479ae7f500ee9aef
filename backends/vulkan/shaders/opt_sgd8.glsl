// opt_sgd8.glsl — the 8-bit SGD-with-momentum step (optim/opt8bit.c), in
// place, one workgroup per block of 256 elements, giving the CPU kernel's
// bits (backends/cpu/optim_8bit.c): dequantize the momentum buffer (signed
// map), update as opt_sgd.glsl with momentum (weight decay, dampening,
// nesterov; the first step stores g itself; elements with a non-finite
// gradient keep p and the buffer), requantize (opt_q8.glsl). Only + - and
// *, kept unfused by `precise`. Included after opt_exact.glsl and
// opt_q8.glsl (Q8_STATES=1).
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
layout(std430, binding = 2) buffer BQ { uint bq[]; };
layout(std430, binding = 3) buffer BA { float ba[]; };
layout(std430, binding = 4) readonly buffer Maps { float maps[]; };
layout(std430, binding = 5) readonly buffer H { float hyper[]; };
layout(push_constant) uniform P { uint n, p0, g0, bq0, ba0, mp0, h0, nesterov, first; } pc;

void main() {
    uint l = gl_LocalInvocationIndex;
    float lr = hyper[pc.h0], mom = hyper[pc.h0 + 1u], wd = hyper[pc.h0 + 3u];
    precise float keep = 1.0 - hyper[pc.h0 + 2u]; // the CPU's (float)(1.0 - (double)d): the same bits
    q8_maps(l, maps[pc.mp0 + l], maps[pc.mp0 + 256u + l]);
    barrier();
    q8_thresholds(l);
    uint i = kiln_gid(), blk = i >> 8;
    bool live = i < pc.n;
    precise float bi = 0.0;
    if (live) {
        bi = s_map[byte_of(bq[pc.bq0 + (i >> 2)], i)] * ba[pc.ba0 + blk];
        precise float g = grad[pc.g0 + i];
        if ((floatBitsToUint(g) & 0x7f800000u) != 0x7f800000u) { // finite
            precise float p = prm[pc.p0 + i];
            if (wd != 0.0) g = g + wd * p;
            bi = pc.first != 0u ? g : mom * bi + keep * g;
            g = pc.nesterov != 0u ? g + mom * bi : bi;
            precise float np = p - lr * g;
            prm[pc.p0 + i] = np;
        }
    }
    float am[1] = q8_requantize(l, float[1](bi), uint[1](0u));
    if (l == 0u && live) ba[pc.ba0 + blk] = am[0];
    if (l < 64u && blk * 256u + 4u * l < pc.n) bq[pc.bq0 + blk * 64u + l] = q8_word(0u, l, blk * 256u, pc.n);
}
