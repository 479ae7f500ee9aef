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

bool kiln__qints_unpack(kiln_dtype t, const void *blocks, int64_t i, kiln_qints *o) {
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
    default: return false;
    }
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
