// attention backward, pass 2 of 3: one invocation per key row j of kv
// head (b, kh), looping over the query heads of its group and the queries
// that see key j; P = exp(q k^T scale - L) is recomputed from the
// forward's L, so no T x S matrix exists and each dk/dv row has one
// writer:  dv_j = sum_i P_ij dO_i,  dk_j = sum_i dS_ij q_i,
// dS_ij = P_ij (dO_i . v_j - delta_i) scale (delta from pass 1). The
// workgroup (64 keys of one head) walks the queries together from the
// first one any of its keys is visible to, a tile at a time through
// shared memory (q, dO, L and delta of each query).
#include "attn_common.glsl"
#include "attn_bwd_io.glsl"
shared VT sq[ATTN_TILE * NV], sdo[ATTN_TILE * NV];
shared float sl[ATTN_TILE], sd[ATTN_TILE];

void main() {
    uint kvh = gl_WorkGroupID.y, j = attn_index(), krow = kvh * p.s + j;
    bool ok = j < p.s;
    uint b = kvh / p.hkv, kh = kvh % p.hkv, group = p.hq / p.hkv;
    uint nd = p.d / VW, ndv = p.dv / VW;
    VT kr[NV], vr[NV], dk[NV], dv[NV];
    ATTN_LOAD(kr, k, p.k0 / VW + krow * nd, ok ? nd : 0u)
    ATTN_LOAD(vr, v, p.v0 / VW + krow * ndv, ok ? ndv : 0u)
    ATTN_UNROLL for (uint e = 0u; e < NV; e++) dk[e] = VT(0.0), dv[e] = VT(0.0);
    // query i sees key j iff i >= j - (S - T): the block's first key bounds the loop
    int off = int(p.s) - int(p.t), ifirst = int(j) - off;
    uint i0 = p.causal != 0u ? uint(max(int(gl_WorkGroupID.x * ATTN_BLOCK) - off, 0)) : 0u;
    for (uint hh = p.r0 / p.t; hh < min(group, (p.r1 + p.t - 1u) / p.t); hh++) { // this pass's pairs
        uint qbase = (b * p.hq + kh * group + hh) * p.t, h0 = hh * p.t;
        uint iend = min(p.t, p.r1 - h0);
        for (uint t0 = max(i0, p.r0 > h0 ? p.r0 - h0 : 0u); t0 < iend; t0 += ATTN_TILE) {
            uint n = min(ATTN_TILE, iend - t0), lid = gl_LocalInvocationID.x;
            barrier(); // the previous tile's reads are done
            ATTN_STAGE(sq, q, p.q0 / VW, qbase + t0, n, nd)
            ATTN_STAGE(sdo, dout, p.do0 / VW, qbase + t0, n, ndv)
            if (lid < n) sl[lid] = f[p.l0 + qbase + t0 + lid], sd[lid] = g[p.dq0 + qbase + t0 + lid];
            barrier();
            for (uint c = 0u; c < n; c++) {
                bool vis = ok && (p.causal == 0u || int(t0 + c) >= ifirst);
                float sdot = 0.0, dp = 0.0;
                ATTN_UNROLL for (uint e = 0u; e < NV; e++) sdot += dot(sq[c * NV + e], kr[e]);
                ATTN_UNROLL for (uint e = 0u; e < NV; e++) dp += dot(sdo[c * NV + e], vr[e]);
                float pj = vis ? exp(sdot * p.scale - sl[c]) : 0.0;
                float ds = pj * (dp - sd[c]) * p.scale;
                ATTN_UNROLL for (uint e = 0u; e < NV; e++) dv[e] += pj * sdo[c * NV + e];
                ATTN_UNROLL for (uint e = 0u; e < NV; e++) dk[e] += ds * sq[c * NV + e];
            }
        }
    }
    if (!ok) return;
    float wp = p.r0 > 0u ? 1.0 : 0.0;
    ATTN_STORE(g, p.dk0 + krow * p.d, dk, p.d, wp)
    ATTN_STORE(g, p.dv0 + krow * p.dv, dv, p.dv, wp)
}
