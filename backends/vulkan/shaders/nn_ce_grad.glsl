// nn_ce_grad.glsl — cross_entropy backward, pass 2 of 2 (after
// common.glsl): every row of gx = (softmax(x) - one_hot(label)) * gy /
// count, 0 on rows whose label is ignored (or outside [0, c): the CPU
// fails the compute there); count is pass 1's number of kept rows
// (nn_cross_entropy_count.comp; 1 when there are none). With CE_V4 the
// logits and gx are read and written as vec4 (the host checks that c and
// both bases are multiples of 4), as in nn_ce_loss.glsl.
#include "nn_rows.glsl"
#include "nn_ce_rows.glsl"
#ifdef CE_V4
#define CE_T vec4
#define CE_VW 4u
#else
#define CE_T float
#define CE_VW 1u
#endif
#define CE_N (p.c / CE_VW)
layout(std430, binding = 0) readonly buffer X { CE_T x[]; };
layout(std430, binding = 1) readonly buffer L { int lab[]; };
layout(std430, binding = 2) readonly buffer G { float gy[]; };
layout(std430, binding = 3) readonly buffer N { uint cnt[]; };
layout(std430, binding = 4) writeonly buffer GX { CE_T gx[]; };
layout(push_constant) uniform P { uint rows, c, wd; int ignore; uint x0, l0, gy0, n0, gx0; } p;
void main() {
    uint row = nn_row(p.wd);
    bool ok = row < p.rows;
    float scale = gy[p.gy0] / float(max(cnt[p.n0], 1u));
    int l = ok ? lab[p.l0 + row] : p.ignore;
    bool kept = l != p.ignore && l >= 0 && uint(l) < p.c;
    // the row's first element, in units of CE_T
    uint xr = (p.x0 + row * p.c) / CE_VW, gr = (p.gx0 + row * p.c) / CE_VW;
    float m, s;
#ifdef CE_V4
    NN_CE_LANE_SOFTMAX4(x, xr, kept ? CE_N : 0u, m, s)
#else
    NN_LANE_SOFTMAX(x, xr, kept ? CE_N : 0u, m, s)
#endif
    vec2 ms = nn_ce_combine(m, s);
    if (!ok) return;
    if (!kept) {
        for (uint j = nn_lane; j < CE_N; j += p.wd) gx[gr + j] = CE_T(0.0);
        return;
    }
    float lse = ms.x + log(ms.y);
    for (uint j = nn_lane; j < CE_N; j += p.wd) {
        CE_T g = exp(x[xr + j] - lse) * scale;
#ifdef CE_V4
        uint d = uint(l) - 4u * j; // the label's component, when it is in this vec4
        if (d < 4u) g[d] -= scale;
#else
        if (j == uint(l)) g -= scale;
#endif
        gx[gr + j] = g;
    }
}
