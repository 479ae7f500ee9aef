#version 450
#include "common.glsl"
// rope: one invocation per rotated pair of x [rows = ..., T, D] (f32
// contiguous): angle = pos * theta^(-2i/D), i < D/2, negated for the
// inverse; NEOX pairs (i, i + D/2), INTERLEAVED (2i, 2i + 1). pos is i32
// [T] (bound to x and unread when absent: positions 0..T-1). sin/cos are
// computed here to about 1 ulp for |angle| < 5e4 rather than trusting the
// driver's (Vulkan allows 2^-11 absolute error).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer POS { int pos[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, t, d, interleaved, inverse, has_pos; float log2_theta; uint x0, p0, y0; } p;

// Cody-Waite reduction by pi/2 (three parts, each product exact while
// |j| < 2^16), then the Cephes sinf/cosf polynomials on [-pi/4, pi/4].
void attn_sincos(float a, out float s, out float c) {
    precise float j = round(a * 0.63661977236758134);
    precise float r = ((a - j * 1.5703125) - j * 4.837512969970703125e-4) - j * 7.54978995489188216e-8;
    precise float z = r * r;
    precise float sr = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    precise float cr =
        ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    int q = int(j) & 3;
    s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}

void main() {
    uint id = kiln_gid();
    if (id >= p.n) return;
    uint h = p.d / 2u, row = id / h, i = id % h, tpos = row % p.t;
    float at = p.has_pos != 0u ? float(pos[p.p0 + tpos]) : float(tpos);
    float ang = at * exp2(-float(2u * i) / float(p.d) * p.log2_theta);
    float sn, cs;
    attn_sincos(ang, sn, cs);
    if (p.inverse != 0u) sn = -sn;
    uint ia = row * p.d + (p.interleaved != 0u ? 2u * i : i), ib = ia + (p.interleaved != 0u ? 1u : h);
    float a = x[p.x0 + ia], b = x[p.x0 + ib];
    y[p.y0 + ia] = a * cs - b * sn;
    y[p.y0 + ib] = b * cs + a * sn;
}
