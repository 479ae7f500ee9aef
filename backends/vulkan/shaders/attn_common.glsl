// attn_common.glsl — what the attention kernels share. A workgroup takes
// 64 consecutive rows (queries, or keys for dk/dv) of one head: the grid
// is x = blocks of 64 rows, y = heads. Every loop bound and every address
// of the rows it walks (keys, or queries) is then the same for the whole
// workgroup, so those loads are uniform (one load broadcast to all
// invocations); what differs per invocation (the causal mask, a row past
// the end) is a mask, not a bound.
//
// Each variant's .comp defines HD, a bound on the head sizes D and Dv,
// and VW, the vector width rows are read with: 4 (VT = vec4) where D, Dv
// and every buffer's base are multiples of 4 (the host checks), else 1
// (VT = float). Rows live in registers as NV = HD / VW vectors; the loops
// over them are unrolled for HD <= 128 (so the arrays stay in registers)
// and rolled past it (private memory: slower, small code). They run to NV
// without branches: an index past the row is clamped to its last vector
// (ATTN_AT) and multiplied by a zero, or lands in an accumulator entry
// that is never stored. Buffers: q [B, Hq, T, D], k [B, Hkv, S, D],
// v [B, Hkv, S, Dv], f32 contiguous; query head h reads kv head
// h / (Hq / Hkv); causal: query i sees key j iff j <= i + S - T.
//
// A kernel may be dispatched in passes, each over a range [r0, r1) of the
// rows its long loop walks (keys; for dk/dv, the (query head, query) pairs
// of the group, flattened), to keep one invocation under a driver's bound
// on loop iterations (kiln_vk_caps.loop_budget). A pass with r0 > 0 merges
// into what the earlier ones wrote: gradients add, the forward's softmax
// states merge through their logsumexps (attn_merge).
#define ATTN_BLOCK 64u
layout(local_size_x = 64) in;

#if VW == 4
#define VT vec4
#else
#define VT float
#endif
#define NV (HD / VW)
layout(push_constant) uniform P {
    uint rows;   // query rows B*Hq*T
    uint hq, hkv, t, s, d, dv, causal;
    float scale;
    uint q0, k0, v0;
    uint o0, l0;   // the forward's O and L (output or input)
    uint do0;      // dO (backward)
    uint dq0, dk0, dv0;
    uint r0, r1;   // this pass's rows of the long loop
} p;

float attn_pos_inf() { return uintBitsToFloat(0x7f800000u); }
float attn_neg_inf() { return uintBitsToFloat(0xff800000u); }

// Keys [0, attn_kend(i)) are visible to query i.
uint attn_kend(uint i) {
    if (p.causal == 0u) return p.s;
    return uint(clamp(int(i) + int(p.s) - int(p.t) + 1, 0, int(p.s)));
}

// This invocation's row in its head (query i, or key j); the last block
// of a head may run past its end, which each kernel masks.
uint attn_index() { return gl_WorkGroupID.x * ATTN_BLOCK + gl_LocalInvocationID.x; }

// The kv head (b * Hkv + kh) of query head bh (b * Hq + h).
uint attn_kv_of(uint bh) { return bh / p.hq * p.hkv + bh % p.hq / (p.hq / p.hkv); }

#if HD > 128
#define ATTN_UNROLL [[dont_unroll]]
#else
#define ATTN_UNROLL [[unroll]]
#endif

// Merge the softmax of the keys of earlier passes (logsumexp lp, +inf for
// none) with this pass's (lc): the weights of their normalized outputs
// and the merged logsumexp.
void attn_merge(float lp, float lc, out float wp, out float wc, out float lse) {
    if (lp == attn_pos_inf() || lc == attn_pos_inf()) {
        bool none_before = lp == attn_pos_inf();
        wp = none_before ? 0.0 : 1.0;
        wc = none_before ? 1.0 : 0.0;
        lse = none_before ? lc : lp;
        return;
    }
    float mx = max(lp, lc);
    lse = mx + log(exp(lp - mx) + exp(lc - mx));
    wp = exp(lp - lse);
    wc = exp(lc - lse);
}

// Vector e of a row of n vectors starting at base, clamped into the row.
#define ATTN_AT(base, e, n) ((base) + min((e), (n) - 1u))

// The rows a kernel walks (keys, or queries for dk/dv) come ATTN_TILE at
// a time through shared memory, each row read once per workgroup with
// neighbouring invocations on neighbouring vectors; the two tiles (K and
// V, or q and dO) take 16 KiB at most, plus 128 bytes (the queries' L and
// delta): vk_attention.c's ATTN_SHARED.
#define ATTN_TILE (HD > 128 ? 8u : 16u)

// dst[c * NV + e] = vector e (clamped as ATTN_AT) of row row0 + c of buf,
// rows of nv vectors from base, c < n: the whole workgroup's loads.
#define ATTN_STAGE(dst, buf, base, row0, n, nv)                                   \
    for (uint x_ = gl_LocalInvocationID.x; x_ < (n) * NV; x_ += ATTN_BLOCK)       \
        dst[x_] = buf[ATTN_AT((base) + ((row0) + x_ / NV) * (nv), x_ % NV, nv)];

// dst[e] = the row's vector e, 0 past its n (n = 0: nothing is read).
#define ATTN_LOAD(dst, buf, base, n)                   \
    ATTN_UNROLL for (uint e_ = 0u; e_ < NV; e_++) {     \
        dst[e_] = VT(0.0);                             \
        if (e_ < (n)) dst[e_] = buf[(base) + e_];      \
    }

// Store the first n floats of the NV vectors src at out[base...] (floats),
// plus wp times what is there when wp > 0 (a later pass).
#define ATTN_STORE(out, base, src, n, wp)                                          \
    ATTN_UNROLL for (uint e_ = 0u; e_ < NV; e_++)                                   \
        ATTN_UNROLL for (uint c_ = 0u; c_ < VW; c_++)                               \
            if (e_ * VW + c_ < (n)) {                                               \
                uint a_ = (base) + e_ * VW + c_;                                    \
                out[a_] = (wp) > 0.0 ? (wp) * out[a_] + attn_comp(src[e_], c_)      \
                                     : attn_comp(src[e_], c_);                      \
            }

float attn_comp(float v, uint c) { return v; }
float attn_comp(vec4 v, uint c) { return v[c]; }
