#version 450
#include "common.glsl"
// conv_pool_max_grad: the fused max-pool's backward (COL2IM with ip[10] =
// 1): x, y [N, C, OH, OW], gy -> gx [N, C, H, W]. Each window shares its
// gy evenly among its taps equal to its max (out-of-image taps count as
// -inf but take nothing); each pixel gathers the shares of the windows it
// is a maximum of, in the order the CPU adds them. Where the windows tile
// the image (tiled = 1: no padding, stride = kernel, dilation 1) the CPU
// multiplies instead: each tap gets share * (tap == max), NaN for every
// tap of a window whose max is NaN (no tap equals it, so its share is
// gy/0); elsewhere such a window gives its taps nothing.
#include "conv_geom.glsl"
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Y { float y[]; };
layout(std430, binding = 2) readonly buffer G { float gy[]; };
layout(std430, binding = 3) writeonly buffer O { float gx[]; };

// Taps of window (oi, oj) of the plane starting at img equal to m.
float count_max(uint img, uint oi, uint oj, float m) {
    int i0 = int(oi * p.sh) - p.ph, j0 = int(oj * p.sw) - p.pw;
    float cnt = 0.0;
    for (uint ki = 0; ki < p.kh; ki++) {
        int ii = i0 + int(ki * p.dh);
        for (uint kj = 0; kj < p.kw; kj++) {
            int jj = j0 + int(kj * p.dw);
            bool in_img = ii >= 0 && ii < int(p.h) && jj >= 0 && jj < int(p.w);
            float v = in_img ? x[img + uint(ii) * p.w + uint(jj)] : uintBitsToFloat(0xff800000u);
            cnt += v == m ? 1.0 : 0.0;
        }
    }
    return cnt;
}

void main() {
    uint plane = conv_block(), pos = gl_GlobalInvocationID.x;
    if (plane >= p.blocks || pos >= p.len) return;
    uint ii = udiv(pos, p.w), jj = pos - ii * p.w;
    // with cn, x and gx are stored [C, N, H, W] (this node's dims) and y, gy [N, C, OH, OW]
    uint img = p.s0 + plane * p.h * p.w, out0 = (p.cn != 0u ? swap_planes(plane) : plane) * p.oh * p.ow;
    float v = x[img + pos], s = 0.0;
    // windows in ascending (oi, oj): taps ki and kj from the last down
    tap_walk wi = walk_start(ii, p.ph, p.dh, p.sh), wj0 = walk_start(jj, p.pw, p.dw, p.sw);
    for (uint k = 1; k < p.kh; k++) wi = walk_step(wi);
    for (uint k = 1; k < p.kw; k++) wj0 = walk_step(wj0);
    for (uint ki = p.kh; ki-- > 0u; wi = walk_unstep(wi)) {
        if (!walk_hit(wi, p.oh)) continue;
        tap_walk wj = wj0;
        for (uint kj = p.kw; kj-- > 0u; wj = walk_unstep(wj)) {
            if (!walk_hit(wj, p.ow)) continue;
            uint oi = uint(wi.q), oj = uint(wj.q), o = out0 + oi * p.ow + oj;
            float m = y[p.s1 + o];
            if (p.tiled != 0u) { // one window: share * (v == m), as the CPU multiplies
                float cnt = count_max(img, oi, oj, m);
                s = cnt == 0.0 ? uintBitsToFloat(0x7fc00000u) : gy[p.s2 + o] / cnt * (v == m ? 1.0 : 0.0);
            } else if (v == m) {
                s += gy[p.s2 + o] / count_max(img, oi, oj, m);
            }
        }
    }
    gx[p.d0 + plane * p.len + pos] = s;
}
