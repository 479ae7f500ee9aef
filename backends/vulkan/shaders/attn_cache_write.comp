#version 450
#include "common.glsl"
// attn_cache_write: kiln_attention_cached's writes, one invocation per
// element of the rows' new keys k [N, Hkv, D] and values v [N, Hkv, Dv]
// into position pos[i] of sequence seq[i] of the caches [B, Hkv, S, D/Dv]
// (f32 contiguous). seq and pos are read here, so a replayed recording
// writes where the next token's values say. A row outside the caches
// writes nothing (attn_cached.comp gives it NaN) and is noted in err
// (flag, row, seq, pos, B, S; the first noted stays) for the host's error
// after the compute (kiln__vk_rows_error).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) readonly buffer SEQ { int seq[]; };
layout(std430, binding = 3) readonly buffer POS { int pos[]; };
layout(std430, binding = 4) buffer KC { float kc[]; };
layout(std430, binding = 5) buffer VC { float vc[]; };
layout(std430, binding = 6) buffer ERR { int err[]; };
layout(push_constant) uniform P { uint n, hkv, b, s, d, dv, k0, v0, s0, p0, kc0, vc0; } p;

void main() {
    uint id = kiln_gid(), w = p.d + p.dv;
    if (id >= p.n * p.hkv * w) return;
    uint e = id % w, rh = id / w, i = rh / p.hkv, h = rh % p.hkv;
    int sq = seq[p.s0 + i], ps = pos[p.p0 + i];
    if (sq < 0 || uint(sq) >= p.b || ps < 0 || uint(ps) >= p.s) {
        if (id == rh * w && atomicCompSwap(err[0], 0, 1) == 0) {
            err[1] = int(i);
            err[2] = sq;
            err[3] = ps;
            err[4] = int(p.b);
            err[5] = int(p.s);
        }
        return;
    }
    uint at = (uint(sq) * p.hkv + h) * p.s + uint(ps);
    if (e < p.d) kc[p.kc0 + at * p.d + e] = k[p.k0 + rh * p.d + e];
    else vc[p.vc0 + at * p.dv + e - p.d] = v[p.v0 + rh * p.dv + e - p.d];
}
