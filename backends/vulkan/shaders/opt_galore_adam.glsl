// opt_galore_adam.glsl — Adam on GaLore's low-rank gradient with f32
// moments (backends/cpu/optim_galore.c, lowrank_adam), in place: R becomes
// N = m / (sqrt(v) + eps'), eps' = eps (32-bit GaLore) or, when BNB,
// eps * sqrt(1 - beta2^t) (8-bit GaLore's 32-bit fallback, bitsandbytes'
// form). One invocation per element. Included after opt_exact.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer R { float low[]; };
layout(std430, binding = 1) buffer M { float m[]; };
layout(std430, binding = 2) buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer H { float hyper[]; };
layout(push_constant) uniform P { uint n, r0, m0, v0, h0, bnb; } pc;
shared float s_eps;
void main() {
    uint t = uint(hyper[pc.h0 + 5u]) * 65536u + uint(hyper[pc.h0 + 6u]); // the step number (optim/optim.c)
    float b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], eps = hyper[pc.h0 + 3u];
    if (gl_LocalInvocationIndex == 0u)
        s_eps = pc.bnb != 0u ? ff_mul(vec2(eps, 0.0), ff_sqrt(ff_sub_from(1.0, ff_pow(b2, t)))).x : eps;
    barrier();
    uint i = kiln_gid();
    if (i >= pc.n) return;
    precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2, g = low[pc.r0 + i];
    precise float mi = m[pc.m0 + i] * b1 + g * one_b1;
    precise float vi = v[pc.v0 + i] * b2 + one_b2 * g * g;
    m[pc.m0 + i] = mi;
    v[pc.v0 + i] = vi;
    precise float denom = sqrt_cr(vi) + s_eps;
    low[pc.r0 + i] = div_cr(mi, denom);
}
