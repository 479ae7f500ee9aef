// quant.glsl — reading kiln's quantized blocks (layouts in quant/quant.h)
// from a storage buffer declared by the includer as `uint qw[]`. The
// blocks are 34, 18, 36, 8456 bytes or (GQ) 11 to 67, so their f16/f32
// fields and codes sit at any byte offset: everything is read as 32-bit
// words and the bytes picked out with shifts, which needs no 8- or 16-bit
// storage feature and works on every device. A read touches only words
// that hold a byte of the block it decodes, so none falls past the end of
// the tensor's binding. Byte offsets count from the binding's start
// (kiln__vk_base gives a quantized tensor's first byte there).
//
// Included after QT (1 Q8_0, 2 Q4_0, 3 NF4, 4 NF4_DQ, 5 the GQ dtypes with
// GQ_BITS and GQ_G: their blocks are 3 + GQ_G * GQ_BITS / 8 bytes, odd, so
// a block and its f16 scale start at any byte; 6-17 ggml's other types,
// quant_ggml.glsl) and, for NF4_DQ,
// KQ_MAP_BINDING: the binding of the signed dynamic map (256 f32,
// kiln__dynamic_map) that its absmax codes index. Element j of the
// block at byte b is kq_code(b, j) * kq_scale(b, j): the same single f32
// multiply as the CPU's dequantization (quant/*.c), so equal bit for bit
// (plus kq_min(b, j) for ggml's types with a min);
// NF4_DQ's absmax (map * absmax2 + offset) and that sum are `precise` so
// no device fuses them into an fma the CPU does not do.
#include "quant_tables.glsl"
#if QT == 4
layout(std430, binding = KQ_MAP_BINDING) readonly buffer M { float kq_map[]; };
#endif

#if QT == 1
const uint KQ_BLCK = 32u, KQ_BYTES = 34u, KQ_SUB = 32u; // KQ_SUB: elements under one scale
#elif QT == 2
const uint KQ_BLCK = 32u, KQ_BYTES = 18u, KQ_SUB = 32u;
#elif QT == 3
const uint KQ_BLCK = 64u, KQ_BYTES = 36u, KQ_SUB = 64u;
#elif QT == 4
const uint KQ_BLCK = 16384u, KQ_BYTES = 8456u, KQ_SUB = 64u;
#elif QT == 5
const uint KQ_BLCK = uint(GQ_G), KQ_BYTES = 3u + KQ_BLCK / 32u * 4u * uint(GQ_BITS), KQ_SUB = KQ_BLCK;
#elif QT == 6 || QT == 7 || QT == 8 || QT == 9 || QT == 16 // Q4_1 Q5_0 Q5_1 Q8_1 IQ4_NL: blocks of 32
const uint KQ_BLCK = 32u, KQ_BYTES = QT == 6 ? 20u : QT == 7 ? 22u : QT == 8 ? 24u : QT == 9 ? 36u : 18u, KQ_SUB = 32u;
#elif QT == 10 || QT == 11 || QT == 14 // Q2_K Q3_K Q6_K: 16 sub-blocks of 16
const uint KQ_BLCK = 256u, KQ_BYTES = QT == 10 ? 84u : QT == 11 ? 110u : 210u, KQ_SUB = 16u;
#elif QT == 15 // Q8_K: one f32 d
const uint KQ_BLCK = 256u, KQ_BYTES = 292u, KQ_SUB = 256u;
#else // Q4_K Q5_K IQ4_XS: 8 sub-blocks of 32
const uint KQ_BLCK = 256u, KQ_BYTES = QT == 12 ? 144u : QT == 13 ? 176u : 136u, KQ_SUB = 32u;
#endif
#if QT == 6 || QT == 8 || QT == 10 || QT == 12 || QT == 13
#define KQ_HAS_MIN // x = (d sc) q + (dm mn)
#endif

