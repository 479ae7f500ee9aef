/* q8_0.c — Q8_0, ggml's block_q8_0 (GGUF type 8): blocks of 32, an f16
 * scale d = absmax / 127 and 32 int8 q = round(x / d), as ggml's
 * quantize_row_q8_0_ref (x times the f32 reciprocal of the unrounded d,
 * roundf: halves away from zero; the stored d is d rounded to f16). The
 * dtype's row of the traits table is registered here, at load. */
#include "quant.h"

#include <math.h>

void kiln__quantize_q8_0_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q8_0 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK8_0; b++, x += KILN_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < KILN_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = kiln__f32_to_f16(d);
        for (int j = 0; j < KILN_QK8_0; j++) {
            /* a code that is not finite (x NaN or infinite, or id infinite for
             * a tiny block) is 0, as x86's conversion gives: C leaves it undefined */
            const float q = roundf(x[j] * id);
            y[b].qs[j] = q >= -127.0f && q <= 127.0f ? (int8_t)q : 0;
        }
    }
}

void kiln__dequantize_q8_0_ref(const void *blocks, float *y, int64_t n) {
    const kiln_block_q8_0 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QK8_0; b++, y += KILN_QK8_0) {
        const float d = kiln__f16_to_f32(x[b].d);
        for (int j = 0; j < KILN_QK8_0; j++) y[j] = (float)x[b].qs[j] * d;
    }
}

static double get_q8_0(const void *b, int64_t i) {
    const kiln_block_q8_0 *x = (const kiln_block_q8_0 *)b + i / KILN_QK8_0;
    return kiln__f16_to_f32(x->d) * (float)x->qs[i % KILN_QK8_0];
}

__attribute__((constructor)) static void register_q8_0(void) {
    kiln__dtype_register(KILN_Q8_0, &(kiln_type_traits){.name = "q8_0", .size = sizeof(kiln_block_q8_0),
                                                        .blck = KILN_QK8_0, .row_blck = KILN_QK8_0, .get = get_q8_0,
                                                        .to_f32 = kiln__dequantize_q8_0_ref,
                                                        .from_f32 = kiln__quantize_q8_0_ref, .dot_type = KILN_Q8_0});
}
