// quant_ggml.glsl — ggml's other block types for quant.glsl: QT 6 + their
// place in kiln_dtype from KILN_Q4_1 (6 Q4_1, 7 Q5_0, 8 Q5_1, 9 Q8_1,
// 10 Q2_K, 11 Q3_K, 12 Q4_K, 13 Q5_K, 14 Q6_K, 15 Q8_K, 16 IQ4_NL,
// 17 IQ4_XS). The decoding of quant/ggml_decode.h (the C the CUDA kernels
// compile, checked against quant/qints.c) in GLSL: element e of the block
// at byte b is (d sc) q, plus (dm mn) where KQ_HAS_MIN, which quant.glsl's
// kq_get computes in that order without fusing. Every block starts at an
// even byte (vk_quant.c checks), so its f16 fields are kq_u16's.

float kq_h(uint b) { return kq_f16(kq_u16(b)); }
int kq_i8(uint b) { return int(kq_byte(b) << 24u) >> 24; }
// ggml's kvalues_iq4nl as bytes, four to a word (no array: see quant.glsl's NF4 table)
int kq_iq4(uint c) {
    uint w = c < 8u ? (c < 4u ? 0xbfad9881u : 0xf6eaddcfu) : (c < 12u ? 0x26190d01u : 0x71594535u);
    return bitfieldExtract(int(w), int((c & 3u) * 8u), 8);
}
// Q4_K / Q5_K's 6-bit scale (mn false) or min of sub-block j, 12 bytes at s
uint kq_k4(uint s, uint j, bool mn) {
    if (j < 4u) return kq_byte(s + j + (mn ? 4u : 0u)) & 63u;
    uint a = kq_byte(s + j + 4u);
    return mn ? (a >> 4u) | (kq_byte(s + j) >> 6u) << 4u : (a & 15u) | (kq_byte(s + j - 4u) >> 6u) << 4u;
}

float kq_d(uint b) {
#if QT == 10
    return kq_h(b + 80u);
#elif QT == 11
    return kq_h(b + 108u);
#elif QT == 14
    return kq_h(b + 208u);
#elif QT == 15
    return uintBitsToFloat(kq_u32(b));
#else
    return kq_h(b);
#endif
}

// the factor of the mins: m for Q4_1 / Q5_1, -dmin for the K types
float kq_dm(uint b) {
#if QT == 6 || QT == 8
    return kq_h(b + 2u);
#elif QT == 10
    return -kq_h(b + 82u);
#else
    return -kq_h(b + 2u);
#endif
}

// sub-block s's integer scale and min
int kq_isc(uint b, uint s) {
#if QT == 10
    return int(kq_byte(b + s) & 15u);
#elif QT == 11
    uint lo = s < 8u ? kq_byte(b + 96u + s) & 15u : kq_byte(b + 88u + s) >> 4u;
    uint hi = (kq_byte(b + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
    return int(lo | hi << 4u) - 32;
#elif QT == 12 || QT == 13
    return int(kq_k4(b + 4u, s, false));
#elif QT == 14
    return kq_i8(b + 192u + s);
#elif QT == 17
    uint lo = (kq_byte(b + 4u + s / 2u) >> (4u * (s % 2u))) & 15u, hi = (kq_u16(b + 2u) >> (2u * s)) & 3u;
    return int(lo | hi << 4u) - 32;
#else
    return 1;
#endif
}
int kq_imn(uint b, uint s) {
#if QT == 10
    return int(kq_byte(b + s) >> 4u);
#elif QT == 12 || QT == 13
    return int(kq_k4(b + 4u, s, true));
#else
    return 1;
#endif
}

// Codes e .. e+3 (e a multiple of 4) as f32: in every layout four
// neighbouring codes are the same field (nibble, bit pair or bit) of four
// neighbouring bytes, so each field is one word, split into its bytes.
// The matmul takes them four at a time, dequantize one (kq_code).
ivec4 kq_bytes4(uint w) { return ivec4(uvec4(w, w >> 8u, w >> 16u, w >> 24u) & 0xffu); }
vec4 kq_q4(uint b, uint e) {
#if QT == 9 || QT == 15
    int w = int(kq_u32(b + 4u + e));
    return vec4(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8), bitfieldExtract(w, 16, 8), bitfieldExtract(w, 24, 8));
#elif QT == 6 || QT == 7 || QT == 8 || QT == 16 || QT == 17
    // 16 bytes of nibbles per 32 codes: j low nibble of byte j, j + 16 high
    uint j = e % 32u, c = b + (QT == 6 ? 4u : QT == 7 ? 6u : QT == 8 ? 8u : QT == 16 ? 2u : 8u + 16u * (e / 32u));
    uint q = (kq_u32(c + (j & 15u)) >> (j < 16u ? 0u : 4u)) & 0x0f0f0f0fu;
#if QT == 7 || QT == 8
    uint h = kq_u32(b + (QT == 7 ? 2u : 4u)) >> j; // the fifth bits of codes j .. j+3
    q |= ((h & 1u) | (h & 2u) << 7u | (h & 4u) << 14u | (h & 8u) << 21u) << 4u;
#endif
    ivec4 v = kq_bytes4(q);
#if QT >= 16
    return vec4(kq_iq4(uint(v.x)), kq_iq4(uint(v.y)), kq_iq4(uint(v.z)), kq_iq4(uint(v.w)));
#else
    return vec4(v - (QT == 7 ? 16 : 0));
#endif
#elif QT == 10 || QT == 11
    // two halves of 128: byte l of the half's 32 holds elements l, l + 32, l + 64, l + 96
    uint q = (kq_u32(b + (QT == 10 ? 16u : 32u) + e / 128u * 32u + e % 32u) >> (2u * (e % 128u / 32u))) & 0x03030303u;
#if QT == 10
    return vec4(kq_bytes4(q));
#else
    uint h = (kq_u32(b + e % 32u) >> (e / 32u)) & 0x01010101u; // set: no -4
    return vec4(kq_bytes4(q) - 4 * (1 - kq_bytes4(h)));
#endif
#elif QT == 12 || QT == 13
    // four runs of 64: the low nibbles of 32 bytes, then their high ones; Q5_K's
    // fifth bit of element e in bit e / 32 of qh[e % 32]
    uint q = (kq_u32(b + (QT == 12 ? 16u : 48u) + e / 64u * 32u + e % 32u) >> (4u * (e % 64u / 32u))) & 0x0f0f0f0fu;
#if QT == 13
    q |= ((kq_u32(b + 16u + e % 32u) >> (e / 32u)) & 0x01010101u) << 4u;
#endif
    return vec4(kq_bytes4(q));
#else // Q6_K: element l + 32 r of half h: ql[64 h + l + 32 (r & 1)]'s nibble r / 2, bits 2r, 2r + 1 of qh[32 h + l]
    uint h = e / 128u, r = e % 128u / 32u, l = e % 32u;
    uint lo = (kq_u32(b + 64u * h + l + 32u * (r & 1u)) >> (4u * (r / 2u))) & 0x0f0f0f0fu;
    uint hi = (kq_u32(b + 128u + 32u * h + l) >> (2u * r)) & 0x03030303u;
    return vec4(kq_bytes4(lo | hi << 4u) - 32);
#endif
}
