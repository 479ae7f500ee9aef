/* q6_k.c — Q6_K, ggml's 6-bit super-block of 256 (GGUF type 14; layout in
 * quant.h): 16 sub-blocks of 16, x = d sc (q - 32) with sc int8 and q in
 * [0, 63], quantized as ggml's quantize_row_q6_K_ref (byte for byte: the
 * same search and f32 operations), decoded through its unpack (qints.c).
 * The dtype's row is registered here, at load; its products take Q8_K
 * activations. */
#include "k_quants.h"

#include <math.h>

void kiln__quantize_q6_K_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q6_K *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        int8_t L[KILN_QK_K];
        float scales[16], max_scale = 0.0f, max_abs = 0.0f;
        for (int h = 0; h < 16; h += KILN_KL)
            kiln__make_qx_quants_lanes(16, 32, x + 16 * h, L + 16 * h, scales + h);
        for (int j = 0; j < 16; j++) {
            if (fabsf(scales[j]) > max_abs) max_abs = fabsf(scales[j]), max_scale = scales[j];
        }
        memset(&y[b], 0, sizeof y[b]);
        if (max_abs < 1e-15f) continue; /* all zero */
        const float iscale = -128.0f / max_scale;
        y[b].d = kiln__f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) {
            const int s = kiln__nearest_int(iscale * scales[j]);
            y[b].scales[j] = (int8_t)(s < 127 ? s : 127);
        }
        /* the codes again, for the scales as stored */
        for (int j = 0; j < 16; j++) {
            const float d = kiln__f16_to_f32(y[b].d) * y[b].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) {
                const int q = kiln__nearest_int(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)((q < -32 ? -32 : q > 31 ? 31 : q) + 32);
            }
        }
        /* two halves of 128: element l + 32 r of a half in nibble r / 2 of
         * ql[l + 32 (r & 1)] and bits 2r, 2r + 1 of qh[l] */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *c = L + 128 * h + l;
                y[b].ql[64 * h + l] = (uint8_t)((c[0] & 0x0f) | (c[64] & 0x0f) << 4);
                y[b].ql[64 * h + l + 32] = (uint8_t)((c[32] & 0x0f) | (c[96] & 0x0f) << 4);
                y[b].qh[32 * h + l] = (uint8_t)(c[0] >> 4 | (c[32] >> 4) << 2 | (c[64] >> 4) << 4 | (c[96] >> 4) << 6);
            }
    }
}

KILN_QINTS_CODERS(KILN_Q6_K, q6_K)

__attribute__((constructor)) static void register_q6_k(void) {
    kiln__dtype_register(KILN_Q6_K, &(kiln_type_traits){.name = "q6_K", .size = sizeof(kiln_block_q6_K),
                                                        .blck = KILN_QK_K, .row_blck = KILN_QK_K, .get = get_q6_K,
                                                        .to_f32 = to_f32_q6_K, .from_f32 = kiln__quantize_q6_K_ref,
                                                        .dot_type = KILN_Q8_K});
}
