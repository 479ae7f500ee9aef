/* q2_k_q3_k.c — Q2_K and Q3_K, ggml's 2- and 3-bit super-blocks of 256
 * (GGUF types 10, 11; layouts in quant.h), quantized as ggml's
 * quantize_row_q2_K_ref / _q3_K_ref (byte for byte: the same searches and
 * f32 operations), decoded through their unpack (qints.c). Q2_K: 16
 * sub-blocks of 16, each x = d sc q - dmin m with sc, m 4-bit and q in
 * [0, 3]; Q3_K: 16 sub-blocks of 16, x = d (sc - 32) q with sc 6-bit and
 * q in [-4, 3]. The dtypes' rows are registered here, at load; their
 * products take Q8_K activations. */
#include "k_quants.h"

#include <math.h>

/* codes L[256] (2 bits each) into 64 bytes: byte l of half h holds
 * elements 128 h + l, + 32, + 64, + 96 in bits 0-1, 2-3, 4-5, 6-7 */
static void pack2(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *c = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(c[0] | c[32] << 2 | c[64] << 4 | c[96] << 6);
        }
}

void kiln__quantize_q2_K_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q2_K *y = blocks;
    const float q4scale = 15.0f;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        uint8_t L[KILN_QK_K];
        float w[KILN_QK_K], mins[16], scales[16], max_scale = 0.0f, max_min = 0.0f;
        for (int e = 0; e < KILN_QK_K; e++) w[e] = fabsf(x[e]);
        for (int h = 0; h < 16; h += KILN_KL)
            kiln__make_qkx2_quants_lanes(16, 3, x + 16 * h, w + 16 * h, L + 16 * h, scales + h, mins + h, -0.5f, 0.1f,
                                         15, true);
        for (int j = 0; j < 16; j++) {
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        for (int j = 0; j < 16; j++) y[b].scales[j] = 0;
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++) y[b].scales[j] = (uint8_t)kiln__nearest_int(iscale * scales[j]);
        }
        y[b].d = kiln__f32_to_f16(max_scale > 0 ? max_scale / q4scale : 0.0f);
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++) y[b].scales[j] |= (uint8_t)(kiln__nearest_int(iscale * mins[j]) << 4);
        }
        y[b].dmin = kiln__f32_to_f16(max_min > 0 ? max_min / q4scale : 0.0f);
        /* the codes again, for the scales as stored */
        for (int j = 0; j < 16; j++) {
            const float d = kiln__f16_to_f32(y[b].d) * (y[b].scales[j] & 0x0f);
            if (!d) continue;
            const float dm = kiln__f16_to_f32(y[b].dmin) * (y[b].scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                const int q = kiln__nearest_int((x[16 * j + l] + dm) / d);
                L[16 * j + l] = (uint8_t)(q < 0 ? 0 : q > 3 ? 3 : q);
            }
        }
        pack2(L, y[b].qs);
    }
}

void kiln__quantize_q3_K_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q3_K *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        int8_t L[KILN_QK_K];
        float scales[16], max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < 16; j++) {
            scales[j] = kiln__make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) amax = fabsf(scales[j]), max_scale = scales[j];
        }
        memset(y[b].scales, 0, sizeof y[b].scales);
        if (max_scale) {
            /* 6-bit scales: the low nibbles in bytes 0-7 (scales 8-15 in
             * the high ones), the top two bits in bytes 8-11 */
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                int8_t l = (int8_t)kiln__nearest_int(iscale * scales[j]);
                l = (int8_t)((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
                if (j < 8) y[b].scales[j] = (uint8_t)(l & 0x0f);
                else y[b].scales[j - 8] |= (uint8_t)((l & 0x0f) << 4);
                y[b].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[b].d = kiln__f32_to_f16(1 / iscale);
        } else
            y[b].d = kiln__f32_to_f16(0.0f);
        for (int j = 0; j < 16; j++) {
            const int lo = j < 8 ? y[b].scales[j] & 0x0f : y[b].scales[j - 8] >> 4;
            const int sc = (lo | ((y[b].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
            const float d = kiln__f16_to_f32(y[b].d) * sc;
            if (!d) continue;
            for (int l = 0; l < 16; l++) {
                const int q = kiln__nearest_int(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)((q < -4 ? -4 : q > 3 ? 3 : q) + 4);
            }
        }
        /* the third bit of element e in bit e / 32 of hmask[e % 32] */
        uint8_t lo[KILN_QK_K];
        memset(y[b].hmask, 0, sizeof y[b].hmask);
        for (int e = 0; e < KILN_QK_K; e++) {
            if (L[e] > 3) y[b].hmask[e % 32] |= (uint8_t)(1 << (e / 32));
            lo[e] = (uint8_t)(L[e] > 3 ? L[e] - 4 : L[e]);
        }
        pack2(lo, y[b].qs);
    }
}

KILN_QINTS_CODERS(KILN_Q2_K, q2_K)
KILN_QINTS_CODERS(KILN_Q3_K, q3_K)

__attribute__((constructor)) static void register_q2_k_q3_k(void) {
#define ROW(T, t)                                                                                            \
    kiln__dtype_register(T, &(kiln_type_traits){.name = #t, .size = sizeof(kiln_block_##t), .blck = KILN_QK_K, \
                                                .row_blck = KILN_QK_K, .get = get_##t, .to_f32 = to_f32_##t,   \
                                                .from_f32 = kiln__quantize_##t##_ref, .dot_type = KILN_Q8_K})
    ROW(KILN_Q2_K, q2_K);
    ROW(KILN_Q3_K, q3_K);
#undef ROW
}
