#version 450
#include "common.glsl"
// conv_col2im: cols -> img [N, C, H, W] (ops/conv.c, ip[10] = 0), as a
// gather: each pixel sums the taps that read it, in the CPU's (ki, kj)
// order (the same rounding), so no two invocations write one element.
// A block is one image plane.
#include "conv_geom.glsl"
layout(std430, binding = 0) readonly buffer X { float cols[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint plane = conv_block(), pos = gl_GlobalInvocationID.x;
    if (plane >= p.blocks || pos >= p.len) return;
    uint n = udiv(plane, p.c), c = plane - n * p.c;
    uint ii = udiv(pos, p.w), jj = pos - ii * p.w;
    float s = 0.0;
    tap_walk wi = walk_start(ii, p.ph, p.dh, p.sh), wj0 = walk_start(jj, p.pw, p.dw, p.sw);
    for (uint ki = 0; ki < p.kh; ki++, wi = walk_step(wi)) {
        if (!walk_hit(wi, p.oh)) continue;
        tap_walk wj = wj0;
        for (uint kj = 0; kj < p.kw; kj++, wj = walk_step(wj))
            if (walk_hit(wj, p.ow)) s += cols[p.s0 + cols_index(n, c, ki, kj, uint(wi.q), uint(wj.q))];
    }
    y[p.d0 + plane * p.len + pos] = s;
}
