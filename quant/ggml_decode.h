/* ggml_decode.h — element e of one block of ggml's other block types
 * (Q4_1 .. IQ4_XS, quant/quant.h) from its bytes, as plain inline
 * functions that C and CUDA (backends/cuda/k_quant.cu: no kiln internals
 * there) both compile. The value is quant/qints.c's, bit for bit:
 * (d sc) q, plus (dm mn) for the types with a min, f32 products in that
 * order, never fused (the CUDA build has -fmad=false);
 * tests/test_ggml_decode.c checks every type against the reference on
 * random bytes. Bytes are read one at a time: a block starts at any
 * alignment. The Vulkan shaders carry the same decoding in GLSL
 * (backends/vulkan/shaders/quant_ggml.glsl).
 *
 *     int k = KILN_QD_Q4_K;                       // kiln dtype - KILN_Q4_1
 *     const uint8_t *blk = w + (i / kiln__qd_blck(k)) * kiln__qd_bytes(k);
 *     float x = kiln__qd_get(k, blk, (int)(i % kiln__qd_blck(k)));
 */
#ifndef KILN_GGML_DECODE_H
#define KILN_GGML_DECODE_H
#include <stdint.h>

#ifdef __CUDACC__
#define KILN_QD_FN __host__ __device__ static inline
#else
#define KILN_QD_FN static inline
#endif

/* The types in kiln_dtype's order from KILN_Q4_1 (include/kiln_core.h). */
enum {
    KILN_QD_Q4_1, KILN_QD_Q5_0, KILN_QD_Q5_1, KILN_QD_Q8_1, KILN_QD_Q2_K, KILN_QD_Q3_K,
    KILN_QD_Q4_K, KILN_QD_Q5_K, KILN_QD_Q6_K, KILN_QD_Q8_K, KILN_QD_IQ4_NL, KILN_QD_IQ4_XS, KILN_QD_COUNT
};

/* Elements and bytes of a block of type k. */
KILN_QD_FN int kiln__qd_blck(int k) {
    return k <= KILN_QD_Q8_1 || k == KILN_QD_IQ4_NL ? 32 : 256;
}
KILN_QD_FN int kiln__qd_bytes(int k) {
    switch (k) {
    case KILN_QD_Q4_1: return 20;
    case KILN_QD_Q5_0: return 22;
    case KILN_QD_Q5_1: return 24;
    case KILN_QD_Q8_1: return 36;
    case KILN_QD_Q2_K: return 84;
    case KILN_QD_Q3_K: return 110;
    case KILN_QD_Q4_K: return 144;
    case KILN_QD_Q5_K: return 176;
    case KILN_QD_Q6_K: return 210;
    case KILN_QD_Q8_K: return 292;
    case KILN_QD_IQ4_NL: return 18;
    default: return 136; /* IQ4_XS */
    }
}

KILN_QD_FN float kiln__qd_bits(uint32_t u) {
    union { uint32_t u; float f; } v;
    v.u = u;
    return v.f;
}
KILN_QD_FN uint32_t kiln__qd_u16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
KILN_QD_FN uint32_t kiln__qd_u32(const uint8_t *p) { return kiln__qd_u16(p) | kiln__qd_u16(p + 2) << 16; }

/* An IEEE half as f32, as kiln__f16_to_f32 (core/dtype.c) */
KILN_QD_FN float kiln__qd_f16(const uint8_t *p) {
    uint32_t h = kiln__qd_u16(p), sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return kiln__qd_bits(sign | 0x7f800000u | m << 13);
    if (e) return kiln__qd_bits(sign | (e + 112u) << 23 | m << 13);
    float v = (float)m * 0x1p-24f; /* exact */
    return sign ? -v : v;
}

/* ggml's kvalues_iq4nl (-127 .. 113) as bytes, four to a word: no table,
 * which CUDA device code could not read from a header. */
KILN_QD_FN int kiln__qd_iq4(int c) {
    uint32_t w = c < 8 ? (c < 4 ? 0xbfad9881u : 0xf6eaddcfu) : (c < 12 ? 0x26190d01u : 0x71594535u);
    return (int)(int8_t)(uint8_t)(w >> (8 * (c & 3)));
}

/* Code j (< 32) of 16 bytes of nibbles: j low nibble of byte j, j + 16 high. */
KILN_QD_FN int kiln__qd_nib(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }

