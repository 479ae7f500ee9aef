#version 450
#include "common.glsl"
// conv_im2col: x [N, C, H, W] -> cols (ops/conv.c, ip[10] = 0): each
// element of cols reads the image pixel its tap lies on, or the pad value.
// A block is one (plane, tap)'s OH x OW grid.
#include "conv_geom.glsl"
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint b = conv_block(), pos = gl_GlobalInvocationID.x;
    if (b >= p.blocks || pos >= p.len) return;
    // the block: (n, c, ki, kj) in the layout's order
    uint n, c, ki, kj, q;
    if (p.cn != 0u) { // [C, kh, kw, N, OH, OW]
        q = udiv(b, p.n), n = b - q * p.n;
        uint r = udiv(q, p.kw);
        kj = q - r * p.kw;
        c = udiv(r, p.kh), ki = r - c * p.kh;
    } else { // [N, C, kh, kw, OH, OW]
        q = udiv(b, p.kw), kj = b - q * p.kw;
        uint r = udiv(q, p.kh);
        ki = q - r * p.kh;
        n = udiv(r, p.c), c = r - n * p.c;
    }
    uint oi = udiv(pos, p.ow), oj = pos - oi * p.ow;
    int ii = int(oi * p.sh + ki * p.dh) - p.ph, jj = int(oj * p.sw + kj * p.dw) - p.pw;
    bool in_img = ii >= 0 && ii < int(p.h) && jj >= 0 && jj < int(p.w);
    y[p.d0 + b * p.len + pos] = in_img ? x[p.s0 + ((n * p.c + c) * p.h + uint(ii)) * p.w + uint(jj)] : p.pad;
}
