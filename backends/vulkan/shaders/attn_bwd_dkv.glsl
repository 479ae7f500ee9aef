// attention backward, pass 2 of 3: one invocation per key row j of kv
// head (b, kh), looping over the query heads of its group and the queries
// that see key j; P = exp(q k^T scale - L) is recomputed from the
// forward's L, so no T x S matrix exists and each dk/dv row has one
// writer:  dv_j = sum_i P_ij dO_i,  dk_j = sum_i dS_ij q_i,
// dS_ij = P_ij (dO_i . v_j - delta_i) scale (delta from pass 1).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer F { float f[]; };   // forward O | L
layout(std430, binding = 4) readonly buffer DO { float dout[]; };
layout(std430, binding = 5) buffer G { float g[]; };            // dq | dk | dv
#include "attn_common.glsl"

void main() {
    uint krow = kiln_gid();
    if (krow >= p.rows) return;
    uint kvh = krow / p.s, j = krow % p.s, b = kvh / p.hkv, kh = kvh % p.hkv, group = p.hq / p.hkv;
    float kr[HD], vr[HD], dk[HD], dv[HD];
    ATTN_LOAD(kr, k, p.k0 + krow * p.d, p.d)
    ATTN_LOAD(vr, v, p.v0 + krow * p.dv, p.dv)
    ATTN_UNROLL for (uint e = 0u; e < HD; e++) dk[e] = 0.0, dv[e] = 0.0;
    uint i0 = p.causal != 0u ? uint(max(int(j) - (int(p.s) - int(p.t)), 0)) : 0u;
    for (uint hh = 0u; hh < group; hh++) {
        uint qbase = (b * p.hq + kh * group + hh) * p.t;
        for (uint i = i0; i < p.t; i++) {
            uint qrow = qbase + i, qr = p.q0 + qrow * p.d, dr = p.do0 + qrow * p.dv;
            float sdot = 0.0, dp = 0.0;
            ATTN_UNROLL for (uint e = 0u; e < HD; e++) sdot += q[ATTN_AT(qr, e, p.d)] * kr[e];
            ATTN_UNROLL for (uint e = 0u; e < HD; e++) dp += dout[ATTN_AT(dr, e, p.dv)] * vr[e];
            float pj = exp(sdot * p.scale - f[p.l0 + qrow]);
            float ds = pj * (dp - g[p.dq0 + qrow]) * p.scale;
            ATTN_UNROLL for (uint e = 0u; e < HD; e++) dv[e] += pj * dout[ATTN_AT(dr, e, p.dv)];
            ATTN_UNROLL for (uint e = 0u; e < HD; e++) dk[e] += ds * q[ATTN_AT(qr, e, p.d)];
        }
    }
    ATTN_UNROLL for (uint e = 0u; e < HD; e++)
        if (e < p.d) g[p.dk0 + krow * p.d + e] = dk[e];
    ATTN_UNROLL for (uint e = 0u; e < HD; e++)
        if (e < p.dv) g[p.dv0 + krow * p.dv + e] = dv[e];
}
