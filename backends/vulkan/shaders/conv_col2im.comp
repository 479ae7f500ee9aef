#version 450
#include "common.glsl"
// conv_col2im: cols -> img [N, C, H, W] (ops/conv.c, ip[10] = 0), as a
// gather: each pixel sums the taps that read it, in the CPU's (ki, kj)
// order (the same rounding), so no two invocations write one element.
#include "conv_geom.glsl"
layout(std430, binding = 0) readonly buffer X { float cols[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint i = kiln_gid();
    if (i >= p.total) return;
    uint jj = i % p.w, r = i / p.w;
    uint ii = r % p.h;
    r /= p.h;
    uint c = r % p.c, n = r / p.c;
    float s = 0.0;
    for (uint ki = 0; ki < p.kh; ki++) {
        // the grid row oi whose tap ki lands on row ii: oi*sh = ii + ph - ki*dh
        int ti = int(ii) + p.ph - int(ki * p.dh);
        if (ti < 0 || uint(ti) % p.sh != 0u || uint(ti) / p.sh >= p.oh) continue;
        uint oi = uint(ti) / p.sh;
        for (uint kj = 0; kj < p.kw; kj++) {
            int tj = int(jj) + p.pw - int(kj * p.dw);
            if (tj < 0 || uint(tj) % p.sw != 0u || uint(tj) / p.sw >= p.ow) continue;
            s += cols[p.s0 + cols_index(n, c, ki, kj, oi, uint(tj) / p.sw)];
        }
    }
    y[p.d0 + i] = s;
}
