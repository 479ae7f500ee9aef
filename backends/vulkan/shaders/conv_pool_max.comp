#version 450
#include "common.glsl"
// conv_pool_max: the fused max-pool (IM2COL with ip[10] = 1): x [N, C, H,
// W] -> y [N, C, OH, OW], the max over each window's taps, out-of-image
// taps reading the pad value; a NaN tap makes the max NaN (the CPU's rule).
// A block is one plane.
#include "conv_geom.glsl"
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint plane = conv_block(), pos = gl_GlobalInvocationID.x;
    if (plane >= p.blocks || pos >= p.len) return;
    uint oi = udiv(pos, p.ow), oj = pos - oi * p.ow;
    int i0 = int(oi * p.sh) - p.ph, j0 = int(oj * p.sw) - p.pw;
    uint img = p.s0 + (p.cn != 0u ? swap_planes(plane) : plane) * p.h * p.w; // x [C, N, H, W] when cn
    float best = 0.0;
    bool first = true, nan = false;
    for (uint ki = 0; ki < p.kh; ki++) {
        int ii = i0 + int(ki * p.dh);
        for (uint kj = 0; kj < p.kw; kj++) {
            int jj = j0 + int(kj * p.dw);
            bool in_img = ii >= 0 && ii < int(p.h) && jj >= 0 && jj < int(p.w);
            float v = in_img ? x[img + uint(ii) * p.w + uint(jj)] : p.pad;
            nan = nan || isnan(v);
            if (first || v > best) best = v;
            first = false;
        }
    }
    y[p.d0 + plane * p.len + pos] = nan ? uintBitsToFloat(0x7fc00000u) : best;
}
