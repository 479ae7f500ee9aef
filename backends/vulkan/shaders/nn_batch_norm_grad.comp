#version 450
#include "common.glsl"
// BATCH_NORM_GRAD (ops/nn_norm_chan.c): per channel, from the batch
// statistics recomputed here, dx = w * rstd * (gy - mean(gy) - xhat *
// mean(gy * xhat)) into out[0 .. numel), then dw = sum(gy * xhat) at
// out[numel + ch] (has_w) and db = sum(gy) after it (has_b). An absent w
// is bound to x and unread.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer G { float gy[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
    uint n, c, s, has_w, has_b;
    float eps;
    uint x0, w0, g0, o0;
} p;
#include "nn_bn_common.glsl"
void main() {
    uint ch = bn_channel();
    if (ch >= p.c) return; // the whole workgroup
    float mean, var;
    bn_stats(ch, mean, var);
    float rstd = 1.0 / sqrt(var + p.eps), sg = 0.0, sgx = 0.0;
    uint m = p.n * p.s;
    for (uint k = gl_LocalInvocationID.x; k < m; k += 256u) {
        uint at = bn_at(ch, k);
        float g = gy[p.g0 + at - p.x0];
        sg += g;
        sgx += g * (x[at] - mean) * rstd;
    }
    sg = bn_sum(sg);
    sgx = bn_sum(sgx);
    float wv = p.has_w != 0u ? w[p.w0 + ch] : 1.0, ca = sg / float(m), cb = sgx / float(m);
    for (uint k = gl_LocalInvocationID.x; k < m; k += 256u) {
        uint at = bn_at(ch, k);
        o[p.o0 + at - p.x0] = wv * rstd * (gy[p.g0 + at - p.x0] - ca - (x[at] - mean) * rstd * cb);
    }
    if (gl_LocalInvocationID.x != 0u) return;
    uint numel = m * p.c;
    if (p.has_w != 0u) o[p.o0 + numel + ch] = sgx;
    if (p.has_b != 0u) o[p.o0 + numel + p.has_w * p.c + ch] = sg;
}
