#version 450
#include "common.glsl"
// batch_norm in training mode (ops/nn_norm_chan.c): y = (x - mean) *
// rstd [* w] [+ b] per channel, and with has_r the running statistics
// updated in place as torch (unbiased variance). Absent operands are
// bound to x and unread.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer RM { float rm[]; };
layout(std430, binding = 2) buffer RV { float rv[]; };
layout(std430, binding = 3) readonly buffer W { float w[]; };
layout(std430, binding = 4) readonly buffer B { float b[]; };
layout(std430, binding = 5) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint n, c, s, has_w, has_b, has_r;
    float eps, mom;
    uint x0, rm0, rv0, w0, b0, y0;
} p;
#include "nn_bn_common.glsl"
void main() {
    uint ch = bn_channel();
    if (ch >= p.c) return; // the whole workgroup
    float mean, var;
    bn_stats(ch, mean, var);
    float rstd = 1.0 / sqrt(var + p.eps);
    float wv = p.has_w != 0u ? w[p.w0 + ch] : 1.0, bv = p.has_b != 0u ? b[p.b0 + ch] : 0.0;
    uint m = p.n * p.s;
    for (uint k = gl_LocalInvocationID.x; k < m; k += 256u) {
        uint at = bn_at(ch, k);
        y[p.y0 + at - p.x0] = (x[at] - mean) * rstd * wv + bv;
    }
    if (gl_LocalInvocationID.x == 0u && p.has_r != 0u) {
        rm[p.rm0 + ch] = (1.0 - p.mom) * rm[p.rm0 + ch] + p.mom * mean;
        rv[p.rv0 + ch] = (1.0 - p.mom) * rv[p.rv0 + ch] + p.mom * var * (float(m) / float(m - 1u));
    }
}
