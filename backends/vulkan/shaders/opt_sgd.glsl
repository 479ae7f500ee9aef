// opt_sgd.glsl — the SGD step (optim/sgd.c), in place, one invocation per
// element, in the CPU kernel's operation order; the hyperparameters (lr,
// momentum, dampening, weight_decay) are read from the hyper leaf, which
// kiln_optim_step rewrites before every step. MOMENTUM (0/1) says whether
// a momentum buffer is bound. Only + - and *, kept unfused by `precise`:
// the CPU's bits.
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
#if MOMENTUM
layout(std430, binding = 2) buffer B { float buf[]; };
layout(std430, binding = 3) readonly buffer H { float hyper[]; };
#else
layout(std430, binding = 2) readonly buffer H { float hyper[]; };
#endif
layout(push_constant) uniform P { uint n, p0, g0, b0, h0, nesterov, first; } pc;
void main() {
    uint i = kiln_gid();
    if (i >= pc.n) return;
    float lr = hyper[pc.h0], wd = hyper[pc.h0 + 3u];
    precise float g = grad[pc.g0 + i], p = prm[pc.p0 + i];
    if (wd != 0.0) g = g + wd * p;
#if MOMENTUM
    float mom = hyper[pc.h0 + 1u];
    precise float keep = 1.0 - hyper[pc.h0 + 2u]; // the CPU's (float)(1.0 - (double)d): the same bits
    precise float b = pc.first != 0u ? g : mom * buf[pc.b0 + i] + keep * g;
    buf[pc.b0 + i] = b;
    g = pc.nesterov != 0u ? g + mom * b : b;
#endif
    precise float np = p - lr * g;
    prm[pc.p0 + i] = np;
}
