// attn_fwd.glsl — flash-style attention forward, one invocation per query
// row: an online softmax over the keys (running max m, running sum
// l of exp(score - m), the unnormalized output rescaled when m grows).
// Writes O = acc / l and L = m + log(l); a query that sees no key gives
// O = 0 and L = +inf, as the CPU does. No T x S scores exist anywhere.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
#include "attn_common.glsl"

void main() {
    uint row = kiln_gid();
    if (row >= p.rows) return;
    uint kvh = attn_kv_head(row), kend = attn_kend(row % p.t);
    uint kb = p.k0 + kvh * p.s * p.d, vb = p.v0 + kvh * p.s * p.dv;
    float qr[HD], acc[HD];
    ATTN_LOAD(qr, q, p.q0 + row * p.d, p.d)
    ATTN_UNROLL for (uint e = 0u; e < HD; e++) acc[e] = 0.0;
    float m = attn_neg_inf(), l = 0.0;
    for (uint j = 0u; j < kend; j++) {
        uint kr = kb + j * p.d, vr = vb + j * p.dv;
        float dot = 0.0;
        ATTN_UNROLL for (uint e = 0u; e < HD; e++) dot += qr[e] * k[ATTN_AT(kr, e, p.d)];
        float sj = dot * p.scale;
        if (sj > m) { // a new maximum: rescale (exp(m - sj) is 0 while m is -inf)
            float corr = exp(m - sj);
            l *= corr;
            ATTN_UNROLL for (uint e = 0u; e < HD; e++) acc[e] *= corr;
            m = sj;
        }
        float pj = exp(sj - m);
        l += pj;
        ATTN_UNROLL for (uint e = 0u; e < HD; e++) acc[e] += pj * v[ATTN_AT(vr, e, p.dv)];
    }
    float inv = l > 0.0 ? 1.0 / l : 0.0;
    ATTN_UNROLL for (uint e = 0u; e < HD; e++)
        if (e < p.dv) o[p.o0 + row * p.dv + e] = acc[e] * inv;
    o[p.l0 + row] = l > 0.0 ? m + log(l) : attn_pos_inf();
}