/* Q4_K / Q5_K's 6-bit scale and min of sub-block j (kiln__scale_min_k4). */
KILN_QD_FN int kiln__qd_k4(const uint8_t *s, int j, int min) {
    if (j < 4) return s[j + 4 * min] & 63;
    return min ? (s[j + 4] >> 4) | (s[j] >> 6) << 4 : (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
}

/* Element e of the block at b. */
KILN_QD_FN float kiln__qd_get(int k, const uint8_t *b, int e) {
    float d = 0, dm = 0;
    int sc = 1, mn = 0, q = 0, has_min = 0;
    switch (k) {
    case KILN_QD_Q4_1:
    case KILN_QD_Q5_1:
        d = kiln__qd_f16(b), dm = kiln__qd_f16(b + 2), mn = 1, has_min = 1;
        q = k == KILN_QD_Q4_1 ? kiln__qd_nib(b + 4, e)
                              : kiln__qd_nib(b + 8, e) | (int)((kiln__qd_u32(b + 4) >> e) & 1) << 4;
        break;
    case KILN_QD_Q5_0:
        d = kiln__qd_f16(b);
        q = (kiln__qd_nib(b + 6, e) | (int)((kiln__qd_u32(b + 2) >> e) & 1) << 4) - 16;
        break;
    case KILN_QD_Q8_1: d = kiln__qd_f16(b), q = (int8_t)b[4 + e]; break;
    case KILN_QD_Q8_K: d = kiln__qd_bits(kiln__qd_u32(b)), q = (int8_t)b[4 + e]; break;
    case KILN_QD_IQ4_NL: d = kiln__qd_f16(b), q = kiln__qd_iq4(kiln__qd_nib(b + 2, e)); break;
    case KILN_QD_Q2_K:
    case KILN_QD_Q3_K: {
        /* two halves of 128: byte l of the half's 32 holds elements l, l + 32,
         * l + 64, l + 96 in bits 0-1, 2-3, 4-5, 6-7 */
        const int s = e / 16, sh = 2 * (e % 128 / 32), at = e / 128 * 32 + e % 32;
        if (k == KILN_QD_Q2_K) {
            d = kiln__qd_f16(b + 80), dm = -kiln__qd_f16(b + 82), has_min = 1;
            sc = b[s] & 0x0f, mn = b[s] >> 4, q = (b[16 + at] >> sh) & 3;
        } else { /* hmask[e % 32] bit e / 32 set: no -4 */
            const uint8_t *scales = b + 96;
            int lo = s < 8 ? scales[s] & 0x0f : scales[s - 8] >> 4, hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            d = kiln__qd_f16(b + 108), sc = (lo | hi << 4) - 32;
            q = ((b[32 + at] >> sh) & 3) - ((b[e % 32] >> (e / 32)) & 1 ? 0 : 4);
        }
        break;
    }
    case KILN_QD_Q4_K:
    case KILN_QD_Q5_K: {
        /* four runs of 64: the low nibbles of 32 bytes, then their high ones */
        const uint8_t *qs = b + (k == KILN_QD_Q4_K ? 16 : 48);
        d = kiln__qd_f16(b), dm = -kiln__qd_f16(b + 2), has_min = 1;
        sc = kiln__qd_k4(b + 4, e / 32, 0), mn = kiln__qd_k4(b + 4, e / 32, 1);
        q = (qs[e / 64 * 32 + e % 32] >> (4 * (e % 64 / 32))) & 0x0f;
        if (k == KILN_QD_Q5_K) q |= ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
        break;
    }
    case KILN_QD_Q6_K: {
        /* element l + 32 r of half h: ql[64 h + l + 32 (r & 1)]'s nibble r / 2,
         * bits 2r, 2r + 1 of qh[32 h + l] */
        const int h = e / 128, r = e % 128 / 32, l = e % 32;
        int lo = (b[64 * h + l + 32 * (r & 1)] >> (4 * (r / 2))) & 0x0f, hi = (b[128 + 32 * h + l] >> (2 * r)) & 3;
        d = kiln__qd_f16(b + 208), sc = (int8_t)b[192 + e / 16], q = (lo | hi << 4) - 32;
        break;
    }
    default: { /* IQ4_XS: 8 sub-blocks of 32, 6-bit ls - 32 */
        const int s = e / 32;
        d = kiln__qd_f16(b);
        sc = (((b[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | (int)((kiln__qd_u16(b + 2) >> (2 * s)) & 3) << 4) - 32;
        q = kiln__qd_iq4(kiln__qd_nib(b + 8 + 16 * s, e % 32));
        break;
    }
    }
    const float dl = d * (float)sc;
    if (!has_min) return dl * (float)q;
    const float ml = dm * (float)mn;
    return dl * (float)q + ml;
}

#endif
