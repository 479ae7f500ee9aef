// red_col.glsl — reductions along a long-stride axis whose neighbouring
// outputs are neighbouring elements (a sum over a leading axis, a mean over
// a middle one): one invocation per output (RED_V4: per 4 outputs, whose
// elements load as one vec4) and split, walking its range in order.
#include "red_fast_io.glsl"
void main() {
    uint g = kiln_gid();
#ifdef RED_V4
    uint W = p.nout >> 2;
#else
    uint W = p.nout;
#endif
    if (g >= W * p.S) return;
    uint s = g / W, o = g - s * W, k0 = s * p.chunk, k1 = min(p.n, k0 + p.chunk);
#ifdef RED_V4
    uint b4 = (p.x0 + red_kept(4u * o)) >> 2, rs4 = p.rs >> 2;
    uvec4 ib = (uvec4(0u, 1u, 2u, 3u) + 4u * o) * (p.iflat * p.n);
    red_acc4 a = red_empty4();
    for (uint k = k0; k < k1; k++) red_step4(a, x[b4 + k * rs4], ib + k);
    for (int j = 0; j < 4; j++) red_put(4u * o + uint(j), s, red_lane(a, j));
#else
    uint base = p.x0 + red_kept(o);
    red_acc a = red_empty();
    uint ib = p.iflat * o * p.n;
    for (uint k = k0; k < k1; k++) red_step(a, red_ld(base + k * p.rs), k + ib);
    red_put(o, s, a);
#endif
}
