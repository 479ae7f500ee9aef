/* q8_act.c — the activation types of ggml's integer dot products, as
 * dtypes (byte for byte, GGUF types 9 and 15; layouts in quant.h): Q8_1,
 * blocks of 32 as Q8_0 plus s = f16(d * sum of q) (ggml's
 * quantize_row_q8_1_ref), the partner of Q4_1 and Q5_1, and Q8_K, the
 * K types' and IQ4_XS's. x = d q, decoded
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
        for (int j = 0; j < KILN_QK; j++) { /* a code that is not finite is 0, as in Q8_0's */
            const float q = roundf(x[j] * id);
            sum += y[b].qs[j] = q >= -127.0f && q <= 127.0f ? (int8_t)q : 0;
        }
        y[b].d = kiln__f32_to_f16(d);
        y[b].s = kiln__f32_to_f16((float)sum * d);
    }
}

/* Q8_K: one f32 scale per 256, d = -max / 127 with max the value of
 * largest magnitude (ggml's quantize_row_q8_K_ref: q = nearest(x * -127 /
 * max), capped at 127), and the sums of q per 16 for the products' mins. */
void kiln__quantize_q8_K_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q8_K *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < KILN_QK_K; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        memset(&y[b], 0, sizeof y[b]);
        if (!amax) continue;
        const float iscale = -127.0f / max;
        for (int j = 0; j < KILN_QK_K; j++) {
            const int v = kiln__nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
            y[b].bsums[j / 16] = (int16_t)(y[b].bsums[j / 16] + y[b].qs[j]);
        }
        y[b].d = 1 / iscale;
    }
}

KILN_QINTS_CODERS(KILN_Q8_1, q8_1)
KILN_QINTS_CODERS(KILN_Q8_K, q8_K)

__attribute__((constructor)) static void register_q8_act(void) {
    kiln__dtype_register(KILN_Q8_1, &(kiln_type_traits){.name = "q8_1", .size = sizeof(kiln_block_q8_1),
                                                        .blck = KILN_QK, .row_blck = KILN_QK, .get = get_q8_1,
                                                        .to_f32 = to_f32_q8_1,
                                                        .from_f32 = kiln__quantize_q8_1_ref, .dot_type = KILN_Q8_0});
    kiln__dtype_register(KILN_Q8_K, &(kiln_type_traits){.name = "q8_K", .size = sizeof(kiln_block_q8_K),
                                                        .blck = KILN_QK_K, .row_blck = KILN_QK_K, .get = get_q8_K,
                                                        .to_f32 = to_f32_q8_K, .from_f32 = kiln__quantize_q8_K_ref,
                                                        .dot_type = KILN_Q8_K});
}