// The 4 bytes at byte offset b, little-endian, b at any alignment (the
// second word is read only when the bytes reach into it).
uint kq_u32(uint b) {
    uint w = b >> 2u, sh = (b & 3u) * 8u;
    return sh == 0u ? qw[w] : (qw[w] >> sh) | (qw[w + 1u] << (32u - sh));
}
uint kq_byte(uint b) { return (qw[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu; }
// an f16 at an even byte offset (ggml's d: every block starts even)
uint kq_u16(uint b) { return (qw[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu; }

// IEEE half to f32 exactly as kiln__f16_to_f32 (core/dtype.c): subnormals
// kept, NaN payloads moved up, whatever the device does with halves.
float kq_f16(uint h) {
    uint sign = (h & 0x8000u) << 16u, e = (h >> 10u) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return uintBitsToFloat(sign | 0x7f800000u | (m << 13u));
    if (e != 0u) return uintBitsToFloat(sign | ((e + 112u) << 23u) | (m << 13u));
    float v = float(m) * uintBitsToFloat(0x33800000u); // m * 2^-24, exact
    return sign != 0u ? -v : v;
}

#if QT >= 6
#include "quant_ggml.glsl"
#endif

#ifdef KQ_NF4_SHARED
// The table in shared memory (kq_nf4_load() fills it): lavapipe makes a
// dynamically indexed constant array a private copy per invocation, which
// costs the GEMV 4x there.
shared float kq_nf4s[16];
void kq_nf4_load() {
    if (gl_LocalInvocationIndex < 16u) kq_nf4s[gl_LocalInvocationIndex] = uintBitsToFloat(KQ_NF4_BITS[gl_LocalInvocationIndex]);
    barrier();
}
float kq_nf4(uint code) { return kq_nf4s[code]; }
#else
float kq_nf4(uint code) { return uintBitsToFloat(KQ_NF4_BITS[code]); }
#endif

// The scale of element j of the block at b (the same for KQ_SUB elements).
float kq_scale(uint b, uint j) {
#if QT == 1 || QT == 2
    return kq_f16(kq_u16(b));
#elif QT == 3
    return uintBitsToFloat(kq_u32(b));
#elif QT == 5
    return kq_f16(kq_u32(b) & 0xffffu); // at any byte: not kq_u16
#elif QT >= 6
    return kq_d(b) * float(kq_isc(b, j / KQ_SUB));
#else
    precise float a = kq_map[kq_byte(b + 8u + j / 64u)] * uintBitsToFloat(kq_u32(b + 4u));
    precise float s = a + uintBitsToFloat(kq_u32(b));
    return s;
#endif
}

// Element j's code as the f32 the scale multiplies.
float kq_code(uint b, uint j) {
#if QT == 1
    return float(int(kq_byte(b + 2u + j) << 24u) >> 24);
#elif QT == 2
    uint q = kq_byte(b + 2u + (j & 15u));
    return float(int(j < 16u ? q & 15u : q >> 4u) - 8);
#elif QT == 5
    // q - zero (the CPU's (int)q - (int)zero, exact in f32) of code j % 32
    // of chunk j / 32 (quant/quant.h's GQ layout)
    uint c = b + 3u + (j / 32u) * (4u * uint(GQ_BITS)), jj = j & 31u;
#if GQ_BITS == 4
    uint q = (kq_byte(c + (jj & 15u)) >> ((jj & 16u) >> 2u)) & 15u; // high nibble from 16
#else
    uint q = (kq_byte(c + (jj & 7u)) >> (2u * (jj >> 3u))) & 3u;
#if GQ_BITS == 3
    q |= ((kq_byte(c + 8u + (jj >> 3u)) >> (jj & 7u)) & 1u) << 2u;
#endif
#endif
    return float(int(q) - int(kq_byte(b + 2u)));
#elif QT >= 6
    return kq_q4(b, j & ~3u)[j & 3u];
#else
    uint q = kq_byte(b + (QT == 3 ? 4u : 264u) + j / 2u);
    return kq_nf4((j & 1u) == 0u ? q >> 4u : q & 15u);
#endif
}

#ifdef KQ_HAS_MIN
// The min of element j's sub-block (dm mn).
float kq_min(uint b, uint j) { return kq_dm(b) * float(kq_imn(b, j / KQ_SUB)); }
float kq_get(uint b, uint j) {
    precise float y = kq_scale(b, j) * kq_code(b, j) + kq_min(b, j);
    return y;
}
#else
float kq_get(uint b, uint j) { return kq_code(b, j) * kq_scale(b, j); }
#endif
