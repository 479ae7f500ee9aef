#version 450
#include "common.glsl"
// conv_im2col: x [N, C, H, W] -> cols (ops/conv.c, ip[10] = 0): each
// element of cols reads the image pixel its tap lies on, or the pad value.
#include "conv_geom.glsl"
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint i = kiln_gid();
    if (i >= p.total) return;
    uint oj = i % p.ow, r = i / p.ow;
    uint oi = r % p.oh;
    r /= p.oh;
    uint n, c, ki, kj;
    if (p.cn != 0u) { // [C, kh, kw, N, OH, OW]
        n = r % p.n, r /= p.n;
        kj = r % p.kw, r /= p.kw;
        ki = r % p.kh, c = r / p.kh;
    } else { // [N, C, kh, kw, OH, OW]
        kj = r % p.kw, r /= p.kw;
        ki = r % p.kh, r /= p.kh;
        c = r % p.c, n = r / p.c;
    }
    int ii = int(oi * p.sh + ki * p.dh) - p.ph, jj = int(oj * p.sw + kj * p.dw) - p.pw;
    bool in_img = ii >= 0 && ii < int(p.h) && jj >= 0 && jj < int(p.w);
    y[p.d0 + i] = in_img ? x[p.s0 + ((n * p.c + c) * p.h + uint(ii)) * p.w + uint(jj)] : p.pad;
}
