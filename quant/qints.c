/* qints.c — ggml's block types other than Q8_0 / Q4_0 as integers
 * (kiln_qints, quant.h): each type's unpack of one block (codes, integer
 * scales and mins, f32 factors), and the dequantization and element
 * decode every such type shares through it. The layouts are ggml's
 * (ggml-common.h); the order of the f32 products is ggml's and gguf-py's
 * dequantization, so the values are theirs bit for bit. */
#include "quant.h"

#include <math.h>

const int8_t kiln__iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float f16(uint16_t h) { return kiln__f16_to_f32(h); }

/* Blocks of 32 with 4 + 1 bit codes: the low nibbles of qs, the fifth bit
 * of element j in bit j of the little-endian u32 qh (qh NULL: none). */
static void nibbles(const uint8_t *qs, const uint8_t *qh, int off, int8_t *q) {
    uint32_t h = qh ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0x0f) | ((h >> j) & 1) << 4) - off);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4) - off);
    }
}

static void blocks32(kiln_qints *o, float d, float dm, bool has_min) {
    *o = (kiln_qints){.d = d, .dm = dm, .n = KILN_QK, .sub = KILN_QK, .has_min = has_min};
    o->sc[0] = o->mn[0] = 1;
}

static void unpack_q2_K(const kiln_block_q2_K *b, kiln_qints *o, bool codes) {
    *o = (kiln_qints){.d = f16(b->d), .dm = -f16(b->dmin), .n = KILN_QK_K, .sub = 16, .has_min = true};
    for (int s = 0; s < 16; s++) o->sc[s] = b->scales[s] & 0x0f, o->mn[s] = b->scales[s] >> 4;
    /* two halves of 128: byte l of the half's 32 holds elements l, l + 32,
     * l + 64, l + 96 in bits 0-1, 2-3, 4-5, 6-7 */
    for (int e = 0; codes && e < KILN_QK_K; e++)
        o->q[e] = (int8_t)((b->qs[e / 128 * 32 + e % 32] >> (2 * (e % 128 / 32))) & 3);
}

