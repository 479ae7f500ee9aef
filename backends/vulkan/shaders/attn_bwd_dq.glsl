// attention backward, pass 3 of 3: one invocation per query row i,
// recomputing P_ij = exp(q_i k_j scale - L_i) over the keys it sees:
// dq_i = sum_j dS_ij k_j, dS_ij = P_ij (dO_i . v_j - delta_i) scale, with
// delta_i = dO_i . O_i recomputed (pass 1's copy sits where dq is written).
// As in the forward, the workgroup walks its block's keys together, a
// tile at a time through shared memory.
#include "attn_common.glsl"
#include "attn_bwd_io.glsl"
#include "attn_kv_tiles.glsl"

void main() {
    uint bh = gl_WorkGroupID.y, i = attn_index(), row = bh * p.t + i;
    bool ok = i < p.t;
    uint kvh = attn_kv_of(bh), kend = ok ? attn_kend(i) : 0u;
    uint kmax = attn_kend(min(gl_WorkGroupID.x * ATTN_BLOCK + ATTN_BLOCK, p.t) - 1u);
    uint nd = p.d / VW, ndv = p.dv / VW;
    uint kb = p.k0 / VW + kvh * p.s * nd, vb = p.v0 / VW + kvh * p.s * ndv;
    VT qr[NV], dor[NV], dq[NV];
    ATTN_LOAD(qr, q, p.q0 / VW + row * nd, ok ? nd : 0u)
    ATTN_LOAD(dor, dout, p.do0 / VW + row * ndv, ok ? ndv : 0u)
    float delta = 0.0, li = 0.0;
    if (ok) {
        for (uint e = 0u; e < p.dv; e++) {
            uint at = p.do0 + row * p.dv + e;
            delta += attn_comp(dout[at / VW], at % VW) * f[p.o0 + row * p.dv + e];
        }
        li = f[p.l0 + row];
    }
    ATTN_UNROLL for (uint e = 0u; e < NV; e++) dq[e] = VT(0.0);
    uint jend = min(kmax, p.r1);
    for (uint j0 = p.r0; j0 < jend; j0 += ATTN_TILE) {
        uint n = attn_stage_kv(j0, jend, kb, vb, nd, ndv);
        for (uint c = 0u; c < n; c++) {
            float sdot = 0.0, dp = 0.0;
            ATTN_UNROLL for (uint e = 0u; e < NV; e++) sdot += dot(qr[e], sk[c * NV + e]);
            ATTN_UNROLL for (uint e = 0u; e < NV; e++) dp += dot(dor[e], sv[c * NV + e]);
            float ds = j0 + c < kend ? exp(sdot * p.scale - li) * (dp - delta) * p.scale : 0.0;
            ATTN_UNROLL for (uint e = 0u; e < NV; e++) dq[e] += ds * sk[c * NV + e];
        }
    }
    if (!ok) return;
    ATTN_STORE(g, p.dq0 + row * p.d, dq, p.d, p.r0 > 0u ? 1.0 : 0.0)
}
