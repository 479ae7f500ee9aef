/* q4_0.c — Q4_0, ggml's block_q4_0 (GGUF type 2): blocks of 32, an f16
 * scale d = m / -8 where m is the value of largest magnitude (the first
 * such, sign kept), q = min(15, (int8)(x / d + 8.5)) (truncation), element
 * j in the low nibble of byte j and j + 16 in the high nibble; x = d (q - 8).
 * As ggml's quantize_row_q4_0_ref: x times the f32 reciprocal of the
 * unrounded d. The most negative multiple of d maps to q 0, so the value m
 * itself comes back exactly (up to d's f16 rounding). The dtype's row of
 * the traits table is registered here, at load. */
#include "quant.h"

#include <math.h>

void kiln__quantize_q4_0_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q4_0 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK4_0; b++, x += KILN_QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < KILN_QK4_0; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        y[b].d = kiln__f32_to_f16(d);
        for (int j = 0; j < KILN_QK4_0 / 2; j++) {
            int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + KILN_QK4_0 / 2] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[b].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void kiln__dequantize_q4_0_ref(const void *blocks, float *y, int64_t n) {
    const kiln_block_q4_0 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QK4_0; b++, y += KILN_QK4_0) {
        const float d = kiln__f16_to_f32(x[b].d);
        for (int j = 0; j < KILN_QK4_0 / 2; j++) {
            y[j] = (float)((x[b].qs[j] & 0x0f) - 8) * d;
            y[j + KILN_QK4_0 / 2] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

static double get_q4_0(const void *b, int64_t i) {
    const kiln_block_q4_0 *x = (const kiln_block_q4_0 *)b + i / KILN_QK4_0;
    int j = (int)(i % KILN_QK4_0), h = KILN_QK4_0 / 2;
    int q = j < h ? x->qs[j] & 0x0f : x->qs[j - h] >> 4;
    return (float)(q - 8) * kiln__f16_to_f32(x->d);
}

__attribute__((constructor)) static void register_q4_0(void) {
    kiln__dtype_register(KILN_Q4_0, &(kiln_type_traits){.name = "q4_0", .size = sizeof(kiln_block_q4_0),
                                                        .blck = KILN_QK4_0, .row_blck = KILN_QK4_0, .get = get_q4_0,
                                                        .to_f32 = kiln__dequantize_q4_0_ref,
                                                        .from_f32 = kiln__quantize_q4_0_ref, .dot_type = KILN_Q8_0});
}
