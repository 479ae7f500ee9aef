// attn_fwd_decode.glsl — attention forward for one query per head (T = 1,
// a decoding step), where attn_fwd.glsl would walk all S keys on one
// invocation of 64: here the workgroup splits them (key j to invocation
// j % 64), each invocation keeps the online softmax of its keys (max m, sum
// l, unnormalized acc), and the 64 states are merged in shared memory:
// M = max m, l = sum l e^(m - M), O = sum acc e^(m - M) / l, L = M + log l,
// in a fixed order (the same result every run). Grid: (1, heads).
#include "attn_common.glsl"
layout(std430, binding = 0) readonly buffer Q { VT q[]; };
layout(std430, binding = 1) readonly buffer K { VT k[]; };
layout(std430, binding = 2) readonly buffer V { VT v[]; };
layout(std430, binding = 3) buffer O { float o[]; };

shared float sh_m[ATTN_BLOCK], sh_l[ATTN_BLOCK];
shared VT sh_acc[ATTN_BLOCK];

void main() {
    uint bh = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x; // the row of head bh's one query is bh
    uint kvh = attn_kv_of(bh), kend = attn_kend(0u);
    uint nd = p.d / VW, ndv = p.dv / VW;
    uint kb = p.k0 / VW + kvh * p.s * nd, vb = p.v0 / VW + kvh * p.s * ndv;
    VT qr[NV], acc[NV];
    ATTN_LOAD(qr, q, p.q0 / VW + bh * nd, nd)
    ATTN_UNROLL for (uint e = 0u; e < NV; e++) acc[e] = VT(0.0);
    float m = attn_neg_inf(), l = 0.0;
    for (uint j = p.r0 + lid; j < min(kend, p.r1); j += ATTN_BLOCK) {
        uint kr = kb + j * nd, vr = vb + j * ndv;
        float dt = 0.0;
        ATTN_UNROLL for (uint e = 0u; e < NV; e++) dt += dot(qr[e], k[ATTN_AT(kr, e, nd)]);
        float sj = dt * p.scale;
        if (sj > m) { // a new maximum: rescale (exp(m - sj) is 0 while m is -inf)
            float corr = exp(m - sj);
            l *= corr;
            ATTN_UNROLL for (uint e = 0u; e < NV; e++) acc[e] *= corr;
            m = sj;
        }
        float pj = exp(sj - m);
        l += pj;
        ATTN_UNROLL for (uint e = 0u; e < NV; e++) acc[e] += pj * v[ATTN_AT(vr, e, ndv)];
    }
    sh_m[lid] = m;
    barrier();
    float mx = attn_neg_inf();
    for (uint i = 0u; i < ATTN_BLOCK; i++) mx = max(mx, sh_m[i]);
    float w = l > 0.0 ? exp(m - mx) : 0.0; // an invocation without keys adds nothing
    sh_l[lid] = l * w;
    barrier();
    float lt = 0.0;
    for (uint i = 0u; i < ATTN_BLOCK; i++) lt += sh_l[i];
    float lse = lt > 0.0 ? mx + log(lt) : attn_pos_inf(), wp = 0.0, wc = 1.0;
    if (p.r0 > 0u) attn_merge(o[p.l0 + bh], lse, wp, wc, lse);
    float inv = lt > 0.0 ? wc / lt : 0.0;
    ATTN_UNROLL for (uint e = 0u; e < NV; e++) { // each vector of O: a tree sum over the invocations
        sh_acc[lid] = acc[e] * w;
        barrier();
        for (uint st = ATTN_BLOCK / 2u; st > 0u; st >>= 1) {
            if (lid < st) sh_acc[lid] += sh_acc[lid + st];
            barrier();
        }
        if (lid == 0u)
            for (uint c = 0u; c < VW; c++) {
                uint at = p.o0 + bh * p.dv + e * VW + c;
                float x = attn_comp(sh_acc[0], c) * inv;
                if (e * VW + c < p.dv) o[at] = wp > 0.0 ? wp * o[at] + x : x;
            }
        barrier();
    }
    if (lid == 0u) o[p.l0 + bh] = lse;
}
