#version 450
#include "common.glsl"
#include "ew_math.glsl"
// attn_cached: kiln_attention_cached's attention, its writes done
// (attn_cache_write.comp): q [N, Hq, D] row i, query head h over keys
// first .. pos[i] of sequence seq[i] of the caches [B, Hkv, S, D/Dv]
// (the last window of them when window > 0), kv head h / (Hq / Hkv); f32
// contiguous, D and Dv up to HD. A workgroup per (query head, row): grid
// (Hq, N). Its 64 invocations split the keys (key first + j to invocation
// j % 64), each keeping an online softmax (max m, sum l, unnormalized
// acc), then merge the 64 states in a fixed order as attn_fwd_decode.glsl
// does. A decoding step and each row of a prompt run alike; seq and pos
// are read here, so a replayed recording serves the next token. softcap
// > 0: each scaled score s is softcap tanh(s / softcap) (Gemma 2).
#define HD 256u
#define COLS 32u
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer SEQ { int seq[]; };
layout(std430, binding = 4) readonly buffer POS { int pos[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
    uint n, hq, hkv, b, s, d, dv, window;
    float scale, softcap;
    uint q0, k0, v0, s0, p0, o0;
} p;

shared float sh_m[64], sh_l[64];
shared float sh_acc[64u * (COLS + 1u)]; // a column block of every invocation's acc, rows padded

void main() {
    uint h = gl_WorkGroupID.x, i = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x, row = i * p.hq + h;
    int sq = seq[p.s0 + i], ps = pos[p.p0 + i];
    if (sq < 0 || uint(sq) >= p.b || ps < 0 || uint(ps) >= p.s) { // the whole workgroup returns
        for (uint e = lid; e < p.dv; e += 64u) o[p.o0 + row * p.dv + e] = uintBitsToFloat(0x7fc00000u);
        return;
    }
    uint last = uint(ps) + 1u, first = p.window > 0u && last > p.window ? last - p.window : 0u;
    uint kvh = uint(sq) * p.hkv + h / (p.hq / p.hkv), qb = p.q0 + row * p.d;
    uint kb = p.k0 + kvh * p.s * p.d, vb = p.v0 + kvh * p.s * p.dv;
    float acc[HD];
    for (uint e = 0u; e < p.dv; e++) acc[e] = 0.0;
    float m = uintBitsToFloat(0xff800000u), l = 0.0;
    for (uint j = first + lid; j < last; j += 64u) {
        float dt = 0.0;
        for (uint e = 0u; e < p.d; e++) dt += q[qb + e] * k[kb + j * p.d + e];
        float sj = dt * p.scale;
        if (p.softcap > 0.0) sj = ew_tanh(sj / p.softcap) * p.softcap;
        if (sj > m) { // a new maximum: rescale (exp(m - sj) is 0 while m is -inf)
            float corr = exp(m - sj);
            l *= corr;
            for (uint e = 0u; e < p.dv; e++) acc[e] *= corr;
            m = sj;
        }
        float pj = exp(sj - m);
        l += pj;
        for (uint e = 0u; e < p.dv; e++) acc[e] += pj * v[vb + j * p.dv + e];
    }
    sh_m[lid] = m;
    barrier();
    float mx = uintBitsToFloat(0xff800000u);
    for (uint x = 0u; x < 64u; x++) mx = max(mx, sh_m[x]);
    float w = l > 0.0 ? exp(m - mx) : 0.0; // an invocation without keys adds nothing
    sh_l[lid] = l * w;
    barrier();
    float lt = 0.0;
    for (uint x = 0u; x < 64u; x++) lt += sh_l[x];
    for (uint e0 = 0u; e0 < p.dv; e0 += COLS) { // COLS columns of O at a time, summed over the invocations in order
        uint nc = min(COLS, p.dv - e0);
        for (uint c = 0u; c < nc; c++) sh_acc[lid * (COLS + 1u) + c] = acc[e0 + c] * w;
        barrier();
        if (lid < nc) {
            float sum = 0.0;
            for (uint x = 0u; x < 64u; x++) sum += sh_acc[x * (COLS + 1u) + lid];
            o[p.o0 + row * p.dv + e0 + lid] = sum / lt;
        }
        barrier();
    }
}
