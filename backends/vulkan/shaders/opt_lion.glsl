// opt_lion.glsl — the Lion step (optim/lion.c), in place, one invocation per
// element, in the CPU kernel's operation order. The hyperparameters (lr,
// beta1, beta2, weight_decay) come from the hyper leaf, rewritten before
// every step; 1 - lr * weight_decay, which the CPU computes in double, is
// computed once per workgroup in float-float (opt_exact.glsl). sign is
// torch.sign's, (c > 0) - (c < 0): 0 for 0 and for NaN, as on the CPU.
// Included after opt_exact.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
layout(std430, binding = 2) buffer M { float m[]; };
layout(std430, binding = 3) readonly buffer H { float hyper[]; };
layout(push_constant) uniform P { uint n, p0, g0, m0, h0; } pc;
shared float s_decay;
void main() {
    float lr = hyper[pc.h0], b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], wd = hyper[pc.h0 + 3u];
    if (gl_LocalInvocationIndex == 0u) s_decay = ff_sub_from(1.0, ff_two_prod(lr, wd)).x; // 1 - lr wd
    barrier();
    uint i = kiln_gid();
    if (i >= pc.n) return;
    precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2; // the CPU's (float)(1.0 - (double)b): the same bits
    precise float pi = prm[pc.p0 + i] * s_decay;
    float g = grad[pc.g0 + i], mi = m[pc.m0 + i];
    precise float c = mi * b1 + g * one_b1;
    precise float sgn = float(c > 0.0) - float(c < 0.0);
    precise float np = pi + (-lr) * sgn;
    precise float nm = mi * b2 + g * one_b2;
    prm[pc.p0 + i] = np;
    m[pc.m0 + i] = nm;
}
