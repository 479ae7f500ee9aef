#version 450
#include "common.glsl"
// ew_dropout: the CPU's dropout bit for bit (backends/cpu/nn.c, core/rng.c).
// Element i is kept when uniform01(seed, i) >= p, i.e. when the top 53 bits
// of hash64(hash64(seed) ^ i * C) reach t = ceil(p 2^53), where seed is the
// node's seed ^ run * G (the host passes the node's seed and t; run, the
// graph's run number, is read from binding 2, so that a recorded dispatch
// reads each run's); kept elements become (float)((double)x * k) with
// k = 1/(1-p), which the host passes as k = mk 2^ek (mk: 53 bits) and the
// shader forms exactly in integers, rounding twice as the CPU does. 64-bit
// integers are uvec2 (x low, y high): no Int64 or Float64 feature needed.
// keep_all (eval mode) copies.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(std430, binding = 2) readonly buffer R { uvec2 run; };
layout(push_constant) uniform P {
    uint n, x0, y0, keep_all;
    uvec2 seed, t, mk;
    int ek;
} p;

uvec2 add64(uvec2 a, uvec2 b) {
    uint c, lo = uaddCarry(a.x, b.x, c);
    return uvec2(lo, a.y + b.y + c);
}
uvec2 mul64(uvec2 a, uvec2 b) { // low 64 bits of a b
    uint hi, lo;
    umulExtended(a.x, b.x, hi, lo);
    return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}
uvec2 shr64(uvec2 a, uint k) { // 0 < k < 32
    return uvec2((a.x >> k) | (a.y << (32u - k)), a.y >> k);
}
bool ge64(uvec2 a, uvec2 b) { return a.y > b.y || (a.y == b.y && a.x >= b.x); }

// splitmix64's finalizer (core/rng.c kiln__hash64).
uvec2 hash64(uvec2 v) {
    v = add64(v, uvec2(0x7f4a7c15u, 0x9e3779b9u));
    v = mul64(v ^ shr64(v, 30u), uvec2(0x1ce4e5b9u, 0xbf58476du));
    v = mul64(v ^ shr64(v, 27u), uvec2(0x133111ebu, 0x94d049bbu));
    return v ^ shr64(v, 31u);
}

// v >> k rounded to nearest even, 1 <= k <= 63.
uvec2 shr64_rne(uvec2 v, uint k) {
    uvec2 q, rem, half_;
    if (k < 32u) {
        q = shr64(v, k);
        rem = uvec2(v.x & ((1u << k) - 1u), 0u);
        half_ = uvec2(1u << (k - 1u), 0u);
    } else if (k == 32u) {
        q = uvec2(v.y, 0u);
        rem = uvec2(v.x, 0u);
        half_ = uvec2(0x80000000u, 0u);
    } else {
        uint j = k - 32u;
        q = uvec2(v.y >> j, 0u);
        rem = uvec2(v.x, v.y & ((1u << j) - 1u));
        half_ = uvec2(0u, 1u << (j - 1u));
    }
    bool up = rem != half_ ? ge64(rem, half_) : (q.x & 1u) != 0u;
    return up ? add64(q, uvec2(1u, 0u)) : q;
}

// Bits of (float)((double)x * k) from x's bits.
uint scaled(uint xb) {
    uint sign = xb & 0x80000000u, e = (xb >> 23) & 0xffu, m = xb & 0x7fffffu;
    if (e == 0xffu) return m != 0u ? xb | 0x400000u : xb; // NaN (quieted), inf
    if (e == 0u && m == 0u) return xb;
    uint mx = e != 0u ? m | 0x800000u : m;
    int ex = (e != 0u ? int(e) : 1) - 150; // x = mx 2^ex
    // P = mx mk in three 32-bit limbs: 2^52 <= P < 2^77
    uint ah, al, bh, bl, c;
    umulExtended(mx, p.mk.x, ah, al);
    umulExtended(mx, p.mk.y, bh, bl);
    uint l0 = al, l1 = uaddCarry(ah, bl, c), l2 = bh + c;
    int len = l2 != 0u ? 65 + findMSB(l2) : 33 + findMSB(l1);
    // round P to 53 bits (the double product): q 2^e2
    uint d = uint(len - 53);
    uvec2 q = uvec2(l0, l1);
    if (d != 0u) {
        uint rem = l0 & ((1u << d) - 1u), half_ = 1u << (d - 1u);
        q = uvec2((l0 >> d) | (l1 << (32u - d)), (l1 >> d) | (l2 << (32u - d)));
        if (rem > half_ || (rem == half_ && (q.x & 1u) != 0u)) q = add64(q, uvec2(1u, 0u));
    }
    int eu = ex + p.ek + int(d) + 52; // the double's exponent: q in [2^52, 2^53]
    if (q.y == 0x200000u) q = uvec2(0u, 0x100000u), eu++;
    // round q to the float: 24 bits, fewer below the normal range
    int drop = 29 + (eu < -126 ? -126 - eu : 0);
    if (drop > 54) return sign;
    uint r = shr64_rne(q, uint(drop)).x;
    if (eu < -126) return sign | r; // a carry to 2^23 makes the smallest normal: right
    if (eu > 127) return sign | 0x7f800000u;
    uint bits = (uint(eu + 126) << 23) + r; // r in [2^23, 2^24]: the carry lands in the exponent
    return sign | min(bits, 0x7f800000u);
}

void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint xb = x[p.x0 + i];
    if (p.keep_all != 0u) {
        y[p.y0 + i] = xb;
        return;
    }
    uvec2 hseed = hash64(p.seed ^ mul64(run, uvec2(0x7f4a7c15u, 0x9e3779b9u)));
    uvec2 h = hash64(hseed ^ mul64(uvec2(i, 0u), uvec2(0xd192ed03u, 0xd1b54a32u)));
    bool keep = ge64(uvec2((h.x >> 11) | (h.y << 21), h.y >> 11), p.t);
    y[p.y0 + i] = keep ? scaled(xb) : 0u;
}
