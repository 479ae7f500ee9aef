// opt_adam.glsl — the Adam/AdamW step (optim/adam.c), in place, one
// invocation per element, in the CPU kernel's operation order. The
// hyperparameters (lr, beta1, beta2, eps, weight_decay, then the step number
// t as t >> 16 and t & 0xffff) come from the hyper leaf, rewritten before
// every step (not push constants: a recorded command buffer serves every
// step); the scalars the CPU derives from them
// and the step number in double are computed once per workgroup in
// float-float (opt_exact.glsl). AMS (0/1) says whether max_exp_avg_sq is
// bound. Included after opt_exact.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
layout(std430, binding = 2) buffer M { float m[]; };
layout(std430, binding = 3) buffer V { float v[]; };
#if AMS
layout(std430, binding = 4) buffer VM { float vmax[]; };
layout(std430, binding = 5) readonly buffer H { float hyper[]; };
#else
layout(std430, binding = 4) readonly buffer H { float hyper[]; };
#endif
// decoupled: AdamW
layout(push_constant) uniform P { uint n, p0, g0, m0, v0, vm0, h0, decoupled; } pc;
shared float s_decay, s_neg_step, s_bc2s;
void main() {
    float lr = hyper[pc.h0], b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], eps = hyper[pc.h0 + 3u],
          wd = hyper[pc.h0 + 4u];
    uint t = uint(hyper[pc.h0 + 5u]) * 65536u + uint(hyper[pc.h0 + 6u]);
    if (gl_LocalInvocationIndex == 0u) {
        s_decay = pc.decoupled != 0u ? ff_sub_from(1.0, ff_two_prod(lr, wd)).x : 1.0; // 1 - lr wd
        s_neg_step = -ff_div(lr, ff_sub_from(1.0, ff_pow(b1, t))).x;               // -lr / (1 - b1^t)
        s_bc2s = ff_sqrt(ff_sub_from(1.0, ff_pow(b2, t))).x;                       // sqrt(1 - b2^t)
    }
    barrier();
    uint i = kiln_gid();
    if (i >= pc.n) return;
    bool l2 = pc.decoupled == 0u && wd != 0.0;
    precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2; // the CPU's (float)(1.0 - (double)b): the same bits
    precise float pi = prm[pc.p0 + i] * s_decay, g = grad[pc.g0 + i];
    if (l2) g = g + wd * pi;
    precise float mi = m[pc.m0 + i] * b1 + g * one_b1;
    precise float vi = v[pc.v0 + i] * b2 + one_b2 * g * g;
    m[pc.m0 + i] = mi;
    v[pc.v0 + i] = vi;
#if AMS
    float vm = vmax[pc.vm0 + i];
    vi = vm > vi ? vm : vi;
    vmax[pc.vm0 + i] = vi;
#endif
    precise float denom = div_cr(sqrt_cr(vi), s_bc2s) + eps;
    precise float np = pi + div_cr(s_neg_step * mi, denom);
    prm[pc.p0 + i] = np;
}
