// ew_half.glsl — exact conversions between f32, f16, bf16 and i32 on raw
// bits, the same roundings as core/dtype.c (round to nearest even,
// subnormals kept, f32 -> i32 saturating with NaN -> 0). Working on bits
// keeps them independent of the device's denormal and NaN handling.
#define EW_F32 0u
#define EW_F16 1u
#define EW_BF16 2u
#define EW_I32 3u

uint ew_f32_to_f16(uint x) {
    uint sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xffu) return sign | 0x7c00u | (m != 0u ? 0x200u : 0u);
    int he = int(e) - 127 + 15;
    if (he >= 31) return sign | 0x7c00u;
    if (he <= 0) {
        if (he < -10) return sign;
        m |= 0x800000u;
        uint shift = uint(14 - he);
        uint hm = m >> shift, rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (hm & 1u) != 0u)) hm++;
        return sign | hm;
    }
    uint hm = m >> 13, rem = m & 0x1fffu;
    uint h = sign | (uint(he) << 10) | hm;
    if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u) != 0u)) h++; // may carry into the exponent: correct
    return h;
}

uint ew_f16_to_f32(uint h) {
    uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return sign | 0x7f800000u | (m << 13);
    if (e != 0u) return sign | ((e - 15u + 127u) << 23) | (m << 13);
    if (m == 0u) return sign;
    int s = 10 - findMSB(m); // subnormal: normalize
    return sign | (uint(127 - 15 + 1 - s) << 23) | (((m << s) & 0x3ffu) << 13);
}

uint ew_f32_to_bf16(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u; // quiet NaN
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

uint ew_bf16_to_f32(uint h) { return h << 16; }

// Saturating round to nearest even; NaN -> 0.
uint ew_f32_to_i32(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0u;
    float v = uintBitsToFloat(x);
    if (v >= 2147483648.0) return 0x7fffffffu;
    if (v <= -2147483648.0) return 0x80000000u;
    return uint(int(roundEven(v)));
}

// int -> float rounded to nearest even, on bits (no reliance on the
// device's conversion rounding).
uint ew_i32_to_f32(uint b) {
    int v = int(b);
    if (v == 0) return 0u;
    uint sign = v < 0 ? 0x80000000u : 0u;
    uint m = v < 0 ? uint(-v) : uint(v); // -INT_MIN wraps to 2^31, as wanted
    int msb = findMSB(m);
    if (msb <= 23) return sign | ((uint(msb + 127) << 23) + ((m << (23 - msb)) - 0x800000u));
    uint drop = uint(msb - 23), q = m >> drop, rem = m & ((1u << drop) - 1u), half_ = 1u << (drop - 1u);
    if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) q++; // q may reach 2^24: carries into the exponent
    return sign | ((uint(msb + 127) << 23) + (q - 0x800000u));
}

// Any of the four to f32 bits, and f32 bits to any of them.
uint ew_to_f32(uint dt, uint b) {
    return dt == EW_F16 ? ew_f16_to_f32(b) : dt == EW_BF16 ? ew_bf16_to_f32(b) : dt == EW_I32 ? ew_i32_to_f32(b) : b;
}
uint ew_from_f32(uint dt, uint b) {
    return dt == EW_F16 ? ew_f32_to_f16(b) : dt == EW_BF16 ? ew_f32_to_bf16(b) : dt == EW_I32 ? ew_f32_to_i32(b) : b;
}
