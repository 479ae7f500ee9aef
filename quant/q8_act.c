/* q8_act.c — the activation types of ggml's integer dot products, as
 * dtypes (byte for byte, GGUF types 9 and 15; layouts in quant.h): Q8_1,
 * blocks of 32 as Q8_0 plus s = f16(d * sum of q) (ggml's
 * quantize_row_q8_1_ref), the partner of Q4_1 and Q5_1. x = d q, decoded
 * through the unpack (qints.c); as weights their products take Q8_0
 * activations. The dtypes' rows are registered here, at load. */
#include "quant.h"

#include <math.h>

void kiln__quantize_q8_1_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q8_1 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK; b++, x += KILN_QK) {
        float amax = 0.0f;
        for (int j = 0; j < KILN_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < KILN_QK; j++) sum += y[b].qs[j] = (int8_t)roundf(x[j] * id);
        y[b].d = kiln__f32_to_f16(d);
        y[b].s = kiln__f32_to_f16((float)sum * d);
    }
}

KILN_QINTS_CODERS(KILN_Q8_1, q8_1)

__attribute__((constructor)) static void register_q8_act(void) {
    kiln__dtype_register(KILN_Q8_1, &(kiln_type_traits){.name = "q8_1", .size = sizeof(kiln_block_q8_1),
                                                        .blck = KILN_QK, .row_blck = KILN_QK, .get = get_q8_1,
                                                        .to_f32 = to_f32_q8_1,
                                                        .from_f32 = kiln__quantize_q8_1_ref, .dot_type = KILN_Q8_0});
}
