// attn_fwd.glsl — flash-style attention forward, one invocation per query
// row: an online softmax over the keys (running max m, running sum l of
// exp(score - m), the unnormalized output rescaled when m grows). Writes
// O = acc / l and L = m + log(l); a query that sees no key gives O = 0 and
// L = +inf, as the CPU does. No T x S scores exist anywhere. The keys of
// the whole workgroup's block are walked by all its invocations (uniform
// loads, staged a tile at a time in shared memory); a key past a query's
// causal end gets probability 0.
#include "attn_common.glsl"
layout(std430, binding = 0) readonly buffer Q { VT q[]; };
layout(std430, binding = 1) readonly buffer K { VT k[]; };
layout(std430, binding = 2) readonly buffer V { VT v[]; };
layout(std430, binding = 3) buffer O { float o[]; };
#include "attn_kv_tiles.glsl"

void main() {
    uint bh = gl_WorkGroupID.y, i = attn_index(), row = bh * p.t + i;
    bool ok = i < p.t;
    uint kvh = attn_kv_of(bh), kend = ok ? attn_kend(i) : 0u;
    uint kmax = attn_kend(min(gl_WorkGroupID.x * ATTN_BLOCK + ATTN_BLOCK, p.t) - 1u);
    uint nd = p.d / VW, ndv = p.dv / VW;
    uint kb = p.k0 / VW + kvh * p.s * nd, vb = p.v0 / VW + kvh * p.s * ndv;
    VT qr[NV], acc[NV];
    ATTN_LOAD(qr, q, p.q0 / VW + row * nd, ok ? nd : 0u)
    ATTN_UNROLL for (uint e = 0u; e < NV; e++) acc[e] = VT(0.0);
    float m = attn_neg_inf(), l = 0.0;
    uint jend = min(kmax, p.r1);
    for (uint j0 = p.r0; j0 < jend; j0 += ATTN_TILE) {
        uint n = attn_stage_kv(j0, jend, kb, vb, nd, ndv);
        for (uint c = 0u; c < n; c++) {
            float dt = 0.0;
            ATTN_UNROLL for (uint e = 0u; e < NV; e++) dt += dot(qr[e], sk[c * NV + e]);
            bool vis = j0 + c < kend;
            float sj = dt * p.scale;
            if (vis && sj > m) { // a new maximum: rescale (exp(m - sj) is 0 while m is -inf)
                float corr = exp(m - sj);
                l *= corr;
                ATTN_UNROLL for (uint e = 0u; e < NV; e++) acc[e] *= corr;
                m = sj;
            }
            float pj = vis ? exp(sj - m) : 0.0;
            l += pj;
            ATTN_UNROLL for (uint e = 0u; e < NV; e++) acc[e] += pj * sv[c * NV + e];
        }
    }
    if (!ok) return;
    float lse = l > 0.0 ? m + log(l) : attn_pos_inf(), wp = 0.0, wc = 1.0;
    if (p.r0 > 0u) attn_merge(o[p.l0 + row], lse, wp, wc, lse);
    float inv = l > 0.0 ? wc / l : 0.0;
    ATTN_UNROLL for (uint e = 0u; e < NV; e++) acc[e] *= inv;
    ATTN_STORE(o, p.o0 + row * p.dv, acc, p.dv, wp)
    o[p.l0 + row] = lse;
}
