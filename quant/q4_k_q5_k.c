/* q4_k_q5_k.c — Q4_K and Q5_K, ggml's 4- and 5-bit super-blocks of 256
 * (GGUF types 12, 13; layouts in quant.h), quantized as ggml's
 * quantize_row_q4_K_ref / _q5_K_ref (byte for byte: the same searches and
 * f32 operations), decoded through their unpack (qints.c): 8 sub-blocks
 * of 32, x = d sc q - dmin m with 6-bit sc and m. The dtypes' rows are
 * registered here, at load; their products take Q8_K activations. */
#include "k_quants.h"

#include <math.h>

/* One super-block's codes L[256] in [0, 2^bits - 1] with its d, dmin and
 * packed scales, as both references make them. */
static void scales_and_codes(const float *x, int bits, uint16_t *d16, uint16_t *dmin16, uint8_t *s, uint8_t *L) {
    const int nmax = (1 << bits) - 1;
    float w[256], mins[8], scales[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[32 * j + l] = av_x + fabsf(x[32 * j + l]);
    }
    for (int h = 0; h < 8; h += KILN_KL)
        if (bits == 4)
            kiln__make_qkx2_quants_lanes(32, nmax, x + 32 * h, w + 32 * h, L + 32 * h, scales + h, mins + h, -1.0f,
                                         0.1f, 20, false);
        else
            kiln__make_qkx2_quants_lanes(32, nmax, x + 32 * h, w + 32 * h, L + 32 * h, scales + h, mins + h, -0.5f,
                                         0.1f, 15, false);
    for (int j = 0; j < 8; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    /* 6-bit scales and mins: 0-3 whole in bytes 0-3 / 4-7, 4-7 as
     * nibbles of bytes 8-11 with their top two bits in the top of 0-7 */
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)kiln__nearest_int(inv_scale * scales[j]), lm = (uint8_t)kiln__nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0x0f) | (lm & 0x0f) << 4);
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = kiln__f32_to_f16(max_scale / 63.0f);
    *dmin16 = kiln__f32_to_f16(max_min / 63.0f);
    /* the codes again, for the scales as stored */
    for (int j = 0; j < 8; j++) {
        int sc, m;
        kiln__scale_min_k4(j, s, &sc, &m);
        const float d = kiln__f16_to_f32(*d16) * sc;
        if (!d) continue;
        const float dm = kiln__f16_to_f32(*dmin16) * m;
        for (int l = 0; l < 32; l++) {
            const int q = kiln__nearest_int((x[32 * j + l] + dm) / d);
            L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
        }
    }
}

/* four runs of 64: the low nibbles of 32 bytes, then the high ones */
static void pack4(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) qs[32 * j + l] = (uint8_t)((L[64 * j + l] & 0x0f) | (L[64 * j + l + 32] & 0x0f) << 4);
}

void kiln__quantize_q4_K_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q4_K *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        uint8_t L[KILN_QK_K];
        scales_and_codes(x, 4, &y[b].d, &y[b].dmin, y[b].scales, L);
        pack4(L, y[b].qs);
    }
}

void kiln__quantize_q5_K_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_q5_K *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        uint8_t L[KILN_QK_K];
        scales_and_codes(x, 5, &y[b].d, &y[b].dmin, y[b].scales, L);
        pack4(L, y[b].qs);
        /* the fifth bit of element e in bit e / 32 of qh[e % 32] */
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int e = 0; e < KILN_QK_K; e++) y[b].qh[e % 32] |= (uint8_t)((L[e] >> 4) << (e / 32));
    }
}

KILN_QINTS_CODERS(KILN_Q4_K, q4_K)
KILN_QINTS_CODERS(KILN_Q5_K, q5_K)

__attribute__((constructor)) static void register_q4_k_q5_k(void) {
#define ROW(T, t)                                                                                            \
    kiln__dtype_register(T, &(kiln_type_traits){.name = #t, .size = sizeof(kiln_block_##t), .blck = KILN_QK_K, \
                                                .row_blck = KILN_QK_K, .get = get_##t, .to_f32 = to_f32_##t,   \
                                                .from_f32 = kiln__quantize_##t##_ref, .dot_type = KILN_Q8_K})
    ROW(KILN_Q4_K, q4_K);
    ROW(KILN_Q5_K, q5_K);
#undef ROW
}
