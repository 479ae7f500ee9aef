// attn_common.glsl — what the attention kernels share. HD (defined by each
// variant's .comp) bounds the head sizes D and Dv: rows of q, k, v are held
// in registers as HD floats in fully unrolled loops, so the arrays stay in
// registers. The loops run to HD without branches: an index past the row
// is clamped to its last element (ATTN_AT) and multiplied by a zero, or
// lands in an accumulator entry that is never stored. Past 128 the
// loops stay rolled (the arrays then live in private memory: slower, but
// the code stays small). Buffers: q [B, Hq, T, D],
// k [B, Hkv, S, D], v [B, Hkv, S, Dv], f32 contiguous; query head h reads
// kv head h / (Hq / Hkv); causal: query i sees key j iff j <= i + S - T.
layout(push_constant) uniform P {
    uint rows;   // invocations: query rows B*Hq*T, or key rows B*Hkv*S
    uint hq, hkv, t, s, d, dv, causal;
    float scale;
    uint q0, k0, v0;
    uint o0, l0;   // the forward's O and L (output or input)
    uint do0;      // dO (backward)
    uint dq0, dk0, dv0;
} p;

float attn_pos_inf() { return uintBitsToFloat(0x7f800000u); }
float attn_neg_inf() { return uintBitsToFloat(0xff800000u); }

// Keys [0, attn_kend(i)) are visible to query i.
uint attn_kend(uint i) {
    if (p.causal == 0u) return p.s;
    return uint(clamp(int(i) + int(p.s) - int(p.t) + 1, 0, int(p.s)));
}

// The kv row base (element index of key 0 of the head) of query row `row`.
uint attn_kv_head(uint row) {
    uint bh = row / p.t, b = bh / p.hq, h = bh % p.hq;
    return b * p.hkv + h / (p.hq / p.hkv);
}

#if HD > 128
#define ATTN_UNROLL [[dont_unroll]]
#else
#define ATTN_UNROLL [[unroll]]
#endif

// Element e of a row of n starting at base, clamped into the row.
#define ATTN_AT(base, e, n) ((base) + min((e), (n) - 1u))

// dst[e] = the row's element e, 0 past its n.
#define ATTN_LOAD(dst, buf, base, n)                   \
    ATTN_UNROLL for (uint e_ = 0u; e_ < HD; e_++)        \
        dst[e_] = e_ < (n) ? buf[ATTN_AT(base, e_, n)] : 0.0;
