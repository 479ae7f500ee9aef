// opt_galore_back.glsl — GaLore's update of p [m, n] (optim/galore.c):
// p += alpha (N P) when RIGHT (N [m, r], P [r, n]) else alpha (P N)
// (P [m, r], N [r, n]), alpha = -lr sqrt(1 - beta2^t) / (1 - beta1^t) * scale,
// then p *= 1 - lr weight_decay (as p + p * -(lr wd), the CPU's order).
// One invocation per element of p. Included after opt_exact.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer Pj { float proj[]; };
layout(std430, binding = 2) readonly buffer N { float low[]; };
layout(std430, binding = 3) readonly buffer H { float hyper[]; };
layout(push_constant) uniform P { uint m, n, r, right, p0, q0, r0, h0; float scale; } pc;
shared float s_alpha, s_decay;
void main() {
    uint t = uint(hyper[pc.h0 + 5u]) * 65536u + uint(hyper[pc.h0 + 6u]); // the step number (optim/optim.c)
    float lr = hyper[pc.h0], b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], wd = hyper[pc.h0 + 4u];
    if (gl_LocalInvocationIndex == 0u) {
        vec2 step = ff_mul(ff_two_prod(lr, 1.0), ff_sqrt(ff_sub_from(1.0, ff_pow(b2, t)))); // lr sqrt(bc2)
        step = ff_mul(step, ff_div(1.0, ff_sub_from(1.0, ff_pow(b1, t))));                   // / bc1
        s_alpha = -ff_mul(step, vec2(pc.scale, 0.0)).x;
        s_decay = -ff_two_prod(lr, wd).x;
    }
    barrier();
    uint e = kiln_gid();
    if (e >= pc.m * pc.n) return;
    uint i = e / pc.n, j = e % pc.n;
    precise float acc = 0.0;
    if (pc.right != 0u)
        for (uint a = 0u; a < pc.r; a++) acc += low[pc.r0 + i * pc.r + a] * proj[pc.q0 + a * pc.n + j];
    else
        for (uint a = 0u; a < pc.r; a++) acc += proj[pc.q0 + i * pc.r + a] * low[pc.r0 + a * pc.n + j];
    precise float w = s_alpha * acc + prm[pc.p0 + e];
    if (wd > 0.0) w = w + w * s_decay;
    prm[pc.p0 + e] = w;
}
