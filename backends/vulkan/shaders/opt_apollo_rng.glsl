// opt_apollo_rng.glsl — core/rng.c's kiln__hash64 and kiln__normal on the
// device, for APOLLO's projector (core/lowrank.h). The 64-bit integers are
// uint pairs (x = low word, y = high word), so no shaderInt64 is needed and
// the hash and uniforms are the CPU's bits. Box-Muller is in double with
// log and cos written here (GLSL has them for float only): each within a
// few ulp of double, so the f32 P the CPU rounds its double to comes out
// the same bits but where the double lies a few ulp of double from a
// rounding boundary of float (about one element in 10^8).

uvec2 u64_add(uvec2 a, uvec2 b) {
    uint c;
    uint lo = uaddCarry(a.x, b.x, c);
    return uvec2(lo, a.y + b.y + c);
}

uvec2 u64_mul(uvec2 a, uvec2 b) { // modulo 2^64
    uint hi, lo;
    umulExtended(a.x, b.x, hi, lo);
    return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}

uvec2 u64_shr(uvec2 a, uint s) { // 0 < s < 32
    return uvec2((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}

uvec2 kiln_hash64(uvec2 x) {
    x = u64_add(x, uvec2(0x7f4a7c15u, 0x9e3779b9u));
    x = u64_mul(x ^ u64_shr(x, 30u), uvec2(0x1ce4e5b9u, 0xbf58476du));
    x = u64_mul(x ^ u64_shr(x, 27u), uvec2(0x133111ebu, 0x94d049bbu));
    return x ^ u64_shr(x, 31u);
}

// kiln__uniform01 with hs = kiln__hash64(seed) (the host hashes it once)
double kiln_uniform01(uvec2 hs, uvec2 counter) {
    uvec2 h = kiln_hash64(hs ^ u64_mul(counter, uvec2(0xd192ed03u, 0xd1b54a32u)));
    // h >> 11 (53 bits) exactly, times 2^-53
    return (double(h.y >> 11u) * 4294967296.0LF + double((h.x >> 11u) | (h.y << 21u))) *
           (1.0LF / 9007199254740992.0LF);
}

// log(x) for a normal x > 0: x = m 2^e, m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(f / (2 + f)) by its series, e ln2 in two parts (fdlibm's)
double kiln_log_d(double x) {
    int e;
    precise double m = frexp(x, e);
    if (m < 0.70710678118654752440LF) {
        m = 2.0LF * m;
        e = e - 1;
    }
    precise double f = m - 1.0LF;
    precise double s = f / (2.0LF + f);
    precise double s2 = s * s;
    precise double sum = 0.0LF;
    [[unroll]] for (int k = 27; k >= 3; k -= 2) sum = (sum + 1.0LF / double(k)) * s2;
    precise double lm = 2.0LF * s + 2.0LF * s * sum;
    precise double de = double(e);
    return de * 6.93147180369123816490e-01LF + (lm + de * 1.90821492927058770002e-10LF);
}

// cos(x) for 0 <= x < 2 pi: r = x - k pi/2 (|r| <= pi/4, Cody-Waite with
// fdlibm's split of pi/2), then the Taylor series of cos r or sin r in
// Horner form (terms to r^22: far below an ulp)
double kiln_cos_d(double x) {
    int k = int(floor(x * 0.63661977236758134308LF + 0.5LF));
    precise double dk = double(k);
    precise double r = (x - dk * 1.57079632673412561417e+00LF) - dk * 6.07710050650619224932e-11LF;
    precise double r2 = r * r;
    precise double c = 1.0LF, s = 1.0LF;
    [[unroll]] for (int j = 11; j >= 1; j--) {
        c = 1.0LF - r2 * c / double((2 * j) * (2 * j - 1));
        s = 1.0LF - r2 * s / double((2 * j + 1) * (2 * j));
    }
    s = r * s;
    k = k & 3;
    return k == 0 ? c : k == 1 ? -s : k == 2 ? -c : s;
}

// kiln__normal(seed, counter) with hs = kiln__hash64(seed)
double kiln_normal(uvec2 hs, uint counter) {
    uvec2 c0 = uvec2(2u * counter, counter >> 31u); // 2 counter, 64-bit
    double u1 = kiln_uniform01(hs, c0), u2 = kiln_uniform01(hs, u64_add(c0, uvec2(1u, 0u)));
    if (u1 < 1e-300LF) u1 = 1e-300LF;
    precise double a = 6.283185307179586LF * u2;
    precise double r = sqrt(-2.0LF * kiln_log_d(u1));
    return r * kiln_cos_d(a);
}
