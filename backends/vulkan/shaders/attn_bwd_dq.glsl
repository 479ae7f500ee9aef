// attention backward, pass 3 of 3: one invocation per query row i,
// recomputing P_ij = exp(q_i k_j scale - L_i) over the keys it sees:
// dq_i = sum_j dS_ij k_j, dS_ij = P_ij (dO_i . v_j - delta_i) scale, with
// delta_i = dO_i . O_i recomputed (pass 1's copy sits where dq is written).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer F { float f[]; };   // forward O | L
layout(std430, binding = 4) readonly buffer DO { float dout[]; };
layout(std430, binding = 5) buffer G { float g[]; };            // dq | dk | dv
#include "attn_common.glsl"

void main() {
    uint row = kiln_gid();
    if (row >= p.rows) return;
    uint kvh = attn_kv_head(row), kend = attn_kend(row % p.t);
    uint kb = p.k0 + kvh * p.s * p.d, vb = p.v0 + kvh * p.s * p.dv;
    float qr[HD], dor[HD], dq[HD];
    ATTN_LOAD(qr, q, p.q0 + row * p.d, p.d)
    ATTN_LOAD(dor, dout, p.do0 + row * p.dv, p.dv)
    float delta = 0.0;
    for (uint e = 0u; e < p.dv; e++) delta += dout[p.do0 + row * p.dv + e] * f[p.o0 + row * p.dv + e];
    ATTN_UNROLL for (uint e = 0u; e < HD; e++) dq[e] = 0.0;
    float li = f[p.l0 + row];
    for (uint j = 0u; j < kend; j++) {
        uint kr = kb + j * p.d, vr = vb + j * p.dv;
        float sdot = 0.0, dp = 0.0;
        ATTN_UNROLL for (uint e = 0u; e < HD; e++) sdot += qr[e] * k[ATTN_AT(kr, e, p.d)];
        ATTN_UNROLL for (uint e = 0u; e < HD; e++) dp += dor[e] * v[ATTN_AT(vr, e, p.dv)];
        float ds = exp(sdot * p.scale - li) * (dp - delta) * p.scale;
        ATTN_UNROLL for (uint e = 0u; e < HD; e++) dq[e] += ds * k[ATTN_AT(kr, e, p.d)];
    }
    ATTN_UNROLL for (uint e = 0u; e < HD; e++)
        if (e < p.d) g[p.dq0 + row * p.d + e] = dq[e];
}
