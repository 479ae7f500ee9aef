/* q4_1_q5.c — Q4_1, Q5_0 and Q5_1, ggml's blocks of 32 with 4 and 5 bit
 * codes (GGUF types 3, 6, 7; layouts in quant.h), quantized as ggml's
 * quantize_row_q4_1_ref / _q5_0_ref / _q5_1_ref (byte for byte: the same
 * f32 operations), decoded through their unpack (qints.c). Q4_1 / Q5_1:
 * d = (max - min) / 15 (31), m = min, q = (x - min) / d + 0.5 truncated;
 * Q5_0: d = m / -16 with m the value of largest magnitude (as Q4_0),
 * q = x / d + 16.5 truncated, capped at 31. The dtypes' rows are
 * registered here, at load; their products take Q8_1 (Q4_1, Q5_1) and
 * Q8_0 (Q5_0) activations, as ggml's. */
#include "quant.h"

#include <float.h>
#include <math.h>

/* The five-bit codes q[32] into qs and qh (bit 4 of element j at bit j). */
static void pack5(const uint8_t *q, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
        h |= (uint32_t)(q[j] >> 4 & 1) << j | (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
    }
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(h >> (8 * i));
}

/* Q4_1 / Q5_1's codes of one block: d, min and q[32] for 2^bits - 1 steps;
 * Q4_1 caps q at 15, Q5_1 does not (its q cannot pass 31). */
static void affine(const float *x, int bits, uint16_t *d16, uint16_t *m16, uint8_t *q) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < KILN_QK; j++) { /* comparisons, as ggml's: -0 does not replace 0 */
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)((1 << bits) - 1), id = d ? 1.0f / d : 0.0f;
    *d16 = kiln__f32_to_f16(d);
    *m16 = kiln__f32_to_f16(min);
    for (int j = 0; j < KILN_QK; j++) {
        const float v = (x[j] - min) * id + 0.5f;
        q[j] = bits == 4 ? (uint8_t)((int8_t)v < 15 ? (int8_t)v : 15) : (uint8_t)v;
    }
}

void kiln__quantize_q4_1_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q4_1 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK; b++, x += KILN_QK) {
        uint8_t q[KILN_QK];
        affine(x, 4, &y[b].d, &y[b].m, q);
        for (int j = 0; j < 16; j++) y[b].qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}

void kiln__quantize_q5_1_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q5_1 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK; b++, x += KILN_QK) {
        uint8_t q[KILN_QK];
        affine(x, 5, &y[b].d, &y[b].m, q);
        pack5(q, y[b].qs, y[b].qh);
    }
}

void kiln__quantize_q5_0_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q5_0 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK; b++, x += KILN_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < KILN_QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        y[b].d = kiln__f32_to_f16(d);
        uint8_t q[KILN_QK];
        for (int j = 0; j < KILN_QK; j++) {
            const int8_t v = (int8_t)(x[j] * id + 16.5f);
            q[j] = (uint8_t)(v < 31 ? v : 31);
        }
        pack5(q, y[b].qs, y[b].qh);
    }
}

KILN_QINTS_CODERS(KILN_Q4_1, q4_1)
KILN_QINTS_CODERS(KILN_Q5_0, q5_0)
KILN_QINTS_CODERS(KILN_Q5_1, q5_1)

__attribute__((constructor)) static void register_q4_1_q5(void) {
#define ROW(T, t, partner)                                                                                  \
    kiln__dtype_register(T, &(kiln_type_traits){.name = #t, .size = sizeof(kiln_block_##t), .blck = KILN_QK,    \
                                                .row_blck = KILN_QK, .get = get_##t, .to_f32 = to_f32_##t,     \
                                                .from_f32 = kiln__quantize_##t##_ref, .dot_type = partner})
    ROW(KILN_Q4_1, q4_1, KILN_Q8_1);
    ROW(KILN_Q5_0, q5_0, KILN_Q8_0);
    ROW(KILN_Q5_1, q5_1, KILN_Q8_1);
#undef ROW
}