static void unpack_q3_K(const kiln_block_q3_K *b, kiln_qints *o, bool codes) {
    *o = (kiln_qints){.d = f16(b->d), .n = KILN_QK_K, .sub = 16};
    for (int s = 0; s < 16; s++) {
        int lo = s < 8 ? b->scales[s] & 0x0f : b->scales[s - 8] >> 4, hi = (b->scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        o->sc[s] = (int16_t)((lo | hi << 4) - 32);
    }
    /* the low two bits as Q2_K's; the third in bit e % 256 / 32 of
     * hmask[e % 32], set meaning no -4 */
    for (int e = 0; codes && e < KILN_QK_K; e++) {
        int lo = (b->qs[e / 128 * 32 + e % 32] >> (2 * (e % 128 / 32))) & 3;
        o->q[e] = (int8_t)(lo - ((b->hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4));
    }
}

static void unpack_q45_K(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t d, uint16_t dmin,
                         kiln_qints *o, bool codes) {
    *o = (kiln_qints){.d = f16(d), .dm = -f16(dmin), .n = KILN_QK_K, .sub = 32, .has_min = true};
    for (int j = 0; j < 8; j++) {
        int sc, m;
        kiln__scale_min_k4(j, scales, &sc, &m);
        o->sc[j] = (int16_t)sc, o->mn[j] = (int16_t)m;
    }
    /* four runs of 64: the low nibbles of 32 bytes, then their high ones;
     * Q5_K's fifth bit of element e in bit e / 32 of qh[e % 32] */
    for (int e = 0; codes && e < KILN_QK_K; e++) {
        int c = qs[e / 64 * 32 + e % 32] >> (4 * (e % 64 / 32)) & 0x0f;
        o->q[e] = (int8_t)(c | (qh ? (qh[e % 32] >> (e / 32) & 1) << 4 : 0));
    }
}

static void unpack_q6_K(const kiln_block_q6_K *b, kiln_qints *o, bool codes) {
    *o = (kiln_qints){.d = f16(b->d), .n = KILN_QK_K, .sub = 16};
    for (int s = 0; s < 16; s++) o->sc[s] = b->scales[s];
    /* two halves of 128, each from 64 bytes of ql and 32 of qh: element
     * l + 32 r of a half takes ql[l + 32 (r & 1)]'s nibble r / 2 and
     * bits 2r, 2r + 1 of qh[l] */
    for (int e = 0; codes && e < KILN_QK_K; e++) {
        int h = e / 128, r = e % 128 / 32, l = e % 32;
        int lo = b->ql[64 * h + l + 32 * (r & 1)] >> (4 * (r / 2)) & 0x0f, hi = b->qh[32 * h + l] >> (2 * r) & 3;
        o->q[e] = (int8_t)((lo | hi << 4) - 32);
    }
}

static void unpack_iq4(const uint8_t *qs, int nsub, kiln_qints *o) {
    for (int s = 0; s < nsub; s++)
        for (int j = 0; j < 16; j++) {
            o->q[32 * s + j] = kiln__iq4nl_values[qs[16 * s + j] & 0x0f];
            o->q[32 * s + j + 16] = kiln__iq4nl_values[qs[16 * s + j] >> 4];
        }
}

/* Block i of t as integers, its codes q only when codes. */
static bool unpack(kiln_dtype t, const void *blocks, int64_t i, kiln_qints *o, bool codes) {
    switch (t) {
    case KILN_Q4_1: {
        const kiln_block_q4_1 *b = (const kiln_block_q4_1 *)blocks + i;
        blocks32(o, f16(b->d), f16(b->m), true);
        nibbles(b->qs, NULL, 0, o->q);
        return true;
    }
    case KILN_Q5_0: {
        const kiln_block_q5_0 *b = (const kiln_block_q5_0 *)blocks + i;
        blocks32(o, f16(b->d), 0.0f, false);
        nibbles(b->qs, b->qh, 16, o->q);
        return true;
    }
    case KILN_Q5_1: {
        const kiln_block_q5_1 *b = (const kiln_block_q5_1 *)blocks + i;
        blocks32(o, f16(b->d), f16(b->m), true);
        nibbles(b->qs, b->qh, 0, o->q);
        return true;
    }
    case KILN_Q8_1: {
        const kiln_block_q8_1 *b = (const kiln_block_q8_1 *)blocks + i;
        blocks32(o, f16(b->d), 0.0f, false);
        memcpy(o->q, b->qs, KILN_QK);
        return true;
    }
    case KILN_Q2_K: unpack_q2_K((const kiln_block_q2_K *)blocks + i, o, codes); return true;
    case KILN_Q3_K: unpack_q3_K((const kiln_block_q3_K *)blocks + i, o, codes); return true;
    case KILN_Q4_K: {
        const kiln_block_q4_K *b = (const kiln_block_q4_K *)blocks + i;
        unpack_q45_K(b->scales, b->qs, NULL, b->d, b->dmin, o, codes);
        return true;
    }
    case KILN_Q5_K: {
        const kiln_block_q5_K *b = (const kiln_block_q5_K *)blocks + i;
        unpack_q45_K(b->scales, b->qs, b->qh, b->d, b->dmin, o, codes);
        return true;
    }
    case KILN_Q6_K: unpack_q6_K((const kiln_block_q6_K *)blocks + i, o, codes); return true;
    case KILN_Q8_K: {
        const kiln_block_q8_K *b = (const kiln_block_q8_K *)blocks + i;
        *o = (kiln_qints){.d = b->d, .n = KILN_QK_K, .sub = 16};
        for (int s = 0; s < 16; s++) o->sc[s] = 1;
        memcpy(o->q, b->qs, KILN_QK_K);
        return true;
    }
    case KILN_IQ4_NL: {
        const kiln_block_iq4_nl *b = (const kiln_block_iq4_nl *)blocks + i;
        blocks32(o, f16(b->d), 0.0f, false);
        unpack_iq4(b->qs, 1, o);
        return true;
    }
    case KILN_IQ4_XS: {
        const kiln_block_iq4_xs *b = (const kiln_block_iq4_xs *)blocks + i;
        *o = (kiln_qints){.d = f16(b->d), .n = KILN_QK_K, .sub = 32};
        for (int s = 0; s < 8; s++)
            o->sc[s] = (int16_t)((((b->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | ((b->scales_h >> (2 * s)) & 3) << 4) - 32);
        if (codes) unpack_iq4(b->qs, 8, o);
        return true;
    }
    default: return false;
    }
}

bool kiln__qints_unpack(kiln_dtype t, const void *blocks, int64_t i, kiln_qints *o) {
    return unpack(t, blocks, i, o, true);
}

bool kiln__qints_scales(kiln_dtype t, const void *blocks, int64_t i, kiln_qints *o) {
    return unpack(t, blocks, i, o, false);
}

void kiln__qints_to_f32(kiln_dtype t, const void *blocks, float *y, int64_t n) {
    kiln_qints b;
    for (int64_t i = 0; n > 0 && kiln__qints_unpack(t, blocks, i, &b); i++, n -= b.n, y += b.n)
        for (int s = 0; s < b.n / b.sub; s++) {
            const float dl = b.d * b.sc[s], ml = b.dm * b.mn[s];
            for (int e = s * b.sub; e < (s + 1) * b.sub; e++) y[e] = b.has_min ? dl * b.q[e] + ml : dl * b.q[e];
        }
}

double kiln__qints_get(kiln_dtype t, const void *blocks, int64_t i) {
    kiln_qints b;
    const int64_t blk = kiln__types[t].blck;
    if (!kiln__qints_unpack(t, blocks, i / blk, &b)) return NAN;
    const int e = (int)(i % blk), s = e / b.sub;
    const float dl = b.d * b.sc[s], ml = b.dm * b.mn[s];
    return b.has_min ? dl * b.q[e] + ml : dl * b.q[e];
}
